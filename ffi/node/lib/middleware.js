'use strict';
// HTTP middleware: a framework-agnostic `(req, res, next)` (node:http, Express, Connect) and a
// Fastify plugin. Decisions and header values all come from the library: the limits decide,
// `shmlimit_ratelimit_headers` renders `RateLimit`, `RateLimit-Policy` and `Retry-After`.

const index = require('./index');
const native = require('./native');
const { readDecisionAt } = require('./decision');
const { failure } = require('./errors');
const prepared = require('./prepared');
const { adaptiveItems, policyItem, ceilSecs } = require('./compose');
const { acquirePrepared, preparedFailure } = prepared;

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
    const def = entry.limit.createdDefinition();
    if (def.kind === 'concurrency') throw new TypeError(`middleware: '${entry.limit.name}' is a concurrency limit; use withPermit around the handler`);
    if (def.kind === 'adaptiveConcurrency') {
      if (entry.cost !== undefined) throw new TypeError(`middleware: '${entry.limit.name}' is an adaptive concurrency limit: a permit per request, no cost`);
      if (def.keyed) {
        const key = entry.key || opts.key;
        if (typeof key !== 'function') throw new TypeError(`middleware: '${entry.limit.name}' is a keyed adaptive concurrency limit: give the request's key as {limit, key: (req) => key}`);
        return { limit: entry.limit, adaptive: true, keyed: true, key };
      }
      if (entry.key !== undefined) throw new TypeError(`middleware: '${entry.limit.name}' is an adaptive concurrency limit: a permit per request, no key or cost`);
      return { limit: entry.limit, adaptive: true, keyed: false };
    }
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
  const scratch = scratchOf(entries);
  let raw;
  let words;
  let st;
  if (scratch.prepared !== null) {
    // The composition prepared once (limits and costs): only the keys are passed.
    let m = 0;
    for (let i = 0; i < n; i++) {
      const e = entries[i];
      if (e.keyed) scratch.keyed[m++] = scratch.keys[i] = keyOf(e.key, req);
    }
    st = acquirePrepared(scratch.prepared, scratch.keyed, m);
    if (st !== 0) throw preparedFailure(st, 'middleware', scratch.limits);
    raw = prepared.bytes;
    words = prepared.words;
  } else {
    // A cost computed per request: the arrays of this call, into these entries' buffer.
    for (let i = 0; i < n; i++) {
      const e = entries[i];
      scratch.costs[i] = typeof e.cost === 'function' ? e.cost(req) : e.cost;
      if (e.keyed) scratch.keys[i] = keyOf(e.key, req);
    }
    st = native.acquireAll(scratch.handles, scratch.costs, scratch.raw, scratch.anyKeyed ? scratch.keys : undefined);
    if (st !== 0) throw failure(st, 'middleware');
    raw = scratch.raw;
    words = scratch.words;
  }
  const allowed = raw[0] === 1;
  const deniedBy = allowed ? 0 : words[1] | 0;
  const decisions = new Array(n);
  for (let i = 0; i < n; i++) {
    const e = entries[i];
    // The grants the library gave back when a later limit denied read as zero: what the
    // client is told of those limits is what they hold now (a peek).
    decisions[i] = i < deniedBy
      ? (e.keyed ? e.limit.peekKey(scratch.keys[i], scratch.costs[i]) : e.limit.peek(scratch.costs[i]))
      : readDecisionAt(raw, words, DECISIONS_AT + 16 * i);
  }
  return new RequestDecision(allowed, decisions, entries);
}

const DECISIONS_AT = native.composedDecisionsOffset >> 2;

