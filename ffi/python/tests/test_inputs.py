"""Inputs are checked in Python before any call, with Python exceptions naming the caller's
value: integers (type and range), names, paths, keys, Keyed(0); and definitions read back as
written."""

import errno
import os
import pathlib
import stat
import unittest

import shmlimit
from shmlimit import (Concurrency, FixedWindow, Keyed, Limiter, SlidingLog, SlidingWindow,
                      TokenBucket)

from ._support import FileTest

HOUR = 3600


class IntegerArguments(FileTest):
    def setUp(self) -> None:
        super().setUp()
        self.lim = Limiter.create_or_open(self.path, {
            "b": TokenBucket(rate=1, per=HOUR, burst=10),
            "k": TokenBucket(rate=1, per=HOUR, burst=10, keyed=Keyed(16)),
            "w": FixedWindow(limit=10, window=HOUR),
        })
        self.b, self.k, self.w = (self.lim.limit(n) for n in "bkw")

    def tearDown(self) -> None:
        self.lim.close()
        super().tearDown()

    def assert_untouched(self) -> None:
        self.assertEqual(self.b.peek().remaining, 9)
        self.assertEqual(self.b.stats().allowed, 0)

    def test_costs_out_of_range_are_refused_before_the_call(self) -> None:
        for call in (self.b.try_acquire, self.b.peek,
                     lambda c: self.k.try_acquire_key("a", c),
                     lambda c: self.k.peek_key("a", c),
                     lambda c: self.b.try_acquire_at(c, 1),
                     lambda c: self.b.acquire(c, timeout=0),
                     lambda c: self.b.reserve(c),
                     lambda c: shmlimit.try_acquire_all((self.b, 1), (self.k, "a", c))):
            with self.assertRaises(ValueError) as cm:
                call(-1)
            self.assertIn("-1", str(cm.exception))
            for big in (2**64, 2**64 + 1, 10**30):
                with self.assertRaises(OverflowError) as cm:
                    call(big)
                self.assertIn(str(big), str(cm.exception))
            for wrong in (1.5, 1.0, "1", None, True, False):
                with self.assertRaises(TypeError) as cm:
                    call(wrong)
                self.assertIn(type(wrong).__name__, str(cm.exception))
        self.assert_untouched()
        # Both are also the module's InvalidParameterError (a ShmlimitError).
        with self.assertRaises(shmlimit.InvalidParameterError):
            self.b.try_acquire(-5)
        with self.assertRaises(shmlimit.ParameterOverflowError):
            self.b.try_acquire(2**64)

    def test_the_largest_cost_reaches_the_library(self) -> None:
        with self.assertRaises(shmlimit.CostExceedsCapacityError):
            self.b.try_acquire(2**64 - 1)
        with self.assertRaises(shmlimit.ZeroCostError):
            self.b.try_acquire(0)

    def test_int_subclasses_other_than_bool_are_ints(self) -> None:
        class Count(int):
            pass
        self.assertTrue(self.b.try_acquire(Count(2)))
        self.assertEqual(self.b.peek().remaining, 7)

    def test_dates_units_and_retunes_are_range_checked(self) -> None:
        # A negative date would poison the bucket for every process: refused here.
        with self.assertRaises(ValueError):
            self.b.try_acquire_at(1, -1)
        with self.assertRaises(ValueError):
            self.k.try_acquire_key_at("a", 1, -1)
        grant = self.b.try_acquire(2)
        with self.assertRaises(ValueError):
            self.b.refund(grant, units=-1)
        with self.assertRaises(TypeError):
            self.b.refund(grant, units=1.0)
        self.assertEqual(self.b.peek().remaining, 7)
        self.b.refund(grant, units=1)
        self.assertEqual(self.b.peek().remaining, 8)
        with self.assertRaises(TypeError):
            self.b.refund("not a decision")  # type: ignore[arg-type]
        with self.assertRaises(OverflowError):
            self.b.set_rate(2**64)
        with self.assertRaises(ValueError):
            self.w.set_limit(-1)
        with self.assertRaises(TypeError):
            self.b.set_token_bucket(10.0, 1)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            self.b.acquire(1, timeout=-1)
        with self.assertRaises(OverflowError):
            self.b.acquire(1, timeout=2.0**70)

    def test_definitions_refuse_bad_numbers(self) -> None:
        for make in (lambda: TokenBucket(rate=-1), lambda: TokenBucket(rate=1, burst=2**64),
                     lambda: TokenBucket(rate=1.5), lambda: TokenBucket(rate=True),
                     lambda: FixedWindow(limit=-3, window=1), lambda: SlidingLog(10, -1),
                     lambda: Concurrency(permits=2**70), lambda: TokenBucket(5, split=-1),
                     lambda: TokenBucket(5, per=float("nan"))):
            with self.assertRaises((ValueError, TypeError)):
                make()
        with self.assertRaises(OverflowError):
            TokenBucket(rate=2**64)
        with self.assertRaises(ValueError):
            Limiter.create_or_open(self.path + "2", {"x": SlidingLog(1, 1)}, mode=-1)
        with self.assertRaises(TypeError):
            Limiter.create_or_open(self.path + "2", {"x": SlidingLog(1, 1)}, mode="600")


