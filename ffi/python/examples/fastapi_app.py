"""FastAPI behind shmlimit's ASGI middleware: every uvicorn / gunicorn worker shares the same
per-client and global budgets.

    uvicorn --app-dir examples --workers 4 fastapi_app:app
    curl -i -H 'X-API-Key: alice' http://127.0.0.1:8000/

The decision is one non-blocking C call (under a microsecond): the middleware does not await
anything for it. ``/expensive`` shows the decorator on an endpoint.
"""

from __future__ import annotations

import os
from typing import Any, Dict

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from limits_config import make_guard
from shmlimit.web import ASGIMiddleware, RateLimited

guard = make_guard()
app = FastAPI()
app.add_middleware(ASGIMiddleware, guard=guard)


@app.get("/")
async def index() -> Dict[str, Any]:
    return {"ok": True, "pid": os.getpid()}


@app.get("/expensive")
@guard.limit()  # the decorator finds the Request among the arguments
async def expensive(request: Request) -> Dict[str, Any]:
    return {"ok": True, "pid": os.getpid()}


@app.exception_handler(RateLimited)
async def rate_limited(request: Request, error: RateLimited) -> JSONResponse:
    return JSONResponse({"error": "rate limited"}, status_code=429, headers=error.headers)
