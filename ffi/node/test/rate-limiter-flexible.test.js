'use strict';
// RateLimiterShmlimit as rate-limiter-flexible's users call it, in one process
// (test/stores-cluster.test.js has the workers): its answers against RateLimiterMemory's.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');
const { setTimeout: sleep } = require('node:timers/promises');

const { RateLimiterMemory, RateLimiterRes, RateLimiterUnion } = require('rate-limiter-flexible');
const RateLimiterAbstract = require('rate-limiter-flexible/lib/RateLimiterAbstract');
const { RateLimiterShmlimit } = require('shmlimit/rate-limiter-flexible');
const shmlimit = require('..');
const { tmpdir } = require('./helpers');

function make(t, opts) {
  return new RateLimiterShmlimit({ path: path.join(tmpdir(t), 'rlf.shm'), ...opts });
}

async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('resolved, expected a rejection');
}

test('consume resolves and rejects RateLimiterRes as RateLimiterMemory does', async (t) => {
  const opts = { points: 2, duration: 60 };
  const ours = make(t, opts);
  const theirs = new RateLimiterMemory(opts);
  assert.ok(ours instanceof RateLimiterAbstract);
  for (const limiter of [ours, theirs]) {
    const a = await limiter.consume('k');
    assert.ok(a instanceof RateLimiterRes);
    assert.deepEqual([a.consumedPoints, a.remainingPoints, a.isFirstInDuration], [1, 1, true]);
    assert.ok(a.msBeforeNext > 59_000 && a.msBeforeNext <= 60_003, `${a.msBeforeNext}`);
    const b = await limiter.consume('k');
    assert.deepEqual([b.consumedPoints, b.remainingPoints, b.isFirstInDuration], [2, 0, false]);
    const r = await rejection(limiter.consume('k'));
    assert.ok(r instanceof RateLimiterRes, `${r}`);
    assert.deepEqual([r.consumedPoints, r.remainingPoints], [3, 0]);
    const more = await rejection(limiter.consume('k', 2));
    assert.equal(more.consumedPoints, 5, 'a rejected consume counts, as in RateLimiterMemory');
  }
});

test('blockDuration blocks the key past its duration, once, as RateLimiterMemory does', async (t) => {
  const limiter = make(t, { points: 1, duration: 0.3, blockDuration: 0.9 });
  await limiter.consume('k');
  const r = await rejection(limiter.consume('k'));
  assert.equal(r.msBeforeNext, 900);
  await sleep(450);
  const still = await rejection(limiter.consume('k'));
  assert.ok(still instanceof RateLimiterRes);
  assert.ok(still.msBeforeNext > 300 && still.msBeforeNext <= 500, `${still.msBeforeNext}: the block was not extended`);
  await sleep(still.msBeforeNext + 20);
  assert.equal((await limiter.consume('k')).consumedPoints, 1);
});

test('penalty, reward, get, set, block and delete', async (t) => {
  const limiter = make(t, { points: 5, duration: 60 });
  assert.equal(await limiter.get('k'), null);
  assert.equal((await limiter.penalty('k', 3)).consumedPoints, 3);
  const got = await limiter.get('k');
  assert.deepEqual([got.consumedPoints, got.remainingPoints], [3, 2]);
  assert.equal((await limiter.reward('k', 2)).consumedPoints, 1);
  assert.equal((await limiter.reward('k', 9)).consumedPoints, 0, 'a reward stops at zero');
  const set = await limiter.set('k', 4, 10);
  assert.deepEqual([set.consumedPoints, set.msBeforeNext], [4, 10_000]);
  assert.ok((await limiter.get('k')).msBeforeNext <= 10_003);
  const blocked = await limiter.block('b', 20);
  assert.deepEqual([blocked.consumedPoints, blocked.msBeforeNext], [6, 20_000]);
  assert.ok((await rejection(limiter.consume('b'))) instanceof RateLimiterRes);
  const forever = await limiter.block('f', 0);
  assert.equal(forever.msBeforeNext, -1);
  assert.equal((await limiter.get('f')).msBeforeNext, -1);
  assert.equal(await limiter.delete('b'), true);
  assert.equal(await limiter.delete('b'), false);
  assert.equal((await limiter.consume('b')).consumedPoints, 1);
  assert.equal((await limiter.consume(42)).consumedPoints, 1, 'number keys as strings');
  assert.equal((await limiter.consume('z', 0)).consumedPoints, 0, 'consuming 0 reads');
});

