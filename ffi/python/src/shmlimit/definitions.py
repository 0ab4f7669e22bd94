"""Limit definitions (TokenBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency,
Counters, Keyed, FleetShare) and the checks of every argument before it reaches the library.

A definition crosses to the compiled module as the fields of C's ``shmlimit_def`` (``_Def``):
the classes here write them (``Spec._fill``) and read them back (``_spec_of``); the library
checks them as it checks a C caller's.
"""

from __future__ import annotations

import datetime
import math
import os
from typing import Any, Optional, Tuple, Union

from .errors import InvalidParameterError, ParameterOverflowError, ShmlimitError

_TOKEN_BUCKET, _FIXED_WINDOW, _SLIDING_WINDOW, _SLIDING_LOG, _CONCURRENCY = 1, 2, 3, 4, 5
_ADAPTIVE_CONCURRENCY = 8
_COUNTERS = 6
_ALIGNMENTS = {"wall": 0, "monotonic": 1, "calendar": 2}
MAX_KEYS = 1 << 26
_DEF_SHADOW, _DEF_NEAR_LIMIT = 1, 2
_DEFAULT_NEAR_LIMIT = 6554
_FULL_POLICIES = {"deny": 0, "allow": 1, "error": 2}
#: Policy of a guarded limit while its file is unavailable: admit every request, unlimited.
FAIL_OPEN = 1
#: Policy of a guarded limit while its file is unavailable: deny every request.
FAIL_CLOSED = 2


class _Def:
    """The fields of one definition, as ``shmlimit_def`` has them (zero: unset)."""

    __slots__ = ("name", "kind", "alignment", "limit", "period_ns", "rate", "key_capacity",
                 "on_full", "flags", "near_limit", "split", "fleet_weight", "fleet_emission_ns",
                 "adaptive_tuning")

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.kind = self.alignment = self.on_full = self.flags = 0
        self.limit = self.period_ns = self.rate = self.key_capacity = 0
        self.near_limit = self.split = self.fleet_weight = self.fleet_emission_ns = 0
        #: An adaptive limit's (initial, window ns, smoothing, tolerance, headroom, backoff).
        self.adaptive_tuning: Optional[Tuple[int, int, float, float, float, float]] = None

    @classmethod
    def _of(cls, fields: Tuple[str, Tuple[int, int, int, int, int],
                                Tuple[int, int, int, int, int, int, int],
                                Optional[Tuple[int, int, float, float, float, float]]]) -> "_Def":
        """A definition the compiled module read from a file."""
        name, (kind, alignment, limit, period_ns, rate), options, tuning = fields
        d = cls(name)
        d.adaptive_tuning = tuning
        d.kind, d.alignment, d.limit, d.period_ns, d.rate = kind, alignment, limit, period_ns, rate
        (d.key_capacity, d.on_full, d.flags, d.near_limit, d.split, d.fleet_weight,
         d.fleet_emission_ns) = options
        return d


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