class Keyed0AndKeys(FileTest):
    def test_keyed_zero_is_refused(self) -> None:
        with self.assertRaises(ValueError) as cm:
            Keyed(0)
        self.assertIn("capacity=0", str(cm.exception))
        with self.assertRaises(OverflowError):
            Keyed(2**27)
        with self.assertRaises(TypeError):
            Keyed(1.0)  # type: ignore[arg-type]

    def test_keys_are_str_or_bytes(self) -> None:
        with Limiter.create_or_open(self.path, {
                "k": TokenBucket(rate=1, per=HOUR, burst=2, keyed=Keyed(8))}) as lim:
            k = lim.limit("k")
            for wrong in (5, None, 1.5, ["a"]):
                with self.assertRaises(TypeError):
                    k.try_acquire_key(wrong)  # type: ignore[arg-type]
                with self.assertRaises(TypeError):
                    shmlimit.try_acquire_all((k, wrong, 1))  # type: ignore[arg-type]
            self.assertTrue(k.try_acquire_key("é"))
            self.assertEqual(k.peek_key("é".encode()).remaining, 0)  # the same key, as UTF-8
            self.assertTrue(k.try_acquire_key(bytearray(b"x")))


class NamesAndPaths(FileTest):
    def test_non_str_names_are_refused_not_crashing(self) -> None:
        for name in (5, None, b"api", 1.5):
            with self.assertRaises(TypeError) as cm:
                Limiter.create_or_open(self.path, {name: TokenBucket(rate=5)})  # type: ignore
            self.assertIn(repr(name), str(cm.exception))
        self.assertFalse(os.path.exists(self.path))
        with Limiter.create_or_open(self.path, {"api": TokenBucket(rate=5)}) as lim:
            with self.assertRaises(TypeError):
                lim.limit(b"api")  # type: ignore[arg-type]
            with self.assertRaises(TypeError):
                lim.limit(5)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Limiter.create_or_open(self.path, [("api", TokenBucket(rate=5))])  # type: ignore

    def test_nul_never_truncates_a_name_or_path(self) -> None:
        with Limiter.create_or_open(self.path, {"api": TokenBucket(rate=5)}) as lim:
            with self.assertRaises(ValueError):
                lim.limit("api\0junk")
        for bad in (self.path + "\0junk", pathlib.Path(self.dir) / "x\0y",
                    os.fsencode(self.path) + b"\0"):
            with self.assertRaises(ValueError) as cm:
                Limiter.open(bad)
            self.assertIn("NUL", str(cm.exception))
            with self.assertRaises(ValueError):
                Limiter.open_guarded(bad)
        with self.assertRaises(ValueError):
            Limiter.create_or_open(self.path, {"a\0b": TokenBucket(rate=5)})

    def test_paths_may_be_pathlike(self) -> None:
        path = pathlib.Path(self.path)
        with Limiter.create_or_open(path, {"api": TokenBucket(rate=5)}):
            pass
        with Limiter.open(path) as lim:
            self.assertEqual(list(lim.definitions()), ["api"])
        with self.assertRaises(TypeError):
            Limiter.open(5)  # type: ignore[arg-type]

    def test_io_errors_are_the_matching_oserror(self) -> None:
        missing = os.path.join(self.dir, "missing.shm")
        with self.assertRaises(FileNotFoundError) as cm:
            Limiter.open(missing)
        e = cm.exception
        self.assertIsInstance(e, shmlimit.IoError)
        self.assertIsInstance(e, shmlimit.ShmlimitError)
        self.assertEqual(e.errno, errno.ENOENT)
        self.assertEqual(e.code, 100)
        if os.geteuid() != 0:  # root opens anything
            Limiter.create_or_open(self.path, {"api": TokenBucket(rate=5)}).close()
            os.chmod(self.path, 0)
            with self.assertRaises(PermissionError) as pm:
                Limiter.open(self.path)
            self.assertIsInstance(pm.exception, shmlimit.IoError)
        with self.assertRaises(NotADirectoryError):
            Limiter.open(os.path.join(__file__, "x.shm"))
        # The module's own PermissionDeniedError (owner/mode refused) is not an OSError.
        self.assertFalse(issubclass(shmlimit.PermissionDeniedError, OSError))
        os.chmod(self.dir, stat.S_IRWXU)


