"""``CounterStore``: a counters limit (``Counters``) from Python: keyed counters whose window
and limit come with each call, shared by every process attached to the file. The storage of
the ``limits`` package (``shmlimit.limits``) is this, called with ``limits``' arguments."""

from __future__ import annotations

from typing import Tuple

from . import _native
from .definitions import Key, Seconds, _ns, _u64
from .limit import Limit


class CounterStore:
    """The calls of a counters limit, resolved from ``limit`` (a ``Limit`` of a limit defined
    with ``Counters``; WrongKindError otherwise). Windows are seconds (int, float or
    timedelta); keys str (their UTF-8) or bytes. Each strategy is exact per key across every
    process: at most ``limit`` admissions per fixed window (``acquire_fixed``) and in every
    moving window (``acquire_moving``); the sliding window counter (``acquire_sliding``) is the
    weighted estimate ``floor(previous x (W - elapsed) / W) + current``."""

    __slots__ = ("_c",)

    def __init__(self, limit: Limit):
        self._c = _native.Counters(limit)

    def incr(self, key: Key, window: Seconds, amount: int = 1) -> int:
        """Add ``amount`` to the key's fixed-window counter and return its count: a window of
        ``window`` starts at the first increment after the previous one ended."""
        return self._c.incr(key, _ns(window, "window"), _u64(amount, "amount"))

    def decr(self, key: Key, amount: int = 1) -> int:
        """Take ``amount`` from the key's fixed-window counter and return its count: never below
        zero, and the window keeps its end (express-rate-limit's ``decrement``)."""
        return self._c.decr(key, _u64(amount, "amount"))

    def set(self, key: Key, window: Seconds, count: int) -> int:
        """Set the key's fixed-window count to ``count`` in a window of ``window`` starting now
        (rate-limiter-flexible's ``set`` and ``block``); returns ``count``."""
        return self._c.set(key, _ns(window, "window"), _u64(count, "count"))

    def count(self, key: Key) -> Tuple[int, float]:
        """The key's fixed-window count and the seconds until its window ends."""
        n, left = self._c.count(key)
        return n, left / 1e9

    def acquire_fixed(self, key: Key, limit: int, window: Seconds, cost: int = 1) -> bool:
        """Admit ``cost`` of ``limit`` in the key's fixed window; a denial counts nothing."""
        return self._c.acquire_fixed(key, _u64(limit, "limit"), _ns(window, "window"),
                                     _u64(cost, "cost"))

    def acquire_sliding(self, key: Key, limit: int, window: Seconds, cost: int = 1) -> bool:
        """Admit ``cost`` of ``limit`` by the key's sliding window counter."""
        return self._c.acquire_sliding(key, _u64(limit, "limit"), _ns(window, "window"),
                                       _u64(cost, "cost"))

    def acquire_moving(self, key: Key, limit: int, window: Seconds, cost: int = 1) -> bool:
        """Admit ``cost`` of ``limit`` in the key's moving window (at most ``limit`` in any
        ``window``). ``limit`` is at most ``max_moving_limit``."""
        return self._c.acquire_moving(key, _u64(limit, "limit"), _ns(window, "window"),
                                      _u64(cost, "cost"))

    def sliding(self, key: Key, window: Seconds) -> Tuple[int, float, int, float]:
        """``(previous count, seconds it still weighs, current count, seconds until it
        expires)`` of the key's sliding window counter."""
        prev, weighs, cur, expires = self._c.sliding(key, _ns(window, "window"))
        return prev, weighs / 1e9, cur, expires / 1e9

    def moving(self, key: Key, limit: int, window: Seconds) -> Tuple[int, float]:
        """``(admissions, seconds since the oldest of them)`` in the key's moving window."""
        n, age = self._c.moving(key, _u64(limit, "limit"), _ns(window, "window"))
        return n, age / 1e9

    def clear(self, key: Key) -> None:
        """Forget the key in every strategy."""
        self._c.clear_key(key)

    def clear_all(self) -> int:
        """Forget every key; returns how many held something."""
        return self._c.clear_all()

    def key_occupancy(self) -> Tuple[int, int]:
        """``(used, slots)`` of the limit's two key tables: a key used with a fixed or sliding
        window holds a slot of one, a key used with a moving window a slot of the other;
        ``slots`` is twice the key capacity (rounded up to a power of two)."""
        return self._c.key_occupancy()

    def reclaim_idle_keys(self) -> int:
        """Retire every key, in both tables, that counts nothing any more (its windows over,
        every entry of its log expired); returns how many were. Never needed for correctness
        (decisions reclaim idle slots on demand): the explicit pass of ``shmlimit gc``."""
        return self._c.reclaim_idle_keys()

    @property
    def max_moving_limit(self) -> int:
        """The largest moving-window limit of the file: its log entries per key."""
        return self._c.max_moving_limit
