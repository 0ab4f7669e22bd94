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
carries the two ``RateLimit`` fields too. Every value in those fields is rendered by the C core
from its decisions (``shmlimit.rate_limit_headers``): nothing is computed here.

Pre-fork servers: the guard attaches to the file lazily, in the process that decides, and again
after a fork (it notices the pid changed), so creating it in a gunicorn config or at import
time of the app is fine; see ffi/README.md for gunicorn's ``post_fork`` and ``user=``.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from dataclasses import dataclass, field
from typing import (Any, Awaitable, Callable, Dict, Iterable, List, Mapping, MutableMapping,
                    Optional, Sequence, Tuple, TypeVar, Union, cast)

from . import (Composed, Key, Limit, Limiter, PathArg, Spec, rate_limit_headers,
               try_acquire_all)

__all__ = [
    "Request", "Check", "Guard", "Verdict", "RateLimited", "WSGIMiddleware", "ASGIMiddleware",
    "client_ip", "header",
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
        headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items()
                   if k.startswith("HTTP_")}
        for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(name):
                headers[name.replace("_", "-").lower()] = str(environ[name])
        return cls(str(environ.get("REQUEST_METHOD", "GET")), str(environ.get("PATH_INFO", "")),
                   headers, str(environ.get("REMOTE_ADDR", "")), environ)

    @classmethod
    def from_asgi(cls, scope: Mapping[str, Any]) -> "Request":
        headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1")
                   for k, v in scope.get("headers", [])}
        client = scope.get("client")
        return cls(str(scope.get("method", "GET")), str(scope.get("path", "")), headers,
                   str(client[0]) if client else "", scope)


#: A key function: the request's key for a keyed limit, or None to skip that check for it.
KeyFunction = Callable[[Request], Optional[Key]]


def client_ip(request: Request) -> Optional[Key]:
    """The peer's address as the server saw it. Behind a proxy that is the proxy: use
    ``header("x-forwarded-for")`` only when the proxy sets it (clients can forge it)."""
    return request.client or None


def header(name: str) -> KeyFunction:
    """A key function reading a request header (an API key, a tenant id...); requests without
    it skip the check."""
    lower = name.lower()

    def key(request: Request) -> Optional[Key]:
        return request.headers.get(lower) or None

    return key


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


class Guard:
    """The limits a web application checks per request. ``path`` and ``definitions`` are given
    to ``Limiter.create_or_open`` (every worker may pass the same; one creates the file) or,
    with ``definitions=None``, the file is opened as it is. ``checks`` lists what each request
    must pass, in order. ``mode`` (e.g. 0o660) is for a file shared across users.

    ``on_conflict`` is ``Limiter.create_or_open``'s: with ``"refuse"`` (the default) a file
    whose limits differ from ``definitions`` raises DefinitionConflictError (naming both
    values of every differing field) in the worker that attaches; with ``"adopt"`` the file
    takes the new definitions live (a deploy that raises a rate from 200/s to 300/s: workers
    started after it decide at 300/s, and so does every process already attached)."""

    def __init__(self, path: PathArg, definitions: Optional[Mapping[str, Spec]],
                 checks: Sequence[Check], *, mode: Optional[int] = None,
                 on_conflict: str = "refuse"):
        if not checks:
            raise ValueError("a Guard needs at least one Check")
        if on_conflict not in ("refuse", "adopt"):
            raise ValueError(f"on_conflict must be 'refuse' or 'adopt', not {on_conflict!r:.80}")
        self.path = path
        self.definitions = dict(definitions) if definitions is not None else None
        self.checks = list(checks)
        self.mode = mode
        self.on_conflict = on_conflict
        self._lock = threading.Lock()
        self._pid = -1
        self._limits: List[Limit] = []

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
                    self._pid = os.getpid()
        return self._limits

    def decide(self, request: Request) -> Verdict:
        """Decide for one request: every check (those whose key function gave a key, and the
        unkeyed ones) in one all-or-nothing call."""
        items: List[Any] = []
        for check, limit in zip(self.checks, self.limits()):
            cost = check.cost(request) if callable(check.cost) else check.cost
            if check.key is None:
                items.append((limit, cost))
            else:
                key = check.key(request)
                if key is not None:
                    items.append((limit, key, cost))
        if not items:
            return Verdict(True, {}, None)
        outcome = try_acquire_all(*items)
        return Verdict(outcome.allowed, rate_limit_headers(outcome), outcome)

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
                    verdict = self.decide(build(*args, **kwargs))
                    if not verdict.allowed:
                        raise RateLimited(verdict)
                    return await fn(*args, **kwargs)
                return cast(_F, async_wrapper)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                verdict = self.decide(build(*args, **kwargs))
                if not verdict.allowed:
                    raise RateLimited(verdict)
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


_BODY = b"429 Too Many Requests: rate limited, retry later\n"


def _denied_headers(verdict: Verdict) -> List[Tuple[str, str]]:
    return [("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(_BODY)))] + list(verdict.headers.items())


WSGIApp = Callable[[Dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WSGIMiddleware:
    """WSGI middleware: ``app = WSGIMiddleware(app, guard)`` (Flask: ``app.wsgi_app =
    WSGIMiddleware(app.wsgi_app, guard)``)."""

    def __init__(self, app: WSGIApp, guard: Guard):
        self.app = app
        self.guard = guard

    def __call__(self, environ: Dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        verdict = self.guard.decide(Request.from_wsgi(environ))
        if not verdict.allowed:
            start_response("429 Too Many Requests", _denied_headers(verdict))
            return [_BODY]
        extra = list(verdict.headers.items())

        def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, list(headers) + extra, exc_info)

        return self.app(environ, start)


ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                    Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]


class ASGIMiddleware:
    """ASGI middleware for HTTP requests (lifespan and websocket pass through):
    ``app = ASGIMiddleware(app, guard)`` (FastAPI/Starlette: ``app.add_middleware(
    ASGIMiddleware, guard=guard)``). The decision is one non-blocking C call: no await."""

    def __init__(self, app: ASGIApp, guard: Guard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        verdict = self.guard.decide(Request.from_asgi(scope))
        encoded = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                   for k, v in verdict.headers.items()]
        if not verdict.allowed:
            await send({"type": "http.response.start", "status": 429, "headers": [
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in _denied_headers(verdict)]})
            await send({"type": "http.response.body", "body": _BODY})
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + encoded
            await send(message)

        await self.app(scope, receive, send_with_headers)
