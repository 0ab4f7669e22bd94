"""shmlimit for Python: rate limits shared by every process on a host through one mapped file.

A thin ctypes wrapper (standard library only, no compile step) over the C ABI of libshmlimit.
Python workers (gunicorn/uwsgi workers, multiprocessing pools, cron jobs...) share one budget
with each other and with Rust and C processes using the same file::

    import shmlimit

    with shmlimit.Limiter.create_or_open("/run/myapp/limits.shm", {
        "api": shmlimit.TokenBucket(rate=100, per=1.0, burst=20),
        "search": shmlimit.SlidingLog(limit=100, window=60),
    }) as limiter:
        api = limiter.limit("api")          # resolve once
        decision = api.try_acquire()        # hot path
        if decision:
            ...                             # admitted
        else:
            wait = decision.retry_after     # seconds

The library is found through the ``SHMLIMIT_LIB`` environment variable (a path to
``libshmlimit.so``), else next to this file, else in a cargo build tree above it
(``target/release``, ``target/debug``), else by the dynamic loader's usual search.

Per-key limits, concurrency permits, composed checks, refunds and live retuning::

    limiter = shmlimit.Limiter.create_or_open(path, {
        "per_user": shmlimit.TokenBucket(rate=10, burst=5, keyed=shmlimit.Keyed(100_000)),
        "db": shmlimit.Concurrency(permits=8, lease=30),
        "downstream": shmlimit.TokenBucket(rate=300, burst=30),
    })
    per_user, db, down = (limiter.limit(n) for n in ("per_user", "db", "downstream"))
    if per_user.try_acquire_key("alice"):
        with db.permit(timeout=1.0):          # PermitUnavailableError after 1 s
            ...
    both = shmlimit.try_acquire_all((per_user, 1), (down, 1))   # not for keyed limits
    down.set_rate(200)                       # every process, at once

While the file is missing or invalid, a guarded limiter lets each limit's explicit policy
decide (there is no default), and says so in the decision::

    guarded = shmlimit.Limiter.open_guarded(path, reopen_every=1.0)   # never fails on the file
    search = guarded.limit("search", shmlimit.FAIL_OPEN)       # admit, unlimited
    payments = guarded.limit("payments", shmlimit.FAIL_CLOSED)  # deny, retry after reopening
    d = payments.try_acquire()
    if d.unavailable:
        ...                                  # the policy decided, not the limiter

Thread-safety: handles may be shared by threads; each call releases the GIL while it runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
import math
import os
import threading
from typing import Dict, Iterator, List, Mapping, Optional, Union

__all__ = [
    "Limiter", "Limit", "Decision", "Stats",
    "TokenBucket", "FixedWindow", "SlidingWindow", "SlidingLog",
    "ShmlimitError", "ClosedError", "NullPointerError", "BadUtf8Error", "InternalError",
    "BadLengthError", "MisalignedPointerError", "OutOfRangeError", "IoError", "SymlinkError",
    "NotRegularFileError", "PermissionDeniedError", "ForeignFileError", "VersionError",
    "SizeError", "CorruptFileError", "NotInitializedError", "ClockMismatchError",
    "DefinitionConflictError", "InvalidParameterError", "UnknownLimitError", "ZeroCostError",
    "CostExceedsCapacityError", "CorruptStateError", "ClockOutOfRangeError", "TableFullError",
    "InvalidKeyError", "WrongKindError", "Concurrency", "library_version",
    "Keyed", "FleetShare", "Permit", "PermitHolder", "PermitUnavailableError", "Composed",
    "try_acquire_all", "MAX_KEY_LEN", "MAX_CHECKS", "Reservation",
    "GuardedLimiter", "GuardedLimit", "FAIL_OPEN", "FAIL_CLOSED",
    "DAY", "WEEK", "MONTH",
]

#: Periods for ``TokenBucket(rate=..., per=...)``, in seconds. ``MONTH`` is the average Gregorian
#: month (365.2425 / 12 days = 2,629,746 s): a rate is an average, whatever the month's length.
DAY = 86_400.0
WEEK = 7 * DAY
MONTH = 2_629_746.0

Seconds = Union[int, float, datetime.timedelta]

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


class WrongKindError(ShmlimitError, TypeError):
    """The operation does not apply to this kind of limit."""

    code = 119


class PermitUnavailableError(ShmlimitError, TimeoutError):
    """No permit became free in time (raised by ``Limit.permit()``; not a C status code)."""


_ERRORS: Dict[int, type] = {
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

# ---------------------------------------------------------------------------------------------
# The C declarations (ffi/include/shmlimit.h).

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
        ("on_reboot", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("reserved", ctypes.c_uint64 * 3),
    ]


class _Decision(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_bool),
        ("shadow_denied", ctypes.c_bool),
        ("remaining", ctypes.c_uint64),
        ("retry_after_ns", ctypes.c_uint64),
        ("grant", ctypes.c_uint64 * 2),
        ("reserved", ctypes.c_uint64 * 2),
        ("reset_after_ns", ctypes.c_uint64),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_uint64),
        ("denied", ctypes.c_uint64),
        ("shadow_denied", ctypes.c_uint64),
        ("near_limit", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 4),
    ]


MAX_CHECKS = 8
MAX_KEY_LEN = 1024
_PERMIT_SHADOW = 1
_DECISION_UNAVAILABLE = 1
#: Policy of a guarded limit while its file is unavailable: admit every request, unlimited.
FAIL_OPEN = 1
#: Policy of a guarded limit while its file is unavailable: deny every request.
FAIL_CLOSED = 2
_DEF_SHADOW, _DEF_NEAR_LIMIT = 1, 2
_DEFAULT_NEAR_LIMIT = 6554
_FULL_POLICIES = {"deny": 0, "allow": 1, "error": 2}


class _Check(ctypes.Structure):
    _fields_ = [
        ("limit", ctypes.c_void_p),
        ("cost", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 2),
    ]


class _Composed(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_bool),
        ("denied_by", ctypes.c_int32),
        ("count", ctypes.c_uint32),
        ("retry_after_ns", ctypes.c_uint64),
        ("decisions", _Decision * MAX_CHECKS),
        ("reserved", ctypes.c_uint64 * 2),
    ]


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
    "shmlimit_acquire_all": (
        ctypes.c_int32, [ctypes.POINTER(_Check), _SIZE, ctypes.POINTER(_Composed)]
    ),
    "shmlimit_refund_all": (
        ctypes.c_int32, [ctypes.POINTER(_Check), _SIZE, ctypes.POINTER(_Composed)]
    ),
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


def _candidates() -> Iterator[str]:
    env = os.environ.get("SHMLIMIT_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libshmlimit.so")
    root = os.path.dirname(os.path.dirname(here))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    for profile in ("release", "debug"):
        yield os.path.join(target, profile, "libshmlimit.so")
    found = ctypes.util.find_library("shmlimit")
    if found:
        yield found
    yield "libshmlimit.so"


def _load() -> ctypes.CDLL:
    errors = []
    for candidate in _candidates():
        if os.sep in candidate and not os.path.exists(candidate):
            errors.append(f"{candidate}: no such file")
            continue
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as e:
            errors.append(f"{candidate}: {e}")
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise ImportError(
        "libshmlimit.so not found (set SHMLIMIT_LIB to its path): " + "; ".join(errors)
    )


_lib_lock = threading.Lock()
_lib_handle: Optional[ctypes.CDLL] = None


def _lib() -> ctypes.CDLL:
    global _lib_handle
    if _lib_handle is None:
        with _lib_lock:
            if _lib_handle is None:
                _lib_handle = _load()
    return _lib_handle


def _check(status: int) -> None:
    if status == 0:
        return
    lib = _lib()
    # The message is thread-local in the library and ctypes copies it at once.
    message = (lib.shmlimit_last_error() or b"").decode("utf-8", "replace")
    if not message:
        message = (lib.shmlimit_strerror(status) or b"").decode()
    cls = _ERRORS.get(status, ShmlimitError)
    error = cls(message, status)
    if cls is IoError:
        error.errno = lib.shmlimit_last_os_error() or None
        error.strerror = message
    raise error


def library_version() -> str:
    """The version of the loaded libshmlimit."""
    return _lib().shmlimit_version().decode()


# ---------------------------------------------------------------------------------------------
# Limit definitions.


def _ns(value: Seconds, what: str) -> int:
    if isinstance(value, datetime.timedelta):
        ns = (value.days * 86_400 + value.seconds) * 10**9 + value.microseconds * 1000
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what}: seconds as int, float or timedelta, not {type(value).__name__}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameterError(f"{what}: {value} is not finite", InvalidParameterError.code)
    else:
        ns = round(value * 1_000_000_000)
    if ns <= 0 or ns >= 2**64:
        raise InvalidParameterError(f"{what}: {value} s is out of range", InvalidParameterError.code)
    return ns


def _count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or value >= 2**64:
        raise InvalidParameterError(f"{what}: {value} is out of range", InvalidParameterError.code)
    return value


def _timeout_ns(timeout: Optional[Seconds]) -> int:
    """A timeout for the waiting calls: None waits as long as it takes; 0 does not wait."""
    if timeout is None:
        return 2**64 - 1
    if not isinstance(timeout, datetime.timedelta) and not isinstance(timeout, bool) and \
            isinstance(timeout, (int, float)) and timeout == 0:
        return 0
    return _ns(timeout, "timeout")


class Keyed:
    """Makes a limit keyed: one independent state per key, in a table of ``capacity`` slots
    (rounded up to a power of two). ``on_full``: 'deny' (the default), 'allow' (fail open) or
    'error' (raise TableFullError) when no slot is free for a new key."""

    def __init__(self, capacity: int, on_full: str = "deny"):
        self.capacity = _count(capacity, "capacity")
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
        rate = _count(rate, "rate")
        if rate == 0:
            raise InvalidParameterError("fleet rate must be at least 1", InvalidParameterError.code)
        self.emission_ns = -(-_ns(per, "per") // rate)
        self.weight = _count(weight, "weight")

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


class _Spec:
    """A limit definition: the algorithm's parameters (in the subclass) and the options every
    kind takes as keyword arguments: ``shadow`` (dry run: never deny, count what would have
    been denied), ``near_limit`` (the fraction of the capacity under which an admission counts
    as near the limit, default about 0.1), ``keyed`` (a Keyed), ``split`` (sub-buckets of a hot
    token bucket) and ``fleet`` (a FleetShare)."""

    _kind = 0
    shadow = False
    keyed: Optional[Keyed] = None
    split = 1
    fleet: Optional[FleetShare] = None
    _near = _DEFAULT_NEAR_LIMIT

    def _set_options(self, shadow: bool = False, near_limit: Optional[float] = None,
                     keyed: Optional[Keyed] = None, split: int = 1,
                     fleet: Optional[FleetShare] = None) -> None:
        self.shadow = bool(shadow)
        if near_limit is not None:
            if isinstance(near_limit, bool) or not isinstance(near_limit, (int, float)) or \
                    not 0 <= near_limit <= 1:
                raise InvalidParameterError(
                    f"near_limit={near_limit!r}: a fraction from 0 to 1", InvalidParameterError.code
                )
            self._near = min(round(near_limit * 65536), 65535)
        if keyed is not None and not isinstance(keyed, Keyed):
            raise TypeError(f"keyed must be a Keyed, not {type(keyed).__name__}")
        self.keyed = keyed
        split = _count(split, "split")
        if split >= 2**16:
            raise InvalidParameterError(f"split {split} is out of range", InvalidParameterError.code)
        self.split = max(split, 1)
        if fleet is not None and not isinstance(fleet, FleetShare):
            raise TypeError(f"fleet must be a FleetShare, not {type(fleet).__name__}")
        self.fleet = fleet

    @property
    def near_limit(self) -> float:
        """The near-limit fraction of the capacity."""
        return self._near / 65536

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

    def _options_key(self) -> tuple:
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
        return type(self) is type(other) and self._key() == other._key() and \
            self._options_key() == other._options_key()  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self), self._key(), self._options_key()))

    def _key(self) -> tuple:
        raise NotImplementedError


class TokenBucket(_Spec):
    """A token bucket (GCRA): ``burst`` tokens, refilled at ``rate`` tokens per ``per`` seconds.

    At most ``floor(burst + rate * T / per)`` admissions in any interval of ``T`` seconds.
    ``burst`` defaults to ``rate`` (one period's worth).
    """

    _kind = _TOKEN_BUCKET

    def __init__(self, rate: int, per: Seconds = 1.0, burst: Optional[int] = None, **options):
        self.rate = _count(rate, "rate")
        self.period_ns = _ns(per, "per")
        self.burst = _count(rate if burst is None else burst, "burst")
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

    def _key(self) -> tuple:
        return (self.burst, self.emission_ns)

    def __repr__(self) -> str:
        return (f"TokenBucket(rate={self.rate}, per={self.per!r}, burst={self.burst}"
                f"{self._options_repr()})")


class _Windowed(_Spec):
    def __init__(self, limit: int, window: Seconds, aligned: str = "wall",
                 utc_offset: int = 0, **options):
        self.limit = _count(limit, "limit")
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

    def _key(self) -> tuple:
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


class SlidingLog(_Spec):
    """The exact sliding log: at most ``limit`` admissions in every ``window`` seconds."""

    _kind = _SLIDING_LOG

    def __init__(self, limit: int, window: Seconds, **options):
        self.limit = _count(limit, "limit")
        self.window_ns = _ns(window, "window")
        self._set_options(**options)

    @property
    def window(self) -> float:
        return self.window_ns / 1e9

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns = self.limit, self.window_ns

    def _key(self) -> tuple:
        return (self.limit, self.window_ns)

    def __repr__(self) -> str:
        return f"SlidingLog(limit={self.limit}, window={self.window!r}{self._options_repr()})"


class Concurrency(_Spec):
    """At most ``permits`` held at once across every process; a permit held longer than
    ``lease`` seconds (None: no lease) becomes reclaimable, and so do the permits of a process
    that died. Take permits with ``Limit.permit()`` (a context manager) or
    ``Limit.try_acquire_permit()``. Keyed (``keyed=Keyed(capacity)``, at most 64 permits): at
    most ``permits`` per key, taken with ``Limit.key_permit(key)`` or
    ``Limit.try_acquire_key_permit(key)``."""

    _kind = _CONCURRENCY

    def __init__(self, permits: int, lease: Optional[Seconds] = None, **options):
        self.permits = _count(permits, "permits")
        self.lease_ns = 0 if lease is None else _ns(lease, "lease")
        self._set_options(**options)

    @property
    def lease(self) -> Optional[float]:
        return self.lease_ns / 1e9 if self.lease_ns else None

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns = self.permits, self.lease_ns

    def _key(self) -> tuple:
        return (self.permits, self.lease_ns)

    def __repr__(self) -> str:
        return f"Concurrency(permits={self.permits}, lease={self.lease!r}{self._options_repr()})"


def _spec_of(d: _Def) -> _Spec:
    aligned = {1: "monotonic", 2: "calendar"}.get(d.alignment, "wall")
    spec: _Spec
    if d.kind == _TOKEN_BUCKET:
        spec = TokenBucket.__new__(TokenBucket)
        spec.rate, spec.period_ns, spec.burst = d.rate, d.period_ns, d.limit
    elif d.kind in (_FIXED_WINDOW, _SLIDING_WINDOW):
        spec = (FixedWindow if d.kind == _FIXED_WINDOW else SlidingWindow).__new__(
            FixedWindow if d.kind == _FIXED_WINDOW else SlidingWindow
        )
        spec.limit, spec.window_ns, spec.aligned = d.limit, d.period_ns, aligned
        spec.utc_offset = d.rate - 2**64 if d.rate >= 2**63 else d.rate
    elif d.kind == _SLIDING_LOG:
        spec = SlidingLog.__new__(SlidingLog)
        spec.limit, spec.window_ns = d.limit, d.period_ns
    elif d.kind == _CONCURRENCY:
        spec = Concurrency.__new__(Concurrency)
        spec.permits, spec.lease_ns = d.limit, d.period_ns
    else:
        raise ShmlimitError(f"limit kind {d.kind} is not known to this module")
    spec._read_options(d)
    return spec


_ON_REBOOT = {None: 0, "translate": 1, "reset": 2}


def _options(mode: Optional[int], allow_other_owner: bool,
             on_reboot: Optional[str] = None) -> _Options:
    options = _Options()
    if on_reboot not in _ON_REBOOT:
        raise ValueError(f"on_reboot must be 'translate', 'reset' or None, not {on_reboot!r}")
    options.on_reboot = _ON_REBOOT[on_reboot]
    if mode is not None:
        # Out-of-range bits are refused by the library (InvalidParameterError).
        options.mode = min(_count(mode, "mode"), 2**32 - 1)
    options.allow_other_owner = 1 if allow_other_owner else 0
    return options


def _path(path: Union[str, bytes, os.PathLike]) -> bytes:
    return os.fsencode(path)


# ---------------------------------------------------------------------------------------------
# Decisions and handles.


class Decision:
    """The outcome of one decision. True in a boolean context when allowed.

    A granted decision carries its grant record: ``Limit.refund(decision)`` gives it back.
    ``unavailable`` is true for a decision of a guarded limit that its policy made because the
    file could not be used (it took nothing: there is nothing to refund).
    """

    __slots__ = ("allowed", "remaining", "retry_after_ns", "shadow_denied", "unavailable",
                 "_grant", "reset_after_ns")

    def __init__(self, allowed: bool, remaining: int, retry_after_ns: int,
                 shadow_denied: bool = False, _grant: tuple = (0, 0, 0), unavailable: bool = False,
                 reset_after_ns: int = 0):
        self.reset_after_ns = reset_after_ns
        self.allowed = allowed
        self.remaining = remaining
        self.retry_after_ns = retry_after_ns
        self.shadow_denied = shadow_denied
        self.unavailable = unavailable
        self._grant = _grant

    @classmethod
    def _of(cls, out: "_Decision") -> "Decision":
        return cls(bool(out.allowed), out.remaining, out.retry_after_ns, bool(out.shadow_denied),
                   (out.grant[0], out.grant[1], out.reserved[1]),
                   bool(out.reserved[0] & _DECISION_UNAVAILABLE), out.reset_after_ns)

    def _struct(self) -> "_Decision":
        out = _Decision()
        out.allowed, out.shadow_denied = self.allowed, self.shadow_denied
        out.remaining, out.retry_after_ns = self.remaining, self.retry_after_ns
        # The grant record: two words and the limit that made it (reserved[1]).
        out.grant[0], out.grant[1], out.reserved[1] = self._grant
        out.reserved[0] = _DECISION_UNAVAILABLE if self.unavailable else 0
        out.reset_after_ns = self.reset_after_ns
        return out

    @property
    def cost(self) -> int:
        """The units this decision took (0 for denials, shadow denials and peeks)."""
        return self._grant[0] if self.allowed else 0

    @property
    def denied(self) -> bool:
        return not self.allowed

    @property
    def retry_after(self) -> float:
        """Seconds until the same request could be admitted (0.0 when allowed)."""
        return self.retry_after_ns / 1e9

    @property
    def reset_after(self) -> float:
        """Seconds until the limit is back to its whole budget if nothing else is admitted."""
        return self.reset_after_ns / 1e9

    def __bool__(self) -> bool:
        return self.allowed

    def __repr__(self) -> str:
        return (f"Decision(allowed={self.allowed}, remaining={self.remaining}, "
                f"retry_after_ns={self.retry_after_ns}"
                f"{', unavailable' if self.unavailable else ''})")


class Stats:
    """Decision counters of one limit, summed over every process attached to the file."""

    __slots__ = ("allowed", "denied", "shadow_denied", "near_limit")

    def __init__(self, allowed: int, denied: int, shadow_denied: int = 0, near_limit: int = 0):
        self.allowed = allowed
        self.denied = denied
        self.shadow_denied = shadow_denied
        self.near_limit = near_limit

    def _tuple(self) -> tuple:
        return (self.allowed, self.denied, self.shadow_denied, self.near_limit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stats) and self._tuple() == other._tuple()

    def __repr__(self) -> str:
        return (f"Stats(allowed={self.allowed}, denied={self.denied}, "
                f"shadow_denied={self.shadow_denied}, near_limit={self.near_limit})")


class _Handle:
    _free_name = ""

    def __init__(self, handle: int):
        self._handle: Optional[int] = handle
        self._lib = _lib()

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


class Limit(_Handle):
    """One limit of a limiter file, resolved once by name. Outlives its Limiter."""

    _free_name = "shmlimit_limit_free"

    def __init__(self, handle: int, name: str):
        super().__init__(handle)
        self.name = name

    def _decide(self, fn, *args) -> Decision:
        out = _Decision()
        _check(fn(self._live(), *args, ctypes.byref(out)))
        return Decision._of(out)

    def try_acquire(self, cost: int = 1) -> Decision:
        """Admit ``cost`` units now, or deny and consume nothing.

        Raises ZeroCostError, CostExceedsCapacityError (the cost can never be granted),
        CorruptStateError, ClockOutOfRangeError.
        """
        return self._decide(self._lib.shmlimit_acquire, cost)

    def peek(self, cost: int = 1) -> Decision:
        """The decision ``try_acquire(cost)`` would make now, consuming nothing."""
        return self._decide(self._lib.shmlimit_peek, cost)

    def try_acquire_at(self, cost: int, now_ns: int) -> Decision:
        """``try_acquire`` dated at ``now_ns`` on CLOCK_MONOTONIC (``time.monotonic_ns()``)."""
        return self._decide(self._lib.shmlimit_acquire_at, cost, now_ns)

    def acquire(self, cost: int = 1, timeout: Optional[Seconds] = None) -> Decision:
        """Admit ``cost`` units, waiting up to ``timeout`` seconds for them (None: as long as it
        takes). A token bucket books them at once and sleeps the delay, or refuses at once,
        consuming nothing, when the delay would exceed the timeout; windows and the sliding log
        sleep the exact retry-after and try again. Returns an allowed Decision, or a denied one
        that consumed nothing. Raises WrongKindError on concurrency and keyed limits."""
        return self._decide(self._lib.shmlimit_acquire_timeout, cost, _timeout_ns(timeout))

    def refund(self, decision: Decision, units: Optional[int] = None) -> None:
        """Give back what ``decision`` (a grant of this limit) took, or ``units`` of it, for work
        that was admitted but never done. Refunding a denial or a peek does nothing. Raises
        WrongKindError on keyed (use refund_key) and concurrency limits."""
        grant = decision._struct()
        if units is None:
            _check(self._lib.shmlimit_refund(self._live(), ctypes.byref(grant)))
        else:
            _check(self._lib.shmlimit_refund_units(self._live(), ctypes.byref(grant), units))

    def set_rate(self, rate: int, per: Seconds = 1.0) -> None:
        """Change the refill rate to ``rate`` per ``per`` seconds, live, for every process (a
        window gets the limit per window this rate means, rounded down). Raises
        InvalidParameterError, WrongKindError (sliding log, concurrency)."""
        _check(self._lib.shmlimit_limit_set_rate(self._live(), rate, _ns(per, "per")))

    def set_token_bucket(self, burst: int, rate: int, per: Seconds = 1.0) -> None:
        """Change a token bucket's burst and rate together, live."""
        _check(self._lib.shmlimit_limit_set_token_bucket(
            self._live(), burst, rate, _ns(per, "per")))

    def set_limit(self, limit: int) -> None:
        """Change a fixed or sliding window's limit per window, live."""
        _check(self._lib.shmlimit_limit_set_limit(self._live(), limit))

    def reset(self) -> None:
        """Return the limit to fresh (full bucket, empty windows and table, no permits held),
        keeping its live parameters: grants the whole capacity at once."""
        _check(self._lib.shmlimit_limit_reset(self._live()))

    @property
    def live_definition(self) -> "_Spec":
        """The definition with its live parameters (after any retune by any process)."""
        out = _Def()
        _check(self._lib.shmlimit_limit_live_definition(self._live(), ctypes.byref(out)))
        return _spec_of(out)

    def reserve(self, cost: int = 1, max_delay: Seconds = 0) -> "Reservation":
        """Book the next ``cost`` tokens of a token bucket now, to be used after a delay of at
        most ``max_delay`` seconds; otherwise refuse at once and take nothing. Bookings are
        served first come, first served across processes. Raises WrongKindError on other
        algorithms (use ``acquire(timeout=...)``)."""
        booking, out = _Booking(), _P()
        _check(self._lib.shmlimit_reserve(
            self._live(), cost, _timeout_ns(max_delay), ctypes.byref(booking), ctypes.byref(out)))
        return Reservation(booking, out.value)

    # Keyed limits.

    def try_acquire_key(self, key: Union[str, bytes], cost: int = 1) -> Decision:
        """Admit ``cost`` units for ``key`` (str or bytes, 1 to MAX_KEY_LEN bytes) on a keyed
        limit, or deny and consume nothing. Raises InvalidKeyError, TableFullError (when the
        table is full and its policy is 'error'), WrongKindError (not keyed), ..."""
        raw = _key(key)
        return self._decide(self._lib.shmlimit_acquire_key, raw, len(raw), cost)

    def peek_key(self, key: Union[str, bytes], cost: int = 1) -> Decision:
        """The decision ``try_acquire_key`` would make now, consuming and inserting nothing."""
        raw = _key(key)
        return self._decide(self._lib.shmlimit_peek_key, raw, len(raw), cost)

    def try_acquire_key_at(self, key: Union[str, bytes], cost: int, now_ns: int) -> Decision:
        """``try_acquire_key`` dated at ``now_ns`` on CLOCK_MONOTONIC."""
        raw = _key(key)
        return self._decide(self._lib.shmlimit_acquire_key_at, raw, len(raw), cost, now_ns)

    def refund_key(self, key: Union[str, bytes], decision: Decision) -> None:
        """Give back what ``decision`` (a grant of ``try_acquire_key`` for ``key``) took."""
        raw = _key(key)
        grant = decision._struct()
        _check(self._lib.shmlimit_refund_key(self._live(), raw, len(raw), ctypes.byref(grant)))

    def key_occupancy(self) -> tuple:
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

    def try_acquire_key_permit(self, key: Union[str, bytes]) -> Optional["Permit"]:
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
        self, key: Union[str, bytes], timeout: Optional[Seconds] = None
    ) -> Optional["Permit"]:
        """``try_acquire_key_permit``, waiting up to ``timeout`` seconds (None: as long as it
        takes) for one of the key's permits to be released; None when the timeout passed."""
        raw, out = _key(key), _U64()
        _check(self._lib.shmlimit_permit_acquire_key_timeout(
            self._live(), raw, len(raw), _timeout_ns(timeout), ctypes.byref(out)))
        return Permit(self, out.value) if out.value else None

    def key_permit(self, key: Union[str, bytes], timeout: Optional[Seconds] = 0) -> "Permit":
        """A permit of ``key`` for a ``with`` block, released when the block ends; waits as
        ``permit()`` does and raises PermitUnavailableError if none of the key's became free."""
        return self._granted(
            self.acquire_key_permit(key, timeout), "every permit of the key is held")

    def key_permits_held(self, key: Union[str, bytes]) -> int:
        """How many of ``key``'s permits are held now, across every process."""
        raw, out = _key(key), ctypes.c_uint32()
        _check(self._lib.shmlimit_permit_key_held(self._live(), raw, len(raw), ctypes.byref(out)))
        return out.value

    def key_tag(self, key: Union[str, bytes]) -> int:
        """The tag this file's key tables know ``key`` by (``PermitHolder.key_tag``)."""
        raw, out = _key(key), _U64()
        _check(self._lib.shmlimit_key_tag(self._live(), raw, len(raw), ctypes.byref(out)))
        return out.value

    def release_permit(self, permit_id: int) -> bool:
        """Release a permit by id (``Permit.id``); False if this process did not hold it."""
        out = ctypes.c_bool()
        _check(self._lib.shmlimit_permit_release(self._live(), permit_id, ctypes.byref(out)))
        return out.value

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
        return Stats(out.allowed, out.denied, out.shadow_denied, out.near_limit)

    @property
    def definition(self) -> _Spec:
        out = _Def()
        _check(self._lib.shmlimit_limit_definition(self._live(), ctypes.byref(out)))
        return _spec_of(out)

    def __repr__(self) -> str:
        return f"Limit({self.name!r}{', closed' if self.closed else ''})"


