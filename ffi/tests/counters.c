/*
 * A counters limit (keyed counters whose window and limit come with each call) from C: its
 * error paths, then four forked workers sharing it, each strategy held to its bound per key.
 *
 * Usage: counters DIR   (DIR: an empty, writable directory)
 * Prints "counters: N passed, 0 failed" when every check held.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmlimit.h"

#define WORKERS 4
#define KEYS 40
#define LIMIT 3
#define ROUNDS 6
#define HOUR (UINT64_C(3600) * UINT64_C(1000000000))
#define DAY (UINT64_C(24) * HOUR)

static int passed, failed;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (cond) {                                                                       \
            passed++;                                                                     \
        } else {                                                                          \
            failed++;                                                                     \
            fprintf(stderr, "counters.c:%d: failed: %s (last error: %s)\n", __LINE__, #cond, \
                    shmlimit_last_error());                                               \
        }                                                                                 \
    } while (0)

static shmlimit_limiter *open_file(const char *path) {
    shmlimit_def defs[2];
    shmlimit_limiter *limiter = NULL;
    memset(defs, 0, sizeof defs);
    defs[0].name = "limits";
    defs[0].kind = SHMLIMIT_COUNTERS;
    defs[0].limit = 8; /* log entries per key: the largest moving-window limit */
    defs[0].key_capacity = 256;
    defs[1].name = "bucket";
    defs[1].kind = SHMLIMIT_TOKEN_BUCKET;
    defs[1].limit = 5;
    defs[1].period_ns = UINT64_C(1000000000);
    defs[1].rate = 5;
    if (shmlimit_limiter_create_or_open(path, defs, 2, NULL, &limiter) != SHMLIMIT_OK) {
        fprintf(stderr, "create: %s\n", shmlimit_last_error());
        exit(1);
    }
    return limiter;
}

static shmlimit_limit *resolve(shmlimit_limiter *limiter, const char *name) {
    shmlimit_limit *limit = NULL;
    if (shmlimit_limiter_limit(limiter, name, &limit) != SHMLIMIT_OK) {
        fprintf(stderr, "resolve %s: %s\n", name, shmlimit_last_error());
        exit(1);
    }
    return limit;
}

static void key_of(int i, char *buf, size_t len) {
    snprintf(buf, len, "LIMITER/user-%03d/route", i);
}

