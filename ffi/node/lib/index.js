'use strict';
// shmlimit for Node.js: the library's C ABI (ffi/include/shmlimit.h) through a Node-API addon.
// Every decision is the library's; this file converts units (milliseconds in, nanoseconds to
// the library), shapes results and maps status codes to Error subclasses.

const path = require('node:path');
const { inspect } = require('node:util');

const { loadAddon } = require('./addon');

const native = loadAddon(path.join(__dirname, '..'));

// ---------------------------------------------------------------------------------------------
// The C decision, read from the addon's 64-byte buffer (layout asserted in src/addon.c).

const buf = native.decision;
const u8 = buf;
const u32 = new Uint32Array(buf.buffer, buf.byteOffset, 16);
const TWO32 = 4294967296;

/** The outcome of one decision. */
class Decision {
  constructor(allowed, shadowDenied, remaining, retryNs, resetNs, grant) {
    /** Admitted (and, except for a peek, the cost consumed). */
    this.allowed = allowed;
    /** Units that could still be admitted right now. */
    this.remaining = remaining;
    /** Milliseconds until the same request could be admitted (0 when allowed). */
    this.retryAfterMs = retryNs / 1e6;
    /** Milliseconds until the limit is whole again (0 for permits, or a whole limit). */
    this.resetMs = resetNs / 1e6;
    /** A shadow (dry-run) limit would have denied: allowed anyway, nothing consumed. */
    this.shadowDenied = shadowDenied;
    this.retryAfterNs = retryNs;
    this.resetAfterNs = resetNs;
    // The grant record (grant[0..1], reserved[0..1] as 32-bit words), for refunds; null when
    // nothing was recorded. (A plain field: defining it non-enumerable would cost more than
    // the decision itself.)
    this._grant = grant;
  }

  [inspect.custom](depth, options, insp) {
    const { _grant, ...shown } = this;
    return `Decision ${insp(shown, options)}`;
  }
}

function readDecision() {
  let grant = null;
  if (u32[6] | u32[7] | u32[8] | u32[9] | u32[10] | u32[11] | u32[12] | u32[13]) {
    grant = [u32[6], u32[7], u32[8], u32[9], u32[10], u32[11], u32[12], u32[13]];
  }
  return new Decision(
    u8[0] === 1,
    u8[1] === 1,
    u32[2] + u32[3] * TWO32,
    u32[4] + u32[5] * TWO32,
    u32[14] + u32[15] * TWO32,
    grant,
  );
}

function putU64(words, i, value) {
  words[i] = value % TWO32;
  words[i + 1] = Math.floor(value / TWO32);
}

// Write a Decision back as the C struct into `words` (a Uint32Array of 16) at word `at`.
function writeDecision(d, bytes, words, at) {
  if (!(d instanceof Decision)) {
    throw new TypeError('expected a Decision returned by this module');
  }
  bytes.fill(0, at * 4, at * 4 + 64);
  bytes[at * 4] = d.allowed ? 1 : 0;
  bytes[at * 4 + 1] = d.shadowDenied ? 1 : 0;
  putU64(words, at + 2, d.remaining);
  putU64(words, at + 4, d.retryAfterNs);
  if (d._grant) {
    for (let i = 0; i < 8; i++) words[at + 6 + i] = d._grant[i];
  }
  putU64(words, at + 14, d.resetAfterNs);
}

// ---------------------------------------------------------------------------------------------
// Errors: one class per status code of the C ABI, each with `code` (the C name) and `status`.

const CLOSED = -1;
const BAD_ARG = -2;
const NOT_HELD = -3;

class ShmlimitError extends Error {
  constructor(message, status, osError) {
    super(message);
    this.name = this.constructor.name;
    /** The C status code (a `shmlimit_status`), or -1 for a closed handle. */
    this.status = status;
    if (osError) {
      /** The OS `errno` of an I/O failure. */
      this.errno = osError;
    }
  }
}
Object.defineProperty(ShmlimitError.prototype, 'code', {
  get() {
    return CODE_NAMES[this.status] || `SHMLIMIT_STATUS_${this.status}`;
  },
});

