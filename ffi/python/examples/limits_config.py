"""The limits the examples share: a per-client token bucket (keyed by the X-API-Key header,
else the peer address) and a global one, in one file every worker maps.

Environment (for trying them out and for the tests): SHMLIMIT_FILE (default
/dev/shm/shmlimit-example.shm: /dev/shm is a tmpfs, so the file never touches a disk),
PER_CLIENT and GLOBAL (burst and rate per PER seconds, defaults 20 and 200), PER (default 1),
REPORTS (how many /report requests run at once across every worker, default 2).
"""

from __future__ import annotations

import os
from typing import Dict, Optional

import shmlimit
from shmlimit.web import Check, Guard, Request, client_ip

PATH = os.environ.get("SHMLIMIT_FILE", "/dev/shm/shmlimit-example.shm")
PER = float(os.environ.get("PER", "1"))
PER_CLIENT = int(os.environ.get("PER_CLIENT", "20"))
GLOBAL = int(os.environ.get("GLOBAL", "200"))

DEFINITIONS = {
    "per_client": shmlimit.TokenBucket(rate=PER_CLIENT, per=PER, burst=PER_CLIENT,
                                       keyed=shmlimit.Keyed(65536)),
    "global": shmlimit.TokenBucket(rate=GLOBAL, per=PER, burst=GLOBAL),
    # At most REPORTS expensive requests in flight on the host; a worker killed while holding
    # one loses it to the next acquirer (its holder is dead), so nothing leaks.
    "reports": shmlimit.Concurrency(permits=int(os.environ.get("REPORTS", "2"))),
}


def client_key(request: Request) -> Optional[shmlimit.Key]:
    """The API key when the request has one, else the peer's address."""
    return request.headers.get("x-api-key") or client_ip(request)


_reports: Dict[int, shmlimit.Limit] = {}


def reports() -> shmlimit.Limit:
    """The "reports" concurrency limit, attached once per process (again after a fork)."""
    pid = os.getpid()
    if pid not in _reports:
        _reports.clear()
        with shmlimit.Limiter.create_or_open(PATH, DEFINITIONS, mode=0o660) as limiter:
            _reports[pid] = limiter.limit("reports")
    return _reports[pid]


def make_guard() -> Guard:
    # 0o660: gunicorn's master may create the file before the workers drop to `user`/`group`
    # (see gunicorn.conf.py); the mode lets the group share it.
    return Guard(PATH, DEFINITIONS, [Check("per_client", key=client_key), Check("global")],
                 mode=0o660)
