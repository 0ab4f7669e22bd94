'use strict';
// Adaptive concurrency from Node: permits within a limit that starts at its minimum, releases
// with outcomes and latencies (bad ones refused without a change), the status, `using`-style
// disposal, withAdaptive, wrong kinds.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { tmpdir } = require('./helpers');

test('adaptive permits within the limit, with their outcomes and the status', async (t) => {
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
