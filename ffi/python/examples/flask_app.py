"""Flask behind shmlimit's WSGI middleware: every worker of a pre-fork server (gunicorn,
uwsgi) shares the same per-client and global budgets.

    gunicorn -c examples/gunicorn.conf.py --chdir examples flask_app:app
    curl -i -H 'X-API-Key: alice' http://127.0.0.1:8000/

Admitted responses carry RateLimit and RateLimit-Policy; denied ones are 429 with Retry-After.
``/expensive`` shows the decorator instead of (here: in addition to) the middleware;
``/report`` holds one of the host's few "reports" permits while it works.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Tuple

from flask import Flask, jsonify, request

from limits_config import make_guard, reports
from shmlimit.web import RateLimited, Request, WSGIMiddleware

guard = make_guard()
app = Flask(__name__)
app.wsgi_app = WSGIMiddleware(app.wsgi_app, guard)  # type: ignore[method-assign]


@app.get("/")
def index() -> Dict[str, Any]:
    return {"ok": True, "pid": os.getpid()}


def current_request(*args: Any, **kwargs: Any) -> Request:
    """Flask views receive no request argument: the decorator reads Flask's context."""
    return Request.from_wsgi(request.environ)


@app.get("/expensive")
@guard.limit(request=current_request)  # the decorator: raises RateLimited when denied
def expensive() -> Dict[str, Any]:
    return {"ok": True, "pid": os.getpid()}


@app.get("/report")
def report() -> Dict[str, Any]:
    # Waits up to 5 s for a permit (PermitUnavailableError, a 500 here, after that).
    with reports().permit(timeout=5) as permit:
        time.sleep(float(request.args.get("hold", "0.05")))
        return {"ok": True, "pid": os.getpid(), "permit": permit.id}


@app.errorhandler(RateLimited)
def rate_limited(error: RateLimited) -> Tuple[Any, int, Dict[str, str]]:
    return jsonify(error="rate limited"), 429, error.headers
