'use strict';
// The middleware holding an adaptive concurrency permit per request: 4 node:http cluster
// workers sharing one port and one limit of 2 never run more than 2 requests at once, the rest
// get 503 with Retry-After, the RateLimit fields say qu="concurrent-requests"; each request's
// outcome and latency reach the limit (a 5xx: no ok sample, an abandoned response: dropped);
// Fastify's plugin holds the permit the same way.
const assert = require('node:assert/strict');
const cluster = require('node:cluster');
const http = require('node:http');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { clearOfRemeasure, freePort, httpGet, tmpdir } = require('./helpers');

const get = httpGet;

function mostAtOnce(spans) {
  const events = spans.flatMap(([t0, t1]) => [[t0, 1], [t1, -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let most = 0;
  for (const [, step] of events) {
    now += step;
    most = Math.max(most, now);
  }
  return most;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('4 cluster workers run at most the adaptive limit at once; the rest get 503', { timeout: 60000 }, async (t) => {
  await clearOfRemeasure(5); // its samples are read back
  const file = path.join(tmpdir(t), 'http-adaptive.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, { dep: shmlimit.adaptiveConcurrency({ min: 2, max: 2 }) });
  t.after(() => limiter.close());
  const port = await freePort();
  cluster.setupPrimary({ exec: path.join(__dirname, 'fixtures', 'http-adaptive-worker.js') });
  const workers = [0, 1, 2, 3].map(() => cluster.fork({ SHMLIMIT_TEST_PATH: file, SHMLIMIT_TEST_PORT: String(port) }));
  t.after(() => workers.forEach((w) => w.isDead() || w.kill('SIGKILL')));
  await Promise.all(workers.map((w) => new Promise((resolve, reject) => {
    w.once('message', (m) => (m.type === 'listening' ? resolve() : reject(new Error(String(m)))));
    w.once('exit', () => reject(new Error('worker exited')));
  })));

  const spans = [];
  const pids = new Set();
  const statuses = [];
  for (let round = 0; round < 3; round++) {
    const results = await Promise.all(Array.from({ length: 8 }, () => get(port, '/?ms=300')));
    for (const r of results) {
      statuses.push(r.status);
      assert.equal(r.headers['ratelimit-policy'], '"dep";q=2;qu="concurrent-requests"');
      if (r.status === 200) {
        const data = JSON.parse(r.body);
        spans.push([data.t0, data.t1]);
        pids.add(data.pid);
        assert.ok(['"dep";r=0', '"dep";r=1'].includes(r.headers['ratelimit']), r.headers['ratelimit']);
        assert.equal(r.headers['retry-after'], undefined);
      } else {
        assert.equal(r.status, 503, r.body);
        assert.equal(r.headers['ratelimit'], '"dep";r=0');
        assert.ok(Number(r.headers['retry-after']) >= 1);
      }
    }
  }
  assert.ok(mostAtOnce(spans) <= 2, JSON.stringify(spans));
  assert.ok(statuses.filter((s) => s === 200).length >= 3, String(statuses)); // one a round at least
  assert.ok(statuses.includes(503), String(statuses));
  // A worker releases its permit once the response is sent: the client may read the last
  // response a moment before.
  for (let i = 0; i < 1000 && limiter.limit('dep').adaptiveStatus().inFlight > 0; i++) await sleep(10);
  const s = limiter.limit('dep').adaptiveStatus();
  assert.equal(s.inFlight, 0, 'every permit came back');
  assert.ok(s.rttRecentUs >= 300000, `the latency was reported: ${s.rttRecentUs}`);
  t.diagnostic(`${statuses.filter((x) => x === 200).length} admitted of ${statuses.length}, by ${pids.size} workers`);
});

test('each request reports its outcome and latency; a denied one gives its permit back', { timeout: 30000 }, async (t) => {
  await clearOfRemeasure(3); // its samples are read back
  const file = path.join(tmpdir(t), 'outcomes.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    api: shmlimit.tokenBucket({ rate: 4, per: 3600 * 1000 }),
    dep: shmlimit.adaptiveConcurrency({ min: 2, max: 8 }),
  });
  t.after(() => limiter.close());
  const dep = limiter.limit('dep');
  const limit = shmlimit.middleware({ limits: [limiter.limit('api'), dep] });
  const server = http.createServer((req, res) => limit(req, res, () => {
    // A failure takes longer than a success: reported as ok, it would move the recent RTT
    // to 200 ms.
    const ms = req.url === '/slow' ? 50 : 200;
    setTimeout(() => {
      if (req.url === '/fail') res.statusCode = 500;
      if (req.url === '/abandon') return; // never answered: the client gives up
      res.end('done');
    }, ms);
  }));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  const { port } = server.address();

  let r = await get(port, '/slow');
  assert.equal(r.status, 200);
  assert.equal(r.headers['ratelimit'], '"api";r=3;t=900, "dep";r=1');
  assert.equal(r.headers['ratelimit-policy'], '"api";q=4;w=3600, "dep";q=2;qu="concurrent-requests"');
  let s = dep.adaptiveStatus();
  assert.ok(s.rttRecentUs >= 50000 && s.rttRecentUs < 150000, `the latency is a sample: ${s.rttRecentUs}`);
  await sleep(30);
  r = await get(port, '/fail');
  assert.equal(r.status, 500);
  s = dep.adaptiveStatus();
  assert.equal(s.inFlight, 0);
  assert.ok(s.rttRecentUs < 150000, `a 500 was reported as ok: ${s.rttRecentUs}`);
  await sleep(30);
  r = await get(port, '/abandon', { abortAfterMs: 100 });
  assert.equal(r.aborted, true);
  await sleep(250); // the handler's timer fires after the client left
  s = dep.adaptiveStatus();
  assert.equal(s.inFlight, 0, 'an abandoned request gives its permit back');
  assert.ok(s.rttRecentUs < 150000, `an abandoned request was reported as ok: ${s.rttRecentUs}`);
  // The bucket (4 per hour) has one left, then denies: 429, the permit given back unused.
  await get(port, '/slow');
  const before = dep.adaptiveStatus();
  r = await get(port, '/slow');
  assert.equal(r.status, 429);
  assert.ok(Number(r.headers['retry-after']) >= 1);
  const after = dep.adaptiveStatus();
  assert.deepEqual([after.inFlight, after.rttRecentUs, after.limit], [0, before.rttRecentUs, before.limit]);

  assert.throws(() => shmlimit.middleware({ limits: [{ limit: dep, key: () => 'k' }] }), /no key or cost/);
  assert.throws(() => shmlimit.decideRequest({ limits: [dep] }, {}), /adaptive concurrency/);
  // The rendering is the library's.
  const admitted = limiter.limit('api').peek();
  const { libraryRateLimitHeaders } = require('../lib/compose');
  assert.deepEqual(shmlimit.rateLimitHeaders([[dep, admitted]]), libraryRateLimitHeaders([[dep, admitted]]));
});

test('a request the server times out reports a timeout', { timeout: 30000 }, async (t) => {
  const file = path.join(tmpdir(t), 'server-timeout.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, { dep: shmlimit.adaptiveConcurrency({ min: 2, max: 8 }) });
  t.after(() => limiter.close());
  const dep = limiter.limit('dep');
  // The outcome each permit is released with.
  const outcomes = [];
  const tryAcquireAdaptive = dep.tryAcquireAdaptive.bind(dep);
  dep.tryAcquireAdaptive = () => {
    const permit = tryAcquireAdaptive();
    if (permit) {
      const release = permit.release.bind(permit);
      permit.release = (outcome, opts) => {
        outcomes.push(outcome);
        return release(outcome, opts);
      };
    }
    return permit;
  };
  const limit = shmlimit.middleware({ limits: [dep] });
  const server = http.createServer((req, res) => limit(req, res, () => {
    if (req.url === '/hang') return; // never answered: the server's socket timeout ends it
    res.end('done');
  }));
  server.setTimeout(150);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  const { port } = server.address();

  assert.equal((await get(port, '/')).status, 200);
  assert.equal((await get(port, '/hang', { abortAfterMs: 10000 })).aborted, true);
  for (let i = 0; i < 500 && dep.adaptiveStatus().inFlight > 0; i++) await sleep(10);
  assert.equal(dep.adaptiveStatus().inFlight, 0);
  // An abandoned request (the client leaving) is still a drop.
  assert.equal((await get(port, '/hang', { abortAfterMs: 50 })).aborted, true);
  for (let i = 0; i < 500 && outcomes.length < 3; i++) await sleep(10);
  assert.deepEqual(outcomes, ['ok', 'timeout', 'dropped']);
});

test('the Fastify plugin holds an adaptive permit per request', { timeout: 30000 }, async (t) => {
  await clearOfRemeasure(3); // its samples are read back
  const file = path.join(tmpdir(t), 'fastify-adaptive.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, { dep: shmlimit.adaptiveConcurrency({ min: 1, max: 4 }) });
  t.after(() => limiter.close());
  const dep = limiter.limit('dep');
  const fastify = require('fastify')();
  await fastify.register(shmlimit.fastifyPlugin, { limits: [dep] });
  // The first request holds the only permit until the second has been refused: no timing decides
  // which of the two arrives first on a loaded machine.
  let entered;
  const inside = new Promise((resolve) => { entered = resolve; });
  let leave;
  const mayLeave = new Promise((resolve) => { leave = resolve; });
  fastify.get('/', async () => {
    const inFlight = dep.adaptiveStatus().inFlight;
    entered();
    await mayLeave;
    await sleep(200);
    return { inFlight };
  });
  await fastify.listen({ port: 0, host: '127.0.0.1' });
  t.after(() => fastify.close());
  const { port } = fastify.server.address();
  const first = get(port, '/');
  await inside;
  const b = await get(port, '/');
  leave();
  const a = await first;
  assert.equal(a.status, 200);
  assert.deepEqual(JSON.parse(a.body), { inFlight: 1 });
  assert.equal(a.headers['ratelimit-policy'], '"dep";q=1;qu="concurrent-requests"');
  assert.equal(b.status, 503);
  assert.ok(Number(b.headers['retry-after']) >= 1);
  // The permit is released on the response's 'finish', which the client may see a moment after
  // it has read the body.
  for (let i = 0; i < 1000 && dep.adaptiveStatus().inFlight > 0; i++) await sleep(10);
  assert.equal(dep.adaptiveStatus().inFlight, 0);
  assert.ok(dep.adaptiveStatus().rttRecentUs >= 200000);
});
