'use strict';
// Composed checks (all or nothing over up to 8 limits) and the client headers the library
// renders for decisions.

const { inspect } = require('node:util');

const native = require('./native');
const { Decision, readDecisionAt, writeDecision } = require('./decision');
const { failure } = require('./errors');
const { waitFor } = require('./waiting');
const { Limit } = require('./limit');

const COMPOSED_SIZE = native.composedSize;
const COMPOSED_DECISIONS = native.composedDecisionsOffset;

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

// The addon writes each composed outcome (the C `shmlimit_composed`) into this one buffer, read
// at once into a Composed; a refund writes its decisions back into it. Allocating a buffer per
// call cost more than the composed decision itself.
const scratch = new Uint8Array(COMPOSED_SIZE);
const scratchWords = new Uint32Array(scratch.buffer, scratch.byteOffset, COMPOSED_SIZE >> 2);
const DECISIONS_AT = COMPOSED_DECISIONS >> 2;

/** The outcome of a composed check. */
class Composed {
  // Read from `bytes` / `words`, views of a C `shmlimit_composed` (the scratch buffer of
  // tryAcquireAll, or the addon's composed buffer of a prepared composition).
  constructor(limits, costs, keys, bytes = scratch, words = scratchWords) {
    /** Every limit admitted. */
    this.allowed = bytes[0] === 1;
    /** Index of the first limit that denied; -1 when allowed. */
    this.deniedBy = words[1] | 0;
    const retryNs = words[4] + words[5] * 4294967296;
    /** Milliseconds until the whole request could pass. */
    this.retryAfterMs = retryNs / 1e6;
    this.retryAfterNs = retryNs;
    /** Each limit's decision: its grant when allowed; the denial and peeks after it. */
    this.decisions = new Array(limits.length);
    for (let i = 0; i < limits.length; i++) {
      this.decisions[i] = readDecisionAt(bytes, words, DECISIONS_AT + 16 * i);
    }
    this.limits = limits;
    // What a refund passes again. (Plain fields, left out of `inspect`: defining them
    // non-enumerable cost about as much as the composed decision.)
    this._costs = costs;
    this._keys = keys;
  }

  /** Give every grant back (the work was not done). */
  refund() {
    // The outcome as the library wrote it, rebuilt from the decisions (each keeps its grant).
    scratch.fill(0);
    scratch[0] = this.allowed ? 1 : 0;
    scratchWords[2] = this.decisions.length;
    for (let i = 0; i < this.decisions.length; i++) {
      writeDecision(this.decisions[i], scratch, scratchWords, DECISIONS_AT + 16 * i);
    }
    const st = native.refundAll(this.limits.map((l) => l._h), this._costs, scratch, this._keys);
    if (st !== 0) throw failure(st, 'refundAll');
  }

  [inspect.custom](depth, options, insp) {
    const { _costs, _keys, ...shown } = this;
    return `Composed ${insp(shown, options)}`;
  }
}

/** All or nothing over up to 8 limits: `[[limit, cost], [keyedLimit, cost, key], ...]` (or
 *  limits, cost 1), decided by the library in one composed check: when one denies, the grants
 *  already taken are refunded there. */
function tryAcquireAll(checks) {
  const { limits, costs, keys } = checksOf(checks);
  const handles = new Array(limits.length);
  for (let i = 0; i < limits.length; i++) handles[i] = limits[i]._h;
  const st = native.acquireAll(handles, costs, scratch, keys);
  if (st !== 0) throw failure(st, 'tryAcquireAll');
  return new Composed(limits, costs, keys);
}

/** Wait on timers until every check admits at once (or the timeout passes). */
function acquireAll(checks, opts = {}) {
  return waitFor(() => tryAcquireAll(checks), opts, 'acquireAll');
}

// How long a limit's rendered RateLimit-Policy item is reused: a retune by any process shows
// in the headers within this time.
const POLICY_TTL_MS = 1000;
const WRONG_KIND = 119;

/**
 * `limit`'s RateLimit-Policy item, `"name";q=QUOTA;w=WINDOW_SECONDS` from the library's policy
 * (its live parameters), read again at most once every POLICY_TTL_MS; null for a limit without
 * a rate policy (a concurrency limit). Limit names need no escaping (letters, digits, `_-.:/`).
 */
function policyItem(limit, nowMs) {
  if (nowMs - limit._policyAt >= POLICY_TTL_MS) {
    const p = native.policy(limit._h);
    if (typeof p === 'number') {
      if (p !== WRONG_KIND) throw failure(p, `rateLimitHeaders: policy of '${limit.name}'`);
      limit._policyItem = null;
    } else {
      limit._policyItem = `"${limit.name}";q=${p[0]};w=${p[1]}`;
    }
    limit._policyAt = nowMs;
  }
  return limit._policyItem;
}

