"""shmlimit for Python: rate limits shared by every process on a host through one mapped file.

``pip install <checkout>/ffi/python`` builds the package: cargo builds ``libshmlimit.so``, and a
small CPython extension (``shmlimit._native``, C over ``ffi/include/shmlimit.h``) makes the
decisions; both are installed inside the package, so ``import shmlimit`` needs no environment
variable. Python workers (gunicorn/uwsgi workers, multiprocessing pools, cron jobs...) share
one budget with each other and with Rust and C processes using the same file::

    import shmlimit

    with shmlimit.Limiter.create_or_open("/dev/shm/myapp.shm", {
        "api": shmlimit.TokenBucket(rate=100, per=1.0, burst=20),
        "search": shmlimit.SlidingLog(limit=100, window=60),
    }) as limiter:
        api = limiter.limit("api")          # resolve once
        decision = api.try_acquire()        # hot path: one C call, about 0.2 us
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

import ctypes
import datetime
import errno as _errno
import math
import os
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generator, Iterable, List, Mapping,
                    NamedTuple, Optional, Tuple, Type, Union)

try:
    from . import _native
except ImportError as _e:  # pragma: no cover - exercised by the broken-install test
    raise ImportError(
        f"shmlimit: the compiled part of the package could not be loaded ({_e}). Install the "
        "package with pip (which builds libshmlimit.so and shmlimit._native into it); "
        "ffi/python/src of a checkout cannot be imported as it is"
    ) from _e

from ._native import Composed, Decision

if TYPE_CHECKING:
    from .aio import AsyncLimit

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
]

#: Periods for ``TokenBucket(rate=..., per=...)``, in seconds. ``MONTH`` is the average Gregorian
#: month (365.2425 / 12 days = 2,629,746 s): a rate is an average, whatever the month's length.
DAY = 86_400.0
WEEK = 7 * DAY
MONTH = 2_629_746.0

Seconds = Union[int, float, datetime.timedelta]
#: A path: str, bytes or os.PathLike, without NUL.
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
#: A key of a keyed limit: str (its UTF-8 bytes) or bytes, 1 to MAX_KEY_LEN bytes.
Key = Union[str, bytes]

# ---------------------------------------------------------------------------------------------
# Errors: one exception class per status code of the C ABI.


class ShmlimitError(Exception):
    """A failed shmlimit call. ``code`` is the C status code, ``message`` the library's detail."""

    code: int = -1

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ClosedError(ShmlimitError, ValueError):
    """The handle was closed (raised by this module; no C call is made)."""


class NullPointerError(ShmlimitError):
    code = 1


class BadUtf8Error(ShmlimitError, ValueError):
    code = 2


class InternalError(ShmlimitError):
    code = 3


class BadLengthError(ShmlimitError, ValueError):
    code = 4


class MisalignedPointerError(ShmlimitError):
    code = 5


class OutOfRangeError(ShmlimitError, IndexError):
    code = 6


class IoError(ShmlimitError, OSError):
    """An operating-system call failed; ``errno`` is its error number."""

    code = 100


class SymlinkError(ShmlimitError):
    code = 101


class NotRegularFileError(ShmlimitError):
    code = 102


class PermissionDeniedError(ShmlimitError):
    """The file's owner or mode is not acceptable under the open options."""

    code = 103


class ForeignFileError(ShmlimitError):
    code = 104


class VersionError(ShmlimitError):
    code = 105


class SizeError(ShmlimitError):
    code = 106


class CorruptFileError(ShmlimitError):
    code = 107


class NotInitializedError(ShmlimitError):
    code = 108


class ClockMismatchError(ShmlimitError):
    code = 109


class DefinitionConflictError(ShmlimitError):
    code = 110


class InvalidParameterError(ShmlimitError, ValueError):
    code = 111


class UnknownLimitError(ShmlimitError, LookupError):
    code = 112


class ZeroCostError(ShmlimitError, ValueError):
    code = 113


class CostExceedsCapacityError(ShmlimitError, ValueError):
    code = 114


class CorruptStateError(ShmlimitError):
    code = 115


class ClockOutOfRangeError(ShmlimitError):
    code = 116


class TableFullError(ShmlimitError):
    code = 117


class InvalidKeyError(ShmlimitError, ValueError):
    code = 118


class ParameterOverflowError(InvalidParameterError, OverflowError):
    """An integer argument above what its C parameter holds (raised by this module before any
    call; an InvalidParameterError and an OverflowError)."""


class WrongKindError(ShmlimitError, TypeError):
    """The operation does not apply to this kind of limit."""

    code = 119


class PermitUnavailableError(ShmlimitError, TimeoutError):
    """No permit became free in time (raised by ``Limit.permit()``; not a C status code)."""

    code = -2


_ERRORS: Dict[int, Type[ShmlimitError]] = {
    cls.code: cls
    for cls in [
        NullPointerError, BadUtf8Error, InternalError, BadLengthError, MisalignedPointerError,
        OutOfRangeError, IoError, SymlinkError, NotRegularFileError, PermissionDeniedError,
        ForeignFileError, VersionError, SizeError, CorruptFileError, NotInitializedError,
        ClockMismatchError, DefinitionConflictError, InvalidParameterError, UnknownLimitError,
        ZeroCostError, CostExceedsCapacityError, CorruptStateError, ClockOutOfRangeError,
        TableFullError, InvalidKeyError, WrongKindError,
    ]
}

_IO_ERRORS: Dict[Type[OSError], Type[IoError]] = {}


def _io_error_class(os_errno: int) -> Type[IoError]:
    """IoError, or for an errno Python maps to an OSError subclass (ENOENT: FileNotFoundError,
    EACCES/EPERM: PermissionError, ...) a class deriving from both IoError and that subclass."""
    sub = type(OSError(os_errno, "")) if os_errno else OSError
    if sub is OSError:
        return IoError
    cls = _IO_ERRORS.get(sub)
    if cls is None:
        cls = type(f"IoError_{sub.__name__}", (IoError, sub), {
            "__doc__": f"IoError for errno {_errno.errorcode.get(os_errno, os_errno)}: also a "
                       f"{sub.__name__}.",
            "__module__": __name__,
        })
        _IO_ERRORS[sub] = cls
    return cls


def _error(status: int, message: str, os_errno: int = 0) -> ShmlimitError:
    """The exception for a failed call's status code (used by the C extension too)."""
    cls = _ERRORS.get(status, ShmlimitError)
    if cls is IoError:
        cls = _io_error_class(os_errno)
    error = cls(message, status)
    if isinstance(error, IoError):
        error.errno = os_errno or None
        error.strerror = message
    return error


_native._configure(_error, ClosedError, InvalidParameterError, ParameterOverflowError)

# ---------------------------------------------------------------------------------------------
# The C declarations (ffi/include/shmlimit.h) for the calls made through ctypes: everything but
# the non-waiting decisions, which shmlimit._native makes.

_TOKEN_BUCKET, _FIXED_WINDOW, _SLIDING_WINDOW, _SLIDING_LOG, _CONCURRENCY = 1, 2, 3, 4, 5
_ALIGNMENTS = {"wall": 0, "monotonic": 1, "calendar": 2}


class _Def(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_uint32),
        ("alignment", ctypes.c_uint32),
        ("limit", ctypes.c_uint64),
        ("period_ns", ctypes.c_uint64),
        ("rate", ctypes.c_uint64),
        ("key_capacity", ctypes.c_uint64),
        ("on_full", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("near_limit", ctypes.c_uint16),
        ("split", ctypes.c_uint16),
        ("fleet_weight", ctypes.c_uint32),
        ("fleet_emission_ns", ctypes.c_uint64),
    ]


class _Options(ctypes.Structure):
    _fields_ = [
        ("mode", ctypes.c_uint32),
        ("allow_other_owner", ctypes.c_uint32),
        ("on_conflict", ctypes.c_uint32),
        ("on_reboot", ctypes.c_uint32),
        ("reserved", ctypes.c_uint64 * 3),
    ]


#: A shmlimit_decision as ctypes sees it: opaque bytes of the size the C extension was compiled
#: with (it reads and writes the fields; ctypes only carries them).
_Decision = ctypes.c_char * _native.DECISION_SIZE


class _Policy(ctypes.Structure):
    _fields_ = [("quota", ctypes.c_uint64), ("window_secs", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_uint64),
        ("denied", ctypes.c_uint64),
        ("shadow_denied", ctypes.c_uint64),
        ("near_limit", ctypes.c_uint64),
        ("refunded", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 3),
    ]


