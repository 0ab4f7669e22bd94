"""The compiled module's hot path: decisions, composed checks with keyed limits (one call for a
per-client and a global limit), refunds, closed handles, and the package itself."""

import gc
import os
import subprocess
import sys
import unittest

import shmlimit
from shmlimit import Keyed, Limiter, TokenBucket, try_acquire_all

from ._support import FileTest

HOUR = 3600


class Package(unittest.TestCase):
    def test_imports_from_any_directory_without_environment(self) -> None:
        env = {k: v for k, v in os.environ.items()
               if k not in ("SHMLIMIT_LIB", "LD_LIBRARY_PATH")}
        out = subprocess.run(
            [sys.executable, "-c", "import shmlimit; print(shmlimit.__version__, "
             "shmlimit.library_version(), shmlimit.Decision.__module__)"],
            cwd="/", env=env, capture_output=True, text=True, check=True)
        version, library, module = out.stdout.split()
        self.assertEqual(version, library)
        self.assertRegex(version, r"^\d+\.\d+\.\d+")
        self.assertEqual(module, "shmlimit")

    def test_a_missing_compiled_module_fails_at_import_with_a_clear_message(self) -> None:
        # A copy of the package without its compiled module.
        import shutil
        import tempfile
        source = os.path.dirname(shmlimit.__file__)
        with tempfile.TemporaryDirectory() as top:
            copy = os.path.join(top, "shmlimit")
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns(
                "_native.*.so", "__pycache__"))
            env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
            out = subprocess.run([sys.executable, "-c", "import shmlimit"], cwd=top,
                                 env=dict(env, PYTHONPATH=top),
                                 capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("ImportError", out.stderr)
        self.assertIn("shmlimit._native", out.stderr)
        self.assertIn("pip", out.stderr)

    def test_the_stub_declares_what_the_compiled_module_has(self) -> None:
        """_native.pyi and the module agree: the same module-level names, and for each class
        the same attributes (methods, properties) as the class defines itself."""
        import ast
        from shmlimit import _native
        here = os.path.dirname(shmlimit.__file__)
        with open(os.path.join(here, "_native.pyi"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        aliases = {"_Key", "_DefTuple", "_Check"}  # type aliases of the stub alone
        declared = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                declared[node.name] = {n.name for n in node.body
                                       if isinstance(n, ast.FunctionDef)} - {"__new__"}
            elif isinstance(node, ast.FunctionDef):
                declared[node.name] = None
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                declared[node.target.id] = None
            elif isinstance(node, ast.Assign):
                aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
        actual = {n for n in vars(_native) if not n.startswith("__")}
        self.assertEqual(set(declared) - aliases, actual)
        for name, members in declared.items():
            if members is None:
                continue
            cls = getattr(_native, name)
            own = {n for n in vars(cls) if not (n.startswith("__") and n.endswith("__"))}
            dunder = {n for n in members if n.startswith("__")}
            self.assertEqual(members - dunder, own, name)
            for n in dunder:
                self.assertTrue(hasattr(cls, n), f"{name}.{n}")

    def test_the_stub_matches_the_compiled_module_by_stubtest(self) -> None:
        """mypy's stubtest over the installed module: every signature, default and property of
        _native.pyi against the compiled module's (PyO3's text signatures), and which classes
        are final. (PEP 800's disjoint bases, a draft, are not checked.)"""
        try:
            import mypy.stubtest  # noqa: F401
        except ImportError:
            self.skipTest("needs mypy (pip install mypy): .ci/run installs it")
        import tempfile
        with tempfile.TemporaryDirectory() as empty:  # the installed package, nothing beside
            out = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--ignore-disjoint-bases",
                                  "shmlimit._native"], cwd=empty, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_the_package_is_typed(self) -> None:
        here = os.path.dirname(shmlimit.__file__)
        self.assertTrue(os.path.isfile(os.path.join(here, "py.typed")))
        self.assertTrue(os.path.isfile(os.path.join(here, "_native.pyi")))


class Composed(FileTest):
    def setUp(self) -> None:
        super().setUp()
        self.lim = Limiter.create_or_open(self.path, {
            "client": TokenBucket(rate=1, per=HOUR, burst=3, keyed=Keyed(64)),
            "global": TokenBucket(rate=1, per=HOUR, burst=5),
        })
        self.client, self.glob = self.lim.limit("client"), self.lim.limit("global")

    def tearDown(self) -> None:
        self.lim.close()
        super().tearDown()

    def test_a_keyed_and_a_global_limit_in_one_call(self) -> None:
        for i in range(3):
            c = try_acquire_all((self.client, "alice", 1), self.glob)
            self.assertTrue(c)
            self.assertIsNone(c.denied_by)
            first, second = c.decisions
            assert first is not None and second is not None
            self.assertEqual((first.remaining, second.remaining), (2 - i, 4 - i))
        denied = try_acquire_all((self.client, "alice"), (self.glob, 1))
        self.assertFalse(denied)
        self.assertEqual(denied.denied_by, 0)
        self.assertGreater(denied.retry_after, 0)
        self.assertEqual(self.glob.peek().remaining, 1)  # nothing taken from the global
        # Bob has his own budget; the global one runs out after two more.
        self.assertTrue(try_acquire_all((self.client, b"bob", 1), (self.glob, 1)))
        kept = try_acquire_all((self.client, "bob", 1), (self.glob, 1))
        self.assertTrue(kept)
        over = try_acquire_all((self.client, "bob", 1), (self.glob, 1))
        self.assertEqual(over.denied_by, 1)
        self.assertEqual(self.client.peek_key("bob").remaining, 0)  # bob's third is untaken
        kept.refund()
        self.assertEqual(self.client.peek_key("bob").remaining, 1)
        self.assertEqual(self.glob.peek().remaining, 0)
        # 5 grants kept, and bob's third, counted when taken and given back when the global
        # limit denied.
        self.assertEqual(self.client.stats().allowed, 6)

    def test_errors_give_back_what_was_taken(self) -> None:
        with self.assertRaises(shmlimit.WrongKindError):
            try_acquire_all((self.client, "carol", 1), (self.glob, "carol", 1))
        self.assertEqual(self.client.peek_key("carol").remaining, 2)
        with self.assertRaises(shmlimit.WrongKindError):
            try_acquire_all(self.client)  # keyed without a key
        with self.assertRaises(shmlimit.InvalidKeyError):
            try_acquire_all((self.client, "", 1))
        with self.assertRaises(shmlimit.BadLengthError):
            try_acquire_all(*[self.glob] * (shmlimit.MAX_CHECKS + 1))
        with self.assertRaises(TypeError):
            try_acquire_all("client")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            try_acquire_all((self.glob, 1, 2, 3))  # type: ignore[arg-type]
        self.assertTrue(try_acquire_all())  # no checks: allowed
        self.assertEqual(self.glob.stats().allowed, 0)

    def test_the_outcome_keeps_its_limits_alive_for_the_refund(self) -> None:
        c = try_acquire_all((self.client, "dave", 2), (self.glob, 2))
        del self.client
        gc.collect()
        c.refund()
        self.assertEqual(self.glob.peek().remaining, 4)

    def test_limits_in_reference_cycles_are_collected(self) -> None:
        import weakref
        g = self.lim.limit("global")
        g.me = g  # type: ignore[attr-defined]
        ref = weakref.ref(g)
        del g
        gc.collect()
        self.assertIsNone(ref())

    def test_closed_handles_raise_closed_error(self) -> None:
        g = self.lim.limit("global")
        g.close()
        g.close()  # idempotent
        self.assertTrue(g.closed)
        for call in (g.try_acquire, g.peek, lambda: g.try_acquire_key("a"), g.stats,
                     lambda: try_acquire_all(g)):
            with self.assertRaises(shmlimit.ClosedError):
                call()


class Decisions(FileTest):
    def test_decision_fields_and_refunds(self) -> None:
        with Limiter.create_or_open(self.path, {"b": TokenBucket(rate=1, per=HOUR, burst=2)}) as lim:
            b = lim.limit("b")
            d = b.try_acquire(cost=2)
            self.assertTrue(d.allowed and not d.denied and d.cost == 2 and d.remaining == 0)
            self.assertEqual((d.retry_after_ns, d.retry_after), (0, 0.0))
            no = b.try_acquire()
            self.assertFalse(no)
            self.assertEqual(no.cost, 0)
            self.assertGreater(no.retry_after_ns, 3000 * 10**9)
            self.assertIn("allowed=False", repr(no))
            b.refund(d)
            self.assertEqual(b.peek().remaining, 1)
            import pickle
            copy = pickle.loads(pickle.dumps(no))
            self.assertEqual((copy.allowed, copy.retry_after_ns, copy._raw),
                             (no.allowed, no.retry_after_ns, no._raw))
            made = shmlimit.Decision(False, remaining=0, retry_after_ns=5)
            self.assertEqual((made.allowed, made.retry_after_ns, made.cost), (False, 5, 0))
            b.refund(made)  # a decision without a grant gives nothing back
            self.assertEqual(b.peek().remaining, 1)


class Headers(FileTest):
    def test_policy_and_headers_are_the_cores(self) -> None:
        with Limiter.create_or_open(self.path, {
            "b": TokenBucket(rate=10, per=1, burst=10),
            "w": shmlimit.FixedWindow(limit=5, window=60),
            "db": shmlimit.Concurrency(permits=1),
        }) as lim:
            b, w, db = lim.limit("b"), lim.limit("w"), lim.limit("db")
            self.assertEqual(b.policy(), shmlimit.Policy(quota=10, window_secs=1))
            self.assertEqual(w.policy(), (5, 60))
            with self.assertRaises(shmlimit.WrongKindError):
                db.policy()
            d = b.try_acquire(4)
            self.assertGreater(d.reset_after_ns, 0)
            self.assertAlmostEqual(d.reset_after, d.reset_after_ns / 1e9)
            h = b.headers(d)
            self.assertEqual(h["RateLimit-Policy"], '"b";q=10;w=1')
            self.assertRegex(h["RateLimit"], r'^"b";r=6;t=1$')
            self.assertNotIn("Retry-After", h)
            denied = b.try_acquire(10)
            self.assertFalse(denied)
            self.assertIn("Retry-After", b.headers(denied))
            both = shmlimit.rate_limit_headers((b, d), (w, w.try_acquire()))
            self.assertEqual(both["RateLimit-Policy"], '"b";q=10;w=1, "w";q=5;w=60')
            with self.assertRaises(TypeError):
                shmlimit.rate_limit_headers((b, "not a decision"))  # type: ignore[arg-type]
            b.set_rate(20)
            self.assertEqual(b.policy().quota, 20)  # the live parameters


class Prometheus(FileTest):
    def test_counters_of_every_limit(self) -> None:
        with Limiter.create_or_open(self.path, {
            "api": TokenBucket(rate=1, per=HOUR, burst=2),
            "per_client": TokenBucket(rate=1, per=HOUR, burst=1, keyed=Keyed(8)),
            "db": shmlimit.Concurrency(permits=2),
        }) as lim:
            api, per_client, db = (lim.limit(n) for n in ("api", "per_client", "db"))
            grants = [api.try_acquire() for _ in range(3)]
            api.refund(grants[0])  # given back: counted as refunded
            per_client.try_acquire_key("a")
            per_client.try_acquire_key("b")
            with db.permit():
                text = shmlimit.prometheus_text(lim)
            self.assertEqual(api.stats()._asdict(),
                             {"allowed": 2, "denied": 1, "shadow_denied": 0, "near_limit": 1,
                              "refunded": 1})
        f = f'file="{self.path}",'
        for line in (
            "# TYPE shmlimit_decisions_total counter",
            f'shmlimit_decisions_total{{{f}limit="api",outcome="allowed"}} 2',
            f'shmlimit_decisions_total{{{f}limit="api",outcome="denied"}} 1',
            f'shmlimit_decisions_total{{{f}limit="per_client",outcome="allowed"}} 2',
            f'shmlimit_keys_used{{{f}limit="per_client"}} 2',
            f'shmlimit_permits_held{{{f}limit="db"}} 1',
            f'shmlimit_near_limit_total{{{f}limit="api"}} 1',
            f'shmlimit_refunded_total{{{f}limit="api"}} 1',
        ):
            self.assertIn(line + "\n", text)
        # Every sample line is "name{labels} value".
        import re
        for line in text.splitlines():
            self.assertRegex(line, r'^(# (HELP|TYPE) .+|[a-z_]+\{[^}]*\} \d+)$')
        self.assertIsNotNone(re.search(r"shmlimit_shadow_denied_total\{", text))


if __name__ == "__main__":
    unittest.main()