def _name(name: object, what: str = "a limit name") -> str:
    """A limit name: a str without NUL (the library checks the rest: 1 to 63 of
    ``[A-Za-z0-9_-.:/]``)."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__} ({name!r})")
    if "\0" in name:
        raise InvalidParameterError(f"{what} {name!r} contains NUL", InvalidParameterError.code)
    return name


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


class AdaptiveConcurrency(Spec):
    """At most ``L`` permits held at once across every process, where ``L`` moves within
    ``[min, max]`` with the latency and outcome every release reports, pooled from every
    process (Gradient2 latency gradient, AIMD on errors and timeouts; see docs/adaptive.md).
    Take permits with ``Limit.adaptive()`` (a context manager that measures the latency
    itself) or ``Limit.acquire_adaptive()``.

    The tuning (the library checks it when the file is created or opened, raising
    InvalidParameterError naming the field; a file that exists must hold the same): ``initial``
    limit (default ``min``), update ``window`` in seconds, whole milliseconds (default 0.02),
    ``smoothing`` in [0.0001, 0.9999] (0.2), gradient ``tolerance`` in [1, 15] (1.0),
    ``headroom`` 0 or in [0, 0.9999] (0.1), ``backoff`` in [0.0001, 0.9999] (0.9). Fractions
    are stored in 1/65536 (tolerance 1/4096) and read back as the shortest decimal that stores
    the same."""

    _kind = _ADAPTIVE_CONCURRENCY

    def __init__(self, min: int, max: int, lease: Optional[Seconds] = None, *,
                 initial: Optional[int] = None, window: Seconds = 0.02,
                 smoothing: float = 0.2, tolerance: float = 1.0, headroom: float = 0.1,
                 backoff: float = 0.9, **options: Any):
        self.min = _u64(min, "min", low=1)
        self.max = _u64(max, "max", low=1)
        self.lease_ns = 0 if lease is None else _ns(lease, "lease")
        self.initial = None if initial is None else _u64(initial, "initial", low=1)
        self.window_ns = _ns(window, "window")
        self.smoothing = _real(smoothing, "smoothing")
        self.tolerance = _real(tolerance, "tolerance")
        self.headroom = _real(headroom, "headroom")
        self.backoff = _real(backoff, "backoff")
        self._set_options(**options)

    @property
    def lease(self) -> Optional[float]:
        return self.lease_ns / 1e9 if self.lease_ns else None

    @property
    def window(self) -> float:
        return self.window_ns / 1e9

    def _fill(self, d: _Def) -> None:
        d.limit, d.rate, d.period_ns = self.max, self.min, self.lease_ns
        d.adaptive_tuning = (self.initial or 0, self.window_ns, self.smoothing, self.tolerance,
                             self.headroom, self.backoff)

    def _key(self) -> Tuple[object, ...]:
        # As stored: two tunings that store the same are the same definition.
        return (self.min, self.max, self.lease_ns, self.initial or self.min, self.window_ns,
                round(self.smoothing * 65536), round(self.tolerance * 4096),
                round(self.headroom * 65536), round(self.backoff * 65536))

    def __repr__(self) -> str:
        return (f"AdaptiveConcurrency(min={self.min}, max={self.max}, lease={self.lease!r}, "
                f"initial={self.initial!r}, window={self.window!r}, "
                f"smoothing={self.smoothing!r}, tolerance={self.tolerance!r}, "
                f"headroom={self.headroom!r}, backoff={self.backoff!r}{self._options_repr()})")


def _real(x: Any, what: str) -> float:
    """A tuning fraction: any real number (its range is the library's to check)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(x).__name__}")
    return float(x)


def _stored(x: float, units: int) -> float:
    """The shortest decimal that stores as ``x`` does in ``units`` per 1."""
    n = round(x * units)
    for digits in range(1, 18):
        short = float(f"{x:.{digits}g}")
        if round(short * units) == n:
            return short
    return x


class Counters(Spec):
    """Keyed counters whose window and limit come with each call (the storage of the
    ``limits`` package: ``shmlimit.limits``; ``CounterStore`` from Python): per key, a
    fixed-window counter, a sliding window counter and a moving-window log of up to
    ``moving_window`` entries (the largest moving-window limit the file supports; 0: none).
    Always keyed: ``keyed=Keyed(capacity)`` is required."""

    _kind = _COUNTERS

    def __init__(self, moving_window: int = 0, **options: Any):
        self.moving_window = _u64(moving_window, "moving_window", high=1 << 16)
        self._set_options(**options)

    def _fill(self, d: _Def) -> None:
        d.limit = self.moving_window

    def _key(self) -> Tuple[object, ...]:
        return (self.moving_window,)

    def __repr__(self) -> str:
        return f"Counters(moving_window={self.moving_window}{self._options_repr()})"


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
    elif d.kind == _ADAPTIVE_CONCURRENCY:
        adaptive = AdaptiveConcurrency.__new__(AdaptiveConcurrency)
        adaptive.min, adaptive.max, adaptive.lease_ns = d.rate, d.limit, d.period_ns
        initial, window_ns, s, t, h, b = d.adaptive_tuning or (0, 20_000_000, 0.2, 1.0, 0.1, 0.9)
        adaptive.initial = None if initial in (0, d.rate) else initial
        adaptive.window_ns = window_ns
        adaptive.smoothing, adaptive.tolerance = _stored(s, 65536), _stored(t, 4096)
        adaptive.headroom, adaptive.backoff = _stored(h, 65536), _stored(b, 65536)
        spec = adaptive
    elif d.kind == _COUNTERS:
        counters = Counters.__new__(Counters)
        counters.moving_window = d.limit
        spec = counters
    else:
        raise ShmlimitError(f"limit kind {d.kind} is not known to this module")
    spec._read_options(d)
    return spec


_ON_CONFLICT = {"refuse": 0, "adopt": 1}


_ON_REBOOT = {None: 0, "translate": 1, "reset": 2}


def _options(mode: Optional[int], allow_other_owner: bool, on_conflict: str = "refuse",
             on_reboot: Optional[str] = None) -> Tuple[int, bool, int, int]:
    """``(mode, allow_other_owner, on_conflict, on_reboot)`` as the compiled module takes them
    (mode 0: the default 0600)."""
    if on_reboot not in _ON_REBOOT:
        raise ValueError(f"on_reboot must be 'translate', 'reset' or None, not {on_reboot!r}")
    raw_mode = 0
    if mode is not None:
        # 0 would read as "the default 0600"; an explicit mode 0 is a mistake (a file nobody may
        # read), refused here. Bits above 0o777, modes without owner read and write, and
        # world-writable modes are refused by the library (InvalidParameterError).
        if mode == 0 and not isinstance(mode, bool):
            raise InvalidParameterError(
                "mode 000 does not let the owner read and write the file: it must include 0o600",
                InvalidParameterError.code,
            )
        raw_mode = _u64(mode, "mode", high=2**32 - 1)
    if not isinstance(allow_other_owner, bool):
        raise TypeError(
            f"allow_other_owner must be a bool, not {type(allow_other_owner).__name__}")
    if on_conflict not in _ON_CONFLICT:
        raise ValueError(f"on_conflict must be 'refuse' or 'adopt', not {on_conflict!r:.80}")
    return raw_mode, allow_other_owner, _ON_CONFLICT[on_conflict], _ON_REBOOT[on_reboot]


def _key(key: object) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"a key is str or bytes, not {type(key).__name__}")
