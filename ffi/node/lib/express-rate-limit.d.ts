// Type declarations of `shmlimit/express-rate-limit` (lib/express-rate-limit.js): a store for
// express-rate-limit, assignable to its `Store`.
import type { Counters } from '../index';

export interface ShmlimitStoreOptions {
  /** The shmlimit file (created when missing). Required unless `counters` is given. */
  path?: string;
  /** Put before every key (default 'rl:'). */
  prefix?: string;
  /** The counters limit in the file (default 'express-rate-limit'). */
  name?: string;
  /** Key slots of a created file (default 16384). */
  keys?: number;
  /** A new key that finds no free slot: deny (default), allow, or throw TableFullError. */
  onFull?: 'deny' | 'allow' | 'error';
  /** Permission bits of a created file (default 0o600). */
  mode?: number;
  /** A file created with other options: throw DefinitionConflictError ('refuse', the
   *  default) or replace it atomically with one holding these ('adopt'). */
  onConflict?: 'refuse' | 'adopt';
  /** Counters to use instead of opening `path`. */
  counters?: Counters;
}

export interface ShmlimitClientInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** express-rate-limit's hit counters in a shmlimit file shared by every worker of the host. */
export class ShmlimitStore {
  constructor(options: ShmlimitStoreOptions);
  readonly counters: Counters;
  readonly localKeys: false;
  readonly prefix: string;
  windowMs: number | undefined;
  init(options: { windowMs: number }): void;
  get(key: string): ShmlimitClientInfo | undefined;
  increment(key: string): ShmlimitClientInfo;
  decrement(key: string): void;
  resetKey(key: string): void;
  resetAll(): void;
  shutdown(): void;
}
