#!/usr/bin/env node
'use strict';
// The per-call cost of napi-rs against the C addon (src/), side by side in one run:
// `tryAcquire` on a token bucket that always admits and on one that always denies, through
//   - the package as it is (the C addon over the C ABI);
//   - the napi-rs prototype in bench/napi-rs/ (the Rust library through napi-rs 3): a
//     `#[napi]` class method, a `#[napi]` function over a table of handles, and the same
//     function as a raw Node-API callback written in Rust (no generated glue);
//   - a plain JavaScript method that builds the same Decision from constants: the floor.
// Every path builds the same Decision object from a 64-byte buffer, as the package does.
// Usage:
//   cargo build --release --manifest-path bench/napi-rs/Cargo.toml
//   node bench/napi-rs.js [path of libshmlimit_napi_prototype.so]
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const shmlimit = require('..');
// The package's own Decision, built the same way by every path.
const { Decision } = require('../lib/decision');

const so = process.argv[2] || path.join(__dirname, '..', '..', '..', 'target', 'release', 'libshmlimit_napi_prototype.so');
const proto = { exports: {} };
process.dlopen(proto, so);
const nat = proto.exports;

const N = 1000000;
const ROUNDS = 7;
const HOUR = 3600 * 1000;

const f64 = new Float64Array(nat.decision, 0, 3);
const u32 = new Uint32Array(nat.decision, 0, 16);
function read() {
  const flags = u32[6];
  const grant = flags & 1 ? [u32[8], u32[9], u32[10], u32[11], u32[12], u32[13]] : null;
  return new Decision((flags & 1) === 1, (flags & 2) !== 0, f64[0], f64[1], f64[2], grant);
}

class ClassLimit {
  constructor(h) {
    this._h = h;
  }

  tryAcquire(cost = 1) {
    if (this._h.acquire(cost) !== 0) throw new Error('tryAcquire failed');
    return read();
  }
}

class TableLimit {
  constructor(id, call) {
    this._id = id;
    this._call = call;
  }

  tryAcquire(cost = 1) {
    if (this._call(this._id, cost) !== 0) throw new Error('tryAcquire failed');
    return read();
  }
}

class Floor {
  tryAcquire(cost = 1) {
    return new Decision(true, false, 1e9 - cost, 0, 1000, [cost, 0, 0, 0, 0, 0]);
  }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shmlimit-napi-'));
try {
  const limiter = shmlimit.Limiter.createOrOpen(path.join(dir, 'c.shm'), {
    open: shmlimit.tokenBucket({ rate: 1e9, per: 1000, burst: 1e9 }),
    shut: shmlimit.tokenBucket({ rate: 1, per: HOUR, burst: 1 }),
  });
  const open = nat.protoOpen(path.join(dir, 'open.shm'), 'open', 1e9, 1e9);
  const shut = nat.protoOpen(path.join(dir, 'shut.shm'), 'shut', 0, 1);
  const limits = {
    'C addon': [limiter.limit('open'), limiter.limit('shut')],
    'napi-rs `#[napi]` class method': [new ClassLimit(open), new ClassLimit(shut)],
    'napi-rs `#[napi]` function over a handle table': [new TableLimit(open.id(), nat.acquireId), new TableLimit(shut.id(), nat.acquireId)],
    'raw Node-API callback in Rust (napi::sys)': [new TableLimit(open.id(), nat.rawAcquireId), new TableLimit(shut.id(), nat.rawAcquireId)],
  };
  limits['C addon'][1].tryAcquire();
  limits['napi-rs `#[napi]` class method'][1].tryAcquire();
  const sink = new Array(8);
  const cases = { 'plain JavaScript method (the floor)': () => {
    const floor = new Floor();
    for (let i = 0; i < N; i++) {
      const d = floor.tryAcquire();
      if (!d.allowed) throw new Error('denied');
      sink[i & 7] = d;
    }
  } };
  for (const [name, [admit, deny]] of Object.entries(limits)) {
    cases[`${name}, admitted`] = () => {
      for (let i = 0; i < N; i++) if (!admit.tryAcquire().allowed) throw new Error('denied');
    };
    cases[`${name}, denied`] = () => {
      for (let i = 0; i < N; i++) if (deny.tryAcquire().allowed) throw new Error('admitted');
    };
  }
  // Warm up every case, then interleave the rounds so that load changes hit them all alike.
  const rounds = Object.fromEntries(Object.keys(cases).map((k) => [k, []]));
  for (const fn of Object.values(cases)) fn();
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, fn] of Object.entries(cases)) {
      const t0 = process.hrtime.bigint();
      fn();
      rounds[name].push(Number(process.hrtime.bigint() - t0) / N);
    }
  }
  console.log(`node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log('| case | median per call | fastest round |');
  console.log('|---|---|---|');
  for (const [name, r] of Object.entries(rounds)) {
    r.sort((a, b) => a - b);
    console.log(`| ${name} | ${r[ROUNDS >> 1].toFixed(0)} ns | ${r[0].toFixed(0)} ns |`);
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
