'use strict';
// HTTP middleware: a framework-agnostic `(req, res, next)` (node:http, Express, Connect) and a
// Fastify plugin. Decisions and header values all come from the library: the limits decide,
// `shmlimit_ratelimit_headers` renders `RateLimit`, `RateLimit-Policy` and `Retry-After`.

const index = require('./index');
const native = require('./native');
const { readDecisionAt } = require('./decision');
const { failure } = require('./errors');

function defaultKey(req) {
  return req.ip || (req.socket && req.socket.remoteAddress) || 'unknown';
}

// A key function's answer: a string or bytes; null or undefined falls back to the client's
// address.
function keyOf(fn, req) {
  const k = fn(req);
  if (k === undefined || k === null) return defaultKey(req);
  return typeof k === 'string' || k instanceof Uint8Array ? k : String(k);
}

// Normalise `limits` to [{limit, key, cost}], with keyed-ness read once from the definitions.
function entriesOf(opts) {
  let limits = opts.limits !== undefined ? opts.limits : opts.limit;
  if (limits === undefined) throw new TypeError('middleware: `limits` (a Limit or an array of them) is required');
  if (!Array.isArray(limits)) limits = [limits];
  if (limits.length === 0 || limits.length > 8) throw new RangeError('middleware: 1 to 8 limits');
  return limits.map((e) => {
    const entry = e instanceof index.Limit ? { limit: e } : { ...e };
    if (!(entry.limit instanceof index.Limit)) throw new TypeError('middleware: each entry is a Limit or {limit, key?, cost?}');
    const def = entry.limit.definition();
    if (def.kind === 'concurrency') throw new TypeError(`middleware: '${entry.limit.name}' is a concurrency limit; use withPermit around the handler`);
    entry.keyed = Boolean(def.keyed);
    entry.key = entry.keyed ? entry.key || opts.key || defaultKey : null;
    entry.cost = entry.cost !== undefined ? entry.cost : opts.cost !== undefined ? opts.cost : 1;
    return entry;
  });
}

/**
 * Decide one request against every entry, all or nothing: one decision for one limit, else one
 * composed check of the library (keyed limits with their keys), which refunds the grants
 * already taken when a limit denies and peeks the limits after it.
 * Returns a RequestDecision: {allowed, decisions, headers}.
 */
function decide(entries, req) {
  const n = entries.length;
  if (n === 1) {
    const e = entries[0];
    const cost = typeof e.cost === 'function' ? e.cost(req) : e.cost;
    const d = e.keyed ? e.limit.tryAcquireKey(keyOf(e.key, req), cost) : e.limit.tryAcquire(cost);
    return new RequestDecision(d.allowed, [d], entries);
  }
  // One composed check through the addon, into the scratch buffers of these entries (used
  // during this call only: the decisions are read out before it returns).
  const scratch = scratchOf(entries);
  for (let i = 0; i < n; i++) {
    const e = entries[i];
    scratch.costs[i] = typeof e.cost === 'function' ? e.cost(req) : e.cost;
    if (e.keyed) scratch.keys[i] = keyOf(e.key, req);
  }
  const st = native.acquireAll(scratch.handles, scratch.costs, scratch.raw, scratch.keyed ? scratch.keys : undefined);
  if (st !== 0) throw failure(st, 'middleware');
  const allowed = scratch.raw[0] === 1;
  const deniedBy = allowed ? 0 : scratch.words[1] | 0;
  const decisions = new Array(n);
  for (let i = 0; i < n; i++) {
    const e = entries[i];
    // The grants the library gave back when a later limit denied read as zero: what the
    // client is told of those limits is what they hold now (a peek).
    decisions[i] = i < deniedBy
      ? (e.keyed ? e.limit.peekKey(scratch.keys[i], scratch.costs[i]) : e.limit.peek(scratch.costs[i]))
      : readDecisionAt(scratch.raw, scratch.words, scratch.first + 16 * i);
  }
  return new RequestDecision(allowed, decisions, entries);
}

// The arrays and the composed result buffer of one set of entries, made once.
const scratches = new WeakMap();
function scratchOf(entries) {
  let s = scratches.get(entries);
  if (s === undefined) {
    const raw = new Uint8Array(native.composedSize);
    s = {
      raw,
      words: new Uint32Array(raw.buffer),
      first: native.composedDecisionsOffset >> 2,
      handles: entries.map((e) => e.limit._h),
      costs: new Array(entries.length).fill(1),
      keys: new Array(entries.length).fill(undefined),
      keyed: entries.some((e) => e.keyed),
    };
    scratches.set(entries, s);
  }
  return s;
}

const ENTRIES = Symbol('entries');
const RENDERED = Symbol('rendered');

