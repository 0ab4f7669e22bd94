'use strict';
// The package's API on a real file: definitions, decisions, errors, refunds, keys, composed
// checks, retuning, statistics, headers, waits and permits.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');

const monotonicMs = () => Number(process.hrtime.bigint()) / 1e6;
const { Worker } = require('node:worker_threads');

const shmlimit = require('..');
const { tmpdir, checkTokenBucket, checkSlidingLog, admissions } = require('./helpers');

function open(t, defs, name = 'limits.shm') {
  const file = path.join(tmpdir(t), name);
  const limiter = shmlimit.Limiter.createOrOpen(file, defs);
  t.after(() => limiter.close());
  return { file, limiter };
}

const HOUR = 3600 * 1000;

test('definitions round-trip, and another handle attaches by path alone', (t) => {
  const all = {
    api: shmlimit.tokenBucket({ rate: 100, per: 1000, burst: 20 }),
    daily: shmlimit.fixedWindow({ limit: 10000, window: 86400 * 1000 }),
    smooth: shmlimit.slidingWindow({ limit: 60, window: 60000, aligned: 'monotonic' }),
    search: shmlimit.slidingLog({ limit: 100, window: 60000 }),
    db: shmlimit.concurrency({ permits: 8, lease: 30000 }),
    per_user: shmlimit.tokenBucket({ rate: 10, burst: 5, keyed: { capacity: 1000, onFull: 'error' } }),
    dry: shmlimit.fixedWindow({ limit: 5, window: 1000, shadow: true, nearLimit: 0.25 }),
    hot: shmlimit.tokenBucket({ rate: 1000, burst: 64, split: 4 }),
  };
  const { file, limiter } = open(t, all);
  const defs = shmlimit.Limiter.open(file).definitions();
  assert.deepEqual(Object.keys(defs), ['api', 'daily', 'smooth', 'search', 'db', 'per_user', 'dry', 'hot']);
  // A token bucket is stored as one token per emission interval (10 ms here), and read back
  // in the first usual period (1 s, 1 min, 1 h, 1 day, 1 ms, 1 us) that stores the same
  // interval: as it was written (the Python package reads it back the same way).
  assert.deepEqual(defs.api, { kind: 'tokenBucket', rate: 100, per: 1000, burst: 20 });
  assert.deepEqual(defs.daily, { kind: 'fixedWindow', limit: 10000, window: 86400000, aligned: 'wall' });
  assert.deepEqual(defs.smooth, { kind: 'slidingWindow', limit: 60, window: 60000, aligned: 'monotonic' });
  assert.deepEqual(defs.search, { kind: 'slidingLog', limit: 100, window: 60000 });
  assert.deepEqual(defs.db, { kind: 'concurrency', permits: 8, lease: 30000 });
  assert.deepEqual(defs.per_user.keyed, { capacity: 1024, onFull: 'error' });
  assert.equal(defs.dry.shadow, true);
  assert.equal(defs.dry.nearLimit, 0.25);
  assert.equal(defs.hot.split, 4);
  // Opening again with the same definitions works; with others it is a conflict.
  shmlimit.Limiter.createOrOpen(file, all).close();
  // ... and so do the definitions it reports.
  shmlimit.Limiter.createOrOpen(file, defs).close();
  assert.throws(() => shmlimit.Limiter.createOrOpen(file, { api: shmlimit.tokenBucket({ rate: 50 }) }),
    (e) => e instanceof shmlimit.DefinitionConflictError && e.code === 'SHMLIMIT_DEFINITION_CONFLICT' && e.status === 110);
  assert.equal(limiter.limit('api'), limiter.limit('api'), 'limits are resolved once');
});

test('tryAcquire, peek and the decision fields', (t) => {
  const { limiter } = open(t, { api: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 3 }) });
  const api = limiter.limit('api');
  assert.equal(api.peek(3).allowed, true);
  const first = api.tryAcquire();
  assert.equal(first.allowed, true);
  assert.equal(first.remaining, 2);
  assert.equal(first.retryAfterMs, 0);
  assert.ok(first.resetMs > 0 && first.resetMs <= HOUR, `resetMs ${first.resetMs}`);
  assert.equal(api.tryAcquire(2).allowed, true);
  const denied = api.tryAcquire();
  assert.equal(denied.allowed, false);
  assert.equal(denied.remaining, 0);
  assert.ok(denied.retryAfterMs > HOUR - 1000 && denied.retryAfterMs <= HOUR, `retryAfterMs ${denied.retryAfterMs}`);
  assert.equal(denied.retryAfterNs, Math.round(denied.retryAfterMs * 1e6));
  assert.ok(denied.resetMs >= denied.retryAfterMs);
  assert.deepEqual(api.stats(), { allowed: 2, denied: 1, shadowDenied: 0, nearLimit: 1, refunded: 0 });
  api.refund(first); // given back whole: allowed - refunded is what passed
  api.refund(denied); // a denial took nothing: not counted
  assert.deepEqual(api.stats(), { allowed: 2, denied: 1, shadowDenied: 0, nearLimit: 1, refunded: 1 });
});

