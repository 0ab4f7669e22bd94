'use strict';
// Keyed counters (a limit defined with counters()): the window and the limit come with each
// call, shared by every process attached to the file. The stores for express-rate-limit
// (lib/express-rate-limit.js) and rate-limiter-flexible (lib/rate-limiter-flexible.js) are
// built on this. Windows are milliseconds (fractions allowed), as everywhere in the package.
//
// Arguments are checked before anything is counted: a bad key, amount or window throws the
// package's own error (InvalidKeyError, ZeroCostError, InvalidParameterError,
// CostExceedsCapacityError) and changes nothing.

const native = require('./native');
const { readDecision, u32, TWO32 } = require('./decision');
const { failure, makeError } = require('./errors');
const { Limiter } = require('./limiter');
const { counters: countersDef } = require('./definitions');

const INVALID_PARAMETER = 111;
const COST_EXCEEDS_CAPACITY = 114;
const INVALID_KEY = 118;
/** The largest count of a fixed-window counter (24 bits). */
const MAX_COUNT = 2 ** 24 - 1;
const STRATEGY = { fixed: 0, sliding: 1, moving: 2 };

// The 64-bit word `i` of the addon's output buffer.
function word(i) {
  return u32[2 * i] + u32[2 * i + 1] * TWO32;
}

function checkKey(key, what) {
  if (typeof key !== 'string' && !(key instanceof Uint8Array)) {
    const type = key === null ? 'null' : typeof key;
    throw makeError(INVALID_KEY, `${what}: a key is a string or a Uint8Array (Buffer), not ${type}`);
  }
}

// A count argument (amount, cost, limit, count): an integer; 0 goes to the library (which
// answers ZeroCostError or InvalidParameterError); above 2^53 it cannot be exact.
function amountOf(value, name, what, { zero = true } = {}) {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || (!zero && value === 0)) {
    throw makeError(INVALID_PARAMETER, `${what}: ${name} must be a ${zero ? 'non-negative' : 'positive'} integer, not ${String(value).slice(0, 40)}`);
  }
  if (value > Number.MAX_SAFE_INTEGER) {
    throw makeError(COST_EXCEEDS_CAPACITY, `${what}: ${name} of ${value} is above any counter's capacity (${MAX_COUNT})`);
  }
  return value;
}

// A window in ms as ns; the library checks its range (1 ms to 2^55 ns).
function windowNs(ms, what) {
  if (typeof ms !== 'number' || !(ms >= 0) || !Number.isFinite(ms)) {
    throw makeError(INVALID_PARAMETER, `${what}: a window is a positive number of milliseconds (1 ms to about 417 days), not ${String(ms).slice(0, 40)}`);
  }
  const ns = Math.round(ms * 1e6);
  if (ns > 2 ** 55) {
    throw makeError(INVALID_PARAMETER, `${what}: a window of ${ms} ms is beyond the file's range (1 ms to 2^55 ns, about 417 days)`);
  }
  return ns;
}

/** The counters limit `limit` (a Limit of a limit defined with counters()). */
class Counters {
  constructor(limit) {
    if (!limit || typeof limit._h !== 'object') {
      throw new TypeError('new Counters(limit): expected a Limit, from limiter.limit(name)');
    }
    const spec = limit.createdDefinition();
    if (spec.kind !== 'counters') {
      throw makeError(119, `new Counters: limit '${limit.name}' is a ${spec.kind} limit, not counters`);
    }
    this._h = limit._h;
    /** The limit's name. */
    this.name = limit.name;
    /** The largest moving-window limit the file holds (its log entries per key). */
    this.maxMovingLimit = spec.movingWindow;
    /** Key slots of the file. */
    this.keys = spec.keyed.capacity;
  }

  /**
   * The counters limit `name` (default 'counters') of the file at `path`. Given none of `keys`
   * (default 16384), `movingWindow` (default 128), `onFull` (default 'deny') and `mode`
   * (default 0o600), an existing file is attached as it is, and a missing one created with the
   * defaults; given any, the file is created with them or must have been
   * (DefinitionConflictError otherwise), unless `onConflict: 'adopt'` (default 'refuse', as
   * `Limiter.createOrOpen`'s): then the file is replaced atomically by one with them.
   * `defaults` replaces the defaults (the stores create files without moving windows).
   */
  static open(path, { name = 'counters', keys, movingWindow, onFull, mode, onConflict } = {}, defaults = {}) {
    const fs = require('node:fs');
    if (onConflict !== undefined && onConflict !== 'refuse' && onConflict !== 'adopt') {
      throw new RangeError(`onConflict must be 'refuse' or 'adopt', not ${String(onConflict).slice(0, 80)}`);
    }
    let limiter;
    // onConflict alone is no layout: an existing file is attached as it is.
    if (keys === undefined && movingWindow === undefined && onFull === undefined && mode === undefined && fs.existsSync(path)) {
      limiter = Limiter.open(path);
    } else {
      const d = { keys: 16384, movingWindow: 128, onFull: 'deny', ...defaults };
      const def = countersDef({
        movingWindow: movingWindow === undefined ? d.movingWindow : movingWindow,
        keyed: { capacity: keys === undefined ? d.keys : keys, onFull: onFull || d.onFull },
      });
      const opts = onConflict === undefined ? {} : { onConflict };
      if (mode !== undefined) opts.mode = mode;
      limiter = Limiter.createOrOpen(path, { [name]: def }, opts);
    }
    const c = new Counters(limiter.limit(name));
    c.limiter = limiter;
    return c;
  }

