'use strict';
// express-rate-limit over ShmlimitStore and rate-limiter-flexible's RateLimiterShmlimit behind
// an Express 5 app in 4 node:cluster workers sharing one port, with real HTTP clients: every
// request counts under one key, so the 200s of each window must number at most the limit,
// each carrying a count no other admission got (no worker lost another's hit), and the
// headers must say what the store counted. One worker is SIGKILLed mid-run: the hits it
// counted stay counted, and the bound holds for the workers left.
const assert = require('node:assert/strict');
const cluster = require('node:cluster');
const path = require('node:path');
const { test } = require('node:test');

const { tmpdir } = require('./helpers');
const { LIMIT, WINDOW_MS, load, checkErl, checkRlf } = require('./stores-checks');

const WORKERS = 4;

async function startWorkers(t, file) {
  cluster.setupPrimary({ exec: path.join(__dirname, 'fixtures', 'stores-worker.js'), silent: false });
  const env = {
    SHMLIMIT_TEST_PATH: file,
    SHMLIMIT_TEST_LIMIT: String(LIMIT),
    SHMLIMIT_TEST_WINDOW_MS: String(WINDOW_MS),
    SHMLIMIT_TEST_STORE: process.env.SHMLIMIT_TEST_STORE || '',
  };
  const workers = [];
  for (let i = 0; i < WORKERS; i++) workers.push(cluster.fork(env));
  t.after(() => workers.forEach((w) => { if (!w.isDead()) w.kill('SIGKILL'); }));
  const ports = await Promise.all(workers.map((w) => new Promise((resolve, reject) => {
    w.on('message', (m) => { if (m.type === 'listening') resolve(m.port); });
    w.once('exit', (code) => reject(new Error(`worker exited with ${code} before listening`)));
  })));
  assert.ok(ports.every((p) => p === ports[0]), `workers share one port: ${ports}`);
  return { workers, port: ports[0] };
}

test('express-rate-limit with ShmlimitStore: 4 workers admit one limit per window, a SIGKILLed worker loses nothing', { timeout: 60000 }, async (t) => {
  const file = path.join(tmpdir(t), 'erl.shm');
  const { workers, port } = await startWorkers(t, file);
  const answers = await load(port, '/erl', () => workers[0].process.kill('SIGKILL'));
  const ok = checkErl(answers);
  assert.ok(new Set(ok.map((a) => a.json.pid)).size >= 3, 'admissions came from 3 workers or more');
  assert.ok(ok.some((a) => a.json.pid === workers[0].process.pid), 'the killed worker admitted requests before it died');
});

test('rate-limiter-flexible with RateLimiterShmlimit: 4 workers consume one budget per duration, a SIGKILLed worker loses nothing', { timeout: 60000 }, async (t) => {
  const file = path.join(tmpdir(t), 'rlf.shm');
  const { workers, port } = await startWorkers(t, file);
  const answers = await load(port, '/rlf', () => workers[0].process.kill('SIGKILL'));
  const ok = checkRlf(answers);
  assert.ok(new Set(ok.map((a) => a.json.pid)).size >= 3, 'admissions came from 3 workers or more');
  assert.ok(ok.some((a) => a.json.pid === workers[0].process.pid), 'the killed worker admitted requests before it died');
});
