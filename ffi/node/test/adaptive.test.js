'use strict';
// Adaptive concurrency from Node: permits within a limit that starts at its minimum, releases
// with outcomes and latencies (bad ones refused without a change), the status, `using`-style
// disposal, withAdaptive, wrong kinds.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { clearOfRemeasure, tmpdir } = require('./helpers');

test('adaptive permits within the limit, with their outcomes and the status', async (t) => {
  await clearOfRemeasure(3); // its samples are read back
  const file = path.join(tmpdir(t), 'adaptive.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    dep: shmlimit.adaptiveConcurrency({ min: 2, max: 8 }),
    pool: shmlimit.concurrency({ permits: 1 }),
  });
  t.after(() => limiter.close());
  const dep = limiter.limit('dep');
  assert.deepEqual(limiter.definitions().dep, { kind: 'adaptiveConcurrency', min: 2, max: 8, lease: null });
  let s = dep.adaptiveStatus();
  assert.deepEqual([s.limit, s.permits, s.min, s.max, s.inFlight, s.rttRecentUs], [2, 2, 2, 8, 0, null]);

  const a = dep.tryAcquireAdaptive();
  const b = dep.tryAcquireAdaptive();
  assert.ok(a && b && a.held && b.held);
  assert.equal(dep.tryAcquireAdaptive(), null);
  assert.equal(await dep.acquireAdaptive({ timeout: 10 }), null);
  assert.equal(dep.adaptiveStatus().inFlight, 2);

  assert.throws(() => a.release('great'), TypeError);
  for (const bad of [NaN, -1, Infinity]) {
    assert.throws(() => a.release('ok', { latency: bad }), shmlimit.InvalidParameterError);
  }
  assert.ok(a.held);
  assert.equal(dep.adaptiveStatus().rttRecentUs, null);
  assert.equal(a.release('ok', { latency: 250 }), true);
  assert.equal(a.release('ok'), false);
  s = dep.adaptiveStatus();
  assert.equal(s.rttRecentUs, 250000);
  b[Symbol.dispose](); // no outcome set: dropped
  assert.equal(b.held, false);
  assert.equal(dep.adaptiveStatus().inFlight, 0);

  assert.equal(await dep.withAdaptive(async () => 7), 7);
  await assert.rejects(dep.withAdaptive(async () => { throw new Error('overloaded'); }), /overloaded/);
  assert.equal(dep.adaptiveStatus().inFlight, 0);

  assert.throws(() => limiter.limit('pool').tryAcquireAdaptive(), shmlimit.WrongKindError);
  assert.throws(() => shmlimit.Limiter.createOrOpen(path.join(tmpdir(t), 'bad.shm'), {
    dep: shmlimit.adaptiveConcurrency({ min: 9, max: 8 }),
  }), shmlimit.InvalidParameterError);
});

test('the tuning is stored, read back and checked by the library', (t) => {
  const dir = tmpdir(t);
  const tuned = shmlimit.adaptiveConcurrency({ min: 2, max: 40, initial: 6, window: 50, smoothing: 0.5, tolerance: 2, headroom: 0, backoff: 0.5 });
  const limiter = shmlimit.Limiter.createOrOpen(path.join(dir, 'tuned.shm'), { dep: tuned });
  t.after(() => limiter.close());
  const expected = { kind: 'adaptiveConcurrency', min: 2, max: 40, lease: null, initial: 6, window: 50, smoothing: 0.5, tolerance: 2, headroom: 0, backoff: 0.5 };
  assert.deepEqual(limiter.definitions().dep, expected);
  assert.deepEqual(limiter.limit('dep').definition(), expected);
  assert.equal(limiter.limit('dep').adaptiveStatus().permits, 6);
  // Another tuning conflicts with the file's; the same one attaches.
  assert.throws(() => shmlimit.Limiter.createOrOpen(path.join(dir, 'tuned.shm'), {
    dep: shmlimit.adaptiveConcurrency({ min: 2, max: 40 }),
  }), shmlimit.DefinitionConflictError);
  shmlimit.Limiter.createOrOpen(path.join(dir, 'tuned.shm'), { dep: tuned }).close();

  const fs = require('node:fs');
  const fresh = path.join(dir, 'refused.shm');
  for (const [options, field] of [
    [{ smoothing: NaN }, /smoothing/], [{ smoothing: 1 }, /smoothing/], [{ tolerance: 0.5 }, /tolerance/],
    [{ tolerance: Infinity }, /tolerance/], [{ headroom: -0.1 }, /headroom/], [{ backoff: 0 }, /backoff/],
    [{ initial: 41 }, /initial limit 41/], [{ window: 1.5 }, /whole number of milliseconds/],
  ]) {
    assert.throws(() => shmlimit.Limiter.createOrOpen(fresh, {
      dep: shmlimit.adaptiveConcurrency({ min: 2, max: 40, ...options }),
    }), (e) => e instanceof shmlimit.InvalidParameterError && field.test(e.message), JSON.stringify(options));
    assert.equal(fs.existsSync(fresh), false, 'a refused tuning created the file');
  }
  assert.throws(() => shmlimit.adaptiveConcurrency({ min: 2, max: 40, smoothing: '0.5' }), TypeError);
  assert.throws(() => shmlimit.adaptiveConcurrency({ min: 2, max: 40, window: 0 }), RangeError);
  assert.throws(() => shmlimit.adaptiveConcurrency({ min: 2, max: 40, initial: 0 }), RangeError);
});
