"""flask-limiter's requests per second under gunicorn (4 sync workers), side by side in one
run: no limiter, a null storage (one that does nothing and admits everything: flask-limiter's
own cost, the ceiling any storage can reach), ``storage_uri="shmlimit://..."``, ``"memory://"``
(per worker: 4 times the budget) and, when ``SHMLIMIT_REDIS_URL`` names a reachable
redis-server, ``redis://``.

Usage: python bench/flask_limiter.py [--quick]

The app has one route with one limit no run reaches (every request admitted: the figure is
what the storage costs a request), with flask-limiter's fixed-window (10^7 per second),
sliding-window-counter (60,000 per second, the largest a shmlimit sliding counter takes) or
moving-window strategy (8,000 per second; shmlimit's file then has 8,192 log entries per key)
(``STRATEGY``, default fixed-window). Load: 4 client processes
sending ``GET /`` over a new connection each (gunicorn's sync workers close every connection),
for ``SECONDS`` each round; rounds alternate the configurations, and each figure is the median
of its rounds. Client and servers share this machine's cores, so compare within one run only.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

APP = '''
import os
import time

from flask import Flask

app = Flask(__name__)
uri = os.environ.get("STORAGE_URI")
if uri == "null://":
    # A storage that does nothing and admits everything: flask-limiter's own cost alone.
    from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage

    class NullStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport):
        STORAGE_SCHEME = ["null"]

        @property
        def base_exceptions(self):
            return Exception

        def incr(self, key, expiry, amount=1):
            return amount

        def get(self, key):
            return 0

        def get_expiry(self, key):
            return time.time()

        def check(self):
            return True

        def reset(self):
            return 0

        def clear(self, key):
            pass

        def acquire_entry(self, key, limit, expiry, amount=1):
            return True

        def get_moving_window(self, key, limit, expiry):
            return time.time(), 0

        def acquire_sliding_window_entry(self, key, limit, expiry, amount=1):
            return True

        def get_sliding_window(self, key, expiry):
            return 0, 0.0, 0, 0.0

        def clear_sliding_window(self, key, expiry):
            pass
if uri:
    from flask_limiter import Limiter
    import shmlimit.limits  # noqa: F401

    limiter = Limiter(lambda: "everyone", app=app, storage_uri=uri,
                      strategy=os.environ.get("STRATEGY", "fixed-window"))
    limit = limiter.limit(os.environ["LIMIT"])
else:
    def limit(f):
        return f


@app.route("/")
@limit
def index():
    return "ok"
'''

REQUEST = b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n"


def client(port: int, seconds: float, out: "multiprocessing.Queue[int]") -> None:
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(REQUEST)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        if data.startswith(b"HTTP/1.1 200") or data.startswith(b"HTTP/1.0 200"):
            done += 1
    out.put(done)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


LIMITS = {"fixed-window": "10000000 per second", "sliding-window-counter": "60000 per second",
          "moving-window": "8000 per second"}


def serve(site: str, uri: Optional[str], port: int) -> "subprocess.Popen[bytes]":
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""),
               LIMIT=LIMITS[os.environ.get("STRATEGY", "fixed-window")])
    env.pop("STORAGE_URI", None)
    if uri:
        env["STORAGE_URI"] = uri
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "4", "-b",
                             f"127.0.0.1:{port}", "app:app"], cwd=site, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            time.sleep(1.5)  # every worker booted
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gunicorn did not start")


def measure(port: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("fork")
    out: "multiprocessing.Queue[int]" = ctx.Queue()
    procs = [ctx.Process(target=client, args=(port, seconds, out)) for _ in range(4)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def main() -> None:
    quick = "--quick" in sys.argv
    seconds, rounds = (2.0, 1) if quick else (4.0, 3)
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=base) as site:
        with open(os.path.join(site, "app.py"), "w") as f:
            f.write(APP)
        configs: Dict[str, Optional[str]] = {
            "no limiter": None,
            "null storage": "null://",
            "shmlimit://": f"shmlimit://{site}/bench.shmlimit?keys=64&moving_window=8192",
            "memory://": "memory://",
        }
        redis_url = os.environ.get("SHMLIMIT_REDIS_URL")
        if redis_url:
            configs["redis://"] = redis_url
        results: Dict[str, List[float]] = {name: [] for name in configs}
        for _ in range(rounds):
            for name, uri in configs.items():
                port = free_port()
                proc = serve(site, uri, port)
                try:
                    results[name].append(measure(port, seconds))
                finally:
                    proc.terminate()
                    proc.wait(20)
        strategy = os.environ.get("STRATEGY", "fixed-window")
        print(f"flask-limiter ({strategy}) under gunicorn -w 4, requests/s (median of "
              f"{rounds} rounds of {seconds:.0f} s)")
        bare = statistics.median(results["no limiter"])
        redis = statistics.median(results["redis://"]) if "redis://" in results else None
        for name, rates in results.items():
            m = statistics.median(rates)
            vs_redis = f", {m / redis:.2f}x redis://" if redis else ""
            print(f"  {name:<14}{m:>9.0f}  ({m / bare:.2f}x no limiter{vs_redis}; rounds "
                  f"{', '.join(f'{r:.0f}' for r in rates)})")


if __name__ == "__main__":
    main()
