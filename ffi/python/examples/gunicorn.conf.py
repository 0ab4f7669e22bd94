"""gunicorn configuration for the examples (and the shape to copy for an app).

- The limiter file lives on /dev/shm (a tmpfs: memory only, gone at reboot, which is what a
  rate limiter's state wants). Every worker maps the same file, so the budgets are shared:
  4 workers do not get 4 times the limit.
- The master creates the file in ``on_starting``, before forking, and each worker attaches in
  ``post_fork`` (the Guard would also attach lazily on its first request; a fork is noticed).
- A reload (SIGHUP) adopts changed limits: ``on_reload`` reads ``limits_config`` again and
  retunes the file live (or replaces it when its layout cannot hold them), logging each change
  with both definitions; the new workers attach to what it adopted.
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


def apply_limits(server: Any, reload: bool) -> None:
    """Create the file with the limits of ``limits_config``, or adopt them into the file that
    is there (retuned live when its layout holds them, else replaced atomically): every worker,
    old or new, then decides with these definitions. On a reload the module is read again (the
    master keeps the one it imported at start, and the workers it forks inherit it). What was
    adopted is logged with both definitions: a change is never silent."""
    import shmlimit
    import limits_config

    if reload:
        importlib.reload(limits_config)
    path, definitions = limits_config.PATH, limits_config.DEFINITIONS
    before = {}
    if os.path.exists(path):
        try:
            with shmlimit.Limiter.open(path, mode=0o660) as old:
                stored = old.definitions()
                before = {name: old.limit(name).live_definition for name in definitions
                          if name in stored}
        except shmlimit.ShmlimitError as e:
            server.log.warning("shmlimit: %s could not be read before adopting: %s", path, e)
    with shmlimit.Limiter.create_or_open(path, definitions, mode=0o660,
                                         on_conflict="adopt") as limiter:
        for name in definitions:
            after = limiter.limit(name).live_definition
            if name in before and before[name] != after:
                server.log.info("shmlimit: %s: limit %r adopted: %r (was %r)", path, name,
                                after, before[name])
    uid, gid = server.cfg.uid, server.cfg.gid
    if os.geteuid() == 0 and (uid, gid) != (0, 0):
        os.chown(path, uid, gid)  # the workers' user owns it: they may open it after the drop


def on_starting(server: Any) -> None:
    apply_limits(server, reload=False)


def on_reload(server: Any) -> None:
    # SIGHUP: gunicorn reads this file again and replaces its workers; the limits follow.
    apply_limits(server, reload=True)


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
        # The master created or adopted the file (on_starting, on_reload): the worker opens
        # it as it is. A worker forked before a reload still holds the definitions the
        # reload replaced, and asking for them would be a conflict that stops the server.
        guard.definitions = None
        guard.limits()