class ReadBack(FileTest):
    def test_definitions_read_back_as_written(self) -> None:
        written = {
            "five": TokenBucket(rate=5),
            "hundred_a_minute": TokenBucket(rate=100, per=60, burst=10),
            "ten_an_hour": TokenBucket(rate=10, per=HOUR),
            "thirds": TokenBucket(rate=3, per=1),
            "window": FixedWindow(limit=10, window=60),
            "sliding": SlidingWindow(limit=7, window=1.5, aligned="monotonic"),
            "log": SlidingLog(limit=4, window=2),
            "pool": Concurrency(permits=3, lease=30),
            "near": TokenBucket(rate=9, near_limit=0.1, shadow=True),
        }
        with Limiter.create_or_open(self.path, written) as lim:
            read = lim.definitions()
        self.assertEqual(read, written)
        self.assertEqual({n: repr(d) for n, d in read.items()},
                         {n: repr(d) for n, d in written.items()})
        five = read["five"]
        assert isinstance(five, TokenBucket)
        self.assertEqual((five.rate, five.per, five.burst), (5, 1.0, 5))
        self.assertEqual(read["near"].near_limit, 0.1)
        with Limiter.open(self.path) as lim:
            self.assertEqual(repr(lim.limit("hundred_a_minute").definition),
                             "TokenBucket(rate=100, per=60.0, burst=10)")

    def test_an_inexact_period_reads_back_as_stored(self) -> None:
        # 7 per 1.1 s stores a 157142858 ns interval, which no usual period gives exactly.
        with Limiter.create_or_open(self.path, {"odd": TokenBucket(rate=7, per=1.1)}) as lim:
            odd = lim.definitions()["odd"]
        assert isinstance(odd, TokenBucket)
        self.assertEqual((odd.rate, odd.period_ns), (1, 157142858))
        self.assertEqual(odd, TokenBucket(rate=7, per=1.1))


class ErrorClasses(unittest.TestCase):
    def test_every_status_of_the_table_has_its_class(self) -> None:
        """The compiled module's table of status codes (shmlimit_bindings::status, which the C
        header's enum is checked against in ffi/src/status.rs) and the package's classes agree:
        every code has an exported class with that code and the description as its docstring
        where it has none of its own, and no class claims a code the table does not have."""
        from shmlimit import _native
        rows = {code: (name, cls, family, description)
                for code, name, cls, family, description in _native.STATUSES}
        self.assertGreater(len(rows), 20)
        self.assertNotIn(0, rows)
        self.assertEqual(set(shmlimit._ERRORS), set(rows))
        for code, (name, class_name, family, description) in rows.items():
            cls = shmlimit._ERRORS[code]
            self.assertEqual((cls.__name__, cls.code), (class_name, code), name)
            self.assertIn(cls.__name__, shmlimit.__all__)
            self.assertIs(getattr(shmlimit, class_name), cls)
            self.assertTrue(description)
            if family:
                import builtins
                self.assertTrue(issubclass(cls, getattr(builtins, family)), name)
        self.assertEqual(rows[119][1], "WrongKindError")
        self.assertEqual(rows[100][2], "OSError")


if __name__ == "__main__":
    unittest.main()
