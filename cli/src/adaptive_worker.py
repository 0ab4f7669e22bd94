"""One worker process of `shmlimit demo --scenario adaptive`, in Python.

The same worker as the Rust `demo-adaptive-worker` (cli/src/adaptive_worker.rs), through the
package ffi/python (laid out next to this file by the scenario, or installed): --threads
threads, each with its own connection to the stand-in dependency, call it as fast as the limit
--limit of --file permits: a permit (an adaptive concurrency limit's, waiting at most 50 ms on
the file's futex, or a fixed concurrency limit's), one call, the release with the call's
outcome and latency. Runs until standard input closes, then writes every call to --record
(`start_ns end_ns ok`, one line each, CLOCK_MONOTONIC as time.monotonic_ns reads it) and exits.
"""

import argparse
import socket
import sys
import threading
import time

import shmlimit

WAIT = 0.05


def caller(limit, adaptive, stop, path, instance, calls):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        return
    reader = conn.makefile("r")
    while not stop.is_set():
        permit = limit.acquire_adaptive(WAIT) if adaptive else limit.acquire_permit(WAIT)
        if permit is None:
            continue
        start = time.monotonic_ns()
        try:
            conn.sendall(f"call f {instance} {start} {start}\n".encode())
            answer = reader.readline()
        except OSError:
            answer = ""
        end = time.monotonic_ns()
        if not answer:
            if adaptive:
                permit.release("dropped")
            else:
                permit.release()
            break
        ok = answer.strip() == "ok"
        if adaptive:
            permit.release("ok" if ok else "error", latency=(end - start) / 1e9)
        else:
            permit.release()
        calls.append((start, end, ok))
    conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--limit", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--instance", type=int, required=True)
    parser.add_argument("--threads", type=int, default=24)
    parser.add_argument("--record", required=True)
    args = parser.parse_args()
    limiter = shmlimit.Limiter.open(args.file)
    limit = limiter.limit(args.limit)
    adaptive = isinstance(limit.definition, shmlimit.AdaptiveConcurrency)
    stop = threading.Event()
    calls = []
    threads = [threading.Thread(target=caller,
                                args=(limit, adaptive, stop, args.socket, args.instance, calls))
               for _ in range(args.threads)]
    for t in threads:
        t.start()
    sys.stdin.read()  # until standard input closes
    stop.set()
    for t in threads:
        t.join()
    with open(args.record, "w") as f:
        f.writelines(f"{s} {e} {int(ok)}\n" for s, e, ok in calls)


if __name__ == "__main__":
    main()
