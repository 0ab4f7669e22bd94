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
import statistics
import subprocess
import tempfile
import textwrap
import time
from typing import Dict, List, Tuple

from served_app import APP_BASE, HEADERS, command, free_port, make_site, wait_listening

WARM, N = 300, 2000
MODES = "bare,bare2,decision,render,middleware,quiet"
APP = APP_BASE + textwrap.dedent('''
    import time, json
    pc = time.perf_counter_ns
    WARM, N = %d, %d
    OUT = os.environ["OUT"]
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


def run(site: str, path: str, server: str, mode: str) -> List[int]:
    port = free_port()
    out = os.path.join(site, f"{server}-{mode}.json")
    env = dict(os.environ, SHMLIMIT_BENCH_PATH=path, MODE=mode, OUT=out, PYTHONPATH=site)
    app = "wsgi" if server == "gunicorn" else "asgi"
    proc = subprocess.Popen(command(server, app, port), cwd=site, env=env,
                            stdout=subprocess.DEVNULL)
    try:
        wait_listening(port, proc)
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
    path = make_site(site, APP)
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