/** `ns` in whole seconds, rounded up, exactly for every integer up to 2^53. */
function ceilSecs(ns) {
  let q = Math.floor(ns / 1e9);
  if (q * 1e9 > ns) q -= 1;
  return q * 1e9 < ns ? q + 1 : q;
}

/** The `RateLimit` and `RateLimit-Policy` items of an adaptive concurrency limit (or of one
 *  key of a keyed one) from its status `s`: `"name";r=LEFT` and
 *  `"name";q=PERMITS;qu="concurrent-requests"`, as the library renders them. */
function adaptiveItems(name, s) {
  return [`"${name}";r=${Math.max(s.permits - s.inFlight, 0)}`, `"${name}";q=${s.permits};qu="concurrent-requests"`];
}

/**
 * The response header values for decisions made on limits:
 * `{'RateLimit': ..., 'RateLimit-Policy': ..., 'Retry-After'?: ...}` (empty fields omitted), as
 * the library renders them (`RateLimitHeaders` in Rust, `shmlimit_ratelimit_headers` in C):
 * `"name";r=REMAINING;t=RESET_SECONDS` per limit with a rate policy, `"name";q=QUOTA;w=WINDOW`
 * from its live policy (read again at most once a second), `"name";r=LEFT` and
 * `"name";q=PERMITS;qu="concurrent-requests"` for an adaptive concurrency limit (its current
 * permits and those left, read at each call), and the largest denial's
 * retry-after in whole seconds (at least 1). Rendered here, without a call into the addon per
 * request; test/api.test.js checks it against the library's rendering.
 */
function rateLimitHeaders(pairs) {
  if (!Array.isArray(pairs) || pairs.length === 0 || pairs.length > 8) {
    throw new TypeError('expected 1 to 8 [limit, decision] pairs');
  }
  const now = Date.now();
  let rateLimit = '';
  let policy = '';
  let retry = 0;
  for (let i = 0; i < pairs.length; i++) {
    const [limit, decision] = pairs[i];
    if (!(limit instanceof Limit)) throw new TypeError('each pair starts with a Limit');
    if (!(decision instanceof Decision)) throw new TypeError('expected a Decision returned by this module');
    if (limit._adaptive === undefined) limit._adaptive = limit.createdDefinition().kind === 'adaptiveConcurrency';
    if (limit._adaptive) {
      // What the library renders for an adaptive concurrency limit: its current permits as a
      // quota of concurrent requests, and the permits left, read now.
      const [r, q] = adaptiveItems(limit.name, limit.adaptiveStatus());
      if (rateLimit !== '') {
        rateLimit += ', ';
        policy += ', ';
      }
      rateLimit += r;
      policy += q;
      if (!decision.allowed) retry = Math.max(retry, ceilSecs(decision.retryAfterNs), 1);
      continue;
    }
    const item = policyItem(limit, now);
    if (item !== null) {
      if (rateLimit !== '') {
        rateLimit += ', ';
        policy += ', ';
      }
      rateLimit += `"${limit.name}";r=${decision.remaining};t=${ceilSecs(decision.resetAfterNs)}`;
      policy += item;
    }
    if (!decision.allowed) retry = Math.max(retry, ceilSecs(decision.retryAfterNs), 1);
  }
  const out = {};
  if (rateLimit !== '') out['RateLimit'] = rateLimit;
  if (policy !== '') out['RateLimit-Policy'] = policy;
  if (retry > 0) out['Retry-After'] = String(retry);
  return out;
}

/** The same values rendered by the library itself (`shmlimit_ratelimit_headers`), for the test
 *  that keeps rateLimitHeaders equal to it. */
function libraryRateLimitHeaders(pairs) {
  const bytes = new Uint8Array(64 * pairs.length);
  const words = new Uint32Array(bytes.buffer);
  const handles = pairs.map(([limit, decision], i) => {
    writeDecision(decision, bytes, words, 16 * i);
    return limit._h;
  });
  const h = native.headers(handles, bytes);
  if (typeof h === 'number') throw failure(h, 'rateLimitHeaders');
  const out = {};
  if (h[0]) out['RateLimit'] = h[0];
  if (h[1]) out['RateLimit-Policy'] = h[1];
  if (h[2]) out['Retry-After'] = h[2];
  return out;
}

module.exports = {
  Composed, tryAcquireAll, acquireAll, rateLimitHeaders, libraryRateLimitHeaders, adaptiveItems, policyItem, ceilSecs,
};
