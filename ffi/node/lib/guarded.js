'use strict';
// Guarded limiters: fail open or fail closed while the file is unavailable.

const native = require('./native');
const { readDecision, writeDecision, u8, u32 } = require('./decision');
const { failure } = require('./errors');
const { msToNs } = require('./definitions');

const POLICY = { failOpen: 1, failClosed: 2 };
const FLAG_UNAVAILABLE = 1;

function readGuarded() {
  const d = readDecision();
  /** The file (or this limit's state) was unavailable: the limit's policy decided. */
  d.unavailable = (u32[10] & FLAG_UNAVAILABLE) !== 0;
  return d;
}

/** One limit of a guarded limiter, with its policy for while the file is unavailable. */
class GuardedLimit {
  constructor(handle, name, policy) {
    this._h = handle;
    this.name = name;
    this.policy = policy;
  }

  _decide(op, cost, key, what) {
    const st = native.guardedDecide(this._h, op, cost, key);
    if (st !== 0) throw failure(st, `${what} on '${this.name}'`);
    return readGuarded();
  }

  /** A decision (`.unavailable` when the policy made it: admit all, or deny with a
   *  retry-after of the time until the next attempt to open the file). */
  tryAcquire(cost = 1) {
    return this._decide(0, cost, undefined, 'tryAcquire');
  }

  peek(cost = 1) {
    return this._decide(1, cost, undefined, 'peek');
  }

  tryAcquireKey(key, cost = 1) {
    return this._decide(2, cost, key, 'tryAcquireKey');
  }

  /** Give back a grant (a policy's decision recorded nothing: refunding it does nothing). */
  refund(decision) {
    writeDecision(decision, u8, u32, 0);
    if (decision.unavailable) u32[10] |= FLAG_UNAVAILABLE;
    const st = native.guardedDecide(this._h, 3, 0, undefined);
    if (st !== 0) throw failure(st, `refund on '${this.name}'`);
  }

  close() {
    native.close(this._h);
  }
}

/** A limiter file attached when it can be opened: until then (and while a limit's state is
 *  damaged) each limit decides by the policy it was given. Never fails because of the file. */
class GuardedLimiter {
  constructor(handle, path) {
    this._h = handle;
    this.path = path;
  }

  /** Attach to `path` now if it can be opened (as `Limiter.open` with default options), else
   *  at the first decision after `reopenEvery` ms (default 1000) and so on. */
  static open(path, opts = {}) {
    const every = opts.reopenEvery === undefined ? 1000 : opts.reopenEvery;
    const h = native.guardedOpen(String(path), msToNs(every, 'reopenEvery', { zero: true }));
    if (typeof h === 'number') throw failure(h, `openGuarded ${path}`);
    return new GuardedLimiter(h, String(path));
  }

  /** Whether the file is attached now. */
  attached() {
    const a = native.guardedAttached(this._h);
    if (typeof a === 'number') throw failure(a, `attached ${this.path}`);
    return a;
  }

  /** The limit `name` with its policy: 'failOpen' (admit all, for overload protection) or
   *  'failClosed' (deny all, for what must never be exceeded). Required: no silent default. */
  limit(name, policy) {
    if (!(policy in POLICY)) {
      throw new RangeError(`limit '${name}': the policy while the file is unavailable must be 'failOpen' or 'failClosed', not ${String(policy)}`);
    }
    const h = native.guardedLimit(this._h, String(name), POLICY[policy]);
    if (typeof h === 'number') throw failure(h, `guarded limit '${name}'`);
    return new GuardedLimit(h, String(name), policy);
  }

  close() {
    native.close(this._h);
  }
}

module.exports = { GuardedLimiter, GuardedLimit };
