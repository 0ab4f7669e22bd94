'use strict';
// Counters (a counters limit): each call on a real file, its numbers, and bad input refused
// with the package's own errors, nothing counted.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { tmpdir } = require('./helpers');

const { Counters } = shmlimit;

function open(t, opts = {}) {
  return Counters.open(path.join(tmpdir(t), 'c.shm'), { keys: 64, movingWindow: 8, ...opts });
}

test('incr, decr, set and count keep one fixed window per key', (t) => {
  const c = open(t);
  assert.equal(c.maxMovingLimit, 8);
  assert.equal(c.keys, 64);
  assert.deepEqual(c.count('k'), { count: 0, resetMs: 0 });
  assert.equal(c.incr('k', 10_000), 1);
  const { count, resetMs } = c.incrWithReset('k', 10_000, 4);
  assert.equal(count, 5);
  assert.ok(resetMs > 9_000 && resetMs <= 10_003, `${resetMs}`);
  assert.equal(c.decr('k', 2), 3);
  assert.equal(c.decr('k', 99), 0, 'never below zero');
  assert.ok(c.count('k').resetMs > 9_000, 'a decrement keeps the window');
  assert.equal(c.set('k', 500, 7), 7);
  const after = c.count('k');
  assert.equal(after.count, 7);
  assert.ok(after.resetMs > 400 && after.resetMs <= 503, `${after.resetMs}`);
  assert.equal(c.decr('absent'), 0);
  assert.deepEqual(c.count('absent'), { count: 0, resetMs: 0 }, 'decr claims no slot');
  // Buffers and strings of the same bytes are the same key.
  assert.equal(c.incr(Buffer.from('k'), 500), 8);
  c.clear('k');
  assert.deepEqual(c.count('k'), { count: 0, resetMs: 0 });
});

test('fixed, sliding and moving admit exactly their limit per key', (t) => {
  const c = open(t);
  const fixed = [1, 2, 3, 4].map(() => c.fixed('f', 3, 60_000).allowed);
  assert.deepEqual(fixed, [true, true, true, false]);
  const denied = c.fixed('f', 3, 60_000);
  assert.equal(denied.remaining, 0);
  assert.ok(denied.retryAfterMs > 59_000, `${denied.retryAfterMs}`);
  assert.equal(c.count('f').count, 3, 'a denial counts nothing');
  assert.equal(c.fixed('g', 3, 60_000, 3).allowed, true);
  const moving = [1, 2, 3, 4].map(() => c.moving('m', 3, 60_000).allowed);
  assert.deepEqual(moving, [true, true, true, false]);
  assert.equal(c.movingCounts('m', 3, 60_000).count, 3);
  const sliding = [1, 2, 3, 4].map(() => c.sliding('s', 3, 60_000).allowed);
  assert.deepEqual(sliding, [true, true, true, false]);
  const sc = c.slidingCounts('s', 60_000);
  assert.equal(sc.current, 3);
  assert.equal(c.clearAll(), 4);
  assert.equal(c.fixed('f', 3, 60_000).allowed, true);
});

