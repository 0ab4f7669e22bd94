"""Keyed adaptive concurrency from Python: per key, permits within the key's own limit, each
key learning from its own releases, the status of a key, bad keys and calls of the wrong shape
refused without a change, refused definitions, and a middleware check without a key refused
(tests/test_web_keyed_adaptive.py has the middleware holding a key's permit)."""

import shmlimit
from shmlimit import AdaptiveConcurrency, Keyed, Limiter
from shmlimit.web import Check, Guard

from ._support import FileTest, clear_of_remeasure


class KeyedAdaptiveTest(FileTest):
    def test_each_key_has_its_own_limit(self) -> None:
        clear_of_remeasure(2)
        spec = AdaptiveConcurrency(2, 8, keyed=Keyed(16))
        with Limiter.create_or_open(self.path, {"per_host": spec}) as lim:
            per_host = lim.limit("per_host")
            self.assertEqual(lim.definitions()["per_host"], spec)
            a = per_host.try_acquire_adaptive(key="db-1")
            b = per_host.try_acquire_adaptive(key=b"db-1")
            assert a is not None and b is not None
            self.assertIsNone(per_host.try_acquire_adaptive(key="db-1"))
            self.assertIsNone(per_host.acquire_adaptive(timeout=0.01, key="db-1"))
            with self.assertRaises(shmlimit.PermitUnavailableError):
                per_host.adaptive(timeout=0.01, key="db-1")
            with per_host.adaptive(key="db-2") as c:
                self.assertTrue(c.held)
                self.assertEqual(per_host.adaptive_status(key="db-2").in_flight, 1)
            s = per_host.adaptive_status(key="db-1")
            self.assertEqual((s.limit, s.permits, s.min, s.max, s.in_flight), (2.0, 2, 2, 8, 2))
            # db-1's requests fail, db-2's succeeded: each key's samples are its own.
            self.assertTrue(a.release("error", latency=0.01))
            self.assertTrue(b.release("dropped"))
            self.assertIsNone(per_host.adaptive_status(key="db-1").rtt_recent_us)
            self.assertIsNotNone(per_host.adaptive_status(key="db-2").rtt_recent_us)
            self.assertEqual(per_host.adaptive_status(key="db-1").limit, 2.0)
            fresh = per_host.adaptive_status(key="never-seen")
            self.assertEqual((fresh.limit, fresh.in_flight), (2.0, 0))
            self.assertEqual(per_host.key_occupancy(), (2, 16))

    def test_bad_input_changes_nothing(self) -> None:
        clear_of_remeasure(2)
        spec = AdaptiveConcurrency(1, 4, keyed=Keyed(4))
        with Limiter.create_or_open(self.path, {"k": spec, "plain": AdaptiveConcurrency(1, 4)}) \
                as lim:
            k, plain = lim.limit("k"), lim.limit("plain")
            with self.assertRaises(shmlimit.InvalidKeyError):
                k.try_acquire_adaptive(key="")
            with self.assertRaises(shmlimit.InvalidKeyError):
                k.adaptive_status(key=b"x" * 1025)
            with self.assertRaises(TypeError):
                k.try_acquire_adaptive(key=3)  # type: ignore[arg-type]
            with self.assertRaises(shmlimit.WrongKindError):
                k.try_acquire_adaptive()  # a keyed limit needs a key
            with self.assertRaises(shmlimit.WrongKindError):
                plain.try_acquire_adaptive(key="a")  # an unkeyed one takes none
            self.assertEqual(k.key_occupancy(), (0, 4))
            p = k.try_acquire_adaptive(key="a")
            assert p is not None
            with self.assertRaises(ValueError):
                p.release("great")
            self.assertTrue(p.held)
            self.assertTrue(p.release("ok", latency=0.25))
            self.assertEqual(k.adaptive_status(key="a").rtt_recent_us, 250000.0)
        for bad in (AdaptiveConcurrency(2, 65, keyed=Keyed(4)),
                    AdaptiveConcurrency(9, 8, keyed=Keyed(4))):
            with self.assertRaises(shmlimit.InvalidParameterError):
                Limiter.create_or_open(self.path + ".bad", {"dep": bad})

    def test_a_keyed_adaptive_check_needs_a_key_function(self) -> None:
        spec = AdaptiveConcurrency(1, 4, keyed=Keyed(4))
        guard = Guard(self.path, {"dep": spec}, [Check("dep")])
        with self.assertRaisesRegex(ValueError, "needs a key function"):
            guard.limits()
