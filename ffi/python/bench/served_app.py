"""What the two real-server benchmarks (bench/server.py, bench/worker.py) serve and send.

A site directory holds ``limits.shm``, two token buckets of 10^9 per second (``global``, and
``per_client`` keyed by the ``x-api-key`` header: every request is admitted), and ``app.py``,
the app a server loads. ``APP_BASE`` opens every app.py: the bare app (answers "ok", 2 bytes)
as ``bare_wsgi`` and ``bare_asgi``, and the guards over the site's limits, ``guard`` with the
RateLimit fields and ``quiet`` without them (``rate_limit_headers=False, policy_header=False``);
each benchmark appends what it serves around them. ``HEADERS`` are what a browser sends
besides ``Host`` (which the client adds): 12 request headers in all.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from typing import Dict, List

import shmlimit

APP_BASE = textwrap.dedent('''
    import os
    from shmlimit.web import ASGIMiddleware, Check, Guard, WSGIMiddleware, header

    def bare_wsgi(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    async def bare_asgi(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    checks = [Check("per_client", key=header("x-api-key")), Check("global")]
    guard = Guard(os.environ["SHMLIMIT_BENCH_PATH"], None, checks)
    quiet = Guard(os.environ["SHMLIMIT_BENCH_PATH"], None, checks, rate_limit_headers=False,
                  policy_header=False)
''')

HEADERS: Dict[str, str] = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Accept": "application/json",
    "Accept-Encoding": "gzip, deflate, br",
    "Accept-Language": "en-GB,en;q=0.5",
    "X-Api-Key": "client-42",
    "X-Request-Id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "Referer": "https://app.example.com/dashboard",
    "Cookie": "session=2f6c1e0a9b8d7c6e5f4a3b2c1d0e9f8a",
    "Cache-Control": "no-cache",
    "Pragma": "no-cache",
    "Sec-Fetch-Mode": "cors",
}

HUGE = 10**9  # one token per nanosecond: every request is admitted


def make_site(site: str, app: str) -> str:
    """Write ``app`` (``APP_BASE`` and what follows it) as ``site``/app.py and create the
    limits file ``site``/limits.shm; its path, for ``SHMLIMIT_BENCH_PATH``."""
    with open(os.path.join(site, "app.py"), "w") as f:
        f.write(app)
    path = os.path.join(site, "limits.shm")
    shmlimit.Limiter.create_or_open(path, {
        "global": shmlimit.TokenBucket(rate=HUGE, per=1),
        "per_client": shmlimit.TokenBucket(rate=HUGE, per=1, keyed=shmlimit.Keyed(1024)),
    }).close()
    return path


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def command(server: str, app: str, port: int) -> List[str]:
    """The command line that serves ``app.{app}`` on ``port``: gunicorn (one sync worker) or
    uvicorn (one process)."""
    if server == "gunicorn":
        return [sys.executable, "-m", "gunicorn", "--workers", "1", "--bind",
                f"127.0.0.1:{port}", "--log-level", "warning", f"app:{app}"]
    return [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
            "--lifespan", "off", "--no-access-log", "--log-level", "warning", f"app:{app}"]


def wait_listening(port: int, proc: "subprocess.Popen[bytes]") -> None:
    """Return once the server ``proc`` accepts connections on ``port``; raise if it exits
    first or does not listen within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not listen within 30 s")
