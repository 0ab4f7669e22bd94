"""One call of the ``limits`` package's storage from Python, side by side in one run:
``shmlimit://`` (shmlimit.limits), ``memory://`` (per process: wrong across workers) and, when
``SHMLIMIT_REDIS_URL`` names a reachable redis-server, ``redis://``.

Usage: python bench/limits_storage.py [--quick]

For each storage: the storage calls the strategies make (``incr`` for the fixed window,
``acquire_entry`` for the moving window, ``acquire_sliding_window_entry`` for the sliding window
counter), then a whole ``hit`` of each strategy (what flask-limiter calls per request and
limit). Each figure is the median over repeats of the mean wall time of one call in a loop, in
nanoseconds, the process alone; shmlimit's file is in /dev/shm when it exists.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

import limits
import limits.storage
import limits.strategies

import shmlimit.limits  # noqa: F401  (registers shmlimit://)

#: Distinct keys, so that no key reaches a limit in a run (every call measured is admitted).
KEYS = [f"LIMITER/client-{i}/route/1000000/1/second" for i in range(1024)]


def median_ns(fn: Callable[[int], object], loop: int, repeats: int) -> float:
    for i in range(min(loop, 1000)):
        fn(i)
    runs: List[float] = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for i in range(loop):
            fn(i)
        runs.append((time.perf_counter_ns() - start) / loop)
    return statistics.median(runs)


def bench(name: str, storage: Any, loop: int, repeats: int) -> Dict[str, float]:
    # Each call of its own keys: a storage such as Redis keeps a counter and a log in
    # different types.
    fixed, moving, big, sliding = ([f"{op}/{k}" for k in KEYS]
                                   for op in ("incr", "log", "log1000", "sliding"))
    item = limits.parse("1000000/second")
    out: Dict[str, float] = {}
    out["incr"] = median_ns(lambda i: storage.incr(fixed[i & 1023], 1), loop, repeats)
    out["acquire_entry (limit 100)"] = median_ns(
        lambda i: storage.acquire_entry(moving[i & 1023], 100, 1), loop, repeats)
    out["acquire_entry (limit 1000)"] = median_ns(
        lambda i: storage.acquire_entry(big[i & 1023], 1000, 1), loop, repeats)
    out["acquire_sliding_window_entry"] = median_ns(
        lambda i: storage.acquire_sliding_window_entry(sliding[i & 1023], 60000, 1), loop, repeats)
    for strategy in (limits.strategies.FixedWindowRateLimiter,
                     limits.strategies.MovingWindowRateLimiter,
                     limits.strategies.SlidingWindowCounterRateLimiter):
        limiter = strategy(storage)
        ids = [f"client-{i}" for i in range(1024)]
        rate = {limits.strategies.MovingWindowRateLimiter: limits.parse("1000/second"),
                limits.strategies.SlidingWindowCounterRateLimiter: limits.parse("60000/second"),
                }.get(strategy, item)
        out[f"hit {strategy.__name__}"] = median_ns(
            lambda i: limiter.hit(rate, ids[i & 1023]), loop, repeats)
    storage.reset()
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    loop, repeats = (2_000, 3) if quick else (20_000, 9)
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=base) as d:
        storages: Dict[str, Any] = {
            "shmlimit://": limits.storage.storage_from_string(
                f"shmlimit://{d}/bench.shmlimit?keys=4096&moving_window=1024"),
            "memory://": limits.storage.storage_from_string("memory://"),
        }
        redis_url = os.environ.get("SHMLIMIT_REDIS_URL")
        if redis_url:
            storages["redis://"] = limits.storage.storage_from_string(redis_url)
        results = {name: bench(name, s, loop // (50 if "redis" in name else 1), repeats)
                   for name, s in storages.items()}
        rows = list(next(iter(results.values())))
        print(f"{'ns per call (median)':<46}" + "".join(f"{n:>14}" for n in results))
        for row in rows:
            print(f"{row:<46}" + "".join(f"{results[n][row]:>14.0f}" for n in results))
        mem = storages["memory://"]
        if hasattr(mem, "timer"):
            mem.timer.cancel()


if __name__ == "__main__":
    main()
