// Compiled with `tsc --noEmit --strict` by test/types.test.js: the declarations describe the
// API as the tests use it.
import * as http from 'node:http';
import * as shmlimit from 'shmlimit';
import { Limiter, tokenBucket, slidingLog, concurrency, fixedWindow, type Decision, type Composed, type PreparedAll } from 'shmlimit';

async function main(): Promise<void> {
  const ctr: shmlimit.Counters = shmlimit.Counters.open('/tmp/c.shm', { keys: 1024, movingWindow: 16 });
  const hits: number = ctr.incr('ip', 60_000) + ctr.decr('ip') + ctr.set(Buffer.from('ip'), 1000, 3);
  const seen: { count: number; resetMs: number } = ctr.count('ip');
  const cd: Decision = ctr.fixed('ip', 10, 1000);
  ctr.moving('ip', 10, 1000, 2);
  ctr.sliding('ip', 10, 1000);
  ctr.clear('ip');
  void [hits, seen, cd, ctr.clearAll(), Limiter.createOrOpen('/tmp/d.shm', { c: shmlimit.counters({ keyed: 64 }) })];
  const limiter: Limiter = Limiter.createOrOpen('/tmp/x.shm', {
    api: tokenBucket({ rate: 100, per: 1000, burst: 20 }),
    search: slidingLog({ limit: 100, window: 60_000 }),
    daily: fixedWindow({ limit: 10_000, window: 86_400_000, aligned: 'monotonic' }),
    per_user: tokenBucket({ rate: 10, burst: 5, keyed: { capacity: 1000, onFull: 'allow' } }),
    db: concurrency({ permits: 8, lease: 30_000 }),
  }, { mode: 0o660, onConflict: 'adopt', onReboot: 'translate' });
  const api = limiter.limit('api');
  const d: Decision = api.tryAcquire();
  const n: number = d.remaining + d.retryAfterMs + d.resetMs;
  if (d.allowed) api.refund(d, 1);
  const k = limiter.limit('per_user').tryAcquireKey(Buffer.from('u1'), 2);
  limiter.limit('per_user').refundKey('u1', k);
  const waited: Decision = await api.acquire(1, { timeout: 100, signal: AbortSignal.timeout(1000) });
  const booked = api.reserve(1, { maxDelay: 200 });
  const inTurn: Decision | null = booked ? await booked.wait() : await api.acquireInTurn(1, { timeout: 200 });
  const c = shmlimit.tryAcquireAll([[api, 1], limiter.limit('search')]);
  if (!c.allowed) console.log(c.deniedBy, c.retryAfterMs, c.decisions[0]?.remaining);
  c.refund();
  const prepared: PreparedAll = shmlimit.prepareAll([api, { limit: limiter.limit('per_user'), cost: 2, keyed: true }]);
  const pc: Composed = prepared.tryAcquire(Buffer.from('u1'));
  if (pc.allowed) pc.refund();
  console.log(prepared.keyedAt[0] ?? -1, pc.deniedBy);
  const pw: Composed = await prepared.acquire('u1', { timeout: 100, signal: AbortSignal.timeout(1000) });
  const pk: Composed = await prepared.acquire(Buffer.from('u1'));
  const unkeyed = shmlimit.prepareAll([api]);
  const pu: Composed = await unkeyed.acquire({ timeout: 50 });
  console.log(pw.allowed, pk.retryAfterMs, (await unkeyed.acquire()).deniedBy, pu.decisions.length);
  const permit = await limiter.limit('db').acquirePermit({ timeout: 50 });
  permit?.release();
  const r: number = await limiter.limit('db').withPermit(async (p) => (p.id > 0n ? 1 : 0), { timeout: 10 });
  const hosts = Limiter.createOrOpen('/tmp/h.shm', {
    per_host: shmlimit.adaptiveConcurrency({ min: 2, max: 64, keyed: { capacity: 256 } }),
  }).limit('per_host');
  const hp = hosts.tryAcquireAdaptive('db-1') ?? (await hosts.acquireAdaptive({ timeout: 20, key: Buffer.from('db-1') }));
  hp?.release('ok');
  const hs: number = hosts.adaptiveStatus('db-1').limit + (await hosts.withAdaptive(async () => 1, { key: 'db-2' }));
  const perHostMw = shmlimit.middleware({ limits: [{ limit: hosts, key: (req) => req.headers.host }] });
  void perHostMw;
  const guarded = Limiter.openGuarded('/tmp/y.shm', { reopenEvery: 500 });
  const gd = guarded.limit('payments', 'failClosed').tryAcquire();
  if (gd.unavailable && guarded.attached()) console.log(gd.retryAfterMs);
  const s: shmlimit.Stats = api.stats();
  const p: shmlimit.Policy = api.policy();
  api.setRate(200, 1000);
  const def = api.liveDefinition();
  if (def.kind === 'tokenBucket') console.log(def.burst, def.per);
  const h = shmlimit.rateLimitHeaders([[api, d]]);
  console.log(n, waited.allowed, inTurn?.allowed, r, s.allowed, p.quota, h.RateLimit, h['Retry-After']);
  try {
    api.tryAcquire(0);
  } catch (e) {
    if (e instanceof shmlimit.ZeroCostError) console.log(e.code, e.status);
  }
  const mw = shmlimit.middleware({
    limits: [api, { limit: limiter.limit('per_user'), key: (req) => req.headers['x-user'] as string | undefined, cost: 1 }],
    onLimited: (req, res, result) => {
      res.statusCode = 429;
      res.end(result.headers['Retry-After']);
    },
  });
  http.createServer((req, res) => mw(req, res, () => res.end(String(req.rateLimit?.decisions.length)))).listen(0);
}

void main();
