'use strict';
// Prepared compositions: the limits and costs of a composed check given to the addon once, so
// that each decision passes only its keys (one call, no arrays read element by element).

const { inspect } = require('node:util');

const native = require('./native');
const { Composed } = require('./compose');
const { failure, CLOSED } = require('./errors');
const { Limit } = require('./limit');
const { waitFor } = require('./waiting');

// The addon's composed buffer, which every prepared decision writes its outcome into.
const bytes = native.composed;
const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >> 2);

/** The addon call of a prepared composition `h` with the first `m` of `keys`. */
function acquirePrepared(h, keys, m) {
  switch (m) {
    case 0:
      return native.preparedAcquire(h);
    case 1:
      return native.preparedAcquire(h, keys[0]);
    case 2:
      return native.preparedAcquire(h, keys[0], keys[1]);
    case 3:
      return native.preparedAcquire(h, keys[0], keys[1], keys[2]);
    default:
      return native.preparedAcquire(h, ...keys.slice(0, m));
  }
}

/** The error of a failed decision of the prepared composition of `limits`; a closed handle is
 *  named (the addon's status does not say which). */
function preparedFailure(st, what, limits) {
  if (st === CLOSED) {
    const closed = limits.find((l) => native.stats(l._h) === CLOSED);
    return failure(CLOSED, closed ? `${what}: limit '${closed.name}'` : what);
  }
  return failure(st, what);
}

const isKey = (k) => typeof k === 'string' || k instanceof Uint8Array;
// The options ending the arguments of `acquire`: an object that is not bytes, or undefined
// (anything else is taken as a key, and refused as one).
const isOptions = (a) => a === undefined || (typeof a === 'object' && a !== null && !(a instanceof Uint8Array));

/** Throw the TypeError of `what` unless `keys` are `m` keys, each a string or bytes. */
function checkKeys(keys, m, what) {
  if (keys.length !== m) {
    throw new TypeError(`${what}: this prepared composition takes ${m} key${m === 1 ? '' : 's'} (one per keyed check), not ${keys.length}`);
  }
  for (let j = 0; j < m; j++) {
    if (!isKey(keys[j])) throw new TypeError(`${what}: key ${j} must be a string or a Uint8Array, not ${keys[j] === null ? 'null' : typeof keys[j]}`);
  }
}

/**
 * A composed check prepared once (`prepareAll`): its limits, costs and which limits are keyed
 * are fixed, and each `tryAcquire(key...)` passes only the keys, one per keyed check in order.
 * Every outcome is that of `tryAcquireAll` over the same checks; `acquire(key..., options?)`
 * waits for admission as `acquireAll` does.
 */
class PreparedAll {
  constructor(limits, costs, keyedAt, handle) {
    /** The limits, in the order of the checks. */
    this.limits = limits;
    /** Each check's cost. */
    this.costs = costs;
    /** The indices of the keyed checks: `tryAcquire` takes one key for each, in this order. */
    this.keyedAt = keyedAt;
    // The addon's prepared composition (it holds the limits' handles; this object holds the
    // Limits, so that none is collected and closed while it can decide).
    this._h = handle;
  }

  /** All or nothing over the prepared checks, with one key (a string or bytes) per keyed
   *  check, in order: a Composed, as `tryAcquireAll` returns. */
  tryAcquire(...keys) {
    checkKeys(keys, this.keyedAt.length, 'tryAcquire');
    return this._decide(keys, 'tryAcquire of a prepared composition');
  }

  /**
   * Wait on timers until the prepared checks admit at once, as `acquireAll` does: the keys as
   * `tryAcquire` takes them, then optionally `{timeout, signal}` (a last argument that is an
   * object other than bytes, or undefined). Resolves the Composed admitted, or the last denial
   * once the next retry would pass the timeout; rejects for bad keys (nothing consumed), a
   * closed limit, or with the signal's reason when it aborts.
   */
  async acquire(...args) {
    let opts;
    if (args.length > 0 && isOptions(args[args.length - 1])) opts = args.pop();
    checkKeys(args, this.keyedAt.length, 'acquire');
    return waitFor(() => this._decide(args, 'acquire of a prepared composition'), opts, 'acquire');
  }

  // One decision with `keys` already checked.
  _decide(keys, what) {
    const m = this.keyedAt.length;
    const st = acquirePrepared(this._h, keys, m);
    if (st !== 0) throw preparedFailure(st, what, this.limits);
    let all;
    if (m > 0) {
      all = new Array(this.limits.length);
      for (let j = 0; j < m; j++) all[this.keyedAt[j]] = keys[j];
    }
    return new Composed(this.limits, this.costs, all, bytes, words);
  }

  [inspect.custom](depth, options, insp) {
    const { _h, ...shown } = this;
    return `PreparedAll ${insp(shown, options)}`;
  }
}

/**
 * Prepare a composed check once: `checks` are up to 8 limits or `{limit, cost = 1, keyed =
 * false}` (`keyed: true` for a keyed limit, whose key each decision passes). The limits stay
 * the Limits given: closing one makes the prepared check throw, as tryAcquireAll would.
 */
function prepareAll(checks) {
  if (!Array.isArray(checks) || checks.length === 0 || checks.length > 8) {
    throw new TypeError('prepareAll: checks must be an array of 1 to 8 limits or {limit, cost?, keyed?} entries');
  }
  const limits = [];
  const costs = [];
  const keyed = [];
  const keyedAt = [];
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i];
    const { limit, cost = 1, keyed: k = false } = c instanceof Limit ? { limit: c } : c || {};
    if (!(limit instanceof Limit)) throw new TypeError(`prepareAll: check ${i} names no Limit`);
    if (typeof k !== 'boolean') throw new TypeError(`prepareAll: check ${i}'s keyed must be a boolean`);
    limits.push(limit);
    costs.push(cost);
    keyed.push(k);
    if (k) keyedAt.push(i);
  }
  const h = native.prepareAll(limits.map((l) => l._h), costs, keyed);
  if (typeof h === 'number') throw preparedFailure(h, 'prepareAll', limits);
  return new PreparedAll(Object.freeze(limits), Object.freeze(costs), Object.freeze(keyedAt), h);
}

module.exports = { PreparedAll, prepareAll, acquirePrepared, preparedFailure, bytes, words };