// What the composed checks of one set of entries use, made once: with fixed costs, the
// composition prepared in the addon; with a cost computed per request, the arrays passed
// each call and the buffer the outcome is written into.
const scratches = new WeakMap();
function scratchOf(entries) {
  let s = scratches.get(entries);
  if (s === undefined) {
    const fixed = entries.every((e) => typeof e.cost !== 'function');
    const limits = entries.map((e) => e.limit);
    let h = null;
    if (fixed) {
      h = native.prepareAll(limits.map((l) => l._h), entries.map((e) => e.cost), entries.map((e) => e.keyed));
      if (typeof h === 'number') throw preparedFailure(h, 'middleware', limits);
    }
    const raw = fixed ? null : new Uint8Array(native.composedSize);
    s = {
      prepared: h,
      limits,
      keyed: [],
      raw,
      words: raw && new Uint32Array(raw.buffer),
      handles: limits.map((l) => l._h),
      costs: entries.map((e) => (typeof e.cost === 'function' ? 1 : e.cost)),
      keys: new Array(entries.length).fill(undefined),
      anyKeyed: entries.some((e) => e.keyed),
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

/**
 * The `RateLimit` and `RateLimit-Policy` fields of an admitted request over `entries` (rate
 * limits only), set on `res` through `set`: the values rateLimitHeaders renders (the test of
 * the middleware's headers compares them), from pieces kept per set of entries: each limit's
 * `"name";r=` and the policy list, joined again only when a limit's item changes (read at
 * most once a second per limit).
 */
function setAdmittedHeaders(entries, decisions, res, set) {
  let r = rendered.get(entries);
  if (r === undefined) {
    r = { prefixes: entries.map((e) => `"${e.limit.name}";r=`), items: entries.map(() => undefined), policy: '' };
    rendered.set(entries, r);
  }
  const now = Date.now();
  let changed = false;
  for (let i = 0; i < entries.length; i++) {
    const item = policyItem(entries[i].limit, now);
    if (item !== r.items[i]) {
      r.items[i] = item;
      changed = true;
    }
  }
  if (changed) r.policy = r.items.filter((x) => x !== null).join(', ');
  let rateLimit = '';
  for (let i = 0; i < entries.length; i++) {
    if (r.items[i] === null) continue;
    if (rateLimit !== '') rateLimit += ', ';
    rateLimit += r.prefixes[i] + decisions[i].remaining + ';t=' + ceilSecs(decisions[i].resetAfterNs);
  }
  if (rateLimit !== '') set(res, 'RateLimit', rateLimit);
  if (r.policy !== '') set(res, 'RateLimit-Policy', r.policy);
}
const rendered = new WeakMap();
const setHeader = (res, k, v) => res.setHeader(k, v);
const replyHeader = (reply, k, v) => reply.header(k, v);

function denialBody(opts) {
  return opts.message !== undefined ? opts.message : 'Too Many Requests\n';
}

/**
 * The entries of `opts`, split: `decided` (rate limits, one all-or-nothing decision) and `held`
 * (adaptive concurrency limits, a permit held for the request).
 */
function planOf(opts) {
  const entries = entriesOf(opts);
  return { decided: entries.filter((e) => !e.adaptive), held: entries.filter((e) => e.adaptive) };
}

/**
 * A permit of every held limit for the request (of the request's key for a keyed one), and
 * their header fields (the permits of the limit, or of that key, and those left, read at the
 * grant); when one has none free, `{permits: null, headers}` (the permits taken given back
 * unused, `Retry-After` about one request's time, at least a second).
 */
function hold(held, req) {
  const permits = [];
  let rateLimit = '';
  let policy = '';
  for (const e of held) {
    const key = e.keyed ? keyOf(e.key, req) : undefined;
    let p;
    let s;
    try {
      p = e.limit.tryAcquireAdaptive(key);
      s = e.limit.adaptiveStatus(key);
    } catch (err) {
      // A key the library refuses (empty, too long): the permits taken go back unused.
      if (p) permits.push(p);
      for (const h of permits) h.release('dropped');
      throw err;
    }
    const [r, q] = adaptiveItems(e.limit.name, s);
    if (p === null) {
      for (const h of permits) h.release('dropped');
      const rttUs = s.rttRecentUs || 1e6;
      const retry = Math.max(ceilSecs(Math.round(rttUs * 1e3)), 1);
      return { permits: null, headers: { 'RateLimit': r, 'RateLimit-Policy': q, 'Retry-After': String(retry) } };
    }
    permits.push(p);
    rateLimit += rateLimit === '' ? r : `, ${r}`;
    policy += policy === '' ? q : `, ${q}`;
  }
  return { permits, headers: { 'RateLimit': rateLimit, 'RateLimit-Policy': policy } };
}

/** `a` with the fields of `b` added (one list per field; the larger Retry-After). */
function merged(a, b) {
  const out = { ...a };
  for (const [name, value] of Object.entries(b)) {
    if (out[name] === undefined) out[name] = value;
    else if (name === 'Retry-After') out[name] = String(Math.max(Number(out[name]), Number(value)));
    else out[name] = `${out[name]}, ${value}`;
  }
  return out;
}

/** The header fields of a request: the decided limits' (`result`, or null), the held ones'
 *  (`holding`, or null), merged. */
function headersOf(result, holding) {
  if (holding === null) return result.headers;
  return result === null ? holding.headers : merged(result.headers, holding.headers);
}

/** How a request under an adaptive permit ended, from its response: a 504 is 'timeout', any
 *  other 5xx 'error', a response not sent whole 'timeout' when the server's socket timed out
 *  (`server.setTimeout`, Fastify's `connectionTimeout`) and 'dropped' when the client went
 *  away. */
function outcomeOf(res, finished, timedOut) {
  if (!finished) return timedOut ? 'timeout' : 'dropped';
  if (res.statusCode === 504) return 'timeout';
  return res.statusCode >= 500 ? 'error' : 'ok';
}

/** Release `permits` with the outcome of `res` once it is sent (or abandoned). */
function releaseOnEnd(res, permits) {
  let done = false;
  let timedOut = false;
  // The server's own listener (registered first) destroys a socket that timed out, and the
  // response's 'close' follows on a later tick: this listener has run by then.
  const socket = res.socket;
  const onTimeout = () => { timedOut = true; };
  if (socket) socket.on('timeout', onTimeout);
  const end = (finished) => {
    if (done) return;
    done = true;
    if (socket) socket.off('timeout', onTimeout); // a kept-alive socket serves other requests
    const outcome = outcomeOf(res, finished, timedOut);
    for (const p of permits) p.release(outcome);
  };
  res.once('finish', () => end(true));
  res.once('close', () => end(res.writableFinished));
}

/** Answer a request that got no adaptive permit: 503 Service Unavailable (the server is at
 *  capacity; a 429 would say the client sent too much) with Retry-After and, unless headers
 *  are off, the RateLimit fields. */
function refuse(res, headers, sendHeaders, send) {
  const set = res.header ? (k, v) => res.header(k, v) : (k, v) => res.setHeader(k, v);
  if (sendHeaders) {
    if (headers['RateLimit']) set('RateLimit', headers['RateLimit']);
    if (headers['RateLimit-Policy']) set('RateLimit-Policy', headers['RateLimit-Policy']);
  }
  set('Retry-After', headers['Retry-After'] || '1');
  send(503, 'text/plain; charset=utf-8', 'Service Unavailable: at capacity, retry later\n');
}

/**
 * `(req, res, next)` middleware for node:http, Express and Connect.
 *
 * Options: `limits` (a Limit, or an array of Limits or {limit, key, cost}); `key(req)` for
 * keyed limits (default: `req.ip`, else the socket's remote address); `cost` (a number or
 * `cost(req)`); `headers` (default true: `RateLimit` and `RateLimit-Policy` on every
 * response); `statusCode` (default 429); `message` (the denial's body); `skip(req)`;
 * `onLimited(req, res, result)` to answer a denial yourself.
 *
 * An adaptive concurrency limit among `limits` is held, not decided: a permit is taken for the
 * request before the other limits decide (none free: 503 with Retry-After) and released when
 * the response is sent, reporting its outcome ('error' for a 5xx, 'timeout' for a 504,
 * 'dropped' for a response never sent whole, else 'ok') and the time since the grant; a
 * request another limit denies gives it back unused. Its RateLimit items are
 * `"name";r=LEFT` and `"name";q=PERMITS;qu="concurrent-requests"`. A keyed adaptive limit is
 * held per request key: `{limit, key(req)}` (or the `key` option; required), the items those
 * of the key.
 */
function middleware(opts = {}) {
  const { decided: entries, held } = planOf(opts);
  const statusCode = opts.statusCode || 429;
  const sendHeaders = opts.headers !== false;
  return function shmlimitMiddleware(req, res, next) {
    if (opts.skip && opts.skip(req)) {
      if (next) next();
      return;
    }
    let result;
    let holding = null;
    try {
      if (held.length > 0) {
        holding = hold(held, req);
        if (holding.permits === null) {
          refuse(res, holding.headers, sendHeaders, (code, type, body) => {
            res.statusCode = code;
            res.setHeader('Content-Type', type);
            res.end(body);
          });
          return;
        }
      }
      result = entries.length > 0 ? decide(entries, req) : null;
    } catch (err) {
      if (holding && holding.permits) for (const p of holding.permits) p.release('dropped');
      if (next) next(err);
      else throw err;
      return;
    }
    if (result !== null) req.rateLimit = result;
    if (sendHeaders && holding === null && result !== null && result.allowed) {
      // The common case (rate limits only, admitted): the fields set from kept pieces.
      setAdmittedHeaders(entries, result.decisions, res, setHeader);
      if (next) next();
      return;
    }
    // Rendered only when sent (or for a denial's Retry-After): RequestDecision renders lazily.
    const headers = sendHeaders || (result !== null && !result.allowed) ? headersOf(result, holding) : null;
    if (sendHeaders) {
      if (headers['RateLimit']) res.setHeader('RateLimit', headers['RateLimit']);
      if (headers['RateLimit-Policy']) res.setHeader('RateLimit-Policy', headers['RateLimit-Policy']);
    }
    if (result === null || result.allowed) {
      if (holding !== null) releaseOnEnd(res, holding.permits);
      if (next) next();
      return;
    }
    if (holding !== null) for (const p of holding.permits) p.release('dropped');
    if (headers['Retry-After']) res.setHeader('Retry-After', headers['Retry-After']);
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
  let held;
  try {
    ({ decided: entries, held } = planOf(opts));
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
    let holding = null;
    try {
      if (held.length > 0) {
        holding = hold(held, request);
        if (holding.permits === null) {
          refuse(reply, holding.headers, sendHeaders, (code, type, body) => reply.code(code).type(type).send(body));
          return;
        }
      }
      result = entries.length > 0 ? decide(entries, request) : null;
    } catch (err) {
      if (holding && holding.permits) for (const p of holding.permits) p.release('dropped');
      hookDone(err);
      return;
    }
    if (result !== null) request.rateLimit = result;
    if (sendHeaders && holding === null && result !== null && result.allowed) {
      setAdmittedHeaders(entries, result.decisions, reply, replyHeader);
      hookDone();
      return;
    }
    const headers = sendHeaders || (result !== null && !result.allowed) ? headersOf(result, holding) : null;
    if (sendHeaders) {
      if (headers['RateLimit']) reply.header('RateLimit', headers['RateLimit']);
      if (headers['RateLimit-Policy']) reply.header('RateLimit-Policy', headers['RateLimit-Policy']);
    }
    if (result === null || result.allowed) {
      if (holding !== null) releaseOnEnd(reply.raw, holding.permits);
      hookDone();
      return;
    }
    if (holding !== null) for (const p of holding.permits) p.release('dropped');
    if (headers['Retry-After']) reply.header('Retry-After', headers['Retry-After']);
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
    if (entries.some((e) => e.adaptive)) throw new TypeError('decideRequest: an adaptive concurrency limit holds a permit for the whole request; use middleware or fastifyPlugin');
    compiled.set(opts, entries);
  }
  return decide(entries, req);
}

module.exports = { middleware, fastifyPlugin, decideRequest };
