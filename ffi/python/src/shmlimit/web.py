"""Rate limits for web applications, framework-agnostic: WSGI and ASGI middleware and a
decorator, all deciding through one composed check per request.

::

    import shmlimit
    from shmlimit.web import Check, Guard, WSGIMiddleware, client_ip

    guard = Guard("/dev/shm/myapp.shm", {
        "per_client": shmlimit.TokenBucket(rate=20, burst=20, keyed=shmlimit.Keyed(65536)),
        "global": shmlimit.TokenBucket(rate=200, burst=200),
    }, [Check("per_client", key=client_ip), Check("global")])
    app = WSGIMiddleware(app, guard)           # Flask: app.wsgi_app = WSGIMiddleware(...)
    # ASGI (FastAPI, Starlette...): app = ASGIMiddleware(app, guard)

A request is admitted when every check admits it (``try_acquire_all``: all or nothing; a
denied request takes nothing from any limit). A denied one gets ``429 Too Many Requests`` with
``Retry-After`` and the IETF ``RateLimit`` / ``RateLimit-Policy`` fields; an admitted one
carries the two ``RateLimit`` fields too. Every value in those fields is rendered by the core
from its decisions and the limits' live parameters: nothing is computed here.
``Guard(..., rate_limit_headers=False)`` leaves the ``RateLimit`` fields out (a 429 still says
``Retry-After``), ``policy_header=False`` just ``RateLimit-Policy``; what is left out is never
rendered.

An adaptive concurrency limit (``shmlimit.AdaptiveConcurrency``) named by a check is held, not
decided: the middleware takes one of its permits for the request (without waiting) before the
rate checks, and releases it when the response is done with the request's outcome and the time
since the grant as its latency: ``"error"`` for a 5xx response or an exception of the app,
``"timeout"`` for a 504 or a TimeoutError, ``"dropped"`` when the request was cancelled (ASGI)
or its response not sent whole (a client gone), else ``"ok"``. A request that gets no permit
is refused with ``503 Service Unavailable`` (the server is at capacity; 429 says the client
sent too much, which it did not) and ``Retry-After``; a request a rate check denies gives its
permit back unused. The ``RateLimit`` fields carry the limit as
``"name";q=PERMITS;qu="concurrent-requests"`` and ``"name";r=PERMITS_LEFT``, rendered by the
core. Adaptive checks take no key. ``Guard.limit`` (the decorator) holds a permit for each call
the same way (released with ``"error"`` for an exception, ``"timeout"`` for a TimeoutError,
else ``"ok"``) and raises ``AtCapacity`` (a ``RateLimited``: answer 503) when none is free;
``Guard.decide`` refuses them, a decision holding nothing. A keyed adaptive limit is held for
the request's key (``Check("per_tenant", key=header("x-tenant"))``: a request whose key
function gives None holds none), its fields that key's permits.

Cost: a guard whose checks read a header (``header``), the peer's address (``client_ip``) or
no key, at a fixed cost, does each request in one native call (``_native.WebPlan``, built when
the guard attaches in a process): the keys read straight from the environ or scope, one
composed decision, the fields the options ask for (``RateLimit`` rendered by the core per
request, ``RateLimit-Policy`` once per set of limits and again at most once a second so that a
retune shows), and the app called with a native ``start_response`` (ASGI: ``send``) that adds
them. A custom key function or cost gets a ``Request`` whose headers are read lazily.
``bench/web.py`` (direct calls) and ``bench/server.py`` (gunicorn and uvicorn) measure what
that costs beyond the decision.

Pre-fork servers: the guard attaches to the file lazily, in the process that decides, and again
after a fork (``os.register_at_fork`` tells it; ``limits()`` also compares the pid), so
creating it in a gunicorn config or at import time of the app is fine; see ffi/README.md for
gunicorn's ``post_fork`` and ``user=``.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import (Any, Awaitable, Callable, Dict, Iterable, Iterator, List, Mapping,
                    MutableMapping, Optional, Sequence, Tuple, TypeVar, Union, cast)

from . import (AdaptiveConcurrency, Composed, Decision, Key, Limit, Limiter, PathArg, Spec,
               _native, try_acquire_all)
from ._webhold import (_BODY, _DENIED, _DENIED_ENCODED, acall_holding, asgi_holding,
                       call_holding, wsgi_holding)
from .permits import AdaptivePermit

__all__ = [
    "Request", "Check", "Guard", "Verdict", "RateLimited", "AtCapacity", "WSGIMiddleware",
    "ASGIMiddleware", "client_ip", "header",
]

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Request:
    """What a key function sees of a request, the same under WSGI and ASGI."""

    method: str
    path: str
    #: Header names in lower case (the last value of a repeated header).
    headers: Mapping[str, str]
    #: The peer's address as the server reports it (REMOTE_ADDR / scope["client"]), or "".
    client: str
    #: The WSGI environ or the ASGI scope, for anything else.
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_wsgi(cls, environ: Mapping[str, Any]) -> "Request":
        return cls(str(environ.get("REQUEST_METHOD", "GET")), str(environ.get("PATH_INFO", "")),
                   _WSGIHeaders(environ), str(environ.get("REMOTE_ADDR", "")), environ)

    @classmethod
    def from_asgi(cls, scope: Mapping[str, Any]) -> "Request":
        return cls(str(scope.get("method", "GET")), str(scope.get("path", "")),
                   _ASGIHeaders(scope), _asgi_client(scope), scope)


def _environ_name(name: str) -> str:
    """The WSGI environ key of a request header (``x-api-key`` -> ``HTTP_X_API_KEY``)."""
    upper = name.upper().replace("-", "_")
    return upper if upper in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + upper


class _WSGIHeaders(Mapping[str, str]):
    """A WSGI environ's request headers by lower-case name, read from the environ on access."""

    __slots__ = ("_environ",)

    def __init__(self, environ: Mapping[str, Any]):
        self._environ = environ

    def __getitem__(self, name: str) -> str:
        value = self._environ.get(_environ_name(name))
        if not value:
            raise KeyError(name)
        return str(value)

    def get(self, name: str, default: Any = None) -> Any:  # no KeyError on the usual miss
        value = self._environ.get(_environ_name(name))
        return str(value) if value else default

    def __iter__(self) -> Iterator[str]:
        for k, v in self._environ.items():
            if k.startswith("HTTP_"):
                yield k[5:].replace("_", "-").lower()
            elif k in ("CONTENT_TYPE", "CONTENT_LENGTH") and v:
                yield k.replace("_", "-").lower()

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _ASGIHeaders(Mapping[str, str]):
    """An ASGI scope's request headers by lower-case name (the last of a repeated one), decoded
    on first access."""

    __slots__ = ("_scope", "_decoded")

    def __init__(self, scope: Mapping[str, Any]):
        self._scope = scope
        self._decoded: Optional[Dict[str, str]] = None

    def _all(self) -> Dict[str, str]:
        if self._decoded is None:
            self._decoded = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1")
                             for k, v in self._scope.get("headers", [])}
        return self._decoded

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def _asgi_client(scope: Mapping[str, Any]) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


