'use strict';
// ShmlimitStore under express-rate-limit itself, in one process (test/stores-cluster.test.js
// has the workers): the Store calls as the middleware makes them, and the store's own answers.
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const { test } = require('node:test');

const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { ShmlimitStore } = require('shmlimit/express-rate-limit');
const shmlimit = require('..');
const { tmpdir } = require('./helpers');

function serve(t, limiterOptions, handler = (req, res) => res.send('ok')) {
  const app = express();
  const limiter = rateLimit({ standardHeaders: 'draft-7', legacyHeaders: false, ...limiterOptions });
  app.use(limiter);
  app.get('/', handler);
  app.get('/fail', (req, res) => res.status(500).send('no'));
  // Errors passed on by the middleware (a store that threw) are 500s naming the error.
  app.use((err, req, res, next) => { void next; res.status(500).send(`${err.name}: ${err.message}`); });
  const server = app.listen(0, '127.0.0.1');
  t.after(() => server.close());
  return new Promise((resolve) => server.on('listening', () => resolve({ limiter, port: server.address().port })));
}

function get(port, pathname = '/') {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: pathname, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    }).on('error', reject);
  });
}

async function statuses(port, n, pathname) {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await get(port, pathname)).status);
  return out;
}

test('three requests pass and the fourth is limited, as express-rate-limit\'s store test asks of every store', async (t) => {
  const store = new ShmlimitStore({ path: path.join(tmpdir(t), 'erl.shm') });
  const { port } = await serve(t, { windowMs: 60_000, limit: 3, store });
  assert.deepEqual(await statuses(port, 4), [200, 200, 200, 429]);
  const limited = await get(port);
  assert.match(limited.headers.ratelimit, /^limit=3, remaining=0, reset=(59|60)$/);
  assert.equal(limited.headers['ratelimit-policy'], '3;w=60');
  assert.ok(Number(limited.headers['retry-after']) <= 60);
});

test('two stores on one file (two workers) count one limit; prefixes and names keep limits apart', async (t) => {
  const file = path.join(tmpdir(t), 'erl.shm');
  const a = await serve(t, { windowMs: 60_000, limit: 4, store: new ShmlimitStore({ path: file }) });
  const b = await serve(t, { windowMs: 60_000, limit: 4, store: new ShmlimitStore({ path: file }) });
  assert.deepEqual([...await statuses(a.port, 2), ...await statuses(b.port, 3)], [200, 200, 200, 200, 429]);
  const other = await serve(t, { windowMs: 60_000, limit: 4, store: new ShmlimitStore({ path: file, prefix: 'other:' }) });
  assert.deepEqual(await statuses(other.port, 1), [200]);
  const s = new ShmlimitStore({ path: file });
  s.init({ windowMs: 60_000 });
  assert.equal(s.get('127.0.0.1').totalHits, 5, 'limited requests count too, as in the MemoryStore');
  assert.equal(s.get('::ffff:127.0.0.1'), undefined);
});

test('decrement (skipSuccessfulRequests), resetKey, get and resetAll through the middleware', async (t) => {
  const store = new ShmlimitStore({ path: path.join(tmpdir(t), 'erl.shm') });
  const { limiter, port } = await serve(t, { windowMs: 60_000, limit: 2, store, skipSuccessfulRequests: true, keyGenerator: () => 'k' });
  assert.deepEqual(await statuses(port, 5), [200, 200, 200, 200, 200], 'successful requests are taken back');
  assert.equal(store.get('k').totalHits, 0);
  assert.deepEqual(await statuses(port, 3, '/fail'), [500, 500, 429]);
  const info = await limiter.getKey('k');
  assert.equal(info.totalHits, 3);
  assert.ok(info.resetTime instanceof Date && info.resetTime.getTime() > Date.now() + 59_000);
  await limiter.resetKey('k');
  assert.equal(store.get('k'), undefined);
  assert.deepEqual(await statuses(port, 1, '/fail'), [500]);
  store.resetAll();
  assert.equal(store.get('k'), undefined);
});

test('the store\'s own answers: resetTime, localKeys, prefix, a decrement never below zero', (t) => {
  const store = new ShmlimitStore({ path: path.join(tmpdir(t), 'erl.shm'), prefix: 'p:', keys: 128 });
  assert.equal(store.localKeys, false);
  assert.equal(store.prefix, 'p:');
  assert.throws(() => store.increment('x'), /init\(\{ windowMs \}\) was not called/);
  store.init({ windowMs: 1000 });
  const before = Date.now();
  const first = store.increment('x');
  assert.equal(first.totalHits, 1);
  assert.ok(first.resetTime.getTime() >= before + 1000 && first.resetTime.getTime() <= Date.now() + 1010);
  assert.equal(store.increment('x').totalHits, 2);
  store.decrement('x');
  store.decrement('x');
  store.decrement('x');
  assert.equal(store.get('x').totalHits, 0);
  assert.equal(store.counters.count('p:x').count, 0, 'keys carry the prefix in the file');
  store.shutdown();
});

test('bad windows and keys are the package\'s errors; the middleware passes them on, or passes the request', async (t) => {
  const file = path.join(tmpdir(t), 'erl.shm');
  const store = new ShmlimitStore({ path: file });
  for (const windowMs of [0, -1, NaN, 1e15, 0.5]) {
    assert.throws(() => store.init({ windowMs }), shmlimit.InvalidParameterError, String(windowMs));
  }
  assert.throws(() => new ShmlimitStore({}), /options\.path must name the shmlimit file/);
  const long = 'x'.repeat(2000);
  const strict = await serve(t, { windowMs: 1000, limit: 5, store: new ShmlimitStore({ path: file }), keyGenerator: () => long });
  const r = await get(strict.port);
  assert.equal(r.status, 500);
  assert.match(r.body, /InvalidKeyError: .*2003 bytes: keys are at most 1024 bytes/);
  const open = await serve(t, { windowMs: 1000, limit: 5, store: new ShmlimitStore({ path: file }), keyGenerator: () => long, passOnStoreError: true });
  assert.equal((await get(open.port)).status, 200);
});

test('onConflict: a file created with other options is refused by default and adopted when asked', (t) => {
  const file = path.join(tmpdir(t), 'conflict.shm');
  const first = new ShmlimitStore({ path: file, keys: 64 });
  first.init({ windowMs: 60000 });
  assert.equal(first.increment('a').totalHits, 1);
  assert.throws(() => new ShmlimitStore({ path: file, keys: 128 }), shmlimit.DefinitionConflictError);
  assert.throws(() => new ShmlimitStore({ path: file, keys: 128, onConflict: 'refuse' }), shmlimit.DefinitionConflictError);
  assert.throws(() => new ShmlimitStore({ path: file, keys: 128, onConflict: 'sometimes' }), /onConflict must be 'refuse' or 'adopt'/);
  // onConflict alone is no layout: the file is attached as it is, its count kept.
  const alone = new ShmlimitStore({ path: file, onConflict: 'adopt' });
  alone.init({ windowMs: 60000 });
  assert.equal(alone.get('a').totalHits, 1);
  assert.equal(shmlimit.Limiter.open(file).definitions()['express-rate-limit'].keyed.capacity, 64);
  const adopted = new ShmlimitStore({ path: file, keys: 128, onConflict: 'adopt' });
  adopted.init({ windowMs: 60000 });
  assert.equal(shmlimit.Limiter.open(file).definitions()['express-rate-limit'].keyed.capacity, 128);
  assert.equal(adopted.increment('b').totalHits, 1);
});
