'use strict';
// One limiter file, created or opened, and its limits resolved by name.

const native = require('./native');
const { failure } = require('./errors');
const { rawDef, specOf } = require('./definitions');

const ADAPTIVE = 8; // the kind number of an adaptive concurrency limit
const { Limit } = require('./limit');
const { GuardedLimiter } = require('./guarded');

/** `shmlimit_options.on_conflict` and `.on_reboot` values. */
const ON_CONFLICT = { refuse: 0, adopt: 1 };
const ON_REBOOT = { default: 0, translate: 1, reset: 2 };

/** One limiter file, attached. */
class Limiter {
  constructor(handle, path) {
    this._h = handle;
    this.path = path;
    this._limits = new Map();
  }

  /** Create the file with `definitions` ({name: tokenBucket(...), ...}), or open it if it
   *  exists with the same definitions (compared with its live parameters). When they differ,
   *  `onConflict: 'refuse'` (the default) throws `DefinitionConflictError` naming every
   *  differing field; `'adopt'` retunes the file live when its layout holds the change (usage
   *  kept), else replaces it atomically with a new file that attached processes move to within
   *  about a second. `onReboot: 'translate'` (the default for a created file: quotas used
   *  before a reboot stay used) or `'reset'`; given for an existing file, it must be the
   *  file's choice. `mode` (default 0o600) and `allowOtherOwner` (default false) as in the C
   *  ABI. */
  static createOrOpen(path, definitions, opts = {}) {
    if (typeof definitions !== 'object' || definitions === null) {
      throw new TypeError('definitions must be an object of {name: definition}');
    }
    const defs = Object.entries(definitions).map(([name, spec]) => rawDef(name, spec));
    if (defs.length === 0) throw new RangeError('at least one limit must be defined');
    return Limiter._open(path, defs, opts, 'createOrOpen');
  }

  /** Attach to an existing file by path alone. */
  static open(path, opts = {}) {
    return Limiter._open(path, null, opts, 'open');
  }

  /** A GuardedLimiter on `path`: see GuardedLimiter.open. */
  static openGuarded(path, opts = {}) {
    return GuardedLimiter.open(path, opts);
  }

  static _open(path, defs, opts, what) {
    if (typeof path !== 'string') path = String(path);
    const mode = opts.mode === undefined ? 0 : opts.mode;
    const onConflict = ON_CONFLICT[opts.onConflict === undefined ? 'refuse' : opts.onConflict];
    if (onConflict === undefined) {
      throw new RangeError(`onConflict must be 'refuse' or 'adopt', not ${String(opts.onConflict).slice(0, 80)}`);
    }
    const onReboot = ON_REBOOT[opts.onReboot === undefined ? 'default' : opts.onReboot];
    if (onReboot === undefined) {
      throw new RangeError(`onReboot must be 'translate' or 'reset', not ${String(opts.onReboot).slice(0, 80)}`);
    }
    const h = native.open(path, defs, mode, Boolean(opts.allowOtherOwner), onConflict, onReboot);
    if (typeof h === 'number') throw failure(h, `${what} ${path}`);
    return new Limiter(h, path);
  }

  /** The limit `name` (resolved once and kept). */
  limit(name) {
    let l = this._limits.get(name);
    if (!l) {
      const h = native.limit(this._h, String(name));
      if (typeof h === 'number') throw failure(h, `limit '${name}'`);
      l = new Limit(h, String(name));
      this._limits.set(name, l);
    }
    return l;
  }

  /** The live definitions, {name: definition}: the parameters decisions use now, after a
   *  retune by any process or an adopted change (`Limit.definition()` of each limit).
   *  `createdDefinitions()` gives the ones the file was created with. */
  definitions() {
    const ds = this.createdDefinitions();
    return Object.fromEntries(Object.keys(ds).map((name) => [name, this.limit(name).definition()]));
  }

  /** The definitions the file was created with, {name: definition}, before any retune. */
  createdDefinitions() {
    const ds = native.definitions(this._h);
    if (typeof ds === 'number') throw failure(ds, `definitions of ${this.path}`);
    return Object.fromEntries(ds.map((d) => [d.name, specOf(d, d.kind === ADAPTIVE ? this.limit(d.name)._tuning() : undefined)]));
  }

  /** Release the file's handle (limits already resolved stay usable until closed). */
  close() {
    native.close(this._h);
  }
}

module.exports = { Limiter };