#: A key function: the request's key for a keyed limit, or None to skip that check for it.
KeyFunction = Callable[[Request], Optional[Key]]


def client_ip(request: Request) -> Optional[Key]:
    """The peer's address as the server saw it. Behind a proxy that is the proxy: use
    ``header("x-forwarded-for")`` only when the proxy sets it (clients can forge it)."""
    return request.client or None


def header(name: str) -> KeyFunction:
    """A key function reading a request header (an API key, a tenant id...); requests without
    it skip the check. The middleware reads it straight from the environ or scope."""
    return _HeaderKey(name)


class _HeaderKey:
    """``header(name)``: the header's lower-case name and its WSGI environ and ASGI spellings,
    computed once."""

    __slots__ = ("name", "environ_name", "scope_name")

    def __init__(self, name: str):
        self.name = name.lower()
        self.environ_name = _environ_name(self.name)
        # ASGI servers give header names in lower case (the ASGI HTTP spec).
        self.scope_name = self.name.encode("latin-1")

    def __call__(self, request: Request) -> Optional[Key]:
        return request.headers.get(self.name) or None

    def __repr__(self) -> str:
        return f"header({self.name!r})"


@dataclass(frozen=True)
class Check:
    """One limit a request must pass: ``limit`` names it in the file; ``key`` (for a keyed
    limit) derives the request's key, or returns None to skip the check for this request;
    ``cost`` is the units it takes (an int, or a function of the request)."""

    limit: str
    key: Optional[KeyFunction] = None
    cost: Union[int, Callable[[Request], int]] = 1


