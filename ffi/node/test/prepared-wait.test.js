'use strict';
// The waiting form of a prepared composition (`prepared.acquire(key..., options)`) on real
// files: it sleeps each denial's retry-after on a timer and decides again, resolves the denial
// when the timeout would pass first, rejects with an abort's reason, refuses bad input as
// tryAcquire does with nothing consumed, and several processes waiting on one prepared budget
// never exceed it.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { admissions, checkTokenBucket, forkFixtureWorker, tmpdir } = require('./helpers');

const HOUR = 3600 * 1000;
// What a limit (or a key of it) holds: a peek's `remaining` is what would be left after it.
const left = (d) => d.remaining + (d.allowed ? 1 : 0);
// CLOCK_MONOTONIC in ms, the library's timeline.
const now = () => Number(process.hrtime.bigint()) / 1e6;

function open(t, defs) {
  const file = path.join(tmpdir(t), 'limits.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, defs);
  t.after(() => limiter.close());
  return { file, limiter };
}

// A global bucket that does not refill while the test runs, and a keyed one.
function globalAndUser(t, user) {
  const { limiter } = open(t, { global: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 100 }), user });
  const global = limiter.limit('global');
  const u = limiter.limit('user');
  const p = shmlimit.prepareAll([global, { limit: u, keyed: true }]);
  // What the global bucket passed for good (a denied composed check refunds its grant).
  const passed = () => {
    const s = global.stats();
    return s.allowed - s.refunded;
  };
  return { limiter, global, user: u, p, passed };
}

test('acquire waits for the retry-after on a timer, then admits', async (t) => {
  // One per 100 ms for each key.
  const { global, p, passed } = globalAndUser(t, shmlimit.tokenBucket({ rate: 10, per: 1000, burst: 1, keyed: { capacity: 16 } }));
  const first = await p.acquire('alice');
  assert.equal(first.allowed, true, 'the first is admitted at once');
  // The next is denied (unless the machine stalled for a refill: then take it too).
  let taken = 1;
  let start;
  let denial;
  for (;;) {
    start = now();
    denial = p.tryAcquire('alice');
    if (!denial.allowed) break;
    taken++;
  }
  assert.equal(denial.deniedBy, 1);
  assert.ok(denial.retryAfterMs > 0 && denial.retryAfterMs <= 100, `retry after ${denial.retryAfterMs} ms`);
  let ticks = 0;
  const ticker = setInterval(() => { ticks++; }, 5);
  const waiting = p.acquire('alice', { timeout: 10_000 });
  // Another key is not held up by alice's wait, nor is the event loop.
  assert.equal(p.tryAcquire('bob').allowed, true);
  const got = await waiting;
  const elapsed = now() - start;
  clearInterval(ticker);
  assert.equal(got.allowed, true, 'admitted once the retry-after passed');
  assert.equal(got.deniedBy, -1);
  assert.deepEqual(got.decisions.map((d) => d.remaining), [98 - taken, 0]);
  // The admission could not come before the denial's retry-after (no upper bound: the machine
  // may be loaded).
  assert.ok(elapsed >= denial.retryAfterMs, `admitted after ${elapsed} ms, retry-after ${denial.retryAfterMs} ms`);
  assert.ok(ticks > 0, 'the event loop ran during the wait');
  assert.equal(passed(), taken + 2, 'alice\'s grants and bob\'s passed the global bucket, the denials nothing');
  assert.equal(left(global.peek()), 98 - taken);
  // The grant of an awaited check refunds as any other.
  got.refund();
  assert.equal(left(global.peek()), 99 - taken);
  t.diagnostic(`waited ${elapsed.toFixed(1)} ms for a retry-after of ${denial.retryAfterMs.toFixed(1)} ms (${ticks} ticks of 5 ms)`);

  // Unkeyed: the options alone, or nothing.
  const { limiter } = open(t, { api: shmlimit.tokenBucket({ rate: 10, per: 1000, burst: 1 }) });
  const q = shmlimit.prepareAll([{ limit: limiter.limit('api'), cost: 1 }]);
  assert.equal((await q.acquire()).allowed, true);
  let from;
  let retry = 0;
  while (retry === 0) {
    from = now();
    retry = q.tryAcquire().retryAfterMs;
  }
  const second = await q.acquire({ timeout: 10_000 });
  assert.equal(second.allowed, true);
  assert.ok(now() - from >= retry, `admitted after ${now() - from} ms, retry-after ${retry} ms`);
});

