"""asyncio: waits on token buckets, windows, keyed limits, permits and reservations inside a real
asyncio TCP server, with no thread added; and a check that no wait blocks the event loop."""

import asyncio
import threading
import time
import unittest
from typing import Any, Awaitable, Callable, List, Tuple

import shmlimit
from shmlimit import Concurrency, FixedWindow, Keyed, Limiter, SlidingLog, TokenBucket

from ._support import FileTest


async def ticker() -> float:
    """Ten short sleeps on the event loop; when they ended. A wait that blocked the loop would
    hold this back until it returned."""
    for _ in range(10):
        await asyncio.sleep(0.005)
    return time.monotonic()


async def first_done(wait: Awaitable[Any]) -> Tuple[float, float, Any]:
    """Run ``wait`` and the ticker together: when each ended, and what ``wait`` returned."""
    async def timed() -> Tuple[float, Any]:
        result = await wait
        return time.monotonic(), result

    (waited, result), ticked = await asyncio.gather(timed(), ticker())
    return ticked, waited, result


async def serve(handler: Callable[[str], Awaitable[str]],
                requests: List[str]) -> Tuple[List[str], float]:
    """A real asyncio TCP server answering one line per connection with ``handler(line)``,
    and one client connection per request, all at once; the replies in order and the
    elapsed seconds."""

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().strip()
        writer.write((await handler(line) + "\n").encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def client(request: str) -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write((request + "\n").encode())
        await writer.drain()
        reply = (await reader.readline()).decode().strip()
        writer.close()
        return reply

    start = time.monotonic()
    async with server:
        replies = await asyncio.gather(*(client(r) for r in requests))
    return list(replies), time.monotonic() - start


class Asyncio(FileTest):
    def setUp(self) -> None:
        super().setUp()
        self.threads = threading.active_count()

    def run_async(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run(coro)  # type: ignore[arg-type]

    def test_token_bucket_waiters_sleep_their_booked_delay(self) -> None:
        # 10 tokens at once, then one every 20 ms: 20 requests need about 200 ms.
        with Limiter.create_or_open(self.path, {
                "api": TokenBucket(rate=50, per=1, burst=10)}) as lim:
            api = lim.limit("api")

            async def handler(_: str) -> str:
                d = await api.aio.acquire(1, timeout=5)
                return "ok" if d else "no"

            async def main() -> Tuple[List[str], float]:
                replies, elapsed = await serve(handler, ["x"] * 20)
                self.assertEqual(threading.active_count(), self.threads)
                return replies, elapsed

            replies, elapsed = self.run_async(main())
            self.assertEqual(replies, ["ok"] * 20)
            self.assertGreaterEqual(elapsed, 0.18)  # 10 waited 20..200 ms: the bucket's pace
            self.assertEqual(api.stats().allowed, 20)

    def test_a_timeout_shorter_than_the_delay_refuses_at_once_taking_nothing(self) -> None:
        with Limiter.create_or_open(self.path, {
                "api": TokenBucket(rate=1, per=3600, burst=1)}) as lim:
            api = lim.limit("api")

            async def main() -> List[shmlimit.Decision]:
                return [await api.aio.acquire(1, timeout=0.5), await api.aio.acquire(1, timeout=1)]

            first, second = self.run_async(main())
            self.assertTrue(first)
            self.assertFalse(second)
            self.assertGreater(second.retry_after, 3000)
            self.assertEqual(api.peek().remaining, 0)

    def test_windows_and_keyed_limits_sleep_the_exact_retry_after(self) -> None:
        with Limiter.create_or_open(self.path, {
            "log": SlidingLog(limit=3, window=0.2),
            "window": FixedWindow(limit=2, window=0.1, aligned="monotonic"),
            "per_client": TokenBucket(rate=20, per=1, burst=1, keyed=Keyed(16)),
            "split": TokenBucket(rate=40, per=1, burst=4, split=2),
        }) as lim:
            log, window, per_client = (lim.limit(n) for n in ("log", "window", "per_client"))
            split = lim.limit("split")
            # A split bucket cannot book (reserve): it retries like a window.
            async def eight() -> List[shmlimit.Decision]:
                return list(await asyncio.gather(
                    *(split.aio.acquire(1, timeout=2) for _ in range(8))))

            self.assertTrue(all(self.run_async(eight())))

            async def main() -> Tuple[List[bool], float]:
                start = time.monotonic()
                results = await asyncio.gather(
                    *(log.aio.acquire(1, timeout=2) for _ in range(9)),
                    *(window.aio.acquire(1, timeout=2) for _ in range(6)),
                    *(per_client.aio.acquire_key("alice", timeout=2) for _ in range(4)),
                )
                return [bool(r) for r in results], time.monotonic() - start

            allowed, elapsed = self.run_async(main())
            self.assertEqual(allowed, [True] * 19)
            # 9 on a log of 3 per 200 ms take at least two more windows.
            self.assertGreaterEqual(elapsed, 0.39)
            self.assertEqual(threading.active_count(), self.threads)
            self.assertEqual(log.stats().allowed, 9)
            self.assertEqual(per_client.stats().allowed, 4)

            async def short() -> shmlimit.Decision:
                await log.aio.acquire(3, timeout=1)
                return await log.aio.acquire(1, timeout=0.001)  # retry-after beyond: at once

            self.assertFalse(self.run_async(short()))

    def test_permits_wait_without_threads_and_bound_concurrency(self) -> None:
        with Limiter.create_or_open(self.path, {"db": Concurrency(permits=2)}) as lim:
            db = lim.limit("db")
            inside = 0
            most = 0

            async def handler(_: str) -> str:
                nonlocal inside, most
                async with db.aio.permit(timeout=5):
                    inside += 1
                    most = max(most, inside)
                    self.assertLessEqual(len(db.permit_holders()), 2)
                    await asyncio.sleep(0.03)
                    inside -= 1
                return "ok"

            async def main() -> Tuple[List[str], float]:
                replies, elapsed = await serve(handler, ["x"] * 10)
                self.assertEqual(threading.active_count(), self.threads)
                return replies, elapsed

            replies, elapsed = self.run_async(main())
            self.assertEqual(replies, ["ok"] * 10)
            self.assertEqual(most, 2)
            # 10 holders of 30 ms through 2 permits: at least 5 rounds; released in this
            # process, waiters wake at once rather than at the next poll.
            self.assertGreaterEqual(elapsed, 0.15)
            self.assertLess(elapsed, 2.0)
            self.assertEqual(db.permit_holders(), [])

    def test_a_permit_held_elsewhere_times_out_and_one_released_elsewhere_is_seen(self) -> None:
        with Limiter.create_or_open(self.path, {"db": Concurrency(permits=1)}) as lim:
            db = lim.limit("db")
            other = Limiter.open(self.path).limit("db")  # another handle, as another process
            held = other.permit()

            async def main() -> Tuple[float, float]:
                start = time.monotonic()
                with self.assertRaises(shmlimit.PermitUnavailableError):
                    async with db.aio.permit(timeout=0.2):
                        pass
                timed_out = time.monotonic() - start
                asyncio.get_running_loop().call_later(0.1, held.release)
                start = time.monotonic()
                async with db.aio.permit(timeout=2):
                    got = time.monotonic() - start
                return timed_out, got

            timed_out, got = self.run_async(main())
            self.assertGreaterEqual(timed_out, 0.19)
            self.assertLess(timed_out, 0.5)
            # Seen within the poll interval (at most PERMIT_POLL_MAX after the release).
            self.assertGreaterEqual(got, 0.09)
            self.assertLess(got, 0.1 + shmlimit.aio.PERMIT_POLL_MAX + 0.1)

    def test_no_wait_blocks_the_event_loop(self) -> None:
        """Each kind of wait, about 0.6 s long, runs beside ten 5 ms sleeps on the same loop:
        the sleeps end first. A wait that blocked the loop (time.sleep, a futex wait) would
        hold them until it returned, whatever the machine's load."""
        with Limiter.create_or_open(self.path, {
            "bucket": TokenBucket(rate=1, per=0.6, burst=1),
            "log": SlidingLog(limit=1, window=0.6),
            "per_client": TokenBucket(rate=1, per=0.6, burst=1, keyed=Keyed(4)),
            "db": Concurrency(permits=1),
        }) as lim:
            bucket, log, per_client, db = (
                lim.limit(n) for n in ("bucket", "log", "per_client", "db"))
            held = Limiter.open(self.path).limit("db").permit()
            # Released from another thread, as another process would: nothing on the loop.
            releaser = threading.Timer(0.6, held.release)
            for name, empty, wait in (
                ("bucket", bucket.try_acquire, lambda: bucket.aio.acquire(1, timeout=5)),
                ("reservation", bucket.try_acquire, lambda: bucket.reserve(1, max_delay=5)),
                ("log", log.try_acquire, lambda: log.aio.acquire(1, timeout=5)),
                ("keyed", lambda: per_client.try_acquire_key("k"),
                 lambda: per_client.aio.acquire_key("k", timeout=5)),
                ("permit", releaser.start, lambda: db.aio.acquire_permit(timeout=5)),
            ):
                empty()  # the next unit is 0.6 s away (or the permit is held for 0.6 s)
                ticked, waited, result = self.run_async(first_done(wait()))
                self.assertTrue(result, name)
                self.assertLess(ticked, waited, f"{name}: the loop was blocked")
            releaser.join()

    def test_reservations_are_awaited_and_cancelled_with_the_task(self) -> None:
        with Limiter.create_or_open(self.path, {
                "api": TokenBucket(rate=10, per=1, burst=1)}) as lim:
            api = lim.limit("api")

            async def main() -> Tuple[bool, float, int]:
                api.try_acquire()  # empty: the next token is 100 ms away
                start = time.monotonic()
                grant = await api.reserve(1, max_delay=1)
                waited = time.monotonic() - start
                # A booking cancelled with its task is given back.
                task = asyncio.ensure_future(api.aio.reserve(1, max_delay=1))
                await asyncio.sleep(0.01)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                return bool(grant), waited, api.peek().retry_after_ns

            granted, waited, retry_ns = self.run_async(main())
            self.assertTrue(granted)
            self.assertGreaterEqual(waited, 0.08)
            # After the cancelled booking, the next token is again at most 100 ms away.
            self.assertLessEqual(retry_ns, 100_000_000)

            refused = self.run_async(api.aio.reserve(1, max_delay=0.01))
            self.assertFalse(refused)


if __name__ == "__main__":
    unittest.main()
