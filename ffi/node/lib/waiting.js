'use strict';
// Waiting without blocking the event loop: timers that sleep each denial's retry-after.

// CLOCK_MONOTONIC in milliseconds, the library's timeline. (performance.now() was seen to
// disagree with it by several ms over a 50 ms wait on Node 20.)
function monotonicMs() {
  return Number(process.hrtime.bigint()) / 1e6;
}

function deadlineOf(opts, what) {
  const timeout = opts && opts.timeout;
  if (timeout === undefined || timeout === null || timeout === Infinity) return Infinity;
  if (typeof timeout !== 'number' || !(timeout >= 0)) {
    throw new RangeError(`${what}: timeout must be a non-negative number of milliseconds or Infinity`);
  }
  return monotonicMs() + timeout;
}

function abortError(signal) {
  return signal.reason !== undefined ? signal.reason : new DOMException('This operation was aborted', 'AbortError');
}

// Sleep `ms` on a timer (never blocking the loop); rejects when `signal` aborts.
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) {
      reject(abortError(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
  });
}

// Retry `decide` after each denial's exact retry-after, until admitted or past the deadline
// (then the denial is the result: a denial is not an error).
async function waitFor(decide, opts, what) {
  const deadline = deadlineOf(opts, what);
  const signal = opts && opts.signal;
  for (;;) {
    if (signal && signal.aborted) throw abortError(signal);
    const d = decide();
    if (d.allowed) return d;
    const left = deadline - monotonicMs();
    if (d.retryAfterMs > left) return d;
    await sleep(Math.max(1, Math.ceil(d.retryAfterMs)), signal);
  }
}

module.exports = { monotonicMs, deadlineOf, abortError, sleep, waitFor };
