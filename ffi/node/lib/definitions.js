'use strict';
// Definitions: tokenBucket(), fixedWindow(), slidingWindow(), slidingLog(), concurrency(), the
// raw form the addon takes and the form a stored definition reads back in. Durations are
// milliseconds (fractions allowed), stored as nanoseconds.

const KIND = { tokenBucket: 1, fixedWindow: 2, slidingWindow: 3, slidingLog: 4, concurrency: 5, adaptiveConcurrency: 8, counters: 6 };
const KIND_NAME = Object.fromEntries(Object.entries(KIND).map(([k, v]) => [v, k]));
const ON_FULL = { deny: 0, allow: 1, error: 2 };
const ON_FULL_NAME = ['deny', 'allow', 'error'];
const ALIGNED = { wall: 0, monotonic: 1 };
const FLAG_SHADOW = 1;
const FLAG_NEAR_LIMIT = 2;
const DEFAULT_NEAR_LIMIT = 6554;

function count(value, what) {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${what} must be a positive integer, not ${String(value)}`);
  }
  return value;
}

function msToNs(ms, what, { zero = false } = {}) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || (!zero && ms === 0)) {
    throw new RangeError(`${what} must be a ${zero ? 'non-negative' : 'positive'} number of milliseconds, not ${String(ms)}`);
  }
  const ns = Math.round(ms * 1e6);
  if (!Number.isSafeInteger(ns) || (!zero && ns === 0)) {
    throw new RangeError(`${what} of ${ms} ms is out of range (1 ns to 2^53 ns)`);
  }
  return ns;
}

function options(spec, o) {
  if (o.keyed !== undefined && o.keyed !== null && o.keyed !== false) {
    const k = typeof o.keyed === 'number' ? { capacity: o.keyed } : o.keyed;
    spec.keyed = { capacity: count(k.capacity, 'keyed.capacity'), onFull: k.onFull || 'deny' };
    if (!(spec.keyed.onFull in ON_FULL)) {
      throw new RangeError(`keyed.onFull must be 'deny', 'allow' or 'error', not ${String(k.onFull)}`);
    }
  }
  if (o.shadow) spec.shadow = true;
  if (o.nearLimit !== undefined) {
    if (typeof o.nearLimit !== 'number' || !(o.nearLimit >= 0 && o.nearLimit <= 1)) {
      throw new RangeError(`nearLimit must be a fraction from 0 to 1, not ${String(o.nearLimit)}`);
    }
    spec.nearLimit = o.nearLimit;
  }
  if (o.split !== undefined) spec.split = count(o.split, 'split');
  if (o.fleet !== undefined) {
    spec.fleet = {
      rate: count(o.fleet.rate, 'fleet.rate'),
      per: o.fleet.per === undefined ? 1000 : o.fleet.per,
      weight: o.fleet.weight === undefined ? 1 : count(o.fleet.weight, 'fleet.weight'),
    };
    msToNs(spec.fleet.per, 'fleet.per');
  }
  return spec;
}

/** A token bucket: `burst` tokens (default `rate`), refilled at `rate` per `per` ms (default
 *  1000). At most `floor(burst + rate * T / per)` admissions in any interval of `T` ms. */
function tokenBucket({ rate, per = 1000, burst, ...o } = {}) {
  count(rate, 'rate');
  msToNs(per, 'per');
  return options({ kind: 'tokenBucket', rate, per, burst: burst === undefined ? rate : count(burst, 'burst') }, o);
}

function windowed(kind, { limit, window, aligned = 'wall', ...o } = {}) {
  count(limit, 'limit');
  msToNs(window, 'window');
  if (!(aligned in ALIGNED)) {
    throw new RangeError(`aligned must be 'wall' or 'monotonic', not ${String(aligned)}`);
  }
  return options({ kind, limit, window, aligned }, o);
}

/** At most `limit` per aligned window of `window` ms. */
const fixedWindow = (o) => windowed('fixedWindow', o);
/** The weighted sliding-window counter: about `limit` per `window` ms. */
const slidingWindow = (o) => windowed('slidingWindow', o);

/** The exact sliding log: at most `limit` admissions in every interval of `window` ms. */
function slidingLog({ limit, window, ...o } = {}) {
  count(limit, 'limit');
  msToNs(window, 'window');
  return options({ kind: 'slidingLog', limit, window }, o);
}

/** At most `permits` held at once across every process (per key, if keyed); a permit held
 *  longer than `lease` ms (default: no lease) becomes reclaimable, as do a dead process's. */
function concurrency({ permits, lease, ...o } = {}) {
  count(permits, 'permits');
  if (lease !== undefined && lease !== null) msToNs(lease, 'lease');
  return options({ kind: 'concurrency', permits, lease: lease === undefined ? null : lease }, o);
}

// An adaptive limit's tuning: its defaults, and the units the file stores each fraction in.
const TUNING = {
  smoothing: { default: 0.2, units: 65536 },
  tolerance: { default: 1.0, units: 4096 },
  headroom: { default: 0.1, units: 65536 },
  backoff: { default: 0.9, units: 65536 },
};
const DEFAULT_WINDOW_NS = 20e6;

/** At most `L` permits held at once across every process, `L` moving within [`min`, `max`]
 *  with the latency and outcome every release reports (see docs/adaptive.md); `lease` ms as
 *  concurrency()'s. The tuning, each optional (the library checks the values when the file is
 *  created or opened, throwing InvalidParameterError naming the field): `initial` limit
 *  (default `min`), update `window` ms, whole milliseconds (20), `smoothing` (0.2),
 *  `tolerance` (1.0), `headroom` (0.1), `backoff` (0.9). */
function adaptiveConcurrency({ min, max, lease, initial, window, smoothing, tolerance, headroom, backoff, ...o } = {}) {
  count(min, 'min');
  count(max, 'max');
  if (lease !== undefined && lease !== null) msToNs(lease, 'lease');
  const spec = { kind: 'adaptiveConcurrency', min, max, lease: lease === undefined ? null : lease };
  if (initial !== undefined) spec.initial = count(initial, 'initial');
  if (window !== undefined) {
    msToNs(window, 'window');
    spec.window = window;
  }
  for (const [name, value] of Object.entries({ smoothing, tolerance, headroom, backoff })) {
    if (value === undefined) continue;
    if (typeof value !== 'number') throw new TypeError(`${name} must be a number, not ${typeof value}`);
    spec[name] = value;
  }
  return options(spec, o);
}

/** The raw tuning of an adaptive definition (what the addon gives the library). */
function rawTuning(spec) {
  const t = { initial: spec.initial || 0, windowNs: spec.window !== undefined ? msToNs(spec.window, 'window') : DEFAULT_WINDOW_NS };
  for (const [name, { default: d }] of Object.entries(TUNING)) t[name] = spec[name] !== undefined ? spec[name] : d;
  return t;
}

/** The shortest decimal that stores as `x` does in `units` per 1. */
function stored(x, units) {
  const n = Math.round(x * units);
  for (let digits = 1; digits < 18; digits++) {
    const short = Number(x.toPrecision(digits));
    if (Math.round(short * units) === n) return short;
  }
  return x;
}

/** The tuning fields of an adaptive spec read back from the file: those that differ from the
 *  defaults, as written (a definition with the default tuning reads back without any). */
function tuningOf(spec, t) {
  if (t.initial !== 0 && t.initial !== spec.min) spec.initial = t.initial;
  if (t.windowNs !== DEFAULT_WINDOW_NS) spec.window = t.windowNs / 1e6;
  for (const [name, { default: d, units }] of Object.entries(TUNING)) {
    if (Math.round(t[name] * units) !== Math.round(d * units)) spec[name] = stored(t[name], units);
  }
  return spec;
}

/** Keyed counters whose window and limit come with each call (lib/counters.js): `keyed`
 *  (key slots, required) and `movingWindow` log entries per key (default 128; 0: no moving
 *  windows), the largest moving-window limit the file holds. */
function counters({ movingWindow = 128, ...o } = {}) {
  if (!Number.isSafeInteger(movingWindow) || movingWindow < 0) {
    throw new RangeError(`movingWindow must be a non-negative integer, not ${String(movingWindow)}`);
  }
  if (o.keyed === undefined || o.keyed === null || o.keyed === false) {
    throw new RangeError('counters() needs keyed: the number of key slots');
  }
  return options({ kind: 'counters', movingWindow }, o);
}

function rawDef(name, spec) {
  if (typeof spec !== 'object' || spec === null || !(spec.kind in KIND)) {
    throw new TypeError(`limit '${name}': expected a definition from tokenBucket(), fixedWindow(), slidingWindow(), slidingLog() or concurrency()`);
  }
  const d = {
    name, kind: KIND[spec.kind], alignment: 0, limit: 0, periodNs: 0, rate: 0, keyCapacity: 0,
    onFull: 0, flags: 0, nearLimit: 0, split: 0, fleetWeight: 0, fleetEmissionNs: 0,
  };
  switch (spec.kind) {
    case 'tokenBucket':
      d.limit = spec.burst; d.periodNs = msToNs(spec.per, 'per'); d.rate = spec.rate;
      break;
    case 'fixedWindow':
    case 'slidingWindow':
      d.limit = spec.limit; d.periodNs = msToNs(spec.window, 'window'); d.alignment = ALIGNED[spec.aligned || 'wall'];
      break;
    case 'slidingLog':
      d.limit = spec.limit; d.periodNs = msToNs(spec.window, 'window');
      break;
    case 'counters':
      d.limit = spec.movingWindow;
      break;
    case 'adaptiveConcurrency':
      d.limit = spec.max; d.rate = spec.min; d.periodNs = spec.lease ? msToNs(spec.lease, 'lease') : 0;
      d.tuning = rawTuning(spec);
      break;
    default:
      d.limit = spec.permits; d.periodNs = spec.lease ? msToNs(spec.lease, 'lease') : 0;
  }
  if (spec.keyed) {
    d.keyCapacity = spec.keyed.capacity;
    d.onFull = ON_FULL[spec.keyed.onFull || 'deny'];
  }
  if (spec.shadow) d.flags |= FLAG_SHADOW;
  if (spec.nearLimit !== undefined) {
    d.flags |= FLAG_NEAR_LIMIT;
    d.nearLimit = Math.min(65535, Math.round(spec.nearLimit * 65536));
  }
  if (spec.split) d.split = spec.split;
  if (spec.fleet) {
    d.fleetWeight = spec.fleet.weight;
    d.fleetEmissionNs = Math.ceil(msToNs(spec.fleet.per, 'fleet.per') / spec.fleet.rate);
  }
  return d;
}

/** The usual periods a stored refill interval is read back in, as the Python package does. */
const READBACK_PERIODS_NS = [1e9, 60e9, 3600e9, 86400e9, 1e6, 1e3];

/**
 * `{rate, periodNs}` for a stored refill interval of `emissionNs`: the first usual period whose
 * rate stores the same interval (the library rounds `period / rate` up), else one token per
 * interval. The same normalisation as the Python package's (`_bucket_form`), so a definition
 * reads back as it was written whenever its period is one of these.
 */
function bucketForm(emissionNs) {
  for (const period of READBACK_PERIODS_NS) {
    const rate = Math.round(period / emissionNs);
    if (rate >= 1 && Math.ceil(period / rate) === emissionNs) return { rate, periodNs: period };
  }
  return { rate: 1, periodNs: emissionNs };
}

/** The spec of a raw stored definition; `tuning` (an adaptive limit's, from the addon's
 *  adaptiveTuning) adds the tuning fields that differ from the defaults. */
function specOf(d, tuning) {
  const kind = KIND_NAME[d.kind];
  let spec;
  switch (kind) {
    case 'tokenBucket': {
      // The library reports rate = 1 per the stored interval.
      const { rate, periodNs } = bucketForm(Math.ceil(d.periodNs / Math.max(d.rate, 1)));
      spec = { kind, rate, per: periodNs / 1e6, burst: d.limit };
      break;
    }
    case 'fixedWindow':
    case 'slidingWindow':
      spec = { kind, limit: d.limit, window: d.periodNs / 1e6, aligned: d.alignment === 1 ? 'monotonic' : 'wall' };
      break;
    case 'slidingLog':
      spec = { kind, limit: d.limit, window: d.periodNs / 1e6 };
      break;
    case 'concurrency':
      spec = { kind, permits: d.limit, lease: d.periodNs ? d.periodNs / 1e6 : null };
      break;
    case 'counters':
      spec = { kind, movingWindow: d.limit };
      break;
    case 'adaptiveConcurrency':
      spec = { kind, min: d.rate, max: d.limit, lease: d.periodNs ? d.periodNs / 1e6 : null };
      if (tuning) tuningOf(spec, tuning);
      break;
    default:
      spec = { kind: `unknown(${d.kind})`, limit: d.limit, periodNs: d.periodNs };
  }
  if (d.keyCapacity) spec.keyed = { capacity: d.keyCapacity, onFull: ON_FULL_NAME[d.onFull] || 'deny' };
  if (d.flags & FLAG_SHADOW) spec.shadow = true;
  // The library reports the near-limit fraction on every definition; only a non-default one is shown.
  if ((d.flags & FLAG_NEAR_LIMIT) && d.nearLimit !== DEFAULT_NEAR_LIMIT) spec.nearLimit = d.nearLimit / 65536;
  if (d.split > 1) spec.split = d.split;
  if (d.fleetWeight) spec.fleet = { rate: 1, per: d.fleetEmissionNs / 1e6, weight: d.fleetWeight };
  return spec;
}

module.exports = {
  tokenBucket, fixedWindow, slidingWindow, slidingLog, concurrency, adaptiveConcurrency, counters, rawDef, specOf, count, msToNs,
};