MAX_CHECKS: int = _native.MAX_CHECKS
MAX_KEY_LEN: int = _native.MAX_KEY_LEN
MAX_KEYS = 1 << 26
_PERMIT_SHADOW = 1
_DECISION_UNAVAILABLE = 1
#: Policy of a guarded limit while its file is unavailable: admit every request, unlimited.
FAIL_OPEN = 1
#: Policy of a guarded limit while its file is unavailable: deny every request.
FAIL_CLOSED = 2
_DEF_SHADOW, _DEF_NEAR_LIMIT = 1, 2
_DEFAULT_NEAR_LIMIT = 6554
_FULL_POLICIES = {"deny": 0, "allow": 1, "error": 2}


class _Booking(ctypes.Structure):
    _fields_ = [
        ("granted", ctypes.c_bool),
        ("cost", ctypes.c_uint64),
        ("delay_ns", ctypes.c_uint64),
        ("ready_at_ns", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 2),
    ]


class _PermitHolder(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("reclaimable", ctypes.c_bool),
        ("since_ns", ctypes.c_uint64),
        ("lease_expiry_ns", ctypes.c_uint64),
        ("key_tag", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 1),
    ]


_P = ctypes.c_void_p
_U64 = ctypes.c_uint64
_SIZE = ctypes.c_size_t
_KEY = [ctypes.c_char_p, ctypes.c_size_t]
_SIGNATURES = {
    "shmlimit_version": (ctypes.c_char_p, []),
    "shmlimit_strerror": (ctypes.c_char_p, [ctypes.c_int32]),
    "shmlimit_last_error": (ctypes.c_char_p, []),
    "shmlimit_last_os_error": (ctypes.c_int32, []),
    "shmlimit_limiter_create_or_open": (
        ctypes.c_int32,
        [ctypes.c_char_p, ctypes.POINTER(_Def), ctypes.c_size_t, ctypes.POINTER(_Options),
         ctypes.POINTER(_P)],
    ),
    "shmlimit_limiter_open": (
        ctypes.c_int32, [ctypes.c_char_p, ctypes.POINTER(_Options), ctypes.POINTER(_P)]
    ),
    "shmlimit_limiter_free": (None, [_P]),
    "shmlimit_limiter_limit_count": (ctypes.c_int32, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "shmlimit_limiter_definition": (ctypes.c_int32, [_P, ctypes.c_size_t, ctypes.POINTER(_Def)]),
    "shmlimit_limiter_limit": (ctypes.c_int32, [_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "shmlimit_limit_free": (None, [_P]),
    "shmlimit_limit_definition": (ctypes.c_int32, [_P, ctypes.POINTER(_Def)]),
    "shmlimit_acquire": (ctypes.c_int32, [_P, ctypes.c_uint64, ctypes.POINTER(_Decision)]),
    "shmlimit_peek": (ctypes.c_int32, [_P, ctypes.c_uint64, ctypes.POINTER(_Decision)]),
    "shmlimit_acquire_at": (
        ctypes.c_int32, [_P, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(_Decision)]
    ),
    "shmlimit_limit_stats": (ctypes.c_int32, [_P, ctypes.POINTER(_Stats)]),
    "shmlimit_acquire_timeout": (ctypes.c_int32, [_P, _U64, _U64, ctypes.POINTER(_Decision)]),
    "shmlimit_refund": (ctypes.c_int32, [_P, ctypes.POINTER(_Decision)]),
    "shmlimit_refund_units": (ctypes.c_int32, [_P, ctypes.POINTER(_Decision), _U64]),
    "shmlimit_limit_set_rate": (ctypes.c_int32, [_P, _U64, _U64]),
    "shmlimit_limit_set_token_bucket": (ctypes.c_int32, [_P, _U64, _U64, _U64]),
    "shmlimit_limit_set_limit": (ctypes.c_int32, [_P, _U64]),
    "shmlimit_limit_live_definition": (ctypes.c_int32, [_P, ctypes.POINTER(_Def)]),
    "shmlimit_limit_reset": (ctypes.c_int32, [_P]),
    "shmlimit_limit_policy": (ctypes.c_int32, [_P, ctypes.POINTER(_Policy)]),
    "shmlimit_acquire_key": (ctypes.c_int32, [_P] + _KEY + [_U64, ctypes.POINTER(_Decision)]),
    "shmlimit_peek_key": (ctypes.c_int32, [_P] + _KEY + [_U64, ctypes.POINTER(_Decision)]),
    "shmlimit_acquire_key_at": (
        ctypes.c_int32, [_P] + _KEY + [_U64, _U64, ctypes.POINTER(_Decision)]
    ),
    "shmlimit_refund_key": (ctypes.c_int32, [_P] + _KEY + [ctypes.POINTER(_Decision)]),
    "shmlimit_limit_key_occupancy": (
        ctypes.c_int32, [_P, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)]
    ),
    "shmlimit_limit_reclaim_idle_keys": (ctypes.c_int32, [_P, ctypes.POINTER(_SIZE)]),
    "shmlimit_permit_acquire": (ctypes.c_int32, [_P, ctypes.POINTER(_U64)]),
    "shmlimit_permit_acquire_timeout": (ctypes.c_int32, [_P, _U64, ctypes.POINTER(_U64)]),
    "shmlimit_permit_release": (ctypes.c_int32, [_P, _U64, ctypes.POINTER(ctypes.c_bool)]),
    "shmlimit_permit_holders": (
        ctypes.c_int32, [_P, ctypes.POINTER(_PermitHolder), _SIZE, ctypes.POINTER(_SIZE)]
    ),
    "shmlimit_permit_reclaim_dead": (ctypes.c_int32, [_P, ctypes.POINTER(_SIZE)]),
    "shmlimit_permit_acquire_key": (ctypes.c_int32, [_P] + _KEY + [ctypes.POINTER(_U64)]),
    "shmlimit_permit_acquire_key_timeout": (
        ctypes.c_int32, [_P] + _KEY + [_U64, ctypes.POINTER(_U64)]
    ),
    "shmlimit_permit_key_held": (
        ctypes.c_int32, [_P] + _KEY + [ctypes.POINTER(ctypes.c_uint32)]
    ),
    "shmlimit_key_tag": (ctypes.c_int32, [_P] + _KEY + [ctypes.POINTER(_U64)]),
    "shmlimit_reserve": (
        ctypes.c_int32, [_P, _U64, _U64, ctypes.POINTER(_Booking), ctypes.POINTER(_P)]
    ),
    "shmlimit_reservation_wait": (ctypes.c_int32, [_P, ctypes.POINTER(_Decision)]),
    "shmlimit_reservation_cancel": (ctypes.c_int32, [_P, ctypes.POINTER(ctypes.c_bool)]),
    "shmlimit_reservation_free": (None, [_P]),
    "shmlimit_guarded_limiter_open": (
        ctypes.c_int32, [ctypes.c_char_p, _U64, ctypes.POINTER(_P)]
    ),
    "shmlimit_guarded_limiter_free": (None, [_P]),
    "shmlimit_guarded_limiter_attached": (ctypes.c_int32, [_P, ctypes.POINTER(ctypes.c_bool)]),
    "shmlimit_guarded_limiter_limit": (
        ctypes.c_int32, [_P, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(_P)]
    ),
    "shmlimit_guarded_limit_free": (None, [_P]),
    "shmlimit_guarded_acquire": (ctypes.c_int32, [_P, _U64, ctypes.POINTER(_Decision)]),
    "shmlimit_guarded_peek": (ctypes.c_int32, [_P, _U64, ctypes.POINTER(_Decision)]),
    "shmlimit_guarded_acquire_key": (
        ctypes.c_int32, [_P] + _KEY + [_U64, ctypes.POINTER(_Decision)]
    ),
    "shmlimit_guarded_refund": (ctypes.c_int32, [_P, ctypes.POINTER(_Decision)]),
}


def _load() -> ctypes.CDLL:
    """The libshmlimit.so installed in this package: the one shmlimit._native is linked with
    (checked), so that both share the library's state (handles, thread-local errors)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libshmlimit.so")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"shmlimit: cannot load {path} ({e}); reinstall the package with "
                          "pip, which builds and installs it") from e
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    if ctypes.cast(lib.shmlimit_acquire, ctypes.c_void_p).value != _native._acquire_address:
        raise ImportError(
            f"shmlimit: {path} is not the library shmlimit._native was loaded with; "
            "reinstall the package")
    return lib


_LIB = _load()


def _lib() -> ctypes.CDLL:
    return _LIB


def _address(out: ctypes.c_void_p) -> int:
    """The handle a successful call wrote (never NULL on success)."""
    value = out.value
    if value is None:
        raise InternalError("the library returned a NULL handle", InternalError.code)
    return value


def _check(status: int) -> None:
    if status == 0:
        return
    # The message is thread-local in the library and ctypes copies it at once.
    message = (_LIB.shmlimit_last_error() or b"").decode("utf-8", "replace")
    if not message:
        message = (_LIB.shmlimit_strerror(status) or b"").decode()
    raise _error(status, message, _LIB.shmlimit_last_os_error())


def library_version() -> str:
    """The version of the loaded libshmlimit."""
    version: bytes = _LIB.shmlimit_version()
    return version.decode()


#: The package's version: the crate's (Cargo.toml), which is also library_version().
__version__ = library_version()


# ---------------------------------------------------------------------------------------------
# Limit definitions.


_U64_MAX = 2**64 - 1


def _u64(value: object, what: str, low: int = 0, high: int = _U64_MAX) -> int:
    """An integer argument, checked before any call: an int (not a bool: TypeError), from
    ``low`` (else InvalidParameterError, a ValueError) to ``high`` (else
    ParameterOverflowError, an OverflowError), with the caller's value in the message."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidParameterError(
            f"{what}={value!r} is {'negative' if value < 0 else f'below {low}'}",
            InvalidParameterError.code)
    if value > high:
        bound = "2**64 - 1" if high == _U64_MAX else str(high)
        raise ParameterOverflowError(f"{what}={value!r} exceeds {bound}",
                                     InvalidParameterError.code)
    return value


def _ns(value: Seconds, what: str) -> int:
    if isinstance(value, datetime.timedelta):
        ns = (value.days * 86_400 + value.seconds) * 10**9 + value.microseconds * 1000
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what}: seconds as int, float or timedelta, not {type(value).__name__}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameterError(f"{what}={value!r} is not finite", InvalidParameterError.code)
    else:
        ns = round(value * 1_000_000_000)
    if ns <= 0:
        raise InvalidParameterError(f"{what}={value!r}: seconds must be positive",
                                    InvalidParameterError.code)
    if ns > _U64_MAX:
        raise ParameterOverflowError(f"{what}={value!r} s exceeds 2**64 - 1 ns",
                                     InvalidParameterError.code)
    return ns


