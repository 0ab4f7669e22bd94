"""The web middleware and decorator holding a keyed adaptive concurrency limit's permit for
each request's key: a key at its limit is refused with 503 while another key is admitted,
the RateLimit fields are that key's permits as the core renders them, a request without a key
holds nothing, and the release reports each request's outcome into its own key."""

import asyncio
from typing import Any, Dict, List, MutableMapping, Tuple

from shmlimit import AdaptiveConcurrency, Keyed
from shmlimit.web import (ASGIMiddleware, AtCapacity, Check, Guard, Request, WSGIMiddleware,
                          header)

from ._support import FileTest, clear_of_remeasure


def environ(tenant: str = "") -> Dict[str, Any]:
    env: Dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "10.0.0.1"}
    if tenant:
        env["HTTP_X_TENANT"] = tenant
    return env


class KeyedAdaptiveMiddleware(FileTest):
    def guard(self) -> Guard:
        return Guard(self.path, {"per_tenant": AdaptiveConcurrency(1, 4, keyed=Keyed(16))},
                     [Check("per_tenant", key=header("x-tenant"))])

    def test_wsgi_holds_a_permit_of_each_requests_key(self) -> None:
        clear_of_remeasure(2)  # the samples are read back
        guard = self.guard()
        statuses: List[Tuple[str, Dict[str, str]]] = []

        def app(env: Dict[str, Any], start_response: Any) -> List[bytes]:
            start_response("500 Internal Server Error" if env.get("HTTP_X_FAIL") else "200 OK",
                           [("Content-Length", "2")])
            return [b"ok"]

        wrapped = WSGIMiddleware(app, guard)

        def call(env: Dict[str, Any]) -> Any:
            def start_response(status: str, headers: List[Tuple[str, str]],
                               exc_info: Any = None) -> None:
                statuses.append((status, dict(headers)))
            return wrapped(env, start_response)

        # Tenant a's request holds a's only permit until its response is closed.
        first = call(environ("a"))
        self.assertEqual(list(first), [b"ok"])
        status, fields = statuses[-1]
        self.assertEqual(status, "200 OK")
        self.assertEqual(fields["RateLimit"], '"per_tenant";r=0')
        self.assertEqual(fields["RateLimit-Policy"],
                         '"per_tenant";q=1;qu="concurrent-requests"')
        per_tenant = guard.limits()[0]
        self.assertEqual(per_tenant.adaptive_status("a").in_flight, 1)
        # a is at its limit: 503 with Retry-After; b has its own.
        self.assertEqual(list(call(environ("a"))), [b"503 Service Unavailable: at capacity, "
                                                    b"retry later\n"])
        status, fields = statuses[-1]
        self.assertTrue(status.startswith("503"), status)
        self.assertEqual((fields["RateLimit"], fields["Retry-After"]), ('"per_tenant";r=0', "1"))
        second = call(environ("b"))
        self.assertEqual(statuses[-1][0], "200 OK")
        self.assertEqual(per_tenant.adaptive_status("b").in_flight, 1)
        # A request without the header holds nothing and sends no adaptive field.
        self.assertEqual(list(call(environ())), [b"ok"])
        self.assertEqual(statuses[-1], ("200 OK", {"Content-Length": "2"}))
        first.close()
        list(second)
        second.close()
        self.assertEqual([per_tenant.adaptive_status(k).in_flight for k in "ab"], [0, 0])
        self.assertIsNotNone(per_tenant.adaptive_status("a").rtt_recent_us, "a sample of a's")
        # A 5xx is an error of its key's (no RTT sample): c learns nothing but the error.
        failed = call(dict(environ("c"), HTTP_X_FAIL="1"))
        list(failed)
        failed.close()
        self.assertEqual(statuses[-1][0], "500 Internal Server Error")
        s = per_tenant.adaptive_status("c")
        self.assertEqual((s.in_flight, s.rtt_recent_us), (0, None))

    def test_asgi_and_the_decorator_hold_the_keys_permit(self) -> None:
        guard = self.guard()
        per_tenant = guard.limits()[0]
        sent: List[MutableMapping[str, Any]] = []
        inside: List[int] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            inside.append(per_tenant.adaptive_status("a").in_flight)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request"}

        scope = {"type": "http", "method": "GET", "path": "/", "client": ("10.0.0.1", 1),
                 "headers": [(b"x-tenant", b"a")]}
        asyncio.run(ASGIMiddleware(app, guard)(scope, receive, send))
        self.assertEqual(inside, [1])
        self.assertIn((b"ratelimit", b'"per_tenant";r=0'), sent[0]["headers"])
        self.assertEqual(per_tenant.adaptive_status("a").in_flight, 0)

        @guard.limit(request=lambda tenant: Request("GET", "/", {"x-tenant": tenant}, "", {}))
        def work(tenant: str) -> int:
            with self.assertRaises(AtCapacity):
                work(tenant)  # the key's one permit is this call's
            return per_tenant.adaptive_status(tenant).in_flight

        self.assertEqual(work("a"), 1)
        self.assertEqual(per_tenant.adaptive_status("a").in_flight, 0)

        @guard.limit(request=lambda: Request("GET", "/", {}, "", {}))
        def anonymous() -> int:
            return per_tenant.adaptive_status("a").in_flight

        self.assertEqual(anonymous(), 0)  # no key: nothing held
        self.assertEqual(per_tenant.key_occupancy()[0], 1)
