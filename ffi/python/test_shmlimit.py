"""Tests of the Python wrapper against the real library (run: python3 -m unittest -v, with
SHMLIMIT_LIB pointing at libshmlimit.so or a cargo build tree above this directory)."""

import datetime
import errno
import os
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shmlimit  # noqa: E402
from shmlimit import FixedWindow, Limiter, SlidingLog, SlidingWindow, TokenBucket  # noqa: E402

HOUR = 3600


def counts(limit):
    stats = limit.stats()
    return (stats.allowed, stats.denied)


class WrapperTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "limits.shm")

    def tearDown(self):
        self.dir.cleanup()

    def test_struct_layouts_match_the_library(self):
        import ctypes
        self.assertEqual(ctypes.sizeof(shmlimit._Def), 72)
        self.assertEqual(ctypes.sizeof(shmlimit._Options), 40)
        self.assertEqual(ctypes.sizeof(shmlimit._Decision), 56)
        self.assertEqual(shmlimit._Decision.remaining.offset, 8)
        self.assertEqual(ctypes.sizeof(shmlimit._Stats), 64)

    def test_version(self):
        self.assertRegex(shmlimit.library_version(), r"^\d+\.\d+\.\d+")

    def test_acquire_peek_and_stats(self):
        with Limiter.create_or_open(self.path, {"api": TokenBucket(rate=1, per=HOUR, burst=3)}) as lim:
            api = lim.limit("api")
            self.assertTrue(api.peek(3))
            first = api.try_acquire()
            self.assertIsInstance(first, shmlimit.Decision)
            self.assertTrue(first.allowed and first)
            self.assertEqual((first.remaining, first.retry_after_ns, first.retry_after), (2, 0, 0.0))
            self.assertTrue(api.try_acquire(2))
            denied = api.try_acquire()
            self.assertFalse(denied)
            self.assertTrue(denied.denied)
            self.assertGreater(denied.retry_after, HOUR - 60)
            self.assertLessEqual(denied.retry_after_ns, HOUR * 10**9)
            self.assertEqual(counts(api), (2, 1))
            # peek consumed nothing and counted nothing
            self.assertFalse(api.peek(1))
            self.assertEqual(counts(api), (2, 1))
            stats = api.stats()
            self.assertEqual(stats.shadow_denied, 0)
            self.assertLessEqual(stats.near_limit, stats.allowed)

    def test_acquire_at_explicit_time(self):
        with Limiter.create_or_open(self.path, {"b": TokenBucket(rate=1, per=1.0, burst=2)}) as lim:
            b = lim.limit("b")
            t0 = time.monotonic_ns()
            self.assertEqual(b.try_acquire_at(2, t0).remaining, 0)
            d = b.try_acquire_at(1, t0 + 250_000_000)
            self.assertFalse(d)
            self.assertEqual(d.retry_after_ns, 750_000_000)
            self.assertTrue(b.try_acquire_at(1, t0 + 10**9))

    def test_definitions_round_trip(self):
        limits = {
            "api": TokenBucket(rate=100, per=1, burst=20),
            "minute": FixedWindow(10, datetime.timedelta(minutes=1), aligned="monotonic"),
            "smooth": SlidingWindow(50, 10.0),
            "exact": SlidingLog(5, 2.5),
            "pool": shmlimit.Concurrency(4, lease=30),
        }
        with Limiter.create_or_open(self.path, limits):
            pass
        with Limiter.open(self.path) as lim:
            stored = lim.definitions()
            self.assertEqual(list(stored), list(limits))
            self.assertEqual(stored, limits)
            api = stored["api"]
            self.assertEqual((api.burst, api.emission_ns), (20, 10_000_000))
            self.assertEqual(stored["minute"].window, 60.0)
            self.assertEqual(stored["exact"].window_ns, 2_500_000_000)
            self.assertEqual(lim.limit("smooth").definition, limits["smooth"])
            self.assertEqual(stored["pool"].lease, 30.0)
            with self.assertRaises(shmlimit.WrongKindError) as cm:
                lim.limit("pool").try_acquire()
            self.assertEqual(cm.exception.code, 119)
        # The same definitions attach; different ones conflict.
        Limiter.create_or_open(self.path, limits).close()
        with self.assertRaises(shmlimit.DefinitionConflictError) as cm:
            Limiter.create_or_open(self.path, {"api": TokenBucket(rate=100, burst=21)})
        self.assertEqual(cm.exception.code, 110)
        self.assertIn("api", str(cm.exception))

    def test_errors_map_to_exceptions(self):
        with self.assertRaises(shmlimit.IoError) as cm:
            Limiter.open(self.path)
        self.assertIsInstance(cm.exception, OSError)
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertIn("shmlimit_limiter_open", str(cm.exception))
        with self.assertRaises(shmlimit.InvalidParameterError) as cm:
            Limiter.create_or_open(self.path, {"has space": SlidingLog(1, 1)})
        self.assertIsInstance(cm.exception, ValueError)
        with self.assertRaises(shmlimit.InvalidParameterError):
            Limiter.create_or_open(self.path, {"x": TokenBucket(rate=0)})
        with self.assertRaises(shmlimit.InvalidParameterError):
            Limiter.create_or_open(self.path, {"x": FixedWindow(10, 0.0001)})
        with self.assertRaises(shmlimit.InvalidParameterError):
            Limiter.create_or_open(self.path, {"x": SlidingLog(1, 1)}, mode=0o1777)
        with self.assertRaises(shmlimit.BadUtf8Error):
            Limiter.create_or_open(self.path, {b"\xff": SlidingLog(1, 1)})
        with self.assertRaises(TypeError):
            Limiter.create_or_open(self.path, {"x": 5})
        self.assertFalse(os.path.exists(self.path))

        with open(self.path, "wb") as f:
            f.write(b"x" * 8192)
        with self.assertRaises(shmlimit.ForeignFileError):
            Limiter.open(self.path)
        os.remove(self.path)

        with Limiter.create_or_open(self.path, {"api": TokenBucket(rate=5)}) as lim:
            with self.assertRaises(shmlimit.UnknownLimitError) as cm:
                lim.limit("nope")
            self.assertIsInstance(cm.exception, LookupError)
            self.assertIn("`nope`", cm.exception.message)
            api = lim.limit("api")
            with self.assertRaises(shmlimit.ZeroCostError):
                api.try_acquire(0)
            with self.assertRaises(shmlimit.CostExceedsCapacityError) as cm:
                api.try_acquire(6)
            self.assertEqual(cm.exception.code, 114)
            self.assertEqual(counts(api), (0, 0))

        link = os.path.join(self.dir.name, "link.shm")
        os.symlink(self.path, link)
        with self.assertRaises(shmlimit.SymlinkError):
            Limiter.open(link)

    def test_closed_handles(self):
        lim = Limiter.create_or_open(self.path, {"api": TokenBucket(rate=1, per=HOUR, burst=2)})
        api = lim.limit("api")
        with lim:
            pass
        self.assertTrue(lim.closed)
        with self.assertRaises(shmlimit.ClosedError):
            lim.limit("api")
        with self.assertRaises(shmlimit.ClosedError):
            lim.definitions()
        lim.close()  # idempotent
        # A limit outlives its limiter.
        self.assertTrue(api.try_acquire())
        api.close()
        with self.assertRaises(shmlimit.ClosedError):
            api.try_acquire()

    def test_threads_share_one_handle(self):
        with Limiter.create_or_open(self.path, {"t": TokenBucket(rate=1, per=HOUR, burst=500)}) as lim:
            t = lim.limit("t")
            allowed = []

            def work():
                allowed.append(sum(1 for _ in range(300) if t.try_acquire()))

            threads = [threading.Thread(target=work) for _ in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            self.assertEqual(sum(allowed), 500)
            self.assertEqual(counts(t), (500, 700))


if __name__ == "__main__":
    unittest.main()
