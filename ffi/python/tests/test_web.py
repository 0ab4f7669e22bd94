"""The WSGI and ASGI middleware and the decorator: in-process through wsgiref and a bare ASGI
call, then the examples under a real gunicorn and a real uWSGI (4 workers, the Flask app) and two real uvicorn
servers (the FastAPI app), driven by real HTTP clients, with the admitted counts checked
against the bounds the shared file enforces across the workers."""

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import unittest
import wsgiref.util
from typing import Any, Dict, List, MutableMapping, Optional, Tuple

from shmlimit import Keyed, Limiter, TokenBucket
from shmlimit.web import (ASGIMiddleware, Check, Guard, RateLimited, Request, WSGIMiddleware,
                          client_ip, header)

from ._support import FileTest, need, need_program

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
HOUR = 3600


def guard(path: str, per_client: int = 2, glob: int = 3) -> Guard:
    return Guard(path, {
        "per_client": TokenBucket(rate=per_client, per=HOUR, keyed=Keyed(64)),
        "global": TokenBucket(rate=glob, per=HOUR),
    }, [Check("per_client", key=header("x-api-key")), Check("global")])


class InProcess(FileTest):
    def wsgi_call(self, app: WSGIMiddleware, key: Optional[str]) -> Tuple[str, Dict[str, str]]:
        environ: Dict[str, Any] = {}
        wsgiref.util.setup_testing_defaults(environ)
        if key is not None:
            environ["HTTP_X_API_KEY"] = key
        seen: Dict[str, Any] = {}

        def start_response(status: str, headers: List[Tuple[str, str]], exc: Any = None) -> Any:
            seen["status"], seen["headers"] = status, dict(headers)
        body = b"".join(app(environ, start_response))
        self.assertTrue(body)
        return seen["status"], seen["headers"]

    def test_wsgi_admits_within_the_bounds_and_answers_429_with_the_cores_headers(self) -> None:
        def inner(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]

        g = guard(self.path)
        app = WSGIMiddleware(inner, g)
        statuses = [self.wsgi_call(app, "alice") for _ in range(3)]
        self.assertEqual([s for s, _ in statuses], ["200 OK", "200 OK", "429 Too Many Requests"])
        ok, denied = statuses[0][1], statuses[2][1]
        # The values are the core's: the same call from C renders the same strings.
        self.assertEqual(ok["RateLimit-Policy"],
                         '"per_client";q=2;w=3600, "global";q=3;w=3600')
        self.assertTrue(ok["RateLimit"].startswith('"per_client";r=1;t='), ok)
        self.assertNotIn("Retry-After", ok)
        self.assertEqual(ok["Content-Type"], "text/plain")
        self.assertTrue(int(denied["Retry-After"]) >= 1799, denied)
        self.assertIn('"per_client";r=0', denied["RateLimit"])
        # Bob passes his own limit; the global one (3) denies the fourth admission overall.
        self.assertEqual(self.wsgi_call(app, "bob")[0], "200 OK")
        status, headers = self.wsgi_call(app, "carol")
        self.assertEqual(status, "429 Too Many Requests")
        self.assertIn('"global";r=0', headers["RateLimit"])
        # Carol's denial took nothing from her own budget.
        limit = g.limits()[0]
        self.assertEqual(limit.peek_key("carol").remaining, 1)
        # A request without the header skips the keyed check, not the global one.
        self.assertEqual(self.wsgi_call(app, None)[0], "429 Too Many Requests")

    def test_the_policy_is_rendered_once_and_again_after_a_retune(self) -> None:
        def inner(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            start_response("200 OK", [])
            return [b"ok"]

        g = guard(self.path, per_client=100, glob=100)
        app = WSGIMiddleware(inner, g)
        policy = '"per_client";q=100;w=3600, "global";q=100;w=3600'
        self.assertEqual(self.wsgi_call(app, "alice")[1]["RateLimit-Policy"], policy)
        # Without the key the keyed check is skipped: another set of checks, its own policy.
        self.assertEqual(self.wsgi_call(app, None)[1]["RateLimit-Policy"],
                         '"global";q=100;w=3600')
        g.limits()[1].set_token_bucket(burst=200, rate=200, per=HOUR)
        # The state is read per request; the policy is the one rendered for this set...
        ok = self.wsgi_call(app, "alice")[1]
        self.assertEqual(ok["RateLimit-Policy"], policy)
        self.assertIn('"global";r=', ok["RateLimit"])
        # ...until it is rendered again, at most POLICY_REFRESH seconds later.
        time.sleep(Guard.POLICY_REFRESH)
        self.assertEqual(self.wsgi_call(app, "alice")[1]["RateLimit-Policy"],
                         '"per_client";q=100;w=3600, "global";q=200;w=3600')

    def test_fields_the_options_turn_off_are_left_out(self) -> None:
        def inner(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]

        def checks() -> List[Check]:
            return [Check("per_client", key=header("x-api-key")), Check("global")]

        definitions = {"per_client": TokenBucket(rate=1, per=HOUR, keyed=Keyed(64)),
                       "global": TokenBucket(rate=10, per=HOUR)}
        bare = WSGIMiddleware(inner, Guard(self.path, definitions, checks(),
                                           rate_limit_headers=False))
        status, ok = self.wsgi_call(bare, "alice")
        self.assertEqual((status, ok), ("200 OK", {"Content-Type": "text/plain"}))
        status, denied = self.wsgi_call(bare, "alice")
        self.assertEqual(status, "429 Too Many Requests")
        self.assertNotIn("RateLimit", denied)
        self.assertNotIn("RateLimit-Policy", denied)
        self.assertTrue(int(denied["Retry-After"]) >= 1799, denied)
        no_policy = WSGIMiddleware(inner, Guard(self.path, definitions, checks(),
                                                policy_header=False))
        ok = self.wsgi_call(no_policy, "bob")[1]
        self.assertTrue(ok["RateLimit"].startswith('"per_client";r=0;t='), ok)
        self.assertNotIn("RateLimit-Policy", ok)

    def test_custom_key_functions_see_the_same_request(self) -> None:
        def inner(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            start_response("200 OK", [])
            return [b"ok"]

        seen: List[Request] = []

        def key(request: Request) -> Optional[str]:
            seen.append(request)
            return request.headers.get("x-api-key")

        g = Guard(self.path, {"per_client": TokenBucket(rate=1, per=HOUR, keyed=Keyed(64))},
                  [Check("per_client", key=key)])
        app = WSGIMiddleware(inner, g)
        self.assertEqual(self.wsgi_call(app, "alice")[0], "200 OK")
        self.assertEqual(self.wsgi_call(app, "alice")[0], "429 Too Many Requests")
        request = seen[0]
        self.assertEqual(request.headers["x-api-key"], "alice")
        self.assertIn("x-api-key", dict(request.headers))
        self.assertIsNone(request.headers.get("x-missing"))
        scope = {"type": "http", "method": "POST", "path": "/p", "client": ("10.0.0.1", 1),
                 "headers": [(b"x-api-key", b"a"), (b"x-api-key", b"b")]}
        asgi = Request.from_asgi(scope)
        self.assertEqual((asgi.method, asgi.path, asgi.client, asgi.headers["x-api-key"]),
                         ("POST", "/p", "10.0.0.1", "b"))

    def test_asgi_middleware_and_the_decorator(self) -> None:
        async def inner(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        g = guard(self.path)
        app = ASGIMiddleware(inner, g)

        async def call(key: str) -> Tuple[int, Dict[str, str]]:
            sent: List[MutableMapping[str, Any]] = []

            async def send(message: MutableMapping[str, Any]) -> None:
                sent.append(message)

            async def receive() -> Dict[str, Any]:
                return {"type": "http.request", "body": b""}

            scope = {"type": "http", "method": "GET", "path": "/", "client": ("10.0.0.1", 1),
                     "headers": [(b"x-api-key", key.encode())]}
            await app(scope, receive, send)
            start = sent[0]
            return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}

        async def three() -> List[Tuple[int, Dict[str, str]]]:
            return [await call("a") for _ in range(3)]

        results = asyncio.run(three())
        self.assertEqual([s for s, _ in results], [200, 200, 429])
        self.assertIn("ratelimit-policy", results[0][1])
        self.assertIn("retry-after", results[2][1])

        # The decorator: sync and async, the request found among the arguments.
        other = Guard(self.path + "2", {"g": TokenBucket(rate=1, per=HOUR, keyed=Keyed(16))},
                      [Check("g", key=client_ip)])

        @other.limit()
        def handler(request: Request) -> str:
            return "ok"

        req = Request("GET", "/", {}, "10.1.1.1", {})
        self.assertEqual(handler(req), "ok")
        with self.assertRaises(RateLimited) as cm:
            handler(req)
        self.assertEqual(set(cm.exception.headers), {"RateLimit", "RateLimit-Policy",
                                                     "Retry-After"})

        @other.limit()
        def no_request() -> str:
            return "never"

        with self.assertRaises(TypeError):  # keyed checks are never skipped silently
            no_request()

        @other.limit(request=lambda: Request("GET", "/", {}, "10.3.3.3", {}))
        def explicit() -> str:
            return "ok"

        self.assertEqual(explicit(), "ok")

        @other.limit()
        async def async_handler(scope: Dict[str, Any]) -> str:
            return "ok"

        scope = {"type": "http", "client": ("10.2.2.2", 1), "headers": []}
        self.assertEqual(asyncio.run(async_handler(scope)), "ok")
        with self.assertRaises(RateLimited):
            asyncio.run(async_handler(scope))

    def test_a_guard_refuses_or_adopts_a_changed_limit_as_told(self) -> None:
        from shmlimit import DefinitionConflictError

        def at(rate: int, on_conflict: str = "refuse") -> Guard:
            return Guard(self.path, {"api": TokenBucket(rate=rate, per=1)}, [Check("api")],
                         on_conflict=on_conflict)
        at(200).limits()
        # A deploy that raises the rate: refused by default, naming both values.
        with self.assertRaises(DefinitionConflictError) as refused:
            at(300).limits()
        self.assertIn("200", str(refused.exception))
        self.assertIn("300", str(refused.exception))
        # Adopted when asked: the live definition is the new one, for every process.
        (limit,) = at(300, on_conflict="adopt").limits()
        self.assertEqual(limit.live_definition, TokenBucket(rate=300, per=1))
        with Limiter.open(self.path) as limiter:
            self.assertEqual(limiter.limit("api").live_definition, TokenBucket(rate=300, per=1))
        with self.assertRaises(ValueError):
            Guard(self.path, None, [Check("api")], on_conflict="replace")

    def test_the_guard_reattaches_after_a_fork(self) -> None:
        g = guard(self.path)
        g.limits()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                limits = g.limits()
                ok = g._pid == os.getpid() and limits[1].try_acquire().allowed
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        self.assertEqual(os.read(read, 1), b"1")
        os.waitpid(pid, 0)
        os.close(read)
        self.assertEqual(g.limits()[1].peek().remaining, 1)  # the child's grant is shared


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(port: int, proc: "subprocess.Popen[bytes]", seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stderr.read().decode()[-3000:]}"
                                 if proc.stderr else "the server exited")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health-check-before-the-test", headers={"X-API-Key": "probe"})
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the server did not answer in time")


def get_statuses(port: int, count: int, prefix: str) -> List[int]:
    """``count`` GET / requests, one connection each, each with its own API key."""
    statuses = []
    for i in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/", headers={"X-API-Key": f"{prefix}-{i}"})
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
        conn.close()
    return statuses


def stop_server(proc: "subprocess.Popen[bytes]") -> bytes:
    """Stop a server (SIGTERM, then SIGKILL after 20 s) and return what it wrote to a piped
    stderr (empty when its stderr is not a pipe)."""
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err or b""


def gunicorn_site(test: unittest.TestCase, files: Dict[str, str]) -> str:
    """A fresh directory (removed after the test) holding the examples in ``files`` (example
    name -> name in the directory), for running gunicorn on them outside the examples."""
    import shutil
    import tempfile
    site = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, site, True)
    for name, as_name in files.items():
        shutil.copy(os.path.join(EXAMPLES, name), os.path.join(site, as_name))
    return site


