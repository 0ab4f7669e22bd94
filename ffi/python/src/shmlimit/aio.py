"""asyncio for shmlimit: waits that never block the event loop and hold no thread.

Every limit has an asyncio face, ``limit.aio`` (an :class:`AsyncLimit`)::

    d = await api.aio.acquire(1, timeout=2.0)        # an allowed Decision, or a denied one
    d = await per_client.aio.acquire_key("alice", timeout=2.0)
    async with db.aio.permit(timeout=1.0):          # PermitUnavailableError after 1 s
        ...
    grant = await api.reserve(5, max_delay=2.0)     # a Reservation is awaitable

How each waits (the decisions themselves are the C library's, one non-blocking call each):

- **Token buckets** (unkeyed, not split): the tokens are booked at once (``Limit.reserve``, first come
  first served across processes, refused at once when the delay would exceed the timeout) and
  the task sleeps the booked delay with ``asyncio.sleep``; cancelling the task gives the booking
  back when nothing was booked after it.
- **Windows, sliding logs, keyed limits and split buckets**: try, and when denied sleep the
  exact retry-after the library reported with ``asyncio.sleep``, then try again; a
  retry-after beyond what is left of the timeout returns the denial at once.
- **Permits** (concurrency limits): the library's blocking wait is a futex, which needs a
  thread per waiter; here a waiter instead retries ``try_acquire_permit`` on a timer, starting
  at 1 ms and doubling up to the library's own recheck interval (``PERMIT_RECHECK``, 100 ms,
  the interval at which its futex waiters look for dead holders anyway), and a permit released
  through this module in the same process wakes the local waiters at once. So a waiter costs
  a timer, never a thread or a spinning loop; a release by another process is seen within the
  current interval (at most 100 ms).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, List, Optional, Set

from .definitions import Key, Seconds, TokenBucket, _timeout_ns, _u64
from .errors import PermitUnavailableError

if TYPE_CHECKING:
    from ._native import Decision
    from .limit import Limit
    from .permits import Permit, Reservation

__all__ = ["AsyncLimit", "AsyncPermit", "wait_reservation", "PERMIT_POLL_MAX"]

#: The longest a permit waiter sleeps between two attempts (the library's PERMIT_RECHECK).
PERMIT_POLL_MAX = 0.1
_PERMIT_POLL_MIN = 0.001
_FOREVER = 2**64 - 1


def _deadline(timeout: Optional[Seconds]) -> Optional[int]:
    """CLOCK_MONOTONIC deadline in ns for a timeout (None: no deadline)."""
    ns = _timeout_ns(timeout)
    return None if ns == _FOREVER else time.monotonic_ns() + ns


async def _sleep_until(ready_at_ns: int) -> None:
    """Sleep until CLOCK_MONOTONIC reaches ``ready_at_ns`` (the library's timeline), never
    waking early: the event loop's timers may fire up to a clock tick before their time."""
    while True:
        left = ready_at_ns - time.monotonic_ns()
        if left <= 0:
            return
        await asyncio.sleep(left / 1e9)


async def wait_reservation(reservation: Reservation) -> Decision:
    """Sleep (asynchronously) until ``reservation`` may proceed and return its grant; a
    refused reservation returns its denial at once. Cancelled while sleeping, the booking is
    given back (``Reservation.cancel``) when nothing was booked after it. This is what
    ``await reservation`` does."""
    if not reservation.granted:
        return reservation.wait()  # a refused one returns at once, without a call
    try:
        await _sleep_until(reservation.ready_at_ns)
    except asyncio.CancelledError:
        reservation.cancel()
        raise
    # The ready time has passed: the library's wait returns at once.
    return reservation.wait()


class AsyncLimit:
    """The asyncio face of a Limit (``limit.aio``). The non-waiting calls stay on the Limit
    itself (``try_acquire`` and friends take tens of nanoseconds: no reason to await them)."""

    def __init__(self, limit: "Limit"):
        self.limit = limit
        self._bucket: Optional[bool] = None
        self._waiters: Set["asyncio.Future[None]"] = set()

    def _is_unkeyed_bucket(self) -> bool:
        if self._bucket is None:
            definition = self.limit.created_definition
            # Split buckets cannot book in one order across their sub-buckets: they retry.
            self._bucket = isinstance(definition, TokenBucket) and definition.keyed is None \
                and definition.split == 1
        return self._bucket

    async def acquire(self, cost: int = 1, timeout: Optional[Seconds] = None) -> Decision:
        """Admit ``cost`` units, waiting up to ``timeout`` seconds (None: as long as it takes;
        0: not at all) without blocking the event loop. Returns an allowed Decision, or a
        denied one that consumed nothing. Raises WrongKindError on concurrency and keyed
        limits (use ``permit`` and ``acquire_key``)."""
        cost = _u64(cost, "cost")
        if self._is_unkeyed_bucket():
            reservation = self.limit.reserve(cost, max_delay=timeout)
            with reservation:
                return await wait_reservation(reservation)
        return await self._retry(lambda: self.limit.try_acquire(cost), timeout)

    async def acquire_key(self, key: Key, cost: int = 1,
                          timeout: Optional[Seconds] = None) -> Decision:
        """``acquire`` for ``key`` of a keyed limit: tries, and sleeps the exact retry-after
        between attempts."""
        cost = _u64(cost, "cost")
        return await self._retry(lambda: self.limit.try_acquire_key(key, cost), timeout)

    async def _retry(self, attempt: Any, timeout: Optional[Seconds]) -> Decision:
        deadline = _deadline(timeout)
        while True:
            decision: Decision = attempt()
            if decision.allowed:
                return decision
            wake_at = time.monotonic_ns() + decision.retry_after_ns
            if deadline is not None and wake_at > deadline:
                return decision
            await _sleep_until(wake_at)

    async def reserve(self, cost: int = 1, max_delay: Optional[Seconds] = 0) -> Decision:
        """Book ``cost`` tokens of a token bucket (refused at once, taking nothing, when the
        delay would exceed ``max_delay``) and sleep the delay: ``Limit.reserve`` awaited."""
        reservation = self.limit.reserve(cost, max_delay)
        with reservation:
            return await wait_reservation(reservation)

    # Permits.

    async def acquire_permit(self, timeout: Optional[Seconds] = None,
                             key: Optional[Key] = None) -> Optional["AsyncPermit"]:
        """Take a permit (of ``key`` on a keyed concurrency limit), waiting up to ``timeout``
        seconds (None: as long as it takes) without a thread: None when the timeout passed."""
        deadline = _deadline(timeout)
        interval = _PERMIT_POLL_MIN
        while True:
            permit = self.limit.try_acquire_permit() if key is None \
                else self.limit.try_acquire_key_permit(key)
            if permit is not None:
                return AsyncPermit(self, permit)
            now = time.monotonic_ns()
            if deadline is not None and now >= deadline:
                return None
            sleep = interval if deadline is None else min(interval, (deadline - now) / 1e9)
            await self._wait_local_release(sleep)
            interval = min(interval * 2, PERMIT_POLL_MAX)

    def permit(self, timeout: Optional[Seconds] = 0, key: Optional[Key] = None) -> "_PermitCM":
        """A permit for an ``async with`` block, released when it ends; waits up to
        ``timeout`` seconds (0, the default: not at all; None: as long as it takes) and raises
        PermitUnavailableError if none became free."""
        return _PermitCM(self, timeout, key)

    async def _wait_local_release(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        waiter: "asyncio.Future[None]" = loop.create_future()
        self._waiters.add(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), seconds)
        except asyncio.TimeoutError:
            pass
        finally:
            self._waiters.discard(waiter)

    def _released(self) -> None:
        woken: List["asyncio.Future[None]"] = list(self._waiters)
        for waiter in woken:
            if not waiter.done():
                waiter.get_loop().call_soon_threadsafe(_resolve, waiter)


def _resolve(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_result(None)


class AsyncPermit:
    """A permit taken by ``AsyncLimit.acquire_permit``: ``release()`` (or the end of its
    ``async with`` block) frees it and wakes this process's waiters at once."""

    def __init__(self, owner: AsyncLimit, permit: Permit):
        self._owner = owner
        self.permit = permit

    @property
    def id(self) -> int:
        return self.permit.id

    @property
    def held(self) -> bool:
        return self.permit.held

    def release(self) -> bool:
        released = self.permit.release()
        self._owner._released()
        return released

    async def __aenter__(self) -> "AsyncPermit":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"AsyncPermit({self.permit!r})"


class _PermitCM:
    def __init__(self, owner: AsyncLimit, timeout: Optional[Seconds], key: Optional[Key]):
        self._owner, self._timeout, self._key = owner, timeout, key
        self._permit: Optional[AsyncPermit] = None

    async def __aenter__(self) -> AsyncPermit:
        permit = await self._owner.acquire_permit(self._timeout, self._key)
        if permit is None:
            raise PermitUnavailableError(
                f"limit `{self._owner.limit.name}`: every permit"
                f"{' of the key' if self._key is not None else ''} is held",
                PermitUnavailableError.code)
        self._permit = permit
        return permit

    async def __aexit__(self, *exc: object) -> None:
        if self._permit is not None:
            self._permit.release()
