"""The middleware holding an adaptive concurrency permit per request: under a real gunicorn
(4 sync workers, WSGI) and two real uvicorn servers (ASGI) never more requests in the app at
once than the shared limit, 503 with Retry-After for the rest, the RateLimit fields with
qu="concurrent-requests"; and, through a real threaded WSGI server and an ASGI call, each
request's outcome (5xx: error, a denied rate check: nothing, a cancelled request: dropped)
and latency reported to the limit."""

import asyncio
import http.client
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any, Dict, List, MutableMapping, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from shmlimit import AdaptiveConcurrency, Limiter, TokenBucket
from shmlimit.web import ASGIMiddleware, Check, Guard, WSGIMiddleware

from ._support import FileTest, clear_of_remeasure, need
from .test_web import free_port, stop_server, wait_listening

# The app of the real servers: sleeps `?seconds` (0.3 by default) and says when it ran, on
# CLOCK_MONOTONIC (time.monotonic), which every process on the host shares.
APP = textwrap.dedent('''
    import asyncio, json, os, time
    import shmlimit
    from shmlimit.web import ASGIMiddleware, Check, Guard, WSGIMiddleware

    guard = Guard(os.environ["SHMLIMIT_FILE"],
                  {"dep": shmlimit.AdaptiveConcurrency(min=2, max=2)}, [Check("dep")])

    def body(t0, t1):
        return json.dumps({"pid": os.getpid(), "t0": t0, "t1": t1}).encode()

    def plain(environ, start_response):
        t0 = time.monotonic()
        time.sleep(float(environ.get("QUERY_STRING") or 0.3))
        data = body(t0, time.monotonic())
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(data)))])
        return [data]

    async def plain_asgi(scope, receive, send):
        if scope["type"] != "http":
            return
        t0 = time.monotonic()
        await asyncio.sleep(float(scope.get("query_string", b"").decode() or 0.3))
        data = body(t0, time.monotonic())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    wsgi = WSGIMiddleware(plain, guard)
    asgi = ASGIMiddleware(plain_asgi, guard)
''')