@dataclass(frozen=True)
class Verdict:
    """A guard's decision for one request: admitted or not, and the response header fields
    (``RateLimit``, ``RateLimit-Policy``, and ``Retry-After`` when denied) the core rendered."""

    allowed: bool
    headers: Dict[str, str]
    outcome: Optional[Composed]

    def __bool__(self) -> bool:
        return self.allowed


class RateLimited(Exception):
    """Raised by ``Guard.limit`` (the decorator) for a denied call: map it to a 429 response
    with ``headers`` (Flask: ``@app.errorhandler(RateLimited)``; FastAPI:
    ``@app.exception_handler(RateLimited)``)."""

    def __init__(self, verdict: Verdict):
        super().__init__(f"rate limited; retry after {verdict.headers.get('Retry-After')} s")
        self.verdict = verdict
        self.headers = verdict.headers


class AtCapacity(RateLimited):
    """Raised by ``Guard.limit`` when an adaptive concurrency check has no permit free: the
    server is at capacity, answer ``503 Service Unavailable`` with ``headers``."""


class Guard:
    """The limits a web application checks per request. ``path`` and ``definitions`` are given
    to ``Limiter.create_or_open`` (every worker may pass the same; one creates the file) or,
    with ``definitions=None``, the file is opened as it is. ``checks`` lists what each request
    must pass, in order. ``mode`` (e.g. 0o660) is for a file shared across users.

    ``on_conflict`` is ``Limiter.create_or_open``'s: with ``"refuse"`` (the default) a file
    whose limits differ from ``definitions`` raises DefinitionConflictError (naming both
    values of every differing field) in the worker that attaches; with ``"adopt"`` the file
    takes the new definitions live (a deploy that raises a rate from 200/s to 300/s: workers
    started after it decide at 300/s, and so does every process already attached).

    ``rate_limit_headers=False`` leaves the ``RateLimit`` and ``RateLimit-Policy`` fields out
    of every verdict (a denial still carries ``Retry-After``); ``policy_header=False`` leaves
    out ``RateLimit-Policy`` alone. The policy of each set of checks is rendered once and again
    at most once a second (a retuned limit shows within a second)."""

    #: How long a rendered RateLimit-Policy value is used before the limits are read again.
    POLICY_REFRESH = 1.0

    def __init__(self, path: PathArg, definitions: Optional[Mapping[str, Spec]],
                 checks: Sequence[Check], *, mode: Optional[int] = None,
                 on_conflict: str = "refuse", rate_limit_headers: bool = True,
                 policy_header: bool = True):
        if not checks:
            raise ValueError("a Guard needs at least one Check")
        if on_conflict not in ("refuse", "adopt"):
            raise ValueError(f"on_conflict must be 'refuse' or 'adopt', not {on_conflict!r:.80}")
        self.path = path
        self.definitions = dict(definitions) if definitions is not None else None
        self.checks = list(checks)
        self.mode = mode
        self.on_conflict = on_conflict
        self.rate_limit_headers = rate_limit_headers
        self.policy_header = policy_header and rate_limit_headers
        self._lock = threading.Lock()
        self._pid = -1
        self._limits: List[Limit] = []
        # Every check reads its key from the environ or scope itself (a header or the peer's
        # address, or no key) and costs a fixed amount: the middleware needs no Request.
        self._direct = all(not callable(c.cost) and
                           (c.key is None or c.key is client_ip or isinstance(c.key, _HeaderKey))
                           for c in self.checks)
        # The per-request work in one native call (keys read from the environ or scope, the
        # decision, the fields), built when the guard attaches; ``_fast`` is the same plan when
        # the middleware needs nothing else per request (no adaptive check to hold).
        self._web: Optional[_native.WebPlan] = None
        self._fast: Optional[_native.WebPlan] = None
        # The adaptive concurrency checks' limits (held for the request, not decided) with
        # the key function of a keyed one, and the bits of the checks that are decided.
        self._adaptive: List[Tuple[Limit, Optional[KeyFunction]]] = []
        self._decided = 0
        self._policies: Dict[int, Tuple[Tuple[str, str], Tuple[bytes, bytes]]] = {}
        self._policies_at = 0.0
        # The child of a fork attaches again (its first decision reads the new pid); a weak
        # reference, so that the hook keeps no guard alive.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget(ref))

    def limits(self) -> List[Limit]:
        """The checks' limits, attached in this process (again after a fork)."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    if self.definitions is None:
                        limiter = Limiter.open(self.path, mode=self.mode)
                    else:
                        limiter = Limiter.create_or_open(self.path, self.definitions,
                                                         mode=self.mode,
                                                         on_conflict=self.on_conflict)
                    with limiter:
                        self._limits = [limiter.limit(c.limit) for c in self.checks]
                    self._adaptive_checks()
                    self._web = self._plan() if self._direct else None
                    self._fast = None if self._adaptive else self._web
                    self._policies = {}
                    self._pid = os.getpid()
        return self._limits

    def _adaptive_checks(self) -> None:
        """Sort the attached checks: adaptive concurrency limits are held per request (a keyed
        one for the request's key, no cost), the others decided."""
        self._adaptive, self._decided = [], 0
        for bit, (check, limit) in enumerate(zip(self.checks, self._limits)):
            if isinstance(limit.created_definition, AdaptiveConcurrency):
                keyed = limit.created_definition.keyed is not None
                if keyed and check.key is None:
                    raise ValueError(f"check {check.limit!r}: a keyed adaptive concurrency "
                                     "limit needs a key function (key=...)")
                if not keyed and check.key is not None:
                    raise ValueError(f"check {check.limit!r}: an adaptive concurrency limit "
                                     "takes no key (it is not keyed)")
                self._adaptive.append((limit, check.key))
            else:
                self._decided |= 1 << bit

    def _hold(self, request_of: Callable[[], Request]
              ) -> Tuple[Optional[List[AdaptivePermit]], List[Tuple[str, str]]]:
        """A permit of every adaptive check (of a keyed one, for the key its function gives
        ``request_of()``; none when it gives None), and their header fields; (None, the
        refusal's fields, Retry-After among them) when one has no permit free (those taken are
        given back unused)."""
        held: List[AdaptivePermit] = []
        taken: List[Tuple[Limit, Optional[Key]]] = []
        request: Optional[Request] = None
        for limit, key_of in self._adaptive:
            key: Optional[Key] = None
            if key_of is not None:
                request = request or request_of()
                key = key_of(request)
                if key is None:
                    continue
            permit = limit.try_acquire_adaptive(key)
            if permit is None:
                for p in held:
                    p.release("dropped")
                # Retry after about one request's time (the core rounds it up to whole
                # seconds, at least one).
                rtt = limit.adaptive_status(key).rtt_recent_us or 1e6
                refused = Decision(False, retry_after_ns=int(rtt * 1000))
                return None, self._adaptive_fields([(limit, key, refused)])
            held.append(permit)
            taken.append((limit, key))
        return held, self._adaptive_fields([(limit, key, _ADMITTED) for limit, key in taken])

    def _adaptive_fields(self, items: List[Tuple[Limit, Optional[Key], Decision]]
                         ) -> List[Tuple[str, str]]:
        """The core's RateLimit fields of adaptive limits (qu="concurrent-requests"; a keyed
        one's its key's), as the options ask for them; Retry-After for a refusal."""
        if not items:
            return []
        values = []
        for limit, key, decision in items:
            status = limit.adaptive_status(key)
            values.append((limit.name, status.permits, status.in_flight, decision))
        rate_limit, policy, retry_after = _native.concurrent_values(*values)
        fields = []
        if self.rate_limit_headers:
            fields.append(("RateLimit", rate_limit))
            if self.policy_header:
                fields.append(("RateLimit-Policy", policy))
        if retry_after:
            fields.append(("Retry-After", retry_after))
        return fields

    def _plan(self) -> _native.WebPlan:
        """The native plan of the decided checks: per check its bit in the mask, its limit,
        where its key is (0: no key, 1: a header, by its environ key and its ASGI name, 2: the
        peer's address) and its cost."""
        steps = []
        for bit, (check, limit) in enumerate(zip(self.checks, self._limits)):
            if not self._decided >> bit & 1:
                continue
            if check.key is None:
                steps.append((1 << bit, limit, 0, "", b"", cast(int, check.cost)))
            elif isinstance(check.key, _HeaderKey):
                steps.append((1 << bit, limit, 1, check.key.environ_name, check.key.scope_name,
                              cast(int, check.cost)))
            else:  # client_ip
                steps.append((1 << bit, limit, 2, "", b"", cast(int, check.cost)))
        return _native.WebPlan(steps, self.rate_limit_headers, self.policy_header,
                               self.POLICY_REFRESH, _DENIED, _BODY)

    def decide(self, request: Request) -> Verdict:
        """Decide for one request: every check (those whose key function gave a key, and the
        unkeyed ones) in one all-or-nothing call. A guard with an adaptive concurrency check
        raises TypeError: its permit is held for the request, which only the middleware can."""
        if self.limits() and self._adaptive:
            raise TypeError("Guard.decide: an adaptive concurrency check holds a permit for the "
                            "whole request; use WSGIMiddleware, ASGIMiddleware or Guard.limit")
        return self._rate_verdict(request)

    def _rate_verdict(self, request: Request) -> Verdict:
        items, mask = self._items_of(request)
        if not items:
            return Verdict(True, {}, None)
        outcome = try_acquire_all(*items)
        return Verdict(outcome.allowed, dict(self._fields(outcome, mask)), outcome)

    def _admit_call(self, request: Request) -> None:
        """The decorator's rate checks for one call: RateLimited when denied."""
        verdict = self._rate_verdict(request)
        if not verdict.allowed:
            raise RateLimited(verdict)

    def _held_for_call(self, request_of: Callable[[], Request]) -> List[AdaptivePermit]:
        """The decorator's adaptive permits for one call: AtCapacity when one has none free."""
        held, fields = self._hold(request_of)
        if held is None:
            raise AtCapacity(Verdict(False, dict(fields), None))
        return held

    def _fields(self, outcome: Composed, mask: int) -> List[Tuple[str, str]]:
        """The response header fields of an outcome: the core's RateLimit state and Retry-After
        (rendered per request), RateLimit-Policy (rendered per set of checks), each only when
        the options ask for it."""
        if not self.rate_limit_headers:
            return [] if outcome.allowed else [("Retry-After", outcome._state_values()[1])]
        rate_limit, retry_after = outcome._state_values()
        if not rate_limit:  # concurrency limits alone
            return [("Retry-After", retry_after)] if retry_after else []
        fields = [("RateLimit", rate_limit)]
        if self.policy_header:
            fresh = _monotonic() - self._policies_at < self.POLICY_REFRESH
            fields.append((fresh and self._policies.get(mask) or self._policy(mask))[0])
        if retry_after:
            fields.append(("Retry-After", retry_after))
        return fields

    def _encoded_fields(self, outcome: Composed, mask: int) -> List[Tuple[bytes, bytes]]:
        """``_fields`` as ASGI header pairs (lower-case names; the policy encoded once)."""
        if not self.rate_limit_headers:
            return [] if outcome.allowed else [
                (b"retry-after", outcome._state_values()[1].encode())]
        rate_limit, retry_after = outcome._state_values()
        if not rate_limit:  # concurrency limits alone
            return [(b"retry-after", retry_after.encode())] if retry_after else []
        fields = [(b"ratelimit", rate_limit.encode())]
        if self.policy_header:
            fresh = _monotonic() - self._policies_at < self.POLICY_REFRESH
            fields.append((fresh and self._policies.get(mask) or self._policy(mask))[1])
        if retry_after:
            fields.append((b"retry-after", retry_after.encode()))
        return fields

    def _policy(self, mask: int) -> Tuple[Tuple[str, str], Tuple[bytes, bytes]]:
        """The RateLimit-Policy field of the checks in ``mask`` (bit i: check i took part), as
        the core renders it from the limits' live parameters, for WSGI and for ASGI; rendered
        once per set and again after POLICY_REFRESH seconds."""
        if _monotonic() - self._policies_at < self.POLICY_REFRESH:
            policy = self._policies.get(mask)
            if policy is not None:
                return policy
        else:
            self._policies = {}
            self._policies_at = _monotonic()
        pairs = [(limit, _ADMITTED) for bit, limit in enumerate(self._limits) if mask >> bit & 1]
        value = _native.header_values(*pairs)[1]
        policy = self._policies[mask] = (("RateLimit-Policy", value),
                                         (b"ratelimit-policy", value.encode()))
        return policy

    def _wsgi_verdict(self, environ: Mapping[str, Any]) -> Tuple[bool, List[Tuple[str, str]]]:
        """(admitted, the fields to add) for a WSGI request: the native plan's when the keys
        are read from the environ, else through a Request and the key functions."""
        if self._web is not None and self._pid != -1:
            return self._web.wsgi(environ)
        items, mask = self._items_of(Request.from_wsgi(environ))
        if not items:
            return True, []
        outcome = _native.try_acquire_all(*items)
        return outcome.allowed, self._fields(outcome, mask)

    def _asgi_verdict(self, scope: Mapping[str, Any]) -> Tuple[bool, List[Tuple[bytes, bytes]]]:
        """(admitted, the header pairs to add) for an ASGI request, as ``_wsgi_verdict``."""
        if self._web is not None and self._pid != -1:
            return self._web.asgi(scope)
        items, mask = self._items_of(Request.from_asgi(scope))
        if not items:
            return True, []
        outcome = _native.try_acquire_all(*items)
        return outcome.allowed, self._encoded_fields(outcome, mask)

    def _items_of(self, request: Request) -> Tuple[List[Any], int]:
        """The try_acquire_all items of a Request and the mask of the checks in them."""
        items: List[Any] = []
        mask = 0
        limits = self._limits if self._pid != -1 else self.limits()
        for bit, (check, limit) in enumerate(zip(self.checks, limits)):
            if not self._decided >> bit & 1:
                continue
            cost = check.cost(request) if callable(check.cost) else check.cost
            if check.key is None:
                items.append((limit, cost))
            else:
                key = check.key(request)
                if key is None:
                    continue
                items.append((limit, key, cost))
            mask |= 1 << bit
        return items, mask

    def limit(self, request: Optional[Callable[..., Request]] = None) -> Callable[[_F], _F]:
        """A decorator for a function or coroutine function: decide before each call and raise
        RateLimited when denied. ``request`` builds the Request from the call's arguments
        (default: the first argument that is a Request, a WSGI environ, an ASGI scope, or has a
        ``scope``/``environ`` attribute, as Starlette's and Werkzeug's requests do). When none
        is found and a check needs a key, the call raises TypeError rather than skip the keyed
        checks (Flask views get no request argument: pass ``request=`` reading
        ``flask.request.environ``)."""
        keyed = any(check.key is not None for check in self.checks)

        def build(*args: Any, **kwargs: Any) -> Request:
            if request is not None:
                return request(*args, **kwargs)
            found = _request_of_args(*args, **kwargs)
            if found is _EMPTY and keyed:
                raise TypeError(
                    "Guard.limit: no request among the arguments to derive keys from; pass "
                    "request=<a function of the arguments returning a shmlimit.web.Request>")
            return found

        def decorate(fn: _F) -> _F:
            if inspect.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    if self.limits() and self._adaptive:
                        return await acall_holding(self, build, fn, args, kwargs)
                    self._admit_call(build(*args, **kwargs))
                    return await fn(*args, **kwargs)
                return cast(_F, async_wrapper)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if self.limits() and self._adaptive:
                    return call_holding(self, build, fn, args, kwargs)
                self._admit_call(build(*args, **kwargs))
                return fn(*args, **kwargs)
            return cast(_F, wrapper)

        return decorate


_EMPTY = Request("", "", {}, "", {})


def _request_of_args(*args: Any, **kwargs: Any) -> Request:
    for arg in list(args) + list(kwargs.values()):
        if isinstance(arg, Request):
            return arg
        environ = getattr(arg, "environ", None)
        if isinstance(arg, dict) and "REQUEST_METHOD" in arg:
            return Request.from_wsgi(arg)
        if isinstance(environ, dict):
            return Request.from_wsgi(environ)
        scope = getattr(arg, "scope", None)
        if isinstance(arg, dict) and arg.get("type") in ("http", "websocket"):
            return Request.from_asgi(arg)
        if isinstance(scope, dict) and scope.get("type") in ("http", "websocket"):
            return Request.from_asgi(scope)
    return _EMPTY


_monotonic = time.monotonic

#: The decision a RateLimit-Policy is rendered with (the policy does not depend on it).
_ADMITTED = Decision(True)


def _forget(ref: "weakref.ref[Guard]") -> None:
    guard = ref()
    if guard is not None:
        guard._pid = -1
        guard._web = guard._fast = None


WSGIApp = Callable[[Dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WSGIMiddleware:
    """WSGI middleware: ``app = WSGIMiddleware(app, guard)`` (Flask: ``app.wsgi_app =
    WSGIMiddleware(app.wsgi_app, guard)``)."""

    def __init__(self, app: WSGIApp, guard: Guard):
        self.app = app
        self.guard = guard

    def __call__(self, environ: Dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        plan = self.guard._fast
        if plan is not None:  # the whole request in one native call
            # No cast(Iterable[bytes], ...): subscripting a generic is a typing call per request.
            return plan.wsgi_call(self.app, environ, start_response)
        return self._call(environ, start_response)

    def _call(self, environ: Dict[str, Any],
              start_response: Callable[..., Any]) -> Iterable[bytes]:
        guard = self.guard
        if guard._pid == -1:  # not attached in this process yet (or forked since): no getpid
            guard.limits()
            if guard._fast is not None:
                return guard._fast.wsgi_call(self.app, environ, start_response)
        if guard._adaptive:
            return wsgi_holding(self.app, guard, environ, start_response, Request.from_wsgi)
        allowed, fields = guard._wsgi_verdict(environ)
        if not allowed:
            start_response("429 Too Many Requests", _DENIED + fields)
            return [_BODY]
        if not fields:
            return self.app(environ, start_response)

        def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *fields], exc_info)

        return self.app(environ, start)


ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                    Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]


class ASGIMiddleware:
    """ASGI middleware for HTTP requests (lifespan and websocket pass through):
    ``app = ASGIMiddleware(app, guard)`` (FastAPI/Starlette: ``app.add_middleware(
    ASGIMiddleware, guard=guard)``). The decision is one non-blocking native call: no await."""

    def __init__(self, app: ASGIApp, guard: Guard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
        plan = self.guard._fast
        if plan is not None and scope["type"] == "http":  # the decision in one native call
            wrapped, fields = plan.asgi_send(scope, send)
            if wrapped is not None:
                await self.app(scope, receive, wrapped)
            else:
                await send({"type": "http.response.start", "status": 429,
                            "headers": _DENIED_ENCODED + fields})
                await send({"type": "http.response.body", "body": _BODY})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        guard = self.guard
        if guard._pid == -1:  # not attached in this process yet (or forked since): no getpid
            guard.limits()
            if guard._fast is not None:
                await self(scope, receive, send)
                return
        if guard._adaptive:
            await asgi_holding(self.app, guard, scope, receive, send, Request.from_asgi)
            return
        allowed, fields = guard._asgi_verdict(scope)
        if not allowed:
            await send({"type": "http.response.start", "status": 429,
                        "headers": _DENIED_ENCODED + fields})
            await send({"type": "http.response.body", "body": _BODY})
            return
        if not fields:
            await self.app(scope, receive, send)
            return

        # A plain function returning send's awaitable: no coroutine of its own per message.
        def send_with_fields(message: MutableMapping[str, Any]) -> Awaitable[None]:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *fields]}
            return send(message)

        await self.app(scope, receive, send_with_fields)