test('bad keys, amounts and windows throw the package errors and count nothing', (t) => {
  const c = open(t);
  c.incr('k', 60_000, 2);
  const E = shmlimit;
  const cases = [
    [() => c.incr(5, 1000), E.InvalidKeyError, /a key is a string or a Uint8Array/],
    [() => c.incr(null, 1000), E.InvalidKeyError, /not null/],
    [() => c.incr('', 1000), E.InvalidKeyError, /at least one byte/],
    [() => c.incr(Buffer.alloc(0), 1000), E.InvalidKeyError, /at least one byte/],
    [() => c.incr('x'.repeat(1025), 1000), E.InvalidKeyError, /1025 bytes/],
    [() => c.incr(Buffer.alloc(1025, 1), 1000), E.InvalidKeyError, /1025 bytes/],
    [() => c.incr('é'.repeat(513), 1000), E.InvalidKeyError, /1026 bytes/],
    [() => c.incr('k', 1000, 0), E.ZeroCostError, /at least 1/],
    [() => c.decr('k', 0), E.ZeroCostError, /at least 1/],
    [() => c.incr('k', 1000, -1), E.InvalidParameterError, /amount must be a non-negative integer, not -1/],
    [() => c.incr('k', 1000, 1.5), E.InvalidParameterError, /not 1\.5/],
    [() => c.incr('k', 1000, NaN), E.InvalidParameterError, /not NaN/],
    [() => c.incr('k', 1000, '1'), E.InvalidParameterError, /not 1/],
    [() => c.incr('k', 1000, 2 ** 60), E.CostExceedsCapacityError, /above any counter's capacity/],
    [() => c.incr('k', 1000, 2 ** 24), E.CostExceedsCapacityError, /16777216/],
    [() => c.decr('k', -3), E.InvalidParameterError, /non-negative integer/],
    [() => c.incr('k', 0), E.InvalidParameterError, /window of 0 ns/],
    [() => c.incr('k', 0.5), E.InvalidParameterError, /window of 500000 ns/],
    [() => c.incr('k', -1), E.InvalidParameterError, /positive number of milliseconds/],
    [() => c.incr('k', NaN), E.InvalidParameterError, /not NaN/],
    [() => c.incr('k', Infinity), E.InvalidParameterError, /not Infinity/],
    [() => c.incr('k', 1e15), E.InvalidParameterError, /beyond the file's range/],
    [() => c.set('k', 1000, 2 ** 24), E.CostExceedsCapacityError, /16777216/],
    [() => c.set('k', 0, 1), E.InvalidParameterError, /window of 0 ns/],
    [() => c.fixed('k', 0, 1000), E.InvalidParameterError, /limit 0/],
    [() => c.fixed('k', 3, 1000, 4), E.CostExceedsCapacityError, /cost 4/],
    [() => c.fixed('k', 3, 1000, 0), E.ZeroCostError, /at least 1/],
    [() => c.moving('k', 9, 1000), E.InvalidParameterError, /at most 8 entries per key/],
    [() => c.sliding('k', 3, 100), E.InvalidParameterError, /268435456/],
    [() => c.sliding('k', 70_000, 1000), E.InvalidParameterError, /limit 70000/],
  ];
  for (const [call, cls, message] of cases) {
    assert.throws(call, (err) => {
      assert.ok(err instanceof cls, `${call}: ${err && err.name} ${err && err.message}`);
      assert.ok(err instanceof E.ShmlimitError);
      assert.match(err.message, message, String(call));
      return true;
    });
  }
  assert.equal(c.count('k').count, 2, 'no bad call counted anything');
  assert.deepEqual(c.movingCounts('k', 8, 1000), { count: 0, oldestAgeMs: 0 });
});

test('a limit of another kind is WrongKindError', (t) => {
  const l = shmlimit.Limiter.createOrOpen(path.join(tmpdir(t), 'b.shm'), { b: shmlimit.tokenBucket({ rate: 1 }) });
  assert.throws(() => new Counters(l.limit('b')), shmlimit.WrongKindError);
  assert.throws(() => shmlimit.counters({ movingWindow: 8 }), /needs keyed/);
  assert.deepEqual(shmlimit.counters({ keyed: 8 }), { kind: 'counters', movingWindow: 128, keyed: { capacity: 8, onFull: 'deny' } });
});

test('a file opened by path alone is attached as it is; the definition reads back', (t) => {
  const dir = tmpdir(t);
  const file = path.join(dir, 'c.shm');
  const a = Counters.open(file, { keys: 32, movingWindow: 4, name: 'x' });
  a.incr('k', 60_000);
  const b = Counters.open(file, { name: 'x' });
  assert.equal(b.incr('k', 60_000), 2);
  assert.deepEqual(b.limiter.definitions().x, { kind: 'counters', movingWindow: 4, keyed: { capacity: 32, onFull: 'deny' } });
  assert.throws(() => Counters.open(file, { name: 'x', keys: 64 }), shmlimit.DefinitionConflictError);
});

test('a full table answers by its policy, in the counters and in both stores', async (t) => {
  const dir = tmpdir(t);
  const results = {};
  for (const onFull of ['deny', 'allow', 'error']) {
    const c = Counters.open(path.join(dir, `${onFull}.shm`), { keys: 2, movingWindow: 0, onFull });
    results[onFull] = Array.from({ length: 8 }, (_, i) => {
      try {
        return c.incr(`k${i}`, 60_000);
      } catch (err) {
        return err.name;
      }
    });
  }
  // Two slots (a probe window of two): the third key finds none.
  assert.deepEqual(results.deny.slice(0, 3), [1, 1, Infinity]);
  assert.ok(results.deny.slice(2).every((n) => n === Infinity));
  assert.ok(results.allow.slice(2).every((n) => n === 0));
  assert.ok(results.error.slice(2).every((n) => n === 'TableFullError'));

  const { ShmlimitStore } = require('shmlimit/express-rate-limit');
  const store = new ShmlimitStore({ path: path.join(dir, 'erl.shm'), keys: 2 });
  store.init({ windowMs: 60_000 });
  const hits = Array.from({ length: 4 }, (_, i) => store.increment(`k${i}`).totalHits);
  assert.deepEqual(hits, [1, 1, Infinity, Infinity], 'denied: above any limit');
  const { RateLimiterShmlimit } = require('shmlimit/rate-limiter-flexible');
  const { RateLimiterRes } = require('rate-limiter-flexible');
  const rlf = new RateLimiterShmlimit({ path: path.join(dir, 'rlf.shm'), keys: 2, points: 5, duration: 60 });
  await rlf.consume('a');
  await rlf.consume('b');
  const rej = await rlf.consume('c').then(() => null, (r) => r);
  assert.ok(rej instanceof RateLimiterRes && rej.consumedPoints === 6 && rej.remainingPoints === 0, `${rej}`);
});