static void errors(shmlimit_limit *c, shmlimit_limit *bucket) {
    shmlimit_decision d;
    shmlimit_sliding_counts sc;
    uint64_t n = 0, age = 0;
    const uint8_t *k = (const uint8_t *)"k";

    CHECK(shmlimit_counters_incr(c, k, 1, HOUR, 2, &n) == SHMLIMIT_OK && n == 2);
    CHECK(shmlimit_counters_incr(c, k, 1, HOUR, 3, &n) == SHMLIMIT_OK && n == 5);
    CHECK(shmlimit_counters_count(c, k, 1, &n, &age) == SHMLIMIT_OK && n == 5 && age > 0 &&
          age <= HOUR + (UINT64_C(1) << 21));
    CHECK(shmlimit_counters_incr(c, k, 1, HOUR, 0, &n) == SHMLIMIT_ZERO_COST);
    CHECK(shmlimit_counters_incr(c, k, 1, 0, 1, &n) == SHMLIMIT_INVALID_PARAMETER);
    CHECK(shmlimit_counters_incr(c, k, 1, UINT64_MAX, 1, &n) == SHMLIMIT_INVALID_PARAMETER);
    CHECK(shmlimit_counters_incr(c, k, 1, HOUR, UINT64_MAX, &n) ==
          SHMLIMIT_COST_EXCEEDS_CAPACITY);
    CHECK(shmlimit_counters_count(c, k, 1, &n, &age) == SHMLIMIT_OK && n == 5);
    /* decr: never below zero, the window kept; set: a count in a window from now. */
    CHECK(shmlimit_counters_decr(c, k, 1, 2, &n) == SHMLIMIT_OK && n == 3);
    CHECK(shmlimit_counters_decr(c, k, 1, 0, &n) == SHMLIMIT_ZERO_COST);
    CHECK(shmlimit_counters_decr(c, k, 1, 9, &n) == SHMLIMIT_OK && n == 0);
    CHECK(shmlimit_counters_count(c, k, 1, &n, &age) == SHMLIMIT_OK && n == 0 && age > 0);
    CHECK(shmlimit_counters_set(c, k, 1, HOUR, 5, &n) == SHMLIMIT_OK && n == 5);
    CHECK(shmlimit_counters_set(c, k, 1, 0, 5, &n) == SHMLIMIT_INVALID_PARAMETER);
    CHECK(shmlimit_counters_set(c, k, 1, HOUR, 1 << 24, &n) == SHMLIMIT_COST_EXCEEDS_CAPACITY);
    CHECK(shmlimit_counters_set(bucket, k, 1, HOUR, 1, &n) == SHMLIMIT_WRONG_KIND);
    CHECK(shmlimit_counters_decr(c, k, 1, 1, NULL) == SHMLIMIT_NULL_POINTER);
    CHECK(shmlimit_counters_count(c, k, 1, &n, &age) == SHMLIMIT_OK && n == 5);
    CHECK(shmlimit_counters_incr(c, NULL, 1, HOUR, 1, &n) == SHMLIMIT_NULL_POINTER);
    CHECK(shmlimit_counters_incr(c, k, 0, HOUR, 1, &n) == SHMLIMIT_INVALID_KEY);
    CHECK(shmlimit_counters_incr(c, k, 1, HOUR, 1, NULL) == SHMLIMIT_NULL_POINTER);
    /* A moving window larger than the log: refused, naming the largest supported. */
    CHECK(shmlimit_counters_acquire_moving(c, k, 1, 9, HOUR, 1, &d) ==
          SHMLIMIT_INVALID_PARAMETER);
    CHECK(strstr(shmlimit_last_error(), "supports is 8") != NULL);
    CHECK(shmlimit_counters_acquire_moving(c, k, 1, 8, HOUR, 9, &d) ==
          SHMLIMIT_COST_EXCEEDS_CAPACITY);
    CHECK(shmlimit_counters_moving(c, k, 1, 8, HOUR, &n, &age) == SHMLIMIT_OK && n == 0);
    CHECK(shmlimit_counters_acquire_moving(c, k, 1, 2, HOUR, 2, &d) == SHMLIMIT_OK && d.allowed);
    CHECK(shmlimit_counters_acquire_moving(c, k, 1, 2, HOUR, 1, &d) == SHMLIMIT_OK && !d.allowed &&
          d.retry_after_ns > 0);
    CHECK(shmlimit_counters_moving(c, k, 1, 2, HOUR, &n, &age) == SHMLIMIT_OK && n == 2);
    CHECK(shmlimit_counters_acquire_sliding(c, k, 1, 2, DAY, 1, &d) == SHMLIMIT_OK && d.allowed);
    CHECK(shmlimit_counters_sliding(c, k, 1, DAY, &sc) == SHMLIMIT_OK && sc.current == 1);
    CHECK(shmlimit_counters_acquire_sliding(c, k, 1, 1 << 20, DAY, 1, &d) ==
          SHMLIMIT_INVALID_PARAMETER);
    CHECK(shmlimit_counters_acquire_fixed(c, k, 1, 0, HOUR, 1, &d) == SHMLIMIT_INVALID_PARAMETER);
    CHECK(shmlimit_counters_clear_key(c, k, 1) == SHMLIMIT_OK);
    CHECK(shmlimit_counters_count(c, k, 1, &n, &age) == SHMLIMIT_OK && n == 0);
    CHECK(shmlimit_counters_clear_all(c, &n) == SHMLIMIT_OK);
    /* Another kind of limit: the counters calls do not apply; the rate calls not to counters. */
    CHECK(shmlimit_counters_incr(bucket, k, 1, HOUR, 1, &n) == SHMLIMIT_WRONG_KIND);
    CHECK(shmlimit_acquire(c, 1, &d) == SHMLIMIT_WRONG_KIND);
}

