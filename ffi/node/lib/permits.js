'use strict';
// Permits of concurrency limits: a held Permit, and the wait for one on a thread of the addon's
// own (blocked in the library's futex wait) whose result comes back through a thread-safe
// function.

const native = require('./native');
const { CLOSED, NOT_HELD, failure, makeError } = require('./errors');
const { abortError } = require('./waiting');

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

/** Wait for a permit of `limit` (of a key, or unkeyed) on the addon's wait thread. */
function waitPermit(limit, key, opts, what) {
  return waitOn(limit, opts, what, (timeoutNs, done) => native.permitWait(limit._h, key, timeoutNs, done), {
    none: 0n,
    wrap: (permit) => new Permit(limit, permit, key),
    giveBack: (permit) => new Permit(limit, permit, key).release(),
  });
}

/** Wait for a permit of the adaptive limit `limit`, blocked in the library's futex wait as a
 *  fixed permit's wait is (woken by each release, and by each window that raises the limit). */
function waitAdaptive(limit, opts, what) {
  const key = opts && opts.key;
  return waitOn(limit, opts, what, (timeoutNs, done) => native.adaptiveWait(limit._h, timeoutNs, done, key), {
    none: null,
    wrap: (handle) => new AdaptivePermit(limit, handle),
    giveBack: (handle) => new AdaptivePermit(limit, handle).release('dropped'),
  });
}

function waitOn(limit, opts, what, start, { none, wrap, giveBack }) {
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
    const id = start(timeoutNs, (status, permit, message, osError) => {
      if (signal) signal.removeEventListener('abort', onAbort);
      if (status === 0 && signal && signal.aborted) {
        // Aborted while the permit was being taken: give it back.
        if (permit !== none) giveBack(permit);
        reject(abortError(signal));
      } else if (status === 0) {
        resolve(permit === none ? null : wrap(permit));
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

const OUTCOMES = { ok: 0, error: 1, timeout: 2, dropped: 3 };

/** A held permit of an adaptive concurrency limit. `release(outcome)` releases it once and
 *  reports the outcome ('ok', 'error', 'timeout' or 'dropped') with the time since its grant
 *  (or `{ latency }` ms the caller measured). Disposed (`using`) or collected unreleased, it
 *  reports `this.outcome` if set, else 'dropped' (a block that threw must not count as a fast
 *  success): set `permit.outcome = 'ok'` at the end of the block, or use `limit.withAdaptive`. */
class AdaptivePermit {
  constructor(limit, handle) {
    this.limit = limit;
    this._p = handle;
    this.outcome = undefined;
  }

  /** False once released. */
  get held() {
    return this._p !== null;
  }

  release(outcome = 'ok', { latency } = {}) {
    if (this._p === null) return false;
    const code = OUTCOMES[outcome];
    if (code === undefined) {
      throw new TypeError(`outcome must be one of ${Object.keys(OUTCOMES).join(', ')}, not ${String(outcome).slice(0, 40)}`);
    }
    const st = native.adaptiveRelease(this._p, code, latency);
    if (st === NOT_HELD) return false;
    if (st !== 0) throw failure(st, `release on '${this.limit.name}'`);
    this._p = null;
    return true;
  }

  [Symbol.dispose]() {
    this.release(this.outcome === undefined ? 'dropped' : this.outcome);
  }
}

module.exports = { Permit, AdaptivePermit, waitPermit, waitAdaptive };
