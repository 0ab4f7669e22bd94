/*
 * Composed checks across processes: eight forked workers acquire [first (cost 2), bucket,
 * window] all or nothing until the bucket is drained; each also refunds its first grant.
 * Afterwards the limits before and after the one that denies must show exactly the net grants:
 * a denied composed request consumed nothing anywhere. The first limit is a token bucket of
 * 5000 (`first=bucket`) or a sliding log of 5000 (`first=log`), neither of which can deny.
 *
 * Usage: compose_fork DIR bucket|log   (DIR: an empty, writable directory)
 * Prints "compose: ... ok" and exits 0 when every check passes.
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
#define MIN_ATTEMPTS 400
#define SECOND UINT64_C(1000000000)
#define HOUR (UINT64_C(3600) * SECOND)
#define DECADE (UINT64_C(10) * 365 * 24 * HOUR)

enum { FIRST_LIMIT = 5000, BUCKET = 1000, WINDOW_LIMIT = 3000 };

static const char *const NAMES[3] = {"first", "bucket", "window"};
static const uint64_t COSTS[3] = {2, 1, 1};

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SECOND + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, shmlimit_status status) {
    fprintf(stderr, "compose_fork: %s: %s (%d): %s\n", what, shmlimit_strerror(status),
            (int)status, shmlimit_last_error());
    exit(1);
}

/* What a worker reports: allowed, denied, refunded, and inconsistent outcomes seen. */
struct report {
    uint64_t allowed, denied, refunded, bad;
};

/* Is `c` a consistent outcome of the three checks? */
static int consistent(const shmlimit_composed *c) {
    if (c->count != 3) {
        return 0;
    }
    if (c->allowed) {
        return c->denied_by == -1 && c->retry_after_ns == 0 && c->decisions[0].allowed &&
               c->decisions[1].allowed && c->decisions[2].allowed &&
               c->decisions[0].grant[0] == 2 && c->decisions[1].grant[0] == 1;
    }
    /* Only the bucket can deny; the first limit's grant was refunded (an empty slot), the
     * window after it was peeked. */
    return c->denied_by == 1 && !c->decisions[0].allowed && c->decisions[0].retry_after_ns == 0 &&
           !c->decisions[1].allowed && c->decisions[1].retry_after_ns > 0 &&
           c->decisions[2].allowed && c->decisions[2].grant[0] == 0 &&
           c->retry_after_ns >= c->decisions[1].retry_after_ns;
}

static void work(const char *path, uint64_t start_ns, int fd) {
    shmlimit_limiter *limiter;
    shmlimit_limit *limits[3];
    shmlimit_check checks[3];
    shmlimit_composed c;
    shmlimit_status s;
    struct report r = {0, 0, 0, 0};
    int i, last_denied = 0;
    uint64_t attempts = 0;

    s = shmlimit_limiter_open(path, NULL, &limiter);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_open", s);
    }
    memset(checks, 0, sizeof checks);
    for (i = 0; i < 3; i++) {
        s = shmlimit_limiter_limit(limiter, NAMES[i], &limits[i]);
        if (s != SHMLIMIT_OK) {
            die("shmlimit_limiter_limit", s);
        }
        checks[i].limit = limits[i];
        checks[i].cost = COSTS[i];
    }
    shmlimit_limiter_free(limiter);
    while (monotonic_ns() < start_ns) {
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    /* At least MIN_ATTEMPTS, and on until a denial after this worker's last refund: the last
     * denial of all workers then comes after every refund, with the bucket empty. */
    while (attempts < MIN_ATTEMPTS || !last_denied || r.refunded == 0) {
        s = shmlimit_acquire_all(checks, 3, &c);
        if (s != SHMLIMIT_OK) {
            die("shmlimit_acquire_all", s);
        }
        attempts++;
        if (!consistent(&c)) {
            r.bad++;
        }
        if (c.allowed) {
            r.allowed++;
            last_denied = 0;
            if (r.allowed % 10 == 1) {
                s = shmlimit_refund_all(checks, 3, &c);
                if (s != SHMLIMIT_OK) {
                    die("shmlimit_refund_all", s);
                }
                r.refunded++;
            }
        } else {
            r.denied++;
            last_denied = 1;
            if (r.refunded == 0) {
                break; /* drained before this worker's first grant: nothing to refund */
            }
        }
    }
    for (i = 0; i < 3; i++) {
        shmlimit_limit_free(limits[i]);
    }
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r) {
        _exit(3);
    }
    _exit(0);
}

/* Units the limit could grant now (a peek of 1 reports what remains after it). */
static uint64_t available(shmlimit_limit *limit) {
    shmlimit_decision d;
    shmlimit_status s = shmlimit_peek(limit, 1, &d);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_peek", s);
    }
    return d.allowed ? d.remaining + 1 : 0;
}

