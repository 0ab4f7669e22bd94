"""What the test modules share: temporary limiter files, and optional dependencies that skip a
test when missing, except under SHMLIMIT_TEST_REQUIRE_ALL=1 (CI), where they fail it."""

import importlib
import os
import shutil
import tempfile
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


class FileTest(unittest.TestCase):
    """A test with a fresh directory for its limiter files (``self.path``)."""

    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.dir = self._dir.name
        self.path = os.path.join(self.dir, "limits.shm")

    def tearDown(self) -> None:
        self._dir.cleanup()
