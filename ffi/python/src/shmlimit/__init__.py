"""shmlimit for Python: rate limits shared by every process on a host through one mapped file.

``pip install shmlimit-*.whl`` (or ``pip install <checkout>/ffi/python``, which builds the wheel
with maturin) installs the package and its one compiled module, ``shmlimit._native`` (PyO3 over
the Rust library), so ``import shmlimit`` needs no environment variable, toolchain or checkout. Python workers (gunicorn/uwsgi workers, multiprocessing pools, cron jobs...) share
one budget with each other and with Rust and C processes using the same file::

    import shmlimit

    with shmlimit.Limiter.create_or_open("/dev/shm/myapp.shm", {
        "api": shmlimit.TokenBucket(rate=100, per=1.0, burst=20),
        "search": shmlimit.SlidingLog(limit=100, window=60),
    }) as limiter:
        api = limiter.limit("api")          # resolve once
        decision = api.try_acquire()        # hot path: one native call, about 0.1 us
        if decision:
            ...                             # admitted
        else:
            wait = decision.retry_after     # seconds

Per-key limits, composed checks, concurrency permits, refunds and live retuning::

    limiter = shmlimit.Limiter.create_or_open(path, {
        "per_client": shmlimit.TokenBucket(rate=10, burst=5, keyed=shmlimit.Keyed(100_000)),
        "db": shmlimit.Concurrency(permits=8, lease=30),
        "global": shmlimit.TokenBucket(rate=300, burst=30),
    })
    per_client, db, glob = (limiter.limit(n) for n in ("per_client", "db", "global"))
    both = shmlimit.try_acquire_all((per_client, "alice", 1), (glob, 1))  # all or nothing
    if both:
        with db.permit(timeout=1.0):          # PermitUnavailableError after 1 s
            ...
    glob.set_rate(200)                        # every process, at once

asyncio (``await per_client.aio.acquire(1, timeout=2)``, ``async with db.aio.permit(...)``),
WSGI/ASGI middleware (``shmlimit.web``) and Prometheus text (``shmlimit.prometheus_text``) are
in the same package.

While the file is missing or invalid, a guarded limiter lets each limit's explicit policy
decide (there is no default), and says so in the decision::

    guarded = shmlimit.Limiter.open_guarded(path, reopen_every=1.0)   # never fails on the file
    search = guarded.limit("search", shmlimit.FAIL_OPEN)       # admit, unlimited
    payments = guarded.limit("payments", shmlimit.FAIL_CLOSED)  # deny, retry after reopening

Thread-safety: handles may be shared by threads. The non-waiting decisions hold the GIL for
their tens of nanoseconds; every waiting call releases it.
"""

from __future__ import annotations

try:
    from . import _native
except ImportError as _e:  # pragma: no cover - exercised by the broken-install test
    raise ImportError(
        f"shmlimit: the compiled part of the package (shmlimit._native) could not be loaded "
        f"({_e}). Install the package with pip (a wheel, or pip install ffi/python, which builds "
        "it); ffi/python/src of a checkout cannot be imported as it is"
    ) from _e

from ._native import Composed, Decision
from .definitions import (DAY, FAIL_CLOSED, FAIL_OPEN, MAX_KEYS, MONTH, WEEK, AdaptiveConcurrency,
                          Concurrency, Counters,
                          FixedWindow, FleetShare, Keyed, SlidingLog, SlidingWindow, Spec,
                          TokenBucket)
# Names the package's other modules and the examples use (explicit re-exports).
from .definitions import Key as Key, PathArg as PathArg, Seconds as Seconds
from .definitions import _Def as _Def, _key as _key, _ns as _ns
from .definitions import _timeout_ns as _timeout_ns, _u64 as _u64
from .errors import (BadLengthError, BadUtf8Error, ClockMismatchError, ClockOutOfRangeError,
                     ClosedError, CorruptFileError, CorruptStateError, CostExceedsCapacityError,
                     DefinitionConflictError, ForeignFileError, InternalError, InvalidKeyError,
                     InvalidParameterError, IoError, MisalignedPointerError, NotInitializedError,
                     NotRegularFileError, NullPointerError, OutOfRangeError,
                     ParameterOverflowError, PermissionDeniedError, PermitUnavailableError,
                     ShmlimitError, SizeError, SymlinkError, TableFullError, UnknownLimitError,
                     VersionError, WrongKindError, ZeroCostError)
from .errors import _ERRORS as _ERRORS, _error as _error
from .limit import AdaptiveStatus, Limit, Policy, Stats, rate_limit_headers, try_acquire_all
from .limiter import GuardedLimit, GuardedLimiter, Limiter, prometheus_text
from .permits import AdaptivePermit, Permit, PermitHolder, Reservation
from .counters import CounterStore

__all__ = [
    "Limiter", "Limit", "Decision", "Stats",
    "TokenBucket", "FixedWindow", "SlidingWindow", "SlidingLog",
    "ShmlimitError", "ClosedError", "NullPointerError", "BadUtf8Error", "InternalError",
    "BadLengthError", "MisalignedPointerError", "OutOfRangeError", "IoError", "SymlinkError",
    "NotRegularFileError", "PermissionDeniedError", "ForeignFileError", "VersionError",
    "SizeError", "CorruptFileError", "NotInitializedError", "ClockMismatchError",
    "DefinitionConflictError", "InvalidParameterError", "UnknownLimitError", "ZeroCostError",
    "CostExceedsCapacityError", "CorruptStateError", "ClockOutOfRangeError", "TableFullError",
    "InvalidKeyError", "WrongKindError", "ParameterOverflowError", "Concurrency", "library_version",
    "Keyed", "FleetShare", "Permit", "PermitHolder", "PermitUnavailableError", "Composed",
    "try_acquire_all", "MAX_KEY_LEN", "MAX_CHECKS", "Reservation",
    "GuardedLimiter", "GuardedLimit", "FAIL_OPEN", "FAIL_CLOSED", "Spec", "__version__",
    "prometheus_text", "Policy", "rate_limit_headers", "DAY", "WEEK", "MONTH",
    "AdaptiveConcurrency", "AdaptivePermit", "AdaptiveStatus",
    "prometheus_text", "Policy", "rate_limit_headers", "DAY", "WEEK", "MONTH", "Counters",
    "CounterStore",
]

MAX_CHECKS: int = _native.MAX_CHECKS
MAX_KEY_LEN: int = _native.MAX_KEY_LEN


def library_version() -> str:
    """The version of the Rust library the compiled module was built from."""
    return _native.version()


#: The package's version: the crate's (Cargo.toml), which is also library_version().
__version__ = library_version()