int main(int argc, char **argv) {
    char path[4096];
    shmlimit_def defs[3];
    shmlimit_limiter *limiter;
    shmlimit_limit *limits[3];
    shmlimit_stats stats[3];
    shmlimit_status s;
    struct report total = {0, 0, 0, 0}, r;
    pid_t pids[WORKERS];
    int fds[2], i, status, failed = 0;
    uint64_t start_ns, net, left[3];

    if (argc != 3 || (strcmp(argv[2], "bucket") != 0 && strcmp(argv[2], "log") != 0)) {
        fprintf(stderr, "usage: %s DIR bucket|log\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/compose-%s.shm", argv[1], argv[2]);
    memset(defs, 0, sizeof defs);
    defs[0].name = "first";
    defs[0].limit = FIRST_LIMIT;
    if (strcmp(argv[2], "log") == 0) {
        defs[0].kind = SHMLIMIT_SLIDING_LOG;
        defs[0].period_ns = DECADE;
    } else {
        defs[0].kind = SHMLIMIT_TOKEN_BUCKET;
        defs[0].rate = 1;
        defs[0].period_ns = HOUR;
    }
    defs[1].name = "bucket";
    defs[1].kind = SHMLIMIT_TOKEN_BUCKET;
    defs[1].limit = BUCKET;
    defs[1].rate = 1;
    defs[1].period_ns = HOUR;
    defs[2].name = "window";
    defs[2].kind = SHMLIMIT_FIXED_WINDOW;
    defs[2].limit = WINDOW_LIMIT;
    defs[2].period_ns = DECADE;
    defs[2].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    s = shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_create_or_open", s);
    }
    for (i = 0; i < 3; i++) {
        s = shmlimit_limiter_limit(limiter, NAMES[i], &limits[i]);
        if (s != SHMLIMIT_OK) {
            die("shmlimit_limiter_limit", s);
        }
    }
    shmlimit_limiter_free(limiter);

    if (pipe(fds) != 0) {
        perror("pipe");
        return 1;
    }
    start_ns = monotonic_ns() + 200 * (SECOND / 1000);
    for (i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] == 0) {
            close(fds[0]);
            work(path, start_ns, fds[1]);
        }
    }
    close(fds[1]);
    for (i = 0; i < WORKERS; i++) {
        if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r) {
            fprintf(stderr, "compose_fork: a worker did not report\n");
            return 1;
        }
        total.allowed += r.allowed;
        total.denied += r.denied;
        total.refunded += r.refunded;
        total.bad += r.bad;
    }
    for (i = 0; i < WORKERS; i++) {
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "compose_fork: worker %d failed (status %d)\n", i, status);
            return 1;
        }
    }
    for (i = 0; i < 3; i++) {
        left[i] = available(limits[i]);
        s = shmlimit_limit_stats(limits[i], &stats[i]);
        if (s != SHMLIMIT_OK) {
            die("shmlimit_limit_stats", s);
        }
    }
    net = total.allowed - total.refunded;
    printf("compose (first=%s): allowed=%" PRIu64 " denied=%" PRIu64 " refunded=%" PRIu64 " net=%" PRIu64
           " inconsistent=%" PRIu64 " left: first=%" PRIu64 " bucket=%" PRIu64 " window=%" PRIu64
           "\n",
           argv[2], total.allowed, total.denied, total.refunded, net, total.bad, left[0], left[1], left[2]);
#define EXPECT(cond)                                                  \
    do {                                                              \
        if (!(cond)) {                                                \
            fprintf(stderr, "compose_fork: check failed: %s\n", #cond); \
            failed = 1;                                               \
        }                                                             \
    } while (0)
    EXPECT(total.bad == 0);
    /* The bucket is exactly drained by the net grants ... */
    EXPECT(net == BUCKET);
    EXPECT(left[1] == 0);
    /* ... and the limits before and after it hold exactly the net grants: every denied
     * composed request, and every refunded one, left no trace. */
    EXPECT(left[0] == FIRST_LIMIT - COSTS[0] * net);
    EXPECT(left[2] == WINDOW_LIMIT - net);
    /* Every attempt was granted by the first limit (and refunded when the bucket denied);
     * the window was decided only for allowed requests (peeks are not counted). */
    EXPECT(stats[0].allowed == total.allowed + total.denied && stats[0].denied == 0);
    EXPECT(stats[1].allowed == total.allowed && stats[1].denied == total.denied);
    EXPECT(stats[2].allowed == total.allowed && stats[2].denied == 0);
    /* Refunds are counted: the first limit's grant of every denied request was rolled back,
     * and every explicitly refunded request gave back all three; so on every limit,
     * allowed - refunded is what passed. */
    EXPECT(stats[0].refunded == total.denied + total.refunded);
    EXPECT(stats[1].refunded == total.refunded);
    EXPECT(stats[2].refunded == total.refunded);
    for (i = 0; i < 3; i++) {
        EXPECT(stats[i].allowed - stats[i].refunded == net);
    }
    EXPECT(total.denied >= WORKERS); /* every worker ended on a denial */
    for (i = 0; i < 3; i++) {
        shmlimit_limit_free(limits[i]);
    }
    if (failed) {
        return 1;
    }
    printf("compose (first=%s): ok\n", argv[2]);
    return 0;
}
