'use strict';
// One limit of a limiter file, resolved by name: decisions, refunds, waits, reservations,
// permits, retuning and inspection. Decisions are synchronous and lock-free.

const native = require('./native');
const { readDecision, writeDecision, u8, u32 } = require('./decision');
const { failure, PermitUnavailableError } = require('./errors');
const { count, msToNs, specOf } = require('./definitions');
const { waitFor } = require('./waiting');
const { Permit, AdaptivePermit, waitPermit, waitAdaptive } = require('./permits');
const { Reservation } = require('./reservation');

const RETUNE = { setRate: 0, setTokenBucket: 1, setLimit: 2, reset: 3 };

/** One limit of a limiter file, resolved by name. Decisions are synchronous and lock-free. */
class Limit {
  constructor(handle, name) {
    this._h = handle;
    /** The limit's name. */
    this.name = name;
    // Its RateLimit-Policy item and when it was read (lib/compose.js, rateLimitHeaders).
    this._policyItem = null;
    this._policyAt = -Infinity;
  }

  /** Admit `cost` units now, or deny and consume nothing. */
  tryAcquire(cost = 1) {
    const st = native.acquire(this._h, cost);
    if (st !== 0) throw failure(st, `tryAcquire on '${this.name}'`);
    return readDecision();
  }

  /** What `tryAcquire(cost)` would decide now, consuming nothing. */
  peek(cost = 1) {
    const st = native.peek(this._h, cost);
    if (st !== 0) throw failure(st, `peek on '${this.name}'`);
    return readDecision();
  }

  /** Admit `cost` units for `key` (a string or bytes) on a keyed limit. */
  tryAcquireKey(key, cost = 1) {
    const st = native.acquireKey(this._h, key, cost, false);
    if (st !== 0) throw failure(st, `tryAcquireKey on '${this.name}'`);
    return readDecision();
  }

  peekKey(key, cost = 1) {
    const st = native.acquireKey(this._h, key, cost, true);
    if (st !== 0) throw failure(st, `peekKey on '${this.name}'`);
    return readDecision();
  }

  /** Wait (on timers, sleeping each denial's exact retry-after) until `cost` units are
   *  admitted; resolves the denial when `timeout` ms would pass first. */
  acquire(cost = 1, opts = {}) {
    return waitFor(() => this.tryAcquire(cost), opts, `acquire on '${this.name}'`);
  }

  acquireKey(key, cost = 1, opts = {}) {
    return waitFor(() => this.tryAcquireKey(key, cost), opts, `acquireKey on '${this.name}'`);
  }

  /** Book `cost` tokens of this (unkeyed) token bucket now, first come first served across
   *  processes, if they are ready within `maxDelay` ms (default 0); null otherwise (nothing
   *  taken). `await reservation.wait()` then sleeps on timers until their turn. */
  reserve(cost = 1, opts = {}) {
    const maxDelay = opts.maxDelay === undefined ? 0 : opts.maxDelay;
    const [st, granted, delayNs, readyAtNs, handle] = native.reserve(this._h, cost, msToNs(maxDelay, 'maxDelay', { zero: true }));
    if (st !== 0) throw failure(st, `reserve on '${this.name}'`);
    return granted ? new Reservation(this, handle, delayNs, readyAtNs) : null;
  }

  /** Wait for `cost` tokens in turn with every other process waiting (a reservation), for at
   *  most `timeout` ms; resolves the grant, or null when the wait would exceed the timeout. */
  async acquireInTurn(cost = 1, opts = {}) {
    const timeout = opts.timeout === undefined ? 2 ** 40 : opts.timeout;
    const r = this.reserve(cost, { maxDelay: timeout });
    if (!r) return null;
    try {
      return await r.wait(opts);
    } catch (err) {
      r.cancel();
      throw err;
    }
  }

  /** Give back what `decision` admitted (all of it, or `units` of it). A denial, peek or
   *  shadow denial recorded nothing, so refunding it does nothing. */
  refund(decision, units) {
    writeDecision(decision, u8, u32, 0);
    const st = native.refund(this._h, undefined, units === undefined ? -1 : units);
    if (st !== 0) throw failure(st, `refund on '${this.name}'`);
  }

  refundKey(key, decision) {
    writeDecision(decision, u8, u32, 0);
    const st = native.refund(this._h, key, -1);
    if (st !== 0) throw failure(st, `refundKey on '${this.name}'`);
  }