def _key(key: Union[str, bytes, bytearray, memoryview]) -> bytes:
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

    def __exit__(self, *exc) -> None:
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
        super().__init__(handle)  # type: ignore[arg-type]
        self.granted = bool(booking.granted)
        self.cost = booking.cost
        self.delay_ns = booking.delay_ns
        self.ready_at_ns = booking.ready_at_ns

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
        return Decision._of(out)

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

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
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


class Composed:
    """The outcome of ``try_acquire_all``: every limit admitted (and the costs were taken), or
    none did and nothing was taken anywhere. True in a boolean context when allowed."""

    def __init__(self, checks, out: "_Composed", limits: List[Limit]):
        self._checks = checks
        self._out = out
        self._limits = limits  # keeps the handles alive as long as the outcome
        self.allowed = bool(out.allowed)
        self.denied_by: Optional[int] = None if out.denied_by < 0 else out.denied_by
        self.retry_after_ns = out.retry_after_ns
        self.decisions: List[Optional[Decision]] = [
            None if not (d.allowed or d.retry_after_ns) else Decision._of(d)
            for d in out.decisions[:out.count]
        ]

    @property
    def denied(self) -> bool:
        return not self.allowed

    @property
    def retry_after(self) -> float:
        """Seconds until the whole request could pass (the largest of the denying limits)."""
        return self.retry_after_ns / 1e9

    def refund(self) -> None:
        """Give back every grant of an allowed composed request whose work was never done
        (nothing for a denied one)."""
        for limit in self._limits:
            limit._live()
        _check(_lib().shmlimit_refund_all(self._checks, self._out.count, ctypes.byref(self._out)))

    def __bool__(self) -> bool:
        return self.allowed

    def __repr__(self) -> str:
        return (f"Composed(allowed={self.allowed}, denied_by={self.denied_by}, "
                f"retry_after_ns={self.retry_after_ns})")


