"""The web middleware's own cost per request under real servers, at full admission.

Usage: python bench/server.py [--quick]

The same app (answers "ok", 2 bytes) bare and behind shmlimit's middleware over two limits (a
global token bucket and a per-client one keyed by the ``x-api-key`` header: one composed check,
both 10^9 per second so that every request is admitted), and behind the same middleware with
its fields off (``rate_limit_headers=False, policy_header=False``: what the server pays to send
the two response fields is the difference), served by gunicorn (one sync worker: WSGI) and
uvicorn (one process: ASGI). A keep-alive client in this process sends REQUESTS
requests per round over CONNECTIONS connections, with 12 request headers as a browser sends.
Measured in the server: the CPU time its worker spent per request (the sum of
``/proc/PID/task/*/schedstat``, nanosecond run time, over the timed requests), and the requests
per second the client saw. The middleware's own cost is the difference in server CPU time per
request from the bare app, minus nothing: it includes the decision (about 0.6 us, timed alone
by bench/web.py).

Rounds alternate the modes; the table gives the median and the range over rounds.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Dict, List, Tuple

import shmlimit
from served_app import APP_BASE, HEADERS, command, free_port, make_site, wait_listening

QUICK = "--quick" in sys.argv
REQUESTS = 4_000 if QUICK else 20_000
WARM_UP = 1_000
ROUNDS = 3 if QUICK else 7
CONNECTIONS = 4

APP = APP_BASE + textwrap.dedent('''
    middleware_wsgi = WSGIMiddleware(bare_wsgi, guard)
    middleware_asgi = ASGIMiddleware(bare_asgi, guard)
    quiet_wsgi = WSGIMiddleware(bare_wsgi, quiet)
    quiet_asgi = ASGIMiddleware(bare_asgi, quiet)
''')

# (row name, server, app object in app.py)
MODES: List[Tuple[str, str, str]] = [
    ("WSGI (gunicorn, 1 sync worker), bare", "gunicorn", "bare_wsgi"),
    ("WSGI (gunicorn, 1 sync worker), middleware", "gunicorn", "middleware_wsgi"),
    ("WSGI (gunicorn, 1 sync worker), middleware, no fields", "gunicorn", "quiet_wsgi"),
    ("ASGI (uvicorn, 1 process), bare", "uvicorn", "bare_asgi"),
    ("ASGI (uvicorn, 1 process), middleware", "uvicorn", "middleware_asgi"),
    ("ASGI (uvicorn, 1 process), middleware, no fields", "uvicorn", "quiet_asgi"),
]


def worker_pid(server: str, proc: "subprocess.Popen[bytes]") -> int:
    """The process that serves: gunicorn's one worker (the master's child), uvicorn itself."""
    if server == "uvicorn":
        return proc.pid
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            children = f.read().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise RuntimeError("gunicorn started no worker")


def cpu_ns(pid: int) -> int:
    """Run time of every thread of ``pid`` so far, in ns (schedstat's first field)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return total


def send(port: int, count: int) -> None:
    """``count`` requests over CONNECTIONS keep-alive connections (reopened when the server
    closes one, as gunicorn's sync worker does after every response)."""
    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(n):
            conn.request("GET", "/", headers=HEADERS)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or body != b"ok":
                raise RuntimeError(f"status {response.status}: {body[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=client, args=(count // CONNECTIONS,))
               for _ in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def one_round(site: str, path: str, server: str, app: str) -> Tuple[float, float]:
    """Server CPU ns per request and requests per second, one server start."""
    port = free_port()
    env = dict(os.environ, SHMLIMIT_BENCH_PATH=path,
               PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(command(server, app, port), cwd=site, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, proc)
        pid = worker_pid(server, proc)
        send(port, WARM_UP)
        before, start = cpu_ns(pid), time.monotonic()
        send(port, REQUESTS)
        elapsed, used = time.monotonic() - start, cpu_ns(pid) - before
        return used / REQUESTS, REQUESTS / elapsed
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    for module in ("gunicorn", "uvicorn"):
        if shutil.which(module) is None and not _importable(module):
            sys.exit(f"{module} is not installed: pip install gunicorn uvicorn")
    site = tempfile.mkdtemp()
    try:
        path = make_site(site, APP)
        cpu: Dict[str, List[float]] = {name: [] for name, _, _ in MODES}
        rps: Dict[str, List[float]] = {name: [] for name, _, _ in MODES}
        for r in range(ROUNDS):
            for name, server, app in MODES:
                c, q = one_round(site, path, server, app)
                cpu[name].append(c)
                rps[name].append(q)
            print(f"round {r + 1}/{ROUNDS} done", file=sys.stderr)
    finally:
        shutil.rmtree(site, ignore_errors=True)
    http = ("httptools" if _importable("httptools")
            else "h11 (pure Python; uvicorn[standard] brings httptools)")
    print(f"{REQUESTS} requests a round, {ROUNDS} rounds, {CONNECTIONS} keep-alive connections; "
          f"Python {sys.version.split()[0]}, shmlimit {shmlimit.__version__}; uvicorn's HTTP "
          f"parser: {http}\n")
    print("| server and app | server CPU per request, us (median, range) | requests/s (median) "
          "| middleware's own cost, us (median of the rounds' differences) |")
    print("|---|---:|---:|---:|")
    bare: List[float] = []
    for name, _, app in MODES:
        us = [c / 1000 for c in cpu[name]]
        cost = ""
        if app.startswith("bare"):
            bare = us
        else:
            cost = f"{statistics.median([m - b for m, b in zip(us, bare)]):.2f}"
        print(f"| {name} | {statistics.median(us):.1f} ({min(us):.1f}-{max(us):.1f}) "
              f"| {statistics.median(rps[name]):,.0f} | {cost} |")


def _importable(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