test('errors are Error subclasses with the C status as code', (t) => {
  const { file, limiter } = open(t, {
    api: shmlimit.tokenBucket({ rate: 10, burst: 5 }),
    db: shmlimit.concurrency({ permits: 1 }),
    per_user: shmlimit.fixedWindow({ limit: 5, window: 1000, keyed: 16 }),
  });
  const api = limiter.limit('api');
  const is = (cls, code) => (e) => e instanceof cls && e instanceof shmlimit.ShmlimitError && e instanceof Error && e.code === code && typeof e.message === 'string' && e.message.length > 0;
  assert.throws(() => api.tryAcquire(0), is(shmlimit.ZeroCostError, 'SHMLIMIT_ZERO_COST'));
  assert.throws(() => api.tryAcquire(6), is(shmlimit.CostExceedsCapacityError, 'SHMLIMIT_COST_EXCEEDS_CAPACITY'));
  assert.throws(() => limiter.limit('db').tryAcquire(), is(shmlimit.WrongKindError, 'SHMLIMIT_WRONG_KIND'));
  assert.throws(() => api.tryAcquireKey('k'), is(shmlimit.WrongKindError, 'SHMLIMIT_WRONG_KIND'));
  assert.throws(() => limiter.limit('per_user').tryAcquireKey(''), is(shmlimit.InvalidKeyError, 'SHMLIMIT_INVALID_KEY'));
  assert.throws(() => limiter.limit('per_user').tryAcquireKey('x'.repeat(1025)), is(shmlimit.InvalidKeyError, 'SHMLIMIT_INVALID_KEY'));
  assert.throws(() => limiter.limit('nope'), (e) => is(shmlimit.UnknownLimitError, 'SHMLIMIT_UNKNOWN_LIMIT')(e) && /nope/.test(e.message));
  assert.throws(() => shmlimit.Limiter.open(path.join(path.dirname(file), 'missing.shm')),
    (e) => is(shmlimit.IoError, 'SHMLIMIT_IO')(e) && e.errno === 2 && /missing\.shm/.test(e.message));
  const foreign = path.join(path.dirname(file), 'foreign.shm');
  fs.writeFileSync(foreign, Buffer.alloc(8192, 7), { mode: 0o600 });
  assert.throws(() => shmlimit.Limiter.open(foreign), (e) => e instanceof shmlimit.ShmlimitError && e.status >= 100);
  assert.throws(() => shmlimit.Limiter.createOrOpen(path.join(path.dirname(file), 'bad.shm'), { 'bad name!': shmlimit.tokenBucket({ rate: 1 }) }),
    is(shmlimit.InvalidParameterError, 'SHMLIMIT_INVALID_PARAMETER'));
  // Arguments JavaScript can reject itself are TypeError / RangeError.
  assert.throws(() => api.tryAcquire(1.5), TypeError);
  assert.throws(() => api.tryAcquire(-1), TypeError);
  assert.throws(() => api.tryAcquire('1'), TypeError);
  assert.throws(() => shmlimit.tokenBucket({ rate: 0 }), RangeError);
  assert.throws(() => shmlimit.slidingLog({ limit: 5, window: -1 }), RangeError);
  // A closed handle says so.
  const other = shmlimit.Limiter.open(file);
  const l = other.limit('api');
  l.close();
  assert.throws(() => l.tryAcquire(), is(shmlimit.ClosedError, 'SHMLIMIT_CLOSED'));
  other.close();
  assert.throws(() => other.limit('db'), shmlimit.ClosedError);
  assert.equal(api.tryAcquire().allowed, true, 'the first handle is untouched');
});

