"""What a limit hands out that outlives the call: concurrency permits (``Permit``, and
``PermitHolder`` for who holds them) and token-bucket reservations (``Reservation``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator, Optional

from . import _native
from ._native import Decision
from .errors import ClosedError

if TYPE_CHECKING:
    from .limit import Limit

_PERMIT_SHADOW = 1


_OUTCOMES = {"ok": 0, "error": 1, "timeout": 2, "dropped": 3}


class AdaptivePermit:
    """A held permit of an adaptive concurrency limit; a context manager. Leaving the ``with``
    block releases it and reports its outcome with the time since the grant: ``"ok"`` when the
    block ended normally, ``"timeout"`` for a TimeoutError, ``"error"`` for any other exception,
    unless ``outcome`` was set in the block (``"ok"``, ``"error"``, ``"timeout"`` or
    ``"dropped"``: an exception that says nothing about the dependency's load should be
    ``"dropped"``). Garbage-collected unreleased, it reports ``"dropped"``."""

    __slots__ = ("_native", "outcome")

    def __init__(self, native: "_native.AdaptivePermit"):
        self._native = native
        self.outcome: Optional[str] = None

    @property
    def held(self) -> bool:
        """False once released (or taken over after its lease)."""
        return self._native.held

    def release(self, outcome: str = "ok", latency: Optional[float] = None) -> bool:
        """Release now reporting ``outcome`` (and ``latency`` seconds instead of the time since
        the grant); False if already released. An unknown outcome raises ValueError, a NaN,
        negative or infinite latency InvalidParameterError; either leaves the permit held."""
        code = _OUTCOMES.get(outcome)
        if code is None:
            raise ValueError(f"outcome must be one of {sorted(_OUTCOMES)}, not {outcome!r:.40}")
        if latency is None:
            return self._native.release(code)
        return self._native.release_measured(code, float(latency))

    def __enter__(self) -> "AdaptivePermit":
        return self

    def __exit__(self, kind: Optional[type], value: object, tb: object) -> None:
        outcome = self.outcome
        if outcome is None:
            if kind is None:
                outcome = "ok"
            elif issubclass(kind, TimeoutError):
                outcome = "timeout"
            else:
                outcome = "error"
        self.release(outcome)


class Permit:
    """A held permit of a concurrency limit; a context manager that releases it on exit. It is
    also released when garbage-collected, and lost to the next acquirers when this process
    exits or dies. A permit belongs to the process that took it: a forked child's copy releases
    nothing."""

    __slots__ = ("limit", "id", "_held", "__weakref__")

    def __init__(self, limit: "Limit", permit_id: int):
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


class Reservation:
    """A booking made by ``Limit.reserve``: ``granted`` (the tokens are taken) or refused
    (nothing taken); ``delay`` is how long after booking the caller may proceed, or would have
    had to wait. ``wait()`` sleeps until then and returns the grant; ``cancel()`` gives the
    tokens back if nothing was booked after them. A context manager: closing a reservation
    neither waited for nor cancelled keeps its tokens booked."""

    def __init__(self, booking: _native.Reservation):
        self._booking: Optional[_native.Reservation] = booking
        self.granted: bool = booking.granted
        self.cost: int = booking.cost
        self.delay_ns: int = booking.delay_ns
        self.ready_at_ns: int = booking.ready_at_ns

    def _live(self) -> _native.Reservation:
        booking = self._booking
        if booking is None:
            raise ClosedError("Reservation is closed")
        return booking

    def close(self) -> None:
        """Forget the reservation (idempotent): tokens neither waited for nor cancelled stay
        booked. Using it afterwards raises ClosedError."""
        booking, self._booking = self._booking, None
        if booking is not None:
            booking.close()

    @property
    def closed(self) -> bool:
        return self._booking is None

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
        return self._live().wait()

    def cancel(self) -> bool:
        """Give the tokens back; False when something was booked after them (they stay used),
        or when the reservation was refused, waited for or already cancelled."""
        if not self.granted:
            return False
        return self._live().cancel()

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

    def __init__(self, permit_id: int, pid: int, reclaimable: bool, since_ns: int,
                 lease_expiry_ns: int, key_tag: int):
        self.id = permit_id
        self.pid = pid
        self.reclaimable = reclaimable
        self.since_ns = since_ns or None
        self.lease_expiry_ns = lease_expiry_ns or None
        # For a keyed limit, the key's tag (``Limit.key_tag(key)``); None otherwise.
        self.key_tag = key_tag or None

    def __repr__(self) -> str:
        return (f"PermitHolder(id={self.id:#x}, pid={self.pid}, reclaimable={self.reclaimable}, "
                f"since_ns={self.since_ns}, lease_expiry_ns={self.lease_expiry_ns}, "
                f"key_tag={self.key_tag})")