  /**
   * Decision counters summed over every process attached to the file. `refunded` counts grants
   * given back whole (refunds, composed roll-backs): `allowed - refunded` is what passed.
   */
  stats() {
    const s = native.stats(this._h);
    if (typeof s === 'number') throw failure(s, `stats of '${this.name}'`);
    return { allowed: s[0], denied: s[1], shadowDenied: s[2], nearLimit: s[3], refunded: s[4] };
  }

  /** The live definition, the parameters decisions use now: after a retune by any process
   *  (`setRate`) or an adopted change it reads back as it is now, as `Limiter.definitions()`
   *  does. `createdDefinition()` is the one the file was created with. */
  definition() {
    return this.liveDefinition();
  }

  /** The definition the file was created with, before any retune (`definition()` is the live
   *  one). */
  createdDefinition() {
    const d = native.definition(this._h, false);
    if (typeof d === 'number') throw failure(d, `createdDefinition of '${this.name}'`);
    return specOf(d, d.kind === 8 ? this._tuning() : undefined);
  }

  /** An adaptive limit's stored tuning, raw (lib/definitions.js reads it). */
  _tuning() {
    const t = native.adaptiveTuning(this._h);
    if (typeof t === 'number') throw failure(t, `tuning of '${this.name}'`);
    return t;
  }

  /** The definition with its live parameters (after any retune, by any process): the same
   *  as `definition()`. */
  liveDefinition() {
    const d = native.definition(this._h, true);
    if (typeof d === 'number') throw failure(d, `liveDefinition of '${this.name}'`);
    return specOf(d, d.kind === 8 ? this._tuning() : undefined);
  }

  /** The quota per window this limit states to clients (`RateLimit-Policy`). */
  policy() {
    const p = native.policy(this._h);
    if (typeof p === 'number') throw failure(p, `policy of '${this.name}'`);
    return { quota: p[0], windowSecs: p[1] };
  }

  _retune(op, a, b, c, what) {
    const st = native.retune(this._h, op, a, b, c);
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
  }

  /** Refill at `rate` per `per` ms, live, for every process. */
  setRate(rate, per = 1000) {
    this._retune(RETUNE.setRate, count(rate, 'rate'), msToNs(per, 'per'), 0, 'setRate');
  }

  /** A token bucket's burst and rate together, live. */
  setTokenBucket(burst, rate, per = 1000) {
    this._retune(RETUNE.setTokenBucket, count(burst, 'burst'), count(rate, 'rate'), msToNs(per, 'per'), 'setTokenBucket');
  }

  /** A window's limit per window, live. */
  setLimit(limit) {
    this._retune(RETUNE.setLimit, count(limit, 'limit'), 0, 0, 'setLimit');
  }

  /** Back to fresh (full bucket, empty windows, no permits held). */
  reset() {
    this._retune(RETUNE.reset, 0, 0, 0, 'reset');
  }

  _count(op, key, what) {
    const r = native.count(this._h, op, key);
    if (typeof r !== 'number') throw failure(r[0], `${what} of '${this.name}'`);
    return r;
  }

  /** A keyed limit's table: `{used, slots}`. */
  keyOccupancy() {
    return { used: this._count(0, undefined, 'keyOccupancy'), slots: this._count(1, undefined, 'keyOccupancy') };
  }

  /** Free the slots of idle keys; returns how many. */
  reclaimIdleKeys() {
    return this._count(2, undefined, 'reclaimIdleKeys');
  }

  /** A key's tag (as permit holders report it). */
  keyTag(key) {
    const t = native.keyTag(this._h, key);
    if (typeof t === 'number') throw failure(t, `keyTag on '${this.name}'`);
    return t;
  }

  _permit(key, what) {
    const [st, id] = native.permitTry(this._h, key);
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
    return id === 0n ? null : new Permit(this, id, key);
  }

  /** Take a permit of an adaptive concurrency limit if fewer than its current limit are held;
   *  null otherwise. A keyed adaptive limit takes the `key` (string or Buffer) whose own limit
   *  decides, and which the permit's release teaches. */
  tryAcquireAdaptive(key) {
    const [st, handle] = native.adaptiveTry(this._h, key);
    if (st !== 0) throw failure(st, `tryAcquireAdaptive on '${this.name}'`);
    return handle === null ? null : new AdaptivePermit(this, handle);
  }