def get(port: int, target: str) -> Tuple[int, Dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", target)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def at_once(ports: List[int], count: int, target: str) -> List[Tuple[int, Dict[str, str], bytes]]:
    """``count`` requests sent at once from threads, spread over ``ports``."""
    results: List[Any] = [None] * count
    go = threading.Barrier(count)

    def client(i: int) -> None:
        go.wait()
        results[i] = get(ports[i % len(ports)], target)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def most_at_once(spans: List[Tuple[float, float]]) -> int:
    """The most spans that overlap at one instant."""
    events = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


class RealServers(FileTest):
    """A limit of 2 permits shared by every worker of a real server, 8 requests of 0.3 s at
    once, three rounds."""

    def serve(self, commands: List[List[str]], ports: List[int]) -> None:
        """One server process per command, listening on the port of the same index."""
        site = self.dir
        with open(os.path.join(site, "adaptive_app.py"), "w") as f:
            f.write(APP)
        env = dict(os.environ, SHMLIMIT_FILE=self.path,
                   PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
        procs = [subprocess.Popen(command, cwd=site, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for command in commands]
        try:
            spans, pids, statuses = [], set(), []
            for port, proc in zip(ports, procs):
                wait_listening(port, proc)
                # One request alone on each server first: every server process answers.
                status, _, body = get(port, "/")
                self.assertEqual(status, 200, body)
                pids.add(json.loads(body)["pid"])
            for _ in range(3):
                for status, headers, body in at_once(ports, 8, "/?0.3"):
                    statuses.append(status)
                    self.assertIn(status, (200, 503), body)
                    self.assertEqual(headers["ratelimit-policy"],
                                     '"dep";q=2;qu="concurrent-requests"')
                    if status == 200:
                        data = json.loads(body)
                        spans.append((data["t0"], data["t1"]))
                        pids.add(data["pid"])
                        self.assertIn(headers["ratelimit"], ('"dep";r=0', '"dep";r=1'))
                        self.assertNotIn("retry-after", headers)
                    else:
                        self.assertEqual(headers["ratelimit"], '"dep";r=0')
                        self.assertGreaterEqual(int(headers["retry-after"]), 1)
                        self.assertIn(b"503", body)
            self.assertLessEqual(most_at_once(spans), 2, spans)
            self.assertGreaterEqual(statuses.count(200), 3, statuses)  # one a round at least
            self.assertGreaterEqual(statuses.count(503), 1, statuses)
            self.assertGreater(len(pids), 1, "several worker processes answered")
            with Limiter.open(self.path) as lim:
                # A worker releases its permit once the response is sent: the client may read
                # the last response a moment before.
                deadline = time.monotonic() + 10
                while lim.limit("dep").adaptive_status().in_flight and \
                        time.monotonic() < deadline:
                    time.sleep(0.01)
                final = lim.limit("dep").adaptive_status()
                self.assertEqual(final.in_flight, 0, "every permit came back")
                self.assertGreaterEqual(final.rtt_recent_us or 0, 300_000,
                                        "the requests' latency was reported")
        finally:
            # Every server stopped before any is judged: a failed check leaves none running.
            errors = [stop_server(proc) for proc in procs]
            for err in errors:
                self.assertNotIn(b"Traceback", err, err.decode()[-3000:])

    def test_gunicorn_workers_share_one_adaptive_limit(self) -> None:
        need("gunicorn")
        port = free_port()
        self.serve([[sys.executable, "-m", "gunicorn", "-w", "4", "--bind",
                     f"127.0.0.1:{port}", "adaptive_app:wsgi"]], [port])

    def test_uvicorn_servers_share_one_adaptive_limit(self) -> None:
        """Two uvicorn servers (processes with an event loop each) on two ports, the requests
        alternating between them: which process accepts is not left to the kernel (with
        `--workers 2` on one port, one worker could take every connection)."""
        need("uvicorn")
        ports = [free_port(), free_port()]
        self.serve([[sys.executable, "-m", "uvicorn", "--port", str(port), "--log-level",
                     "warning", "adaptive_app:asgi"] for port in ports], ports)


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Outcomes(FileTest):
    """What each request reports to the limit (min 1, max 8, starting at 4)."""

    def test_wsgi_outcomes_and_latency_through_a_real_server(self) -> None:
        guard = Guard(self.path, {"dep": AdaptiveConcurrency(min=2, max=8, initial=4),
                                  "api": TokenBucket(rate=3, per=3600)},
                      [Check("api"), Check("dep")])

        def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            # A failure takes longer than a success: reported as ok, it would move the
            # recent RTT to 200 ms.
            if environ["PATH_INFO"] in ("/fail", "/raise"):
                time.sleep(0.2)
            if environ["PATH_INFO"] == "/fail":
                start_response("500 Internal Server Error", [("Content-Length", "0")])
                return [b""]
            if environ["PATH_INFO"] == "/raise":
                raise RuntimeError("the app failed")
            time.sleep(0.05)
            start_response("200 OK", [("Content-Length", "2")])
            return [b"ok"]

        server = make_server("127.0.0.1", 0, WSGIMiddleware(app, guard),
                             server_class=_Threading, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        port = server.server_address[1]
        dep = guard.limits()[1]

        def settled(done: Any) -> Any:
            # The server releases the permit (and reports) once the response is sent: the
            # client may read it a moment before.
            deadline = time.monotonic() + 10
            while not done(dep.adaptive_status()) and time.monotonic() < deadline:
                time.sleep(0.005)
            return dep.adaptive_status()

        clear_of_remeasure(3)  # the samples below are used, the limit moves
        status, headers, _ = get(port, "/slow")
        self.assertEqual(status, 200)
        self.assertEqual(headers["ratelimit"], '"api";r=2;t=1200, "dep";r=3')
        self.assertEqual(headers["ratelimit-policy"],
                         '"api";q=3;w=3600, "dep";q=4;qu="concurrent-requests"')
        s = settled(lambda s: s.rtt_recent_us is not None)
        self.assertGreaterEqual(s.rtt_recent_us or 0, 50_000, "the latency is a sample")
        self.assertEqual((s.limit, s.in_flight), (4, 0))
        for target, limit in (("/fail", 3.6), ("/raise", 3.24)):
            time.sleep(0.03)  # a new window
            status, _, _ = get(port, target)
            self.assertEqual(status, 500)
            s = settled(lambda s, limit=limit: s.in_flight == 0 and s.limit <= limit + 0.01)
            self.assertEqual(s.in_flight, 0)
            self.assertLess(s.rtt_recent_us or 0, 150_000, f"{target} was reported as ok")
            self.assertAlmostEqual(s.limit, limit, delta=0.01, msg=f"{target}: an error backs off")
        # The bucket (3 per hour) is spent: denied with 429, the permit given back unused.
        before = settled(lambda s: s.in_flight == 0)
        status, headers, _ = get(port, "/slow")
        self.assertEqual(status, 429)
        self.assertIn("retry-after", headers)
        after = dep.adaptive_status()
        self.assertEqual((after.in_flight, after.rtt_recent_us, after.limit),
                         (0, before.rtt_recent_us, before.limit))

    def test_a_cancelled_asgi_request_reports_nothing(self) -> None:
        guard = Guard(self.path, {"dep": AdaptiveConcurrency(min=1, max=8)}, [Check("dep")])
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await asyncio.sleep(30)

        sent: List[MutableMapping[str, Any]] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def run() -> Tuple[int, int]:
            mw = ASGIMiddleware(app, guard)
            task = asyncio.ensure_future(mw({"type": "http", "method": "GET", "path": "/",
                                             "headers": []}, receive, send))
            await asyncio.sleep(0.05)
            held = guard.limits()[0].adaptive_status().in_flight
            # The only permit is held: another request is refused with 503.
            await mw({"type": "http", "method": "GET", "path": "/", "headers": []},
                     receive, send)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            return held, guard.limits()[0].adaptive_status().in_flight

        held, after = asyncio.run(run())
        self.assertEqual((held, after), (1, 0))
        self.assertEqual(sent[0]["status"], 503)
        refused = dict(sent[0]["headers"])
        self.assertEqual(refused[b"ratelimit"], b'"dep";r=0')
        self.assertEqual(refused[b"retry-after"], b"1")
        s = guard.limits()[0].adaptive_status()
        self.assertEqual((s.rtt_recent_us, s.limit), (None, 1), "a cancelled request is no sample")

    def test_decide_refuses_an_adaptive_check(self) -> None:
        guard = Guard(self.path, {"dep": AdaptiveConcurrency(min=1, max=8)}, [Check("dep")])
        from shmlimit.web import Request
        with self.assertRaisesRegex(TypeError, "adaptive concurrency"):
            guard.decide(Request("GET", "/", {}, "", {}))
        keyed = Guard(self.path, None, [Check("dep", key=lambda r: "k")])
        with self.assertRaisesRegex(ValueError, "takes no key"):
            keyed.limits()

    def test_the_decorator_holds_an_adaptive_permit_per_call(self) -> None:
        clear_of_remeasure(2)  # the samples are read back
        from shmlimit.web import AtCapacity, RateLimited, Request
        guard = Guard(self.path, {"dep": AdaptiveConcurrency(min=1, max=4),
                                  "api": TokenBucket(rate=3, per=3600)},
                      [Check("dep"), Check("api")])
        dep = guard.limits()[0]
        request = Request("GET", "/", {}, "", {})
        seen: List[int] = []

        @guard.limit(request=lambda *a, **k: request)
        def work(fail: bool = False) -> str:
            seen.append(dep.adaptive_status().in_flight)
            with self.assertRaises(AtCapacity) as refused:  # the one permit is this call's
                work()
            self.assertEqual(refused.exception.headers["Retry-After"], "1")
            self.assertEqual(refused.exception.headers["RateLimit"], '"dep";r=0')
            time.sleep(0.01)
            if fail:
                raise RuntimeError("overloaded")
            return "done"

        self.assertEqual(work(), "done")
        s = dep.adaptive_status()
        self.assertEqual((seen, s.in_flight), ([1], 0))
        self.assertGreaterEqual(s.rtt_recent_us or 0, 10_000, "the call was a sample")
        with self.assertRaises(RuntimeError):
            work(fail=True)
        self.assertEqual(dep.adaptive_status().in_flight, 0)

        @guard.limit(request=lambda *a, **k: request)
        async def awork() -> int:
            await asyncio.sleep(0.001)
            return dep.adaptive_status().in_flight

        self.assertEqual(asyncio.run(awork()), 1)
        self.assertEqual(dep.adaptive_status().in_flight, 0)
        self.assertEqual(guard.limits()[1].peek().remaining, 0, "three calls, three tokens")
        # The bucket is spent: RateLimited, the permit given back unused (no sample).
        before = dep.adaptive_status()
        with self.assertRaises(RateLimited) as denied:
            work()
        self.assertNotIsInstance(denied.exception, AtCapacity)
        with self.assertRaises(RateLimited):
            asyncio.run(awork())
        after = dep.adaptive_status()
        self.assertEqual((after.in_flight, after.rtt_recent_us), (0, before.rtt_recent_us))