test('a timeout shorter than the retry-after resolves the denial, consuming nothing', async (t) => {
  const { global, user, p, passed } = globalAndUser(t, shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 1, keyed: { capacity: 16 } }));
  assert.equal((await p.acquire('alice', { timeout: 0 })).allowed, true);
  for (const timeout of [0, 50]) {
    const d = await p.acquire('alice', { timeout });
    assert.equal(d.allowed, false, `a denial is not an error (timeout ${timeout})`);
    assert.equal(d.deniedBy, 1);
    assert.ok(d.retryAfterMs > HOUR - 60_000, `retry after ${d.retryAfterMs} ms`);
    assert.equal(d.decisions[1].allowed, false);
  }
  assert.equal(passed(), 1);
  assert.equal(left(global.peek()), 99);
  assert.equal(left(user.peekKey('alice')), 0);
  // A denial by the first check: the keyed one is not consumed either.
  const { limiter } = open(t, {
    global: shmlimit.fixedWindow({ limit: 1, window: HOUR }),
    user: shmlimit.fixedWindow({ limit: 5, window: HOUR, keyed: { capacity: 16 } }),
  });
  const q = shmlimit.prepareAll([limiter.limit('global'), { limit: limiter.limit('user'), keyed: true }]);
  assert.equal((await q.acquire('bob', { timeout: 20 })).allowed, true);
  const d = await q.acquire('bob', { timeout: 20 });
  assert.equal(d.allowed, false);
  assert.equal(d.deniedBy, 0);
  assert.equal(left(limiter.limit('user').peekKey('bob')), 4);
});

test('an abort rejects with the signal\'s reason and consumes nothing', async (t) => {
  const { global, user, p, passed } = globalAndUser(t, shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 1, keyed: { capacity: 16 } }));
  // Aborted before: rejected although the check would admit.
  const gone = new Error('gone');
  await assert.rejects(p.acquire('carol', { signal: AbortSignal.abort(gone) }), (e) => e === gone);
  assert.equal(left(user.peekKey('carol')), 1);
  // Aborted while it waits.
  assert.equal(p.tryAcquire('alice').allowed, true);
  const ac = new AbortController();
  const reason = new Error('shutting down');
  const waiting = p.acquire('alice', { signal: ac.signal });
  setTimeout(() => ac.abort(reason), 20);
  await assert.rejects(waiting, (e) => e === reason);
  // Without a reason: an AbortError.
  const plain = new AbortController();
  const waiting2 = p.acquire('alice', { timeout: Infinity, signal: plain.signal });
  setTimeout(() => plain.abort(), 20);
  await assert.rejects(waiting2, (e) => e.name === 'AbortError');
  assert.equal(passed(), 1, 'only the first passed');
  assert.equal(left(global.peek()), 99);
  assert.equal(left(user.peekKey('carol')), 1);
});

test('bad input rejects with tryAcquire\'s errors naming acquire, and consumes nothing', async (t) => {
  const { limiter } = open(t, {
    global: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 10 }),
    user: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 5, keyed: { capacity: 16 } }),
    other: shmlimit.fixedWindow({ limit: 5, window: HOUR }),
  });
  const global = limiter.limit('global');
  const user = limiter.limit('user');
  const p = shmlimit.prepareAll([{ limit: global, cost: 2 }, { limit: user, keyed: true }]);
  const untouched = () => {
    assert.equal(left(global.peek()), 10);
    const { allowed, refunded } = global.stats();
    assert.equal(allowed - refunded, 0, 'what passed');
    assert.equal(left(user.peekKey('alice')), 5);
  };
  // A promise rejected, never a throw, as acquireAll: tryAcquire's message, naming acquire.
  for (const keys of [[], ['alice', 'bob'], [42], [null], [true], [() => 'alice']]) {
    const pending = p.acquire(...keys);
    assert.ok(pending instanceof Promise, `acquire(${keys}) returned a promise`);
    let sync;
    try {
      p.tryAcquire(...keys);
    } catch (err) {
      sync = err;
    }
    assert.ok(sync instanceof TypeError);
    const want = sync.message.replace(/^tryAcquire:/, 'acquire:');
    assert.match(want, /^acquire: /);
    await assert.rejects(pending, (e) => e instanceof TypeError && e.message === want);
  }
  // A trailing object is the options; a trailing number or null is a key, refused as one.
  await assert.rejects(p.acquire({ timeout: 5 }), { message: 'acquire: this prepared composition takes 1 key (one per keyed check), not 0' });
  await assert.rejects(p.acquire('alice', 42), { message: 'acquire: this prepared composition takes 1 key (one per keyed check), not 2' });
  await assert.rejects(p.acquire('alice', null), /takes 1 key .* not 2/);
  await assert.rejects(p.acquire(42, { timeout: 5 }), { message: 'acquire: key 0 must be a string or a Uint8Array, not number' });
  // Bad options, as acquireAll refuses them.
  await assert.rejects(p.acquire('alice', { timeout: -1 }), (e) => e instanceof RangeError && /^acquire: timeout/.test(e.message));
  await assert.rejects(p.acquire('alice', { timeout: 'soon' }), RangeError);
  await assert.rejects(shmlimit.acquireAll([global], { timeout: -1 }), RangeError);
  // The library's refusals: an empty or oversized key, a keyed limit without a key, costs.
  await assert.rejects(p.acquire(''), shmlimit.InvalidKeyError);
  await assert.rejects(p.acquire('x'.repeat(5000), { timeout: 1000 }), shmlimit.InvalidKeyError);
  await assert.rejects(shmlimit.prepareAll([global, user]).acquire(), shmlimit.WrongKindError);
  await assert.rejects(shmlimit.prepareAll([{ limit: global, cost: 11 }]).acquire({ timeout: 1000 }), shmlimit.CostExceedsCapacityError);
  untouched();
  // A closed limit: a ClosedError naming it, nothing consumed on the others.
  const other = limiter.limit('other');
  const q = shmlimit.prepareAll([global, other]);
  other.close();
  await assert.rejects(q.acquire({ timeout: 1000 }), (e) => e instanceof shmlimit.ClosedError
    && e.message === "acquire of a prepared composition: limit 'other': the handle is closed");
  untouched();
  // Bytes are a key, not the options.
  assert.equal((await p.acquire(Buffer.from('alice'), { timeout: 1000 })).allowed, true);
  assert.equal(left(user.peekKey('alice')), 4);
  assert.equal(left(global.peek()), 8);
});