def _count(value: object, what: str) -> int:
    return _u64(value, what)


def _timeout_ns(timeout: Optional[Seconds], what: str = "timeout") -> int:
    """A timeout for the waiting calls: None waits as long as it takes; 0 does not wait."""
    if timeout is None:
        return _U64_MAX
    if not isinstance(timeout, datetime.timedelta) and not isinstance(timeout, bool) and \
            isinstance(timeout, (int, float)) and timeout == 0:
        return 0
    if isinstance(timeout, datetime.timedelta) and timeout == datetime.timedelta(0):
        return 0
    return _ns(timeout, what)


def _name(name: object, what: str = "a limit name") -> bytes:
    """A limit name: a str without NUL (the library checks the rest: 1 to 63 of
    ``[A-Za-z0-9_-.:/]``)."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__} ({name!r})")
    if "\0" in name:
        raise InvalidParameterError(f"{what} {name!r} contains NUL", InvalidParameterError.code)
    return name.encode("utf-8")


def _path(path: object) -> bytes:
    """A path: str, bytes or os.PathLike, without NUL (which would cut it short in C)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"a path is str, bytes or os.PathLike, not {type(path).__name__}")
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise InvalidParameterError(f"path {path!r} contains NUL", InvalidParameterError.code)
    return raw


class Keyed:
    """Makes a limit keyed: one independent state per key, in a table of ``capacity`` slots
    (1 to MAX_KEYS, rounded up to a power of two). ``on_full``: 'deny' (the default), 'allow'
    (fail open) or 'error' (raise TableFullError) when no slot is free for a new key."""

    def __init__(self, capacity: int, on_full: str = "deny"):
        self.capacity = _u64(capacity, "capacity", low=1, high=MAX_KEYS)
        if on_full not in _FULL_POLICIES:
            raise InvalidParameterError(
                f"on_full={on_full!r}: 'deny', 'allow' or 'error'", InvalidParameterError.code
            )
        self.on_full = on_full

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyed) and (self.capacity, self.on_full) == (
            other.capacity, other.on_full)

    def __hash__(self) -> int:
        return hash((self.capacity, self.on_full))

    def __repr__(self) -> str:
        return f"Keyed({self.capacity}, on_full={self.on_full!r})"


class FleetShare:
    """This limit is this host's share (``weight``) of a fleet-wide budget of ``rate`` tokens per
    ``per`` seconds; informational for the workers, read by the fleet agent."""

    def __init__(self, rate: int, per: Seconds = 1.0, weight: int = 1):
        rate = _u64(rate, "rate", low=1)
        self.emission_ns = -(-_ns(per, "per") // rate)
        self.weight = _u64(weight, "weight", high=2**32 - 1)

    @classmethod
    def _of(cls, emission_ns: int, weight: int) -> "FleetShare":
        share = cls.__new__(cls)
        share.emission_ns, share.weight = emission_ns, weight
        return share

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FleetShare) and (self.emission_ns, self.weight) == (
            other.emission_ns, other.weight)

    def __hash__(self) -> int:
        return hash((self.emission_ns, self.weight))

    def __repr__(self) -> str:
        return f"FleetShare(emission_ns={self.emission_ns}, weight={self.weight})"


def _short_fraction(stored: int) -> float:
    """The shortest decimal fraction that stores as ``stored`` 65536ths (0.1, not 0.100006)."""
    for digits in range(1, 7):
        value = round(stored / 65536, digits)
        if min(round(value * 65536), 65535) == stored:
            return value
    return stored / 65536


class Spec:
    """A limit definition (TokenBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency):
    the algorithm's parameters (in the subclass) and the options every kind takes as keyword
    arguments: ``shadow`` (dry run: never deny, count what would have been denied),
    ``near_limit`` (the fraction of the capacity under which an admission counts as near the
    limit, default about 0.1), ``keyed`` (a Keyed), ``split`` (sub-buckets of a hot token
    bucket) and ``fleet`` (a FleetShare)."""

    _kind = 0
    shadow = False
    keyed: Optional[Keyed] = None
    split = 1
    fleet: Optional[FleetShare] = None
    _near = _DEFAULT_NEAR_LIMIT
    _near_written: Optional[float] = None

    def _set_options(self, shadow: bool = False, near_limit: Optional[float] = None,
                     keyed: Optional[Keyed] = None, split: int = 1,
                     fleet: Optional[FleetShare] = None) -> None:
        if not isinstance(shadow, bool):
            raise TypeError(f"shadow must be a bool, not {type(shadow).__name__}")
        self.shadow = shadow
        if near_limit is not None:
            if isinstance(near_limit, bool) or not isinstance(near_limit, (int, float)) or \
                    not 0 <= near_limit <= 1:
                raise InvalidParameterError(
                    f"near_limit={near_limit!r}: a fraction from 0 to 1", InvalidParameterError.code
                )
            self._near = min(round(near_limit * 65536), 65535)
            self._near_written = near_limit
        if keyed is not None and not isinstance(keyed, Keyed):
            raise TypeError(f"keyed must be a Keyed, not {type(keyed).__name__}")
        self.keyed = keyed
        self.split = max(_u64(split, "split", high=2**16 - 1), 1)
        if fleet is not None and not isinstance(fleet, FleetShare):
            raise TypeError(f"fleet must be a FleetShare, not {type(fleet).__name__}")
        self.fleet = fleet

    @property
    def near_limit(self) -> float:
        """The near-limit fraction of the capacity, as written (or the shortest decimal that
        stores the same)."""
        if self._near_written is not None:
            return self._near_written
        return _short_fraction(self._near)

    def _fill(self, d: _Def) -> None:
        raise NotImplementedError

    def _fill_options(self, d: _Def) -> None:
        d.flags = _DEF_NEAR_LIMIT | (_DEF_SHADOW if self.shadow else 0)
        d.near_limit = self._near
        d.split = self.split
        if self.keyed is not None:
            d.key_capacity = self.keyed.capacity
            d.on_full = _FULL_POLICIES[self.keyed.on_full]
        if self.fleet is not None:
            d.fleet_weight = self.fleet.weight
            d.fleet_emission_ns = self.fleet.emission_ns

    def _read_options(self, d: _Def) -> None:
        self.shadow = bool(d.flags & _DEF_SHADOW)
        self._near = d.near_limit if d.flags & _DEF_NEAR_LIMIT else _DEFAULT_NEAR_LIMIT
        self.split = max(d.split, 1)
        policies = {v: k for k, v in _FULL_POLICIES.items()}
        self.keyed = Keyed(d.key_capacity, policies.get(d.on_full, "deny")) \
            if d.key_capacity else None
        self.fleet = FleetShare._of(d.fleet_emission_ns, d.fleet_weight) \
            if d.fleet_weight else None

    def _options_key(self) -> Tuple[object, ...]:
        return (self.shadow, self._near, self.keyed, self.split, self.fleet)

    def _options_repr(self) -> str:
        parts = []
        if self.shadow:
            parts.append("shadow=True")
        if self._near != _DEFAULT_NEAR_LIMIT:
            parts.append(f"near_limit={self.near_limit!r}")
        if self.keyed is not None:
            parts.append(f"keyed={self.keyed!r}")
        if self.split != 1:
            parts.append(f"split={self.split}")
        if self.fleet is not None:
            parts.append(f"fleet={self.fleet!r}")
        return "".join(", " + p for p in parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spec) and type(self) is type(other) and \
            self._key() == other._key() and self._options_key() == other._options_key()

    def __hash__(self) -> int:
        return hash((type(self), self._key(), self._options_key()))

    def _key(self) -> Tuple[object, ...]:
        raise NotImplementedError


