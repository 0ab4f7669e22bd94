"""slowapi under real uvicorn servers, four worker processes in all, its storage
``shmlimit://``: one limit of 30 per hour shared by every client, for each strategy slowapi
takes (fixed window, moving window, sliding window counter). Ten requests one after another,
then 110 sent at once over many connections: exactly 30 are admitted across all the workers
(with ``memory://`` each worker would admit its own 30), and the rate-limit headers slowapi
writes (``headers_enabled=True``) count down the one shared budget.

The workers are two uvicorn servers of ``--workers 2`` on two ports, the requests alternating
between them: the kernel may hand every connection of one port to one worker, and the test
must see more than one process decide."""

import http.client
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Tuple

from ._support import FileTest, need
from .test_web import free_port, stop_server, wait_listening

APP = '''
import os

from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded

import shmlimit.limits  # noqa: F401  (registers shmlimit://)

limiter = Limiter(key_func=lambda request: "everyone", storage_uri=os.environ["STORAGE_URI"],
                  strategy=os.environ["STRATEGY"], headers_enabled=True)
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.middleware("http")
async def worker(request: Request, call_next):
    response = await call_next(request)
    response.headers["X-Worker"] = str(os.getpid())
    return response


@app.get("/")
@limiter.limit("30/hour")
async def index(request: Request, response: Response):
    return {"worker": os.getpid()}
'''

Reply = Tuple[int, Dict[str, str]]


def get(port: int) -> Reply:
    """One GET / on a connection of its own: the status and the headers (lower-cased)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


class SlowapiUnderUvicorn(FileTest):
    SEQUENTIAL, CONCURRENT, THREADS, LIMIT = 10, 110, 6, 30

    def concurrent(self, ports: List[int]) -> List[Reply]:
        replies: List[Reply] = []
        lock = threading.Lock()

        def client(first: int) -> None:
            for i in range(self.CONCURRENT // self.THREADS + 1):
                reply = get(ports[(first + i) % len(ports)])
                with lock:
                    if len(replies) < self.CONCURRENT:
                        replies.append(reply)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(self.THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return replies

    def check_headers(self, strategy: str, status: int, h: Dict[str, str]) -> int:
        """The headers of one reply as slowapi writes them; returns X-RateLimit-Remaining."""
        self.assertEqual(h.get("x-ratelimit-limit"), str(self.LIMIT), (strategy, h))
        remaining = int(h["x-ratelimit-remaining"])
        self.assertTrue(0 <= remaining < self.LIMIT, (strategy, h))
        # slowapi writes 1 + the window's reset time (Unix seconds), and Retry-After as the
        # seconds from now to it: within the hour the limit is over.
        now = time.time()
        reset = float(h["x-ratelimit-reset"])
        self.assertTrue(now - 2 <= reset <= now + 3600 + 2, (strategy, reset, now))
        retry_after = int(h["retry-after"])
        self.assertTrue(0 <= retry_after <= 3601, (strategy, h))
        if status == 429:
            self.assertEqual(remaining, 0, (strategy, h))
        return remaining

    def test_every_strategy_holds_one_limit_across_four_workers(self) -> None:
        need("slowapi")
        need("fastapi")
        need("uvicorn")
        with open(os.path.join(self.dir, "app.py"), "w") as f:
            f.write(APP)
        for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
            path = os.path.join(self.dir, f"{strategy}.shmlimit")
            env = dict(os.environ, STORAGE_URI=f"shmlimit://{path}", STRATEGY=strategy,
                       PYTHONPATH=self.dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
            servers: List[Tuple[int, "subprocess.Popen[bytes]"]] = []
            errors: List[bytes] = []
            try:
                for _ in range(2):
                    port = free_port()
                    servers.append((port, subprocess.Popen(
                        [sys.executable, "-m", "uvicorn", "app:app", "--workers", "2", "--host",
                         "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level",
                         "warning"],
                        cwd=self.dir, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)))
                for port, proc in servers:
                    wait_listening(port, proc)
                time.sleep(1)  # every worker booted
                ports = [port for port, _ in servers]
                # One after another: each reply's Remaining is the budget left after it, the
                # same whichever worker answered.
                first = [get(ports[i % 2]) for i in range(self.SEQUENTIAL)]
                rest = self.concurrent(ports)
            finally:
                for _, proc in servers:
                    errors.append(stop_server(proc))
            err = b"".join(errors)
            replies = first + rest
            statuses = [s for s, _ in replies]
            self.assertEqual(statuses.count(200), self.LIMIT, (strategy, err[-2000:]))
            self.assertEqual(statuses.count(429), len(replies) - self.LIMIT, strategy)
            self.assertEqual([s for s, _ in first], [200] * self.SEQUENTIAL, strategy)
            self.assertEqual([self.check_headers(strategy, s, h) for s, h in first],
                             list(range(self.LIMIT - 1, self.LIMIT - 1 - self.SEQUENTIAL, -1)),
                             strategy)
            admitted = [self.check_headers(strategy, s, h) for s, h in rest if s == 200]
            for s, h in rest:
                self.check_headers(strategy, s, h)
            # Read after each admission, by many workers at once: never above what was left
            # when the concurrent requests began, and the last admission leaves nothing.
            self.assertTrue(all(r < self.LIMIT - self.SEQUENTIAL for r in admitted), admitted)
            self.assertIn(0, admitted, strategy)
            workers = {h["x-worker"] for _, h in replies}
            self.assertGreaterEqual(len(workers), 2, f"{strategy}: one worker answered all")