test('keyPrefix keeps limiters apart on one file; two instances on one file share keys', async (t) => {
  const file = path.join(tmpdir(t), 'rlf.shm');
  const a = new RateLimiterShmlimit({ path: file, points: 3, duration: 60 });
  const b = new RateLimiterShmlimit({ path: file, points: 3, duration: 60 });
  const c = new RateLimiterShmlimit({ path: file, points: 3, duration: 60, keyPrefix: 'other' });
  await a.consume('k', 2);
  assert.equal((await b.consume('k')).consumedPoints, 3);
  assert.equal((await c.consume('k')).consumedPoints, 1);
  assert.equal(a.counters.count('rlflx:k').count, 3);
  const union = new RateLimiterUnion(a, c);
  const r = await rejection(union.consume('k'));
  assert.ok(r[a.keyPrefix] instanceof RateLimiterRes, 'RateLimiterUnion takes it');
});

test('bad points and keys reject with the package\'s errors and consume nothing; bad options throw', async (t) => {
  const limiter = make(t, { points: 5, duration: 60 });
  await limiter.consume('k');
  for (const [points, cls] of [[1.5, shmlimit.InvalidParameterError], [-1, shmlimit.InvalidParameterError], [NaN, shmlimit.InvalidParameterError], [2 ** 60, shmlimit.CostExceedsCapacityError]]) {
    const err = await rejection(limiter.consume('k', points));
    assert.ok(err instanceof cls && err instanceof Error, `${points}: ${err}`);
  }
  assert.ok((await rejection(limiter.consume('x'.repeat(2000)))) instanceof shmlimit.InvalidKeyError);
  assert.ok((await rejection(limiter.penalty('k', 0.5))) instanceof shmlimit.InvalidParameterError);
  assert.ok((await rejection(limiter.reward('k', -2))) instanceof shmlimit.InvalidParameterError);
  assert.equal((await limiter.get('k')).consumedPoints, 1);
  const file = path.join(tmpdir(t), 'other.shm');
  assert.throws(() => new RateLimiterShmlimit({ points: 5, duration: 1 }), /options\.path must name/);
  assert.throws(() => new RateLimiterShmlimit({ path: file, points: 2 ** 24, duration: 1 }), /points must be an integer from 0 to 16777215/);
  assert.throws(() => new RateLimiterShmlimit({ path: file, points: 1.5, duration: 1 }), /points must be an integer/);
  assert.throws(() => new RateLimiterShmlimit({ path: file, points: 5, duration: 1e9 }), /duration must be from 0 to/);
  // A file created with other options: refused by default, replaced with onConflict: 'adopt'.
  const sized = path.join(tmpdir(t), 'sized.shm');
  new RateLimiterShmlimit({ path: sized, points: 5, duration: 1, keys: 64 });
  assert.throws(() => new RateLimiterShmlimit({ path: sized, points: 5, duration: 1, keys: 128 }), shmlimit.DefinitionConflictError);
  assert.throws(() => new RateLimiterShmlimit({ path: sized, points: 5, duration: 1, keys: 128, onConflict: 'never' }), /onConflict must be/);
  new RateLimiterShmlimit({ path: sized, points: 5, duration: 1, keys: 128, onConflict: 'adopt' });
  assert.equal(shmlimit.Limiter.open(sized).definitions()['rate-limiter-flexible'].keyed.capacity, 128);
});
