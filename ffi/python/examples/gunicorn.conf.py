"""gunicorn configuration for the examples (and the shape to copy for an app).

- The limiter file lives on /dev/shm (a tmpfs: memory only, gone at reboot, which is what a
  rate limiter's state wants). Every worker maps the same file, so the budgets are shared:
  4 workers do not get 4 times the limit.
- The master creates the file in ``on_starting``, before forking, and each worker attaches in
  ``post_fork`` (the Guard would also attach lazily on its first request; a fork is noticed).
- ``user`` / ``group``: gunicorn runs ``post_fork`` as the master's user and drops privileges
  afterwards (``worker.init_process``). A worker keeps what it mapped before the drop, but a
  worker started later, or a process opening the file by path, runs as ``user``: the file must
  belong to it (shmlimit refuses files of other users unless ``allow_other_owner``). So the
  master chowns the file to the workers' user and group in ``on_starting``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Optional

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WORKERS", "4"))
# user = "www-data"   # uncomment to drop privileges; the file is chowned below
# group = "www-data"


def on_starting(server: Any) -> None:
    import shmlimit
    from limits_config import DEFINITIONS, PATH

    shmlimit.Limiter.create_or_open(PATH, DEFINITIONS, mode=0o660).close()
    uid, gid = server.cfg.uid, server.cfg.gid
    if os.geteuid() == 0 and (uid, gid) != (0, 0):
        os.chown(PATH, uid, gid)  # the workers' user owns it: they may open it after the drop


def app_module(server: Any) -> Optional[str]:
    """The module of the app gunicorn serves, however it was named: the config's ``wsgi_app``,
    or the command line's ``APP_MODULE`` (which gunicorn keeps as its application's
    ``app_uri``, leaving ``cfg.wsgi_app`` unset)."""
    uri = server.cfg.wsgi_app or getattr(server.app, "app_uri", None)
    return uri.split(":")[0] if isinstance(uri, str) and uri else None


def post_fork(server: Any, worker: Any) -> None:
    # Attach now, in the worker (still as the master's user): the app module's guard maps the
    # file once per process. An app named some other way attaches on its first request.
    name = app_module(server)
    if name is None:
        return
    guard = getattr(importlib.import_module(name), "guard", None)
    if guard is not None:
        guard.limits()
