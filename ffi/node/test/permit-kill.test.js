'use strict';
// A cluster worker SIGKILLed while holding the only permit: the primary, already waiting for it
// on its wait thread (the event loop running meanwhile), gets it.
const assert = require('node:assert/strict');
const path = require('node:path');
const { test } = require('node:test');

const monotonicMs = () => Number(process.hrtime.bigint()) / 1e6;

const shmlimit = require('..');
const { forkFixtureWorker, tmpdir } = require('./helpers');

test('a worker SIGKILLed holding a permit gives it back to a waiting primary', { timeout: 30000 }, async (t) => {
  const dir = tmpdir(t);
  const file = path.join(dir, 'permits.shm');
  const limiter = shmlimit.Limiter.createOrOpen(file, { db: shmlimit.concurrency({ permits: 1 }) });
  const db = limiter.limit('db');

  const { worker, next } = forkFixtureWorker(t, file, 'db');
  await next('ready');
  worker.send({ type: 'hold' });
  const held = await next('holding');
  assert.ok(held.permit, 'the worker took the permit');

  // The permit is the worker's: none for us, and the holders list names its pid.
  assert.equal(db.tryAcquirePermit(), null);
  const holders = db.permitHolders();
  assert.equal(holders.length, 1);
  assert.equal(holders[0].pid, worker.process.pid);
  assert.equal(holders[0].reclaimable, false);
  assert.equal(String(holders[0].id), held.permit);

  // A short wait times out with nothing (the holder is alive).
  assert.equal(await db.acquirePermit({ timeout: 150 }), null);

  // Wait (up to 10 s) while the worker is killed; timers keep firing during the wait.
  let ticks = 0;
  const ticker = setInterval(() => { ticks++; }, 5);
  const waited = db.acquirePermit({ timeout: 10000 });
  const exited = new Promise((resolve) => worker.once('exit', (code, signal) => resolve(signal)));
  // The holder lives for 50 ms of the wait: timers can only fire then if the wait does not
  // block the event loop (a wait that ends right after the kill may leave no tick after it).
  await new Promise((resolve) => setTimeout(resolve, 50));
  const killedAt = monotonicMs();
  process.kill(worker.process.pid, 'SIGKILL');
  assert.equal(await exited, 'SIGKILL');
  const permit = await waited;
  const tookMs = monotonicMs() - killedAt;
  clearInterval(ticker);
  assert.ok(permit instanceof shmlimit.Permit, 'the dead worker\'s permit was taken over');
  assert.ok(ticks > 0, 'the event loop ran while the permit was awaited');
  const now = db.permitHolders();
  assert.deepEqual(now.map((h) => h.pid), [process.pid]);
  assert.equal(permit.release(), true);
  assert.equal(db.permitHolders().length, 0);
  t.diagnostic(`permit taken over ${tookMs.toFixed(1)} ms after the SIGKILL; ${ticks} timer ticks meanwhile`);
});
