"""Web requests and decorated calls under adaptive concurrency permits, for the middleware and
the decorator of ``shmlimit.web``: the permits taken before the rate checks, held while the
application answers, released with the request's outcome and latency; and the canned
refusals (429 for a rate check, 503 for no permit). See ``shmlimit.web`` for what each
outcome means."""

from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Awaitable, Callable, Dict, Iterable, Iterator, List,
                    MutableMapping, Optional, Tuple)

from .permits import AdaptivePermit

if TYPE_CHECKING:
    from .web import Guard, Request


_BODY = b"429 Too Many Requests: rate limited, retry later\n"
_DENIED: List[Tuple[str, str]] = [("Content-Type", "text/plain; charset=utf-8"),
                                  ("Content-Length", str(len(_BODY)))]
_DENIED_ENCODED: List[Tuple[bytes, bytes]] = [(k.lower().encode(), v.encode())
                                              for k, v in _DENIED]
_BUSY = b"503 Service Unavailable: at capacity, retry later\n"
_REFUSED: List[Tuple[str, str]] = [("Content-Type", "text/plain; charset=utf-8"),
                                   ("Content-Length", str(len(_BUSY)))]


def _encoded(fields: List[Tuple[str, str]]) -> List[Tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in fields]


def _merged(fields: List[Tuple[Any, Any]], more: List[Tuple[Any, Any]]) -> List[Tuple[Any, Any]]:
    """``fields`` with ``more`` added: a field both have is one list (``a, b``; the larger
    Retry-After), as the core joins the items of several limits."""
    out = list(fields)
    for name, value in more:
        for i, (n, v) in enumerate(out):
            if n.lower() == name.lower():
                if name.lower() in ("retry-after", b"retry-after"):
                    out[i] = (n, max(v, value, key=int))
                else:
                    out[i] = (n, v + (", " if isinstance(v, str) else b", ") + value)
                break
        else:
            out.append((name, value))
    return out


def _outcome_of(status: Optional[int], error: Optional[BaseException], whole: bool) -> str:
    """How a request under an adaptive permit ended (see the module docs)."""
    if error is not None:
        if isinstance(error, TimeoutError):
            return "timeout"
        return "error" if isinstance(error, Exception) else "dropped"
    if status is None or not whole:
        return "dropped"
    if status == 504:
        return "timeout"
    return "error" if status >= 500 else "ok"


def _release(held: List[AdaptivePermit], outcome: str) -> None:
    for permit in held:
        permit.release(outcome)


class _Held:
    """A WSGI response iterable holding the request's adaptive permits: released with the
    request's outcome when the server closes it (after the last byte, or early when the
    client is gone)."""

    def __init__(self, held: List[AdaptivePermit], state: Dict[str, Any]):
        self.held = held
        self.state = state
        self.body: Iterable[bytes] = ()
        self.whole = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.body:
                yield chunk
        except BaseException as e:
            self.state["error"] = e
            raise
        self.whole = True

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            _release(self.held, _outcome_of(self.state.get("status"), self.state.get("error"),
                                            self.whole))


def wsgi_holding(app: Callable[..., Iterable[bytes]], guard: "Guard", environ: Dict[str, Any],
                 start_response: Callable[..., Any],
                 request_of: Callable[[Dict[str, Any]], "Request"]) -> Iterable[bytes]:
    """The request under the guard's adaptive permits (see the module docs); ``request_of``
    makes the Request a keyed adaptive check's key function reads."""
    held, held_fields = guard._hold(lambda: request_of(environ))
    if held is None:
        start_response("503 Service Unavailable", _REFUSED + held_fields)
        return [_BUSY]
    try:
        allowed, fields = guard._wsgi_verdict(environ)
    except BaseException:
        _release(held, "dropped")
        raise
    if not allowed:
        _release(held, "dropped")
        start_response("429 Too Many Requests", _DENIED + fields)
        return [_BODY]
    fields = _merged(fields, held_fields)
    state: Dict[str, Any] = {}
    response = _Held(held, state)

    def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        try:
            state["status"] = int(status[:3])
        except ValueError:
            state["status"] = 500
        return start_response(status, [*headers, *fields], exc_info)

    try:
        response.body = app(environ, start)
    except BaseException as e:
        _release(held, _outcome_of(None, e, False))
        raise
    return response


async def asgi_holding(app: Callable[..., Awaitable[None]], guard: "Guard",
                       scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
                       request_of: Callable[[MutableMapping[str, Any]], "Request"]) -> None:
    """The request under the guard's adaptive permits (see the module docs), as
    ``wsgi_holding``."""
    held, held_fields = guard._hold(lambda: request_of(scope))
    if held is None:
        await send({"type": "http.response.start", "status": 503,
                    "headers": _encoded(_REFUSED + held_fields)})
        await send({"type": "http.response.body", "body": _BUSY})
        return
    try:
        allowed, fields = guard._asgi_verdict(scope)
    except BaseException:
        _release(held, "dropped")
        raise
    if not allowed:
        _release(held, "dropped")
        await send({"type": "http.response.start", "status": 429,
                    "headers": _DENIED_ENCODED + fields})
        await send({"type": "http.response.body", "body": _BODY})
        return
    fields = _merged(fields, _encoded(held_fields))
    state: Dict[str, Any] = {"status": None, "whole": False}

    def send_with_fields(message: MutableMapping[str, Any]) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            state["status"] = int(message.get("status", 500))
            message = {**message, "headers": [*message.get("headers", ()), *fields]}
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            state["whole"] = True
        return send(message)

    try:
        await app(scope, receive, send_with_fields)
    except BaseException as e:  # a cancellation (asyncio.CancelledError) is "dropped"
        _release(held, _outcome_of(state["status"], e, False))
        raise
    _release(held, _outcome_of(state["status"], None, state["whole"]))


def _held_and_admitted(guard: "Guard", build: Callable[..., "Request"], args: Tuple[Any, ...],
                       kwargs: Dict[str, Any]) -> List[AdaptivePermit]:
    """The adaptive permits of one decorated call, then its rate checks (the permits given
    back unused when they deny or fail)."""
    held = guard._held_for_call(lambda: build(*args, **kwargs))
    try:
        guard._admit_call(build(*args, **kwargs))
    except BaseException:
        _release(held, "dropped")
        raise
    return held


def call_holding(guard: "Guard", build: Callable[..., "Request"], fn: Callable[..., Any],
                 args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """A call of ``Guard.limit``'s decorated function under the guard's adaptive permits:
    taken before the rate checks (AtCapacity when one has none free; a call they deny gives
    them back unused), released with the call's outcome and the time since the grant."""
    held = _held_and_admitted(guard, build, args, kwargs)
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:
        _release(held, _outcome_of(None, e, False))
        raise
    _release(held, "ok")
    return result


async def acall_holding(guard: "Guard", build: Callable[..., "Request"],
                        fn: Callable[..., Awaitable[Any]], args: Tuple[Any, ...],
                        kwargs: Dict[str, Any]) -> Any:
    """``call_holding`` for a coroutine function (a cancelled call reports ``"dropped"``)."""
    held = _held_and_admitted(guard, build, args, kwargs)
    try:
        result = await fn(*args, **kwargs)
    except BaseException as e:
        _release(held, _outcome_of(None, e, False))
        raise
    _release(held, "ok")
    return result
