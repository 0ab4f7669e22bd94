"""Tests of the package against the real library: every call's success and error paths (run
with pytest or unittest against the installed package; see ffi/README.md)."""

import datetime
import errno
import os
import tempfile
import threading
import time
import unittest

import shmlimit
from shmlimit import FixedWindow, Limiter, SlidingLog, SlidingWindow, TokenBucket

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

    def test_a_definition_crosses_as_the_fields_of_shmlimit_def(self):
        # What the compiled module reads from a definition: the fields of C's shmlimit_def
        # (ffi/include/shmlimit.h), by the same names, then an adaptive limit's tuning (C's
        # shmlimit_adaptive_tuning, given beside the definition); a field it does not know is
        # an error.
        fields = ("name", "kind", "alignment", "limit", "period_ns", "rate", "key_capacity",
                  "on_full", "flags", "near_limit", "split", "fleet_weight", "fleet_emission_ns",
                  "adaptive_tuning")
        self.assertEqual(shmlimit._Def.__slots__, fields)
        d = shmlimit._Def("x")
        TokenBucket(rate=5, burst=7)._fill(d)
        self.assertEqual((d.limit, d.period_ns, d.rate), (7, 10**9, 5))

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
            # Dates in the past: a date ahead of the clock (beyond 1 ms) is refused.
            t0 = time.monotonic_ns() - 2 * 10**9
            self.assertEqual(b.try_acquire_at(2, t0).remaining, 0)
            d = b.try_acquire_at(1, t0 + 250_000_000)
            self.assertFalse(d)
            self.assertEqual(d.retry_after_ns, 750_000_000)
            self.assertTrue(b.try_acquire_at(1, t0 + 10**9))
            for bad in (time.monotonic_ns() + 3600 * 10**9, 2**63, 2**64 - 1):
                with self.assertRaises(shmlimit.ClockOutOfRangeError):
                    b.try_acquire_at(1, bad)
            # Out of u64 altogether: refused before any call (never wrapped).
            with self.assertRaises(ValueError):
                b.try_acquire_at(1, -1)
            with self.assertRaises(OverflowError):
                b.try_acquire_at(1, 2**64)
            self.assertEqual(b.stats().allowed, 2)

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
        # World-writable modes, and modes the owner cannot read and write (0 above all).
        for mode in (0o666, 0o606, 0o777, 0o002, 0, 0o400, 0o200):
            with self.assertRaises(shmlimit.InvalidParameterError, msg=oct(mode)):
                Limiter.create_or_open(self.path, {"x": SlidingLog(1, 1)}, mode=mode)
            self.assertFalse(os.path.exists(self.path), oct(mode))
        with self.assertRaises(TypeError):  # names are str
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


