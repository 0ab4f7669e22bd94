"""Storage for the ``limits`` package (and so flask-limiter and slowapi) in a shmlimit file:
``import shmlimit.limits`` registers the schemes ``shmlimit://`` (``limits.storage``) and
``async+shmlimit://`` (``limits.aio.storage``), so that ::

    Limiter(get_remote_address, app=app, storage_uri="shmlimit:///dev/shm/app.shmlimit")

holds one budget across every worker process of the host, with nothing else changed. The path
follows the scheme (``shmlimit:///dev/shm/app.shmlimit``); options come as query parameters or
as the storage's keyword options (``storage_options`` in flask-limiter):

``keys``
    key slots of the table (default 16384, a power of two; keys idle past their window are
    reclaimed for new ones)
``moving_window``
    log entries per key: the largest moving-window limit the file supports (default 128); a
    larger moving-window limit raises InvalidParameterError naming it
``on_full``
    ``deny`` (default), ``allow`` or ``error``: what a new key meets when no slot is free
``mode``
    the created file's permission bits, octal (default ``600``; ``660`` shares it with a group)
``name``
    the name of the counters limit in the file (default ``limits``)
``on_conflict``
    ``refuse`` (default) or ``adopt``: what a file created with other options meets
    (``Limiter.create_or_open``'s ``on_conflict``)

Without options (or with only ``name`` and ``on_conflict``), an existing file is attached as it
is. With options, a file created with other ones is DefinitionConflictError naming the
difference, unless ``on_conflict=adopt``: then the file is replaced atomically by one with the
requested options (the counts of the old one start fresh; processes attached to it move to the
new file within about a second).

Fixed windows count as ``limits`` does (a window starts at a key's first hit, every hit counts);
moving windows are exact (at most the limit in any window, one 16-byte entry per admitted hit);
sliding window counters use ``limits``' weighted estimate over Unix-aligned windows. All three
are exact per key across processes: every decision is one compare-and-swap in the shared file.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from typing import Any, Dict, Tuple, Type, Union

from limits.aio.storage import MovingWindowSupport as AsyncMovingWindowSupport
from limits.aio.storage import SlidingWindowCounterSupport as AsyncSlidingWindowCounterSupport
from limits.aio.storage import Storage as AsyncStorage
from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.errors import StorageError
from limits.storage.base import TimestampedSlidingWindow

from . import _native
from .definitions import Counters, Keyed, _ns
from .errors import ShmlimitError
from .limiter import Limiter

_DEFAULTS: Dict[str, str] = {"keys": "16384", "moving_window": "128", "on_full": "deny",
                             "mode": "600", "name": "limits", "on_conflict": "refuse"}
# The options that are not the file's layout: given alone, an existing file is attached as is.
_NOT_LAYOUT = {"name", "on_conflict"}


def _counters(uri: str, options: Dict[str, Any]) -> _native.Counters:
    """Open (or create) the file the URI names and resolve its counters limit."""
    parsed = urllib.parse.urlparse(uri)
    path = urllib.parse.unquote(parsed.netloc + parsed.path)
    if not path:
        raise ValueError(f"{uri!r}: the file's path follows the scheme, as in "
                         "shmlimit:///dev/shm/app.shmlimit")
    given = {k: str(v) for k, v in options.items() if k in _DEFAULTS}
    given.update({k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()})
    unknown = set(given) - set(_DEFAULTS)
    if unknown:
        raise ValueError(f"{uri!r}: unknown option(s) {sorted(unknown)}; "
                         f"known: {sorted(_DEFAULTS)}")
    merged = dict(_DEFAULTS, **given)
    if merged["on_conflict"] not in ("refuse", "adopt"):
        raise ValueError(f"{uri!r}: on_conflict must be 'refuse' or 'adopt', not "
                         f"{merged['on_conflict']!r:.80}")
    if not set(given) - _NOT_LAYOUT and os.path.exists(path):
        # No layout asked for: attach to the file as it is (its key capacity and logs).
        return _native.Counters(Limiter.open(path).limit(merged["name"]))
    spec = Counters(int(merged["moving_window"]),
                    keyed=Keyed(int(merged["keys"]), on_full=merged["on_full"]))
    limiter = Limiter.create_or_open(path, {merged["name"]: spec}, mode=int(merged["mode"], 8),
                                     on_conflict=merged["on_conflict"])
    return _native.Counters(limiter.limit(merged["name"]))


def _s(ns: int) -> float:
    return ns / 1e9


def _window(expiry: Union[int, float]) -> int:
    """``limits``' expiry (seconds) in nanoseconds: an int directly (the hot path), anything
    else checked by ``_ns``."""
    if type(expiry) is int and expiry > 0:
        return expiry * 1_000_000_000
    return _ns(expiry, "expiry")


class _Calls:
    """What both storages do, on the counters handle ``_c``."""

    _c: _native.Counters

    wrap_exceptions: bool

    def _incr(self, key: str, expiry: int, amount: int = 1) -> int:
        try:
            if type(expiry) is int and expiry > 0:
                return self._c.incr(key, expiry * 1_000_000_000, amount)
            return self._c.incr(key, _ns(expiry, "expiry"), amount)
        except ShmlimitError as e:
            if self.wrap_exceptions:
                raise StorageError(e) from e
            raise

    def _get(self, key: str) -> int:
        try:
            return self._c.count(key)[0]
        except ShmlimitError as e:
            if self.wrap_exceptions:
                raise StorageError(e) from e
            raise

    def _get_expiry(self, key: str) -> float:
        try:
            _n, left = self._c.count(key)
        except ShmlimitError as e:
            if self.wrap_exceptions:
                raise StorageError(e) from e
            raise
        return time.time() + left / 1e9

    def _moving(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        n, age = self._c.moving(key, limit, _window(expiry))
        return time.time() - _s(age), n

    def _sliding(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        prev, weighs, cur, expires = self._c.sliding(key, _window(expiry))
        return prev, _s(weighs), cur, _s(expires)


class ShmlimitStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport,
                      TimestampedSlidingWindow, _Calls):
    """``shmlimit://PATH``: the ``limits`` storage in a shmlimit file (see the module docs)."""

    STORAGE_SCHEME = ["shmlimit"]

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        self._c = _counters(uri, options)
        super().__init__(uri, wrap_exceptions=wrap_exceptions)

    @property
    def base_exceptions(self) -> Union[Type[Exception], Tuple[Type[Exception], ...]]:
        return ShmlimitError

    incr = _Calls._incr
    get = _Calls._get
    get_expiry = _Calls._get_expiry

    def check(self) -> bool:
        return True

    def reset(self) -> int:
        return self._c.clear_all()

    def clear(self, key: str) -> None:
        self._c.clear_key(key)

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if amount > limit:
            return False
        if type(expiry) is int and expiry > 0:
            return self._c.acquire_moving(key, limit, expiry * 1_000_000_000, amount)
        return self._c.acquire_moving(key, limit, _ns(expiry, "expiry"), amount)

    get_moving_window = _Calls._moving

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                     amount: int = 1) -> bool:
        if amount > limit:
            return False
        if type(expiry) is int and expiry > 0:
            return self._c.acquire_sliding(key, limit, expiry * 1_000_000_000, amount)
        return self._c.acquire_sliding(key, limit, _ns(expiry, "expiry"), amount)

    get_sliding_window = _Calls._sliding

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self._c.clear_key(key)


