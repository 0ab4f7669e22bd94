"""``Limit``: one limit of a file, resolved once by name, and what is decided with it:
decisions, composed checks (``try_acquire_all``), counters, policies and header fields."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Tuple, Union

from . import _native
from ._native import Composed, Decision
from .definitions import Key, Seconds, Spec, _Def, _key, _ns, _spec_of, _timeout_ns, _u64
from .errors import PermitUnavailableError
from .permits import AdaptivePermit, Permit, PermitHolder, Reservation

if TYPE_CHECKING:
    from .aio import AsyncLimit


# ---------------------------------------------------------------------------------------------
# Decisions and handles.


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


class Limit(_native.LimitBase):
    """One limit of a limiter file, resolved once by name. Outlives its Limiter.

    ``try_acquire``, ``peek``, ``try_acquire_key`` and ``peek_key`` are the compiled module's
    fast calls; ``close()`` frees the handle (also done when it is collected)."""

    def __init__(self, limiter: _native.Limiter, name: str):
        # LimitBase.__new__ resolved ``name`` in ``limiter``'s file.
        super().__init__()
        self.name = name
        self._aio: "Optional[AsyncLimit]" = None

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
        return self._try_acquire_at(_u64(cost, "cost"), _u64(now_ns, "now_ns"))

    def acquire(self, cost: int = 1, timeout: Optional[Seconds] = None) -> Decision:
        """Admit ``cost`` units, waiting up to ``timeout`` seconds for them (None: as long as it
        takes). A token bucket books them at once and sleeps the delay, or refuses at once,
        consuming nothing, when the delay would exceed the timeout; windows and the sliding log
        sleep the exact retry-after and try again. Returns an allowed Decision, or a denied one
        that consumed nothing. Raises WrongKindError on concurrency and keyed limits."""
        return self._acquire_timeout(_u64(cost, "cost"), _timeout_ns(timeout))

    def refund(self, decision: Decision, units: Optional[int] = None) -> None:
        """Give back what ``decision`` (a grant of this limit) took, or ``units`` of it, for work
        that was admitted but never done. Refunding a denial or a peek does nothing. Raises
        WrongKindError on keyed (use refund_key) and concurrency limits."""
        self._refund(decision, None if units is None else _u64(units, "units"))

    def set_rate(self, rate: int, per: Seconds = 1.0) -> None:
        """Change the refill rate to ``rate`` per ``per`` seconds, live, for every process (a
        window gets the limit per window this rate means, rounded down). Raises
        InvalidParameterError, WrongKindError (sliding log, concurrency)."""
        self._set_rate(_u64(rate, "rate"), _ns(per, "per"))

    def set_token_bucket(self, burst: int, rate: int, per: Seconds = 1.0) -> None:
        """Change a token bucket's burst and rate together, live."""
        self._set_token_bucket(_u64(burst, "burst"), _u64(rate, "rate"), _ns(per, "per"))

    def set_limit(self, limit: int) -> None:
        """Change a fixed or sliding window's limit per window, live."""
        self._set_limit(_u64(limit, "limit"))

    def reset(self) -> None:
        """Return the limit to fresh (full bucket, empty windows and table, no permits held),
        keeping its live parameters: grants the whole capacity at once."""
        self._reset()

    @property
    def live_definition(self) -> Spec:
        """The definition with its live parameters, the ones decisions use (after any retune by
        any process, or a change adopted by ``create_or_open(..., on_conflict="adopt")``):
        the same as ``definition``."""
        return _spec_of(_Def._of(self._live_definition()))

    @property
    def created_definition(self) -> Spec:
        """The definition the file was created with, before any retune (``definition`` is the
        live one)."""
        return _spec_of(_Def._of(self._definition()))

    def reserve(self, cost: int = 1, max_delay: Optional[Seconds] = 0) -> "Reservation":
        """Book the next ``cost`` tokens of a token bucket now, to be used after a delay of at
        most ``max_delay`` seconds (None: any delay); otherwise refuse at once and take nothing.
        ``await`` the Reservation to sleep its delay without blocking an event loop. Bookings are
        served first come, first served across processes. Raises WrongKindError on other
        algorithms (use ``acquire(timeout=...)``)."""
        return Reservation(self._reserve(_u64(cost, "cost"), _timeout_ns(max_delay, "max_delay")))

    # Keyed limits.

    def try_acquire_key_at(self, key: Key, cost: int, now_ns: int) -> Decision:
        """``try_acquire_key`` dated at ``now_ns`` on CLOCK_MONOTONIC."""
        return self._try_acquire_key_at(_key(key), _u64(cost, "cost"), _u64(now_ns, "now_ns"))

    def refund_key(self, key: Key, decision: Decision) -> None:
        """Give back what ``decision`` (a grant of ``try_acquire_key`` for ``key``) took."""
        self._refund_key(_key(key), decision)

    def key_occupancy(self) -> Tuple[int, int]:
        """``(used, slots)``: table slots holding a key, and the table's size."""
        return self._key_occupancy()

    def reclaim_idle_keys(self) -> int:
        """Retire every key whose state is back to fresh; returns how many (a cleanup pass,
        never needed for correctness)."""
        return self._reclaim_idle_keys()

    # Adaptive concurrency permits.

    def try_acquire_adaptive(self, key: Optional[Key] = None) -> Optional[AdaptivePermit]:
        """Take a permit of an adaptive concurrency limit if fewer than its current limit are
        held, without waiting; None otherwise. A keyed adaptive limit takes the ``key`` whose
        own limit decides (and whose limit the permit's release teaches). Raises WrongKindError
        for another kind (or a key given to an unkeyed limit, none to a keyed one)."""
        native = self._adaptive(None, _opt_key(key))
        return AdaptivePermit(native) if native is not None else None

    def acquire_adaptive(self, timeout: Optional[Seconds] = None,
                         key: Optional[Key] = None) -> Optional[AdaptivePermit]:
        """``try_acquire_adaptive``, waiting up to ``timeout`` seconds (None: as long as it
        takes); None when the timeout passed."""
        native = self._adaptive(_timeout_ns(timeout), _opt_key(key))
        return AdaptivePermit(native) if native is not None else None

    def adaptive(self, timeout: Optional[Seconds] = 0,
                 key: Optional[Key] = None) -> AdaptivePermit:
        """An adaptive permit for a ``with`` block, released with its outcome and latency when
        the block ends::

            with llm.adaptive(timeout=1.0):
                call_the_model()
            with per_host.adaptive(key=host):   # a keyed adaptive limit
                call_the_host()

        Waits up to ``timeout`` seconds (0, the default: not at all; None: as long as it takes)
        and raises PermitUnavailableError if the limit stayed reached."""
        permit = self.acquire_adaptive(timeout, key)
        if permit is None:
            raise PermitUnavailableError(
                f"limit `{self.name}`: the adaptive limit is reached", PermitUnavailableError.code)
        return permit

    def adaptive_status(self, key: Optional[Key] = None) -> "AdaptiveStatus":
        """The current limit, its range, the round trips (µs; None before any sample) and the
        permits held now; of ``key`` for a keyed adaptive limit (a key never seen: its initial
        limit)."""
        return AdaptiveStatus(*self._adaptive_status(_opt_key(key)))

    # Concurrency permits.

    def try_acquire_permit(self) -> Optional["Permit"]:
        """Take a permit if one is free (or held by a dead process, or past its lease), without
        waiting; None when all are held. Raises WrongKindError if this is not a concurrency
        limit."""
        permit_id = self._permit(None)
        return Permit(self, permit_id) if permit_id else None

    def acquire_permit(self, timeout: Optional[Seconds] = None) -> Optional["Permit"]:
        """Take a permit, waiting up to ``timeout`` seconds (None: as long as it takes) for one
        to be released or for a holder to die; None when the timeout passed."""
        permit_id = self._permit(_timeout_ns(timeout))
        return Permit(self, permit_id) if permit_id else None

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
        permit_id = self._key_permit(_key(key), None)
        return Permit(self, permit_id) if permit_id else None

    def acquire_key_permit(
        self, key: Key, timeout: Optional[Seconds] = None
    ) -> Optional["Permit"]:
        """``try_acquire_key_permit``, waiting up to ``timeout`` seconds (None: as long as it
        takes) for one of the key's permits to be released; None when the timeout passed."""
        permit_id = self._key_permit(_key(key), _timeout_ns(timeout))
        return Permit(self, permit_id) if permit_id else None

    def key_permit(self, key: Key, timeout: Optional[Seconds] = 0) -> "Permit":
        """A permit of ``key`` for a ``with`` block, released when the block ends; waits as
        ``permit()`` does and raises PermitUnavailableError if none of the key's became free."""
        return self._granted(
            self.acquire_key_permit(key, timeout), "every permit of the key is held")

    def key_permits_held(self, key: Key) -> int:
        """How many of ``key``'s permits are held now, across every process."""
        return self._key_permits_held(_key(key))

    def key_tag(self, key: Key) -> int:
        """The tag this file's key tables know ``key`` by (``PermitHolder.key_tag``)."""
        return self._key_tag(_key(key))

    def release_permit(self, permit_id: int) -> bool:
        """Release a permit by id (``Permit.id``); False if this process did not hold it."""
        return self._release_permit(_u64(permit_id, "permit_id"))

    def permit_holders(self) -> List["PermitHolder"]:
        """Every held permit: its id, holder pid, since when, until when, and whether the next
        acquirer may take it over (holder dead or lease expired)."""
        return [PermitHolder(*h) for h in self._permit_holders()]

    def reclaim_dead_permits(self) -> int:
        """Free every permit whose holder is gone or whose lease expired; returns how many."""
        return self._reclaim_dead_permits()

    def stats(self) -> Stats:
        """The limit's decision counters, summed over every process attached to the file."""
        return Stats(*self._stats())

    def policy(self) -> "Policy":
        """The limit's quota per window in the terms of the IETF ``RateLimit-Policy`` field,
        computed by the core from the live parameters. Raises WrongKindError for a concurrency
        limit (it bounds work in flight, not a rate)."""
        return Policy(*self._policy())

    def headers(self, decision: Decision) -> Dict[str, str]:
        """The ``RateLimit``, ``RateLimit-Policy`` and ``Retry-After`` header fields for a
        decision of this limit, rendered by the core (see ``rate_limit_headers``)."""
        return rate_limit_headers((self, decision))

    @property
    def definition(self) -> Spec:
        """The limit's live definition, the parameters decisions use now: after a retune by any
        process (``set_rate``) or an adopted change it reads back as it is now, as
        ``Limiter.definitions()`` does. ``created_definition`` is the one the file was created
        with."""
        return _spec_of(_Def._of(self._live_definition()))

    def __repr__(self) -> str:
        return f"Limit({self.name!r}{', closed' if self.closed else ''})"


def _opt_key(key: Optional[Key]) -> Optional[bytes]:
    return None if key is None else _key(key)


class AdaptiveStatus(NamedTuple):
    """What an adaptive concurrency limit is doing now (``Limit.adaptive_status()``)."""

    limit: float
    permits: int
    min: int
    max: int
    in_flight: int
    rtt_long_us: Optional[float]
    rtt_recent_us: Optional[float]


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
