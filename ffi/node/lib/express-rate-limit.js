'use strict';
// A store for express-rate-limit (`require('shmlimit/express-rate-limit')`): its hit counters
// in a shmlimit file that every worker of the host maps (node:cluster, PM2), so that
// `rateLimit({ windowMs, limit, store: new ShmlimitStore({ path }) })` holds one limit across
// all of them, with no server. It counts as express-rate-limit's MemoryStore does: a key's
// window starts at its first hit and every hit counts; each call is one compare-and-swap in
// the shared file (lib/counters.js), so concurrent workers never lose a hit.
//
// express-rate-limit itself is not required here: the store is the shape its Store interface
// asks for (init, get, increment, decrement, resetKey, resetAll, shutdown, localKeys, prefix).

const { Counters, checkWindowMs } = require('./counters');

/** A store for express-rate-limit in a shmlimit file (see docs/node-stores.md). */
class ShmlimitStore {
  /**
   * `path`: the file (created when missing); `prefix` (default 'rl:') goes before every key;
   * `name` (default 'express-rate-limit'): the counters limit in the file; `keys` (default
   * 16384), `onFull` (default 'deny') and `mode` (default 0o600) for a created file;
   * `onConflict` (default 'refuse'; 'adopt' replaces a file created with other ones); or
   * `counters`: a Counters to use instead of opening `path`.
   */
  constructor({ path, prefix = 'rl:', name = 'express-rate-limit', keys, onFull, mode, onConflict, counters } = {}) {
    if (typeof prefix !== 'string') {
      throw new TypeError(`ShmlimitStore: prefix must be a string, not ${typeof prefix}`);
    }
    if (counters !== undefined) {
      if (!(counters instanceof Counters)) throw new TypeError('ShmlimitStore: counters must be a Counters');
      this.counters = counters;
    } else {
      if (typeof path !== 'string' || path === '') {
        throw new TypeError('ShmlimitStore: options.path must name the shmlimit file, as in new ShmlimitStore({ path: \'/dev/shm/app.shmlimit\' })');
      }
      // No moving windows: 32 bytes a key (512 KiB for the default 16384 keys).
      this.counters = Counters.open(path, { name, keys, onFull, mode, onConflict }, { movingWindow: 0 });
    }
    /** Keys counted here are counted for every worker that maps the file. */
    this.localKeys = false;
    this.prefix = prefix;
    /** The window (ms), from `init`. */
    this.windowMs = undefined;
  }

  /** Called by express-rate-limit with its options: takes `windowMs`, checked against the
   *  file's range (1 ms to about 417 days) now rather than at the first request. */
  init(options) {
    const windowMs = options && options.windowMs;
    checkWindowMs(windowMs, 'ShmlimitStore.init');
    this.windowMs = windowMs;
  }

  _window() {
    if (this.windowMs === undefined) {
      throw new Error('ShmlimitStore: init({ windowMs }) was not called (express-rate-limit calls it; call it yourself when using the store directly)');
    }
    return this.windowMs;
  }

  /** The key's hits in its window and when the window ends; undefined when it has none. */
  get(key) {
    const { count, resetMs } = this.counters.count(this.prefix + key);
    if (count === 0 && resetMs === 0) return undefined;
    return { totalHits: count, resetTime: new Date(Date.now() + resetMs) };
  }

  /** Count one hit; its window starts now when the key has none. A new key that finds the
   *  file's table full gets its policy: deny (`totalHits` Infinity) or allow (0). */
  increment(key) {
    const windowMs = this._window();
    const { count, resetMs } = this.counters.incrWithReset(this.prefix + key, windowMs);
    return { totalHits: count, resetTime: new Date(Date.now() + (resetMs || windowMs)) };
  }

  /** Take one hit back (express-rate-limit's skipSuccessfulRequests / skipFailedRequests):
   *  never below zero, and the window keeps its end. */
  decrement(key) {
    this.counters.decr(this.prefix + key);
  }

  /** Forget the key. */
  resetKey(key) {
    this.counters.clear(this.prefix + key);
  }

  /** Forget every key of the file's counters limit (every prefix: give stores that must not
   *  reset each other a `name` of their own). */
  resetAll() {
    this.counters.clearAll();
  }

  /** Nothing to stop: the store has no timer (expired keys are reclaimed in the file). */
  shutdown() {}
}

module.exports = { ShmlimitStore };