# `limits` wraps these methods of every storage class in a function that turns the storage's
# errors into StorageError under `wrap_exceptions`: the methods above do that themselves, so
# the class keeps them as they are (one Python call less on each request's path).
for _name in ("incr", "get", "get_expiry"):
    setattr(ShmlimitStorage, _name, getattr(_Calls, "_" + _name))


class AsyncShmlimitStorage(AsyncStorage, AsyncMovingWindowSupport,
                           AsyncSlidingWindowCounterSupport, TimestampedSlidingWindow, _Calls):
    """``async+shmlimit://PATH``: the ``limits.aio`` storage in a shmlimit file. Every call is
    a few hundred nanoseconds of work in the shared file and never blocks: the coroutines
    return without awaiting anything."""

    STORAGE_SCHEME = ["async+shmlimit"]

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any) -> None:
        self._c = _counters(uri, options)
        super().__init__(uri, wrap_exceptions=wrap_exceptions)

    @property
    def base_exceptions(self) -> Union[Type[Exception], Tuple[Type[Exception], ...]]:
        return ShmlimitError

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return self._incr(key, expiry, amount)

    async def get(self, key: str) -> int:
        return self._c.count(key)[0]

    async def get_expiry(self, key: str) -> float:
        return self._get_expiry(key)

    async def check(self) -> bool:
        return True

    async def reset(self) -> int:
        return self._c.clear_all()

    async def clear(self, key: str) -> None:
        self._c.clear_key(key)

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if amount > limit:
            return False
        return self._c.acquire_moving(key, limit, _window(expiry), amount)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return self._moving(key, limit, expiry)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                           amount: int = 1) -> bool:
        if amount > limit:
            return False
        return self._c.acquire_sliding(key, limit, _window(expiry), amount)

    async def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        return self._sliding(key, expiry)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        self._c.clear_key(key)


__all__ = ["ShmlimitStorage", "AsyncShmlimitStorage"]