test('refunds give back exactly what was granted', (t) => {
  const { limiter } = open(t, {
    api: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 4 }),
    win: shmlimit.fixedWindow({ limit: 3, window: HOUR }),
    log: shmlimit.slidingLog({ limit: 3, window: HOUR }),
  });
  for (const name of ['api', 'win', 'log']) {
    const l = limiter.limit(name);
    const g = l.tryAcquire(2);
    assert.equal(g.allowed, true);
    l.refund(g);
    assert.equal(l.peek(1).remaining, name === 'api' ? 3 : 2, `${name}: the refund restored the capacity`);
    const h = l.tryAcquire(2);
    l.refund(h, 1);
    assert.equal(l.peek(1).remaining, name === 'api' ? 2 : 1, `${name}: a partial refund`);
    // A denial recorded nothing: refunding it does nothing.
    const d = l.tryAcquire(l.peek(1).remaining + 2); // one more than is free
    assert.equal(d.allowed, false);
    const before = l.peek(1).remaining;
    l.refund(d);
    assert.equal(l.peek(1).remaining, before);
  }
  // A grant of one limit is refused by another.
  const g = limiter.limit('api').tryAcquire();
  assert.throws(() => limiter.limit('win').refund(g), shmlimit.WrongKindError);
  assert.throws(() => limiter.limit('win').refund({ allowed: true }), TypeError);
});

test('keyed limits: one budget per key, strings and bytes alike', (t) => {
  const { limiter } = open(t, { per_user: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 2, keyed: { capacity: 64 } }) });
  const u = limiter.limit('per_user');
  assert.equal(u.tryAcquireKey('alice').allowed, true);
  assert.equal(u.tryAcquireKey(Buffer.from('alice')).allowed, true, 'the same key as bytes');
  assert.equal(u.tryAcquireKey('alice').allowed, false);
  assert.equal(u.tryAcquireKey('bob', 2).allowed, true);
  assert.equal(u.peekKey('carol', 2).allowed, true);
  const g = u.tryAcquireKey('carol', 2);
  u.refundKey('carol', g);
  assert.equal(u.peekKey('carol', 2).allowed, true);
  assert.equal(u.tryAcquireKey('ü'.repeat(512)).allowed, true, 'a 1024-byte UTF-8 key');
  const occ = u.keyOccupancy();
  assert.equal(occ.slots, 64);
  assert.ok(occ.used >= 3 && occ.used <= 4, `used ${occ.used}`);
  assert.equal(typeof u.reclaimIdleKeys(), 'number');
  assert.equal(typeof u.keyTag('alice'), 'bigint');
});

test('composed checks are all or nothing', (t) => {
  const { limiter } = open(t, {
    a: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 5 }),
    b: shmlimit.fixedWindow({ limit: 2, window: HOUR }),
  });
  const a = limiter.limit('a');
  const b = limiter.limit('b');
  const c1 = shmlimit.tryAcquireAll([[a, 2], [b, 1]]);
  assert.equal(c1.allowed, true);
  assert.equal(c1.deniedBy, -1);
  assert.deepEqual(c1.decisions.map((d) => d.allowed), [true, true]);
  c1.refund();
  assert.equal(a.peek(5).allowed, true);
  assert.equal(b.peek(2).allowed, true);
  b.tryAcquire(2);
  const c2 = shmlimit.tryAcquireAll([[a, 1], [b, 1]]);
  assert.equal(c2.allowed, false);
  assert.equal(c2.deniedBy, 1);
  assert.ok(c2.retryAfterMs > 0);
  assert.equal(a.peek(5).allowed, true, 'the denied composed check consumed nothing');
  b.reset();
  assert.equal(shmlimit.tryAcquireAll([a, b]).allowed, true);
  assert.throws(() => shmlimit.tryAcquireAll([]), TypeError);
});

test('live retuning, reset and policy', (t) => {
  const { file, limiter } = open(t, {
    api: shmlimit.tokenBucket({ rate: 300, per: 1000, burst: 30 }),
    win: shmlimit.fixedWindow({ limit: 10, window: 60000 }),
  });
  const api = limiter.limit('api');
  assert.deepEqual(api.policy(), { quota: 300, windowSecs: 1 });
  // Another process's handle sees the retune at once.
  const other = shmlimit.Limiter.open(file).limit('api');
  api.setRate(600);
  // 1/600 s rounded up to whole nanoseconds, read back as 600 per second.
  assert.deepEqual(other.liveDefinition(), { kind: 'tokenBucket', rate: 600, per: 1000, burst: 30 });
  // definition() is the live one, as Limiter.definitions(); createdDefinition() the file's own.
  assert.deepEqual(other.definition(), other.liveDefinition());
  assert.deepEqual(other.createdDefinition(), { kind: 'tokenBucket', rate: 300, per: 1000, burst: 30 });
  assert.equal(shmlimit.Limiter.open(file).definitions().api.rate, 600);
  assert.equal(shmlimit.Limiter.open(file).createdDefinitions().api.rate, 300);
  api.setTokenBucket(50, 100, 1000);
  assert.equal(other.liveDefinition().burst, 50);
  assert.deepEqual(other.policy(), { quota: 100, windowSecs: 1 });
  const win = limiter.limit('win');
  for (let i = 0; i < 10; i++) assert.equal(win.tryAcquire().allowed, true);
  assert.equal(win.tryAcquire().allowed, false);
  win.setLimit(12);
  assert.equal(win.tryAcquire().allowed, true);
  win.reset();
  assert.equal(win.peek(12).allowed, true);
  assert.throws(() => win.setTokenBucket(1, 1), shmlimit.WrongKindError);
  assert.throws(() => limiter.limit('api').setLimit(5), shmlimit.WrongKindError);
});

