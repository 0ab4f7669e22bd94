// Compiled with `tsc --noEmit --strict` by test/types.test.js: the subpaths' declarations fit
// the libraries' own types (express-rate-limit's Store, rate-limiter-flexible's classes).
import { rateLimit, type Store } from 'express-rate-limit';
import { RateLimiterRes, RateLimiterUnion, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { ShmlimitStore } from 'shmlimit/express-rate-limit';
import { RateLimiterShmlimit } from 'shmlimit/rate-limiter-flexible';
import { Counters } from 'shmlimit';

const store: Store = new ShmlimitStore({ path: '/dev/shm/app.shmlimit', prefix: 'api:', keys: 4096 });
const middleware = rateLimit({ windowMs: 60_000, limit: 100, store: new ShmlimitStore({ path: '/dev/shm/app.shmlimit' }) });
const shared = new ShmlimitStore({ counters: Counters.open('/dev/shm/c.shmlimit') });
const hits: number | undefined = shared.get('k')?.totalHits;

async function flexible(): Promise<void> {
  const limiter = new RateLimiterShmlimit({ path: '/dev/shm/rlf.shmlimit', points: 10, duration: 1, blockDuration: 60, keyPrefix: 'login' });
  const generic: RateLimiterAbstract = limiter;
  try {
    const res: RateLimiterRes = await limiter.consume('user', 2);
    const fields: number = res.msBeforeNext + res.remainingPoints + res.consumedPoints;
    const first: boolean = res.isFirstInDuration;
    void [fields, first];
  } catch (rej) {
    if (rej instanceof RateLimiterRes) void rej.msBeforeNext;
  }
  await limiter.penalty('user');
  await limiter.reward('user', 1);
  const got: RateLimiterRes | null = await limiter.get('user');
  await limiter.block('user', 30);
  await limiter.set('user', 3, 10);
  const deleted: boolean = await limiter.delete('user');
  void [generic, got, deleted, limiter.counters.keys, new RateLimiterUnion(limiter, limiter)];
}

void [store, middleware, hits, flexible];
