"""The middleware's native per-request path (``_native.WebPlan``: a guard whose checks read a
header, the peer's address or no key) against its Python path (the same checks through key
functions and a ``Request``): the same statuses, fields and consumption request by request,
under WSGI and ASGI, with the edge cases of reading keys (a repeated header, a latin-1 value,
a header list that is not a list, a bytes key, a missing key); the native start_response and
send; and the plan rebuilt after a fork."""

import asyncio
import os
import re
import wsgiref.util
from typing import Any, Dict, Iterator, List, Mapping, MutableMapping, Optional, Tuple

from shmlimit import Keyed, Key, TokenBucket, _native
from shmlimit.web import (ASGIMiddleware, Check, Guard, Request, WSGIMiddleware, client_ip,
                          header)

from ._support import FileTest

HOUR = 3600
DEFINITIONS = {
    "per_client": TokenBucket(rate=2, per=HOUR, keyed=Keyed(64)),
    "by_ip": TokenBucket(rate=3, per=HOUR, keyed=Keyed(64)),
    "global": TokenBucket(rate=6, per=HOUR),
}


def api_key(request: Request) -> Optional[Key]:
    return request.headers.get("x-api-key") or None


def peer(request: Request) -> Optional[Key]:
    return request.client or None


def native_guard(path: str, **options: bool) -> Guard:
    return Guard(path, DEFINITIONS, [Check("per_client", key=header("x-api-key")),
                                     Check("by_ip", key=client_ip), Check("global")], **options)


def python_guard(path: str, **options: bool) -> Guard:
    """The same checks through key functions: the middleware's Python path."""
    return Guard(path, DEFINITIONS, [Check("per_client", key=api_key),
                                     Check("by_ip", key=peer), Check("global")], **options)


def comparable(fields: Mapping[str, str]) -> Dict[str, str]:
    """The fields without the seconds to reset (two files' clocks may differ by one)."""
    return {k: re.sub(r";t=\d+", "", v) for k, v in fields.items()}


def wsgi_call(app: WSGIMiddleware, environ_extra: Dict[str, Any]) -> Tuple[str, Dict[str, str]]:
    environ: Dict[str, Any] = {}
    wsgiref.util.setup_testing_defaults(environ)
    environ.pop("REMOTE_ADDR", None)
    environ.update(environ_extra)
    seen: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc: Any = None) -> Any:
        seen["status"], seen["headers"] = status, dict(headers)

    b"".join(app(environ, start_response))
    return seen["status"], comparable(seen["headers"])


