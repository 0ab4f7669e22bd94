'use strict';
// node:cluster workers and C processes share one token bucket and one sliding log through one
// file: every admission, from every process, is logged with the clock reads around its call,
// and the bounds are checked over every interval.
const assert = require('node:assert/strict');
const cluster = require('node:cluster');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { tmpdir, buildC, admissions, checkTokenBucket, checkSlidingLog } = require('./helpers');

const WORKERS = 4;
const BURST = 50;
const RATE = 1000; // per second: one token per ms
const LOG_LIMIT = 40;
const LOG_WINDOW_MS = 100;
const RUN_MS = 1200;

function forkWorkers(env) {
  cluster.setupPrimary({ exec: path.join(__dirname, 'fixtures', 'worker.js'), silent: false });
  const workers = [];
  for (let i = 0; i < WORKERS; i++) workers.push(cluster.fork(env));
  return workers;
}

function once(worker, type) {
  return new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if (msg.type === type) {
        worker.off('message', onMessage);
        worker.off('exit', onExit);
        resolve(msg);
      }
    };
    const onExit = (code, signal) => reject(new Error(`worker ${worker.process.pid} exited (${code}, ${signal}) before '${type}'`));
    worker.on('message', onMessage);
    worker.once('exit', onExit);
  });
}

function runC(program, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk) => { out += chunk; });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) {
        reject(new Error(`${program} exited with ${code}`));
        return;
      }
      const t0s = [];
      const t1s = [];
      for (const line of out.split('\n')) {
        if (!line) continue;
        const [a, b] = line.split(' ');
        t0s.push(Number(a));
        t1s.push(Number(b));
      }
      resolve({ t0s, t1s });
    });
  });
}

test('4 cluster workers and 2 C processes share one token bucket and one sliding log', { timeout: 60000 }, async (t) => {
  const dir = tmpdir(t);
  const file = path.join(dir, 'shared.shm');
  const hammer = buildC('hammer', dir);
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    bucket: shmlimit.tokenBucket({ rate: RATE, per: 1000, burst: BURST }),
    log: shmlimit.slidingLog({ limit: LOG_LIMIT, window: LOG_WINDOW_MS }),
  });

  const workers = forkWorkers({ SHMLIMIT_TEST_PATH: file, SHMLIMIT_TEST_LIMITS: 'bucket,log' });
  t.after(() => workers.forEach((w) => w.isDead() || w.kill('SIGKILL')));
  await Promise.all(workers.map((w) => once(w, 'ready')));

  const startNs = process.hrtime.bigint() + 300_000_000n;
  const endNs = startNs + BigInt(RUN_MS) * 1_000_000n;
  const done = workers.map((w) => once(w, 'done'));
  for (const w of workers) w.send({ type: 'go', startNs: String(startNs), endNs: String(endNs) });
  const cRuns = ['bucket', 'log'].map((name) => runC(hammer, [file, name, String(startNs), String(endNs)]));
  const reports = await Promise.all(done);
  const [cBucket, cLog] = await Promise.all(cRuns);

  const perProcess = (i) => reports.map((r) => r.logs[i]);
  const collect = (logs) => admissions(logs.flatMap((l) => l.t0s), logs.flatMap((l) => l.t1s));
  const bucket = collect([...perProcess(0), cBucket]);
  const log = collect([...perProcess(1), cLog]);

  // Everyone took part: each worker decided many times (thousands on a quiet machine, 926 once
  // at a load of 12), and the admissions of each limit went to several processes. (Not all: on
  // a loaded machine a process may sleep through every moment a token or a log slot was free.)
  for (const r of reports) {
    assert.ok(r.attempts > 100, `worker ${r.pid} made only ${r.attempts} attempts`);
  }
  for (const [i, c] of [[0, cBucket], [1, cLog]]) {
    const admitted = [...reports.map((r) => r.logs[i].t0s.length), c.t0s.length].filter((n) => n > 0).length;
    assert.ok(admitted >= 3, `only ${admitted} of ${WORKERS + 1} processes were admitted on ${i ? 'the log' : 'the bucket'}`);
  }

  const checked = checkTokenBucket(bucket, BURST, 1e9 / RATE);
  const worst = checkSlidingLog(log, LOG_LIMIT, LOG_WINDOW_MS * 1e6);

  // The limits were saturated, not idle: close to the bound over the whole run.
  const span = RUN_MS * 1e6;
  const bucketBound = BURST + Math.floor(span / (1e9 / RATE));
  assert.ok(bucket.length >= bucketBound * 0.5, `only ${bucket.length} of ${bucketBound} bucket admissions`);
  assert.ok(bucket.length <= bucketBound + 1, `${bucket.length} bucket admissions in ${RUN_MS} ms (bound ${bucketBound})`);
  assert.equal(worst, LOG_LIMIT, `the log never filled a window (worst ${worst})`);

  // The library's own counters agree with the logs (every process's decisions are counted).
  const stats = limiter.limit('bucket').stats();
  assert.equal(stats.allowed, bucket.length);
  assert.equal(limiter.limit('log').stats().allowed, log.length);
  t.diagnostic(`bucket: ${bucket.length} admissions (bound ${bucketBound}), ${checked} intervals checked; log: ${log.length} admissions, fullest window ${worst}/${LOG_LIMIT}`);
});
