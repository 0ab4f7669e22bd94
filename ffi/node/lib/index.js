'use strict';
// shmlimit for Node.js: the library's C ABI (ffi/include/shmlimit.h) through a Node-API addon
// (src/). Every decision is the library's; these modules convert units (milliseconds in,
// nanoseconds to the library), shape results and map status codes to Error subclasses. This
// one gathers the core API; the HTTP middleware (middleware.js) is built on it, and entry.js
// exports both.

const native = require('./native');
const { Decision } = require('./decision');
const { errors } = require('./errors');
const { tokenBucket, fixedWindow, slidingWindow, slidingLog, concurrency, adaptiveConcurrency, counters } = require('./definitions');
const { Permit, AdaptivePermit } = require('./permits');
const { Reservation } = require('./reservation');
const { Limit } = require('./limit');
const { Limiter } = require('./limiter');
const { GuardedLimiter, GuardedLimit } = require('./guarded');
const { Counters } = require('./counters');
const { Composed, tryAcquireAll, acquireAll, rateLimitHeaders } = require('./compose');
const { PreparedAll, prepareAll } = require('./prepared');

/** The library's version. */
const version = native.version();

module.exports = {
  Limiter,
  Limit,
  Decision,
  Composed,
  PreparedAll,
  Permit,
  AdaptivePermit,
  Reservation,
  GuardedLimiter,
  GuardedLimit,
  tokenBucket,
  fixedWindow,
  slidingWindow,
  slidingLog,
  concurrency,
  adaptiveConcurrency,
  counters,
  Counters,
  tryAcquireAll,
  acquireAll,
  prepareAll,
  rateLimitHeaders,
  version,
  ...errors,
};
