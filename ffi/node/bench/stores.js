#!/usr/bin/env node
'use strict';
// The drop-in stores side by side in one run:
//   1. per call, awaited as a request handler awaits it: RateLimiterShmlimit.consume against
//      rate-limiter-flexible's RateLimiterMemory (per process) and RateLimiterCluster (from a
//      node:cluster worker: an IPC round trip to the RateLimiterClusterMaster in the primary);
//      ShmlimitStore.increment against express-rate-limit's MemoryStore.increment. Every call
//      admitted, keys rotating over 100 users. ROUNDS timed rounds after a warm-up: median and
//      best round, ns per call.
//   2. an Express 5 app answering "ok" in a child process, with no limiter, with
//      express-rate-limit over its MemoryStore, and over ShmlimitStore (every request admitted,
//      keyed by an x-user header over 100 users); a keep-alive client in this process sends
//      REQUESTS requests 16 at a time per round, the servers in turn each round. Median
//      requests/s the client saw, and the server's CPU time per request (process.cpuUsage).
// Usage: node bench/stores.js [--quick]
const cluster = require('node:cluster');
const { fork } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');

const QUICK = process.argv.includes('--quick');
const ROUNDS = QUICK ? 3 : 7;
const REQUESTS = QUICK ? 5000 : 20000;
const CONCURRENCY = 16;
const USERS = Array.from({ length: 100 }, (_, i) => `user-${i}`);
const SERVERS = ['no limiter', 'express-rate-limit, MemoryStore', 'express-rate-limit, ShmlimitStore'];
const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];

async function measure(name, iters, fn) {
  await fn(Math.max(1, Math.floor(iters / 10))); // warm-up
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    await fn(iters);
    rounds.push(Number(process.hrtime.bigint() - t0) / iters);
  }
  return { name, iters, median: median(rounds), best: Math.min(...rounds) };
}

const consumeLoop = (limiter) => async (n) => {
  for (let i = 0; i < n; i++) await limiter.consume(USERS[i % 100]);
};
const incrementLoop = (store) => async (n) => {
  for (let i = 0; i < n; i++) await store.increment(USERS[i % 100]);
};

// Part 1 in this process (and one cluster worker for RateLimiterCluster).
async function perCall(dir) {
  const { RateLimiterMemory, RateLimiterClusterMaster } = require('rate-limiter-flexible');
  const { MemoryStore } = require('express-rate-limit');
  const { RateLimiterShmlimit } = require('shmlimit/rate-limiter-flexible');
  const { ShmlimitStore } = require('shmlimit/express-rate-limit');
  const n = QUICK ? 50000 : 200000;
  const opts = { points: 16_000_000, duration: 3600 };
  const rows = [];
  rows.push(await measure('RateLimiterShmlimit `await consume(key)`', n, consumeLoop(new RateLimiterShmlimit({ ...opts, path: path.join(dir, 'rlf.shm') }))));
  rows.push(await measure('rate-limiter-flexible RateLimiterMemory `await consume(key)` (per process)', n, consumeLoop(new RateLimiterMemory(opts))));
  new RateLimiterClusterMaster(); // eslint-disable-line no-new
  cluster.setupPrimary({ exec: __filename, args: process.argv.slice(2) });
  const worker = cluster.fork({ SHMLIMIT_BENCH_ROLE: 'cluster-worker' });
  rows.push(await new Promise((resolve, reject) => {
    worker.on('message', (m) => { if (m && m.type === 'row') resolve(m.row); });
    worker.once('exit', (code) => (code ? reject(new Error(`bench worker exited with ${code}`)) : null));
  }));
  worker.kill();
  const shm = new ShmlimitStore({ path: path.join(dir, 'erl-calls.shm') });
  shm.init({ windowMs: 3600_000 });
  rows.push(await measure('ShmlimitStore `await increment(key)`', n, incrementLoop(shm)));
  const mem = new MemoryStore();
  mem.init({ windowMs: 3600_000 });
  rows.push(await measure('express-rate-limit MemoryStore `await increment(key)` (per process)', n, incrementLoop(mem)));
  mem.shutdown();
  return rows;
}

