"""What the web middleware costs per request beyond its decisions, in one run.

Usage: python bench/web.py [--quick]

Each row is a direct call of an app with a realistic request (a WSGI environ as gunicorn's
sync worker builds it, an ASGI scope as uvicorn builds it, 12 request headers each), the same
inner app bare and wrapped in the middleware, at full admission (two token buckets of 10^9 per
second: a keyed per-client limit keyed by the ``x-api-key`` header, and a global one). The ASGI
coroutines are driven with ``send(None)`` (no event loop: the apps never suspend). ``decision``
is the one ``try_acquire_all`` call the middleware makes, timed alone on the same limits, and
``overhead`` is ``middleware - bare - decision``: what the middleware itself costs. The
``no fields`` rows are the same with ``Guard(..., rate_limit_headers=False)``.

Median over repeats of the mean per call, nanoseconds, this machine, the process alone.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, MutableMapping, Tuple

import shmlimit
from shmlimit.web import ASGIMiddleware, Check, Guard, WSGIMiddleware, header

REPEATS = 15
LOOP = 20_000
HUGE = 10**9  # one token per nanosecond: every decision admits

HEADERS: List[Tuple[str, str]] = [
    ("host", "api.example.com"),
    ("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"),
    ("accept", "application/json"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-language", "en-GB,en;q=0.5"),
    ("connection", "keep-alive"),
    ("x-api-key", "client-42"),
    ("x-request-id", "0f8fad5b-d9cb-469f-a165-70867728950e"),
    ("x-forwarded-for", "203.0.113.7"),
    ("x-forwarded-proto", "https"),
    ("cookie", "session=4f2a9c; theme=dark"),
    ("cache-control", "no-cache"),
]


def median_ns(fn: Callable[[], object], loop: int, repeats: int) -> float:
    """The median over ``repeats`` of the mean nanoseconds of one call in a loop of ``loop``."""
    for _ in range(min(loop, 1000)):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loop):
            fn()
        samples.append((time.perf_counter_ns() - start) / loop)
    return statistics.median(samples)


def wsgi_environ() -> Dict[str, Any]:
    environ: Dict[str, Any] = {
        "REQUEST_METHOD": "GET", "SCRIPT_NAME": "", "PATH_INFO": "/api/items",
        "QUERY_STRING": "page=2", "SERVER_NAME": "0.0.0.0", "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "10.0.0.7", "REMOTE_PORT": "51234",
        "RAW_URI": "/api/items?page=2", "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.input": None, "wsgi.errors": sys.stderr, "wsgi.multithread": False,
        "wsgi.multiprocess": True, "wsgi.run_once": False,
    }
    for name, value in HEADERS:
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    return environ


def asgi_scope() -> Dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "server": ("127.0.0.1", 8000), "client": ("10.0.0.7", 51234),
        "scheme": "http", "method": "GET", "root_path": "", "path": "/api/items",
        "raw_path": b"/api/items", "query_string": b"page=2",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in HEADERS],
    }


def wsgi_app(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]


async def asgi_app(scope: MutableMapping[str, Any], receive: Callable[[], Any],
                   send: Callable[[MutableMapping[str, Any]], Any]) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    loop, repeats = (2_000, 5) if quick else (LOOP, REPEATS)
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    path = os.path.join(directory, f"shmlimit-web-bench-{os.getpid()}.shm")
    definitions = {
        "per_client": shmlimit.TokenBucket(rate=HUGE, burst=HUGE, keyed=shmlimit.Keyed(1024)),
        "global": shmlimit.TokenBucket(rate=HUGE, burst=HUGE),
    }
    checks = [Check("per_client", key=header("x-api-key")), Check("global")]
    guard = Guard(path, definitions, checks)
    # The same checks with the RateLimit fields turned off (no response wrapper either).
    quiet = Guard(path, definitions, checks, rate_limit_headers=False)
    try:
        return run(guard, quiet, loop, repeats)
    finally:
        os.unlink(path)


def run(guard: Guard, quiet: Guard, loop: int, repeats: int) -> int:
    per_client, glob = guard.limits()

    def start_response(status: str, headers: List[Tuple[str, str]], exc: Any = None) -> None:
        pass

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b""}

    environ, scope = wsgi_environ(), asgi_scope()
    wsgi = WSGIMiddleware(wsgi_app, guard)
    asgi = ASGIMiddleware(asgi_app, guard)
    wsgi_quiet = WSGIMiddleware(wsgi_app, quiet)
    asgi_quiet = ASGIMiddleware(asgi_app, quiet)

    def drive(coroutine: Any) -> None:
        try:
            coroutine.send(None)
        except StopIteration:
            return
        raise RuntimeError("the app suspended")

    # Every call must be admitted with the fields on: a denial or a missing field would make
    # the middleware's figures those of another path.
    seen: Dict[str, Any] = {}

    def check_start(status: str, headers: List[Tuple[str, str]], exc: Any = None) -> None:
        seen["status"], seen["headers"] = status, dict(headers)

    list(wsgi(dict(environ), check_start))
    assert seen["status"] == "200 OK" and "RateLimit" in seen["headers"], seen

    acquire_all = shmlimit.try_acquire_all
    cases: Dict[str, Callable[[], object]] = {
        "decision": lambda: acquire_all((per_client, "client-42", 1), (glob, 1)),
        "wsgi bare": lambda: wsgi_app(environ, start_response),
        "wsgi middleware": lambda: wsgi(environ, start_response),
        "asgi bare": lambda: drive(asgi_app(scope, receive, send)),
        "asgi middleware": lambda: drive(asgi(scope, receive, send)),
        "wsgi quiet": lambda: wsgi_quiet(environ, start_response),
        "asgi quiet": lambda: drive(asgi_quiet(scope, receive, send)),
    }
    ns = {name: median_ns(fn, loop, repeats) for name, fn in cases.items()}
    print(f"# python {sys.version.split()[0]}, shmlimit {shmlimit.__version__}, "
          f"median of {repeats} loops of {loop}, ns per request")
    print(f"| {'server interface':<16} | {'bare app':>9} | {'middleware':>10} | "
          f"{'decision':>9} | {'overhead':>9} |")
    print(f"|{'-' * 18}|{'-' * 10}:|{'-' * 11}:|{'-' * 10}:|{'-' * 10}:|")
    for kind, row, title in (("wsgi", "middleware", "WSGI"), ("asgi", "middleware", "ASGI"),
                             ("wsgi", "quiet", "WSGI, no fields"),
                             ("asgi", "quiet", "ASGI, no fields")):
        bare, full = ns[f"{kind} bare"], ns[f"{kind} {row}"]
        overhead = full - bare - ns["decision"]
        print(f"| {title:<16} | {bare:>9.0f} | {full:>10.0f} | {ns['decision']:>9.0f} | "
              f"{overhead:>9.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
