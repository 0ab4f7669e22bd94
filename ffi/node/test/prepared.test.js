'use strict';
// Prepared compositions (prepareAll) on real files: every outcome equal to tryAcquireAll's over
// the same checks, bad input refused with nothing consumed, closed handles, a replaced file and
// several processes.
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');

const shmlimit = require('..');
const { tmpdir } = require('./helpers');

const HOUR = 3600 * 1000;
// What a limit (or a key of it) holds: a peek's `remaining` is what would be left after it.
const left = (d) => d.remaining + (d.allowed ? 1 : 0);

// Every kind a composed check decides, keyed and not; refills of an hour, so that the numbers
// compared do not move while the test runs.
const KINDS = {
  bucket: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 4 }),
  keyedBucket: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 3, keyed: { capacity: 64 } }),
  fixed: shmlimit.fixedWindow({ limit: 5, window: HOUR }),
  keyedFixed: shmlimit.fixedWindow({ limit: 3, window: HOUR, keyed: { capacity: 64 } }),
  sliding: shmlimit.slidingWindow({ limit: 5, window: HOUR }),
  keyedSliding: shmlimit.slidingWindow({ limit: 4, window: HOUR, keyed: { capacity: 64 } }),
  log: shmlimit.slidingLog({ limit: 6, window: HOUR }),
  dry: shmlimit.fixedWindow({ limit: 1, window: HOUR, shadow: true }),
  permits: shmlimit.concurrency({ permits: 2 }),
  adaptive: shmlimit.adaptiveConcurrency({ min: 1, max: 4 }),
};
const KEYED = new Set(['keyedBucket', 'keyedFixed', 'keyedSliding']);

function open(t, defs, name = 'limits.shm') {
  const file = path.join(tmpdir(t), name);
  const limiter = shmlimit.Limiter.createOrOpen(file, defs);
  t.after(() => limiter.close());
  return { file, limiter };
}

// What is compared of a composed outcome (retry-after and reset times move with the clock:
// compared to the millisecond).
function shape(c) {
  return {
    allowed: c.allowed,
    deniedBy: c.deniedBy,
    retryAfterMs: Math.round(c.retryAfterMs / 1000),
    decisions: c.decisions.map((d) => ({
      allowed: d.allowed,
      shadowDenied: d.shadowDenied,
      remaining: d.remaining,
      retryAfterS: Math.round(d.retryAfterMs / 1000),
      granted: d._grant !== null,
    })),
  };
}

// The outcome or the error's class and message, of a call.
function outcome(fn) {
  try {
    return shape(fn());
  } catch (err) {
    return { error: err.constructor.name, message: err.message.replace(/^tryAcquire of a prepared composition|^tryAcquireAll/, '') };
  }
}

test('a prepared composition decides as tryAcquireAll over every kind, keyed and not', (t) => {
  // Two files of the same definitions: one decided by tryAcquireAll, one by the prepared check.
  const a = open(t, KINDS, 'a.shm').limiter;
  const b = open(t, KINDS, 'b.shm').limiter;
  const names = Object.keys(KINDS);
  // Compositions of 1 to 3 checks over every kind (costs 1 and 2), with the keys cycling among
  // three clients: their budgets run out, so denials by every position happen.
  const compositions = [];
  for (let i = 0; i < names.length; i++) {
    compositions.push([[names[i], 1]]);
    compositions.push([[names[i], 1], [names[(i + 1) % names.length], 2]]);
    compositions.push([[names[(i + 3) % names.length], 1], [names[i], 1], [names[(i + 5) % names.length], 1]]);
  }
  let denied = 0;
  let refused = 0;
  for (const comp of compositions) {
    const prepared = shmlimit.prepareAll(comp.map(([n, cost]) => ({ limit: b.limit(n), cost, keyed: KEYED.has(n) })));
    for (let r = 0; r < 6; r++) {
      const keys = comp.filter(([n]) => KEYED.has(n)).map((_, j) => `client-${(r + j) % 3}`);
      let j = 0;
      const checks = comp.map(([n, cost]) => (KEYED.has(n) ? [a.limit(n), cost, keys[j++]] : [a.limit(n), cost]));
      const want = outcome(() => shmlimit.tryAcquireAll(checks));
      const got = outcome(() => prepared.tryAcquire(...keys));
      assert.deepEqual(got, want, `${JSON.stringify(comp)} round ${r}`);
      if (want.error) refused++;
      else if (!want.allowed) denied++;
    }
  }
  assert.ok(denied > 20, `denials compared: ${denied}`);
  assert.ok(refused > 10, `refusals (concurrency kinds) compared: ${refused}`);
  // Every limit holds the same in both files afterwards.
  for (const n of names) {
    if (n === 'permits' || n === 'adaptive') continue;
    const pa = KEYED.has(n) ? a.limit(n).peekKey('client-0') : a.limit(n).peek();
    const pb = KEYED.has(n) ? b.limit(n).peekKey('client-0') : b.limit(n).peek();
    assert.equal(pb.remaining, pa.remaining, n);
    assert.deepEqual(b.limit(n).stats(), a.limit(n).stats(), n);
  }
});

