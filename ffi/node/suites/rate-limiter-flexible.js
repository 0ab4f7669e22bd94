#!/usr/bin/env node
'use strict';
// rate-limiter-flexible's own RateLimiterMemory tests (mocha and chai), run against
// RateLimiterShmlimit: `node suites/rate-limiter-flexible.js CHECKOUT`, where CHECKOUT is a
// clone of https://github.com/animir/node-rate-limiter-flexible at the tag of the installed
// version (the npm package carries no tests):
//
//   git clone --depth 1 --branch v7.4.0 https://github.com/animir/node-rate-limiter-flexible /tmp/rlf
//   node suites/rate-limiter-flexible.js /tmp/rlf
//
// In a scratch folder: the checkout's test/RateLimiterMemory.test.js, and in place of its
// ../lib/RateLimiterMemory a module whose class is RateLimiterShmlimit on a fresh file per
// limiter (as each RateLimiterMemory has its own storage), with the one internal the tests read
// (`_memoryStorage.get(rlKey)`) answered from the file. mocha and chai 4 are installed there
// from the npm registry. Prints each test's outcome; exits 1 when any failed. The results and
// the reasons for each failure are in docs/node-stores.md.
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const checkout = process.argv[2];
const suite = checkout && path.join(checkout, 'test', 'RateLimiterMemory.test.js');
if (!suite || !fs.existsSync(suite)) {
  console.error('usage: node suites/rate-limiter-flexible.js CHECKOUT (a clone of animir/node-rate-limiter-flexible with test/RateLimiterMemory.test.js)');
  process.exit(2);
}
const pkg = path.resolve(__dirname, '..');
const installed = JSON.parse(fs.readFileSync(require.resolve('rate-limiter-flexible/package.json', { paths: [pkg] }), 'utf8')).version;
const tested = JSON.parse(fs.readFileSync(path.join(checkout, 'package.json'), 'utf8')).version;
console.log(`rate-limiter-flexible installed ${installed}, tests of ${tested}`);

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'shmlimit-rlf-suite-'));
try {
  fs.mkdirSync(path.join(scratch, 'test'));
  fs.mkdirSync(path.join(scratch, 'lib'));
  fs.mkdirSync(path.join(scratch, 'files'));
  fs.copyFileSync(suite, path.join(scratch, 'test', 'RateLimiterMemory.test.js'));
  fs.writeFileSync(path.join(scratch, 'lib', 'RateLimiterMemory.js'), `'use strict';
// RateLimiterShmlimit in place of RateLimiterMemory (written by shmlimit's suites/rate-limiter-flexible.js).
const path = require('node:path');
const { RateLimiterShmlimit } = require(${JSON.stringify(path.join(pkg, 'lib', 'rate-limiter-flexible.js'))});
const { RateLimiterRes } = require(${JSON.stringify(require.resolve('rate-limiter-flexible', { paths: [pkg] }))});
let n = 0;
module.exports = class RateLimiterMemory extends RateLimiterShmlimit {
  constructor(opts = {}) {
    super({ ...opts, path: path.join(${JSON.stringify(path.join(scratch, 'files'))}, \`rlf-\${n++}.shm\`), keys: 1024 });
    const counters = this.counters;
    this._memoryStorage = {
      get(rlKey) {
        const { count, resetMs } = counters.count(rlKey);
        return count === 0 && resetMs === 0 ? null : new RateLimiterRes(0, resetMs, count, false);
      },
    };
  }
};
`);
  fs.writeFileSync(path.join(scratch, 'package.json'), '{"name": "rlf-suite", "private": true}\n');
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--no-package-lock', 'mocha@10', 'chai@4'], { cwd: scratch, stdio: ['ignore', 'ignore', 'inherit'] });
  const run = spawnSync(process.execPath, [path.join(scratch, 'node_modules', 'mocha', 'bin', 'mocha.js'), '--reporter', 'json', 'test/RateLimiterMemory.test.js'], {
    cwd: scratch, encoding: 'utf8', env: { ...process.env, NODE_PATH: path.join(pkg, 'node_modules') },
  });
  const report = JSON.parse(run.stdout.slice(run.stdout.indexOf('{')));
  for (const t of report.passes) console.log(`pass  ${t.fullTitle}`);
  for (const t of report.failures) console.log(`FAIL  ${t.fullTitle}\n        ${String(t.err.message).split('\n')[0]}`);
  console.log(`${report.stats.passes} passed, ${report.stats.failures} failed, ${report.stats.pending} pending`);
  process.exitCode = report.stats.failures ? 1 : 0;
} finally {
  fs.rmSync(scratch, { recursive: true, force: true });
}