# Kept for code that named the base class by its old private name.
_Spec = Spec

# The periods a token bucket read back from a file is expressed in, when one of them gives the
# stored refill interval exactly: TokenBucket(rate=5) reads back as rate=5, per=1.0 (the file
# stores only the interval, 200 ms).
_READBACK_PERIODS_NS = (10**9, 60 * 10**9, 3600 * 10**9, 86_400 * 10**9, 10**6, 10**3)


def _bucket_form(emission_ns: int) -> Tuple[int, int]:
    """``(rate, period_ns)`` for a stored refill interval: the first of the usual periods whose
    rate stores the same interval (the library rounds ``period / rate`` up), else
    ``(1, emission_ns)``."""
    for period in _READBACK_PERIODS_NS:
        rate = round(period / emission_ns)
        if rate >= 1 and -(-period // rate) == emission_ns:
            return rate, period
    return 1, emission_ns


class TokenBucket(Spec):
    """A token bucket (GCRA): ``burst`` tokens, refilled at ``rate`` tokens per ``per`` seconds.

    At most ``floor(burst + rate * T / per)`` admissions in any interval of ``T`` seconds.
    ``burst`` defaults to ``rate`` (one period's worth).
    """

    _kind = _TOKEN_BUCKET

    def __init__(self, rate: int, per: Seconds = 1.0, burst: Optional[int] = None,
                 **options: Any):
        self.rate = _u64(rate, "rate", low=1)
        self.period_ns = _ns(per, "per")
        self.burst = _u64(rate if burst is None else burst, "burst", low=1)
        self._set_options(**options)

    @property
    def per(self) -> float:
        """The refill period in seconds."""
        return self.period_ns / 1e9

    @property
    def emission_ns(self) -> int:
        """Nanoseconds per token, rounded up as the library stores it."""
        return -(-self.period_ns // self.rate) if self.rate else 0

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns, d.rate = self.burst, self.period_ns, self.rate

    def _key(self) -> Tuple[object, ...]:
        return (self.burst, self.emission_ns)

    def __repr__(self) -> str:
        return (f"TokenBucket(rate={self.rate}, per={self.per!r}, burst={self.burst}"
                f"{self._options_repr()})")


class _Windowed(Spec):
    def __init__(self, limit: int, window: Seconds, aligned: str = "wall",
                 utc_offset: int = 0, **options: Any):
        self.limit = _u64(limit, "limit", low=1)
        self.window_ns = _ns(window, "window")
        if aligned not in _ALIGNMENTS:
            raise InvalidParameterError(
                f"aligned={aligned!r}: 'wall', 'monotonic' or 'calendar'",
                InvalidParameterError.code
            )
        if utc_offset and aligned != "calendar":
            raise InvalidParameterError("utc_offset needs aligned='calendar'",
                                        InvalidParameterError.code)
        self.aligned = aligned
        # Seconds east of UTC; the library refuses more than 18 h either way.
        self.utc_offset = int(utc_offset)
        self._set_options(**options)

    @property
    def window(self) -> float:
        """The window in seconds."""
        return self.window_ns / 1e9

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns, d.alignment = self.limit, self.window_ns, _ALIGNMENTS[self.aligned]
        # A calendar window's UTC offset travels in the rate field, as an int64.
        d.rate = self.utc_offset & (2**64 - 1)

    def _key(self) -> Tuple[object, ...]:
        return (self.limit, self.window_ns, self.aligned, self.utc_offset)

    def __repr__(self) -> str:
        offset = f", utc_offset={self.utc_offset}" if self.utc_offset else ""
        return (f"{type(self).__name__}(limit={self.limit}, window={self.window!r}, "
                f"aligned={self.aligned!r}{offset}{self._options_repr()})")


class FixedWindow(_Windowed):
    """At most ``limit`` per window of ``window`` seconds (``aligned`` to 'wall' clock,
    'monotonic' time, or the 'calendar': days from midnight and weeks from Monday 00:00 in UTC
    or ``utc_offset`` seconds east of it); up to ``2 * limit`` across one boundary."""

    _kind = _FIXED_WINDOW


class SlidingWindow(_Windowed):
    """The weighted sliding-window counter: about ``limit`` per ``window`` seconds."""

    _kind = _SLIDING_WINDOW


class SlidingLog(Spec):
    """The exact sliding log: at most ``limit`` admissions in every ``window`` seconds."""

    _kind = _SLIDING_LOG

    def __init__(self, limit: int, window: Seconds, **options: Any):
        self.limit = _u64(limit, "limit", low=1)
        self.window_ns = _ns(window, "window")
        self._set_options(**options)

    @property
    def window(self) -> float:
        return self.window_ns / 1e9

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns = self.limit, self.window_ns

    def _key(self) -> Tuple[object, ...]:
        return (self.limit, self.window_ns)

    def __repr__(self) -> str:
        return f"SlidingLog(limit={self.limit}, window={self.window!r}{self._options_repr()})"


class Concurrency(Spec):
    """At most ``permits`` held at once across every process; a permit held longer than
    ``lease`` seconds (None: no lease) becomes reclaimable, and so do the permits of a process
    that died. Take permits with ``Limit.permit()`` (a context manager) or
    ``Limit.try_acquire_permit()``. Keyed (``keyed=Keyed(capacity)``, at most 64 permits): at
    most ``permits`` per key, taken with ``Limit.key_permit(key)`` or
    ``Limit.try_acquire_key_permit(key)``."""

    _kind = _CONCURRENCY

    def __init__(self, permits: int, lease: Optional[Seconds] = None, **options: Any):
        self.permits = _u64(permits, "permits", low=1)
        self.lease_ns = 0 if lease is None else _ns(lease, "lease")
        self._set_options(**options)

    @property
    def lease(self) -> Optional[float]:
        return self.lease_ns / 1e9 if self.lease_ns else None

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns = self.permits, self.lease_ns

    def _key(self) -> Tuple[object, ...]:
        return (self.permits, self.lease_ns)

    def __repr__(self) -> str:
        return f"Concurrency(permits={self.permits}, lease={self.lease!r}{self._options_repr()})"


def _spec_of(d: _Def) -> Spec:
    aligned = {1: "monotonic", 2: "calendar"}.get(d.alignment, "wall")
    spec: Spec
    if d.kind == _TOKEN_BUCKET:
        bucket = TokenBucket.__new__(TokenBucket)
        # The library reports rate = 1 per the stored interval; read it back as written when a
        # usual period gives exactly that interval.
        bucket.rate, bucket.period_ns = _bucket_form(-(-d.period_ns // max(d.rate, 1)))
        bucket.burst = d.limit
        spec = bucket
    elif d.kind in (_FIXED_WINDOW, _SLIDING_WINDOW):
        window: _Windowed = (FixedWindow if d.kind == _FIXED_WINDOW else SlidingWindow).__new__(
            FixedWindow if d.kind == _FIXED_WINDOW else SlidingWindow
        )
        window.limit, window.window_ns, window.aligned = d.limit, d.period_ns, aligned
        window.utc_offset = d.rate - 2**64 if d.rate >= 2**63 else d.rate
        spec = window
    elif d.kind == _SLIDING_LOG:
        log = SlidingLog.__new__(SlidingLog)
        log.limit, log.window_ns = d.limit, d.period_ns
        spec = log
    elif d.kind == _CONCURRENCY:
        conc = Concurrency.__new__(Concurrency)
        conc.permits, conc.lease_ns = d.limit, d.period_ns
        spec = conc
    else:
        raise ShmlimitError(f"limit kind {d.kind} is not known to this module")
    spec._read_options(d)
    return spec


_ON_CONFLICT = {"refuse": 0, "adopt": 1}


_ON_REBOOT = {None: 0, "translate": 1, "reset": 2}


def _options(mode: Optional[int], allow_other_owner: bool,
             on_conflict: str = "refuse", on_reboot: Optional[str] = None) -> _Options:
    options = _Options()
    if on_reboot not in _ON_REBOOT:
        raise ValueError(f"on_reboot must be 'translate', 'reset' or None, not {on_reboot!r}")
    options.on_reboot = _ON_REBOOT[on_reboot]
    if mode is not None:
        # The C struct reads 0 as "the default 0600"; an explicit mode 0 is a mistake (a file
        # nobody may read), refused here. Bits above 0o777, modes without owner read and write,
        # and world-writable modes are refused by the library (InvalidParameterError).
        if mode == 0 and not isinstance(mode, bool):
            raise InvalidParameterError(
                "mode 000 does not let the owner read and write the file: it must include 0o600",
                InvalidParameterError.code,
            )
        # Bits above 0o777 are refused by the library (InvalidParameterError).
        options.mode = _u64(mode, "mode", high=2**32 - 1)
    if not isinstance(allow_other_owner, bool):
        raise TypeError(
            f"allow_other_owner must be a bool, not {type(allow_other_owner).__name__}")
    options.allow_other_owner = 1 if allow_other_owner else 0
    if on_conflict not in _ON_CONFLICT:
        raise ValueError(f"on_conflict must be 'refuse' or 'adopt', not {on_conflict!r:.80}")
    options.on_conflict = _ON_CONFLICT[on_conflict]
    return options


# ---------------------------------------------------------------------------------------------
# Decisions and handles.


def _decision_of(buf: "ctypes.Array[ctypes.c_char]") -> Decision:
    return Decision._from_raw(bytes(buf))


def _grant_of(decision: Decision) -> "ctypes.Array[ctypes.c_char]":
    if not isinstance(decision, Decision):
        raise TypeError(f"expected a Decision, not {type(decision).__name__}")
    return _Decision.from_buffer_copy(decision._raw)


class Stats:
    """Decision counters of one limit, summed over every process attached to the file.
    ``refunded`` counts grants given back whole (refunds, and the roll-backs of composed checks
    that denied): ``allowed - refunded`` is what passed."""

    __slots__ = ("allowed", "denied", "shadow_denied", "near_limit", "refunded")

    def __init__(self, allowed: int, denied: int, shadow_denied: int = 0, near_limit: int = 0,
                 refunded: int = 0):
        self.allowed = allowed
        self.denied = denied
        self.shadow_denied = shadow_denied
        self.near_limit = near_limit
        self.refunded = refunded

    def _tuple(self) -> Tuple[int, int, int, int, int]:
        return (self.allowed, self.denied, self.shadow_denied, self.near_limit, self.refunded)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stats) and self._tuple() == other._tuple()

    def __repr__(self) -> str:
        return (f"Stats(allowed={self.allowed}, denied={self.denied}, "
                f"shadow_denied={self.shadow_denied}, near_limit={self.near_limit}, "
                f"refunded={self.refunded})")

    def _asdict(self) -> Dict[str, int]:
        return dict(zip(self.__slots__, self._tuple()))


class _Handle:
    _free_name = ""

    def __init__(self, handle: Optional[int]):
        self._handle: Optional[int] = handle
        self._lib = _LIB

    def _live(self) -> int:
        handle = self._handle
        if handle is None:
            raise ClosedError(f"{type(self).__name__} is closed")
        return handle

    def close(self) -> None:
        """Free the handle (idempotent). Using it afterwards raises ClosedError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            getattr(self._lib, self._free_name)(handle)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Limit(_native.LimitBase):
    """One limit of a limiter file, resolved once by name. Outlives its Limiter.

    ``try_acquire``, ``peek``, ``try_acquire_key`` and ``peek_key`` are the C extension's (no
    ctypes on the hot path); ``close()`` frees the handle (also done when it is collected)."""

    def __init__(self, handle: int, name: str):
        super().__init__()
        self._attach(handle)
        self.name = name
        self._lib = _LIB
        self._aio: "Optional[AsyncLimit]" = None

    def _live(self) -> int:
        return self._ptr

    def _decide(self, fn: Callable[..., int], *args: Any) -> Decision:
        out = _Decision()
        _check(fn(self._live(), *args, ctypes.byref(out)))
        return _decision_of(out)

    @property
    def aio(self) -> "AsyncLimit":
        """The asyncio face of this limit: ``await limit.aio.acquire(1, timeout=2)``,
        ``async with limit.aio.permit(timeout=1)``, ``await limit.aio.reserve(...)``."""
        if self._aio is None:
            from .aio import AsyncLimit
            self._aio = AsyncLimit(self)
        return self._aio

    def try_acquire_at(self, cost: int, now_ns: int) -> Decision:
        """``try_acquire`` dated at ``now_ns`` on CLOCK_MONOTONIC (``time.monotonic_ns()``).

        Raises ClockOutOfRangeError, consuming nothing, for a date ahead of the clock by more
        than 1 ms or beyond what the state encodes (2**61 ns).
        """
        return self._decide(self._lib.shmlimit_acquire_at, _u64(cost, "cost"),
                            _u64(now_ns, "now_ns"))

    def acquire(self, cost: int = 1, timeout: Optional[Seconds] = None) -> Decision:
        """Admit ``cost`` units, waiting up to ``timeout`` seconds for them (None: as long as it
        takes). A token bucket books them at once and sleeps the delay, or refuses at once,
        consuming nothing, when the delay would exceed the timeout; windows and the sliding log
        sleep the exact retry-after and try again. Returns an allowed Decision, or a denied one
        that consumed nothing. Raises WrongKindError on concurrency and keyed limits."""
        return self._decide(self._lib.shmlimit_acquire_timeout, _u64(cost, "cost"),
                            _timeout_ns(timeout))

    def refund(self, decision: Decision, units: Optional[int] = None) -> None:
        """Give back what ``decision`` (a grant of this limit) took, or ``units`` of it, for work
        that was admitted but never done. Refunding a denial or a peek does nothing. Raises
        WrongKindError on keyed (use refund_key) and concurrency limits."""
        grant = _grant_of(decision)
        if units is None:
            _check(self._lib.shmlimit_refund(self._live(), ctypes.byref(grant)))
        else:
            units = _u64(units, "units")
            _check(self._lib.shmlimit_refund_units(self._live(), ctypes.byref(grant), units))

    def set_rate(self, rate: int, per: Seconds = 1.0) -> None:
        """Change the refill rate to ``rate`` per ``per`` seconds, live, for every process (a
        window gets the limit per window this rate means, rounded down). Raises
        InvalidParameterError, WrongKindError (sliding log, concurrency)."""
        _check(self._lib.shmlimit_limit_set_rate(
            self._live(), _u64(rate, "rate"), _ns(per, "per")))

    def set_token_bucket(self, burst: int, rate: int, per: Seconds = 1.0) -> None:
        """Change a token bucket's burst and rate together, live."""
        _check(self._lib.shmlimit_limit_set_token_bucket(
            self._live(), _u64(burst, "burst"), _u64(rate, "rate"), _ns(per, "per")))

    def set_limit(self, limit: int) -> None:
        """Change a fixed or sliding window's limit per window, live."""
        _check(self._lib.shmlimit_limit_set_limit(self._live(), _u64(limit, "limit")))

    def reset(self) -> None:
        """Return the limit to fresh (full bucket, empty windows and table, no permits held),
        keeping its live parameters: grants the whole capacity at once."""
        _check(self._lib.shmlimit_limit_reset(self._live()))

    @property
    def live_definition(self) -> Spec:
        """The definition with its live parameters (after any retune by any process)."""
        out = _Def()
        _check(self._lib.shmlimit_limit_live_definition(self._live(), ctypes.byref(out)))
        return _spec_of(out)

    def reserve(self, cost: int = 1, max_delay: Optional[Seconds] = 0) -> "Reservation":
        """Book the next ``cost`` tokens of a token bucket now, to be used after a delay of at
        most ``max_delay`` seconds (None: any delay); otherwise refuse at once and take nothing.
        ``await`` the Reservation to sleep its delay without blocking an event loop. Bookings are
        served first come, first served across processes. Raises WrongKindError on other
        algorithms (use ``acquire(timeout=...)``)."""
        booking, out = _Booking(), _P()
        _check(self._lib.shmlimit_reserve(
            self._live(), _u64(cost, "cost"), _timeout_ns(max_delay, "max_delay"),
            ctypes.byref(booking), ctypes.byref(out)))
        return Reservation(booking, out.value)

    # Keyed limits.

    def try_acquire_key_at(self, key: Key, cost: int, now_ns: int) -> Decision:
        """``try_acquire_key`` dated at ``now_ns`` on CLOCK_MONOTONIC."""
        raw = _key(key)
        return self._decide(self._lib.shmlimit_acquire_key_at, raw, len(raw),
                            _u64(cost, "cost"), _u64(now_ns, "now_ns"))

    def refund_key(self, key: Key, decision: Decision) -> None:
        """Give back what ``decision`` (a grant of ``try_acquire_key`` for ``key``) took."""
        raw = _key(key)
        grant = _grant_of(decision)
        _check(self._lib.shmlimit_refund_key(self._live(), raw, len(raw), ctypes.byref(grant)))

    def key_occupancy(self) -> Tuple[int, int]:
        """``(used, slots)``: table slots holding a key, and the table's size."""
        used, slots = ctypes.c_size_t(), ctypes.c_size_t()
        _check(self._lib.shmlimit_limit_key_occupancy(
            self._live(), ctypes.byref(used), ctypes.byref(slots)))
        return (used.value, slots.value)

    def reclaim_idle_keys(self) -> int:
        """Retire every key whose state is back to fresh; returns how many (a cleanup pass,
        never needed for correctness)."""
        out = ctypes.c_size_t()
        _check(self._lib.shmlimit_limit_reclaim_idle_keys(self._live(), ctypes.byref(out)))
        return out.value

    # Concurrency permits.

    def try_acquire_permit(self) -> Optional["Permit"]:
        """Take a permit if one is free (or held by a dead process, or past its lease), without
        waiting; None when all are held. Raises WrongKindError if this is not a concurrency
        limit."""
        out = _U64()
        _check(self._lib.shmlimit_permit_acquire(self._live(), ctypes.byref(out)))
        return Permit(self, out.value) if out.value else None

    def acquire_permit(self, timeout: Optional[Seconds] = None) -> Optional["Permit"]:
        """Take a permit, waiting up to ``timeout`` seconds (None: as long as it takes) for one
        to be released or for a holder to die; None when the timeout passed."""
        out = _U64()
        _check(self._lib.shmlimit_permit_acquire_timeout(
            self._live(), _timeout_ns(timeout), ctypes.byref(out)))
        return Permit(self, out.value) if out.value else None

    def permit(self, timeout: Optional[Seconds] = 0) -> "Permit":
        """A permit for a ``with`` block, released when the block ends::

            with db.permit(timeout=1.0):
                ...

        Waits up to ``timeout`` seconds (0, the default: not at all; None: as long as it takes)
        and raises PermitUnavailableError if none became free."""
        return self._granted(self.acquire_permit(timeout), "every permit is held")

    def _granted(self, permit: Optional["Permit"], refusal: str) -> "Permit":
        if permit is None:
            raise PermitUnavailableError(
                f"limit `{self.name}`: {refusal}", PermitUnavailableError.code)
        return permit

    def try_acquire_key_permit(self, key: Key) -> Optional["Permit"]:
        """Take a permit for ``key`` on a keyed concurrency limit if fewer than ``permits`` of
        that key's are held (or one is held by a dead process, or past its lease), without
        waiting; None when all of the key's are held (or the table has no slot for a new key
        and its policy is 'deny'). Raises InvalidKeyError, TableFullError (policy 'error'),
        WrongKindError (not a keyed concurrency limit)."""
        raw, out = _key(key), _U64()
        _check(self._lib.shmlimit_permit_acquire_key(
            self._live(), raw, len(raw), ctypes.byref(out)))
        return Permit(self, out.value) if out.value else None

    def acquire_key_permit(
        self, key: Key, timeout: Optional[Seconds] = None
    ) -> Optional["Permit"]:
        """``try_acquire_key_permit``, waiting up to ``timeout`` seconds (None: as long as it
        takes) for one of the key's permits to be released; None when the timeout passed."""
        raw, out = _key(key), _U64()
        _check(self._lib.shmlimit_permit_acquire_key_timeout(
            self._live(), raw, len(raw), _timeout_ns(timeout), ctypes.byref(out)))
        return Permit(self, out.value) if out.value else None

    def key_permit(self, key: Key, timeout: Optional[Seconds] = 0) -> "Permit":
        """A permit of ``key`` for a ``with`` block, released when the block ends; waits as
        ``permit()`` does and raises PermitUnavailableError if none of the key's became free."""
        return self._granted(
            self.acquire_key_permit(key, timeout), "every permit of the key is held")

    def key_permits_held(self, key: Key) -> int:
        """How many of ``key``'s permits are held now, across every process."""
        raw, out = _key(key), ctypes.c_uint32()
        _check(self._lib.shmlimit_permit_key_held(self._live(), raw, len(raw), ctypes.byref(out)))
        return out.value

    def key_tag(self, key: Key) -> int:
        """The tag this file's key tables know ``key`` by (``PermitHolder.key_tag``)."""
        raw, out = _key(key), _U64()
        _check(self._lib.shmlimit_key_tag(self._live(), raw, len(raw), ctypes.byref(out)))
        return out.value

    def release_permit(self, permit_id: int) -> bool:
        """Release a permit by id (``Permit.id``); False if this process did not hold it."""
        out = ctypes.c_bool()
        _check(self._lib.shmlimit_permit_release(
            self._live(), _u64(permit_id, "permit_id"), ctypes.byref(out)))
        return bool(out.value)

    def permit_holders(self) -> List["PermitHolder"]:
        """Every held permit: its id, holder pid, since when, until when, and whether the next
        acquirer may take it over (holder dead or lease expired)."""
        handle = self._live()
        count = ctypes.c_size_t()
        while True:
            size = max(count.value, 1)
            holders = (_PermitHolder * size)()
            _check(self._lib.shmlimit_permit_holders(handle, holders, size, ctypes.byref(count)))
            if count.value <= size:
                return [PermitHolder(h) for h in holders[:count.value]]

    def reclaim_dead_permits(self) -> int:
        """Free every permit whose holder is gone or whose lease expired; returns how many."""
        out = ctypes.c_size_t()
        _check(self._lib.shmlimit_permit_reclaim_dead(self._live(), ctypes.byref(out)))
        return out.value

    def stats(self) -> Stats:
        out = _Stats()
        _check(self._lib.shmlimit_limit_stats(self._live(), ctypes.byref(out)))
        return Stats(out.allowed, out.denied, out.shadow_denied, out.near_limit, out.refunded)

    def policy(self) -> "Policy":
        """The limit's quota per window in the terms of the IETF ``RateLimit-Policy`` field,
        computed by the core from the live parameters. Raises WrongKindError for a concurrency
        limit (it bounds work in flight, not a rate)."""
        out = _Policy()
        _check(self._lib.shmlimit_limit_policy(self._live(), ctypes.byref(out)))
        return Policy(out.quota, out.window_secs)

    def headers(self, decision: Decision) -> Dict[str, str]:
        """The ``RateLimit``, ``RateLimit-Policy`` and ``Retry-After`` header fields for a
        decision of this limit, rendered by the core (see ``rate_limit_headers``)."""
        return rate_limit_headers((self, decision))

    @property
    def definition(self) -> Spec:
        """The limit's definition as stored in the file (as created)."""
        out = _Def()
        _check(self._lib.shmlimit_limit_definition(self._live(), ctypes.byref(out)))
        return _spec_of(out)

    def __repr__(self) -> str:
        return f"Limit({self.name!r}{', closed' if self.closed else ''})"


def _key(key: object) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"a key is str or bytes, not {type(key).__name__}")


class Permit:
    """A held permit of a concurrency limit; a context manager that releases it on exit. It is
    also released when garbage-collected, and lost to the next acquirers when this process
    exits or dies. A permit belongs to the process that took it: a forked child's copy releases
    nothing."""

    __slots__ = ("limit", "id", "_held", "__weakref__")

    def __init__(self, limit: Limit, permit_id: int):
        self.limit = limit
        self.id = permit_id
        self._held = permit_id != _PERMIT_SHADOW

    @property
    def shadow(self) -> bool:
        """True for a permit a shadow limit granted although it would have refused: it holds
        nothing."""
        return self.id == _PERMIT_SHADOW

    @property
    def held(self) -> bool:
        """False once released by this handle (the library may also have taken it over after
        its lease expired)."""
        return self._held

    def release(self) -> bool:
        """Release now; False if it was no longer held (released before, taken over after its
        lease, the limit reset). Idempotent."""
        if not self._held:
            return False
        self._held = False
        return self.limit.release_permit(self.id)

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"Permit({self.limit.name!r}, id={self.id:#x}{'' if self._held else ', released'})"


class Reservation(_Handle):
    """A booking made by ``Limit.reserve``: ``granted`` (the tokens are taken) or refused
    (nothing taken); ``delay`` is how long after booking the caller may proceed, or would have
    had to wait. ``wait()`` sleeps until then and returns the grant; ``cancel()`` gives the
    tokens back if nothing was booked after them. A context manager: closing a reservation
    neither waited for nor cancelled keeps its tokens booked."""

    _free_name = "shmlimit_reservation_free"

    def __init__(self, booking: "_Booking", handle: Optional[int]):
        super().__init__(handle)
        self.granted = bool(booking.granted)
        self.cost: int = booking.cost
        self.delay_ns: int = booking.delay_ns
        self.ready_at_ns: int = booking.ready_at_ns

    @property
    def refused(self) -> bool:
        return not self.granted

    @property
    def delay(self) -> float:
        """Seconds after booking until the caller may proceed (or would have had to)."""
        return self.delay_ns / 1e9

    def wait(self) -> Decision:
        """Sleep until the reservation may proceed and return its grant (a denied Decision, at
        once, for a refused one). Raises InvalidParameterError after ``cancel()``."""
        if not self.granted:
            return Decision(False, 0, max(self.delay_ns, 1))
        out = _Decision()
        _check(self._lib.shmlimit_reservation_wait(self._live(), ctypes.byref(out)))
        return _decision_of(out)

    def cancel(self) -> bool:
        """Give the tokens back; False when something was booked after them (they stay used),
        or when the reservation was refused, waited for or already cancelled."""
        if not self.granted:
            return False
        out = ctypes.c_bool()
        _check(self._lib.shmlimit_reservation_cancel(self._live(), ctypes.byref(out)))
        return out.value

    def __bool__(self) -> bool:
        return self.granted

    def __await__(self) -> Generator[Any, None, Decision]:
        """``await reservation``: sleep its delay on the event loop, then its grant (see
        ``shmlimit.aio.wait_reservation``)."""
        from .aio import wait_reservation
        return wait_reservation(self).__await__()

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Reservation(granted={self.granted}, cost={self.cost}, "
                f"delay_ns={self.delay_ns})")


class PermitHolder:
    """One held permit as ``Limit.permit_holders()`` lists it."""

    __slots__ = ("id", "pid", "reclaimable", "since_ns", "lease_expiry_ns", "key_tag")

    def __init__(self, h: "_PermitHolder"):
        self.id = h.id
        self.pid = h.pid
        self.reclaimable = bool(h.reclaimable)
        self.since_ns = h.since_ns or None
        self.lease_expiry_ns = h.lease_expiry_ns or None
        # For a keyed limit, the key's tag (``Limit.key_tag(key)``); None otherwise.
        self.key_tag = h.key_tag or None

    def __repr__(self) -> str:
        return (f"PermitHolder(id={self.id:#x}, pid={self.pid}, reclaimable={self.reclaimable}, "
                f"since_ns={self.since_ns}, lease_expiry_ns={self.lease_expiry_ns}, "
                f"key_tag={self.key_tag})")


class Policy(NamedTuple):
    """A limit's quota per window, as the IETF ``RateLimit-Policy`` field states it."""

    #: ``q``: units granted per window.
    quota: int
    #: ``w``: the window in whole seconds (a token bucket's: the time it takes to refill).
    window_secs: int


def rate_limit_headers(*outcome: Union[Composed, Tuple[Limit, Decision]]) -> Dict[str, str]:
    """The ``RateLimit``, ``RateLimit-Policy`` and ``Retry-After`` header fields (draft-ietf-
    httpapi-ratelimit-headers) of one response, as the C core renders them: pass a Composed
    (``try_acquire_all``'s outcome; a check whose grant was given back is peeked so that it
    reports its real state) or ``(limit, decision)`` pairs. Fields the core leaves empty
    (``Retry-After`` when everything admitted; both RateLimit fields for concurrency limits
    alone) are left out. No arithmetic here: the values are the core's."""
    if len(outcome) == 1 and isinstance(outcome[0], Composed):
        values = outcome[0]._header_values()
    else:
        pairs: List[Tuple[Limit, Decision]] = []
        for item in outcome:
            if isinstance(item, Composed):
                raise TypeError("pass one Composed alone, or (limit, decision) pairs")
            pairs.append(item)
        values = _native.header_values(*pairs)
    names = ("RateLimit", "RateLimit-Policy", "Retry-After")
    return {name: value for name, value in zip(names, values) if value}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(source: Union["Limiter", Iterable[Limit]], file: Optional[str] = None) -> str:
    """The Prometheus text exposition format (0.0.4) of limits' counters, with the metric
    names of ``shmlimit stats --prometheus``: ``shmlimit_decisions_total{outcome=...}``,
    ``shmlimit_shadow_denied_total``, ``shmlimit_near_limit_total``,
    ``shmlimit_refunded_total`` (counters summed over every
    process attached to the file), and ``shmlimit_keys_used`` (keyed limits) and
    ``shmlimit_permits_held`` (concurrency limits) gauges. ``source`` is a Limiter (every limit
    of its file; ``file`` defaults to its path) or Limits. Serve it from any worker: the
    counters are the file's, not the process's."""
    if isinstance(source, Limiter):
        if file is None:
            file = os.fsdecode(source.path) if isinstance(source.path, (str, bytes, os.PathLike)) \
                else str(source.path)
        limits = [source.limit(name) for name in source.definitions()]
    else:
        limits = list(source)
    families: Dict[str, Tuple[str, str, List[str]]] = {
        "shmlimit_decisions_total": (
            "counter", "Decisions made on a limit since the file was created, summed over every "
            "process, by outcome.", []),
        "shmlimit_shadow_denied_total": (
            "counter", "Decisions a shadow limit would have denied (they were admitted).", []),
        "shmlimit_near_limit_total": (
            "counter", "Admissions that left less than the near-limit fraction of the capacity.",
            []),
        "shmlimit_refunded_total": (
            "counter", "Grants given back whole (refunds and composed roll-backs): allowed minus "
            "refunded is what passed.", []),
        "shmlimit_keys_used": ("gauge", "Keys in use in a keyed limit's table.", []),
        "shmlimit_permits_held": (
            "gauge", "Permits of a concurrency limit held right now.", []),
    }
    for limit in limits:
        base = (f'file="{_label(file)}",' if file is not None else "") + \
            f'limit="{_label(limit.name)}"'
        stats = limit.stats()
        families["shmlimit_decisions_total"][2].extend([
            f'shmlimit_decisions_total{{{base},outcome="allowed"}} {stats.allowed}',
            f'shmlimit_decisions_total{{{base},outcome="denied"}} {stats.denied}',
        ])
        families["shmlimit_shadow_denied_total"][2].append(
            f"shmlimit_shadow_denied_total{{{base}}} {stats.shadow_denied}")
        families["shmlimit_near_limit_total"][2].append(
            f"shmlimit_near_limit_total{{{base}}} {stats.near_limit}")
        families["shmlimit_refunded_total"][2].append(
            f"shmlimit_refunded_total{{{base}}} {stats.refunded}")
        definition = limit.definition
        if definition.keyed is not None:
            used, _slots = limit.key_occupancy()
            families["shmlimit_keys_used"][2].append(f"shmlimit_keys_used{{{base}}} {used}")
        if isinstance(definition, Concurrency):
            families["shmlimit_permits_held"][2].append(
                f"shmlimit_permits_held{{{base}}} {len(limit.permit_holders())}")
    lines: List[str] = []
    for name, (kind, help_text, samples) in families.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"] + samples
    return "\n".join(lines) + "\n"


def try_acquire_all(*checks: Union[Limit, Tuple[Limit, int], Tuple[Limit, Key],
                                    Tuple[Limit, Key, int]]) -> Composed:
    """Admit one request on every limit, or on none::

        try_acquire_all((per_client, "alice", 1), (glob, 1))   # a keyed and an unkeyed limit

    A check is a Limit (cost 1), ``(limit, cost)``, ``(limit, key)`` (cost 1) or ``(limit,
    key, cost)``; a key decides for that key of a keyed limit. The limits are acquired in
    order; when one denies, the grants already taken are given back and the rest peeked, so a
    denied request consumes nothing and ``retry_after`` is the largest of all the limits that
    would deny. At most MAX_CHECKS checks. Raises as ``try_acquire`` (``try_acquire_key``) does
    for any of them, after giving back what it had taken. ``Composed.refund()`` gives an
    allowed request's grants back."""
    return _native.try_acquire_all(*checks)


class Limiter(_Handle):
    """One attached limiter file; a context manager that closes it on exit."""

    _free_name = "shmlimit_limiter_free"

    def __init__(self, handle: int, path: PathArg):
        super().__init__(handle)
        self.path = path

    @classmethod
    def create_or_open(
        cls,
        path: PathArg,
        limits: Mapping[str, _Spec],
        *,
        mode: Optional[int] = None,
        allow_other_owner: bool = False,
        on_conflict: str = "refuse",
        on_reboot: Optional[str] = None,
    ) -> "Limiter":
        """Create the file with these limits, or attach to it if it exists with the same ones.

        ``mode`` sets the permission bits of a created file (default 0o600; 0o660 shares it with
        the group). An existing file is compared using its live parameters (a retuned rate
        counts). When it differs, ``on_conflict="refuse"`` (the default) raises
        DefinitionConflictError naming every differing field; ``on_conflict="adopt"`` retunes
        the file live when its layout can hold the new limits (usage kept), else replaces it
        atomically with a new file that attached processes move to within about a second.
        ``on_reboot`` is what a created file does at a reboot: ``"translate"`` (the default:
        quotas used before the reboot stay used) or ``"reset"``; given for an existing file, it
        must be the file's choice. Raises InvalidParameterError, DefinitionConflictError, or any
        error of open().
        """
        if not isinstance(limits, Mapping):
            raise TypeError(f"limits: a mapping of names to definitions, not "
                            f"{type(limits).__name__}")
        raw_path = _path(path)
        options = _options(mode, allow_other_owner, on_conflict, on_reboot)
        names = [_name(name) for name in limits]
        defs = (_Def * max(len(names), 1))()
        for d, name, spec in zip(defs, names, limits.values()):
            if not isinstance(spec, Spec):
                raise TypeError(f"limit {name!r}: expected TokenBucket, FixedWindow, "
                                f"SlidingWindow, SlidingLog or Concurrency, "
                                f"not {type(spec).__name__}")
            d.name, d.kind = name, spec._kind
            spec._fill(d)
            spec._fill_options(d)
        out = _P()
        _check(_LIB.shmlimit_limiter_create_or_open(
            raw_path, defs, len(names), ctypes.byref(options), ctypes.byref(out)))
        return cls(_address(out), path)

    @classmethod
    def open(
        cls,
        path: PathArg,
        *,
        mode: Optional[int] = None,
        allow_other_owner: bool = False,
        on_reboot: Optional[str] = None,
    ) -> "Limiter":
        """Attach to an existing file by path alone; its limits are read from the file.

        ``on_reboot``, if given, must be the file's choice (DefinitionConflictError otherwise).

        Raises IoError (for example errno ENOENT), SymlinkError, NotRegularFileError,
        PermissionDeniedError, ForeignFileError, VersionError, SizeError, CorruptFileError,
        NotInitializedError, ClockMismatchError.
        """
        raw_path = _path(path)
        options = _options(mode, allow_other_owner, on_reboot=on_reboot)
        out = _P()
        _check(_LIB.shmlimit_limiter_open(raw_path, ctypes.byref(options), ctypes.byref(out)))
        return cls(_address(out), path)

    def limit(self, name: str) -> Limit:
        """Resolve a limit by name, once. Raises UnknownLimitError."""
        out = _P()
        raw = _name(name)
        _check(self._lib.shmlimit_limiter_limit(self._live(), raw, ctypes.byref(out)))
        return Limit(_address(out), name)

    def definitions(self) -> Dict[str, Spec]:
        """The limits stored in the file, in definition order."""
        handle = self._live()
        count = ctypes.c_size_t()
        _check(self._lib.shmlimit_limiter_limit_count(handle, ctypes.byref(count)))
        result: Dict[str, Spec] = {}
        for i in range(count.value):
            d = _Def()
            _check(self._lib.shmlimit_limiter_definition(handle, i, ctypes.byref(d)))
            result[d.name.decode("utf-8")] = _spec_of(d)
        return result

    def __enter__(self) -> "Limiter":
        self._live()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Limiter({self.path!r}{', closed' if self.closed else ''})"

    @staticmethod
    def open_guarded(path: PathArg,
                     reopen_every: Seconds = 1.0) -> "GuardedLimiter":
        """A guarded limiter on the file at ``path``: attached now if the file can be opened
        (as by ``open()`` with the default options), else retried at most once per
        ``reopen_every`` seconds (0: at every decision). Never fails because of the file."""
        reopen_ns = _timeout_ns(reopen_every, "reopen_every")
        if reopen_ns == _U64_MAX:
            raise TypeError("reopen_every: seconds as int, float or timedelta, not None")
        raw_path = _path(path)
        out = _P()
        _check(_LIB.shmlimit_guarded_limiter_open(raw_path, reopen_ns, ctypes.byref(out)))
        return GuardedLimiter(_address(out), path)


class GuardedLimiter(_Handle):
    """A limiter file that may not be usable yet (or any more); see ``Limiter.open_guarded``.
    A context manager that closes it on exit; its guarded limits outlive it."""

    _free_name = "shmlimit_guarded_limiter_free"

    def __init__(self, handle: int, path: PathArg):
        super().__init__(handle)
        self.path = path

    def limit(self, name: str, unavailable: int) -> "GuardedLimit":
        """A guarded handle to the limit ``name``, deciding by ``unavailable`` (FAIL_OPEN or
        FAIL_CLOSED: required, there is no default) while the file cannot be used. The name is
        checked once the file is attached (then UnknownLimitError from every decision). Raises
        InvalidParameterError for any other policy value."""
        out = _P()
        raw = _name(name)
        policy = _u64(unavailable, "unavailable", high=2**32 - 1)
        _check(self._lib.shmlimit_guarded_limiter_limit(
            self._live(), raw, policy, ctypes.byref(out)))
        return GuardedLimit(_address(out), name, policy)

    @property
    def attached(self) -> bool:
        """Whether the file is attached (attempting to open it if the interval has passed)."""
        out = ctypes.c_bool()
        _check(self._lib.shmlimit_guarded_limiter_attached(self._live(), ctypes.byref(out)))
        return bool(out.value)

    def __enter__(self) -> "GuardedLimiter":
        self._live()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GuardedLimiter({self.path!r}{', closed' if self.closed else ''})"


class GuardedLimit(_Handle):
    """One limit of a guarded limiter, with its policy for while the file is unavailable.
    Decisions the policy made have ``Decision.unavailable`` set. The caller's own errors
    (ZeroCostError, InvalidKeyError, and once attached UnknownLimitError,
    CostExceedsCapacityError, WrongKindError) are raised whatever the policy."""

    _free_name = "shmlimit_guarded_limit_free"

    def __init__(self, handle: int, name: str, policy: int):
        super().__init__(handle)
        self.name = name
        self.policy = policy

    def _decide(self, fn: Callable[..., int], *args: Any) -> Decision:
        out = _Decision()
        _check(fn(self._live(), *args, ctypes.byref(out)))
        return _decision_of(out)

    def try_acquire(self, cost: int = 1) -> Decision:
        """``Limit.try_acquire`` once attached, else the policy (flagged unavailable)."""
        return self._decide(self._lib.shmlimit_guarded_acquire, _u64(cost, "cost"))

    def peek(self, cost: int = 1) -> Decision:
        """The decision ``try_acquire(cost)`` would make now, consuming nothing."""
        return self._decide(self._lib.shmlimit_guarded_peek, _u64(cost, "cost"))

    def try_acquire_key(self, key: Key, cost: int = 1) -> Decision:
        """``Limit.try_acquire_key`` once attached, else the policy. A bad key is refused
        (InvalidKeyError) even while the file is unavailable."""
        raw = _key(key)
        return self._decide(self._lib.shmlimit_guarded_acquire_key, raw, len(raw),
                            _u64(cost, "cost"))

    def refund(self, decision: Decision) -> None:
        """Give back what ``decision`` (a grant of this guarded limit) took; a decision the
        policy made took nothing, so its refund does nothing."""
        grant = _grant_of(decision)
        _check(self._lib.shmlimit_guarded_refund(self._live(), ctypes.byref(grant)))

    def __repr__(self) -> str:
        policy = {FAIL_OPEN: "FAIL_OPEN", FAIL_CLOSED: "FAIL_CLOSED"}.get(self.policy, self.policy)
        return f"GuardedLimit({self.name!r}, {policy}{', closed' if self.closed else ''})"
