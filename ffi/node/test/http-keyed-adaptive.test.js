'use strict';
// The middleware holding a keyed adaptive concurrency permit per request: each request takes a
// permit of its own key (a tenant header), a key without a free permit gets 503 while another
// key is admitted, the RateLimit fields are the key's and rendered as the library renders an
// adaptive limit's, each permit is released with the request's outcome; a request without a
// key falls back to the client's address, as the keyed rate checks do; Fastify's plugin holds
// a key's permit the same way.
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { adaptiveItems, libraryRateLimitHeaders } = require('../lib/compose');
const { Decision } = require('../lib/decision');
const { clearOfRemeasure, httpGet, tmpdir } = require('./helpers');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Wait (up to 10 s) until `key` holds no permit: the middleware releases on the response's
 *  'finish', which the client may see a moment after it has read the body. */
async function drained(limit, key) {
  for (let i = 0; i < 1000 && limit.adaptiveStatus(key).inFlight > 0; i++) await sleep(10);
  return limit.adaptiveStatus(key).inFlight;
}

/** The outcome each permit of `limit` is released with, per key: `tryAcquireAdaptive` wrapped. */
function spyOutcomes(limit) {
  const outcomes = [];
  const tryAcquireAdaptive = limit.tryAcquireAdaptive.bind(limit);
  limit.tryAcquireAdaptive = (key) => {
    const permit = tryAcquireAdaptive(key);
    if (permit) {
      const release = permit.release.bind(permit);
      permit.release = (outcome, opts) => {
        outcomes.push([String(key), outcome]);
        return release(outcome, opts);
      };
    }
    return permit;
  };
  return outcomes;
}

/** A gate the handler waits at: `entered` resolves when a request is inside, `open()` lets
 *  them all out. */
function gate() {
  const g = {};
  let open;
  g.opened = new Promise((resolve) => { open = resolve; });
  g.open = open;
  let entered;
  g.entered = new Promise((resolve) => { entered = resolve; });
  g.enter = () => entered();
  return g;
}

test('each tenant holds a permit of its own key; a tenant at its limit gets 503', { timeout: 30000 }, async (t) => {
  await clearOfRemeasure(5); // a re-measure window would hold each key at its minimum anyway
  const file = path.join(tmpdir(t), 'http-keyed-adaptive.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    tenant: shmlimit.adaptiveConcurrency({ min: 1, max: 4, keyed: 16 }),
  });
  t.after(() => limiter.close());
  const tenant = limiter.limit('tenant');
  const outcomes = spyOutcomes(tenant);
  const mw = shmlimit.middleware({ limits: [{ limit: tenant, key: (req) => req.headers['x-tenant'] }] });
  const gates = { A: gate(), B: gate(), none: gate() };
  const server = http.createServer((req, res) => mw(req, res, async () => {
    const g = gates[req.headers['x-tenant'] || 'none'];
    const inFlight = {
      A: tenant.adaptiveStatus('A').inFlight,
      B: tenant.adaptiveStatus('B').inFlight,
      addr: tenant.adaptiveStatus('127.0.0.1').inFlight,
    };
    g.enter();
    await g.opened;
    if (req.url === '/fail') res.statusCode = 500;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify(inFlight));
  }));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  const { port } = server.address();
  const as = (name) => ({ headers: { 'x-tenant': name } });

  // A's first request holds A's only permit until the test lets it go.
  const firstA = httpGet(port, '/', as('A'));
  await gates.A.entered;
  const secondA = await httpGet(port, '/', as('A'));
  assert.equal(secondA.status, 503, secondA.body);
  assert.ok(Number(secondA.headers['retry-after']) >= 1, secondA.headers['retry-after']);
  assert.equal(secondA.headers['ratelimit'], '"tenant";r=0');
  assert.equal(secondA.headers['ratelimit-policy'], '"tenant";q=1;qu="concurrent-requests"');
  // B is admitted while A's permit is held: its own key.
  const b = httpGet(port, '/', as('B'));
  await gates.B.entered;
  gates.B.open();
  const rb = await b;
  assert.equal(rb.status, 200);
  assert.deepEqual(JSON.parse(rb.body), { A: 1, B: 1, addr: 0 });
  assert.equal(rb.headers['ratelimit'], '"tenant";r=0');
  assert.equal(rb.headers['ratelimit-policy'], '"tenant";q=1;qu="concurrent-requests"');
  gates.A.open();
  const ra = await firstA;
  assert.equal(ra.status, 200);
  assert.deepEqual(JSON.parse(ra.body), { A: 1, B: 0, addr: 0 });
  assert.equal(await drained(tenant, 'A'), 0);
  assert.equal(await drained(tenant, 'B'), 0);

  // No tenant header: the key falls back to the client's address, as for the keyed rate checks.
  gates.none.open();
  const rn = await httpGet(port, '/');
  assert.equal(rn.status, 200);
  assert.deepEqual(JSON.parse(rn.body), { A: 0, B: 0, addr: 1 });
  assert.equal(await drained(tenant, '127.0.0.1'), 0);

  // A 500 is released as an error; a request refused holds nothing (no release).
  gates.A = gate();
  gates.A.open();
  assert.equal((await httpGet(port, '/fail', as('A'))).status, 500);
  assert.equal(await drained(tenant, 'A'), 0);
  for (let i = 0; i < 500 && outcomes.length < 4; i++) await sleep(10);
  outcomes.sort();
  assert.deepEqual(outcomes, [['127.0.0.1', 'ok'], ['A', 'error'], ['A', 'ok'], ['B', 'ok']]);
});