static void work(const char *path, int w, int fd) {
    shmlimit_limiter *limiter;
    shmlimit_limit *c;
    shmlimit_decision d;
    uint64_t counts[3 * KEYS];
    char key[64];
    int r, i;

    memset(counts, 0, sizeof counts);
    if (shmlimit_limiter_open(path, NULL, &limiter) != SHMLIMIT_OK) {
        _exit(2);
    }
    c = resolve(limiter, "limits");
    for (r = 0; r < ROUNDS; r++) {
        for (i = 0; i < KEYS; i++) {
            int at = (i + w * 7 + r) % KEYS;
            key_of(at, key, sizeof key);
            if (shmlimit_counters_acquire_fixed(c, (const uint8_t *)key, strlen(key), LIMIT, HOUR,
                                                1, &d) != SHMLIMIT_OK) {
                _exit(3);
            }
            counts[3 * at] += d.allowed;
            if (shmlimit_counters_acquire_moving(c, (const uint8_t *)key, strlen(key), LIMIT, HOUR,
                                                 1, &d) != SHMLIMIT_OK) {
                _exit(4);
            }
            counts[3 * at + 1] += d.allowed;
            if (shmlimit_counters_acquire_sliding(c, (const uint8_t *)key, strlen(key), LIMIT, DAY,
                                                  1, &d) != SHMLIMIT_OK) {
                _exit(5);
            }
            counts[3 * at + 2] += d.allowed;
        }
    }
    if (write(fd, counts, sizeof counts) != (ssize_t)sizeof counts) {
        _exit(6);
    }
    shmlimit_limit_free(c);
    shmlimit_limiter_free(limiter);
    _exit(0);
}

int main(int argc, char **argv) {
    char path[4096];
    shmlimit_limiter *limiter;
    shmlimit_limit *c, *bucket;
    shmlimit_sliding_counts sc;
    uint64_t totals[3 * KEYS], counts[3 * KEYS];
    int fds[WORKERS][2], w, i, status, boundary = 0;
    size_t used = 0, slots = 0;
    pid_t pids[WORKERS];

    if (argc != 2) {
        fprintf(stderr, "usage: counters DIR\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/counters.shm", argv[1]);
    limiter = open_file(path);
    c = resolve(limiter, "limits");
    bucket = resolve(limiter, "bucket");
    errors(c, bucket);
    /* The sliding counter's day is aligned on Unix time: skip its exact check near a boundary. */
    if (shmlimit_counters_sliding(c, (const uint8_t *)"probe", 5, DAY, &sc) == SHMLIMIT_OK &&
        sc.current_expires_in_ns - DAY < UINT64_C(60) * UINT64_C(1000000000)) {
        boundary = 1;
    }
    memset(totals, 0, sizeof totals);
    for (w = 0; w < WORKERS; w++) {
        if (pipe(fds[w]) != 0) {
            perror("pipe");
            return 1;
        }
        pids[w] = fork();
        if (pids[w] == 0) {
            close(fds[w][0]);
            work(path, w, fds[w][1]);
        }
        close(fds[w][1]);
    }
    for (w = 0; w < WORKERS; w++) {
        CHECK(read(fds[w][0], counts, sizeof counts) == (ssize_t)sizeof counts);
        close(fds[w][0]);
        CHECK(waitpid(pids[w], &status, 0) == pids[w] && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
        for (i = 0; i < 3 * KEYS; i++) {
            totals[i] += counts[i];
        }
    }
    for (i = 0; i < KEYS; i++) {
        CHECK(totals[3 * i] == LIMIT);
        CHECK(totals[3 * i + 1] == LIMIT);
        CHECK(boundary || totals[3 * i + 2] == LIMIT);
    }
    /* Both key tables count: each worker key holds a fixed and a sliding slot in the counter
       table and a log slot in the other; the three words "k" holds after its clear count
       nothing and are retired, the workers' keys stay. */
    CHECK(shmlimit_limit_key_occupancy(c, &used, &slots) == SHMLIMIT_OK &&
          used == 3 * KEYS + 3 && slots == 2 * 256);
    CHECK(shmlimit_limit_reclaim_idle_keys(c, &used) == SHMLIMIT_OK && used == 3);
    CHECK(shmlimit_limit_key_occupancy(c, &used, &slots) == SHMLIMIT_OK && used == 3 * KEYS);
    shmlimit_limit_free(bucket);
    shmlimit_limit_free(c);
    shmlimit_limiter_free(limiter);
    printf("counters: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