test('processes waiting on one prepared budget never exceed it', { timeout: 60000 }, async (t) => {
  // Every 20 ms (3 at once) for everyone, every 50 ms (2 at once) for each key: the keys bind
  // (44 in a second at most), so waits for both limits happen.
  const GLOBAL_NS = 20e6;
  const GLOBAL_BURST = 3;
  const USER_NS = 50e6;
  const USER_BURST = 2;
  const RUN_MS = 1000;
  const KEYS = ['alice', 'bob'];
  const { file, limiter } = open(t, {
    global: shmlimit.tokenBucket({ rate: 50, per: 1000, burst: GLOBAL_BURST }),
    user: shmlimit.tokenBucket({ rate: 20, per: 1000, burst: USER_BURST, keyed: { capacity: 16 } }),
  });
  const workers = [0, 1, 2].map(() => forkFixtureWorker(t, file, 'global,user'));
  await Promise.all(workers.map((w) => w.next('ready')));
  const startNs = process.hrtime.bigint() + 300_000_000n;
  const endNs = startNs + BigInt(RUN_MS) * 1_000_000n;
  const done = workers.map((w) => w.next('done'));
  for (const { worker } of workers) worker.send({ type: 'preparedWait', startNs: String(startNs), endNs: String(endNs), keys: KEYS });
  const reports = await Promise.all(done);
  for (const r of reports) assert.equal(r.error, undefined, `a worker failed: ${r.error}`);

  const perKey = Object.fromEntries(KEYS.map((k) => [k, admissions(
    reports.flatMap((r) => r.log[k].t0s),
    reports.flatMap((r) => r.log[k].t1s),
  )]));
  const all = admissions(
    reports.flatMap((r) => KEYS.flatMap((k) => r.log[k].t0s)),
    reports.flatMap((r) => KEYS.flatMap((k) => r.log[k].t1s)),
  );
  const checked = checkTokenBucket(all, GLOBAL_BURST, GLOBAL_NS)
    + KEYS.reduce((n, k) => n + checkTokenBucket(perKey[k], USER_BURST, USER_NS), 0);

  // The waits happened and admitted: every worker decided again after sleeping, and was
  // admitted; the budget was used, not idle (a loaded machine may sleep through some of it).
  for (const r of reports) {
    assert.ok(r.calls > r.acquires, `worker ${r.pid} never decided again after a wait (${r.calls} decisions, ${r.acquires} acquires)`);
    assert.ok(KEYS.some((k) => r.log[k].t0s.length > 0), `worker ${r.pid} was never admitted`);
  }
  const bound = KEYS.length * (USER_BURST + Math.floor((RUN_MS * 1e6) / USER_NS));
  assert.ok(all.length >= bound * 0.4, `only ${all.length} admissions of at most ${bound}`);
  // The library's counters agree with the logs: every admission of every process is there.
  const s = limiter.limit('global').stats();
  assert.equal(s.allowed - s.refunded, all.length);
  t.diagnostic(`${all.length} admissions (keys bound ${bound}) by ${reports.map((r) => `${r.acquires} acquires / ${r.calls} decisions`).join(', ')}; ${checked} intervals checked`);
});