test('a keyed adaptive entry needs a key function, takes no cost, and a bad key holds nothing', async (t) => {
  const file = path.join(tmpdir(t), 'keyed-refused.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    tenant: shmlimit.adaptiveConcurrency({ min: 2, max: 4, keyed: 16 }),
    plain: shmlimit.adaptiveConcurrency({ min: 2, max: 4 }),
  });
  t.after(() => limiter.close());
  const tenant = limiter.limit('tenant');
  const plain = limiter.limit('plain');
  assert.throws(() => shmlimit.middleware({ limits: [tenant] }), (e) => e instanceof TypeError && /keyed adaptive.*key: \(req\)/.test(e.message));
  assert.throws(() => shmlimit.middleware({ limits: [{ limit: tenant, key: 'A' }] }), TypeError);
  assert.throws(() => shmlimit.middleware({ limits: [{ limit: tenant, key: () => 'A', cost: 2 }] }), /no cost/);
  assert.throws(() => shmlimit.middleware({ limits: [{ limit: plain, key: () => 'A' }] }), /no key or cost/);
  // The middleware's `key` option serves a keyed adaptive entry too.
  const mw = shmlimit.middleware({ limits: [plain, tenant], key: (req) => req.headers['x-tenant'] });
  const res = new http.ServerResponse(new http.IncomingMessage(null));
  let failed = null;
  mw({ headers: { 'x-tenant': '' }, socket: {} }, res, (err) => { failed = err; });
  assert.ok(failed instanceof shmlimit.InvalidKeyError, String(failed));
  assert.equal(plain.adaptiveStatus().inFlight, 0, "the unkeyed limit's permit went back");
  assert.deepEqual(tenant.keyOccupancy(), { used: 0, slots: 16 });
});

test("a key's fields are rendered as the library renders an adaptive limit's", (t) => {
  const file = path.join(tmpdir(t), 'keyed-rendering.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    tenant: shmlimit.adaptiveConcurrency({ min: 3, max: 4, keyed: 16 }),
  });
  t.after(() => limiter.close());
  const plainFile = path.join(tmpdir(t), 'plain-rendering.shm');
  // An unkeyed adaptive limit of the same name, in the same state as key A.
  const plainLimiter = shmlimit.Limiter.createOrOpen(plainFile, { tenant: shmlimit.adaptiveConcurrency({ min: 3, max: 4 }) });
  t.after(() => plainLimiter.close());
  const tenant = limiter.limit('tenant');
  const plain = plainLimiter.limit('tenant');
  const admitted = new Decision(true, false, 0, 0, 0, null);
  const held = [];
  for (let n = 0; n <= 3; n++) {
    const s = tenant.adaptiveStatus('A');
    assert.equal(s.inFlight, plain.adaptiveStatus().inFlight);
    const [r, q] = adaptiveItems('tenant', s);
    assert.deepEqual({ 'RateLimit': r, 'RateLimit-Policy': q }, libraryRateLimitHeaders([[plain, admitted]]), `${n} held`);
    if (n < 3) held.push(tenant.tryAcquireAdaptive('A'), plain.tryAcquireAdaptive());
  }
  for (const p of held) p.release('dropped');
});

test('the Fastify plugin holds a permit of the request key', { timeout: 30000 }, async (t) => {
  await clearOfRemeasure(3);
  const file = path.join(tmpdir(t), 'fastify-keyed-adaptive.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    tenant: shmlimit.adaptiveConcurrency({ min: 1, max: 4, keyed: 16 }),
  });
  t.after(() => limiter.close());
  const tenant = limiter.limit('tenant');
  const fastify = require('fastify')();
  // The key function receives Fastify's request.
  await fastify.register(shmlimit.fastifyPlugin, { limits: [{ limit: tenant, key: (request) => request.headers['x-tenant'] }] });
  const g = gate();
  fastify.get('/', async (request) => {
    const inFlight = tenant.adaptiveStatus('A').inFlight;
    if (request.headers['x-tenant'] === 'A') {
      g.enter();
      await g.opened;
    }
    return { inFlight };
  });
  await fastify.listen({ port: 0, host: '127.0.0.1' });
  t.after(() => fastify.close());
  const { port } = fastify.server.address();
  const first = httpGet(port, '/', { headers: { 'x-tenant': 'A' } });
  await g.entered;
  const refused = await httpGet(port, '/', { headers: { 'x-tenant': 'A' } });
  const other = await httpGet(port, '/', { headers: { 'x-tenant': 'B' } });
  g.open();
  const a = await first;
  assert.equal(a.status, 200);
  assert.deepEqual(JSON.parse(a.body), { inFlight: 1 });
  assert.equal(a.headers['ratelimit'], '"tenant";r=0');
  assert.equal(refused.status, 503);
  assert.equal(refused.headers['ratelimit'], '"tenant";r=0');
  assert.ok(Number(refused.headers['retry-after']) >= 1);
  assert.equal(other.status, 200);
  assert.deepEqual(JSON.parse(other.body), { inFlight: 1 });
  assert.equal(await drained(tenant, 'A'), 0);
  assert.equal(await drained(tenant, 'B'), 0);
});
