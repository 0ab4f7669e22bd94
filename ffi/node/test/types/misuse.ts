// Must NOT compile (test/types.test.js): costs, decisions, prepared keys and options misused.
import { Limiter, prepareAll } from 'shmlimit';

const api = Limiter.open('/tmp/x.shm').limit('api');
api.tryAcquire('1');
api.refund({ allowed: true });
const prepared = prepareAll([{ limit: api, keyed: true }]);
void prepared.acquire('u1', 42);
void prepared.acquire({ timeout: 5 }, 'u1');