def try_acquire_all(*checks: Union[Limit, tuple]) -> Composed:
    """Admit one request on every limit, or on none: ``try_acquire_all((user, 1), (down, 2))``
    (a bare Limit means cost 1). The limits are acquired in order; when one denies, the grants
    already taken are given back and the rest peeked, so a denied request consumes nothing and
    ``retry_after`` is the largest of all the limits that would deny. At most MAX_CHECKS limits.
    Raises as ``try_acquire`` does for any of them (after giving back what it had taken)."""
    pairs = [(c, 1) if isinstance(c, Limit) else tuple(c) for c in checks]
    if len(pairs) > MAX_CHECKS:
        raise BadLengthError(f"at most {MAX_CHECKS} limits in one composed check",
                             BadLengthError.code)
    array = (_Check * max(len(pairs), 1))()
    limits = []
    for slot, (limit, cost) in zip(array, pairs):
        if not isinstance(limit, Limit):
            raise TypeError(f"a check is a Limit or (Limit, cost), not {type(limit).__name__}")
        slot.limit, slot.cost = limit._live(), _count(cost, "cost")
        limits.append(limit)
    out = _Composed()
    _check(_lib().shmlimit_acquire_all(array, len(pairs), ctypes.byref(out)))
    return Composed(array, out, limits)