  _check(st, what) {
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
  }

  /** Add `amount` (default 1) to the key's fixed-window counter and return its count: a
   *  window of `windowMs` starts at the first increment after the last one ended. A new key
   *  that finds the table full gets its policy's answer: Infinity (deny), 0 (allow, nothing
   *  counted) or TableFullError. */
  incr(key, windowMs, amount = 1) {
    checkKey(key, 'incr');
    const st = native.countersIncr(this._h, key, windowNs(windowMs, 'incr'), amountOf(amount, 'amount', 'incr'));
    this._check(st, 'incr');
    const n = word(0);
    return n === 2 ** 64 ? Infinity : n;
  }

  /** incr, and the ms until the key's window ends as read right after it (0 when it ended in
   *  between, or the table had no slot): `{count, resetMs}` in one call into the addon. */
  incrWithReset(key, windowMs, amount = 1) {
    const count = this.incr(key, windowMs, amount);
    return { count, resetMs: word(1) / 1e6 };
  }

  /** Take `amount` (default 1) from the key's fixed-window counter and return its count:
   *  never below zero; the window keeps its end. */
  decr(key, amount = 1) {
    checkKey(key, 'decr');
    this._check(native.countersDecr(this._h, key, amountOf(amount, 'amount', 'decr')), 'decr');
    return word(0);
  }

  /** Make the key's fixed-window counter hold `count` in a window of `windowMs` from now,
   *  whatever it held. */
  set(key, windowMs, count) {
    checkKey(key, 'set');
    const st = native.countersSet(this._h, key, windowNs(windowMs, 'set'), amountOf(count, 'count', 'set'));
    this._check(st, 'set');
    const n = word(0);
    return n === 2 ** 64 ? Infinity : n;
  }

  /** The key's fixed-window count and the ms until its window ends (`{count: 0, resetMs: 0}`
   *  when it has none). */
  count(key) {
    checkKey(key, 'count');
    this._check(native.countersCount(this._h, key), 'count');
    return { count: word(0), resetMs: word(1) / 1e6 };
  }

  _acquire(strategy, key, limit, windowMs, cost, what) {
    checkKey(key, what);
    const st = native.countersAcquire(this._h, key, STRATEGY[strategy], amountOf(limit, 'limit', what),
      windowNs(windowMs, what), amountOf(cost, 'cost', what));
    this._check(st, what);
    return readDecision();
  }

  /** Admit `cost` (default 1) of `limit` in the key's fixed window of `windowMs` (started by
   *  its first admission); a denial counts nothing. Returns a Decision. */
  fixed(key, limit, windowMs, cost = 1) {
    return this._acquire('fixed', key, limit, windowMs, cost, 'fixed');
  }

  /** Admit `cost` of `limit` by the key's sliding window counter over windows of `windowMs`
   *  aligned on Unix time (`floor(previous x (W - elapsed) / W) + current + cost <= limit`);
   *  limits up to 65535, windows of at least 2^28 ns (about 268 ms). */
  sliding(key, limit, windowMs, cost = 1) {
    return this._acquire('sliding', key, limit, windowMs, cost, 'sliding');
  }

  /** Admit `cost` of `limit` in the key's moving window of `windowMs`: at most `limit` in
   *  every window, exactly; `limit` at most `maxMovingLimit`. */
  moving(key, limit, windowMs, cost = 1) {
    return this._acquire('moving', key, limit, windowMs, cost, 'moving');
  }

  /** The key's sliding window counter for windows of `windowMs`, as read now. */
  slidingCounts(key, windowMs) {
    checkKey(key, 'slidingCounts');
    this._check(native.countersSliding(this._h, key, windowNs(windowMs, 'slidingCounts')), 'slidingCounts');
    return { previous: word(0), previousWeighsMs: word(1) / 1e6, current: word(2), currentExpiresMs: word(3) / 1e6 };
  }

  /** The key's moving window of `limit` over `windowMs`: the admissions in it and the ms since
   *  the oldest of them. */
  movingCounts(key, limit, windowMs) {
    checkKey(key, 'movingCounts');
    const st = native.countersMoving(this._h, key, amountOf(limit, 'limit', 'movingCounts'), windowNs(windowMs, 'movingCounts'));
    this._check(st, 'movingCounts');
    return { count: word(0), oldestAgeMs: word(1) / 1e6 };
  }

  /** Forget the key in every strategy. */
  clear(key) {
    checkKey(key, 'clear');
    this._check(native.countersClear(this._h, key), 'clear');
  }

  /** Forget every key; returns how many held something. */
  clearAll() {
    this._check(native.countersClearAll(this._h), 'clearAll');
    return word(0);
  }
}

/** Throw the error a call would for a window of `ms`; counts nothing. */
function checkWindowMs(ms, what) {
  const ns = windowNs(ms, what);
  if (ns < 1e6) {
    throw makeError(INVALID_PARAMETER, `${what}: a window of ${ms} ms is shorter than the file's shortest (1 ms)`);
  }
}

/** The unit a fixed window's end is kept in (2^21 ns, rounded up): a window lasts at most this
 *  much longer than asked. */
const WINDOW_UNIT_MS = 2 ** 21 / 1e6;

module.exports = { Counters, MAX_COUNT, MAX_WINDOW_MS: 2 ** 55 / 1e6, WINDOW_UNIT_MS, checkWindowMs };
