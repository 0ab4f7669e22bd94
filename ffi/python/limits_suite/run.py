"""Run the ``limits`` package's own strategy and storage tests against ``shmlimit://``.

Usage: ``python run.py [SDIST_DIR] [-- PYTEST ARGS]``. The tests come from the sdist of the
installed ``limits`` version (``pip download --no-binary :all:``, or an unpacked sdist given as
``SDIST_DIR``). Their storage tables (``tests/utils.py``: ``ALL_STORAGES`` and
``ALL_STORAGES_ASYNC``; ``tests/test_storage.py`` and ``tests/aio/test_storage.py``: the
concrete storages) are rewritten to hold one entry, ``shmlimit://`` (``async+shmlimit://``) on
a file in a temporary directory, and ``tests/conftest.py`` is replaced by one that needs no
docker services and clears the file before each test (as the suite's fixtures flush Redis).
Then pytest runs ``tests/test_strategy.py``, ``tests/test_storage.py`` and their ``aio``
twins with ``-k shmlimit`` plus the storage-independent tests of those files.

Needs, besides shmlimit: limits, pytest, pytest-asyncio, pytest-lazy-fixtures, redis (imported
by the storage tests) and flaky (which reruns the tests the suite marks flaky, as its own runs
do: a few sliding-window tests compare times within 10 ms and miss under load). Exit status:
pytest's.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

CONFTEST = '''
import pytest

import shmlimit.limits  # noqa: F401  (registers shmlimit:// and async+shmlimit://)
from limits.storage import storage_from_string

URI = "shmlimit://{path}?keys=4096&moving_window=1024"


def pytest_configure(config):
    # Marks of plugins the suite's own environment has (flaky reruns, benchmarks).
    config.addinivalue_line("markers", "flaky: rerun on failure")
    config.addinivalue_line("markers", "benchmark: a benchmark")


@pytest.fixture(autouse=True)
def fresh_file():
    storage_from_string(URI).reset()
    yield
'''

SYNC = 'pytest.param("shmlimit://{path}?keys=4096&moving_window=1024", {{}}, None, ' \
       'marks=pytest.mark.memory, id="shmlimit")'
ASYNC = 'pytest.param("async+shmlimit://{path}?keys=4096&moving_window=1024", {{}}, None, ' \
        'marks=pytest.mark.memory, id="shmlimit")'


#: Tests of the suite that cannot pass on shmlimit://, deselected with the reason printed.
KNOWN = {
    "tests/test_strategy.py::TestMovingWindow::test_moving_window_huge_cost[shmlimit]":
        "a moving window of 1,000,000 per 2 s needs 1,000,000 log entries per key (16 MB a key); "
        "shmlimit refuses a moving window larger than its log (here 1024 entries) with "
        "InvalidParameterError naming the largest supported, rather than approximate it",
    "tests/aio/test_strategy.py::TestAsyncMovingWindow::test_moving_window_huge_cost[shmlimit]":
        "as the synchronous test_moving_window_huge_cost",
}


def sdist(work: str, given: str | None) -> str:
    if given:
        return given
    import limits
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--no-binary", ":all:", f"limits=={limits.__version__}", "-d", work],
                   check=True)
    (archive,) = glob.glob(os.path.join(work, "limits-*.tar.gz"))
    with tarfile.open(archive) as t:
        try:
            t.extractall(work, filter="data")
        except TypeError:  # Python without extraction filters (before 3.11.4)
            t.extractall(work)
    (top,) = [d for d in glob.glob(os.path.join(work, "limits-*")) if os.path.isdir(d)]
    return top


def rewrite(tests: str, path: str) -> None:
    with open(os.path.join(tests, "conftest.py"), "w") as f:
        f.write(CONFTEST.format(path=path))
    utils = os.path.join(tests, "utils.py")
    text = open(utils).read()
    # After each table, a table of the one shmlimit entry replaces it (the entries are kept in
    # the source, unused).
    text = text.replace("\nALL_STORAGES_ASYNC = {",
                        "\nALL_STORAGES = {\"shmlimit\": " + SYNC.format(path=path) + "}\n"
                        "ALL_STORAGES_ASYNC = {", 1)
    text = text.replace("\nall_storage = ",
                        "\nALL_STORAGES_ASYNC = {\"shmlimit\": " + ASYNC.format(path=path)
                        + "}\nall_storage = ", 1)
    open(utils, "w").write(text)
    for name, scheme, cls in (("test_storage.py", "shmlimit", "ShmlimitStorage"),
                              (os.path.join("aio", "test_storage.py"), "async+shmlimit",
                               "AsyncShmlimitStorage")):
        file = os.path.join(tests, name)
        text = open(file).read()
        entry = (f'pytest.param("{scheme}://{path}?keys=4096&moving_window=1024", {{}}, '
                 f'__import__("shmlimit.limits")'
                 f'.limits.{cls}, None, id="shmlimit"),')
        text = text.replace('    "uri, args, expected_instance, fixture",\n    [\n',
                            '    "uri, args, expected_instance, fixture",\n    [\n        '
                            + entry + "\n", 1)
        open(file, "w").write(text)


def main() -> int:
    args = sys.argv[1:]
    extra: list[str] = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    with tempfile.TemporaryDirectory() as work:
        top = sdist(work, args[0] if args else None)
        run = os.path.join(work, "run")
        shutil.copytree(os.path.join(top, "tests"), os.path.join(run, "tests"))
        shutil.copy(os.path.join(top, "pytest.ini"), run)
        rewrite(os.path.join(run, "tests"), os.path.join(work, "limits.shmlimit"))
        files = ["tests/test_strategy.py", "tests/test_storage.py",
                 "tests/aio/test_strategy.py", "tests/aio/test_storage.py"]
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
               "-o", "asyncio_default_fixture_loop_scope=function",
               "-q", "-rfEs", "-m", "not benchmark", "-k",
               "shmlimit or not (in-memory or redis or memcached or mongodb or valkey)",
               *files, *[a for t in KNOWN for a in ("--deselect", t)], *extra]
        for test, reason in KNOWN.items():
            print(f"deselected {test}: {reason}")
        return subprocess.run(cmd, cwd=run).returncode


if __name__ == "__main__":
    sys.exit(main())
