"""Adaptive concurrency from Python: permits within a limit that starts at its minimum, the
context manager's outcomes, the status, a killed holder's permits taken over, bad outcomes and
latencies refused without a change, refused definitions."""

import math
import os
import signal
import time

import shmlimit
from shmlimit import AdaptiveConcurrency, Limiter

from ._support import FileTest, clear_of_remeasure


class AdaptiveTest(FileTest):
    def test_permits_within_the_limit_and_their_outcomes(self) -> None:
        clear_of_remeasure(2)
        with Limiter.create_or_open(self.path, {"dep": AdaptiveConcurrency(2, 8)}) as lim:
            dep = lim.limit("dep")
            self.assertEqual(lim.definitions()["dep"], AdaptiveConcurrency(2, 8))
            s = dep.adaptive_status()
            self.assertEqual((s.limit, s.permits, s.min, s.max, s.in_flight), (2.0, 2, 2, 8, 0))
            self.assertIsNone(s.rtt_recent_us)
            with dep.adaptive() as a, dep.adaptive() as b:
                self.assertTrue(a.held and b.held)
                self.assertIsNone(dep.try_acquire_adaptive())
                self.assertIsNone(dep.acquire_adaptive(timeout=0.01))
                with self.assertRaises(shmlimit.PermitUnavailableError):
                    dep.adaptive(timeout=0.01)
                self.assertEqual(dep.adaptive_status().in_flight, 2)
                b.outcome = "dropped"
                time.sleep(0.002)
            s = dep.adaptive_status()
            self.assertEqual(s.in_flight, 0)
            # The first release closed the first window with its one sample (a's, > 2 ms).
            self.assertIsNotNone(s.rtt_recent_us)
            self.assertGreater(s.rtt_recent_us or 0, 2000)
            self.assertTrue(2.0 <= s.limit <= 8.0)
            # An exception in the block reports an error: the limit backs off (to its minimum).
            with self.assertRaises(RuntimeError):
                with dep.adaptive():
                    raise RuntimeError("overloaded")
            self.assertEqual(dep.adaptive_status().in_flight, 0)

    def test_bad_outcomes_and_latencies_change_nothing(self) -> None:
        clear_of_remeasure(2)
        with Limiter.create_or_open(self.path, {"dep": AdaptiveConcurrency(1, 4)}) as lim:
            dep = lim.limit("dep")
            p = dep.try_acquire_adaptive()
            assert p is not None
            with self.assertRaises(ValueError):
                p.release("great")
            for bad in (math.nan, -1.0, math.inf):
                with self.assertRaises(shmlimit.InvalidParameterError):
                    p.release("ok", latency=bad)
            self.assertTrue(p.held)
            self.assertEqual(dep.adaptive_status().in_flight, 1)
            self.assertIsNone(dep.adaptive_status().rtt_recent_us)
            self.assertTrue(p.release("ok", latency=0.5))
            self.assertFalse(p.release("ok"))
            self.assertEqual(dep.adaptive_status().rtt_recent_us, 500000.0)

    def test_a_killed_holder_reports_nothing_and_its_permit_comes_back(self) -> None:
        with Limiter.create_or_open(self.path, {"dep": AdaptiveConcurrency(1, 4)}) as lim:
            dep = lim.limit("dep")
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                held = dep.try_acquire_adaptive()
                os.write(w, b"1" if held is not None else b"0")
                time.sleep(60)
                os._exit(0)
            os.close(w)
            self.assertEqual(os.read(r, 1), b"1")
            os.close(r)
            self.assertIsNone(dep.try_acquire_adaptive())
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            p = dep.acquire_adaptive(timeout=2.0)
            self.assertIsNotNone(p)
            self.assertIsNone(dep.adaptive_status().rtt_recent_us)

    def test_refused_definitions_and_other_kinds(self) -> None:
        for bad in ((0, 4), (5, 4), (1, 1 << 16)):
            with self.assertRaises(shmlimit.InvalidParameterError):
                Limiter.create_or_open(self.path, {"dep": AdaptiveConcurrency(*bad)})
        with Limiter.create_or_open(self.path, {"pool": shmlimit.Concurrency(1)}) as lim:
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("pool").try_acquire_adaptive()

    def test_the_tuning_is_stored_read_back_and_checked(self) -> None:
        tuned = AdaptiveConcurrency(2, 40, initial=6, window=0.05, smoothing=0.5, tolerance=2,
                                    headroom=0, backoff=0.5)
        with Limiter.create_or_open(self.path, {"dep": tuned}) as lim:
            back = lim.definitions()["dep"]
            self.assertEqual(back, tuned)
            self.assertEqual((back.initial, back.window, back.smoothing, back.tolerance,
                              back.headroom, back.backoff), (6, 0.05, 0.5, 2.0, 0.0, 0.5))
            self.assertEqual(lim.limit("dep").adaptive_status().permits, 6)
            # Defaults read back as written (0.2 is stored as 13107/65536).
            self.assertEqual(repr(lim.definitions()["dep"]), repr(tuned))
        with self.assertRaises(shmlimit.DefinitionConflictError):
            Limiter.create_or_open(self.path, {"dep": AdaptiveConcurrency(2, 40)})
        self.assertEqual(Limiter.open(self.path).definitions()["dep"], tuned)

        fresh = os.path.join(self.dir, "refused.shm")
        for options, field in [({"smoothing": math.nan}, "smoothing"),
                               ({"smoothing": 1.0}, "smoothing"),
                               ({"tolerance": 0.5}, "tolerance"),
                               ({"tolerance": math.inf}, "tolerance"),
                               ({"headroom": -0.1}, "headroom"),
                               ({"backoff": 0.0}, "backoff"),
                               ({"initial": 41}, "initial limit 41"),
                               ({"window": 0}, "window=0"),
                               ({"window": 0.0015}, "whole number of milliseconds")]:
            with self.subTest(options=options):
                with self.assertRaisesRegex(shmlimit.InvalidParameterError, field):
                    Limiter.create_or_open(fresh, {"dep": AdaptiveConcurrency(2, 40, **options)})
                self.assertFalse(os.path.exists(fresh), "a refused tuning created the file")
        with self.assertRaises(TypeError):
            AdaptiveConcurrency(2, 40, smoothing="0.5")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            AdaptiveConcurrency(2, 40, backoff=True)