/**
 * What `decide` concluded. `headers` is rendered on first use (and kept): a middleware with
 * `headers: false` renders them only for a denial's `Retry-After`, or when the application
 * reads `req.rateLimit.headers` itself.
 */
class RequestDecision {
  constructor(allowed, decisions, entries) {
    this.allowed = allowed;
    this.decisions = decisions;
    // Symbol-keyed: not enumerated, and cheaper than a non-enumerable property per request.
    this[ENTRIES] = entries;
    this[RENDERED] = undefined;
  }

  get headers() {
    if (this[RENDERED] === undefined) {
      const entries = this[ENTRIES];
      const pairs = new Array(entries.length);
      for (let i = 0; i < entries.length; i++) pairs[i] = [entries[i].limit, this.decisions[i]];
      this[RENDERED] = index.rateLimitHeaders(pairs);
    }
    return this[RENDERED];
  }
}

function denialBody(opts) {
  return opts.message !== undefined ? opts.message : 'Too Many Requests\n';
}

/**
 * `(req, res, next)` middleware for node:http, Express and Connect.
 *
 * Options: `limits` (a Limit, or an array of Limits or {limit, key, cost}); `key(req)` for
 * keyed limits (default: `req.ip`, else the socket's remote address); `cost` (a number or
 * `cost(req)`); `headers` (default true: `RateLimit` and `RateLimit-Policy` on every
 * response); `statusCode` (default 429); `message` (the denial's body); `skip(req)`;
 * `onLimited(req, res, result)` to answer a denial yourself.
 */
function middleware(opts = {}) {
  const entries = entriesOf(opts);
  const statusCode = opts.statusCode || 429;
  const sendHeaders = opts.headers !== false;
  return function shmlimitMiddleware(req, res, next) {
    if (opts.skip && opts.skip(req)) {
      if (next) next();
      return;
    }
    let result;
    try {
      result = decide(entries, req);
    } catch (err) {
      if (next) next(err);
      else throw err;
      return;
    }
    req.rateLimit = result;
    if (sendHeaders) {
      if (result.headers['RateLimit']) res.setHeader('RateLimit', result.headers['RateLimit']);
      if (result.headers['RateLimit-Policy']) res.setHeader('RateLimit-Policy', result.headers['RateLimit-Policy']);
    }
    if (result.allowed) {
      if (next) next();
      return;
    }
    if (result.headers['Retry-After']) res.setHeader('Retry-After', result.headers['Retry-After']);
    if (opts.onLimited) {
      opts.onLimited(req, res, result);
      return;
    }
    res.statusCode = statusCode;
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end(denialBody(opts));
  };
}

/**
 * A Fastify plugin: `fastify.register(shmlimit.fastifyPlugin, {limits, key, ...})` with the
 * options of `middleware` (`key(request)` receives Fastify's request, whose `ip` is the
 * default). It applies to the scope it is registered in and the ones below.
 */
function fastifyPlugin(fastify, opts, done) {
  let entries;
  try {
    entries = entriesOf(opts);
  } catch (err) {
    done(err);
    return;
  }
  const statusCode = opts.statusCode || 429;
  const sendHeaders = opts.headers !== false;
  fastify.addHook('onRequest', (request, reply, hookDone) => {
    if (opts.skip && opts.skip(request)) {
      hookDone();
      return;
    }
    let result;
    try {
      result = decide(entries, request);
    } catch (err) {
      hookDone(err);
      return;
    }
    request.rateLimit = result;
    if (sendHeaders) {
      if (result.headers['RateLimit']) reply.header('RateLimit', result.headers['RateLimit']);
      if (result.headers['RateLimit-Policy']) reply.header('RateLimit-Policy', result.headers['RateLimit-Policy']);
    }
    if (result.allowed) {
      hookDone();
      return;
    }
    if (result.headers['Retry-After']) reply.header('Retry-After', result.headers['Retry-After']);
    reply.code(statusCode).type('text/plain; charset=utf-8').send(denialBody(opts));
  });
  done();
}
// Like fastify-plugin: the hook applies to the registering scope, not an encapsulated child.
fastifyPlugin[Symbol.for('skip-override')] = true;
fastifyPlugin[Symbol.for('fastify.display-name')] = 'shmlimit';

// The entries of each options object given to decideRequest, normalised once.
const compiled = new WeakMap();

/** The middleware's decision for `req` under `opts` (`limits`, `key`, `cost`), without
 *  answering the request: `{allowed, decisions, headers}`. */
function decideRequest(opts, req) {
  let entries = compiled.get(opts);
  if (entries === undefined) {
    entries = entriesOf(opts);
    compiled.set(opts, entries);
  }
  return decide(entries, req);
}

module.exports = { middleware, fastifyPlugin, decideRequest };