const CODE_NAMES = {
  [-1]: 'SHMLIMIT_CLOSED',
  1: 'SHMLIMIT_NULL_POINTER',
  2: 'SHMLIMIT_BAD_UTF8',
  3: 'SHMLIMIT_INTERNAL',
  4: 'SHMLIMIT_BAD_LENGTH',
  5: 'SHMLIMIT_MISALIGNED_POINTER',
  6: 'SHMLIMIT_OUT_OF_RANGE',
  100: 'SHMLIMIT_IO',
  101: 'SHMLIMIT_SYMLINK',
  102: 'SHMLIMIT_NOT_REGULAR_FILE',
  103: 'SHMLIMIT_PERMISSION',
  104: 'SHMLIMIT_FOREIGN',
  105: 'SHMLIMIT_VERSION',
  106: 'SHMLIMIT_SIZE',
  107: 'SHMLIMIT_CORRUPT',
  108: 'SHMLIMIT_NOT_INITIALIZED',
  109: 'SHMLIMIT_CLOCK_MISMATCH',
  110: 'SHMLIMIT_DEFINITION_CONFLICT',
  111: 'SHMLIMIT_INVALID_PARAMETER',
  112: 'SHMLIMIT_UNKNOWN_LIMIT',
  113: 'SHMLIMIT_ZERO_COST',
  114: 'SHMLIMIT_COST_EXCEEDS_CAPACITY',
  115: 'SHMLIMIT_CORRUPT_STATE',
  116: 'SHMLIMIT_CLOCK_OUT_OF_RANGE',
  117: 'SHMLIMIT_TABLE_FULL',
  118: 'SHMLIMIT_INVALID_KEY',
  119: 'SHMLIMIT_WRONG_KIND',
  PERMIT_UNAVAILABLE: 'SHMLIMIT_PERMIT_UNAVAILABLE',
};

const errors = { ShmlimitError };
const ERROR_CLASSES = {};
const CLASS_NAMES = {
  [-1]: 'ClosedError',
  1: 'NullPointerError',
  2: 'BadUtf8Error',
  3: 'InternalError',
  4: 'BadLengthError',
  5: 'MisalignedPointerError',
  6: 'OutOfRangeError',
  100: 'IoError',
  101: 'SymlinkError',
  102: 'NotRegularFileError',
  103: 'PermissionDeniedError',
  104: 'ForeignFileError',
  105: 'VersionError',
  106: 'SizeError',
  107: 'CorruptFileError',
  108: 'NotInitializedError',
  109: 'ClockMismatchError',
  110: 'DefinitionConflictError',
  111: 'InvalidParameterError',
  112: 'UnknownLimitError',
  113: 'ZeroCostError',
  114: 'CostExceedsCapacityError',
  115: 'CorruptStateError',
  116: 'ClockOutOfRangeError',
  117: 'TableFullError',
  118: 'InvalidKeyError',
  119: 'WrongKindError',
};
for (const [status, name] of Object.entries(CLASS_NAMES)) {
  // A named class per code, so that `instanceof` and `err.name` both work.
  const cls = { [name]: class extends ShmlimitError {} }[name];
  ERROR_CLASSES[status] = cls;
  errors[name] = cls;
}

/** All permits stayed held for the whole timeout (`withPermit`). */
class PermitUnavailableError extends ShmlimitError {
  constructor(message) {
    super(message, 'PERMIT_UNAVAILABLE');
  }
}
errors.PermitUnavailableError = PermitUnavailableError;

function makeError(status, message, osError) {
  const cls = ERROR_CLASSES[status] || ShmlimitError;
  return new cls(message || native.strerror(status), status, osError);
}

// The error of a failed call: its status, and the library's message for this thread.
function failure(status, what) {
  if (status === CLOSED) {
    return makeError(CLOSED, `${what}: the handle is closed`);
  }
  if (status === BAD_ARG) {
    return new TypeError(`${what}: invalid argument (costs, counts and durations are non-negative integers; keys are strings or Uint8Arrays)`);
  }
  const [message, osError] = native.lastError();
  return makeError(status, message || `${what}: ${native.strerror(status)}`, status === 100 ? osError : 0);
}

// ---------------------------------------------------------------------------------------------
// Definitions. Durations are milliseconds (fractions allowed), stored as nanoseconds.

const KIND = { tokenBucket: 1, fixedWindow: 2, slidingWindow: 3, slidingLog: 4, concurrency: 5 };
const KIND_NAME = Object.fromEntries(Object.entries(KIND).map(([k, v]) => [v, k]));
const ON_FULL = { deny: 0, allow: 1, error: 2 };
const ON_FULL_NAME = ['deny', 'allow', 'error'];
const ALIGNED = { wall: 0, monotonic: 1 };
const FLAG_SHADOW = 1;
const FLAG_NEAR_LIMIT = 2;
const DEFAULT_NEAR_LIMIT = 6554;

