'use strict';
// express-rate-limit over ShmlimitStore and rate-limiter-flexible's RateLimiterShmlimit behind
// an Express 5 app in 4 node:cluster workers sharing one port, with real HTTP clients: every
// request counts under one key, so the 200s of each window must number at most the limit,
// each carrying a count no other admission got (no worker lost another's hit), and the
// headers must say what the store counted. One worker is SIGKILLed mid-run: the hits it
// counted stay counted, and the bound holds for the workers left.
const assert = require('node:assert/strict');
const cluster = require('node:cluster');
const http = require('node:http');
const path = require('node:path');
const { test } = require('node:test');

const { tmpdir } = require('./helpers');

const WORKERS = 4;
const CLIENTS = 6;
const LIMIT = 50;
const WINDOW_MS = 2000;
const RUN_MS = 4500;
const KILL_AT_MS = 1000;

function get(port, pathname) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: pathname, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
      res.on('error', () => resolve(null));
    });
    // A connection to the killed worker fails: not an answer.
    req.on('error', () => resolve(null));
    req.setTimeout(5000, () => req.destroy());
    req.end();
  });
}

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

// Clients for RUN_MS; worker 0 is SIGKILLed at KILL_AT_MS. Returns the answers.
async function load(port, pathname, workers) {
  const answers = [];
  const end = Date.now() + RUN_MS;
  const killer = setTimeout(() => workers[0].process.kill('SIGKILL'), KILL_AT_MS);
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (Date.now() < end) {
      const a = await get(port, pathname);
      if (a) answers.push({ ...a, at: Date.now() });
    }
  }));
  clearTimeout(killer);
  return answers;
}

// The admitted answers grouped by window: a window's `endsAt` as each worker computed it
// (Date.now() + what the store said was left) differs by a few ms between workers.
function windows(admitted, endsAt) {
  const sorted = admitted.slice().sort((a, b) => endsAt(a) - endsAt(b));
  const groups = [];
  for (const a of sorted) {
    const last = groups[groups.length - 1];
    if (last && endsAt(a) - endsAt(last[0]) < WINDOW_MS / 4) last.push(a);
    else groups.push([a]);
  }
  return groups;
}

function checkWindows(groups, countOf, what) {
  assert.ok(groups.length >= 2, `${what}: ${groups.length} windows seen`);
  for (const g of groups) {
    const counts = g.map(countOf);
    assert.ok(g.length <= LIMIT, `${what}: ${g.length} admitted in one window of ${WINDOW_MS} ms (limit ${LIMIT})`);
    assert.equal(new Set(counts).size, counts.length, `${what}: two admissions got the same count: ${counts.sort((x, y) => x - y)}`);
    assert.ok(counts.every((c) => c >= 1 && c <= LIMIT), `${what}: counts ${counts}`);
  }
  // The windows the clients ran through whole were used up (the load reached the limit).
  assert.ok(groups.slice(0, -1).some((g) => g.length >= LIMIT - 5), `${what}: no window was used up: ${groups.map((g) => g.length)}`);
}

test('express-rate-limit with ShmlimitStore: 4 workers admit one limit per window, a SIGKILLed worker loses nothing', { timeout: 60000 }, async (t) => {
  const file = path.join(tmpdir(t), 'erl.shm');
  const { workers, port } = await startWorkers(t, file);
  const answers = await load(port, '/erl', workers);
  const ok = answers.filter((a) => a.status === 200).map((a) => ({ ...a, json: JSON.parse(a.body) }));
  const limited = answers.filter((a) => a.status === 429);
  assert.ok(limited.length > 100, `${limited.length} requests limited`);
  assert.equal(answers.length, ok.length + limited.length, 'every answer is a 200 or a 429');
  const pids = new Set(ok.map((a) => a.json.pid));
  assert.ok(pids.size >= 3, `admissions came from ${pids.size} workers`);
  assert.ok(ok.some((a) => a.json.pid === workers[0].process.pid), 'the killed worker admitted requests before it died');
  checkWindows(windows(ok, (a) => a.json.resetTime), (a) => a.json.used, 'express-rate-limit');
  // The headers are express-rate-limit's (draft-7), with the store's count.
  for (const a of ok) {
    assert.equal(a.headers['ratelimit-policy'], `${LIMIT};w=${WINDOW_MS / 1000}`);
    const m = /^limit=(\d+), remaining=(\d+), reset=(\d+)$/.exec(a.headers.ratelimit);
    assert.ok(m, a.headers.ratelimit);
    assert.equal(Number(m[1]), LIMIT);
    assert.equal(Number(m[2]), LIMIT - a.json.used);
    assert.ok(Number(m[3]) <= WINDOW_MS / 1000 + 1, a.headers.ratelimit);
  }
  for (const a of limited) {
    assert.match(a.headers.ratelimit, new RegExp(`^limit=${LIMIT}, remaining=0, reset=\\d+$`));
    assert.ok(Number(a.headers['retry-after']) <= WINDOW_MS / 1000 + 1, a.headers['retry-after']);
  }
});

test('rate-limiter-flexible with RateLimiterShmlimit: 4 workers consume one budget per duration, a SIGKILLed worker loses nothing', { timeout: 60000 }, async (t) => {
  const file = path.join(tmpdir(t), 'rlf.shm');
  const { workers, port } = await startWorkers(t, file);
  const answers = await load(port, '/rlf', workers);
  const ok = answers.filter((a) => a.status === 200).map((a) => ({ ...a, json: JSON.parse(a.body) }));
  const limited = answers.filter((a) => a.status === 429).map((a) => JSON.parse(a.body));
  assert.equal(answers.length, ok.length + limited.length, `every answer is a 200 or a 429: ${answers.filter((a) => a.status !== 200 && a.status !== 429).map((a) => a.body)}`);
  assert.ok(limited.length > 100, `${limited.length} requests limited`);
  assert.ok(limited.every((r) => r.consumed > LIMIT && r.remaining === 0), 'a rejection consumed more than the points');
  assert.ok(new Set(ok.map((a) => a.json.pid)).size >= 3);
  assert.ok(ok.some((a) => a.json.pid === workers[0].process.pid), 'the killed worker admitted requests before it died');
  assert.ok(ok.every((a) => a.json.remaining === LIMIT - a.json.consumed));
  checkWindows(windows(ok, (a) => a.json.endsAt), (a) => a.json.consumed, 'rate-limiter-flexible');
});
