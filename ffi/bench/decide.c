/*
 * The uncontended decision through the C ABI: attach to a limiter file by path, resolve one
 * limit, then time N calls of shmlimit_acquire(limit, 1, &decision) in a loop.
 *
 * Usage: decide PATH LIMIT N
 *   Makes 1,000 untimed decisions first (first calls: page faults, lazy binding), then prints
 *   "ns=ELAPSED allowed=A" on standard output: the nanoseconds (CLOCK_MONOTONIC) the N timed
 *   decisions took and how many of them admitted.
 *
 * Built by the bench suite (benches/c_abi.rs):
 *   gcc -std=c99 -O2 -I ffi/include decide.c -L DIR -lshmlimit -Wl,-rpath,DIR -o decide
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "shmlimit.h"

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(const char *what, shmlimit_status status) {
    fprintf(stderr, "decide: %s failed: %s (%d): %s\n", what, shmlimit_strerror(status),
            (int)status, shmlimit_last_error());
    return 1;
}

int main(int argc, char **argv) {
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *limit = NULL;
    shmlimit_decision decision;
    shmlimit_status status;
    uint64_t n, i, allowed = 0, start, elapsed;

    if (argc != 4) {
        fprintf(stderr, "usage: %s PATH LIMIT N\n", argv[0]);
        return 2;
    }
    n = strtoull(argv[3], NULL, 10);
    status = shmlimit_limiter_open(argv[1], NULL, &limiter);
    if (status != SHMLIMIT_OK) {
        return fail("shmlimit_limiter_open", status);
    }
    status = shmlimit_limiter_limit(limiter, argv[2], &limit);
    shmlimit_limiter_free(limiter);
    if (status != SHMLIMIT_OK) {
        return fail("shmlimit_limiter_limit", status);
    }

    for (i = 0; i < 1000; i++) {
        status = shmlimit_acquire(limit, 1, &decision);
        if (status != SHMLIMIT_OK) {
            return fail("shmlimit_acquire", status);
        }
    }
    start = monotonic_ns();
    for (i = 0; i < n; i++) {
        status = shmlimit_acquire(limit, 1, &decision);
        if (status != SHMLIMIT_OK) {
            return fail("shmlimit_acquire", status);
        }
        allowed += decision.allowed;
    }
    elapsed = monotonic_ns() - start;

    shmlimit_limit_free(limit);
    printf("ns=%" PRIu64 " allowed=%" PRIu64 "\n", elapsed, allowed);
    return 0;
}