test('a deploy that changes a limit: refused by default, adopted live, or a new file', (t) => {
  const file = path.join(tmpdir(t), 'deploy.shm');
  const before = shmlimit.Limiter.createOrOpen(file, { api: shmlimit.tokenBucket({ rate: 2, burst: 20 }) });
  t.after(() => before.close());
  assert.equal(before.limit('api').tryAcquire(15).allowed, true);
  const faster = { api: shmlimit.tokenBucket({ rate: 3, burst: 20 }) };
  assert.throws(() => shmlimit.Limiter.createOrOpen(file, faster), (e) =>
    e instanceof shmlimit.DefinitionConflictError &&
    e.message.includes('`api`: rate 2/s in the file, 3/s requested; burst 20 in both'));
  assert.throws(() => shmlimit.Limiter.createOrOpen(file, faster, { onConflict: 'sometimes' }), RangeError);
  const ino = fs.statSync(file).ino;
  shmlimit.Limiter.createOrOpen(file, faster, { onConflict: 'adopt' }).close();
  assert.equal(fs.statSync(file).ino, ino, 'a live retune keeps the file');
  assert.equal(before.limit('api').tryAcquire(10).allowed, false, 'the usage is kept');
  // The adopted parameters read back live; the created ones stay as they were.
  assert.equal(before.definitions().api.rate, 3);
  assert.equal(before.limit('api').definition().rate, 3);
  assert.equal(before.createdDefinitions().api.rate, 2);
  assert.equal(before.limit('api').createdDefinition().rate, 2);
  // The retuned file matches the new definitions under the default policy.
  shmlimit.Limiter.createOrOpen(file, faster).close();
  // A new limit needs a new file, atomically in place of the old one.
  const more = { ...faster, log: shmlimit.slidingLog({ limit: 3, window: HOUR }) };
  const after = shmlimit.Limiter.createOrOpen(file, more, { onConflict: 'adopt' });
  t.after(() => after.close());
  assert.notEqual(fs.statSync(file).ino, ino);
  assert.deepEqual(Object.keys(after.definitions()), ['api', 'log']);
});

test('the reboot choice is stored at creation and checked on open', (t) => {
  const file = path.join(tmpdir(t), 'reboot.shm');
  shmlimit.Limiter.createOrOpen(file, { daily: shmlimit.fixedWindow({ limit: 10, window: 86400 * 1000 }) },
    { onReboot: 'reset' }).close();
  assert.throws(() => shmlimit.Limiter.open(file, { onReboot: 'translate' }), shmlimit.DefinitionConflictError);
  shmlimit.Limiter.open(file, { onReboot: 'reset' }).close();
  shmlimit.Limiter.open(file).close();
  assert.throws(() => shmlimit.Limiter.open(file, { onReboot: 'sometimes' }), RangeError);
});

test('shadow limits never deny and count what they would have denied', (t) => {
  const { limiter } = open(t, { dry: shmlimit.fixedWindow({ limit: 2, window: HOUR, shadow: true }) });
  const dry = limiter.limit('dry');
  const ds = [1, 2, 3, 4].map(() => dry.tryAcquire());
  assert.ok(ds.every((d) => d.allowed));
  assert.deepEqual(ds.map((d) => d.shadowDenied), [false, false, true, true]);
  assert.equal(dry.stats().shadowDenied, 2);
});