class Limiter(_Handle):
    """One attached limiter file; a context manager that closes it on exit."""

    _free_name = "shmlimit_limiter_free"

    def __init__(self, handle: int, path: Union[str, bytes, os.PathLike]):
        super().__init__(handle)
        self.path = path

    @classmethod
    def create_or_open(
        cls,
        path: Union[str, bytes, os.PathLike],
        limits: Mapping[str, _Spec],
        *,
        mode: Optional[int] = None,
        allow_other_owner: bool = False,
        on_reboot: Optional[str] = None,
    ) -> "Limiter":
        """Create the file with these limits, or attach to it if it exists with the same ones.

        ``mode`` sets the permission bits of a created file (default 0o600; 0o660 shares it with
        the group). ``on_reboot`` is what a created file does at a reboot: ``"translate"`` (the
        default: quotas used before the reboot stay used) or ``"reset"``; given for an existing
        file, it must be the file's choice. Raises InvalidParameterError,
        DefinitionConflictError, or any error of open().
        """
        lib = _lib()
        names = [name.encode("utf-8") if isinstance(name, str) else name for name in limits]
        defs = (_Def * max(len(names), 1))()
        for d, name, spec in zip(defs, names, limits.values()):
            if not isinstance(spec, _Spec):
                raise TypeError(f"limit {name!r}: expected TokenBucket, FixedWindow, "
                                f"SlidingWindow, SlidingLog or Concurrency, "
                                f"not {type(spec).__name__}")
            d.name, d.kind = name, spec._kind
            spec._fill(d)
            spec._fill_options(d)
        options = _options(mode, allow_other_owner, on_reboot)
        out = _P()
        _check(lib.shmlimit_limiter_create_or_open(
            _path(path), defs, len(names), ctypes.byref(options), ctypes.byref(out)))
        return cls(out.value, path)

    @classmethod
    def open(
        cls,
        path: Union[str, bytes, os.PathLike],
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
        lib = _lib()
        options = _options(mode, allow_other_owner, on_reboot)
        out = _P()
        _check(lib.shmlimit_limiter_open(_path(path), ctypes.byref(options), ctypes.byref(out)))
        return cls(out.value, path)

    def limit(self, name: str) -> Limit:
        """Resolve a limit by name, once. Raises UnknownLimitError."""
        out = _P()
        raw = name.encode("utf-8") if isinstance(name, str) else name
        _check(self._lib.shmlimit_limiter_limit(self._live(), raw, ctypes.byref(out)))
        return Limit(out.value, raw.decode("utf-8", "replace"))

    def definitions(self) -> Dict[str, _Spec]:
        """The limits stored in the file, in definition order."""
        handle = self._live()
        count = ctypes.c_size_t()
        _check(self._lib.shmlimit_limiter_limit_count(handle, ctypes.byref(count)))
        result: Dict[str, _Spec] = {}
        for i in range(count.value):
            d = _Def()
            _check(self._lib.shmlimit_limiter_definition(handle, i, ctypes.byref(d)))
            result[d.name.decode("utf-8")] = _spec_of(d)
        return result

    def __enter__(self) -> "Limiter":
        self._live()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Limiter({self.path!r}{', closed' if self.closed else ''})"

    @staticmethod
    def open_guarded(path: Union[str, bytes, os.PathLike],
                     reopen_every: Seconds = 1.0) -> "GuardedLimiter":
        """A guarded limiter on the file at ``path``: attached now if the file can be opened
        (as by ``open()`` with the default options), else retried at most once per
        ``reopen_every`` seconds (0: at every decision). Never fails because of the file."""
        zero = reopen_every == 0 or reopen_every == datetime.timedelta(0)
        reopen_ns = 0 if zero and not isinstance(reopen_every, bool) else _ns(
            reopen_every, "reopen_every")
        lib = _lib()
        out = _P()
        _check(lib.shmlimit_guarded_limiter_open(_path(path), reopen_ns, ctypes.byref(out)))
        return GuardedLimiter(out.value, path)


class GuardedLimiter(_Handle):
    """A limiter file that may not be usable yet (or any more); see ``Limiter.open_guarded``.
    A context manager that closes it on exit; its guarded limits outlive it."""

    _free_name = "shmlimit_guarded_limiter_free"

    def __init__(self, handle: int, path: Union[str, bytes, os.PathLike]):
        super().__init__(handle)
        self.path = path

    def limit(self, name: str, unavailable: int) -> "GuardedLimit":
        """A guarded handle to the limit ``name``, deciding by ``unavailable`` (FAIL_OPEN or
        FAIL_CLOSED: required, there is no default) while the file cannot be used. The name is
        checked once the file is attached (then UnknownLimitError from every decision). Raises
        InvalidParameterError for any other policy value."""
        out = _P()
        raw = name.encode("utf-8") if isinstance(name, str) else name
        _check(self._lib.shmlimit_guarded_limiter_limit(
            self._live(), raw, unavailable, ctypes.byref(out)))
        return GuardedLimit(out.value, raw.decode("utf-8", "replace"), unavailable)

    @property
    def attached(self) -> bool:
        """Whether the file is attached (attempting to open it if the interval has passed)."""
        out = ctypes.c_bool()
        _check(self._lib.shmlimit_guarded_limiter_attached(self._live(), ctypes.byref(out)))
        return bool(out.value)

    def __enter__(self) -> "GuardedLimiter":
        self._live()
        return self

    def __exit__(self, *exc) -> None:
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

    def _decide(self, fn, *args) -> Decision:
        out = _Decision()
        _check(fn(self._live(), *args, ctypes.byref(out)))
        return Decision._of(out)

    def try_acquire(self, cost: int = 1) -> Decision:
        """``Limit.try_acquire`` once attached, else the policy (flagged unavailable)."""
        return self._decide(self._lib.shmlimit_guarded_acquire, cost)

    def peek(self, cost: int = 1) -> Decision:
        """The decision ``try_acquire(cost)`` would make now, consuming nothing."""
        return self._decide(self._lib.shmlimit_guarded_peek, cost)

    def try_acquire_key(self, key: Union[str, bytes], cost: int = 1) -> Decision:
        """``Limit.try_acquire_key`` once attached, else the policy. A bad key is refused
        (InvalidKeyError) even while the file is unavailable."""
        raw = _key(key)
        return self._decide(self._lib.shmlimit_guarded_acquire_key, raw, len(raw), cost)

    def refund(self, decision: Decision) -> None:
        """Give back what ``decision`` (a grant of this guarded limit) took; a decision the
        policy made took nothing, so its refund does nothing."""
        grant = decision._struct()
        _check(self._lib.shmlimit_guarded_refund(self._live(), ctypes.byref(grant)))

    def __repr__(self) -> str:
        policy = {FAIL_OPEN: "FAIL_OPEN", FAIL_CLOSED: "FAIL_CLOSED"}.get(self.policy, self.policy)
        return f"GuardedLimit({self.name!r}, {policy}{', closed' if self.closed else ''})"
