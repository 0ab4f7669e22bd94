'use strict';
// HTTP middleware: a framework-agnostic `(req, res, next)` (node:http, Express, Connect) and a
// Fastify plugin. Decisions and header values all come from the library: the limits decide,
// `shmlimit_ratelimit_headers` renders `RateLimit`, `RateLimit-Policy` and `Retry-After`.

const index = require('./index');

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
 * Decide one request against every entry, all or nothing (as a composed check: when one limit
 * denies, the grants already taken are refunded and the limits after it are peeked).
 * Returns {allowed, decisions, headers}.
 */
function decide(entries, req) {
  const n = entries.length;
  const costs = entries.map((e) => (typeof e.cost === 'function' ? e.cost(req) : e.cost));
  let decisions;
  let allowed;
  if (entries.every((e) => !e.keyed) && n > 1) {
    const c = index.tryAcquireAll(entries.map((e, i) => [e.limit, costs[i]]));
    allowed = c.allowed;
    decisions = c.decisions;
  } else {
    const keys = entries.map((e) => (e.keyed ? keyOf(e.key, req) : null));
    decisions = new Array(n);
    allowed = true;
    for (let i = 0; i < n; i++) {
      const e = entries[i];
      if (allowed) {
        decisions[i] = e.keyed ? e.limit.tryAcquireKey(keys[i], costs[i]) : e.limit.tryAcquire(costs[i]);
        if (!decisions[i].allowed) {
          allowed = false;
          for (let j = 0; j < i; j++) {
            if (entries[j].keyed) entries[j].limit.refundKey(keys[j], decisions[j]);
            else entries[j].limit.refund(decisions[j]);
          }
        }
      } else {
        decisions[i] = e.keyed ? e.limit.peekKey(keys[i], costs[i]) : e.limit.peek(costs[i]);
      }
    }
  }
  return new Result(allowed, decisions, entries);
}

/**
 * What `decide` concluded. `headers` is rendered on first use (and kept): a middleware with
 * `headers: false` renders them only for a denial's `Retry-After`, or when the application
 * reads `req.rateLimit.headers` itself.
 */
class Result {
  constructor(allowed, decisions, entries) {
    this.allowed = allowed;
    this.decisions = decisions;
    Object.defineProperty(this, 'entries', { value: entries, enumerable: false });
    Object.defineProperty(this, 'rendered', { value: undefined, writable: true, enumerable: false });
  }

  get headers() {
    if (this.rendered === undefined) {
      this.rendered = index.rateLimitHeaders(this.entries.map((e, i) => [e.limit, this.decisions[i]]));
    }
    return this.rendered;
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