test('rateLimitHeaders are the library\'s rendering', (t) => {
  const { limiter } = open(t, {
    api: shmlimit.tokenBucket({ rate: 300, per: 1000, burst: 30 }),
    daily: shmlimit.fixedWindow({ limit: 2, window: 86400 * 1000, aligned: 'monotonic' }),
  });
  const api = limiter.limit('api');
  const daily = limiter.limit('daily');
  const d = api.tryAcquire();
  const h = shmlimit.rateLimitHeaders([[api, d]]);
  assert.equal(h['RateLimit-Policy'], '"api";q=300;w=1');
  assert.match(h.RateLimit, /^"api";r=29;t=1$/);
  assert.equal(h['Retry-After'], undefined);
  daily.tryAcquire(2);
  const denied = daily.tryAcquire();
  const both = shmlimit.rateLimitHeaders([[api, d], [daily, denied]]);
  assert.match(both.RateLimit, /^"api";r=29;t=1, "daily";r=0;t=\d+$/);
  assert.equal(both['RateLimit-Policy'], '"api";q=300;w=1, "daily";q=2;w=86400');
  assert.equal(both['Retry-After'], String(Math.ceil(denied.retryAfterNs / 1e9)));
});

test('acquire waits on timers for the exact retry-after, and gives up when it cannot make it', async (t) => {
  const { limiter } = open(t, { api: shmlimit.tokenBucket({ rate: 20, per: 1000, burst: 1 }) });
  const api = limiter.limit('api');
  assert.equal(api.tryAcquire().allowed, true);
  const t0 = monotonicMs();
  const denied = api.tryAcquire();
  assert.equal(denied.allowed, false);
  let ticks = 0;
  const ticker = setInterval(() => { ticks++; }, 1);
  const d = await api.acquire(1, { timeout: 5000 });
  const waited = monotonicMs() - t0;
  clearInterval(ticker);
  assert.equal(d.allowed, true);
  // It slept (about) the retry-after the denial stated rather than spinning or giving up;
  // Node's timers keep millisecond time, hence the 2 ms of slack.
  assert.ok(waited >= denied.retryAfterMs - 2, `waited ${waited} ms for a retry-after of ${denied.retryAfterMs} ms`);
  assert.ok(ticks > 0, 'timers ran during the wait');
  // A timeout shorter than the retry-after: the denial, at once.
  // (Had it slept the ~50 ms retry-after, it would have been admitted.)
  const no = await api.acquire(1, { timeout: 5 });
  assert.equal(no.allowed, false);
  assert.ok(no.retryAfterMs > 5);
  // An AbortSignal rejects the wait.
  await assert.rejects(api.acquire(1, { signal: AbortSignal.timeout(10) }), (e) => e.name === 'TimeoutError' || e.name === 'AbortError');
  // Keyed and composed waits.
  const c = await shmlimit.acquireAll([api], { timeout: 1000 });
  assert.equal(c.allowed, true);
});

test('permits: waits on a thread of their own, released by this process, timeouts, abort', async (t) => {
  const { limiter } = open(t, {
    db: shmlimit.concurrency({ permits: 2 }),
    per_user: shmlimit.concurrency({ permits: 1, keyed: { capacity: 16 } }),
  });
  const db = limiter.limit('db');
  const p1 = db.tryAcquirePermit();
  const p2 = await db.acquirePermit({ timeout: 100 });
  assert.ok(p1 && p2);
  assert.equal(db.tryAcquirePermit(), null);
  // A waiter is woken by a release from a timer while the loop runs.
  let ticks = 0;
  const ticker = setInterval(() => { ticks++; }, 1);
  setTimeout(() => p1.release(), 50);
  const t0 = monotonicMs();
  const p3 = await db.acquirePermit({ timeout: 5000 });
  const waited = monotonicMs() - t0;
  clearInterval(ticker);
  assert.ok(p3, 'woken by the release');
  assert.ok(waited >= 40 && waited < 2000, `waited ${waited} ms`);
  assert.ok(ticks > 0, `the event loop ran during the wait (${ticks} ticks)`);
  assert.equal(p1.release(), false, 'released twice');
  // All held: the timeout resolves null.
  assert.equal(await db.acquirePermit({ timeout: 50 }), null);
  // An AbortSignal cancels the wait; nothing stays held for it.
  const ac = new AbortController();
  const pending = db.acquirePermit({ signal: ac.signal });
  setTimeout(() => ac.abort(), 20);
  await assert.rejects(pending, (e) => e.name === 'AbortError');
  assert.equal(db.permitHolders().length, 2);
  // withPermit releases when the function settles, and says when none came.
  p2.release();
  assert.equal(await db.withPermit(async () => db.permitHolders().length), 2);
  assert.equal(db.permitHolders().length, 1);
  await assert.rejects(db.withPermit(async () => 1, { timeout: 0 }).then(() => db.withPermit(async () => 1, { timeout: 0 })).then(() => {
    const held = db.tryAcquirePermit();
    return db.withPermit(async () => 1, { timeout: 10 }).finally(() => held.release());
  }), shmlimit.PermitUnavailableError);
  p3.release();
  // Keyed permits: one per key.
  const u = limiter.limit('per_user');
  const a = u.tryAcquireKeyPermit('alice');
  assert.ok(a);
  assert.equal(u.tryAcquireKeyPermit('alice'), null);
  assert.ok(u.tryAcquireKeyPermit('bob'));
  assert.equal(u.keyPermitsHeld('alice'), 1);
  setTimeout(() => a.release(), 20);
  const again = await u.acquireKeyPermit('alice', { timeout: 2000 });
  assert.ok(again);
  assert.equal(u.permitHolders().find((h) => h.id === again.id).keyTag, u.keyTag('alice'));
});

