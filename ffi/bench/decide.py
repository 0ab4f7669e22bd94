"""The uncontended decision from Python: attach to a limiter file by path, resolve one limit,
then time N calls of ``limit.try_acquire(1)`` (the package's C extension) in a loop.

Usage: python3 decide.py PATH LIMIT N [raw]
    With ``raw``, the loop calls the C function ``shmlimit_acquire`` through ctypes directly
    (one foreign call per decision, no Decision object): the boundary the package used before
    its extension. Prints "ns=ELAPSED allowed=A": the nanoseconds (time.perf_counter_ns) the N
    decisions took, attach and resolve excluded, and how many of them admitted. The shmlimit
    package is imported as installed (or from PYTHONPATH, as benches/c_abi.rs lays it out).
"""

import ctypes
import sys
import time

import shmlimit


WARM_UP = 1000


def main() -> int:
    if len(sys.argv) not in (4, 5) or sys.argv[4:] not in ([], ["raw"]):
        print(f"usage: {sys.argv[0]} PATH LIMIT N [raw]", file=sys.stderr)
        return 2
    path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    limiter = shmlimit.Limiter.open(path)
    limit = limiter.limit(name)
    allowed = 0
    if sys.argv[4:] == ["raw"]:
        acquire_c = shmlimit._lib().shmlimit_acquire
        handle = limit._live()
        out = shmlimit._Decision()  # the decision struct's bytes; `allowed` is its first byte
        out_ref = ctypes.byref(out)
        out_allowed = ctypes.c_bool.from_buffer(out)
        for _ in range(WARM_UP):
            acquire_c(handle, 1, out_ref)
        start = time.perf_counter_ns()
        for _ in range(n):
            if acquire_c(handle, 1, out_ref) != 0:
                raise RuntimeError("shmlimit_acquire failed")
            allowed += out_allowed.value
        elapsed = time.perf_counter_ns() - start
    else:
        acquire = limit.try_acquire
        for _ in range(WARM_UP):
            acquire(1)
        start = time.perf_counter_ns()
        for _ in range(n):
            if acquire(1):
                allowed += 1
        elapsed = time.perf_counter_ns() - start
    print(f"ns={elapsed} allowed={allowed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
