// Must NOT compile (test/types.test.js): a cost is a number, a decision is not a plain object.
import { Limiter } from 'shmlimit';

const api = Limiter.open('/tmp/x.shm').limit('api');
api.tryAcquire('1');
api.refund({ allowed: true });