test('worker_threads each load the addon and share the file', async (t) => {
  const { file, limiter } = open(t, { api: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 10 }) });
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const shmlimit = require(${JSON.stringify(path.join(__dirname, '..'))});
    const api = shmlimit.Limiter.open(workerData).limit('api');
    let n = 0;
    for (let i = 0; i < 10; i++) if (api.tryAcquire().allowed) n++;
    parentPort.postMessage(n);`;
  const counts = await Promise.all([0, 1, 2].map(() => new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: file });
    w.once('message', resolve);
    w.once('error', reject);
  })));
  assert.equal(counts.reduce((a, b) => a + b, 0), 10);
  assert.equal(limiter.limit('api').stats().allowed, 10);
});

test('the bound checks of the sharing test can fail', () => {
  // 3 admissions within 1 ms of a bucket of burst 2 refilled every 10 ms: over-admitted.
  const over = admissions([0, 100, 200], [50, 150, 250]);
  assert.throws(() => checkTokenBucket(over, 2, 10e6), /over-admitted/);
  assert.ok(checkTokenBucket(over, 3, 10e6) > 0);
  const spaced = admissions([0, 10e6, 20e6], [1, 10e6 + 1, 20e6 + 1]);
  assert.ok(checkTokenBucket(spaced, 1, 10e6) > 0);
  assert.throws(() => checkSlidingLog(over, 2, 1e6), /over-admitted/);
  assert.equal(checkSlidingLog(spaced, 1, 10e6), 1);
});

test('ES modules import the same API, every export named', async () => {
  const m = await import('../lib/index.mjs');
  assert.equal(m.default, shmlimit);
  for (const name of Object.keys(shmlimit)) assert.equal(m[name], shmlimit[name], name);
});

test('a worker thread terminated while it waits for a permit leaves nothing held', { timeout: 20000 }, async (t) => {
  const { file, limiter } = open(t, { db: shmlimit.concurrency({ permits: 1 }) });
  const db = limiter.limit('db');
  const mine = db.tryAcquirePermit();
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const shmlimit = require(${JSON.stringify(path.join(__dirname, '..'))});
    const db = shmlimit.Limiter.open(workerData).limit('db');
    db.acquirePermit().then((p) => parentPort.postMessage('got ' + (p && p.id)));
    parentPort.postMessage('waiting');`;
  const w = new Worker(code, { eval: true, workerData: file });
  const messages = [];
  w.on('message', (m) => messages.push(m));
  while (!messages.includes('waiting')) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 50));
  await w.terminate();
  // Released after the waiter's environment is gone: its wait thread must not keep it.
  assert.equal(mine.release(), true);
  let holders = db.permitHolders();
  for (let i = 0; i < 100 && holders.length > 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
    holders = db.permitHolders();
  }
  assert.deepEqual(holders, []);
  assert.deepEqual(messages, ['waiting']);
  const again = db.tryAcquirePermit();
  assert.ok(again);
  again.release();
});

