'use strict';
// Keyed adaptive concurrency from Node: per key, permits within the key's own limit, each key
// learning from its own releases, waiting for a key's permit, the status of a key, bad keys
// and calls of the wrong shape refused without a change, and the middleware's refusal.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { clearOfRemeasure, tmpdir } = require('./helpers');

test('each key of a keyed adaptive limit has its own limit', async (t) => {
  await clearOfRemeasure(3); // its samples are read back
  const file = path.join(tmpdir(t), 'keyed-adaptive.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, {
    perHost: shmlimit.adaptiveConcurrency({ min: 2, max: 8, keyed: 16 }),
    plain: shmlimit.adaptiveConcurrency({ min: 1, max: 4 }),
  });
  t.after(() => limiter.close());
  const perHost = limiter.limit('perHost');
  assert.deepEqual(limiter.definitions().perHost.keyed, { capacity: 16, onFull: 'deny' });

  const a = perHost.tryAcquireAdaptive('db-1');
  const b = perHost.tryAcquireAdaptive(Buffer.from('db-1'));
  assert.ok(a && b && a.held && b.held);
  assert.equal(perHost.tryAcquireAdaptive('db-1'), null);
  assert.equal(await perHost.acquireAdaptive({ timeout: 10, key: 'db-1' }), null);
  const c = perHost.tryAcquireAdaptive('db-2');
  assert.ok(c);
  let s = perHost.adaptiveStatus('db-1');
  assert.deepEqual([s.limit, s.permits, s.min, s.max, s.inFlight], [2, 2, 2, 8, 2]);
  assert.equal(perHost.adaptiveStatus('db-2').inFlight, 1);

  // A waiter for db-1 gets the permit db-1's release frees.
  const waiting = perHost.acquireAdaptive({ timeout: 5000, key: 'db-1' });
  assert.equal(a.release('error', { latency: 10 }), true);
  const d = await waiting;
  assert.ok(d && d.held);

  // db-1's requests fail, db-2's succeed: each key's samples are its own.
  assert.equal(b.release('dropped'), true);
  assert.equal(d.release('error', { latency: 10 }), true);
  assert.equal(c.release('ok', { latency: 250 }), true);
  s = perHost.adaptiveStatus('db-1');
  assert.deepEqual([s.limit, s.inFlight, s.rttRecentUs], [2, 0, null]);
  assert.equal(perHost.adaptiveStatus('db-2').rttRecentUs, 250000);
  assert.deepEqual(perHost.adaptiveStatus('never-seen').limit, 2);
  assert.equal(await perHost.withAdaptive(async () => 7, { key: 'db-3' }), 7);
  assert.deepEqual(perHost.keyOccupancy(), { used: 3, slots: 16 });

  // Bad keys and calls of the wrong shape: refused, nothing inserted.
  assert.throws(() => perHost.tryAcquireAdaptive(''), shmlimit.InvalidKeyError);
  assert.throws(() => perHost.adaptiveStatus('x'.repeat(1025)), shmlimit.InvalidKeyError);
  assert.throws(() => perHost.tryAcquireAdaptive(), shmlimit.WrongKindError);
  assert.throws(() => limiter.limit('plain').tryAcquireAdaptive('k'), shmlimit.WrongKindError);
  assert.deepEqual(perHost.keyOccupancy(), { used: 3, slots: 16 });

  assert.throws(() => shmlimit.middleware({ limits: [perHost] }), /keyed adaptive/);
});

test('a keyed adaptive limit with more than 64 permits per key is refused', (t) => {
  const file = path.join(tmpdir(t), 'refused.shm');
  assert.throws(
    () => shmlimit.Limiter.createOrOpen(file, { dep: shmlimit.adaptiveConcurrency({ min: 2, max: 65, keyed: 4 }) }),
    /at most 64/,
  );
});
