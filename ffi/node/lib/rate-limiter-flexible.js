'use strict';
// A rate-limiter-flexible limiter in a shmlimit file (`require('shmlimit/rate-limiter-flexible')`):
// `new RateLimiterShmlimit({ path, points, duration })` is a RateLimiterMemory whose counters
// every worker of the host shares (node:cluster, PM2), with no master process and no server.
//
// It extends rate-limiter-flexible's own RateLimiterAbstract (option checks, keyPrefix, getKey)
// and answers with its RateLimiterRes, so `instanceof`, RateLimiterUnion, RateLimiterQueue,
// BurstyRateLimiter and the wrappers take it as one of theirs. rate-limiter-flexible is a peer
// dependency, required when this module loads (an optional one: the rest of the package does
// not need it).
//
// A key's points are one fixed-window counter of lib/counters.js: the first consume starts a
// window of `duration`, every consume adds its points (a rejected one too, as
// RateLimiterMemory counts it), each one compare-and-swap in the shared file.

const { Counters, MAX_COUNT, MAX_WINDOW_MS, WINDOW_UNIT_MS } = require('./counters');

function peer() {
  try {
    return {
      RateLimiterAbstract: require('rate-limiter-flexible/lib/RateLimiterAbstract'),
      RateLimiterRes: require('rate-limiter-flexible/lib/RateLimiterRes'),
    };
  } catch (err) {
    const e = new Error('shmlimit/rate-limiter-flexible: rate-limiter-flexible is not installed (npm install rate-limiter-flexible): RateLimiterShmlimit extends its RateLimiterAbstract');
    e.code = 'SHMLIMIT_PEER_MISSING';
    e.cause = err;
    throw e;
  }
}
const { RateLimiterAbstract, RateLimiterRes } = peer();

/** rate-limiter-flexible's limiter over a shmlimit file shared by every worker of the host. */
class RateLimiterShmlimit extends RateLimiterAbstract {
  /**
   * rate-limiter-flexible's options (`points`, `duration` in seconds, `blockDuration`,
   * `execEvenly`, `execEvenlyMinDelayMs`, `keyPrefix`), and where the counters are: `path` (the
   * file, created when missing), `storeName` (the counters limit in it, default
   * 'rate-limiter-flexible'), `keys` (default 16384), `onFull` (default 'deny') and `mode`
   * for a created file, `onConflict` (default 'refuse'; 'adopt' replaces a file created with
   * other ones); or `counters`, a Counters to use.
   */
  constructor(opts = {}) {
    super(opts);
    if (!Number.isInteger(this.points) || this.points < 0 || this.points > MAX_COUNT) {
      throw new RangeError(`RateLimiterShmlimit: points must be an integer from 0 to ${MAX_COUNT} (a counter's capacity), not ${this.points}`);
    }
    for (const [what, s] of [['duration', this.duration], ['blockDuration', this.blockDuration]]) {
      if (typeof s !== 'number' || !(s >= 0) || s * 1000 > MAX_WINDOW_MS) {
        throw new RangeError(`RateLimiterShmlimit: ${what} must be from 0 to ${Math.floor(MAX_WINDOW_MS / 1000)} seconds (about 417 days), not ${s}`);
      }
    }
    if (opts.counters !== undefined) {
      if (!(opts.counters instanceof Counters)) throw new TypeError('RateLimiterShmlimit: counters must be a Counters');
      this.counters = opts.counters;
    } else {
      if (typeof opts.path !== 'string' || opts.path === '') {
        throw new TypeError('RateLimiterShmlimit: options.path must name the shmlimit file, as in new RateLimiterShmlimit({ path: \'/dev/shm/app.shmlimit\', points: 10, duration: 1 })');
      }
      const name = opts.storeName === undefined ? 'rate-limiter-flexible' : opts.storeName;
      this.counters = Counters.open(opts.path, { name, keys: opts.keys, onFull: opts.onFull, mode: opts.mode, onConflict: opts.onConflict }, { movingWindow: 0 });
    }
  }

  // The key in the file: keyPrefix:key, as a string (rate-limiter-flexible takes numbers too).
  _key(key) {
    return String(this.getKey(key));
  }

  // The window (ms) of a duration in seconds: 0 is "never expires", the file's longest window.
  static _ms(seconds) {
    return seconds === 0 ? MAX_WINDOW_MS : seconds * 1000;
  }

  // msBeforeNext as rate-limiter-flexible reports it: -1 for a key that never expires; else
  // the end of the window as asked, to the file's unit: a window's end is kept rounded up to
  // 2^21 ns, so what is left, less that unit, never exceeds the duration (as RateLimiterMemory
  // reports it) and is at most 2.1 ms short of the true end.
  static _left(windowMs, resetMs) {
    return windowMs === MAX_WINDOW_MS ? -1 : RateLimiterShmlimit._asked(resetMs);
  }

  static _asked(resetMs) {
    return Math.max(0, Math.ceil(resetMs - WINDOW_UNIT_MS));
  }

