'use strict';
// acquireAdaptive waits on the addon's wait thread, blocked in the library's futex wait as a
// fixed permit's wait is: a release in another process wakes it, the event loop runs meanwhile
// and JavaScript does not poll; an AbortSignal ends it.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const native = require('../lib/native');
const { forkFixtureWorker, tmpdir } = require('./helpers');

test('a release in another process wakes an adaptive waiter', { timeout: 60000 }, async (t) => {
  const file = path.join(tmpdir(t), 'adaptive-wait.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, { dep: shmlimit.adaptiveConcurrency({ min: 1, max: 4 }) });
  t.after(() => limiter.close());
  const dep = limiter.limit('dep');

  const { worker, next } = forkFixtureWorker(t, file, 'dep');
  await next('ready');

  // Count the tries JavaScript makes while it waits: a wait on the futex makes none.
  const tryAdaptive = native.adaptiveTry;
  let tries = 0;
  native.adaptiveTry = (...args) => {
    tries++;
    return tryAdaptive(...args);
  };
  t.after(() => { native.adaptiveTry = tryAdaptive; });

  const latencies = [];
  for (let round = 0; round < 5; round++) {
    worker.send({ type: 'holdAdaptive' });
    assert.equal((await next('holding')).permit, true, 'the worker holds the only permit');
    assert.equal(dep.tryAcquireAdaptive(), null);
    tries = 0;
    let ticks = 0;
    const ticker = setInterval(() => { ticks++; }, 5);
    const waited = dep.acquireAdaptive({ timeout: 20000 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    worker.send({ type: 'releaseAdaptive' });
    const [permit, released] = await Promise.all([waited, next('released')]);
    const wokenNs = process.hrtime.bigint();
    clearInterval(ticker);
    assert.equal(released.released, true);
    assert.ok(permit instanceof shmlimit.AdaptivePermit, 'the waiter got the released permit');
    assert.ok(ticks > 0, 'the event loop ran during the wait');
    assert.equal(tries, 0, 'the wait polled from JavaScript');
    latencies.push(Number(wokenNs - BigInt(released.atNs)) / 1e6);
    assert.equal(permit.release('dropped'), true);
  }
  latencies.sort((a, b) => a - b);
  t.diagnostic(`woken ${latencies.map((ms) => ms.toFixed(2)).join(', ')} ms after the other process's release (the wait's recheck is 100 ms)`);

  // A deadline with the permit held elsewhere: null, the permit still the worker's.
  worker.send({ type: 'holdAdaptive' });
  await next('holding');
  assert.equal(await dep.acquireAdaptive({ timeout: 30 }), null);
  // An abort ends the wait with the signal's reason and takes nothing.
  const ac = new AbortController();
  const aborted = dep.acquireAdaptive({ timeout: Infinity, signal: ac.signal });
  setTimeout(() => ac.abort(new Error('shutting down')), 20);
  await assert.rejects(aborted, /shutting down/);
  await assert.rejects(dep.acquireAdaptive({ timeout: -1 }), RangeError);
  assert.equal(dep.adaptiveStatus().inFlight, 1);
  worker.send({ type: 'releaseAdaptive' });
  await next('released');
  assert.equal(dep.adaptiveStatus().inFlight, 0);
});