test('a denied prepared check consumes nothing, says which check denied and when to retry; a grant refunds', (t) => {
  const { limiter } = open(t, {
    global: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 10 }),
    user: shmlimit.fixedWindow({ limit: 2, window: HOUR, keyed: { capacity: 16 } }),
  });
  const global = limiter.limit('global');
  const user = limiter.limit('user');
  const p = shmlimit.prepareAll([global, { limit: user, keyed: true }]);
  assert.deepEqual(p.keyedAt, [1]);
  assert.equal(p.tryAcquire('alice').allowed, true);
  const granted = p.tryAcquire(Buffer.from('alice'));
  assert.equal(granted.allowed, true, 'a Buffer key is the same key as its string');
  assert.deepEqual(granted.decisions.map((d) => d.remaining), [8, 0]);
  const denied = p.tryAcquire('alice');
  assert.equal(denied.allowed, false);
  assert.equal(denied.deniedBy, 1);
  assert.ok(denied.retryAfterMs > 0 && denied.retryAfterMs <= HOUR, `${denied.retryAfterMs}`);
  assert.equal(left(global.peek()), 8, 'the denied check gave the global grant back');
  assert.equal(global.stats().refunded, 1);
  granted.refund();
  assert.equal(left(user.peekKey('alice')), 1, 'the refund gave the key its unit back');
  assert.equal(left(global.peek()), 9);
  assert.equal(p.tryAcquire('bob').allowed, true);
});

test('bad input to a prepared check is refused with a clear error and consumes nothing', (t) => {
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
  assert.throws(() => p.tryAcquire(), /takes 1 key \(one per keyed check\), not 0/);
  assert.throws(() => p.tryAcquire('alice', 'bob'), /takes 1 key .* not 2/);
  assert.throws(() => p.tryAcquire(42), /key 0 must be a string or a Uint8Array, not number/);
  assert.throws(() => p.tryAcquire(null), TypeError);
  assert.throws(() => p.tryAcquire(''), shmlimit.InvalidKeyError);
  assert.throws(() => p.tryAcquire('x'.repeat(5000)), shmlimit.InvalidKeyError);
  untouched();
  // A keyed limit prepared without a key, an unkeyed one with: the library's WrongKindError.
  assert.throws(() => shmlimit.prepareAll([global, user]).tryAcquire(), shmlimit.WrongKindError);
  assert.throws(() => shmlimit.prepareAll([{ limit: global, keyed: true }]).tryAcquire('alice'), shmlimit.WrongKindError);
  assert.throws(() => shmlimit.prepareAll([{ limit: global, cost: 0 }]).tryAcquire(), shmlimit.ZeroCostError);
  assert.throws(() => shmlimit.prepareAll([{ limit: global, cost: 11 }]).tryAcquire(), shmlimit.CostExceedsCapacityError);
  untouched();
  // Malformed checks are refused when preparing.
  assert.throws(() => shmlimit.prepareAll([]), /1 to 8/);
  assert.throws(() => shmlimit.prepareAll(Array(9).fill(global)), /1 to 8/);
  assert.throws(() => shmlimit.prepareAll([{ limit: 'global' }]), /check 0 names no Limit/);
  assert.throws(() => shmlimit.prepareAll([null]), /check 0 names no Limit/);
  assert.throws(() => shmlimit.prepareAll([{ limit: global, keyed: 'yes' }]), /keyed must be a boolean/);
  assert.throws(() => shmlimit.prepareAll([{ limit: global, cost: -1 }]), TypeError);
  assert.throws(() => shmlimit.prepareAll([{ limit: global, cost: 1.5 }]), TypeError);
  untouched();
  // The prepared costs and limits are its own: changing the arrays shown changes nothing.
  assert.throws(() => { p.costs[0] = 1; }, TypeError);
  // A closed limit: a ClosedError naming it, and nothing consumed on the others.
  const other = limiter.limit('other');
  const q = shmlimit.prepareAll([global, other]);
  other.close();
  assert.throws(() => q.tryAcquire(), (e) => e instanceof shmlimit.ClosedError && /limit 'other'/.test(e.message));
  assert.throws(() => shmlimit.tryAcquireAll([global, other]), shmlimit.ClosedError);
  assert.throws(() => shmlimit.prepareAll([global, other]), (e) => e instanceof shmlimit.ClosedError && /limit 'other'/.test(e.message));
  untouched();
  // Closing the limiter leaves resolved limits usable, prepared or not.
  limiter.close();
  assert.equal(p.tryAcquire('alice').allowed, true);
  assert.equal(shmlimit.tryAcquireAll([[global, 2], [user, 1, 'alice']]).allowed, true);
  assert.equal(left(global.peek()), 6);
});