  _res(consumed, windowMs, resetMs, first) {
    return new RateLimiterRes(Math.max(this.points - consumed, 0), RateLimiterShmlimit._left(windowMs, resetMs), consumed, first);
  }

  // Add `points` to the key's counter: the RateLimiterRes after it. A new key that finds the
  // file's table full gets its policy: deny reads as points + 1 consumed, allow as none.
  _add(key, points, options) {
    const windowMs = RateLimiterShmlimit._ms(this._getKeySecDuration(options));
    const { count, resetMs } = this.counters.incrWithReset(this._key(key), windowMs, points);
    const consumed = count === Infinity ? this.points + points : count;
    return this._res(consumed, windowMs, resetMs || windowMs + WINDOW_UNIT_MS, count === points);
  }

  /** Consume `points` (default 1): resolves a RateLimiterRes, rejects one when the key has
   *  consumed more than `points` in its window (blocking it for `blockDuration` the first time
   *  it does), rejects an Error when the store refuses the call (bad key or points). */
  consume(key, pointsToConsume = 1, options = {}) {
    return new Promise((resolve, reject) => {
      let res;
      try {
        if (pointsToConsume === 0) {
          res = this._read(key) || new RateLimiterRes(this.points, 0, 0, false);
        } else {
          res = this._add(key, pointsToConsume, options);
        }
      } catch (err) {
        reject(err);
        return;
      }
      if (res.consumedPoints > this.points) {
        // Block only the first time the key goes over, as RateLimiterMemory does.
        if (this.blockDuration > 0 && res.consumedPoints <= this.points + pointsToConsume) {
          try {
            this.counters.set(this._key(key), this.msBlockDuration, res.consumedPoints);
          } catch (err) {
            reject(err);
            return;
          }
          res.msBeforeNext = this.msBlockDuration;
        }
        reject(res);
      } else if (this.execEvenly && this.points > 0 && res.msBeforeNext > 0 && !res.isFirstInDuration) {
        let delay = Math.ceil(res.msBeforeNext / (res.remainingPoints + 2));
        if (delay < this.execEvenlyMinDelayMs) delay = res.consumedPoints * this.execEvenlyMinDelayMs;
        res.msBeforeNext = Math.max(res.msBeforeNext - delay, 0);
        setTimeout(resolve, delay, res);
      } else {
        resolve(res);
      }
    });
  }

  /** Add `points` (default 1) to the key without rejecting. */
  penalty(key, points = 1, options = {}) {
    return new Promise((resolve) => resolve(this._add(key, points, options)));
  }

  /** Take `points` (default 1) back from the key: never below zero (RateLimiterMemory goes
   *  negative); the window keeps its end. */
  reward(key, points = 1, options = {}) {
    return new Promise((resolve) => {
      const rlKey = this._key(key);
      const consumed = this.counters.decr(rlKey, points);
      const { resetMs } = this.counters.count(rlKey);
      resolve(this._res(consumed, RateLimiterShmlimit._ms(this._getKeySecDuration(options)), resetMs, false));
    });
  }

  /** Block the key for `secDuration` seconds (0: for good, the file's longest window). */
  block(key, secDuration) {
    return new Promise((resolve) => {
      const windowMs = RateLimiterShmlimit._ms(secDuration);
      const points = this.points + 1;
      this.counters.set(this._key(key), windowMs, points);
      resolve(new RateLimiterRes(0, RateLimiterShmlimit._left(windowMs, windowMs + WINDOW_UNIT_MS), points));
    });
  }

  /** Make the key hold `points` for `secDuration` seconds (default: `duration`). */
  set(key, points, secDuration) {
    return new Promise((resolve) => {
      const windowMs = RateLimiterShmlimit._ms(secDuration >= 0 ? secDuration : this.duration);
      this.counters.set(this._key(key), windowMs, points);
      resolve(new RateLimiterRes(0, RateLimiterShmlimit._left(windowMs, windowMs + WINDOW_UNIT_MS), points));
    });
  }

  _read(key) {
    const { count, resetMs } = this.counters.count(this._key(key));
    if (count === 0 && resetMs === 0) return null;
    const never = resetMs > MAX_WINDOW_MS / 2;
    return new RateLimiterRes(Math.max(this.points - count, 0), never ? -1 : RateLimiterShmlimit._asked(resetMs), count, false);
  }

  /** The key's RateLimiterRes, or null when it has consumed nothing in a window. */
  get(key) {
    return new Promise((resolve) => resolve(this._read(key)));
  }

  /** Forget the key: resolves whether it held anything. */
  delete(key) {
    return new Promise((resolve) => {
      const rlKey = this._key(key);
      const { count, resetMs } = this.counters.count(rlKey);
      this.counters.clear(rlKey);
      resolve(count > 0 || resetMs > 0);
    });
  }

  /** Nothing is held in this process (blocks live in the file): nothing to delete. */
  deleteInMemoryBlockedAll() {}
}

module.exports = { RateLimiterShmlimit };
