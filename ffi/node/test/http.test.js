'use strict';
// The middleware behind real servers (node:http in 4 cluster workers sharing one port, Express,
// Fastify) and real clients: admitted counts across workers and the headers clients are told.
const assert = require('node:assert/strict');
const cluster = require('node:cluster');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { freePort, httpGet, tmpdir } = require('./helpers');

const HOUR = 3600 * 1000;

// One request of `user` (the x-user header).
function get(port, user, pathname = '/') {
  return httpGet(port, pathname, { headers: user ? { 'x-user': user } : {} });
}

function limits(t) {
  const file = path.join(tmpdir(t), 'http.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    global: shmlimit.fixedWindow({ limit: 1000, window: HOUR, aligned: 'monotonic' }),
    per_user: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 20, keyed: { capacity: 1024 } }),
  });
  t.after(() => limiter.close());
  return { file, limiter };
}

test('4 cluster workers behind one port admit exactly one budget per user', { timeout: 60000 }, async (t) => {
  const { file, limiter } = limits(t);
  const port = await freePort();
  cluster.setupPrimary({ exec: path.join(__dirname, 'fixtures', 'http-worker.js') });
  const workers = [0, 1, 2, 3].map(() => cluster.fork({ SHMLIMIT_TEST_PATH: file, SHMLIMIT_TEST_PORT: String(port) }));
  t.after(() => workers.forEach((w) => w.isDead() || w.kill('SIGKILL')));
  await Promise.all(workers.map((w) => new Promise((resolve, reject) => {
    w.once('message', (m) => (m.type === 'listening' ? resolve() : reject(new Error(String(m)))));
    w.once('exit', () => reject(new Error('worker exited')));
  })));

  // 100 requests of alice at once, 10 of bob: 20 and 10 admitted, whichever workers answer.
  const replies = await Promise.all([
    ...Array.from({ length: 100 }, () => get(port, 'alice')),
    ...Array.from({ length: 10 }, () => get(port, 'bob')),
  ]);
  const alice = replies.slice(0, 100);
  const bob = replies.slice(100);
  assert.equal(alice.filter((r) => r.status === 200).length, 20);
  assert.equal(alice.filter((r) => r.status === 429).length, 80);
  assert.ok(bob.every((r) => r.status === 200));
  const pids = new Set(replies.map((r) => r.headers['x-worker']));
  assert.ok(pids.size >= 2, `requests reached ${pids.size} worker(s)`);
  t.diagnostic(`110 requests answered by ${pids.size} workers`);

  // Denials consumed nothing on the global limit (their grants there were refunded): 30
  // admissions hold, and after a peek of one, 969 of 1000 remain.
  assert.equal(limiter.limit('global').peek().remaining, 969);
  assert.equal(limiter.limit('per_user').stats().denied, 80);

  // What the clients were told, as the library renders it.
  const policy = '"global";q=1000;w=3600, "per_user";q=20;w=72000';
  const admitted = alice.filter((r) => r.status === 200).map((r) => r.headers);
  for (const h of admitted) {
    assert.equal(h['ratelimit-policy'], policy);
    assert.match(h.ratelimit, /^"global";r=\d+;t=\d+, "per_user";r=\d+;t=\d+$/);
    assert.equal(h['retry-after'], undefined);
  }
  const remaining = admitted.map((h) => Number(/"per_user";r=(\d+)/.exec(h.ratelimit)[1])).sort((a, b) => a - b);
  assert.deepEqual(remaining, Array.from({ length: 20 }, (_, i) => i), 'each admission saw one fewer remaining');
  const denied = alice.find((r) => r.status === 429);
  assert.equal(denied.headers['ratelimit-policy'], policy);
  assert.match(denied.headers.ratelimit, /"per_user";r=0;t=\d+/);
  const retryAfter = Number(denied.headers['retry-after']);
  assert.ok(retryAfter > 3500 && retryAfter <= 3600, `Retry-After: ${denied.headers['retry-after']}`);
  assert.equal(denied.body, 'Too Many Requests\n');
});

test('Express: the middleware with its default key (req.ip), headers off, onLimited', { timeout: 30000 }, async (t) => {
  const express = require('express');
  const { limiter } = limits(t);
  const app = express();
  app.get('/quiet', shmlimit.middleware({ limits: limiter.limit('per_user'), headers: false, cost: 10 }), (req, res) => res.send('quiet'));
  app.use(shmlimit.middleware({
    limits: [{ limit: limiter.limit('per_user'), cost: (req) => (req.path === '/big' ? 5 : 1) }],
    onLimited: (req, res, result) => res.status(429).json({ error: 'slow down', retryAfter: result.headers['Retry-After'] }),
  }));
  app.get('*splat', (req, res) => res.send(`ok ${req.rateLimit.decisions[0].remaining}`));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  t.after(() => server.close());
  const { port } = server.address();

  const quiet = await get(port, null, '/quiet');
  assert.equal(quiet.status, 200);
  assert.equal(quiet.headers.ratelimit, undefined, 'headers: false sends none');
  // /quiet took 10 of 127.0.0.1's 20; each /big takes 5.
  const big = await get(port, null, '/big');
  assert.equal(big.status, 200);
  assert.equal(big.body, 'ok 5');
  assert.match(big.headers.ratelimit, /^"per_user";r=5;t=\d+$/);
  assert.equal((await get(port, null, '/big')).body, 'ok 0');
  const last = await get(port, null, '/big');
  assert.equal(last.status, 429);
  assert.deepEqual(JSON.parse(last.body), { error: 'slow down', retryAfter: last.headers['retry-after'] });
  assert.ok(Number(last.headers['retry-after']) >= 1);
});

test('Fastify: the plugin answers 429 with the library\'s headers', { timeout: 30000 }, async (t) => {
  const fastify = require('fastify')();
  const { limiter } = limits(t);
  await fastify.register(shmlimit.fastifyPlugin, { limits: [limiter.limit('global'), limiter.limit('per_user')], key: (req) => req.headers['x-user'] || req.ip });
  fastify.get('/', async (req) => ({ remaining: req.rateLimit.decisions[1].remaining }));
  await fastify.listen({ port: 0, host: '127.0.0.1' });
  t.after(() => fastify.close());
  const { port } = fastify.server.address();
  const statuses = [];
  let lastOk;
  let denied;
  for (let i = 0; i < 22; i++) {
    const r = await get(port, 'carol');
    statuses.push(r.status);
    if (r.status === 200) lastOk = r;
    else denied = r;
  }
  assert.deepEqual(statuses, [...Array(20).fill(200), 429, 429]);
  assert.deepEqual(JSON.parse(lastOk.body), { remaining: 0 });
  assert.equal(lastOk.headers['ratelimit-policy'], '"global";q=1000;w=3600, "per_user";q=20;w=72000');
  assert.match(denied.headers.ratelimit, /^"global";r=979;t=\d+, "per_user";r=0;t=\d+$/);
  assert.ok(Number(denied.headers['retry-after']) > 3500);
  assert.equal((await get(port, 'dave')).status, 200);
});
