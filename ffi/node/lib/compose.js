'use strict';
// Composed checks (all or nothing over up to 8 limits) and the client headers the library
// renders for decisions.

const native = require('./native');
const { Decision, writeDecision, TWO32 } = require('./decision');
const { failure } = require('./errors');
const { waitFor } = require('./waiting');
const { Limit } = require('./limit');

const COMPOSED_SIZE = native.composedSize;
const COMPOSED_DECISIONS = native.composedDecisionsOffset;

function checksOf(checks) {
  if (!Array.isArray(checks) || checks.length === 0) {
    throw new TypeError('checks must be a non-empty array of limits or [limit, cost] pairs');
  }
  const limits = [];
  const costs = [];
  for (const c of checks) {
    const [limit, cost = 1] = Array.isArray(c) ? c : [c, 1];
    if (!(limit instanceof Limit)) throw new TypeError('each check names a Limit');
    limits.push(limit);
    costs.push(cost);
  }
  return { limits, costs };
}

function decisionAt(raw, i) {
  const words = new Uint32Array(raw.buffer, raw.byteOffset + COMPOSED_DECISIONS + 64 * i, 16);
  const bytes = raw.subarray(COMPOSED_DECISIONS + 64 * i, COMPOSED_DECISIONS + 64 * (i + 1));
  let grant = null;
  if (words[6] | words[7] | words[8] | words[9] | words[10] | words[11] | words[12] | words[13]) {
    grant = Array.from(words.subarray(6, 14));
  }
  return new Decision(bytes[0] === 1, bytes[1] === 1, words[2] + words[3] * TWO32,
    words[4] + words[5] * TWO32, words[14] + words[15] * TWO32, grant);
}

/** The outcome of a composed check. */
class Composed {
  constructor(limits, costs, raw) {
    const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    /** Every limit admitted. */
    this.allowed = raw[0] === 1;
    /** Index of the first limit that denied; -1 when allowed. */
    this.deniedBy = dv.getInt32(4, true);
    const retryNs = Number(dv.getBigUint64(16, true));
    /** Milliseconds until the whole request could pass. */
    this.retryAfterMs = retryNs / 1e6;
    this.retryAfterNs = retryNs;
    /** Each limit's decision: its grant when allowed; the denial and peeks after it. */
    this.decisions = limits.map((_, i) => decisionAt(raw, i));
    this.limits = limits;
    Object.defineProperty(this, '_costs', { value: costs });
    Object.defineProperty(this, '_raw', { value: raw });
  }

  /** Give every grant back (the work was not done). */
  refund() {
    const st = native.refundAll(this.limits.map((l) => l._h), this._costs, this._raw);
    if (st !== 0) throw failure(st, 'refundAll');
  }
}

/** All or nothing over up to 8 limits: `[[limit, cost], ...]` (or limits, cost 1). When one
 *  denies, the grants already taken are refunded. */
function tryAcquireAll(checks) {
  const { limits, costs } = checksOf(checks);
  const raw = new Uint8Array(COMPOSED_SIZE);
  const st = native.acquireAll(limits.map((l) => l._h), costs, raw);
  if (st !== 0) throw failure(st, 'tryAcquireAll');
  return new Composed(limits, costs, raw);
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
  const raw = new Uint8Array(64 * pairs.length);
  const words = new Uint32Array(raw.buffer);
  const handles = [];
  for (let i = 0; i < pairs.length; i++) {
    const [limit, decision] = pairs[i];
    if (!(limit instanceof Limit)) throw new TypeError('each pair starts with a Limit');
    handles.push(limit._h);
    writeDecision(decision, raw, words, 16 * i);
  }
  const h = native.headers(handles, raw);
  if (typeof h === 'number') throw failure(h, 'rateLimitHeaders');
  const out = {};
  if (h[0]) out['RateLimit'] = h[0];
  if (h[1]) out['RateLimit-Policy'] = h[1];
  if (h[2]) out['Retry-After'] = h[2];
  return out;
}

/** The library's version. */

module.exports = { Composed, tryAcquireAll, acquireAll, rateLimitHeaders };