test('reservations book tokens in turn and wait for them on timers', async (t) => {
  const { limiter } = open(t, {
    api: shmlimit.tokenBucket({ rate: 20, per: 1000, burst: 1 }),
    win: shmlimit.fixedWindow({ limit: 1, window: 1000 }),
  });
  const api = limiter.limit('api');
  const start = process.hrtime.bigint();
  const rs = [0, 1, 2].map(() => api.reserve(1, { maxDelay: 500 }));
  assert.ok(rs.every((r) => r instanceof shmlimit.Reservation));
  // Booked in order, exactly one emission interval (50 ms) apart.
  assert.equal(rs[0].delayMs, 0);
  assert.ok(rs[1].delayMs > 0 && rs[1].delayMs <= 50, `${rs[1].delayMs}`);
  assert.equal(rs[1].readyAtNs - rs[0].readyAtNs, 50_000_000n);
  assert.equal(rs[2].readyAtNs - rs[1].readyAtNs, 50_000_000n);
  // Too long a wait: refused, nothing taken.
  assert.equal(api.reserve(1, { maxDelay: 10 }), null);
  const ds = await Promise.all(rs.map((r) => r.wait()));
  assert.ok(ds.every((d) => d.allowed));
  assert.ok(process.hrtime.bigint() >= rs[2].readyAtNs, 'the last one waited for its turn');
  assert.ok(Number(process.hrtime.bigint() - start) / 1e6 >= rs[2].delayMs - 1);
  // The last booking can be cancelled; once only.
  const r = api.reserve(1, { maxDelay: 1000 });
  assert.equal(r.cancel(), true);
  assert.equal(r.cancel(), false);
  assert.equal((await api.acquireInTurn(1, { timeout: 1000 })).allowed, true);
  assert.throws(() => limiter.limit('win').reserve(1), shmlimit.WrongKindError);
});

test('guarded limiters fail open or closed until the file appears, then decide for real', async (t) => {
  const file = path.join(tmpdir(t), 'later.shm');
  const guarded = shmlimit.Limiter.openGuarded(file, { reopenEvery: 20 });
  t.after(() => guarded.close());
  const open = guarded.limit('api', 'failOpen');
  const closed = guarded.limit('api', 'failClosed');
  assert.throws(() => guarded.limit('api'), RangeError);
  assert.equal(guarded.attached(), false);
  const o = open.tryAcquire();
  assert.equal(o.allowed, true);
  assert.equal(o.unavailable, true);
  const c = closed.tryAcquire();
  assert.equal(c.allowed, false);
  assert.equal(c.unavailable, true);
  assert.ok(c.retryAfterMs > 0 && c.retryAfterMs <= 20, `retry after the next attempt to open: ${c.retryAfterMs} ms`);
  closed.refund(o); // a policy's decision recorded nothing: a no-op

  // The file appears (a primary starting after its workers): the next attempt attaches.
  const limiter = shmlimit.Limiter.createOrOpen(file, { api: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 2 }) });
  t.after(() => limiter.close());
  await new Promise((r) => setTimeout(r, 30));
  const real = closed.tryAcquire();
  assert.equal(guarded.attached(), true);
  assert.equal(real.allowed, true);
  assert.equal(real.unavailable, false);
  assert.equal(open.tryAcquire().allowed, true);
  assert.equal(closed.tryAcquire().allowed, false, 'the real bucket of 2 is empty');
  closed.refund(real);
  assert.equal(limiter.limit('api').peek().allowed, true, 'the refund reached the file');
  assert.equal(limiter.limit('api').stats().allowed, 2);
  assert.throws(() => closed.tryAcquire(0), shmlimit.ZeroCostError);
});

test('the middleware renders no header it does not send: headers: false renders only a denial\'s', (t) => {
  const { limiter } = open(t, { api: shmlimit.tokenBucket({ rate: 2, per: HOUR }) });
  const index = require('../lib/index');
  const render = index.rateLimitHeaders;
  let rendered = 0;
  index.rateLimitHeaders = (...args) => {
    rendered += 1;
    return render(...args);
  };
  t.after(() => {
    index.rateLimitHeaders = render;
  });
  const call = (opts) => {
    const sent = {};
    const res = {
      statusCode: 200,
      setHeader: (name, value) => {
        sent[name] = value;
      },
      end: () => {},
    };
    const req = { headers: {}, socket: { remoteAddress: '127.0.0.1' } };
    let passed = false;
    shmlimit.middleware({ limits: limiter.limit('api'), ...opts })(req, res, () => {
      passed = true;
    });
    return { passed, sent, req };
  };
  const quiet = call({ headers: false });
  assert.equal(quiet.passed, true);
  assert.deepEqual(quiet.sent, {});
  assert.equal(rendered, 0, 'an admission with headers off renders nothing');
  // The application may still read them: rendered then, once.
  assert.match(quiet.req.rateLimit.headers['RateLimit'], /"api";r=1;t=\d+/);
  assert.equal(quiet.req.rateLimit.headers['RateLimit'], quiet.req.rateLimit.headers['RateLimit']);
  assert.equal(rendered, 1);
  const loud = call({});
  assert.equal(loud.passed, true);
  assert.ok(loud.sent['RateLimit'] && loud.sent['RateLimit-Policy']);
  // An admission's fields are set from pieces kept per middleware, equal to the rendering.
  assert.equal(rendered, 1, 'headers on: an admission is not rendered through rateLimitHeaders');
  assert.deepEqual(loud.sent, render([[limiter.limit('api'), loud.req.rateLimit.decisions[0]]]));
  const denied = call({ headers: false });
  assert.equal(denied.passed, false);
  assert.ok(Number(denied.sent['Retry-After']) > 0, 'a denial still says when to retry');
  assert.equal(denied.sent['RateLimit'], undefined);
  assert.equal(rendered, 2);
});

