"""Side-by-side medians of one rate-limit decision from Python, in one run.

Usage: python bench/bench.py [--quick]

Two decisions, each timed as a loop of calls (median over repeats of the mean per call):

- ``single``: one admitting limit, ``try_acquire(1)`` (shmlimit) or its equivalent.
- ``per-client + global``: the gunicorn-style decision, a keyed per-client limit and a global
  one, admitted (``admit``) or denied by the per-client limit (``deny``) - shmlimit as one
  ``try_acquire_all((per_client, key, 1), (global, 1))`` call.

Against:
- the ``limits`` package with its memory storage (per process: N workers get N times the
  budget) - moving window (exact) and fixed window (its fastest);
- ``limits`` with its Redis storage, and a Redis Lua token bucket (one EVALSHA deciding both
  limits atomically), when ``SHMLIMIT_REDIS_URL`` names a reachable redis-server.

Every figure is wall time per decision on this machine, the process alone; shmlimit's file is
in /dev/shm when it exists (else the temporary directory).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import shmlimit

REPEATS = 15
LOOP = 20_000
KEYS = [f"client-{i}" for i in range(64)]


def median_ns(fn: Callable[[], object], loop: int, repeats: int) -> float:
    """The median over ``repeats`` of the mean nanoseconds of one call in a loop of ``loop``."""
    for _ in range(min(loop, 1000)):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loop):
            fn()
        samples.append((time.perf_counter_ns() - start) / loop)
    return statistics.median(samples)


def shmlimit_cases(directory: str) -> Dict[str, Callable[[], object]]:
    path = os.path.join(directory, f"shmlimit-bench-{os.getpid()}.shm")
    huge = 10**9  # one token per nanosecond, the fastest rate: admits every decision here
    limiter = shmlimit.Limiter.create_or_open(path, {
        "global": shmlimit.TokenBucket(rate=huge, burst=huge),
        "per_client": shmlimit.TokenBucket(rate=huge, burst=huge, keyed=shmlimit.Keyed(1024)),
        # A per-client limit that denies every request after the first of each key.
        "strict": shmlimit.TokenBucket(rate=1, per=3600, burst=1, keyed=shmlimit.Keyed(1024)),
    })
    os.unlink(path)  # the mapping stays; nothing left behind
    glob, per_client, strict = (limiter.limit(n) for n in ("global", "per_client", "strict"))
    for key in KEYS:
        strict.try_acquire_key(key)
    keys = iter(KEYS * 10**6)
    acquire_all = shmlimit.try_acquire_all

    def admit() -> object:
        return acquire_all((per_client, next(keys), 1), (glob, 1))

    def deny() -> object:
        return acquire_all((strict, next(keys), 1), (glob, 1))

    return {"single": lambda: glob.try_acquire(1), "admit": admit, "deny": deny}


def limits_cases(storage_uri: str, strategy: str) -> Dict[str, Callable[[], object]]:
    import limits
    import limits.storage
    import limits.strategies

    storage = limits.storage.storage_from_string(storage_uri)
    strategies: Dict[str, Any] = {
        "moving-window": limits.strategies.MovingWindowRateLimiter,
        "fixed-window": limits.strategies.FixedWindowRateLimiter,
    }
    limiter = strategies[strategy](storage)
    glob = limits.parse("1000000000/second")
    per_client = limits.parse("1000000000/second")
    strict = limits.parse("1/hour")
    prefix = f"bench-{os.getpid()}-{strategy}"
    for key in KEYS:
        limiter.hit(strict, prefix, "strict", key)
    keys = iter(KEYS * 10**6)

    def decide(per: Any, name: str) -> bool:
        # The decision an app writes with limits: the per-client limit, then the global one
        # (limits has no all-or-nothing composition; a per-client denial takes nothing global).
        key = next(keys)
        return bool(limiter.hit(per, prefix, name, key) and limiter.hit(glob, prefix, "global"))

    return {
        "single": lambda: limiter.hit(glob, prefix, "global"),
        "admit": lambda: decide(per_client, "per_client"),
        "deny": lambda: decide(strict, "strict"),
    }


# A GCRA token bucket per key in Redis, both limits decided atomically in one EVALSHA:
# KEYS = per-client key, global key; ARGV = now (ms), emission interval (ms) and burst of each.
LUA = """
local function tat(key, now, emission, burst)
  local t = tonumber(redis.call('GET', key) or now)
  if t < now then t = now end
  local allow_at = t + emission - emission * burst
  if allow_at > now then return nil end
  return t + emission
