/*
 * A worker process: attaches to an existing limiter file by path alone and loops acquiring one
 * limit, as any C service would around each request.
 *
 * Usage: worker [-n ATTEMPTS] [-d DURATION_MS] [-c COST] [-s START_AT_NS] PATH LIMIT
 *   Makes ATTEMPTS decisions (default 0: no limit) of COST units each (default 1), stopping
 *   early once DURATION_MS milliseconds have passed (default 0: no time limit), then prints
 *   "allowed=N denied=M" on standard output. With -s it first sleeps until CLOCK_MONOTONIC
 *   reads START_AT_NS, so that several workers start together.
 *
 * Build (see ffi/README.md):
 *   cc -std=c99 -O2 worker.c $(pkg-config --cflags --libs shmlimit) -o worker
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [-n ATTEMPTS] [-d DURATION_MS] [-c COST] [-s START_AT_NS] PATH LIMIT\n",
            argv0);
    return 2;
}

int main(int argc, char **argv) {
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *limit = NULL;
    shmlimit_decision decision;
    shmlimit_status status;
    uint64_t attempts = 0, duration_ns = 0, cost = 1, start_at = 0, deadline, i;
    uint64_t allowed = 0, denied = 0;
    int opt;

    while ((opt = getopt(argc, argv, "n:d:c:s:")) != -1) {
        switch (opt) {
        case 'n': attempts = strtoull(optarg, NULL, 10); break;
        case 'd': duration_ns = strtoull(optarg, NULL, 10) * 1000000u; break;
        case 'c': cost = strtoull(optarg, NULL, 10); break;
        case 's': start_at = strtoull(optarg, NULL, 10); break;
        default: return usage(argv[0]);
        }
    }
    if (argc - optind != 2) {
        return usage(argv[0]);
    }

    status = shmlimit_limiter_open(argv[optind], NULL, &limiter);
    if (status != SHMLIMIT_OK) {
        return fail("shmlimit_limiter_open", status);
    }
    /* Resolve the name once; the limit handle is all the loop needs. */
    status = shmlimit_limiter_limit(limiter, argv[optind + 1], &limit);
    shmlimit_limiter_free(limiter);
    if (status != SHMLIMIT_OK) {
        return fail("shmlimit_limiter_limit", status);
    }

    while (start_at != 0 && monotonic_ns() < start_at) {
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
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
