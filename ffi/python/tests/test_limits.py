"""The ``limits`` storage (``shmlimit.limits``): the fixed-window, moving-window and
sliding-window-counter strategies of the ``limits`` package on ``shmlimit://`` and
``async+shmlimit://``, in one process and across forked processes, and its bad input."""

import asyncio
import multiprocessing
import unittest

from shmlimit import (CounterStore, Counters, DefinitionConflictError, InvalidParameterError, Keyed,
                      Limiter, ZeroCostError)

from ._support import FileTest, need


def _strategies(limits: object) -> list:
    s = limits.strategies  # type: ignore[attr-defined]
    return [s.FixedWindowRateLimiter, s.MovingWindowRateLimiter,
            s.SlidingWindowCounterRateLimiter]


def _hammer(uri: str, strategy: str, item: str, tries: int, out: "multiprocessing.Queue[int]"
            ) -> None:
    import limits
    import shmlimit.limits  # noqa: F401  (registers the scheme)
    storage = limits.storage.storage_from_string(uri)
    limiter = getattr(limits.strategies, strategy)(storage)
    rate = limits.parse(item)
    out.put(sum(limiter.hit(rate, "user") for _ in range(tries)))


class LimitsStorageTest(FileTest):
    def setUp(self) -> None:
        super().setUp()
        self.limits = need("limits")
        import shmlimit.limits  # noqa: F401
        self.uri = f"shmlimit://{self.path}?moving_window=16&keys=1024"

    def test_the_scheme_is_registered_and_each_strategy_admits_the_limit(self) -> None:
        limits = self.limits
        storage = limits.storage.storage_from_string(self.uri)
        self.assertEqual(type(storage).__name__, "ShmlimitStorage")
        self.assertTrue(storage.check())
        rate = limits.parse("5/minute")
        for strategy in _strategies(limits):
            limiter = strategy(storage)
            hits = [limiter.hit(rate, "alice") for _ in range(8)]
            self.assertEqual(hits, [True] * 5 + [False] * 3, strategy.__name__)
            self.assertFalse(limiter.test(rate, "alice"))
            self.assertTrue(limiter.test(rate, "bob"))
            stats = limiter.get_window_stats(rate, "alice")
            self.assertEqual(stats.remaining, 0, strategy.__name__)
            self.assertGreater(stats.reset_time, 0)
            limiter.clear(rate, "alice")
            self.assertTrue(limiter.hit(rate, "alice"), strategy.__name__)
        self.assertGreaterEqual(storage.reset(), 1)

    def test_fixed_window_counts_as_limits_does(self) -> None:
        import time
        storage = self.limits.storage.storage_from_string(self.uri)
        self.assertEqual(storage.incr("k", 10), 1)
        self.assertEqual(storage.incr("k", 10, amount=4), 5)
        self.assertEqual(storage.get("k"), 5)
        self.assertAlmostEqual(storage.get_expiry("k"), time.time() + 10, delta=0.5)
        storage.clear("k")
        self.assertEqual(storage.get("k"), 0)

    def test_processes_share_one_budget_per_strategy(self) -> None:
        ctx = multiprocessing.get_context("fork")
        for strategy in ("FixedWindowRateLimiter", "MovingWindowRateLimiter",
                         "SlidingWindowCounterRateLimiter"):
            out: "multiprocessing.Queue[int]" = ctx.Queue()
            procs = [ctx.Process(target=_hammer, args=(self.uri, strategy, "10/hour", 40, out))
                     for _ in range(4)]
            for p in procs:
                p.start()
            total = sum(out.get(timeout=60) for _ in procs)
            for p in procs:
                p.join(60)
                self.assertEqual(p.exitcode, 0)
            self.assertEqual(total, 10, strategy)
            self.limits.storage.storage_from_string(self.uri).reset()

    def test_async_storage(self) -> None:
        limits = self.limits
        aio = need("limits.aio")
        storage = limits.storage.storage_from_string("async+" + self.uri)
        self.assertEqual(type(storage).__name__, "AsyncShmlimitStorage")
        rate = limits.parse("3/second")

        async def run() -> list:
            out = []
            for strategy in (aio.strategies.FixedWindowRateLimiter,
                             aio.strategies.MovingWindowRateLimiter,
                             aio.strategies.SlidingWindowCounterRateLimiter):
                limiter = strategy(storage)
                out.append([await limiter.hit(rate, "k") for _ in range(5)])
            return out

        for hits in asyncio.run(run()):
            self.assertEqual(hits, [True] * 3 + [False] * 2)

    def test_bad_input_is_refused_with_the_bound(self) -> None:
        limits = self.limits
        storage = limits.storage.storage_from_string(self.uri)
        moving = limits.strategies.MovingWindowRateLimiter(storage)
        with self.assertRaises(InvalidParameterError) as e:
            moving.hit(limits.parse("17/minute"), "k")
        self.assertIn("largest moving-window limit it supports is 16", str(e.exception))
        with self.assertRaises(ZeroCostError):
            storage.incr("k", 10, amount=0)
        with self.assertRaises(InvalidParameterError):
            storage.incr("k", 0)
        with self.assertRaises(ValueError):
            limits.storage.storage_from_string(f"shmlimit://{self.path}?colour=red")
        wrapped = limits.storage.storage_from_string(self.uri, wrap_exceptions=True)
        with self.assertRaises(limits.errors.StorageError):
            wrapped.incr("k", 0)
        with self.assertRaisesRegex(ValueError, "on_conflict must be 'refuse' or 'adopt'"):
            limits.storage.storage_from_string(self.uri + "&on_conflict=sometimes")

    def test_on_conflict_refuses_by_default_and_adopts_other_options(self) -> None:
        limits = self.limits
        from_string = limits.storage.storage_from_string
        from_string(self.uri).incr("k", 60)
        bigger = f"shmlimit://{self.path}?moving_window=32&keys=1024"
        with self.assertRaises(DefinitionConflictError) as e:
            from_string(bigger)
        self.assertIn("16", str(e.exception))
        self.assertIn("32", str(e.exception))
        self.assertRaises(DefinitionConflictError, from_string, bigger + "&on_conflict=refuse")
        # on_conflict alone is no layout: the file is attached as it is.
        alone = from_string(f"shmlimit://{self.path}?on_conflict=adopt")
        self.assertEqual(alone.get("k"), 1)
        self.assertEqual(Limiter.open(self.path).definitions()["limits"].moving_window, 16)
        # Adopted, as a query parameter and as a keyword option (flask-limiter's
        # storage_options): the file now holds the requested layout.
        adopted = from_string(bigger + "&on_conflict=adopt")
        moving = limits.strategies.MovingWindowRateLimiter(adopted)
        self.assertTrue(moving.hit(limits.parse("32/minute"), "m", cost=32))
        self.assertEqual(Limiter.open(self.path).definitions()["limits"].moving_window, 32)
        wider = f"shmlimit://{self.path}?moving_window=32&keys=2048"
        self.assertRaises(DefinitionConflictError, from_string, wider)
        from_string(wider, on_conflict="adopt")
        self.assertEqual(Limiter.open(self.path).definitions()["limits"].keyed.capacity, 2048)


