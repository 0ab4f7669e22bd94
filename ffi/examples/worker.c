/*
 * A worker process: attaches to an existing limiter file by path alone and loops acquiring one
 * limit, as any C service would around each request.
 *
 * Usage: worker PATH LIMIT ATTEMPTS [DURATION_MS [COST]]
 *   Makes ATTEMPTS decisions (0: no limit) of COST units each (default 1), stopping early once
 *   DURATION_MS milliseconds have passed (0 or absent: no time limit), then prints
 *   "allowed=N denied=M" on standard output.
 *
 * Build (see ffi/README.md):
 *   cc -std=c99 -O2 worker.c $(pkg-config --cflags --libs shmlimit) -o worker
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
    fprintf(stderr, "worker: %s failed: %s (%d): %s\n", what, shmlimit_strerror(status),
            (int)status, shmlimit_last_error());
    return 1;
}

int main(int argc, char **argv) {
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *limit = NULL;
    shmlimit_decision decision;
    shmlimit_status status;
    uint64_t attempts, duration_ns, cost, deadline, i;
    uint64_t allowed = 0, denied = 0;

    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: %s PATH LIMIT ATTEMPTS [DURATION_MS [COST]]\n", argv[0]);
        return 2;
    }
    attempts = strtoull(argv[3], NULL, 10);
    duration_ns = argc > 4 ? strtoull(argv[4], NULL, 10) * 1000000u : 0;
    cost = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;

    status = shmlimit_limiter_open(argv[1], NULL, &limiter);
    if (status != SHMLIMIT_OK) {
        return fail("shmlimit_limiter_open", status);
    }
    /* Resolve the name once; the limit handle is all the loop needs. */
    status = shmlimit_limiter_limit(limiter, argv[2], &limit);
    shmlimit_limiter_free(limiter);
    if (status != SHMLIMIT_OK) {
        return fail("shmlimit_limiter_limit", status);
    }

    deadline = duration_ns ? monotonic_ns() + duration_ns : UINT64_MAX;
    for (i = 0; attempts == 0 || i < attempts; i++) {
        status = shmlimit_acquire(limit, cost, &decision);
        if (status != SHMLIMIT_OK) {
            shmlimit_limit_free(limit);
            return fail("shmlimit_acquire", status);
        }
        if (decision.allowed) {
            allowed++;
        } else {
            denied++;
        }
        /* Check the time every 64 decisions: a clock read costs as much as a decision. */
        if ((i & 63) == 63 && monotonic_ns() >= deadline) {
            break;
        }
    }
    shmlimit_limit_free(limit);
    printf("allowed=%" PRIu64 " denied=%" PRIu64 "\n", allowed, denied);
    return 0;
}
