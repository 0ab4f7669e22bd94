"""flask-limiter under a real gunicorn with four sync workers, its storage ``shmlimit://``:
one limit of 30 per hour shared by every client, 120 requests sent at once over many
connections, for each of flask-limiter's strategies; exactly 30 are admitted across all the
workers (with ``memory://`` each worker would admit its own 30)."""

import http.client
import os
import subprocess
import sys
import threading
import time
from typing import List

from ._support import FileTest, need
from .test_web import free_port, stop_server, wait_listening

APP = '''
import os

from flask import Flask
from flask_limiter import Limiter

import shmlimit.limits  # noqa: F401  (registers shmlimit://)

app = Flask(__name__)
limiter = Limiter(lambda: "everyone", app=app, storage_uri=os.environ["STORAGE_URI"],
                  strategy=os.environ["STRATEGY"])


@app.route("/")
@limiter.limit("30 per hour")
def index():
    return str(os.getpid())
'''


class FlaskLimiterUnderGunicorn(FileTest):
    REQUESTS, THREADS, LIMIT = 120, 6, 30

    def hits(self, port: int) -> List[int]:
        statuses: List[int] = []
        lock = threading.Lock()

        def client() -> None:
            for _ in range(self.REQUESTS // self.THREADS):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", "/")
                response = conn.getresponse()
                response.read()
                with lock:
                    statuses.append(response.status)
                conn.close()

        threads = [threading.Thread(target=client) for _ in range(self.THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return statuses

    def test_every_strategy_holds_one_limit_across_four_workers(self) -> None:
        need("flask_limiter")
        need("gunicorn")
        with open(os.path.join(self.dir, "app.py"), "w") as f:
            f.write(APP)
        for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
            path = os.path.join(self.dir, f"{strategy}.shmlimit")
            port = free_port()
            env = dict(os.environ, STORAGE_URI=f"shmlimit://{path}", STRATEGY=strategy,
                       PYTHONPATH=self.dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
            proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-w", "4", "-b", f"127.0.0.1:{port}",
                 "app:app"], cwd=self.dir, env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE)
            try:
                wait_listening(port, proc)
                time.sleep(1)  # every worker booted
                statuses = self.hits(port)
            finally:
                stop_server(proc)
            self.assertEqual(statuses.count(200), self.LIMIT, strategy)
            self.assertEqual(statuses.count(429), self.REQUESTS - self.LIMIT, strategy)