class RealServers(FileTest):
    """The examples under real servers: 6 clients send 20 requests each at once, through a
    per-client limit of 8 and a global one of 30 (nothing refills during the test), over
    several worker processes."""

    CLIENTS, REQUESTS, PER_CLIENT, GLOBAL = 6, 20, 8, 30

    def env(self) -> Dict[str, str]:
        return dict(os.environ, SHMLIMIT_FILE=self.path, PER="3600",
                    PER_CLIENT=str(self.PER_CLIENT), GLOBAL=str(self.GLOBAL),
                    PYTHONPATH=EXAMPLES + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def requests(self, ports: List[int], clients: int, each: int, prefix: str
                 ) -> Dict[str, List[Tuple[int, Dict[str, str], Dict[str, Any]]]]:
        """``clients`` threads sending ``each`` requests at once, each with its own key."""
        results: Dict[str, List[Tuple[int, Dict[str, str], Dict[str, Any]]]] = {}

        def client(name: str) -> None:
            out = []
            for i in range(each):
                # A connection per request, so that every worker accepts some.
                conn = http.client.HTTPConnection("127.0.0.1", ports[i % len(ports)], timeout=30)
                conn.request("GET", "/", headers={"X-API-Key": name})
                response = conn.getresponse()
                body = response.read()
                data = json.loads(body) if response.status == 200 else {}
                out.append((response.status, dict(response.getheaders()), data))
                conn.close()
            results[name] = out

        threads = [threading.Thread(target=client, args=(f"{prefix}-{i}",))
                   for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), clients)
        return results

    def drive(self, ports: List[int]) -> None:
        results = self.requests(ports, self.CLIENTS, self.REQUESTS, "client")
        admitted = {name: sum(1 for s, _, _ in out if s == 200) for name, out in results.items()}
        statuses = {s for out in results.values() for s, _, _ in out}
        self.assertEqual(statuses, {200, 429})
        # Every client within its own bound; together exactly the global burst (they asked
        # for 120 > 30 and could have taken 48 > 30 by their own limits).
        self.assertTrue(all(n <= self.PER_CLIENT for n in admitted.values()), admitted)
        self.assertEqual(sum(admitted.values()), self.GLOBAL, admitted)
        self.pids |= {data["pid"] for out in results.values() for s, _, data in out if s == 200}
        self.assertGreater(len(self.pids), 1, "several worker processes decided")
        for out in results.values():
            for status, headers, _ in out:
                lower = {k.lower(): v for k, v in headers.items()}
                self.assertIn('"per_client";q=8;w=3600', lower["ratelimit-policy"])
                self.assertIn('"global";q=30;w=3600', lower["ratelimit-policy"])
                self.assertIn("ratelimit", lower)
                if status == 429:
                    self.assertGreaterEqual(int(lower["retry-after"]), 1)
                else:
                    self.assertNotIn("retry-after", lower)
        # The file agrees: its global limit admitted exactly what the clients saw.
        with Limiter.open(self.path, mode=0o660) as lim:
            self.assertEqual(lim.limit("global").stats().allowed - self.before, self.GLOBAL)

    def run_servers(self, commands: List[List[str]], ports: List[int]) -> None:
        procs = [subprocess.Popen(command, cwd=EXAMPLES, env=self.env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for command in commands]
        try:
            for port, proc in zip(ports, procs):
                wait_listening(port, proc)
            # Warm up until several processes answer (workers boot one after the other; 4
            # keys of 6 requests at once a round), resetting the limits after each round: the
            # bounds are for the clients.
            self.pids = set()
            deadline = time.monotonic() + 60
            with Limiter.open(self.path, mode=0o660) as lim:
                while len(self.pids) < 2 and time.monotonic() < deadline:
                    warm = self.requests(ports, 4, 6, f"warm-up-{len(self.pids)}")
                    self.pids |= {data["pid"] for out in warm.values()
                                  for s, _, data in out if s == 200}
                    lim.limit("global").reset()
                    lim.limit("per_client").reset()
                    time.sleep(0.2)
                # The decorated endpoint (the decorator finds the framework's request among
                # the handler's arguments) answers too, then is denied by its own check once
                # the client's budget is spent.
                statuses = []
                for _ in range(6):
                    conn = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=30)
                    conn.request("GET", "/expensive", headers={"X-API-Key": "decorated"})
                    response = conn.getresponse()
                    body = response.read()
                    statuses.append(response.status)
                    if response.status == 429:
                        self.assertIn("retry-after",
                                      {k.lower() for k, _ in response.getheaders()})
                    conn.close()
                # Each call takes a unit in the middleware and one in the decorator: 4 calls
                # use the client's 8; the fourth's decorator check is the 8th unit.
                self.assertEqual(statuses, [200, 200, 200, 200, 429, 429], body)
                lim.limit("global").reset()
                lim.limit("per_client").reset()
                self.before = lim.limit("global").stats().allowed
            self.drive(ports)
        finally:
            for proc in procs:
                stop_server(proc)

    def test_flask_under_gunicorn_with_four_workers(self) -> None:
        need("gunicorn")
        need("flask")
        port = free_port()
        self.run_servers([[sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
                           "--bind", f"127.0.0.1:{port}", "--workers", "4", "flask_app:app"]],
                         [port])

    def test_flask_under_uwsgi_with_four_processes(self) -> None:
        """uWSGI imports the app in its master and forks the workers from it (no lazy-apps):
        the guard made at import time attaches again in every worker (`limits()` compares the
        pid; uWSGI may run no Python fork hook), and the bounds hold across them."""
        uwsgi = need_program("uwsgi")
        need("flask")
        port = free_port()
        self.run_servers([[uwsgi, "--http-socket", f"127.0.0.1:{port}", "--master",
                           "--processes", "4", "--module", "flask_app:app", "--die-on-term",
                           "--disable-logging", "--need-app"]], [port])

    def test_the_gunicorn_config_serves_an_app_of_any_name(self) -> None:
        """The example config with an app module of the user's own name (``my_site:app`` on
        the command line), in a directory holding only it, the config and the limits: the
        workers boot and attach, and requests are decided."""
        need("gunicorn")
        need("flask")
        site = gunicorn_site(self, {"gunicorn.conf.py": "gunicorn.conf.py",
                                    "limits_config.py": "limits_config.py",
                                    "flask_app.py": "my_site.py"})
        port = free_port()
        env = dict(self.env(), PYTHONPATH=site)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--bind",
             f"127.0.0.1:{port}", "--workers", "2", "my_site:app"],
            cwd=site, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_listening(port, proc)
            self.assertEqual(get_statuses(port, 4, "site"), [200] * 4)
        finally:
            err = stop_server(proc)
        self.assertNotIn(b"Traceback", err, err.decode(errors="replace")[-2000:])
        self.assertNotIn(b"Worker failed to boot", err)

    def test_a_gunicorn_reload_adopts_a_changed_limit(self) -> None:
        """SIGHUP after the global limit was raised in limits_config (30 -> 50 an hour): the
        master adopts it live and logs both definitions, the new workers boot, and the
        admissions stay within the old bound before and the new one after (the 30 used are
        kept: 20 more), with no 5xx."""
        need("gunicorn")
        need("flask")
        import shutil
        import signal
        site = gunicorn_site(self, {"gunicorn.conf.py": "gunicorn.conf.py",
                                    "flask_app.py": "flask_app.py"})
        with open(os.path.join(EXAMPLES, "limits_config.py")) as f:
            config = f.read()
        default = 'GLOBAL = int(os.environ.get("GLOBAL", "200"))'
        self.assertIn(default, config)

        def write_config(global_limit: int) -> None:
            with open(os.path.join(site, "limits_config.py"), "w") as f:
                f.write(config.replace(default, f"GLOBAL = {global_limit}"))
            # A reload reads the module again: never from a stale bytecode cache.
            shutil.rmtree(os.path.join(site, "__pycache__"), True)

        def admitted(count: int) -> int:
            statuses = get_statuses(port, count, "reload")
            self.assertLessEqual(set(statuses), {200, 429}, statuses)
            return statuses.count(200)

        write_config(30)
        port = free_port()
        env = dict(self.env(), PYTHONPATH=site, PER_CLIENT="100000", PYTHONDONTWRITEBYTECODE="1")
        env.pop("GLOBAL", None)
        log_path = os.path.join(site, "gunicorn.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--bind",
                 f"127.0.0.1:{port}", "--workers", "2", "flask_app:app"],
                cwd=site, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_listening(port, proc)  # (its request is admitted too)

            def allowed() -> int:
                with Limiter.open(self.path, mode=0o660) as lim:
                    return lim.limit("global").stats().allowed
            first = admitted(40)
            self.assertEqual(allowed(), 30, "the old bound: 30 an hour")
            self.assertLess(first, 40, "demand beyond the bound")
            write_config(50)
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            live = None
            while time.monotonic() < deadline:
                with Limiter.open(self.path, mode=0o660) as lim:
                    live = lim.limit("global").live_definition
                if live == TokenBucket(rate=50, per=3600):
                    break
                time.sleep(0.1)
            self.assertEqual(live, TokenBucket(rate=50, per=3600))
            second = admitted(40)
            self.assertEqual(allowed(), 50, "the new bound: 50, of which 30 were used")
            self.assertEqual(second, 20)
            self.assertIsNone(proc.poll(), "the server kept running")
        finally:
            stop_server(proc)
        with open(log_path, "rb") as logged:
            text = logged.read().decode(errors="replace")
        self.assertIn("limit 'global' adopted", text)
        self.assertIn("was", text)
        self.assertNotIn("Worker failed to boot", text)
        self.assertNotIn("Traceback", text)

    def test_a_gunicorn_worker_killed_holding_a_permit_leaks_nothing(self) -> None:
        need("gunicorn")
        need("flask")
        port = free_port()
        self.kill_a_permit_holder(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--bind",
             f"127.0.0.1:{port}", "--workers", "4", "--timeout", "30", "flask_app:app"], port)

    def test_a_uwsgi_worker_killed_holding_a_permit_leaks_nothing(self) -> None:
        """As under gunicorn: a permit taken in a worker uWSGI forked is that worker's."""
        uwsgi = need_program("uwsgi")
        need("flask")
        port = free_port()
        self.kill_a_permit_holder(
            [uwsgi, "--http-socket", f"127.0.0.1:{port}", "--master", "--processes", "4",
             "--module", "flask_app:app", "--die-on-term", "--disable-logging", "--need-app"],
            port)

    def kill_a_permit_holder(self, command: List[str], port: int) -> None:
        """Six clients keep /report busy (two permits on the host, held 100 ms each) on 4
        workers of the server ``command`` starts; a worker is SIGKILLed while it holds one.
        Never more than two are held, the service goes on (the server replaces the worker; the
        next acquirer takes the dead worker's permit over), and afterwards both permits are
        free."""
        import signal
        env = dict(self.env(), PER_CLIENT="100000", GLOBAL="100000", PER="1")
        proc = subprocess.Popen(command, cwd=EXAMPLES, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            wait_listening(port, proc)
            reports = Limiter.open(self.path, mode=0o660).limit("reports")
            stop = time.monotonic() + 4.0
            ok: List[float] = []
            failed: List[str] = []
            most = 0

            def client() -> None:
                while time.monotonic() < stop:
                    try:
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                        conn.request("GET", "/report?hold=0.1")
                        response = conn.getresponse()
                        response.read()
                        conn.close()
                        if response.status == 200:
                            ok.append(time.monotonic())
                        else:
                            failed.append(str(response.status))
                    except OSError as e:  # the killed worker's connection
                        failed.append(repr(e))

            threads = [threading.Thread(target=client) for _ in range(6)]
            for t in threads:
                t.start()
            killed_at = 0.0
            victim = 0
            while time.monotonic() < stop:
                holders = reports.permit_holders()
                most = max(most, len(holders))
                if not victim and time.monotonic() > stop - 3.0:
                    live = [h for h in holders if not h.reclaimable]
                    if live:
                        victim = live[0].pid
                        os.kill(victim, signal.SIGKILL)
                        killed_at = time.monotonic()
                time.sleep(0.002)
            for t in threads:
                t.join()
            self.assertTrue(victim, "a worker holding a permit was found and killed")
            self.assertLessEqual(most, 2)
            self.assertTrue(any(t > killed_at + 0.5 for t in ok), "served after the kill")
            self.assertLessEqual(len(failed), 6, failed)  # at most the killed connections
            # Nothing leaked: whatever the dead worker held is reclaimable, then both are free.
            self.assertTrue(all(h.reclaimable or h.pid != victim
                                for h in reports.permit_holders()))
            reports.reclaim_dead_permits()
            first, second = reports.try_acquire_permit(), reports.try_acquire_permit()
            self.assertIsNotNone(first)
            self.assertIsNotNone(second)
        finally:
            stop_server(proc)

    def test_fastapi_under_two_uvicorn_servers(self) -> None:
        """Two uvicorn servers (separate processes, each with its own event loop), the
        clients alternating between them: which process accepts is not left to the kernel."""
        need("uvicorn")
        need("fastapi")
        ports = [free_port(), free_port()]
        self.run_servers([[sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port",
                           str(port), "fastapi_app:app"] for port in ports], ports)


if __name__ == "__main__":
    unittest.main()
