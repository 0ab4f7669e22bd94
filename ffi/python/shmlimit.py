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

Thread-safety: handles may be shared by threads; each call releases the GIL while it runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
import math
import os
import threading
from typing import Dict, Iterator, Mapping, Optional, Union

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
]

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
_ALIGNMENTS = {"wall": 0, "monotonic": 1}


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
        ("reserved", ctypes.c_uint64 * 4),
    ]


class _Decision(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_bool),
        ("shadow_denied", ctypes.c_bool),
        ("remaining", ctypes.c_uint64),
        ("retry_after_ns", ctypes.c_uint64),
        ("grant", ctypes.c_uint64 * 2),
        ("reserved", ctypes.c_uint64 * 2),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_uint64),
        ("denied", ctypes.c_uint64),
        ("shadow_denied", ctypes.c_uint64),
        ("near_limit", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 4),
    ]


_P = ctypes.c_void_p
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


class _Spec:
    _kind = 0

    def _fill(self, d: _Def) -> None:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self), self._key()))

    def _key(self) -> tuple:
        raise NotImplementedError


class TokenBucket(_Spec):
    """A token bucket (GCRA): ``burst`` tokens, refilled at ``rate`` tokens per ``per`` seconds.

    At most ``floor(burst + rate * T / per)`` admissions in any interval of ``T`` seconds.
    ``burst`` defaults to ``rate`` (one period's worth).
    """

    _kind = _TOKEN_BUCKET

    def __init__(self, rate: int, per: Seconds = 1.0, burst: Optional[int] = None):
        self.rate = _count(rate, "rate")
        self.period_ns = _ns(per, "per")
        self.burst = _count(rate if burst is None else burst, "burst")

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
        return f"TokenBucket(rate={self.rate}, per={self.per!r}, burst={self.burst})"


class _Windowed(_Spec):
    def __init__(self, limit: int, window: Seconds, aligned: str = "wall"):
        self.limit = _count(limit, "limit")
        self.window_ns = _ns(window, "window")
        if aligned not in _ALIGNMENTS:
            raise InvalidParameterError(
                f"aligned={aligned!r}: 'wall' or 'monotonic'", InvalidParameterError.code
            )
        self.aligned = aligned

    @property
    def window(self) -> float:
        """The window in seconds."""
        return self.window_ns / 1e9

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns, d.alignment = self.limit, self.window_ns, _ALIGNMENTS[self.aligned]

    def _key(self) -> tuple:
        return (self.limit, self.window_ns, self.aligned)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(limit={self.limit}, window={self.window!r}, "
                f"aligned={self.aligned!r})")


class FixedWindow(_Windowed):
    """At most ``limit`` per window of ``window`` seconds (``aligned`` to 'wall' clock or
    'monotonic' time); up to ``2 * limit`` across one boundary."""

    _kind = _FIXED_WINDOW


class SlidingWindow(_Windowed):
    """The weighted sliding-window counter: about ``limit`` per ``window`` seconds."""

    _kind = _SLIDING_WINDOW


class SlidingLog(_Spec):
    """The exact sliding log: at most ``limit`` admissions in every ``window`` seconds."""

    _kind = _SLIDING_LOG

    def __init__(self, limit: int, window: Seconds):
        self.limit = _count(limit, "limit")
        self.window_ns = _ns(window, "window")

    @property
    def window(self) -> float:
        return self.window_ns / 1e9

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns = self.limit, self.window_ns

    def _key(self) -> tuple:
        return (self.limit, self.window_ns)

    def __repr__(self) -> str:
        return f"SlidingLog(limit={self.limit}, window={self.window!r})"


class Concurrency(_Spec):
    """At most ``permits`` held at once; a permit held longer than ``lease`` seconds (None: no
    lease) becomes reclaimable. (Permit acquisition from Python comes with the permit API.)"""

    _kind = _CONCURRENCY

    def __init__(self, permits: int, lease: Optional[Seconds] = None):
        self.permits = _count(permits, "permits")
        self.lease_ns = 0 if lease is None else _ns(lease, "lease")

    @property
    def lease(self) -> Optional[float]:
        return self.lease_ns / 1e9 if self.lease_ns else None

    def _fill(self, d: _Def) -> None:
        d.limit, d.period_ns = self.permits, self.lease_ns

    def _key(self) -> tuple:
        return (self.permits, self.lease_ns)

    def __repr__(self) -> str:
        return f"Concurrency(permits={self.permits}, lease={self.lease!r})"


def _spec_of(d: _Def) -> _Spec:
    aligned = "monotonic" if d.alignment == 1 else "wall"
    spec: _Spec
    if d.kind == _TOKEN_BUCKET:
        spec = TokenBucket.__new__(TokenBucket)
        spec.rate, spec.period_ns, spec.burst = d.rate, d.period_ns, d.limit
    elif d.kind in (_FIXED_WINDOW, _SLIDING_WINDOW):
        spec = (FixedWindow if d.kind == _FIXED_WINDOW else SlidingWindow).__new__(
            FixedWindow if d.kind == _FIXED_WINDOW else SlidingWindow
        )
        spec.limit, spec.window_ns, spec.aligned = d.limit, d.period_ns, aligned
    elif d.kind == _SLIDING_LOG:
        spec = SlidingLog.__new__(SlidingLog)
        spec.limit, spec.window_ns = d.limit, d.period_ns
    elif d.kind == _CONCURRENCY:
        spec = Concurrency.__new__(Concurrency)
        spec.permits, spec.lease_ns = d.limit, d.period_ns
    else:
        raise ShmlimitError(f"limit kind {d.kind} is not known to this module")
    return spec


def _options(mode: Optional[int], allow_other_owner: bool) -> _Options:
    options = _Options()
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
    """The outcome of one decision. True in a boolean context when allowed."""

    __slots__ = ("allowed", "remaining", "retry_after_ns", "shadow_denied")

    def __init__(self, allowed: bool, remaining: int, retry_after_ns: int,
                 shadow_denied: bool = False):
        self.allowed = allowed
        self.remaining = remaining
        self.retry_after_ns = retry_after_ns
        self.shadow_denied = shadow_denied

    @property
    def denied(self) -> bool:
        return not self.allowed

    @property
    def retry_after(self) -> float:
        """Seconds until the same request could be admitted (0.0 when allowed)."""
        return self.retry_after_ns / 1e9

    def __bool__(self) -> bool:
        return self.allowed

    def __repr__(self) -> str:
        return (f"Decision(allowed={self.allowed}, remaining={self.remaining}, "
                f"retry_after_ns={self.retry_after_ns})")


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
        return Decision(bool(out.allowed), out.remaining, out.retry_after_ns,
                        bool(out.shadow_denied))

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
    ) -> "Limiter":
        """Create the file with these limits, or attach to it if it exists with the same ones.

        ``mode`` sets the permission bits of a created file (default 0o600; 0o660 shares it with
        the group). Raises InvalidParameterError, DefinitionConflictError, or any error of open().
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
        options = _options(mode, allow_other_owner)
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
    ) -> "Limiter":
        """Attach to an existing file by path alone; its limits are read from the file.

        Raises IoError (for example errno ENOENT), SymlinkError, NotRegularFileError,
        PermissionDeniedError, ForeignFileError, VersionError, SizeError, CorruptFileError,
        NotInitializedError, ClockMismatchError.
        """
        lib = _lib()
        options = _options(mode, allow_other_owner)
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
