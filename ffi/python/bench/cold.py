"""What the web middleware costs per request when the request runs cold, counted by callgrind.

Usage: python bench/cold.py  (needs valgrind; env: N=300 requests per mode)

A server's worker sleeps between requests, and the client and the kernel run meanwhile, so each
request finds the caches cold and what it costs follows how much code and data it touches.
Timing that in a server is noisy (bench/worker.py); this counts it. Each mode runs in its own
process under ``valgrind --tool=callgrind`` with a simulated cache (32 KiB L1i, 48 KiB L1d,
2 MiB L2 as the last level): 200 warm-up requests, then N requests, each after 4 MiB are copied
(which evicts the simulated caches) and each run inside ``map()``, the only calls collected
(``--toggle-collect=map_next``). The table gives per request the instructions (Ir) and the
instruction and data cache lines missed in the simulated L2 (ILmr, DLmr), which a cold request
pays for from memory or L3.

Modes: the bare app (``bare``), the bare app sending the middleware's two fields as constant
headers (``bare2``: the server's cost of them is not the middleware's), the middleware
(``middleware``) and the middleware without fields (``quiet``), and the least any middleware that
adds two fields does (``adder``: a Python wrapper of ``start_response`` or ``send`` adding two
constant fields, no decision), WSGI and ASGI, the same realistic
request and limits as bench/web.py (12 request headers; a keyed and a global token bucket, every
request admitted).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List, MutableMapping, Tuple

MODES = ["wsgi_bare", "wsgi_bare2", "wsgi_adder", "wsgi_middleware", "wsgi_quiet",
         "asgi_bare", "asgi_bare2", "asgi_adder", "asgi_middleware", "asgi_quiet"]
CACHES = ["--I1=32768,8,64", "--D1=49152,12,64", "--LL=2097152,16,64"]


def child(mode: str, n: int) -> None:
    """Serve `n` cold requests of `mode` (run under callgrind by `main`)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import web as W  # noqa: E402  (bench/web.py: the request, the apps, the limits)

    import shmlimit
    from shmlimit.web import ASGIMiddleware, Check, Guard, WSGIMiddleware, header

    evict, source = bytearray(4 << 20), bytes(4 << 20)
    directory = tempfile.mkdtemp(prefix="shmlimit-cold-")
    path = os.path.join(directory, "cold.shm")  # made by the first decision (none when bare)
    definitions = {
        "per_client": shmlimit.TokenBucket(rate=W.HUGE, burst=W.HUGE, keyed=shmlimit.Keyed(1024)),
        "global": shmlimit.TokenBucket(rate=W.HUGE, burst=W.HUGE),
    }
    checks = [Check("per_client", key=header("x-api-key")), Check("global")]
    guard = Guard(path, definitions, checks)
    quiet = Guard(path, definitions, checks, rate_limit_headers=False)
    environ, scope = W.wsgi_environ(), W.asgi_scope()
    fields = [("RateLimit", '"per_client";r=999999999;t=1, "global";r=999999999;t=1'),
              ("RateLimit-Policy", '"per_client";q=1000000000;w=1, "global";q=1000000000;w=1')]
    raw = [(k.lower().encode(), v.encode()) for k, v in fields]

    def start_response(status: str, headers: List[Tuple[str, str]], exc: Any = None) -> None:
        pass

    def bare2(environ: Dict[str, Any], start_response: Callable[..., Any]) -> List[bytes]:
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", "2"), *fields])
        return [b"{}"]

    async def asgi_bare2(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), *raw]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    def adder(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        def add(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, headers + fields, exc_info)
        return W.wsgi_app(environ, add)

    async def asgi_adder(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        async def add(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *raw]}
            await send(message)
        await W.asgi_app(scope, receive, add)

    def wsgi(app: Callable[..., Any]) -> Callable[[], object]:
        return lambda: app(environ, start_response)

    def asgi(app: Callable[..., Any]) -> Callable[[], object]:
        def drive() -> None:
            coroutine = app(scope, None, send)
            try:
                coroutine.send(None)
            except StopIteration:
                return
        return drive

    apps: Dict[str, Callable[[], object]] = {
        "wsgi_bare": wsgi(W.wsgi_app), "wsgi_bare2": wsgi(bare2), "wsgi_adder": wsgi(adder),
        "wsgi_middleware": wsgi(WSGIMiddleware(W.wsgi_app, guard)),
        "wsgi_quiet": wsgi(WSGIMiddleware(W.wsgi_app, quiet)),
        "asgi_bare": asgi(W.asgi_app), "asgi_bare2": asgi(asgi_bare2),
        "asgi_adder": asgi(asgi_adder),
        "asgi_middleware": asgi(ASGIMiddleware(W.asgi_app, guard)),
        "asgi_quiet": asgi(ASGIMiddleware(W.asgi_app, quiet)),
    }
    request = apps[mode]
    try:
        for _ in range(200):
            request()
        for _ in range(n):
            evict[:] = source
            for _ in map(lambda _: request(), (None,)):
                pass
    finally:
        shutil.rmtree(directory)


def counts(out: str, n: int) -> Tuple[float, float, float]:
    """(Ir, ILmr, DLmr) per request from a callgrind output file."""
    text = subprocess.run(["callgrind_annotate", "--show=Ir,ILmr,DLmr", out],
                          capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            ir, ilmr, dlmr = (int(v.replace(",", "")) for v in
                              re.findall(r"([\d,]+)\s*(?:\([^)]*\))?", line)[:3])
            return ir / n, ilmr / n, dlmr / n
    raise RuntimeError(f"no totals in {out}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2], int(os.environ.get("N", "300")))
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("cold.py needs valgrind (callgrind_annotate): apt-get install valgrind")
        return 2
    n = int(os.environ.get("N", "300"))
    got: Dict[str, Tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            out = os.path.join(tmp, f"{mode}.out")
            subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", *CACHES,
                            "--toggle-collect=map_next", f"--callgrind-out-file={out}",
                            sys.executable, os.path.abspath(__file__), "--child", mode],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "N": str(n), "PYTHONHASHSEED": "0"})
            got[mode] = counts(out, n)
    print("| mode | Ir | ILmr | DLmr |")
    print("|---|---:|---:|---:|")
    for mode in MODES:
        ir, il, dl = got[mode]
        print(f"| {mode} | {ir:,.0f} | {il:,.1f} | {dl:,.1f} |")
    for api in ("wsgi", "asgi"):
        on = [a - b for a, b in zip(got[f"{api}_middleware"], got[f"{api}_bare2"])]
        off = [a - b for a, b in zip(got[f"{api}_quiet"], got[f"{api}_bare"])]
        least = [a - b for a, b in zip(got[f"{api}_adder"], got[f"{api}_bare2"])]
        print(f"{api}: the middleware over the bare app: fields on {on[0]:,.0f} Ir, "
              f"{on[1]:,.1f} ILmr; fields off {off[0]:,.0f} Ir, {off[1]:,.1f} ILmr; the fields "
              f"themselves {on[0] - off[0]:,.0f} Ir, {on[1] - off[1]:,.1f} ILmr (the least "
              f"adder's own: {least[0]:,.0f} Ir, {least[1]:,.1f} ILmr)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