def _hit_keys(uri: str, worker: int, out: "multiprocessing.Queue[int]") -> None:
    import limits
    import shmlimit.limits  # noqa: F401  (registers the scheme)
    storage = limits.storage.storage_from_string(uri)
    fixed = limits.strategies.FixedWindowRateLimiter(storage)
    moving = limits.strategies.MovingWindowRateLimiter(storage)
    short, long = limits.parse("5/second"), limits.parse("5/hour")
    for i in range(10):
        fixed.hit(short, f"w{worker}-{i}")
        moving.hit(short, f"w{worker}-{i}")
    out.put(int(moving.hit(long, f"w{worker}-long")))


class CounterStoreGcTest(FileTest):
    def test_gc_retires_idle_keys_of_every_strategy_left_by_other_processes(self) -> None:
        limits = need("limits")
        import shmlimit.limits  # noqa: F401
        uri = f"shmlimit://{self.path}?moving_window=8&keys=256"
        ctx = multiprocessing.get_context("fork")
        out: "multiprocessing.Queue[int]" = ctx.Queue()
        procs = [ctx.Process(target=_hit_keys, args=(uri, w, out)) for w in range(3)]
        for p in procs:
            p.start()
        self.assertEqual(sum(out.get(timeout=60) for _ in procs), 3)
        for p in procs:
            p.join(60)
            self.assertEqual(p.exitcode, 0)
        store = CounterStore(Limiter.open(self.path).limit("limits"))
        # 3 workers x 10 keys in the counter table and 11 logs each in the log table.
        self.assertEqual(store.key_occupancy(), (63, 512))
        import time
        time.sleep(1.2)
        self.assertEqual(store.reclaim_idle_keys(), 60)
        self.assertEqual(store.key_occupancy(), (3, 512))
        self.assertEqual(Limiter.open(self.path).limit("limits").key_occupancy(), (3, 512))
        moving = limits.strategies.MovingWindowRateLimiter(limits.storage.storage_from_string(uri))
        self.assertEqual(moving.get_window_stats(limits.parse("5/hour"), "w0-long").remaining, 4)


class CounterStoreTest(FileTest):
    def test_counter_store(self) -> None:
        limiter = Limiter.create_or_open(
            self.path, {"c": Counters(moving_window=4, keyed=Keyed(64))})
        store = CounterStore(limiter.limit("c"))
        self.assertEqual(store.incr("k", 60), 1)
        self.assertEqual(store.count("k")[0], 1)
        self.assertTrue(store.acquire_moving(b"m", 2, 60, 2))
        self.assertFalse(store.acquire_moving(b"m", 2, 60))
        self.assertEqual(store.moving(b"m", 2, 60)[0], 2)
        self.assertTrue(store.acquire_fixed("f", 1, 60))
        self.assertFalse(store.acquire_fixed("f", 1, 60))
        self.assertTrue(store.acquire_sliding("s", 1, 60))
        self.assertEqual(store.sliding("s", 60)[2], 1)
        self.assertEqual(store.max_moving_limit, 4)
        store.clear("m")
        self.assertEqual(store.moving(b"m", 2, 60)[0], 0)
        self.assertEqual(limiter.definitions()["c"].moving_window, 4)

    def test_decr_and_set(self) -> None:
        limiter = Limiter.create_or_open(self.path, {"c": Counters(keyed=Keyed(64))})
        store = CounterStore(limiter.limit("c"))
        self.assertEqual(store.decr("k"), 0, "a key that counts nothing stays at zero")
        self.assertEqual(store.incr("k", 60, 5), 5)
        left = store.count("k")[1]
        self.assertEqual(store.decr("k", 2), 3)
        count, left_after = store.count("k")
        self.assertEqual(count, 3)
        self.assertLessEqual(left_after, left, "the window keeps its end")
        self.assertEqual(store.decr("k", 99), 0)
        self.assertEqual(store.set("k", 3, 9), 9)
        count, left = store.count("k")
        self.assertEqual(count, 9)
        self.assertTrue(2.9 < left <= 3.01, left)
        with self.assertRaises(ZeroCostError):
            store.decr("k", 0)
        with self.assertRaises(ValueError):
            store.set("k", 3, -1)
        self.assertEqual(store.count("k")[0], 9, "a refused call changes nothing")


if __name__ == "__main__":
    unittest.main()
