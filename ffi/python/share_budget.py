"""Several Python processes decide on one limit of an existing file at the same time.

Usage: python3 share_budget.py PATH LIMIT PROCESSES RUN_MS [MIN_ATTEMPTS]

Each process (multiprocessing, a fresh interpreter) attaches to PATH by path alone. Once all
have attached, this script prints "ready" and reads a start time (CLOCK_MONOTONIC ns) from
standard input; every process then acquires LIMIT in a loop from that time for RUN_MS
milliseconds, and at least MIN_ATTEMPTS times (default 0). Prints one JSON object: {"allowed": A, "denied": D, "end_ns": E,
"processes": [[a, d], ...]}, where E is the latest clock reading taken after a last decision.
"""

import json
import multiprocessing
import os
import sys
import time

import shmlimit


def work(path, name, run_ms, min_attempts, attached, go, start_at, results):
    with shmlimit.Limiter.open(path) as limiter:
        limit = limiter.limit(name)
    attached.wait()
    go.wait()
    start_at_ns = start_at.value
    while time.monotonic_ns() < start_at_ns:
        time.sleep(0.0002)
    deadline = start_at_ns + run_ms * 1_000_000
    allowed = denied = 0
    while True:
        for _ in range(64):
            if limit.try_acquire(1):
                allowed += 1
            else:
                denied += 1
        end_ns = time.monotonic_ns()
        if end_ns >= deadline and allowed + denied >= min_attempts:
            break
    limit.close()
    results.put((allowed, denied, end_ns))


def main() -> None:
    path, name, processes, run_ms = sys.argv[1:5]
    processes, run_ms = int(processes), int(run_ms)
    min_attempts = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    ctx = multiprocessing.get_context("spawn")
    attached, go = ctx.Barrier(processes + 1), ctx.Barrier(processes + 1)
    start_at, results = ctx.Value("Q", 0), ctx.Queue()
    workers = [
        ctx.Process(
            target=work,
            args=(path, name, run_ms, min_attempts, attached, go, start_at, results),
        )
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    attached.wait(timeout=120)
    print("ready", flush=True)
    start_at.value = int(sys.stdin.readline())
    go.wait(timeout=120)
    counts = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join()
        if w.exitcode != 0:
            sys.exit(f"a worker exited with {w.exitcode}")
    print(json.dumps({
        "allowed": sum(c[0] for c in counts),
        "denied": sum(c[1] for c in counts),
        "end_ns": max(c[2] for c in counts),
        "processes": [[c[0], c[1]] for c in counts],
    }), flush=True)


if __name__ == "__main__":
    main()
