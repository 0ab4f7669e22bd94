"""Where a flask-limiter request's time goes: the same app as bench/flask_limiter.py, called
in this process through WSGI (no server, no client, no sockets), side by side in one run: no
limiter, ``shmlimit://``, ``memory://`` and, when ``SHMLIMIT_REDIS_URL`` names a reachable
redis-server, ``redis://``; then the storage calls flask-limiter made per request.

Usage: python bench/flask_limiter_inproc.py [--quick]

Each figure is the median over repeats of the mean time of one request in a loop, in
microseconds. The difference between "no limiter" and a storage is flask-limiter's work plus
the storage's; the storage's own share is in bench/limits_storage.py. ``STRATEGY`` picks
flask-limiter's strategy (default fixed-window), ``HEADERS=1`` turns on its rate-limit headers.
"""

from __future__ import annotations

import importlib
import io
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import shmlimit.limits  # noqa: F401  (registers shmlimit://)

LIMITS = {"fixed-window": "10000000 per second", "sliding-window-counter": "60000 per second",
          "moving-window": "8000 per second"}


App = Callable[..., Iterable[bytes]]


def app_for(uri: Optional[str]) -> Tuple[App, Dict[str, int], Any]:
    """The benchmark's Flask app on ``uri`` (None: no limiter), a count of the storage calls
    it makes by method name, and the storage (None without a limiter)."""
    from flask import Flask
    app = Flask(__name__)
    calls: Dict[str, int] = {}
    if uri is None:
        @app.route("/")
        def index() -> str:
            return "ok"
        return app.wsgi_app, calls, None
    # The package, not bench/flask_limiter.py beside this script (first on sys.path when the
    # script is run by path). Untyped: its exports and types vary between its versions.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    flask_limiter: Any = importlib.import_module("flask_limiter")
    strategy = os.environ.get("STRATEGY", "fixed-window")
    limiter: Any = flask_limiter.Limiter(lambda: "everyone", app=app, storage_uri=uri,
                                         strategy=strategy,
                                         headers_enabled=os.environ.get("HEADERS") == "1")

    def limited() -> str:
        return "ok"
    app.add_url_rule("/", "limited", limiter.limit(LIMITS[strategy])(limited))

    # Count the storage's calls: wrap each public method of the instance flask-limiter made.
    storage: Any = limiter._storage  # noqa: SLF001  (flask-limiter keeps it there)
    for name in ("incr", "get", "get_expiry", "acquire_entry", "get_moving_window",
                 "acquire_sliding_window_entry", "get_sliding_window", "check"):
        method = getattr(storage, name, None)
        if method is None:
            continue

        def counted(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            calls[_n] = calls.get(_n, 0) + 1
            return _m(*args, **kwargs)
        setattr(storage, name, counted)
    return app.wsgi_app, calls, storage


def request(app: App) -> None:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "SERVER_NAME": "bench",
               "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.0", "REMOTE_ADDR": "127.0.0.1",
               "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr}
    status: List[str] = []

    def start_response(s: str, headers: Any, exc_info: Any = None) -> None:
        status.append(s)

    for _ in app(environ, start_response):
        pass
    if not status[0].startswith("200"):
        raise RuntimeError(f"a benchmark request was answered {status[0]}")


def median_us(app: App, loop: int, repeats: int) -> float:
    for _ in range(min(loop, 500)):
        request(app)
    runs: List[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loop):
            request(app)
        runs.append((time.perf_counter() - start) / loop * 1e6)
    return statistics.median(runs)


def main() -> None:
    quick = "--quick" in sys.argv
    loop, repeats = (500, 3) if quick else (2_000, 5)
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=base) as d:
        configs: Dict[str, Optional[str]] = {
            "no limiter": None,
            "shmlimit://": f"shmlimit://{d}/bench.shmlimit?keys=64&moving_window=8192",
            "memory://": "memory://",
        }
        redis_url = os.environ.get("SHMLIMIT_REDIS_URL")
        if redis_url:
            configs["redis://"] = redis_url
        apps = {name: app_for(uri) for name, uri in configs.items()}
        results: Dict[str, List[float]] = {name: [] for name in configs}
        # Rounds alternate the configurations, as machine load drifts.
        for _ in range(3):
            for name, (app, _calls, _storage) in apps.items():
                results[name].append(median_us(app, loop, repeats))
        strategy = os.environ.get("STRATEGY", "fixed-window")
        headers = "on" if os.environ.get("HEADERS") == "1" else "off"
        print(f"flask-limiter ({strategy}, headers {headers}) in process, us per request "
              f"(median of 3 rounds)")
        bare = statistics.median(results["no limiter"])
        for name, rates in results.items():
            m = statistics.median(rates)
            _app, calls, _storage = apps[name]
            done = (500 + loop * repeats) * 3
            per = ", ".join(f"{k} {v / done:.2f}" for k, v in sorted(calls.items()))
            print(f"  {name:<14}{m:>8.1f}  (+{m - bare:.1f} over no limiter; "
                  f"{bare / m:.2f}x its rate){'; storage calls per request: ' + per if per else ''}")
        for _app, _calls, storage in apps.values():
            timer = getattr(storage, "timer", None)  # memory://'s expiry thread
            if timer is not None:
                timer.cancel()


if __name__ == "__main__":
    main()