test('a prepared check follows its limits to a replacing file, as tryAcquireAll does', async (t) => {
  const file = path.join(tmpdir(t), 'deploy.shm');
  const defs = { api: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 40 }) };
  const before = shmlimit.Limiter.createOrOpen(file, defs);
  t.after(() => before.close());
  const api = before.limit('api');
  const p = shmlimit.prepareAll([{ limit: api, cost: 5 }]);
  assert.equal(p.tryAcquire().decisions[0].remaining, 35);
  const ino = fs.statSync(file).ino;
  // A new limit needs a new file, atomically in place of the old one (the usage carried over).
  const more = { ...defs, log: shmlimit.slidingLog({ limit: 3, window: HOUR }) };
  const after = shmlimit.Limiter.createOrOpen(file, more, { onConflict: 'adopt' });
  t.after(() => after.close());
  assert.notEqual(fs.statSync(file).ino, ino);
  const moved = after.limit('api');
  assert.equal(left(moved.peek()), 35);
  // Attached processes move to the new file within about a second: the prepared check's
  // decisions drain the old file, then land in the new one.
  const deadline = Date.now() + 5000;
  while (left(moved.peek()) === 35 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    p.tryAcquire();
  }
  assert.equal(left(moved.peek()), 30, 'the prepared check reached the new file');
  assert.equal(shmlimit.tryAcquireAll([[api, 5]]).decisions[0].remaining, 25, 'so does tryAcquireAll');
  assert.equal(p.tryAcquire().decisions[0].remaining, 20);
  assert.equal(left(moved.peek()), 20);
});

test('prepared checks in several processes share one budget exactly', { timeout: 60000 }, async (t) => {
  const { file, limiter } = open(t, {
    global: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 1000 }),
    user: shmlimit.fixedWindow({ limit: 150, window: HOUR, keyed: { capacity: 16 } }),
  });
  const code = `
    const shmlimit = require(${JSON.stringify(path.join(__dirname, '..'))});
    const l = shmlimit.Limiter.open(${JSON.stringify(file)});
    const p = shmlimit.prepareAll([l.limit('global'), { limit: l.limit('user'), keyed: true }]);
    let admitted = 0;
    for (let i = 0; i < 200; i++) if (p.tryAcquire(i % 2 ? 'alice' : 'bob').allowed) admitted++;
    process.stdout.write(String(admitted));
  `;
  const run = () => new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', code], (err, stdout) => (err ? reject(err) : resolve(Number(stdout))));
  });
  const counts = await Promise.all([run(), run(), run()]);
  // 600 attempts, 300 per key: each key admits exactly 150, and the global bucket 300.
  assert.equal(counts.reduce((s, n) => s + n, 0), 300, `admitted per process: ${counts}`);
  assert.equal(left(limiter.limit('global').peek()), 700);
  assert.equal(limiter.limit('user').peekKey('alice').remaining, 0);
  assert.equal(limiter.limit('user').peekKey('bob').remaining, 0);
});

test('a prepared check keeps its limits: collecting the limiter and the Limits given closes nothing', { timeout: 30000 }, async (t) => {
  const { file } = open(t, { api: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 50 }) });
  const code = `
    const shmlimit = require(${JSON.stringify(path.join(__dirname, '..'))});
    let p = (() => {
      const l = shmlimit.Limiter.open(${JSON.stringify(file)});
      return shmlimit.prepareAll([{ limit: l.limit('api'), cost: 2 }]);
    })();
    (async () => {
      for (let i = 0; i < 5; i++) {
        global.gc();
        await new Promise((r) => setImmediate(r));
      }
      process.stdout.write(String(p.tryAcquire().decisions[0].remaining));
    })();
  `;
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', '-e', code], (err, stdout) => (err ? reject(err) : resolve(stdout)));
  });
  assert.equal(out, '48');
});