async function clusterWorker() {
  const { RateLimiterCluster } = require('rate-limiter-flexible');
  const limiter = new RateLimiterCluster({ keyPrefix: 'bench', points: 16_000_000, duration: 3600, timeoutMs: 10000 });
  const row = await measure('rate-limiter-flexible RateLimiterCluster `await consume(key)` (IPC to the primary)', QUICK ? 2000 : 10000, consumeLoop(limiter));
  process.send({ type: 'row', row });
}

// Part 2: one server (a child process).
function server() {
  const express = require('express');
  const { rateLimit, MemoryStore } = require('express-rate-limit');
  const { ShmlimitStore } = require('shmlimit/express-rate-limit');
  const mode = process.env.SHMLIMIT_BENCH_MODE;
  const app = express();
  if (mode !== 'no limiter') {
    const store = mode === 'express-rate-limit, MemoryStore' ? new MemoryStore() : new ShmlimitStore({ path: process.env.SHMLIMIT_BENCH_PATH });
    app.use(rateLimit({ windowMs: 3600_000, limit: 16_000_000, store, keyGenerator: (req) => req.headers['x-user'], standardHeaders: 'draft-7', legacyHeaders: false }));
  }
  app.get('/', (req, res) => res.send('ok'));
  let start = null;
  process.on('message', (m) => {
    if (m === 'start') start = process.cpuUsage();
    if (m === 'stop') {
      const d = process.cpuUsage(start);
      process.send({ cpuUs: d.user + d.system });
    }
  });
  const s = app.listen(0, '127.0.0.1', () => process.send({ port: s.address().port }));
  s.keepAliveTimeout = 60000;
}

function request(agent, port, user) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, agent, headers: { 'x-user': user } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}: not at full admission`));
      res.resume();
      res.on('end', resolve);
    });
    req.on('error', reject);
    req.end();
  });
}

async function round(child, port) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  for (let i = 0; i < 1000; i++) await request(agent, port, USERS[i % 100]); // warm-up
  const reply = new Promise((resolve) => child.once('message', resolve));
  child.send('start');
  await new Promise((r) => setTimeout(r, 20));
  const t0 = process.hrtime.bigint();
  let next = 0;
  const lane = async () => {
    while (next < REQUESTS) await request(agent, port, USERS[next++ % 100]);
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  child.send('stop');
  const { cpuUs } = await reply;
  agent.destroy();
  return { cpuUs: cpuUs / REQUESTS, rps: REQUESTS / seconds };
}

async function servers(dir) {
  const file = path.join(dir, 'erl.shm');
  const results = Object.fromEntries(SERVERS.map((m) => [m, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const mode of SERVERS) {
      const child = fork(__filename, process.argv.slice(2), { env: { ...process.env, SHMLIMIT_BENCH_ROLE: 'server', SHMLIMIT_BENCH_MODE: mode, SHMLIMIT_BENCH_PATH: file } });
      const { port } = await new Promise((resolve) => child.once('message', resolve));
      results[mode].push(await round(child, port));
      child.kill();
    }
  }
  return results;
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shmlimit-stores-'));
  let rows;
  let results;
  try {
    rows = await perCall(dir);
    results = await servers(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const fmt = (ns) => (ns >= 10000 ? `${(ns / 1000).toFixed(1)} µs` : `${ns.toFixed(0)} ns`);
  console.log(`node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}; ${ROUNDS} rounds`);
  console.log('| call (every one admitted, 100 keys in turn) | calls per round | median per call | best round |');
  console.log('|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.name} | ${r.iters} | ${fmt(r.median)} | ${fmt(r.best)} |`);
  console.log('');
  const base = median(results['no limiter'].map((x) => x.rps));
  console.log(`| Express 5 app, ${REQUESTS} requests per round, ${CONCURRENCY} at a time | requests/s (median) | vs no limiter | server CPU per request (median) |`);
  console.log('|---|---|---|---|');
  for (const mode of SERVERS) {
    const rps = median(results[mode].map((x) => x.rps));
    const cpu = median(results[mode].map((x) => x.cpuUs));
    console.log(`| ${mode} | ${rps.toFixed(0)} | ${(rps / base).toFixed(2)}x | ${cpu.toFixed(1)} µs |`);
  }
}

const role = process.env.SHMLIMIT_BENCH_ROLE;
const run = role === 'server' ? async () => server() : role === 'cluster-worker' ? clusterWorker : main;
run().catch((err) => {
  console.error(err);
  process.exit(1);
});
