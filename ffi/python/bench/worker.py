"""The web middleware's cost timed inside a real server's worker, where each request runs cold.

Usage: python bench/worker.py  (env: ROUNDS=3, SERVERS=gunicorn,uvicorn,
MODES=bare,bare2,decision,render,middleware,quiet)

The served app is wrapped in a function that times the app call with ``time.perf_counter_ns``
(the middleware, the inner app, and the server's ``start_response`` or ``send`` inside both):
gunicorn (one sync worker) and uvicorn (one process), sequential requests with 12 browser
headers, WARM warm-up requests then N timed ones. Modes: ``bare`` the app; ``bare2`` the app
sending the middleware's two fields as static headers (the server's cost of sending them);
``decision`` only the ``try_acquire_all`` of the two checks timed, ``render`` only the core's
rendering of ``RateLimit`` (``_state_values``) timed (gunicorn only); ``middleware`` and
``quiet`` (fields off) the middleware over the app. The table gives the median over rounds of
each round's median, ns.
"""
from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Dict, List, Tuple

import shmlimit

WARM, N = 300, 2000
MODES = "bare,bare2,decision,render,middleware,quiet"
APP = textwrap.dedent('''
    import os, time, json
    from shmlimit.web import ASGIMiddleware, Check, Guard, WSGIMiddleware, header
    pc = time.perf_counter_ns
    WARM, N = %d, %d
    OUT = os.environ["OUT"]

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
    F = [("RateLimit", '"per_client";r=999999999;t=1, "global";r=999999999;t=1'),
         ("RateLimit-Policy", '"per_client";q=1000000000;w=1, "global";q=1000000000;w=1')]

    def bare2_wsgi(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2"), *F])
        return [b"ok"]

    async def bare2_asgi(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2"),
                                *[(k.lower().encode(), v.encode()) for k, v in F]]})
        await send({"type": "http.response.body", "body": b"ok"})

    from shmlimit import _native
    def decision_wsgi(environ, start_response):
        l0, l1 = guard.limits()
        t0 = pc()
        _native.try_acquire_all((l0, environ["HTTP_X_API_KEY"], 1), (l1, 1))
        record(pc() - t0)
        return bare_wsgi(environ, start_response)

    def render_wsgi(environ, start_response):
        l0, l1 = guard.limits()
        o = _native.try_acquire_all((l0, environ["HTTP_X_API_KEY"], 1), (l1, 1))
        t0 = pc()
        o._state_values()
        record(pc() - t0)
        return bare_wsgi(environ, start_response)

    APPS = {"bare2": (bare2_wsgi, bare2_asgi), "decision": (decision_wsgi, None),
            "render": (render_wsgi, None),
            "bare": (bare_wsgi, bare_asgi),
            "middleware": (WSGIMiddleware(bare_wsgi, guard), ASGIMiddleware(bare_asgi, guard)),
            "quiet": (WSGIMiddleware(bare_wsgi, quiet), ASGIMiddleware(bare_asgi, quiet))}
    w, a = APPS[os.environ["MODE"]]
    times = []

    def record(t):
        times.append(t)
        if len(times) == WARM + N:
            with open(OUT, "w") as f:
                json.dump(times[WARM:], f)

    def wsgi(environ, start_response):
        if os.environ["MODE"] in ("decision", "render"):
            return w(environ, start_response)
        t0 = pc()
        r = w(environ, start_response)
        record(pc() - t0)
        return r

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return await a(scope, receive, send)
        t0 = pc()
        await a(scope, receive, send)
        record(pc() - t0)
''' % (WARM, N))

HEADERS = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Accept": "application/json", "Accept-Encoding": "gzip, deflate, br",
    "Accept-Language": "en-GB,en;q=0.5", "X-Api-Key": "client-42",
    "X-Request-Id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "Referer": "https://app.example.com/dashboard",
    "Cookie": "session=2f6c1e0a9b8d7c6e5f4a3b2c1d0e9f8a", "Cache-Control": "no-cache",
    "Pragma": "no-cache", "Sec-Fetch-Mode": "cors",
}


def port_free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run(site: str, path: str, server: str, mode: str) -> List[int]:
    port = port_free()
    out = os.path.join(site, f"{server}-{mode}.json")
    env = dict(os.environ, SHMLIMIT_BENCH_PATH=path, MODE=mode, OUT=out, PYTHONPATH=site)
    if server == "gunicorn":
        cmd = [sys.executable, "-m", "gunicorn", "--workers", "1", "--bind",
               f"127.0.0.1:{port}", "--log-level", "warning", "app:wsgi"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
               "--lifespan", "off", "--no-access-log", "--log-level", "warning", "app:asgi"]
    proc = subprocess.Popen(cmd, cwd=site, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(WARM + N):
            conn.request("GET", "/", headers=HEADERS)
            r = conn.getresponse()
            assert r.status == 200 and r.read() == b"ok"
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(100):
            if os.path.exists(out):
                break
            time.sleep(0.05)
        time.sleep(0.1)
        with open(out) as f:
            times: List[int] = json.load(f)
            return times
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def main() -> None:
    site = tempfile.mkdtemp()
    try:
        measure(site)
    finally:
        shutil.rmtree(site, ignore_errors=True)


def measure(site: str) -> None:
    with open(os.path.join(site, "app.py"), "w") as f:
        f.write(APP)
    path = os.path.join(site, "limits.shm")
    shmlimit.Limiter.create_or_open(path, {
        "global": shmlimit.TokenBucket(rate=10**9, per=1),
        "per_client": shmlimit.TokenBucket(rate=10**9, per=1, keyed=shmlimit.Keyed(1024)),
    }).close()
    rounds = int(os.environ.get("ROUNDS", "3"))
    res: Dict[Tuple[str, str], List[float]] = {}
    for _ in range(rounds):
        for server in os.environ.get("SERVERS", "gunicorn,uvicorn").split(","):
            for mode in os.environ.get("MODES", MODES).split(","):
                if server == "uvicorn" and mode in ("decision", "render"):
                    continue  # timed in the WSGI app only
                t = run(site, path, server, mode)
                res.setdefault((server, mode), []).append(statistics.median(t))
    print("| server | app | app call in the worker, median ns per request (per round) |")
    print("|---|---|---:|")
    for (server, mode), meds in res.items():
        print(f"| {server} | {mode} | {statistics.median(meds):,.0f} "
              f"({', '.join(f'{m:,.0f}' for m in meds)}) |")


if __name__ == "__main__":
    main()
