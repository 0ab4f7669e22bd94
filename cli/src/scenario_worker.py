"""One service instance of `shmlimit demo --scenario dependency`, in Python.

The same instance as the Rust `demo-worker` (cli/src/scenario_worker.rs), through the
package ffi/python (laid out next to this file by the scenario, or installed):
requests from a Poisson generator, items per request bounded, the per-client keyed limit, a
reservation on `intake` waiting at most --queue-ms, and before every outbound attempt a permit
of `inflight` then one all-or-nothing check of the attempt's class (`first` or `retry`) and
`total`. Failed calls are retried with exponential backoff and full jitter. Runs until standard
input closes, then prints `counters name=value ...`.
"""

import argparse
import heapq
import math
import os
import random
import socket
import sys
import threading
import time

import shmlimit

MAX_ATTEMPTS = 4
CLIENTS = 40
COUNTERS = [
    "requests", "oversized", "client_limited", "deadline_rejected", "deadline_rejected_items",
    "items", "sent_first", "sent_retry", "ok", "failed", "busy", "gave_up", "late", "abandoned",
]


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.values = dict.fromkeys(COUNTERS, 0)

    def add(self, name, n=1):
        with self.lock:
            self.values[name] += n

    def line(self):
        return "counters " + " ".join(f"{k}={self.values[k]}" for k in COUNTERS)


class Queue:
    """Attempts ordered by the time they may be sent."""

    def __init__(self):
        self.heap = []
        self.cond = threading.Condition()
        self.stop = False

    def push(self, ready_ns, seq, deadline_ns, attempt):
        with self.cond:
            heapq.heappush(self.heap, (ready_ns, seq, deadline_ns, attempt))
            self.cond.notify()

    def pop(self):
        with self.cond:
            while not self.stop:
                now = time.monotonic_ns()
                if self.heap and self.heap[0][0] <= now:
                    return heapq.heappop(self.heap)
                wait = (self.heap[0][0] - now) / 1e9 if self.heap else 0.05
                self.cond.wait(min(wait, 0.05))
            return None


def sender(args, limits, queue, counters, seed):
    rng = random.Random(seed)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(args.socket)
    reader = conn.makefile("rb")
    while True:
        item = queue.pop()
        if item is None:
            return
        ready_ns, seq, deadline_ns, attempt = item
        now = time.monotonic_ns()
        if now >= deadline_ns:
            counters.add("late")
            continue
        retry = attempt > 0
        t0 = t1 = 0
        permit = None
        if limits is not None:
            permit = limits["inflight"].acquire_permit((deadline_ns - now) / 1e9)
            if permit is None:
                counters.add("late")
                continue
            cls = limits["retry"] if retry else limits["first"]
            t0 = time.monotonic_ns()
            decision = shmlimit.try_acquire_all((cls, 1), (limits["total"], 1))
            t1 = time.monotonic_ns()
            if decision.denied:
                permit.release()
                ready_ns = t1 + max(decision.retry_after_ns, 1_000_000)
                if ready_ns >= deadline_ns:
                    counters.add("late")
                else:
                    queue.push(ready_ns, seq, deadline_ns, attempt)
                continue
        counters.add("sent_retry" if retry else "sent_first")
        conn.sendall(f"call {'r' if retry else 'f'} {args.instance} {t0} {t1}\n".encode())
        answer = reader.readline().strip()
        if permit is not None:
            permit.release()
        if not answer:
            raise SystemExit("dependency: closed the connection")
        if answer == b"ok":
            counters.add("ok")
            continue
        counters.add("busy" if answer == b"busy" else "failed")
        attempt += 1
        if attempt >= MAX_ATTEMPTS:
            counters.add("gave_up")
            continue
        cap = 50_000_000 << (attempt - 1)
        ready_ns = time.monotonic_ns() + rng.randint(cap // 10, cap)
        if ready_ns >= deadline_ns:
            counters.add("gave_up")
        else:
            queue.push(ready_ns, seq, deadline_ns, attempt)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file")
    p.add_argument("--socket", required=True)
    p.add_argument("--instance", type=int, required=True)
    p.add_argument("--requests-per-second", type=float, default=3.0)
    p.add_argument("--max-items", type=int, default=16)
    p.add_argument("--queue-ms", type=int, default=1000)
    p.add_argument("--deadline-ms", type=int, default=2000)
    p.add_argument("--senders", type=int, default=4)
    args = p.parse_args()

    limits = None
    if args.file:
        limiter = shmlimit.Limiter.open(args.file)
        limits = {n: limiter.limit(n)
                  for n in ("clients", "intake", "inflight", "first", "retry", "total")}
    counters = Counters()
    queue = Queue()
    threads = [threading.Thread(target=sender, args=(args, limits, queue, counters,
                                                     args.instance * 256 + s), daemon=True)
               for s in range(max(args.senders, 1))]
    for t in threads:
        t.start()
    stop = threading.Event()

    def watch_stdin():
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(f"ready {os.getpid()}", flush=True)

    rng = random.Random(args.instance + 1)
    rate = max(args.requests_per_second, 0.001)
    seq = 0
    next_ns = time.monotonic_ns() + int(-math.log(1.0 - rng.random()) / rate * 1e9)
    while not stop.is_set():
        now = time.monotonic_ns()
        if now < next_ns:
            stop.wait(min((next_ns - now) / 1e9, 0.1))
            continue
        next_ns += int(-math.log(1.0 - rng.random()) / rate * 1e9)
        client = 0 if rng.randrange(4) == 0 else rng.randint(1, CLIENTS - 1)
        items = rng.randint(40, 200) if rng.randrange(20) == 0 else rng.randint(1, 13)
        counters.add("requests")
        arrived = time.monotonic_ns()
        if items > args.max_items:
            counters.add("oversized")
            continue
        ready_ns = arrived
        if limits is not None:
            if limits["clients"].try_acquire_key(f"client-{client}", 1).denied:
                counters.add("client_limited")
                continue
            booking = limits["intake"].reserve(items, args.queue_ms / 1000)
            if booking.refused:
                counters.add("deadline_rejected")
                counters.add("deadline_rejected_items", items)
                continue
            ready_ns = booking.ready_at_ns
            booking.close()
        counters.add("items", items)
        deadline_ns = arrived + args.deadline_ms * 1_000_000
        for _ in range(items):
            seq += 1
            queue.push(ready_ns, (args.instance << 40) | seq, deadline_ns, 0)

    with queue.cond:
        queue.stop = True
        queue.cond.notify_all()
        left = len(queue.heap)
    for t in threads:
        t.join(timeout=1.0)
    counters.add("abandoned", left)
    rss = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    print(f"{counters.line()} rss_kib={rss}", flush=True)


if __name__ == "__main__":
    main()
