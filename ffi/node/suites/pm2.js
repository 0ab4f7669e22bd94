#!/usr/bin/env node
'use strict';
// The stores under PM2's cluster mode: test/fixtures/stores-worker.js (express-rate-limit over
// ShmlimitStore on /erl, RateLimiterShmlimit on /rlf) started by PM2 with 4 instances on one
// port, then the checks of test/stores-cluster.test.js (test/stores-checks.js): real clients for
// 4.5 s per route, one instance SIGKILLed after 1 s (PM2 restarts it, and the new process
// attaches to the same file), at most the limit per window, every admission a count of its own.
// PM2 is installed from the npm registry into a scratch folder, with its own PM2_HOME, and
// killed at the end. Usage: node suites/pm2.js
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const { LIMIT, WINDOW_MS, get, load, checkErl, checkRlf } = require('../test/stores-checks');

const pkg = path.resolve(__dirname, '..');
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'shmlimit-pm2-'));
const env = { ...process.env, PM2_HOME: path.join(scratch, '.pm2'), NODE_PATH: path.join(pkg, 'node_modules') };

function pm2(...args) {
  return execFileSync(process.execPath, [path.join(scratch, 'node_modules', 'pm2', 'bin', 'pm2'), ...args], { env, encoding: 'utf8' });
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function main() {
  fs.writeFileSync(path.join(scratch, 'package.json'), '{"name": "pm2-suite", "private": true}\n');
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--no-package-lock', 'pm2'], { cwd: scratch, stdio: ['ignore', 'ignore', 'inherit'] });
  console.log(`pm2 ${pm2('--version').trim()}`);
  for (const [route, check] of [['/erl', checkErl], ['/rlf', checkRlf]]) {
    const port = await freePort();
    Object.assign(env, {
      PORT: String(port), SHMLIMIT_TEST_PATH: path.join(scratch, `${route.slice(1)}.shm`),
      SHMLIMIT_TEST_LIMIT: String(LIMIT), SHMLIMIT_TEST_WINDOW_MS: String(WINDOW_MS),
    });
    // The fixture resolves `shmlimit/...` by the package's own name: run it from inside the package.
    pm2('start', path.join(pkg, 'test', 'fixtures', 'stores-worker.js'), '-i', '4', '--name', 'stores', '--update-env');
    while (!(await get(port, '/none'))) await new Promise((r) => setTimeout(r, 100));
    const pids = JSON.parse(pm2('jlist')).filter((p) => p.name === 'stores').map((p) => p.pid);
    const answers = await load(port, route, () => process.kill(pids[0], 'SIGKILL'));
    const ok = check(answers);
    const after = JSON.parse(pm2('jlist')).filter((p) => p.name === 'stores').map((p) => p.pid);
    const killed = ok.filter((a) => a.json.pid === pids[0]).length;
    console.log(`${route}: ${answers.length} answers, ${ok.length} admitted by ${new Set(ok.map((a) => a.json.pid)).size} processes (${killed} by the killed one before it died); PM2 instances ${pids} then ${after}: checks passed`);
    pm2('delete', 'stores');
  }
}

main().then(() => {
  pm2('kill');
  fs.rmSync(scratch, { recursive: true, force: true });
}, (err) => {
  console.error(err);
  try { pm2('kill'); } catch { /* nothing started */ }
  fs.rmSync(scratch, { recursive: true, force: true });
  process.exit(1);
});
