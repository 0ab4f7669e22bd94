/*
 * Eight forked C worker processes share limits through one file; the parent checks that the
 * admissions of all of them together respect each limit's bound.
 *
 * Usage: fork_bound DIR   (DIR: an empty, writable directory)
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmlimit.h"

#define WORKERS 8
#define SECOND UINT64_C(1000000000)

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, shmlimit_status status) {
    fprintf(stderr, "fork_bound: %s: %s (%d): %s\n", what, shmlimit_strerror(status), (int)status,
            shmlimit_last_error());
    exit(1);
}

/* In a child: attach by path, decide `attempts` times (or until `until_ns`), report the counts. */
static void work(const char *path, const char *name, uint64_t attempts, uint64_t until_ns,
                 int fd) {
    shmlimit_limiter *limiter;
    shmlimit_limit *limit;
    shmlimit_decision d;
    shmlimit_status s;
    uint64_t counts[2] = {0, 0}, i;

    s = shmlimit_limiter_open(path, NULL, &limiter);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_open", s);
    }
    s = shmlimit_limiter_limit(limiter, name, &limit);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_limit", s);
    }
    shmlimit_limiter_free(limiter);
    for (i = 0; i < attempts; i++) {
        s = shmlimit_acquire(limit, 1, &d);
        if (s != SHMLIMIT_OK) {
            die("shmlimit_acquire", s);
        }
        counts[d.allowed ? 0 : 1]++;
        if (until_ns != 0 && (i & 63) == 63 && monotonic_ns() >= until_ns) {
            break;
        }
    }
    shmlimit_limit_free(limit);
    if (write(fd, counts, sizeof counts) != (ssize_t)sizeof counts) {
        _exit(3);
    }
    _exit(0);
}

/* Fork WORKERS children on `name`, wait for them, and return the summed counts. */
static void run(const char *path, const char *name, uint64_t attempts, uint64_t until_ns,
                uint64_t totals[2]) {
    int fds[2], i, status;
    pid_t pids[WORKERS];
    uint64_t counts[2];

    if (pipe(fds) != 0) {
        perror("pipe");
        exit(1);
    }
    for (i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            exit(1);
        }
        if (pids[i] == 0) {
            close(fds[0]);
            work(path, name, attempts, until_ns, fds[1]);
        }
    }
    close(fds[1]);
    totals[0] = totals[1] = 0;
    for (i = 0; i < WORKERS; i++) {
        if (read(fds[0], counts, sizeof counts) != (ssize_t)sizeof counts) {
            fprintf(stderr, "fork_bound: a worker did not report\n");
            exit(1);
        }
        totals[0] += counts[0];
        totals[1] += counts[1];
    }
    close(fds[0]);
    for (i = 0; i < WORKERS; i++) {
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork_bound: worker %d failed (status %d)\n", i, status);
            exit(1);
        }
    }
}

static void stats_of(shmlimit_limiter *limiter, const char *name, shmlimit_stats *stats) {
    shmlimit_limit *limit;
    shmlimit_status s = shmlimit_limiter_limit(limiter, name, &limit);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_limit", s);
    }
    s = shmlimit_limit_stats(limit, stats);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limit_stats", s);
    }
    shmlimit_limit_free(limit);
}

int main(int argc, char **argv) {
    char path[4096];
    shmlimit_def defs[2];
    shmlimit_limiter *limiter;
    shmlimit_stats stats;
    shmlimit_status s;
    uint64_t totals[2], start, elapsed, bound;
    const uint64_t capacity = 1000, attempts = 400;
    const uint64_t paced_burst = 50, paced_rate = 2000; /* tokens per second */
    int failures = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/fork.shm", argv[1]);
    memset(defs, 0, sizeof defs);
    /* "fixed": 1000 tokens, refilled at one per hour: exactly 1000 admissions in this test. */
    defs[0].name = "fixed";
    defs[0].kind = SHMLIMIT_TOKEN_BUCKET;
    defs[0].limit = capacity;
    defs[0].rate = 1;
    defs[0].period_ns = 3600 * SECOND;
    /* "paced": a burst of 50 refilled at 2000/s: at most floor(50 + 2000 T) in T seconds. */
    defs[1].name = "paced";
    defs[1].kind = SHMLIMIT_TOKEN_BUCKET;
    defs[1].limit = paced_burst;
    defs[1].rate = paced_rate;
    defs[1].period_ns = SECOND;

    start = monotonic_ns();
    s = shmlimit_limiter_create_or_open(path, defs, 2, NULL, &limiter);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_create_or_open", s);
    }

    run(path, "fixed", attempts, 0, totals);
    stats_of(limiter, "fixed", &stats);
    printf("fixed: %d workers x %" PRIu64 " attempts: allowed=%" PRIu64 " denied=%" PRIu64
           " (stats %" PRIu64 "/%" PRIu64 "), bound %" PRIu64 "\n",
           WORKERS, attempts, totals[0], totals[1], stats.allowed, stats.denied, capacity);
    if (totals[0] != capacity || totals[0] + totals[1] != WORKERS * attempts ||
        stats.allowed != totals[0] || stats.denied != totals[1]) {
        fprintf(stderr, "fork_bound: \"fixed\" did not admit exactly its capacity\n");
        failures++;
    }

    run(path, "paced", UINT64_MAX, monotonic_ns() + SECOND / 2, totals);
    elapsed = monotonic_ns() - start;
    stats_of(limiter, "paced", &stats);
    /* Every admission is dated between `start` and now, so the bound over `elapsed` holds. */
    bound = paced_burst + (uint64_t)((double)paced_rate * (double)elapsed / (double)SECOND);
    printf("paced: allowed=%" PRIu64 " denied=%" PRIu64 " in %.3f s, bound %" PRIu64 "\n",
           totals[0], totals[1], (double)elapsed / (double)SECOND, bound);
    if (totals[0] > bound || totals[0] < paced_burst || totals[1] == 0 ||
        stats.allowed != totals[0] || stats.denied != totals[1]) {
        fprintf(stderr, "fork_bound: \"paced\" broke its bound or never reached it\n");
        failures++;
    }
    shmlimit_limiter_free(limiter);
    return failures == 0 ? 0 : 1;
}
