// Type declarations of `shmlimit/rate-limiter-flexible` (lib/rate-limiter-flexible.js):
// rate-limiter-flexible's RateLimiterAbstract over a shmlimit file. rate-limiter-flexible is a
// peer dependency: these types come from it.
import { RateLimiterAbstract, RateLimiterRes } from 'rate-limiter-flexible';
import type { Counters } from '../index';

export type RateLimiterShmlimitOptions = NonNullable<ConstructorParameters<typeof RateLimiterAbstract>[0]> & {
  /** The shmlimit file (created when missing). Required unless `counters` is given. */
  path?: string;
  /** The counters limit in the file (default 'rate-limiter-flexible'). */
  storeName?: string;
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
};

/** rate-limiter-flexible's limiter whose counters every worker of the host shares. */
export class RateLimiterShmlimit extends RateLimiterAbstract {
  constructor(options: RateLimiterShmlimitOptions);
  /** The counters the limiter keeps its keys in. */
  readonly counters: Counters;
}

export { RateLimiterRes };
