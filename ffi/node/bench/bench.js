#!/usr/bin/env node
'use strict';
// Per-decision cost from Node, side by side in one run:
//   - shmlimit: Limit.tryAcquire (synchronous; the C ABI through the addon), admitted and
//     denied, and tryAcquireKey;
//   - rate-limiter-flexible's RateLimiterMemory (per process) consume(), awaited;
//   - rate-limiter-flexible's RateLimiterCluster consume() from a node:cluster worker, awaited:
//     each decision is an IPC round trip to the RateLimiterClusterMaster in the primary.
// Each case runs ROUNDS timed rounds after a warm-up; the table gives the median and the best
// round in ns per decision. Usage: node bench/bench.js [--quick]
const cluster = require('node:cluster');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { RateLimiterMemory, RateLimiterCluster, RateLimiterClusterMaster } = require('rate-limiter-flexible');
const shmlimit = require('..');

const QUICK = process.argv.includes('--quick');
const ROUNDS = QUICK ? 3 : 7;
const nowNs = () => process.hrtime.bigint();

async function measure(name, iters, fn) {
  await fn(Math.max(1, Math.floor(iters / 10))); // warm-up
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = nowNs();
    await fn(iters);
    rounds.push(Number(nowNs() - t0) / iters);
  }
  rounds.sort((a, b) => a - b);
  return { name, iters, median: rounds[Math.floor(rounds.length / 2)], best: rounds[0] };
}

// Each decision awaited, as a request handler would.
function consumeLoop(limiter) {
  return async (n) => {
    for (let i = 0; i < n; i++) {
      await limiter.consume('bench');
    }
  };
}

function print(rows) {
  const fmt = (ns) => (ns >= 10000 ? `${(ns / 1000).toFixed(1)} µs` : `${ns.toFixed(0)} ns`);
  console.log(`node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0].model}), load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log('| case | iterations per round | median per decision | best round |');
  console.log('|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.name} | ${r.iters} | ${fmt(r.median)} | ${fmt(r.best)} |`);
}

async function primary() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shmlimit-bench-'));
  const rows = [];
  try {
    const limiter = shmlimit.Limiter.createOrOpen(path.join(dir, 'bench.shm'), {
      // Never empty: 10^9 tokens refilled at one per nanosecond.
      open: shmlimit.tokenBucket({ rate: 1e9, per: 1000, burst: 1e9 }),
      // Always empty after the first: one token per hour.
      shut: shmlimit.tokenBucket({ rate: 1, per: 3600 * 1000, burst: 1 }),
      keyed: shmlimit.tokenBucket({ rate: 1e9, per: 1000, burst: 1e9, keyed: { capacity: 1024 } }),
    });
    const open = limiter.limit('open');
    const shut = limiter.limit('shut');
    const keyed = limiter.limit('keyed');
    const n = QUICK ? 200000 : 1000000;
    rows.push(await measure('shmlimit `tryAcquire()`, admitted', n, (k) => {
      for (let i = 0; i < k; i++) if (!open.tryAcquire().allowed) throw new Error('denied');
    }));
    shut.tryAcquire();
    rows.push(await measure('shmlimit `tryAcquire()`, denied', n, (k) => {
      for (let i = 0; i < k; i++) if (shut.tryAcquire().allowed) throw new Error('admitted');
    }));
    rows.push(await measure('shmlimit `tryAcquireKey("user-42")`, admitted', n, (k) => {
      for (let i = 0; i < k; i++) if (!keyed.tryAcquireKey('user-42').allowed) throw new Error('denied');
    }));
    rows.push(await measure('shmlimit `await acquire()` (a Promise per decision), admitted', n / 5, async (k) => {
      for (let i = 0; i < k; i++) await open.acquire();
    }));
    const memory = new RateLimiterMemory({ points: 1e12, duration: 3600 });
    rows.push(await measure('rate-limiter-flexible RateLimiterMemory `await consume(key)`', QUICK ? 50000 : 200000, consumeLoop(memory)));

    // RateLimiterCluster: a worker asks the master in this process over IPC.
    new RateLimiterClusterMaster(); // eslint-disable-line no-new
    cluster.setupPrimary({ exec: __filename, args: process.argv.slice(2) });
    const worker = cluster.fork({ SHMLIMIT_BENCH_WORKER: '1' });
    const result = await new Promise((resolve, reject) => {
      worker.on('message', (m) => {
        if (m && m.type === 'bench-result') resolve(m.row);
      });
      worker.once('exit', (code) => (code ? reject(new Error(`bench worker exited with ${code}`)) : null));
    });
    rows.push(result);
    worker.kill();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  print(rows);
}

async function clusterWorker() {
  const limiter = new RateLimiterCluster({ keyPrefix: 'bench', points: 1e12, duration: 3600, timeoutMs: 10000 });
  const row = await measure('rate-limiter-flexible RateLimiterCluster `await consume(key)` (IPC to the primary)', QUICK ? 2000 : 10000, consumeLoop(limiter));
  process.send({ type: 'bench-result', row });
}

if (cluster.isPrimary) {
  primary().catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else if (process.env.SHMLIMIT_BENCH_WORKER) {
  clusterWorker().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