class LaterFeaturesTest(unittest.TestCase):
    """Definition options, refunds, retuning, waits, composed checks, keys and permits."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "limits.shm")

    def tearDown(self):
        self.dir.cleanup()

    def test_definition_options_round_trip(self):
        limits = {
            "per_user": TokenBucket(rate=10, burst=5, keyed=shmlimit.Keyed(1000, on_full="error")),
            "dry": FixedWindow(3, 60, shadow=True, near_limit=0.25),
            "hot": TokenBucket(rate=1000, burst=64, split=4),
            "share": TokenBucket(rate=100, fleet=shmlimit.FleetShare(rate=1000, per=1, weight=3)),
            "pool": shmlimit.Concurrency(4, lease=30, shadow=True),
        }
        with Limiter.create_or_open(self.path, limits):
            pass
        with Limiter.open(self.path) as lim:
            stored = lim.definitions()
        self.assertEqual(stored["per_user"].keyed, shmlimit.Keyed(1024, on_full="error"))
        self.assertTrue(stored["dry"].shadow)
        self.assertEqual(stored["dry"].near_limit, 0.25)
        self.assertEqual(stored["hot"].split, 4)
        self.assertEqual(stored["share"].fleet.weight, 3)
        self.assertEqual(stored["share"].fleet.emission_ns, 1_000_000)
        self.assertTrue(stored["pool"].shadow)
        self.assertIn("keyed=Keyed(1024, on_full='error')", repr(stored["per_user"]))
        # What the file reports attaches again; any option that differs conflicts.
        Limiter.create_or_open(self.path, stored).close()
        with self.assertRaises(shmlimit.DefinitionConflictError):
            Limiter.create_or_open(self.path, dict(limits, dry=FixedWindow(3, 60)))
        with self.assertRaises(shmlimit.InvalidParameterError):
            shmlimit.Keyed(8, on_full="maybe")
        with self.assertRaises(shmlimit.InvalidParameterError):
            TokenBucket(rate=1, near_limit=2.0)
        other = os.path.join(self.dir.name, "other.shm")
        with self.assertRaises(shmlimit.InvalidParameterError):
            Limiter.create_or_open(other, {"x": SlidingLog(5, 1, keyed=shmlimit.Keyed(8))})
        with self.assertRaises(shmlimit.InvalidParameterError):
            Limiter.create_or_open(other, {"x": FixedWindow(5, 1, split=2)})

    def test_refunds(self):
        with Limiter.create_or_open(self.path, {
            "b": TokenBucket(rate=1, per=HOUR, burst=2),
            "log": SlidingLog(2, HOUR),
        }) as lim:
            b, log = lim.limit("b"), lim.limit("log")
            grant = b.try_acquire(2)
            self.assertEqual(grant.cost, 2)
            self.assertFalse(b.try_acquire())
            self.assertEqual(b.peek().cost, 0)
            b.refund(grant, units=1)
            self.assertTrue(b.peek(1) and not b.peek(2))
            b.refund(grant)
            self.assertTrue(b.peek(2))
            g = log.try_acquire(2)
            log.refund(g)
            self.assertTrue(log.try_acquire(2))
            b.refund(b.try_acquire(2))  # a grant given straight back
            self.assertTrue(b.peek(2))
            with self.assertRaises(shmlimit.CostExceedsCapacityError):
                log.try_acquire(3)
            # A grant names its limit: refunded on another one, it is refused.
            spent = b.try_acquire(2)
            with self.assertRaises(shmlimit.WrongKindError):
                log.refund(spent)
            b.refund(spent)
            self.assertTrue(b.peek(2))

    def test_retune_reset_and_live_definition(self):
        with Limiter.create_or_open(self.path, {
            "b": TokenBucket(rate=1, per=HOUR, burst=4),
            "w": FixedWindow(2, HOUR, aligned="monotonic"),
            "log": SlidingLog(2, HOUR),
        }) as lim:
            b, w, log = lim.limit("b"), lim.limit("w"), lim.limit("log")
            b.set_rate(10)
            self.assertEqual(b.live_definition.emission_ns, 100_000_000)
            # definition is the live one, as Limiter.definitions(); created_definition the
            # file's own.
            self.assertEqual(b.definition.emission_ns, 100_000_000)
            self.assertEqual(b.created_definition.emission_ns, HOUR * 10**9)
            b.set_token_bucket(burst=6, rate=1, per=HOUR)
            self.assertEqual(b.live_definition.burst, 6)
            self.assertTrue(b.try_acquire(6))
            self.assertFalse(b.try_acquire())
            b.reset()
            self.assertTrue(b.peek(6))
            self.assertTrue(w.try_acquire(2))
            w.set_limit(3)
            self.assertEqual(w.live_definition.limit, 3)
            self.assertTrue(w.try_acquire())
            with self.assertRaises(shmlimit.WrongKindError):
                log.set_rate(5)
            with self.assertRaises(shmlimit.WrongKindError):
                b.set_limit(5)
            with self.assertRaises(shmlimit.InvalidParameterError):
                b.set_rate(0)

    def test_deploy_that_changes_a_limit(self):
        # Release 1: 200/s. A worker uses 15 of the 20 tokens.
        old = Limiter.create_or_open(self.path, {"api": TokenBucket(rate=200, burst=20)})
        api = old.limit("api")
        self.assertTrue(api.try_acquire(15))
        # Release 2 asks for 300/s: refused by default, naming the fields...
        new = {"api": TokenBucket(rate=300, burst=20)}
        with self.assertRaises(shmlimit.DefinitionConflictError) as cm:
            Limiter.create_or_open(self.path, new)
        self.assertTrue(str(cm.exception).endswith(
            "`api`: rate 200/s in the file, 300/s requested; burst 20 in both"), str(cm.exception))
        with self.assertRaises(ValueError):
            Limiter.create_or_open(self.path, new, on_conflict="replace")
        # ... adopted live with on_conflict="adopt": same file, usage kept, old handle retuned.
        with Limiter.create_or_open(self.path, new, on_conflict="adopt") as lim:
            self.assertEqual(lim.limit("api").live_definition.emission_ns, 3_333_334)
            # definitions() reads the adopted parameters; created_definitions() the file's own.
            self.assertEqual(lim.definitions()["api"].emission_ns, 3_333_334)
            self.assertEqual(lim.definitions()["api"].burst, 20)
            self.assertEqual(lim.created_definitions()["api"].emission_ns, 5_000_000)
            self.assertEqual(list(lim.created_definitions()), ["api"])
        self.assertEqual(api.live_definition.emission_ns, 3_333_334)
        self.assertEqual(api.definition.emission_ns, 3_333_334)
        self.assertEqual(api.created_definition.emission_ns, 5_000_000)
        # So does every other limiter attached to the file: the retune is in the file.
        self.assertEqual(old.definitions()["api"].emission_ns, 3_333_334)
        self.assertEqual(old.created_definitions()["api"].emission_ns, 5_000_000)
        # A file retuned to 300/s matches a request for 300/s (refuse, the default).
        Limiter.create_or_open(self.path, new).close()
        # A new limit needs a new file: it replaces the old one, and the old handle moves to
        # it within about a second.
        newer = {"api": TokenBucket(rate=300, burst=20), "log": SlidingLog(3, HOUR)}
        with Limiter.create_or_open(self.path, newer, on_conflict="adopt") as lim:
            self.assertEqual(set(lim.definitions()), {"api", "log"})
            self.assertEqual(lim.limit("api").stats().allowed, 0)
            time.sleep(1.1)
            api.peek()  # runs the check (decided on the old file); the next decision moves
            self.assertTrue(api.try_acquire(20))  # the new file's full bucket
            self.assertEqual(lim.limit("api").stats().allowed, 1)
        old.close()
    def test_calendar_windows(self):
        week = FixedWindow(5, shmlimit.WEEK, aligned="calendar", utc_offset=-5 * 3600)
        with Limiter.create_or_open(self.path, {"week": week}) as lim:
            self.assertEqual(lim.definitions()["week"], week)
            self.assertTrue(lim.limit("week").try_acquire(5))
            self.assertFalse(lim.limit("week").try_acquire())
        month = FixedWindow(3, shmlimit.MONTH, aligned="calendar")
        with Limiter.create_or_open(os.path.join(self.dir.name, "month.shm"),
                                    {"month": month}) as lim:
            self.assertEqual(lim.definitions()["month"], month)
            self.assertTrue(lim.limit("month").try_acquire(3))
            denied = lim.limit("month").try_acquire()
            self.assertFalse(denied)
            self.assertLessEqual(denied.retry_after, 31 * shmlimit.DAY)
        with self.assertRaises(shmlimit.InvalidParameterError):
            FixedWindow(5, shmlimit.DAY, utc_offset=3600)
        with self.assertRaises(shmlimit.InvalidParameterError):
            Limiter.create_or_open(os.path.join(self.dir.name, "bad.shm"), {
                "d": FixedWindow(5, shmlimit.DAY, aligned="calendar", utc_offset=19 * 3600)})

    def test_rates_per_day_week_and_month(self):
        self.assertEqual(TokenBucket(rate=10_000, per=shmlimit.DAY).emission_ns, 8_640_000_000)
        self.assertEqual(TokenBucket(rate=7, per=shmlimit.WEEK).emission_ns, 86_400 * 10**9)
        self.assertEqual(TokenBucket(rate=10_000, per=shmlimit.MONTH).emission_ns, 262_974_600_000)

    def test_a_daily_quota_survives_a_simulated_reboot_unless_the_file_resets(self):
        day = 86_400
        boot_id_offset = 12 * 8  # header words 12-13
        for choice, back in (("translate", False), (None, False), ("reset", True)):
            path = os.path.join(self.dir.name, f"reboot-{choice}.shm")
            with Limiter.create_or_open(path, {"daily": FixedWindow(10, day)},
                                        on_reboot=choice) as lim:
                self.assertTrue(lim.limit("daily").try_acquire(10))
                self.assertFalse(lim.limit("daily").try_acquire())
            # Another boot wrote the file: its boot id differs.
            with open(path, "r+b") as f:
                f.seek(boot_id_offset)
                word = bytearray(f.read(8))
                word[0] ^= 0xFF
                f.seek(boot_id_offset)
                f.write(bytes(word))
            with Limiter.open(path) as lim:
                self.assertEqual(bool(lim.limit("daily").try_acquire()), back, choice)
        with self.assertRaises(shmlimit.DefinitionConflictError):
            Limiter.open(os.path.join(self.dir.name, "reboot-reset.shm"), on_reboot="translate")
        with self.assertRaises(ValueError):
            Limiter.open(self.path, on_reboot="sometimes")

    def test_acquire_with_timeout(self):
        with Limiter.create_or_open(self.path, {
            "paced": TokenBucket(rate=100, per=1, burst=1),
            # A window no boundary of which falls during the test.
            "w": FixedWindow(1, 10 * 365 * 86400, aligned="monotonic"),
            "pool": shmlimit.Concurrency(1),
        }) as lim:
            paced, w = lim.limit("paced"), lim.limit("w")
            self.assertTrue(paced.acquire(timeout=0))
            self.assertTrue(paced.acquire(timeout=10))  # the next token is 10 ms away
            self.assertTrue(w.acquire(timeout=datetime.timedelta(seconds=1)))
            refused = w.acquire(timeout=0.01)  # the next window is years away
            self.assertFalse(refused)
            self.assertGreater(refused.retry_after, 0.01)
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("pool").acquire(timeout=1)

    def test_reservations(self):
        with Limiter.create_or_open(self.path, {
            "slow": TokenBucket(rate=1, per=HOUR, burst=2),
            "paced": TokenBucket(rate=100, per=1, burst=1),
            "w": FixedWindow(1, HOUR),
        }) as lim:
            slow, paced = lim.limit("slow"), lim.limit("paced")
            with slow.reserve(2) as now:
                self.assertTrue(now and now.delay == 0)
                self.assertTrue(now.wait())
                self.assertFalse(now.cancel())  # used
            refused = slow.reserve(1, max_delay=0)
            self.assertTrue(refused.refused)
            self.assertGreater(refused.delay, 0)
            self.assertFalse(refused.wait())
            self.assertFalse(refused.cancel())
            later = slow.reserve(1, max_delay=2 * HOUR)
            last = slow.reserve(1, max_delay=3 * HOUR)
            self.assertTrue(later and last)
            self.assertGreater(last.ready_at_ns, later.ready_at_ns)  # booking order
            self.assertFalse(later.cancel())  # `last` was booked after it
            self.assertTrue(last.cancel())
            with self.assertRaises(shmlimit.InvalidParameterError):
                last.wait()
            later.close()
            last.close()
            with self.assertRaises(shmlimit.ClosedError):
                later.cancel()
            self.assertTrue(paced.try_acquire())
            r = paced.reserve(1, max_delay=10)
            self.assertLessEqual(r.delay, 0.01)
            self.assertTrue(r.wait())
            r.close()
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("w").reserve(1)

    def test_composed_checks(self):
        with Limiter.create_or_open(self.path, {
            "user": TokenBucket(rate=1, per=HOUR, burst=3),
            "down": SlidingLog(1, HOUR),
            "pool": shmlimit.Concurrency(1),
        }) as lim:
            user, down = lim.limit("user"), lim.limit("down")
            first = shmlimit.try_acquire_all((user, 1), down)
            self.assertTrue(first)
            self.assertIsNone(first.denied_by)
            self.assertEqual([d.cost for d in first.decisions], [1, 1])
            second = shmlimit.try_acquire_all((user, 1), (down, 1))
            self.assertFalse(second)
            self.assertEqual(second.denied_by, 1)
            self.assertIsNone(second.decisions[0])  # refunded
            self.assertGreater(second.retry_after, 0)
            self.assertEqual(user.peek().remaining, 1)  # the denied request took nothing
            second.refund()  # nothing to give back
            first.refund()
            self.assertEqual(user.peek().remaining, 2)
            self.assertTrue(down.peek())
            with self.assertRaises(shmlimit.WrongKindError):
                shmlimit.try_acquire_all(user, lim.limit("pool"))
            self.assertEqual(user.peek().remaining, 2)
            with self.assertRaises(shmlimit.ZeroCostError):
                shmlimit.try_acquire_all((user, 1), (down, 0))
            with self.assertRaises(shmlimit.BadLengthError):
                shmlimit.try_acquire_all(*([user] * (shmlimit.MAX_CHECKS + 1)))
            with self.assertRaises(TypeError):
                shmlimit.try_acquire_all(("user", 1))
            self.assertTrue(shmlimit.try_acquire_all())
            down.close()
            with self.assertRaises(shmlimit.ClosedError):
                first.refund()
            with self.assertRaises(shmlimit.ClosedError):
                shmlimit.try_acquire_all(user, down)

    def test_keyed_limits(self):
        with Limiter.create_or_open(self.path, {
            "per_user": TokenBucket(rate=1, per=HOUR, burst=2, keyed=shmlimit.Keyed(64)),
            "strict": FixedWindow(1, HOUR, keyed=shmlimit.Keyed(2, on_full="error")),
            "plain": TokenBucket(rate=1),
        }) as lim:
            per_user, strict = lim.limit("per_user"), lim.limit("strict")
            self.assertEqual(per_user.peek_key("alice", 2).remaining, 0)
            self.assertEqual(per_user.key_occupancy(), (0, 64))
            grant = per_user.try_acquire_key("alice", 2)
            self.assertTrue(grant)
            self.assertFalse(per_user.try_acquire_key("alice"))
            self.assertTrue(per_user.try_acquire_key(b"bob"))
            self.assertTrue(per_user.try_acquire_key(b"a\x00b"))  # keys are bytes
            per_user.refund_key("alice", grant)
            self.assertTrue(per_user.try_acquire_key("alice", 2))
            t0 = time.monotonic_ns()
            self.assertTrue(per_user.try_acquire_key_at("carol", 2, t0))
            self.assertEqual(per_user.key_occupancy(), (4, 64))
            self.assertEqual(per_user.reclaim_idle_keys(), 0)
            self.assertTrue(strict.try_acquire_key("x") and strict.try_acquire_key("y"))
            with self.assertRaises(shmlimit.TableFullError):
                strict.try_acquire_key("z")
            with self.assertRaises(shmlimit.InvalidKeyError):
                per_user.try_acquire_key(b"")
            with self.assertRaises(shmlimit.InvalidKeyError):
                per_user.try_acquire_key(b"k" * (shmlimit.MAX_KEY_LEN + 1))
            with self.assertRaises(TypeError):
                per_user.try_acquire_key(5)
            with self.assertRaises(shmlimit.WrongKindError):
                per_user.try_acquire()
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("plain").try_acquire_key("a")
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("plain").key_occupancy()

    def test_permits(self):
        with Limiter.create_or_open(self.path, {
            "pool": shmlimit.Concurrency(2),
            "dry": shmlimit.Concurrency(1, shadow=True),
            "b": TokenBucket(rate=1),
        }) as lim:
            pool = lim.limit("pool")
            with pool.permit() as p:
                self.assertTrue(p.held and not p.shadow and p.id != 0)
                holders = pool.permit_holders()
                self.assertEqual([(h.id, h.pid) for h in holders], [(p.id, os.getpid())])
                self.assertFalse(holders[0].reclaimable)
                self.assertIsNone(holders[0].lease_expiry_ns)
                q = pool.try_acquire_permit()
                self.assertIsNotNone(q)
                self.assertIsNone(pool.try_acquire_permit())
                with self.assertRaises(shmlimit.PermitUnavailableError) as cm:
                    with pool.permit(timeout=0.01):
                        self.fail("no permit is free")
                self.assertIsInstance(cm.exception, TimeoutError)
                self.assertIsNone(pool.acquire_permit(timeout=0.01))
                self.assertTrue(q.release())
                self.assertFalse(q.release())  # once
            self.assertFalse(p.held)
            self.assertEqual(pool.permit_holders(), [])
            # A waiter gets a permit released by another thread.
            first = pool.permit()
            second = pool.permit()
            threading.Timer(0.05, first.release).start()
            third = pool.acquire_permit(timeout=30)
            self.assertIsNotNone(third)
            self.assertEqual(len(pool.permit_holders()), 2)
            kept = second.id
            del second  # garbage-collected: released
            self.assertFalse(pool.release_permit(kept))
            third.release()
            self.assertEqual(pool.reclaim_dead_permits(), 0)
            # A shadow limit never refuses; the extra permit holds nothing.
            dry = lim.limit("dry")
            with dry.permit() as real, dry.permit() as extra:
                self.assertFalse(real.shadow)
                self.assertTrue(extra.shadow and not extra.held)
            self.assertEqual(dry.stats().shadow_denied, 1)
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("b").permit()
            with self.assertRaises(shmlimit.WrongKindError):
                pool.try_acquire()
            pool.close()
            with self.assertRaises(shmlimit.ClosedError):
                pool.permit()


    def test_keyed_permits(self):
        with Limiter.create_or_open(self.path, {
            "per_user": shmlimit.Concurrency(2, keyed=shmlimit.Keyed(64)),
            "pool": shmlimit.Concurrency(1),
        }) as lim:
            per_user = lim.limit("per_user")
            with per_user.key_permit("alice") as a1, per_user.key_permit(b"alice") as a2:
                self.assertTrue(a1.held and a2.held and a1.id != a2.id)
                self.assertIsNone(per_user.try_acquire_key_permit("alice"))
                self.assertIsNone(per_user.acquire_key_permit("alice", timeout=0.01))
                with self.assertRaises(shmlimit.PermitUnavailableError):
                    per_user.key_permit("alice", timeout=0.01)
                self.assertEqual(per_user.key_permits_held("alice"), 2)
                with per_user.key_permit("bob") as b:  # bob has his own
                    tags = sorted(h.key_tag for h in per_user.permit_holders())
                    alice, bob = per_user.key_tag("alice"), per_user.key_tag("bob")
                    self.assertEqual(tags, sorted([alice, alice, bob]))
                    self.assertTrue(b.held)
                # A waiter for alice gets a permit another thread releases.
                threading.Timer(0.05, a1.release).start()
                a3 = per_user.acquire_key_permit("alice", timeout=30)
                self.assertIsNotNone(a3)
                a3.release()
            self.assertEqual(per_user.key_permits_held("alice"), 0)
            self.assertEqual(per_user.permit_holders(), [])
            with self.assertRaises(shmlimit.InvalidKeyError):
                per_user.try_acquire_key_permit("")
            with self.assertRaises(shmlimit.WrongKindError):
                per_user.try_acquire_permit()
            with self.assertRaises(shmlimit.WrongKindError):
                lim.limit("pool").try_acquire_key_permit("alice")
            pool = lim.limit("pool")
            with pool.permit():
                self.assertIsNone(pool.permit_holders()[0].key_tag)  # unkeyed

class GuardedTest(unittest.TestCase):
    """Guarded limits: the explicit policy while the file is missing, real decisions after."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "late.shm")

    def tearDown(self):
        self.dir.cleanup()

    def test_policy_while_missing_then_the_limit(self):
        reopen = 0.05
        guarded = Limiter.open_guarded(self.path, reopen_every=reopen)
        self.assertFalse(guarded.attached)
        search = guarded.limit("search", shmlimit.FAIL_OPEN)
        payments = guarded.limit("payments", shmlimit.FAIL_CLOSED)
        per_user = guarded.limit("per_user", shmlimit.FAIL_OPEN)
        for policy in (0, 3):
            with self.assertRaises(shmlimit.InvalidParameterError):
                guarded.limit("search", policy)
        # Fail-open admits, unlimited and flagged; fail-closed denies until the next attempt.
        opened = [search.try_acquire() for _ in range(50)]
        self.assertTrue(all(d.allowed and d.unavailable and d.cost == 0 for d in opened))
        search.refund(opened[0])
        self.assertTrue(per_user.try_acquire_key("alice").unavailable)
        with self.assertRaises(shmlimit.InvalidKeyError):
            per_user.try_acquire_key(b"")
        with self.assertRaises(shmlimit.ZeroCostError):
            payments.try_acquire(0)
        for _ in range(5):
            d = payments.try_acquire()
            self.assertTrue(d.denied and d.unavailable)
            self.assertTrue(0 < d.retry_after_ns <= round(reopen * 1e9), d)
        self.assertTrue(payments.peek().unavailable)

        # The file appears; every failed attempt was before this, so after one interval the
        # next decision attaches and the limit applies (no token refills within an hour).
        with Limiter.create_or_open(self.path, {
            "search": TokenBucket(rate=1, per=HOUR, burst=3),
            "payments": TokenBucket(rate=1, per=HOUR, burst=3),
            "per_user": TokenBucket(rate=1, per=HOUR, burst=2, keyed=shmlimit.Keyed(16)),
        }):
            time.sleep(reopen + 0.001)
            decisions = [payments.try_acquire() for _ in range(9)]
            self.assertFalse(any(d.unavailable for d in decisions))
            self.assertEqual(sum(d.allowed for d in decisions), 3)
            self.assertTrue(guarded.attached)
            payments.refund(decisions[0])
            self.assertTrue(payments.try_acquire())
            self.assertFalse(payments.try_acquire())
            self.assertEqual(sum(bool(search.try_acquire()) for _ in range(9)), 3)
            self.assertEqual(sum(bool(per_user.try_acquire_key("alice")) for _ in range(6)), 2)
            with self.assertRaises(shmlimit.UnknownLimitError):
                guarded.limit("nope", shmlimit.FAIL_OPEN).try_acquire()
        guarded.close()
        self.assertFalse(payments.try_acquire().unavailable)  # outlives its guarded limiter
        with self.assertRaises(shmlimit.ClosedError):
            guarded.limit("search", shmlimit.FAIL_OPEN)
        for handle in (search, payments, per_user):
            handle.close()


if __name__ == "__main__":
    unittest.main()
