'use strict';
// What test/stores-cluster.test.js (node:cluster) and suites/pm2.js (PM2's cluster mode) check
// of the stores behind Express workers: real clients for a few seconds with a worker SIGKILLed,
// and the admissions of each window against the limit.
const assert = require('node:assert/strict');
const http = require('node:http');

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

// CLIENTS clients for RUN_MS; `kill()` (a SIGKILL of a worker) at KILL_AT_MS. Returns the answers.
async function load(port, pathname, kill) {
  const answers = [];
  const end = Date.now() + RUN_MS;
  const killer = setTimeout(kill, KILL_AT_MS);
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

// The express-rate-limit route's answers (draft-7 headers); returns the admitted ones.
function checkErl(answers) {
  const ok = answers.filter((a) => a.status === 200).map((a) => ({ ...a, json: JSON.parse(a.body) }));
  const limited = answers.filter((a) => a.status === 429);
  assert.ok(limited.length > 100, `${limited.length} requests limited`);
  assert.equal(answers.length, ok.length + limited.length, 'every answer is a 200 or a 429');
  checkWindows(windows(ok, (a) => a.json.resetTime), (a) => a.json.used, 'express-rate-limit');
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
  return ok;
}

// The rate-limiter-flexible route's answers; returns the admitted ones.
function checkRlf(answers) {
  const ok = answers.filter((a) => a.status === 200).map((a) => ({ ...a, json: JSON.parse(a.body) }));
  const limited = answers.filter((a) => a.status === 429).map((a) => JSON.parse(a.body));
  assert.equal(answers.length, ok.length + limited.length, `every answer is a 200 or a 429: ${answers.filter((a) => a.status !== 200 && a.status !== 429).map((a) => a.body)}`);
  assert.ok(limited.length > 100, `${limited.length} requests limited`);
  assert.ok(limited.every((r) => r.consumed > LIMIT && r.remaining === 0), 'a rejection consumed more than the points');
  assert.ok(ok.every((a) => a.json.remaining === LIMIT - a.json.consumed));
  checkWindows(windows(ok, (a) => a.json.endsAt), (a) => a.json.consumed, 'rate-limiter-flexible');
  return ok;
}

module.exports = { LIMIT, WINDOW_MS, get, load, checkErl, checkRlf };