def inner_wsgi(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


async def inner_asgi(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def asgi_call(app: ASGIMiddleware, scope: Dict[str, Any]) -> Tuple[int, Dict[str, str]]:
    sent: List[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b""}

    asyncio.run(app(dict(scope, type="http", method="GET", path="/"), receive, send))
    start = sent[0]
    fields = {bytes(k).decode("latin-1"): bytes(v).decode("latin-1")
              for k, v in start["headers"]}
    return start["status"], comparable(fields)


class NativeAgainstPython(FileTest):
    def pair(self, **options: bool) -> Tuple[Guard, Guard]:
        name = "-".join(sorted(options)) or "default"
        native = native_guard(os.path.join(self.dir, f"native-{name}.shm"), **options)
        python = python_guard(os.path.join(self.dir, f"python-{name}.shm"), **options)
        native.limits()
        python.limits()
        self.assertIsInstance(native._fast, _native.WebPlan)
        self.assertIsNone(python._fast)
        return native, python

    def test_wsgi_requests_decide_and_render_alike(self) -> None:
        for options in ({}, {"policy_header": False}, {"rate_limit_headers": False}):
            with self.subTest(**options):
                native, python = self.pair(**options)
                apps = [WSGIMiddleware(inner_wsgi, g) for g in (native, python)]
                requests: List[Dict[str, Any]] = [
                    {"HTTP_X_API_KEY": "alice", "REMOTE_ADDR": "10.0.0.1"},
                    {"HTTP_X_API_KEY": "alice", "REMOTE_ADDR": "10.0.0.1"},
                    {"HTTP_X_API_KEY": "alice", "REMOTE_ADDR": "10.0.0.2"},  # alice is out
                    {"REMOTE_ADDR": "10.0.0.1"},  # no key: per_client skipped
                    {"HTTP_X_API_KEY": "", "REMOTE_ADDR": "10.0.0.5"},  # empty: skipped too
                    {"HTTP_X_API_KEY": "dave", "REMOTE_ADDR": ""},  # no address
                    {"HTTP_X_API_KEY": "caf\u00e9"},
                    {"HTTP_X_API_KEY": "bob", "REMOTE_ADDR": "10.0.0.3"},
                    {"HTTP_X_API_KEY": "carol", "REMOTE_ADDR": "10.0.0.4"},  # global is out
                ]
                outcomes = [[wsgi_call(app, dict(r)) for r in requests] for app in apps]
                self.assertEqual(outcomes[0], outcomes[1])
                statuses = [s for s, _ in outcomes[0]]
                self.assertEqual(statuses.count("200 OK"), 6, outcomes[0])
                self.assertEqual(statuses[2], "429 Too Many Requests")
                self.assertEqual(statuses[-1], "429 Too Many Requests")
                self.assertEqual(outcomes[0][0][1].get("Content-Type"), "text/plain")
                for key in ("alice", "dave", "caf\u00e9", "carol"):
                    self.assertEqual(*(g.limits()[0].peek_key(key).remaining
                                       for g in (native, python)))
                # (A peek's remaining is what a take would leave: 0 for one token left.)
                self.assertEqual(native.limits()[0].peek_key("caf\u00e9").remaining, 0)

    def test_asgi_requests_decide_and_render_alike(self) -> None:
        def generated(pairs: List[Tuple[bytes, bytes]]) -> Iterator[Tuple[bytes, bytes]]:
            return iter(pairs)  # any iterable, says ASGI

        def scopes() -> List[Dict[str, Any]]:
            return [
                {"headers": [(b"x-api-key", b"a")], "client": ("10.0.0.1", 5)},
                # The last value of a repeated header, as Request.headers has it.
                {"headers": [(b"x-api-key", b"b"), (b"x-api-key", b"a")],
                 "client": ("10.0.0.1", 5)},
                {"headers": [(b"x-api-key", b"a")], "client": ("10.0.0.2", 5)},  # a is out
                # A latin-1 value: the key is its decoded str, whichever path reads it.
                {"headers": [(b"x-api-key", b"caf\xe9")], "client": None},
                {"headers": generated([(b"accept", b"*/*"), (b"x-api-key", b"b")]),
                 "client": ["10.0.0.3", 5]},
                {"headers": [(b"x-api-key", b"")], "client": ("10.0.0.4", 5)},  # skipped
                {"client": ("10.0.0.5", 5)},  # no headers at all
                {"headers": [(b"x-api-key", b"d")], "client": ("10.0.0.6", 5)},  # global out
            ]

        native, python = self.pair()
        outcomes = [[asgi_call(ASGIMiddleware(inner_asgi, g), s) for s in scopes()]
                    for g in (native, python)]
        self.assertEqual(outcomes[0], outcomes[1])
        statuses = [s for s, _ in outcomes[0]]
        self.assertEqual(statuses, [200, 200, 429, 200, 200, 200, 200, 429], outcomes[0])
        self.assertIn("ratelimit-policy", outcomes[0][0][1])
        self.assertEqual(outcomes[0][0][1]["content-type"], "text/plain")
        for key in ("a", "b", "caf\u00e9", "d"):
            self.assertEqual(*(g.limits()[0].peek_key(key).remaining for g in (native, python)))
        # The latin-1 value keyed the str it decodes to (one of its two tokens taken).
        self.assertEqual(native.limits()[0].peek_key("caf\u00e9").remaining, 0)

    def test_environ_keys_of_bytes_are_keys_and_other_types_are_refused(self) -> None:
        native, _ = self.pair()
        app = WSGIMiddleware(inner_wsgi, native)
        with self.assertRaisesRegex(TypeError, "a key is str or bytes, not int"):
            wsgi_call(app, {"HTTP_X_API_KEY": 7, "REMOTE_ADDR": "10.0.0.1"})
        self.assertEqual(native.limits()[2].peek().remaining, 5)  # nothing taken
        self.assertEqual(native.limits()[1].peek_key("10.0.0.1").remaining, 2)
        self.assertEqual(wsgi_call(app, {"HTTP_X_API_KEY": b"raw"})[0], "200 OK")
        self.assertEqual(native.limits()[0].peek_key(b"raw").remaining, 0)


class NativeCallables(FileTest):
    def test_start_response_appends_the_fields_and_passes_exc_info(self) -> None:
        got: Dict[str, Any] = {}

        def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            got["start"] = start_response
            try:
                raise ValueError("late")
            except ValueError:
                import sys
                got["returned"] = start_response("500 Oops", (("X-App", "1"),), sys.exc_info())
            return [b"x"]

        def server_start(status: str, headers: List[Tuple[str, str]], exc: Any = None) -> Any:
            got["args"] = (status, headers, exc)
            return "write"

        body = WSGIMiddleware(app, native_guard(self.path))(
            {"HTTP_X_API_KEY": "k", "REMOTE_ADDR": "10.0.0.1"}, server_start)
        self.assertEqual(list(body), [b"x"])
        self.assertIsInstance(got["start"], _native.WebStartResponse)
        self.assertEqual(got["returned"], "write")
        status, headers, exc = got["args"]
        self.assertEqual(status, "500 Oops")
        self.assertEqual(headers[0], ("X-App", "1"))  # the app's first, then the guard's
        self.assertEqual([k for k, _ in headers[1:]], ["RateLimit", "RateLimit-Policy"])
        self.assertIs(exc[0], ValueError)

    def test_the_callables_take_their_arguments_as_the_servers_do(self) -> None:
        calls: List[Tuple[Any, ...]] = []

        def server_start(*args: Any) -> Any:
            calls.append(args)
            return "write"

        got: Dict[str, Any] = {}

        def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
            got["start"] = start_response
            start_response("200 OK", [("X-App", "1")])
            return [b"x"]

        WSGIMiddleware(app, native_guard(self.path))({"HTTP_X_API_KEY": "k"}, server_start)
        start = got["start"]
        self.assertEqual(calls[0][0], "200 OK")
        self.assertEqual(len(calls[0]), 2)  # no exc_info given, none passed on
        # By keyword, as PEP 3333 names them here; the app's header list is left as it was.
        app_headers = [("X-App", "2")]
        self.assertEqual(start(status="201 Created", headers=app_headers, exc_info=None), "write")
        self.assertEqual(calls[1][0], "201 Created")
        self.assertEqual([k for k, _ in calls[1][1]], ["X-App", "RateLimit", "RateLimit-Policy"])
        self.assertEqual(app_headers, [("X-App", "2")])
        self.assertIsNone(calls[1][2])
        for bad in [lambda: start(), lambda: start("200 OK"), lambda: start("a", [], None, 1),
                    lambda: start("a", [], nope=1), lambda: start("a", [], status="b"),
                    lambda: start("a", 5)]:
            with self.assertRaises(TypeError):
                bad()
        self.assertEqual(len(calls), 2)  # a refused call reaches no server
        for kind in (_native.WebStartResponse, _native.WebSend):
            with self.assertRaisesRegex(TypeError, "made by the web middleware only"):
                kind()

        sent: List[Any] = []

        async def server_send(message: Any) -> None:
            sent.append(message)

        async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
            await send(message={"type": "http.response.start", "status": 200, "headers": None})
            with self.assertRaises(TypeError):
                send()
            with self.assertRaises(TypeError):
                send({}, {})

        scope = {"type": "http", "headers": [(b"x-api-key", b"k")], "client": ("10.0.0.1", 1)}
        asyncio.run(ASGIMiddleware(asgi_app, native_guard(self.path))(scope, None, server_send))
        self.assertEqual([k for k, _ in sent[0]["headers"]], [b"ratelimit", b"ratelimit-policy"])

    def test_send_copies_only_the_start_message(self) -> None:
        class Message(Mapping[str, Any]):  # a start message that is a Mapping, not a dict
            def __init__(self, **items: Any):
                self.items_ = items

            def __getitem__(self, k: str) -> Any:
                return self.items_[k]

            def __iter__(self) -> Iterator[str]:
                return iter(self.items_)

            def __len__(self) -> int:
                return len(self.items_)

        sent: List[Any] = []
        start = Message(type="http.response.start", status=201)  # no headers

        async def app(scope: Any, receive: Any, send: Any) -> None:
            sent.append(type(send))
            await send(start)
            body = {"type": "http.response.body", "body": b"ok"}
            await send(body)
            sent.append(body)

        async def server_send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "headers": [(b"x-api-key", b"k")], "client": ("10.0.0.1", 1)}
        asyncio.run(ASGIMiddleware(app, native_guard(self.path))(scope, None, server_send))
        self.assertIs(sent[0], _native.WebSend)
        self.assertEqual(sent[1]["status"], 201)
        self.assertEqual([k for k, _ in sent[1]["headers"]], [b"ratelimit", b"ratelimit-policy"])
        self.assertNotIn("headers", start)  # the app's message is left as it was
        self.assertIs(sent[2], sent[3])  # other messages pass as they are

    def test_the_plan_is_rebuilt_in_a_forked_child(self) -> None:
        g = native_guard(self.path)
        app = WSGIMiddleware(inner_wsgi, g)
        self.assertEqual(wsgi_call(app, {"HTTP_X_API_KEY": "k"})[0], "200 OK")
        parent_plan = g._fast
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                forgotten = g._fast is None and g._pid == -1
                status = wsgi_call(app, {"HTTP_X_API_KEY": "k"})[0]
                rebuilt = g._fast is not None and g._fast is not parent_plan
                ok = forgotten and rebuilt and status == "200 OK" and g._pid == os.getpid()
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        self.assertEqual(os.read(read, 1), b"1")
        os.waitpid(pid, 0)
        os.close(read)
        self.assertIs(g._fast, parent_plan)
        self.assertEqual(g.limits()[0].peek_key("k").remaining, 0)  # the child's grant is shared