test('a package without its compiled addon says what to do: reinstall, or build a checkout', (t) => {
  // An installed package (no build.js beside it, as packed): reinstall; no build to run.
  const dir = tmpdir(t);
  fs.cpSync(path.join(__dirname, '..', 'lib'), path.join(dir, 'lib'), { recursive: true });
  fs.copyFileSync(path.join(__dirname, '..', 'package.json'), path.join(dir, 'package.json'));
  assert.throws(
    () => require(path.join(dir, 'lib', 'index.js')),
    (e) => e.code === 'SHMLIMIT_ADDON_MISSING' && /reinstall the package \(remove /.test(e.message) &&
      !/build\.js/.test(e.message) && e.message.includes(dir),
  );
  // A checkout (build.js beside the package): build it.
  const checkout = tmpdir(t);
  fs.cpSync(path.join(__dirname, '..', 'lib'), path.join(checkout, 'lib'), { recursive: true });
  fs.copyFileSync(path.join(__dirname, '..', 'package.json'), path.join(checkout, 'package.json'));
  fs.writeFileSync(path.join(checkout, 'build.js'), '');
  assert.throws(
    () => require(path.join(checkout, 'lib', 'index.js')),
    (e) => e.code === 'SHMLIMIT_ADDON_MISSING' && /this is a checkout: build it with `node build\.js`/.test(e.message) &&
      e.message.includes(checkout) && !/reinstall/.test(e.message),
  );
  // An installed package on a platform without a prebuilt addon: not supported.
  const { remedy } = require('../lib/addon');
  assert.match(remedy(dir, 'darwin-arm64'), /prebuilt for linux-x64 \(glibc\) only, and darwin-arm64 is not supported/);
  assert.doesNotMatch(remedy(dir, 'darwin-arm64'), /build\.js/);
});

test('rateLimitHeaders renders what the library renders, for every kind and outcome', (t) => {
  const { libraryRateLimitHeaders } = require('../lib/compose');
  const { limiter } = open(t, {
    api: shmlimit.tokenBucket({ rate: 7, per: 3000, burst: 3 }),
    daily: shmlimit.fixedWindow({ limit: 2, window: 1500, aligned: 'monotonic' }),
    smooth: shmlimit.slidingWindow({ limit: 3, window: 60000 }),
    log: shmlimit.slidingLog({ limit: 2, window: 2500 }),
    per_user: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 2, keyed: 16 }),
    db: shmlimit.concurrency({ permits: 1 }),
  });
  const names = ['api', 'daily', 'smooth', 'log', 'per_user'];
  const decide = (name) => (name === 'per_user' ? limiter.limit(name).tryAcquireKey('k') : limiter.limit(name).tryAcquire());
  let compared = 0;
  for (let round = 0; round < 4; round++) {
    // Admissions first, denials once each limit is spent; pairs of every size and order.
    const ds = names.map((n) => [limiter.limit(n), decide(n)]);
    for (let i = 0; i < ds.length; i++) {
      for (const pairs of [[ds[i]], ds.slice(i), [ds[i], ds[(i + 2) % ds.length]], [[limiter.limit('db'), ds[i][1]], ds[i]]]) {
        assert.deepEqual(shmlimit.rateLimitHeaders(pairs), libraryRateLimitHeaders(pairs), JSON.stringify(pairs.map(([l, d]) => [l.name, d])));
        compared++;
      }
    }
  }
  assert.ok(compared >= 80);
  // A retune shows in the policy within the second the rendered policy is kept.
  const api = limiter.limit('api');
  const before = shmlimit.rateLimitHeaders([[api, api.peek()]])['RateLimit-Policy'];
  api.setRate(9, 3000);
  api._policyAt -= 1000;
  const after = shmlimit.rateLimitHeaders([[api, api.peek()]])['RateLimit-Policy'];
  assert.notEqual(after, before);
  assert.equal(after, libraryRateLimitHeaders([[api, api.peek()]])['RateLimit-Policy']);
});