function count(value, what) {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${what} must be a positive integer, not ${String(value)}`);
  }
  return value;
}

function msToNs(ms, what, { zero = false } = {}) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || (!zero && ms === 0)) {
    throw new RangeError(`${what} must be a ${zero ? 'non-negative' : 'positive'} number of milliseconds, not ${String(ms)}`);
  }
  const ns = Math.round(ms * 1e6);
  if (!Number.isSafeInteger(ns) || (!zero && ns === 0)) {
    throw new RangeError(`${what} of ${ms} ms is out of range (1 ns to 2^53 ns)`);
  }
  return ns;
}

function options(spec, o) {
  if (o.keyed !== undefined && o.keyed !== null && o.keyed !== false) {
    const k = typeof o.keyed === 'number' ? { capacity: o.keyed } : o.keyed;
    spec.keyed = { capacity: count(k.capacity, 'keyed.capacity'), onFull: k.onFull || 'deny' };
    if (!(spec.keyed.onFull in ON_FULL)) {
      throw new RangeError(`keyed.onFull must be 'deny', 'allow' or 'error', not ${String(k.onFull)}`);
    }
  }
  if (o.shadow) spec.shadow = true;
  if (o.nearLimit !== undefined) {
    if (typeof o.nearLimit !== 'number' || !(o.nearLimit >= 0 && o.nearLimit <= 1)) {
      throw new RangeError(`nearLimit must be a fraction from 0 to 1, not ${String(o.nearLimit)}`);
    }
    spec.nearLimit = o.nearLimit;
  }
  if (o.split !== undefined) spec.split = count(o.split, 'split');
  if (o.fleet !== undefined) {
    spec.fleet = {
      rate: count(o.fleet.rate, 'fleet.rate'),
      per: o.fleet.per === undefined ? 1000 : o.fleet.per,
      weight: o.fleet.weight === undefined ? 1 : count(o.fleet.weight, 'fleet.weight'),
    };
    msToNs(spec.fleet.per, 'fleet.per');
  }
  return spec;
}

/** A token bucket: `burst` tokens (default `rate`), refilled at `rate` per `per` ms (default
 *  1000). At most `floor(burst + rate * T / per)` admissions in any interval of `T` ms. */
function tokenBucket({ rate, per = 1000, burst, ...o } = {}) {
  count(rate, 'rate');
  msToNs(per, 'per');
  return options({ kind: 'tokenBucket', rate, per, burst: burst === undefined ? rate : count(burst, 'burst') }, o);
}

function windowed(kind, { limit, window, aligned = 'wall', ...o } = {}) {
  count(limit, 'limit');
  msToNs(window, 'window');
  if (!(aligned in ALIGNED)) {
    throw new RangeError(`aligned must be 'wall' or 'monotonic', not ${String(aligned)}`);
  }
  return options({ kind, limit, window, aligned }, o);
}

/** At most `limit` per aligned window of `window` ms. */
const fixedWindow = (o) => windowed('fixedWindow', o);
/** The weighted sliding-window counter: about `limit` per `window` ms. */
const slidingWindow = (o) => windowed('slidingWindow', o);

/** The exact sliding log: at most `limit` admissions in every interval of `window` ms. */
function slidingLog({ limit, window, ...o } = {}) {
  count(limit, 'limit');
  msToNs(window, 'window');
  return options({ kind: 'slidingLog', limit, window }, o);
}

/** At most `permits` held at once across every process (per key, if keyed); a permit held
 *  longer than `lease` ms (default: no lease) becomes reclaimable, as do a dead process's. */
function concurrency({ permits, lease, ...o } = {}) {
  count(permits, 'permits');
  if (lease !== undefined && lease !== null) msToNs(lease, 'lease');
  return options({ kind: 'concurrency', permits, lease: lease === undefined ? null : lease }, o);
}

function rawDef(name, spec) {
  if (typeof spec !== 'object' || spec === null || !(spec.kind in KIND)) {
    throw new TypeError(`limit '${name}': expected a definition from tokenBucket(), fixedWindow(), slidingWindow(), slidingLog() or concurrency()`);
  }
  const d = {
    name, kind: KIND[spec.kind], alignment: 0, limit: 0, periodNs: 0, rate: 0, keyCapacity: 0,
    onFull: 0, flags: 0, nearLimit: 0, split: 0, fleetWeight: 0, fleetEmissionNs: 0,
  };
  switch (spec.kind) {
    case 'tokenBucket':
      d.limit = spec.burst; d.periodNs = msToNs(spec.per, 'per'); d.rate = spec.rate;
      break;
    case 'fixedWindow':
    case 'slidingWindow':
      d.limit = spec.limit; d.periodNs = msToNs(spec.window, 'window'); d.alignment = ALIGNED[spec.aligned || 'wall'];
      break;
    case 'slidingLog':
      d.limit = spec.limit; d.periodNs = msToNs(spec.window, 'window');
      break;
    default:
      d.limit = spec.permits; d.periodNs = spec.lease ? msToNs(spec.lease, 'lease') : 0;
  }
  if (spec.keyed) {
    d.keyCapacity = spec.keyed.capacity;
    d.onFull = ON_FULL[spec.keyed.onFull || 'deny'];
  }
  if (spec.shadow) d.flags |= FLAG_SHADOW;
  if (spec.nearLimit !== undefined) {
    d.flags |= FLAG_NEAR_LIMIT;
    d.nearLimit = Math.min(65535, Math.round(spec.nearLimit * 65536));
  }
  if (spec.split) d.split = spec.split;
  if (spec.fleet) {
    d.fleetWeight = spec.fleet.weight;
    d.fleetEmissionNs = Math.ceil(msToNs(spec.fleet.per, 'fleet.per') / spec.fleet.rate);
  }
  return d;
}

/** The usual periods a stored refill interval is read back in, as the Python package does. */
const READBACK_PERIODS_NS = [1e9, 60e9, 3600e9, 86400e9, 1e6, 1e3];

/**
 * `{rate, periodNs}` for a stored refill interval of `emissionNs`: the first usual period whose
 * rate stores the same interval (the library rounds `period / rate` up), else one token per
 * interval. The same normalisation as the Python package's (`_bucket_form`), so a definition
 * reads back as it was written whenever its period is one of these.
 */
function bucketForm(emissionNs) {
  for (const period of READBACK_PERIODS_NS) {
    const rate = Math.round(period / emissionNs);
    if (rate >= 1 && Math.ceil(period / rate) === emissionNs) return { rate, periodNs: period };
  }
  return { rate: 1, periodNs: emissionNs };
}

function specOf(d) {
  const kind = KIND_NAME[d.kind];
  let spec;
  switch (kind) {
    case 'tokenBucket': {
      // The library reports rate = 1 per the stored interval.
      const { rate, periodNs } = bucketForm(Math.ceil(d.periodNs / Math.max(d.rate, 1)));
      spec = { kind, rate, per: periodNs / 1e6, burst: d.limit };
      break;
    }
    case 'fixedWindow':
    case 'slidingWindow':
      spec = { kind, limit: d.limit, window: d.periodNs / 1e6, aligned: d.alignment === 1 ? 'monotonic' : 'wall' };
      break;
    case 'slidingLog':
      spec = { kind, limit: d.limit, window: d.periodNs / 1e6 };
      break;
    case 'concurrency':
      spec = { kind, permits: d.limit, lease: d.periodNs ? d.periodNs / 1e6 : null };
      break;
    default:
      spec = { kind: `unknown(${d.kind})`, limit: d.limit, periodNs: d.periodNs };
  }
  if (d.keyCapacity) spec.keyed = { capacity: d.keyCapacity, onFull: ON_FULL_NAME[d.onFull] || 'deny' };
  if (d.flags & FLAG_SHADOW) spec.shadow = true;
  // The library reports the near-limit fraction on every definition; only a non-default one is shown.
  if ((d.flags & FLAG_NEAR_LIMIT) && d.nearLimit !== DEFAULT_NEAR_LIMIT) spec.nearLimit = d.nearLimit / 65536;
  if (d.split > 1) spec.split = d.split;
  if (d.fleetWeight) spec.fleet = { rate: 1, per: d.fleetEmissionNs / 1e6, weight: d.fleetWeight };
  return spec;
}

// ---------------------------------------------------------------------------------------------
// Waiting without blocking the event loop.

// CLOCK_MONOTONIC in milliseconds, the library's timeline. (performance.now() was seen to
// disagree with it by several ms over a 50 ms wait on Node 20.)
function monotonicMs() {
  return Number(process.hrtime.bigint()) / 1e6;
}

function deadlineOf(opts, what) {
  const timeout = opts && opts.timeout;
  if (timeout === undefined || timeout === null || timeout === Infinity) return Infinity;
  if (typeof timeout !== 'number' || !(timeout >= 0)) {
    throw new RangeError(`${what}: timeout must be a non-negative number of milliseconds or Infinity`);
  }
  return monotonicMs() + timeout;
}

function abortError(signal) {
  return signal.reason !== undefined ? signal.reason : new DOMException('This operation was aborted', 'AbortError');
}

// Sleep `ms` on a timer (never blocking the loop); rejects when `signal` aborts.
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) {
      reject(abortError(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
  });
}

// Retry `decide` after each denial's exact retry-after, until admitted or past the deadline
// (then the denial is the result: a denial is not an error).
async function waitFor(decide, opts, what) {
  const deadline = deadlineOf(opts, what);
  const signal = opts && opts.signal;
  for (;;) {
    if (signal && signal.aborted) throw abortError(signal);
    const d = decide();
    if (d.allowed) return d;
    const left = deadline - monotonicMs();
    if (d.retryAfterMs > left) return d;
    await sleep(Math.max(1, Math.ceil(d.retryAfterMs)), signal);
  }
}

// ---------------------------------------------------------------------------------------------
// Permits.

/** A held permit of a concurrency limit. Release it once; a process that dies holding it loses
 *  it to the next acquirer. */
class Permit {
  constructor(limit, id, key) {
    /** The permit's id (a BigInt; `1n` for a shadow permit that holds nothing). */
    this.id = id;
    this.limit = limit;
    this.key = key;
    this.released = false;
  }

  /** Give the permit back; false when it was no longer held (already released, taken over
   *  after its lease, reset, or a shadow permit). */
  release() {
    if (this.released) return false;
    this.released = true;
    const st = native.permitRelease(this.limit._h, this.id);
    if (st === NOT_HELD) return false;
    if (st !== 0) throw failure(st, `release of permit ${this.id} on '${this.limit.name}'`);
    return true;
  }
}
// `using permit = await limit.acquirePermit()` where explicit resource management exists.
if (typeof Symbol.dispose === 'symbol') {
  Permit.prototype[Symbol.dispose] = function dispose() {
    this.release();
  };
}

function waitPermit(limit, key, opts, what) {
  const timeout = opts && opts.timeout;
  let timeoutNs = -1;
  if (timeout !== undefined && timeout !== null && timeout !== Infinity) {
    if (typeof timeout !== 'number' || !(timeout >= 0)) {
      return Promise.reject(new RangeError(`${what}: timeout must be a non-negative number of milliseconds or Infinity`));
    }
    timeoutNs = Math.round(timeout * 1e6);
  }
  const signal = opts && opts.signal;
  if (signal && signal.aborted) return Promise.reject(abortError(signal));
  return new Promise((resolve, reject) => {
    let onAbort = null;
    const id = native.permitWait(limit._h, key, timeoutNs, (status, permit, message, osError) => {
      if (signal) signal.removeEventListener('abort', onAbort);
      if (status === 0 && signal && signal.aborted) {
        // Aborted while the permit was being taken: give it back.
        if (permit !== 0n) new Permit(limit, permit, key).release();
        reject(abortError(signal));
      } else if (status === 0) {
        resolve(permit === 0n ? null : new Permit(limit, permit, key));
      } else if (status === CLOSED && signal && signal.aborted) {
        reject(abortError(signal));
      } else if (status === CLOSED) {
        reject(makeError(CLOSED, `${what}: the wait was cancelled (the environment is shutting down)`));
      } else {
        reject(makeError(status, message, status === 100 ? osError : 0));
      }
    });
    if (typeof id === 'number' && id <= 0) {
      reject(failure(id, what));
      return;
    }
    if (signal) {
      onAbort = () => native.cancelWait(id);
      signal.addEventListener('abort', onAbort, { once: true });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Reservations.

/** Tokens of a token bucket booked in turn across processes, to be used at `readyAtNs`. */
class Reservation {
  constructor(limit, handle, delayNs, readyAtNs) {
    this.limit = limit;
    /** How long after booking the caller may proceed, in ms. */
    this.delayMs = Number(delayNs) / 1e6;
    /** When the caller may proceed, on CLOCK_MONOTONIC (process.hrtime.bigint()). */
    this.readyAtNs = readyAtNs;
    Object.defineProperty(this, '_r', { value: handle });
  }

  /** Sleep on timers until the booking's time, then resolve its grant (a Decision). */
  async wait(opts = {}) {
    const signal = opts.signal;
    for (;;) {
      const left = this.readyAtNs - process.hrtime.bigint();
      if (left <= 0n) break;
      await sleep(Math.max(1, Math.ceil(Number(left) / 1e6)), signal);
    }
    const st = native.reservationWait(this._r);
    if (st !== 0) throw failure(st, `reservation on '${this.limit.name}'`);
    return readDecision();
  }

  /** Give the tokens back if nothing was booked after them; false when they stay used. */
  cancel() {
    const st = native.reservationCancel(this._r);
    if (st === NOT_HELD) return false;
    if (st !== 0) throw failure(st, `cancel of a reservation on '${this.limit.name}'`);
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Limits.

const RETUNE = { setRate: 0, setTokenBucket: 1, setLimit: 2, reset: 3 };

/** One limit of a limiter file, resolved by name. Decisions are synchronous and lock-free. */
class Limit {
  constructor(handle, name) {
    this._h = handle;
    /** The limit's name. */
    this.name = name;
  }

  /** Admit `cost` units now, or deny and consume nothing. */
  tryAcquire(cost = 1) {
    const st = native.acquire(this._h, cost);
    if (st !== 0) throw failure(st, `tryAcquire on '${this.name}'`);
    return readDecision();
  }

  /** What `tryAcquire(cost)` would decide now, consuming nothing. */
  peek(cost = 1) {
    const st = native.peek(this._h, cost);
    if (st !== 0) throw failure(st, `peek on '${this.name}'`);
    return readDecision();
  }

  /** Admit `cost` units for `key` (a string or bytes) on a keyed limit. */
  tryAcquireKey(key, cost = 1) {
    const st = native.acquireKey(this._h, key, cost, false);
    if (st !== 0) throw failure(st, `tryAcquireKey on '${this.name}'`);
    return readDecision();
  }

  peekKey(key, cost = 1) {
    const st = native.acquireKey(this._h, key, cost, true);
    if (st !== 0) throw failure(st, `peekKey on '${this.name}'`);
    return readDecision();
  }

  /** Wait (on timers, sleeping each denial's exact retry-after) until `cost` units are
   *  admitted; resolves the denial when `timeout` ms would pass first. */
  acquire(cost = 1, opts = {}) {
    return waitFor(() => this.tryAcquire(cost), opts, `acquire on '${this.name}'`);
  }

  acquireKey(key, cost = 1, opts = {}) {
    return waitFor(() => this.tryAcquireKey(key, cost), opts, `acquireKey on '${this.name}'`);
  }

  /** Book `cost` tokens of this (unkeyed) token bucket now, first come first served across
   *  processes, if they are ready within `maxDelay` ms (default 0); null otherwise (nothing
   *  taken). `await reservation.wait()` then sleeps on timers until their turn. */
  reserve(cost = 1, opts = {}) {
    const maxDelay = opts.maxDelay === undefined ? 0 : opts.maxDelay;
    const [st, granted, delayNs, readyAtNs, handle] = native.reserve(this._h, cost, msToNs(maxDelay, 'maxDelay', { zero: true }));
    if (st !== 0) throw failure(st, `reserve on '${this.name}'`);
    return granted ? new Reservation(this, handle, delayNs, readyAtNs) : null;
  }

  /** Wait for `cost` tokens in turn with every other process waiting (a reservation), for at
   *  most `timeout` ms; resolves the grant, or null when the wait would exceed the timeout. */
  async acquireInTurn(cost = 1, opts = {}) {
    const timeout = opts.timeout === undefined ? 2 ** 40 : opts.timeout;
    const r = this.reserve(cost, { maxDelay: timeout });
    if (!r) return null;
    try {
      return await r.wait(opts);
    } catch (err) {
      r.cancel();
      throw err;
    }
  }

  /** Give back what `decision` admitted (all of it, or `units` of it). A denial, peek or
   *  shadow denial recorded nothing, so refunding it does nothing. */
  refund(decision, units) {
    writeDecision(decision, u8, u32, 0);
    const st = native.refund(this._h, undefined, units === undefined ? -1 : units);
    if (st !== 0) throw failure(st, `refund on '${this.name}'`);
  }

  refundKey(key, decision) {
    writeDecision(decision, u8, u32, 0);
    const st = native.refund(this._h, key, -1);
    if (st !== 0) throw failure(st, `refundKey on '${this.name}'`);
  }

  /**
   * Decision counters summed over every process attached to the file. `refunded` counts grants
   * given back whole (refunds, composed roll-backs): `allowed - refunded` is what passed.
   */
  stats() {
    const s = native.stats(this._h);
    if (typeof s === 'number') throw failure(s, `stats of '${this.name}'`);
    return { allowed: s[0], denied: s[1], shadowDenied: s[2], nearLimit: s[3], refunded: s[4] };
  }

  /** The definition the file was created with. */
  definition() {
    const d = native.definition(this._h, false);
    if (typeof d === 'number') throw failure(d, `definition of '${this.name}'`);
    return specOf(d);
  }

  /** The definition with its live parameters (after any retune, by any process). A token
   *  bucket reads as `rate: 1` per its emission interval. */
  liveDefinition() {
    const d = native.definition(this._h, true);
    if (typeof d === 'number') throw failure(d, `liveDefinition of '${this.name}'`);
    return specOf(d);
  }

  /** The quota per window this limit states to clients (`RateLimit-Policy`). */
  policy() {
    const p = native.policy(this._h);
    if (typeof p === 'number') throw failure(p, `policy of '${this.name}'`);
    return { quota: p[0], windowSecs: p[1] };
  }

  _retune(op, a, b, c, what) {
    const st = native.retune(this._h, op, a, b, c);
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
  }

  /** Refill at `rate` per `per` ms, live, for every process. */
  setRate(rate, per = 1000) {
    this._retune(RETUNE.setRate, count(rate, 'rate'), msToNs(per, 'per'), 0, 'setRate');
  }

  /** A token bucket's burst and rate together, live. */
  setTokenBucket(burst, rate, per = 1000) {
    this._retune(RETUNE.setTokenBucket, count(burst, 'burst'), count(rate, 'rate'), msToNs(per, 'per'), 'setTokenBucket');
  }

  /** A window's limit per window, live. */
  setLimit(limit) {
    this._retune(RETUNE.setLimit, count(limit, 'limit'), 0, 0, 'setLimit');
  }

  /** Back to fresh (full bucket, empty windows, no permits held). */
  reset() {
    this._retune(RETUNE.reset, 0, 0, 0, 'reset');
  }

  _count(op, key, what) {
    const r = native.count(this._h, op, key);
    if (typeof r !== 'number') throw failure(r[0], `${what} of '${this.name}'`);
    return r;
  }

  /** A keyed limit's table: `{used, slots}`. */
  keyOccupancy() {
    return { used: this._count(0, undefined, 'keyOccupancy'), slots: this._count(1, undefined, 'keyOccupancy') };
  }

  /** Free the slots of idle keys; returns how many. */
  reclaimIdleKeys() {
    return this._count(2, undefined, 'reclaimIdleKeys');
  }

  /** A key's tag (as permit holders report it). */
  keyTag(key) {
    const t = native.keyTag(this._h, key);
    if (typeof t === 'number') throw failure(t, `keyTag on '${this.name}'`);
    return t;
  }

  _permit(key, what) {
    const [st, id] = native.permitTry(this._h, key);
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
    return id === 0n ? null : new Permit(this, id, key);
  }

  /** Take a permit if one is free now; null when all are held. */
  tryAcquirePermit() {
    return this._permit(undefined, 'tryAcquirePermit');
  }

  /** Take a permit of `key` (keyed concurrency limit) if one is free; null otherwise. */
  tryAcquireKeyPermit(key) {
    return this._permit(key, 'tryAcquireKeyPermit');
  }

  /** Wait up to `timeout` ms (default: as long as it takes) for a permit, on a thread of its
   *  own blocked on the library's futex wait: the event loop runs meanwhile. Resolves the
   *  Permit, or null when the timeout passed. `signal` (an AbortSignal) cancels the wait. */
  acquirePermit(opts = {}) {
    const p = this.tryAcquirePermit();
    if (p || (opts && opts.timeout === 0)) return Promise.resolve(p);
    return waitPermit(this, undefined, opts, `acquirePermit on '${this.name}'`);
  }

  acquireKeyPermit(key, opts = {}) {
    const p = this.tryAcquireKeyPermit(key);
    if (p || (opts && opts.timeout === 0)) return Promise.resolve(p);
    return waitPermit(this, key, opts, `acquireKeyPermit on '${this.name}'`);
  }

  /** Run `fn` holding a permit (released when it settles); rejects with
   *  PermitUnavailableError when none came within `timeout` ms. */
  async withPermit(fn, opts = {}) {
    const p = await this.acquirePermit(opts);
    if (!p) throw new PermitUnavailableError(`no permit of '${this.name}' within ${opts.timeout} ms`);
    try {
      return await fn(p);
    } finally {
      p.release();
    }
  }

  async withKeyPermit(key, fn, opts = {}) {
    const p = await this.acquireKeyPermit(key, opts);
    if (!p) throw new PermitUnavailableError(`no permit of '${this.name}' for this key within ${opts.timeout} ms`);
    try {
      return await fn(p);
    } finally {
      p.release();
    }
  }

  /** How many of `key`'s permits are held now, across every process. */
  keyPermitsHeld(key) {
    return this._count(4, key, 'keyPermitsHeld');
  }

  /** The held permits: `{id, pid, reclaimable, sinceNs, leaseExpiryNs, keyTag}`. */
  permitHolders() {
    const h = native.permitHolders(this._h);
    if (typeof h === 'number') throw failure(h, `permitHolders of '${this.name}'`);
    return h;
  }

  /** Free every permit whose holder died or whose lease expired; returns how many. */
  reclaimDeadPermits() {
    return this._count(3, undefined, 'reclaimDeadPermits');
  }

  /** Release the handle now (else the garbage collector does). */
  close() {
    native.close(this._h);
  }
}

// ---------------------------------------------------------------------------------------------
// Limiters.

/** `shmlimit_options.on_conflict` and `.on_reboot` values. */
const ON_CONFLICT = { refuse: 0, adopt: 1 };
const ON_REBOOT = { default: 0, translate: 1, reset: 2 };

/** One limiter file, attached. */
class Limiter {
  constructor(handle, path) {
    this._h = handle;
    this.path = path;
    this._limits = new Map();
  }

  /** Create the file with `definitions` ({name: tokenBucket(...), ...}), or open it if it
   *  exists with the same definitions (compared with its live parameters). When they differ,
   *  `onConflict: 'refuse'` (the default) throws `DefinitionConflictError` naming every
   *  differing field; `'adopt'` retunes the file live when its layout holds the change (usage
   *  kept), else replaces it atomically with a new file that attached processes move to within
   *  about a second. `onReboot: 'translate'` (the default for a created file: quotas used
   *  before a reboot stay used) or `'reset'`; given for an existing file, it must be the
   *  file's choice. `mode` (default 0o600) and `allowOtherOwner` (default false) as in the C
   *  ABI. */
  static createOrOpen(path, definitions, opts = {}) {
    if (typeof definitions !== 'object' || definitions === null) {
      throw new TypeError('definitions must be an object of {name: definition}');
    }
    const defs = Object.entries(definitions).map(([name, spec]) => rawDef(name, spec));
    if (defs.length === 0) throw new RangeError('at least one limit must be defined');
    return Limiter._open(path, defs, opts, 'createOrOpen');
  }

  /** Attach to an existing file by path alone. */
  static open(path, opts = {}) {
    return Limiter._open(path, null, opts, 'open');
  }

  /** A GuardedLimiter on `path`: see GuardedLimiter.open. */
  static openGuarded(path, opts = {}) {
    return GuardedLimiter.open(path, opts);
  }

  static _open(path, defs, opts, what) {
    if (typeof path !== 'string') path = String(path);
    const mode = opts.mode === undefined ? 0 : opts.mode;
    const onConflict = ON_CONFLICT[opts.onConflict === undefined ? 'refuse' : opts.onConflict];
    if (onConflict === undefined) {
      throw new RangeError(`onConflict must be 'refuse' or 'adopt', not ${String(opts.onConflict).slice(0, 80)}`);
    }
    const onReboot = ON_REBOOT[opts.onReboot === undefined ? 'default' : opts.onReboot];
    if (onReboot === undefined) {
      throw new RangeError(`onReboot must be 'translate' or 'reset', not ${String(opts.onReboot).slice(0, 80)}`);
    }
    const h = native.open(path, defs, mode, Boolean(opts.allowOtherOwner), onConflict, onReboot);
    if (typeof h === 'number') throw failure(h, `${what} ${path}`);
    return new Limiter(h, path);
  }

  /** The limit `name` (resolved once and kept). */
  limit(name) {
    let l = this._limits.get(name);
    if (!l) {
      const h = native.limit(this._h, String(name));
      if (typeof h === 'number') throw failure(h, `limit '${name}'`);
      l = new Limit(h, String(name));
      this._limits.set(name, l);
    }
    return l;
  }

  /** The stored definitions: {name: definition}. */
  definitions() {
    const ds = native.definitions(this._h);
    if (typeof ds === 'number') throw failure(ds, `definitions of ${this.path}`);
    return Object.fromEntries(ds.map((d) => [d.name, specOf(d)]));
  }

  /** Release the file's handle (limits already resolved stay usable until closed). */
  close() {
    native.close(this._h);
  }
}

// ---------------------------------------------------------------------------------------------
// Guarded limiters: fail open or fail closed while the file is unavailable.

const POLICY = { failOpen: 1, failClosed: 2 };
const FLAG_UNAVAILABLE = 1;

function readGuarded() {
  const d = readDecision();
  /** The file (or this limit's state) was unavailable: the limit's policy decided. */
  d.unavailable = (u32[10] & FLAG_UNAVAILABLE) !== 0;
  return d;
}

/** One limit of a guarded limiter, with its policy for while the file is unavailable. */
class GuardedLimit {
  constructor(handle, name, policy) {
    this._h = handle;
    this.name = name;
    this.policy = policy;
  }

  _decide(op, cost, key, what) {
    const st = native.guardedDecide(this._h, op, cost, key);
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
    return readGuarded();
  }

  /** A decision (`.unavailable` when the policy made it: admit all, or deny with a
   *  retry-after of the time until the next attempt to open the file). */
  tryAcquire(cost = 1) {
    return this._decide(0, cost, undefined, 'tryAcquire');
  }

  peek(cost = 1) {
    return this._decide(1, cost, undefined, 'peek');
  }

  tryAcquireKey(key, cost = 1) {
    return this._decide(2, cost, key, 'tryAcquireKey');
  }

  /** Give back a grant (a policy's decision recorded nothing: refunding it does nothing). */
  refund(decision) {
    writeDecision(decision, u8, u32, 0);
    if (decision.unavailable) u32[10] |= FLAG_UNAVAILABLE;
    const st = native.guardedDecide(this._h, 3, 0, undefined);
    if (st !== 0) throw failure(st, `refund on '${this.name}'`);
  }

  close() {
    native.close(this._h);
  }
}

/** A limiter file attached when it can be opened: until then (and while a limit's state is
 *  damaged) each limit decides by the policy it was given. Never fails because of the file. */
class GuardedLimiter {
  constructor(handle, path) {
    this._h = handle;
    this.path = path;
  }

  /** Attach to `path` now if it can be opened (as `Limiter.open` with default options), else
   *  at the first decision after `reopenEvery` ms (default 1000) and so on. */
  static open(path, opts = {}) {
    const every = opts.reopenEvery === undefined ? 1000 : opts.reopenEvery;
    const h = native.guardedOpen(String(path), msToNs(every, 'reopenEvery', { zero: true }));
    if (typeof h === 'number') throw failure(h, `openGuarded ${path}`);
    return new GuardedLimiter(h, String(path));
  }

  /** Whether the file is attached now. */
  attached() {
    const a = native.guardedAttached(this._h);
    if (typeof a === 'number') throw failure(a, `attached ${this.path}`);
    return a;
  }

  /** The limit `name` with its policy: 'failOpen' (admit all, for overload protection) or
   *  'failClosed' (deny all, for what must never be exceeded). Required: no silent default. */
  limit(name, policy) {
    if (!(policy in POLICY)) {
      throw new RangeError(`limit '${name}': the policy while the file is unavailable must be 'failOpen' or 'failClosed', not ${String(policy)}`);
    }
    const h = native.guardedLimit(this._h, String(name), POLICY[policy]);
    if (typeof h === 'number') throw failure(h, `guarded limit '${name}'`);
    return new GuardedLimit(h, String(name), policy);
  }

  close() {
    native.close(this._h);
  }
}

// ---------------------------------------------------------------------------------------------
// Composed checks and client headers.

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
const version = native.version();

module.exports = {
  Limiter,
  Limit,
  Decision,
  Composed,
  Permit,
  Reservation,
  GuardedLimiter,
  GuardedLimit,
  tokenBucket,
  fixedWindow,
  slidingWindow,
  slidingLog,
  concurrency,
  tryAcquireAll,
  acquireAll,
  rateLimitHeaders,
  version,
  ...errors,
};
