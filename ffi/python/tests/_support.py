"""What the test modules share: temporary limiter files, optional dependencies that skip a
test when missing (except under SHMLIMIT_TEST_REQUIRE_ALL=1, CI, where they fail it), and a
wait that keeps a test's samples of an adaptive limit out of its periodic re-measure."""

import importlib
import os
import shutil
import tempfile
import time
import unittest
from types import ModuleType


def need(module: str) -> ModuleType:
    """Import ``module`` or skip (fail under SHMLIMIT_TEST_REQUIRE_ALL=1)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("SHMLIMIT_TEST_REQUIRE_ALL") == "1":
            raise AssertionError(f"{module} is required here (SHMLIMIT_TEST_REQUIRE_ALL=1): {e}")
        raise unittest.SkipTest(f"{module} is not installed")


def need_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("SHMLIMIT_TEST_REQUIRE_ALL") == "1":
            raise AssertionError(f"{name} is required here (SHMLIMIT_TEST_REQUIRE_ALL=1)")
        raise unittest.SkipTest(f"{name} is not on PATH")
    return path


def clear_of_remeasure(seconds: float, window_ms: int = 20) -> None:
    """Sleep, if need be, until the next ``seconds`` hold none of an adaptive limit's re-measure
    windows (``window_ms`` each, its tuning's window). Every 1,000 windows on the limit's clock
    (CLOCK_MONOTONIC), the last 8 grant at most the minimum and keep the limit, and the samples
    of the first 4 of them are not used (docs/adaptive.md): a test that reads a sample back
    must not release its permits there."""
    period_ms = 1000 * window_ms
    remeasure_from = period_ms - 8 * window_ms
    at = time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e6 % period_ms
    if at + seconds * 1000 > remeasure_from:
        time.sleep((period_ms - at) / 1000 + 0.005)


class FileTest(unittest.TestCase):
    """A test with a fresh directory for its limiter files (``self.path``)."""

    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.dir = self._dir.name
        self.path = os.path.join(self.dir, "limits.shm")

    def tearDown(self) -> None:
        self._dir.cleanup()