  /** Wait up to `timeout` ms (default 1000; `Infinity`: no deadline) for an adaptive permit
   *  (of `key` for a keyed adaptive limit), on the addon's wait thread blocked in the library's
   *  futex wait (woken by each release and each window that raises the limit), without
   *  blocking the event loop. Resolves the permit, or null at the deadline; an AbortSignal
   *  (`signal`) rejects with its reason. */
  acquireAdaptive({ timeout = 1000, signal, key } = {}) {
    return waitAdaptive(this, { timeout, signal, key }, `acquireAdaptive on '${this.name}'`);
  }

  /** Run `fn` holding an adaptive permit (of `opts.key` for a keyed adaptive limit): released
   *  'ok' when it resolves, 'timeout' when it rejects with an error named TimeoutError, else
   *  'error'. Rejects with PermitUnavailableError when none came within `timeout` ms. */
  async withAdaptive(fn, opts = {}) {
    const p = await this.acquireAdaptive(opts);
    if (!p) throw new PermitUnavailableError(`no adaptive permit of '${this.name}' within ${opts.timeout ?? 1000} ms`);
    try {
      const value = await fn();
      p.release('ok');
      return value;
    } catch (e) {
      p.release(e && e.name === 'TimeoutError' ? 'timeout' : 'error');
      throw e;
    }
  }

  /** `{limit, permits, min, max, inFlight, rttLongUs, rttRecentUs}` of an adaptive limit (of
   *  `key` for a keyed adaptive limit: a key never seen is at its initial limit). */
  adaptiveStatus(key) {
    const s = native.adaptiveStatus(this._h, key);
    if (typeof s === 'number') throw failure(s, `adaptiveStatus on '${this.name}'`);
    return s;
  }

  /** Take a permit if one is free now; null when all are held. */
  tryAcquirePermit() {
    return this._permit(undefined, 'tryAcquirePermit');
  }

  /** Take a permit of `key` (keyed concurrency limit) if one is free; null otherwise. */
  tryAcquireKeyPermit(key) {
    return this._permit(key, 'tryAcquireKeyPermit');
  }

  /** Wait up to `timeout` ms (default: as long as it takes) for a permit, on a thread of its
   *  own blocked on the library's futex wait: the event loop runs meanwhile. Resolves the
   *  Permit, or null when the timeout passed. `signal` (an AbortSignal) cancels the wait. */
  acquirePermit(opts = {}) {
    const p = this.tryAcquirePermit();
    if (p || (opts && opts.timeout === 0)) return Promise.resolve(p);
    return waitPermit(this, undefined, opts, `acquirePermit on '${this.name}'`);
  }

  acquireKeyPermit(key, opts = {}) {
    const p = this.tryAcquireKeyPermit(key);
    if (p || (opts && opts.timeout === 0)) return Promise.resolve(p);
    return waitPermit(this, key, opts, `acquireKeyPermit on '${this.name}'`);
  }

  /** Run `fn` holding a permit (released when it settles); rejects with
   *  PermitUnavailableError when none came within `timeout` ms. */
  async withPermit(fn, opts = {}) {
    const p = await this.acquirePermit(opts);
    if (!p) throw new PermitUnavailableError(`no permit of '${this.name}' within ${opts.timeout} ms`);
    try {
      return await fn(p);
    } finally {
      p.release();
    }
  }

  async withKeyPermit(key, fn, opts = {}) {
    const p = await this.acquireKeyPermit(key, opts);
    if (!p) throw new PermitUnavailableError(`no permit of '${this.name}' for this key within ${opts.timeout} ms`);
    try {
      return await fn(p);
    } finally {
      p.release();
    }
  }

  /** How many of `key`'s permits are held now, across every process. */
  keyPermitsHeld(key) {
    return this._count(4, key, 'keyPermitsHeld');
  }

  /** The held permits: `{id, pid, reclaimable, sinceNs, leaseExpiryNs, keyTag}`. */
  permitHolders() {
    const h = native.permitHolders(this._h);
    if (typeof h === 'number') throw failure(h, `permitHolders of '${this.name}'`);
    return h;
  }

  /** Free every permit whose holder died or whose lease expired; returns how many. */
  reclaimDeadPermits() {
    return this._count(3, undefined, 'reclaimDeadPermits');
  }

  /** Release the handle now (else the garbage collector does). */
  close() {
    native.close(this._h);
  }
}

module.exports = { Limit };