end
local now = tonumber(ARGV[1])
local a = tat(KEYS[1], now, tonumber(ARGV[2]), tonumber(ARGV[3]))
if not a then return 0 end
local b = tat(KEYS[2], now, tonumber(ARGV[4]), tonumber(ARGV[5]))
if not b then return 0 end
redis.call('SET', KEYS[1], a, 'PX', 3600000)
redis.call('SET', KEYS[2], b, 'PX', 3600000)
return 1
"""


def redis_lua_cases(url: str) -> Dict[str, Callable[[], object]]:
    import redis

    client: Any = redis.Redis.from_url(url)
    script = client.register_script(LUA)
    prefix = f"bench-{os.getpid()}"
    keys = iter(KEYS * 10**6)
    # 1e-6 ms emission with a huge burst admits; a 1 h emission with burst 1 denies after one.
    admit_args = (0.000001, 10**9, 0.000001, 10**9)
    deny_args = (3_600_000, 1, 0.000001, 10**9)
    for key in KEYS:
        script(keys=[f"{prefix}:strict:{key}", f"{prefix}:global"],
               args=[time.time() * 1000, *deny_args])

    def decide(kind: str, args: Tuple[float, int, float, int]) -> object:
        return script(keys=[f"{prefix}:{kind}:{next(keys)}", f"{prefix}:global"],
                      args=[time.time() * 1000, *args])

    return {
        "single": lambda: script(keys=[f"{prefix}:single", f"{prefix}:global"],
                                 args=[time.time() * 1000, *admit_args]),
        "admit": lambda: decide("per_client", admit_args),
        "deny": lambda: decide("strict", deny_args),
    }


def redis_url() -> Optional[str]:
    url = os.environ.get("SHMLIMIT_REDIS_URL")
    if not url:
        return None
    try:
        import redis
        client: Any = redis.Redis.from_url(url, socket_connect_timeout=1)
        client.ping()
        return url
    except Exception as e:  # noqa: BLE001 - any failure means: no Redis for this run
        print(f"# Redis at {url} not usable ({e}); its rows are left out", file=sys.stderr)
        return None


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    loop, repeats = (2_000, 5) if quick else (LOOP, REPEATS)
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    rows: List[Tuple[str, Dict[str, Callable[[], object]], int]] = [
        ("shmlimit (one mapped file)", shmlimit_cases(directory), loop),
    ]
    try:
        rows.append(("limits, memory, moving window (per process)",
                     limits_cases("memory://", "moving-window"), loop))
        rows.append(("limits, memory, fixed window (per process)",
                     limits_cases("memory://", "fixed-window"), loop))
    except ImportError:
        print("# the limits package is not installed; its rows are left out", file=sys.stderr)
    url = redis_url()
    if url is not None:
        # Round trips: fewer calls, same medians.
        slow = max(loop // 10, 200)
        try:
            rows.append(("limits, Redis, moving window", limits_cases(url, "moving-window"),
                         slow))
            rows.append(("limits, Redis, fixed window", limits_cases(url, "fixed-window"), slow))
        except ImportError:
            pass
        rows.append(("Redis Lua GCRA bucket (one EVALSHA)", redis_lua_cases(url), slow))
    print(f"# python {sys.version.split()[0]}, shmlimit {shmlimit.__version__}, "
          f"median of {repeats} loops, ns per decision")
    print(f"| {'implementation':<45} | {'single':>9} | {'per-client + global, admit':>27} | "
          f"{'per-client + global, deny':>26} |")
    print(f"|{'-' * 47}|{'-' * 10}:|{'-' * 28}:|{'-' * 27}:|")
    for name, cases, n in rows:
        figures = [median_ns(cases[c], n, repeats) for c in ("single", "admit", "deny")]
        print(f"| {name:<45} | {figures[0]:>9.0f} | {figures[1]:>27.0f} | {figures[2]:>26.0f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
