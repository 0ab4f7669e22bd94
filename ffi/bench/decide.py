"""The uncontended decision from Python: attach to a limiter file by path, resolve one limit,
then time N calls of ``limit.try_acquire(1)`` (the package's compiled module, PyO3) in a loop.

Usage: python3 decide.py PATH LIMIT N [raw]
    With ``raw``, the loop calls the C function ``shmlimit_acquire`` of the C library named by
    ``$SHMLIMIT_LIBRARY`` (a ``libshmlimit.so``) through ctypes directly (one foreign call per
    decision, no Decision object): a ctypes binding's boundary, the package's before it had a
    compiled module. Prints "ns=ELAPSED allowed=A": the nanoseconds (time.perf_counter_ns) the
    N decisions took, attach and resolve excluded, and how many of them admitted. The shmlimit
    package is imported as installed (or from PYTHONPATH, as benches/c_abi.rs lays it out).
"""

import ctypes
import os
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
        lib = ctypes.CDLL(os.environ["SHMLIMIT_LIBRARY"])
        pointer = ctypes.POINTER(ctypes.c_void_p)
        lib.shmlimit_limiter_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p, pointer]
        lib.shmlimit_limiter_limit.argtypes = [ctypes.c_void_p, ctypes.c_char_p, pointer]
        lib.shmlimit_limiter_free.argtypes = [ctypes.c_void_p]
        lib.shmlimit_acquire.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p]
        lib.shmlimit_acquire.restype = ctypes.c_int32
        c_limiter, handle = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.shmlimit_limiter_open(path.encode(), None, ctypes.byref(c_limiter)) != 0:
            raise RuntimeError("shmlimit_limiter_open failed")
        status = lib.shmlimit_limiter_limit(c_limiter, name.encode(), ctypes.byref(handle))
        lib.shmlimit_limiter_free(c_limiter)
        if status != 0:
            raise RuntimeError("shmlimit_limiter_limit failed")
        acquire_c = lib.shmlimit_acquire
        # The shmlimit_decision struct (64 bytes); `allowed` is its first byte.
        out = ctypes.create_string_buffer(64)
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
