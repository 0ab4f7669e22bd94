'use strict';
// The middleware's composed decisions (a prepared composition when the costs are fixed, the
// arrays of each call when a cost is computed per request) and the header fields it sets from
// kept pieces: equal to tryAcquireAll's decisions and rateLimitHeaders' rendering.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { tmpdir } = require('./helpers');

const HOUR = 3600 * 1000;
const DEFS = {
  global: shmlimit.tokenBucket({ rate: 2, per: HOUR, burst: 40 }),
  user: shmlimit.fixedWindow({ limit: 3, window: HOUR, keyed: { capacity: 64 } }),
  smooth: shmlimit.slidingWindow({ limit: 30, window: HOUR }),
  log: shmlimit.slidingLog({ limit: 25, window: HOUR }),
};

function open(t, name) {
  const limiter = shmlimit.Limiter.createOrOpen(path.join(tmpdir(t), name), DEFS);
  t.after(() => limiter.close());
  return limiter;
}

// One request through `mw` with a stub response: what passed, the fields set, the status.
function call(mw, user) {
  const sent = {};
  const res = {
    statusCode: 200,
    setHeader: (name, value) => {
      sent[name] = value;
    },
    end: () => {},
  };
  const req = { headers: { 'x-user': user }, socket: { remoteAddress: '127.0.0.1' } };
  let passed = false;
  let error = null;
  mw(req, res, (err) => {
    if (err) error = err;
    else passed = true;
  });
  return { passed, error, sent, req, status: res.statusCode };
}

const shape = (d) => ({ allowed: d.allowed, remaining: d.remaining, retryS: Math.round(d.retryAfterMs / 1000) });

test('the middleware decides as tryAcquireAll and sets the fields rateLimitHeaders renders', (t) => {
  const a = open(t, 'a.shm');
  const b = open(t, 'b.shm');
  const c = open(t, 'c.shm');
  const names = Object.keys(DEFS);
  const limitsOf = (l) => names.map((n) => l.limit(n));
  const key = (req) => req.headers['x-user'];
  // Fixed costs (a prepared composition), and the same with a cost computed per request.
  const fixed = shmlimit.middleware({ limits: limitsOf(b), key });
  const computed = shmlimit.middleware({ limits: limitsOf(c), key, cost: () => 1 });
  let admitted = 0;
  let denied = 0;
  for (let i = 0; i < 30; i++) {
    const user = `user-${i % 7}`;
    const want = shmlimit.tryAcquireAll(names.map((n) => (n === 'user' ? [a.limit(n), 1, user] : [a.limit(n), 1])));
    for (const [mw, l] of [[fixed, b], [computed, c]]) {
      const got = call(mw, user);
      assert.equal(got.passed, want.allowed, `request ${i}`);
      const decisions = got.req.rateLimit.decisions;
      if (want.allowed) {
        assert.deepEqual(decisions.map(shape), want.decisions.map(shape), `request ${i}`);
      } else {
        assert.equal(got.status, 429);
        assert.deepEqual(shape(decisions[want.deniedBy]), shape(want.decisions[want.deniedBy]));
      }
      // Every field set is the library's rendering of these decisions.
      const pairs = limitsOf(l).map((limit, j) => [limit, decisions[j]]);
      assert.deepEqual(got.sent, { ...shmlimit.rateLimitHeaders(pairs), ...(want.allowed ? {} : { 'Content-Type': 'text/plain; charset=utf-8' }) }, `request ${i}`);
    }
    if (want.allowed) admitted++;
    else denied++;
  }
  assert.ok(admitted > 10 && denied > 5, `${admitted} admitted, ${denied} denied`);
  for (const n of names) {
    assert.deepEqual(b.limit(n).stats(), a.limit(n).stats(), n);
    assert.deepEqual(c.limit(n).stats(), a.limit(n).stats(), n);
  }
});

test('the fields follow a retune within about a second', async (t) => {
  const l = open(t, 'retune.shm');
  const mw = shmlimit.middleware({ limits: [l.limit('global'), l.limit('user')], key: (req) => req.headers['x-user'] });
  const first = call(mw, 'alice');
  assert.equal(first.sent['RateLimit-Policy'], '"global";q=40;w=72000, "user";q=3;w=3600');
  l.limit('user').setLimit(5);
  await new Promise((r) => setTimeout(r, 1100));
  const later = call(mw, 'alice');
  assert.equal(later.sent['RateLimit-Policy'], '"global";q=40;w=72000, "user";q=5;w=3600');
  assert.match(later.sent['RateLimit'], /^"global";r=38;t=\d+, "user";r=3;t=\d+$/);
});

test('a closed limit makes the middleware pass a ClosedError on, consuming nothing', (t) => {
  const l = open(t, 'closed.shm');
  const mw = shmlimit.middleware({ limits: [l.limit('global'), l.limit('user')], key: (req) => req.headers['x-user'] });
  assert.equal(call(mw, 'alice').passed, true);
  l.limit('user').close();
  const got = call(mw, 'alice');
  assert.equal(got.passed, false);
  assert.ok(got.error instanceof shmlimit.ClosedError, String(got.error));
  assert.match(got.error.message, /limit 'user'/);
  assert.equal(l.limit('global').stats().allowed, 1, 'nothing consumed');
});
