'use strict';
// Shared by the tests: a private directory, C programs built against the library the addon
// links, and the bound checks over logged admissions.
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

// The C library and header the C test programs are built with: SHMLIMIT_LIB_DIR and
// SHMLIMIT_INCLUDE_DIR (set by tests/ffi_node.rs, which runs these tests inside the installed
// package), else what build.js built the addon with in this checkout.
function buildInfo() {
  if (process.env.SHMLIMIT_LIB_DIR && process.env.SHMLIMIT_INCLUDE_DIR) {
    return {
      archive: path.join(process.env.SHMLIMIT_LIB_DIR, 'libshmlimit.a'),
      include: process.env.SHMLIMIT_INCLUDE_DIR,
    };
  }
  return JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'build', 'build-info.json'), 'utf8'));
}
const info = buildInfo();

function tmpdir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shmlimit-node-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Compile test/fixtures/NAME.c against the header and the same libshmlimit.a as the addon. */
function buildC(name, dir) {
  const out = path.join(dir, name);
  execFileSync(process.env.CC || 'cc', [
    '-std=c99', '-O2', '-Wall', '-Wextra', '-Werror', '-pedantic',
    '-I', info.include, path.join(__dirname, 'fixtures', `${name}.c`), info.archive,
    '-lpthread', '-ldl', '-lm', '-o', out,
  ], { stdio: ['ignore', 'inherit', 'inherit'] });
  return out;
}

/** Admissions as [{t0, t1}] (clock reads around each admitting call), sorted by t0. */
function admissions(t0s, t1s) {
  return t0s.map((t0, i) => ({ t0, t1: t1s[i] })).sort((a, b) => a.t0 - b.t0);
}

/**
 * A token bucket of `burst` refilled every `emissionNs` admits at most
 * floor(burst + T / emissionNs) in any interval T. For every admission i (x = its t0) and every
 * set of admissions that lie wholly in [x, y] (y = the k-th smallest t1 among those with
 * t0 >= x), k must not exceed burst + floor((y - x) / emissionNs). Each decision happened
 * inside its [t0, t1], so this never blames the limiter for the clock reads around it.
 * Returns the number of intervals checked; throws on the first violation.
 */
function checkTokenBucket(adm, burst, emissionNs) {
  let checked = 0;
  for (let i = 0; i < adm.length; i++) {
    const x = adm[i].t0;
    const t1s = adm.slice(i).map((a) => a.t1).sort((a, b) => a - b);
    for (let k = 1; k <= t1s.length; k++) {
      const y = t1s[k - 1];
      const bound = burst + Math.floor((y - x) / emissionNs);
      checked++;
      if (k > bound) {
        throw new Error(`token bucket over-admitted: ${k} admissions within ${(y - x) / 1e6} ms from admission ${i}; bound floor(B + rT) = ${bound}`);
      }
    }
  }
  return checked;
}

/** A sliding log admits at most `limit` in every interval of `windowNs`: the admissions wholly
 *  inside [x, x + windowNs) for each admission's t0 = x. */
function checkSlidingLog(adm, limit, windowNs) {
  let worst = 0;
  for (let i = 0; i < adm.length; i++) {
    const x = adm[i].t0;
    let k = 0;
    for (let j = i; j < adm.length && adm[j].t0 < x + windowNs; j++) {
      if (adm[j].t1 < x + windowNs) k++;
    }
    worst = Math.max(worst, k);
    if (k > limit) {
      throw new Error(`sliding log over-admitted: ${k} admissions within ${windowNs / 1e6} ms from admission ${i}; limit ${limit}`);
    }
  }
  return worst;
}

/** The typings of a development dependency, found as `require` finds it (NODE_PATH when the
 *  tests run inside the installed package): for tsconfig `paths`. */
function typesOf(name) {
  let dir = path.dirname(require.resolve(name));
  while (!fs.existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  return path.join(dir, pkg.types || pkg.typings);
}

/** tsconfig `paths` for the package's subpaths and the libraries they adapt. */
function storePaths(pkg) {
  return {
    'shmlimit/express-rate-limit': [path.join(pkg, 'lib', 'express-rate-limit.d.ts')],
    'shmlimit/rate-limiter-flexible': [path.join(pkg, 'lib', 'rate-limiter-flexible.d.ts')],
    'express-rate-limit': [typesOf('express-rate-limit')],
    'rate-limiter-flexible': [typesOf('rate-limiter-flexible')],
  };
}

/**
 * Fork test/fixtures/worker.js as a cluster worker over `file` and `limits` (a comma-separated
 * list of limit names), killed when the test ends. Returns the worker and `next(type)`, which
 * resolves with the worker's next message of that type.
 */
function forkFixtureWorker(t, file, limits) {
  const cluster = require('node:cluster');
  cluster.setupPrimary({ exec: path.join(__dirname, 'fixtures', 'worker.js') });
  const worker = cluster.fork({ SHMLIMIT_TEST_PATH: file, SHMLIMIT_TEST_LIMITS: limits });
  t.after(() => worker.isDead() || worker.kill('SIGKILL'));
  const next = (type) => new Promise((resolve) => {
    const on = (msg) => {
      if (msg.type === type) {
        worker.off('message', on);
        resolve(msg);
      }
    };
    worker.on('message', on);
  });
  return { worker, next };
}

/**
 * One GET on a fresh connection (so that a cluster spreads them): {status, headers, body}.
 * With `abortAfterMs`, the client gives up after that long and it resolves {status: 0, aborted}.
 */
function httpGet(port, pathname = '/', { headers = {}, abortAfterMs } = {}) {
  const http = require('node:http');
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: pathname, agent: false, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', (e) => (abortAfterMs !== undefined ? resolve({ status: 0, aborted: true }) : reject(e)));
    if (abortAfterMs !== undefined) setTimeout(() => req.destroy(), abortAfterMs);
    req.end();
  });
}

/** A TCP port free on the loopback interface a moment ago. */
function freePort() {
  const net = require('node:net');
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Wait, if need be, until the next `seconds` hold none of an adaptive limit's re-measure
 * windows (`windowMs` each, its tuning's window). Every 1,000 windows on the limit's clock
 * (CLOCK_MONOTONIC, which process.hrtime reads), the last 8 grant at most the minimum and keep
 * the limit, and the samples of the first 4 of them are not used (docs/adaptive.md): a test
 * that reads a sample back must not release its permits there.
 */
async function clearOfRemeasure(seconds, windowMs = 20) {
  const periodMs = 1000 * windowMs;
  const remeasureFrom = periodMs - 8 * windowMs;
  const at = (Number(process.hrtime.bigint() / 1000n) / 1000) % periodMs;
  if (at + seconds * 1000 > remeasureFrom) {
    await new Promise((resolve) => setTimeout(resolve, periodMs - at + 5));
  }
}

module.exports = {
  info, tmpdir, buildC, admissions, checkTokenBucket, checkSlidingLog, storePaths, forkFixtureWorker,
  httpGet, freePort, clearOfRemeasure,
};
