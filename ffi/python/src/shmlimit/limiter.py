"""``Limiter``: one attached limiter file (create, open, resolve, list its definitions), the
guarded limiter that never fails because of its file, and the Prometheus text of a file's
counters."""

from __future__ import annotations

import os
from typing import Dict, Generic, Protocol, Iterable, List, Mapping, Optional, Tuple, TypeVar, Union

from . import _native
from ._native import Decision
from .definitions import (_U64_MAX, FAIL_CLOSED, FAIL_OPEN, Concurrency, Key, PathArg, Seconds,
                          Spec, _Def, _key, _name, _options, _path, _spec_of, _timeout_ns, _u64)
from .errors import ClosedError
from .limit import Limit

_Spec = Spec


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
        definition = limit.created_definition
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



class _Closable(Protocol):
    def close(self) -> None: ...


_N = TypeVar("_N", bound=_Closable)


class _Owner(Generic[_N]):
    """A handle of the compiled module, closed once (``close()``, or when collected)."""

    _name = ""

    def __init__(self, native: _N):
        self._native: Optional[_N] = native

    def _live(self) -> _N:
        native = self._native
        if native is None:
            raise ClosedError(f"{self._name} is closed")
        return native

    def close(self) -> None:
        """Free the handle (idempotent). Using it afterwards raises ClosedError."""
        native, self._native = self._native, None
        if native is not None:
            native.close()

    @property
    def closed(self) -> bool:
        return self._native is None


class Limiter(_Owner[_native.Limiter]):
    """One attached limiter file; a context manager that closes it on exit."""

    _name = "Limiter"

    def __init__(self, native: _native.Limiter, path: PathArg):
        super().__init__(native)
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
        defs = []
        for name, spec in limits.items():
            d = _Def(_name(name))
            if not isinstance(spec, Spec):
                raise TypeError(f"limit {name!r}: expected TokenBucket, FixedWindow, "
                                f"SlidingWindow, SlidingLog or Concurrency, "
                                f"not {type(spec).__name__}")
            d.kind = spec._kind
            spec._fill(d)
            spec._fill_options(d)
            defs.append(d)
        return cls(_native.Limiter.create_or_open(raw_path, defs, *options), path)

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
        mode_bits, allow, _conflict, reboot = _options(mode, allow_other_owner, on_reboot=on_reboot)
        return cls(_native.Limiter.open(raw_path, mode_bits, allow, reboot), path)

    def limit(self, name: str) -> Limit:
        """Resolve a limit by name, once. Raises UnknownLimitError."""
        return Limit(self._live(), _name(name))

    def definitions(self) -> Dict[str, Spec]:
        """The limits of the file, in definition order, with their live parameters: a rate
        retuned by any process (``set_rate``) or a change adopted by ``create_or_open(...,
        on_conflict="adopt")`` reads back as it is now, not as the file was created.
        ``created_definitions()`` gives the definitions the file was created with."""
        return {d.name: _spec_of(d) for d in map(_Def._of, self._live().live_definitions())}

    def created_definitions(self) -> Dict[str, Spec]:
        """The limits as the file was created with them, in definition order (see
        ``definitions()`` for the live ones)."""
        return {d.name: _spec_of(d) for d in map(_Def._of, self._live().definitions())}

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
        return GuardedLimiter(_native.GuardedLimiter.open(_path(path), reopen_ns), path)


class GuardedLimiter(_Owner[_native.GuardedLimiter]):
    """A limiter file that may not be usable yet (or any more); see ``Limiter.open_guarded``.
    A context manager that closes it on exit; its guarded limits outlive it."""

    _name = "GuardedLimiter"

    def __init__(self, native: _native.GuardedLimiter, path: PathArg):
        super().__init__(native)
        self.path = path

    def limit(self, name: str, unavailable: int) -> "GuardedLimit":
        """A guarded handle to the limit ``name``, deciding by ``unavailable`` (FAIL_OPEN or
        FAIL_CLOSED: required, there is no default) while the file cannot be used. The name is
        checked once the file is attached (then UnknownLimitError from every decision). Raises
        InvalidParameterError for any other policy value."""
        raw = _name(name)
        policy = _u64(unavailable, "unavailable", high=2**32 - 1)
        return GuardedLimit(self._live().limit(raw, policy), name, policy)

    @property
    def attached(self) -> bool:
        """Whether the file is attached (attempting to open it if the interval has passed)."""
        return bool(self._live().attached)

    def __enter__(self) -> "GuardedLimiter":
        self._live()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GuardedLimiter({self.path!r}{', closed' if self.closed else ''})"


class GuardedLimit(_Owner[_native.GuardedLimit]):
    """One limit of a guarded limiter, with its policy for while the file is unavailable.
    Decisions the policy made have ``Decision.unavailable`` set. The caller's own errors
    (ZeroCostError, InvalidKeyError, and once attached UnknownLimitError,
    CostExceedsCapacityError, WrongKindError) are raised whatever the policy."""

    _name = "GuardedLimit"

    def __init__(self, native: _native.GuardedLimit, name: str, policy: int):
        super().__init__(native)
        self.name = name
        self.policy = policy

    def try_acquire(self, cost: int = 1) -> Decision:
        """``Limit.try_acquire`` once attached, else the policy (flagged unavailable)."""
        return self._live().try_acquire(_u64(cost, "cost"))

    def peek(self, cost: int = 1) -> Decision:
        """The decision ``try_acquire(cost)`` would make now, consuming nothing."""
        return self._live().peek(_u64(cost, "cost"))

    def try_acquire_key(self, key: Key, cost: int = 1) -> Decision:
        """``Limit.try_acquire_key`` once attached, else the policy. A bad key is refused
        (InvalidKeyError) even while the file is unavailable."""
        return self._live().try_acquire_key(_key(key), _u64(cost, "cost"))

    def refund(self, decision: Decision) -> None:
        """Give back what ``decision`` (a grant of this guarded limit) took; a decision the
        policy made took nothing, so its refund does nothing."""
        self._live().refund(decision)

    def __repr__(self) -> str:
        policy = {FAIL_OPEN: "FAIL_OPEN", FAIL_CLOSED: "FAIL_CLOSED"}.get(self.policy, self.policy)
        return f"GuardedLimit({self.name!r}, {policy}{', closed' if self.closed else ''})"
