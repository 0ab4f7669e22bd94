'use strict';
// Composed checks (all or nothing over up to 8 limits) and the client headers the library
// renders for decisions.

const native = require('./native');
const { readDecisionAt, writeDecision } = require('./decision');
const { failure } = require('./errors');
const { waitFor } = require('./waiting');
const { Limit } = require('./limit');

const COMPOSED_SIZE = native.composedSize;
const COMPOSED_DECISIONS = native.composedDecisionsOffset;
// Where rateLimitHeaders writes the decisions it hands the addon (read during the call only).
const headerBytes = new Uint8Array(64 * 8);
const headerWords = new Uint32Array(headerBytes.buffer);

function checksOf(checks) {
  if (!Array.isArray(checks) || checks.length === 0) {
    throw new TypeError('checks must be a non-empty array of limits or [limit, cost, key?] entries');
  }
  const limits = [];
  const costs = [];
  let keys;
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i];
    const [limit, cost = 1, key] = Array.isArray(c) ? c : [c, 1];
    if (!(limit instanceof Limit)) throw new TypeError('each check names a Limit');
    limits.push(limit);
    costs.push(cost);
    if (key !== undefined && key !== null) {
      if (keys === undefined) keys = new Array(checks.length);
      keys[i] = key;
    }
  }
  return { limits, costs, keys };
}

/** The outcome of a composed check. */
class Composed {
  constructor(limits, costs, raw, keys) {
    const words = new Uint32Array(raw.buffer, raw.byteOffset, raw.byteLength >> 2);
    /** Every limit admitted. */
    this.allowed = raw[0] === 1;
    /** Index of the first limit that denied; -1 when allowed. */
    this.deniedBy = words[1] | 0;
    const retryNs = words[4] + words[5] * 4294967296;
    /** Milliseconds until the whole request could pass. */
    this.retryAfterMs = retryNs / 1e6;
    this.retryAfterNs = retryNs;
    /** Each limit's decision: its grant when allowed; the denial and peeks after it. */
    this.decisions = new Array(limits.length);
    for (let i = 0; i < limits.length; i++) {
      this.decisions[i] = readDecisionAt(raw, words, (COMPOSED_DECISIONS >> 2) + 16 * i);
    }
    this.limits = limits;
    Object.defineProperty(this, '_costs', { value: costs });
    Object.defineProperty(this, '_raw', { value: raw });
    Object.defineProperty(this, '_keys', { value: keys });
  }

  /** Give every grant back (the work was not done). */
  refund() {
    const st = native.refundAll(this.limits.map((l) => l._h), this._costs, this._raw, this._keys);
    if (st !== 0) throw failure(st, 'refundAll');
  }
}

/** All or nothing over up to 8 limits: `[[limit, cost], [keyedLimit, cost, key], ...]` (or
 *  limits, cost 1), decided by the library in one composed check: when one denies, the grants
 *  already taken are refunded there. */
function tryAcquireAll(checks) {
  const { limits, costs, keys } = checksOf(checks);
  const raw = new Uint8Array(COMPOSED_SIZE);
  const st = native.acquireAll(limits.map((l) => l._h), costs, raw, keys);
  if (st !== 0) throw failure(st, 'tryAcquireAll');
  return new Composed(limits, costs, raw, keys);
}

/** Wait on timers until every check admits at once (or the timeout passes). */
function acquireAll(checks, opts = {}) {
  return waitFor(() => tryAcquireAll(checks), opts, 'acquireAll');
}

/** The response header values for decisions made on limits, rendered by the library:
 *  `{'RateLimit': ..., 'RateLimit-Policy': ..., 'Retry-After'?: ...}` (empty fields omitted). */
function rateLimitHeaders(pairs) {
  if (!Array.isArray(pairs) || pairs.length === 0 || pairs.length > 8) {
    throw new TypeError('expected 1 to 8 [limit, decision] pairs');
  }
  const handles = new Array(pairs.length);
  for (let i = 0; i < pairs.length; i++) {
    const [limit, decision] = pairs[i];
    if (!(limit instanceof Limit)) throw new TypeError('each pair starts with a Limit');
    handles[i] = limit._h;
    writeDecision(decision, headerBytes, headerWords, 16 * i);
  }
  const h = native.headers(handles, headerBytes.subarray(0, 64 * pairs.length));
  if (typeof h === 'number') throw failure(h, 'rateLimitHeaders');
  const out = {};
  if (h[0]) out['RateLimit'] = h[0];
  if (h[1]) out['RateLimit-Policy'] = h[1];
  if (h[2]) out['Retry-After'] = h[2];
  return out;
}

module.exports = { Composed, tryAcquireAll, acquireAll, rateLimitHeaders };
