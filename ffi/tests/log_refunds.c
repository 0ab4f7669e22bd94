/*
 * Sliding-log refunds across processes: PROCS forked workers each acquire COST entries of one
 * log of 1000 and refund them at once, 3000 times. At most PROCS * COST entries are ever held,
 * far below the limit, so no decision may deny, and once every grant is refunded the whole log
 * must be available again.
 *
 * Usage: log_refunds DIR WINDOW_NS PROCS COST   (DIR: an empty, writable directory)
 * Prints "log refunds: ..." and exits 0 when both hold.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmlimit.h"

enum { LIMIT = 1000, ROUNDS = 3000 };

static void die(const char *what) {
    fprintf(stderr, "log_refunds: %s: %s\n", what, shmlimit_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    shmlimit_def def;
    shmlimit_limiter *limiter;
    shmlimit_limit *log;
    shmlimit_decision d;
    char path[4096];
    uint64_t window_ns, cost, available;
    int procs, p, i, status, denials = 0;

    if (argc != 5) {
        fprintf(stderr, "usage: %s DIR WINDOW_NS PROCS COST\n", argv[0]);
        return 2;
    }
    window_ns = strtoull(argv[2], NULL, 10);
    procs = atoi(argv[3]);
    cost = strtoull(argv[4], NULL, 10);
    snprintf(path, sizeof path, "%s/log-refunds.shm", argv[1]);
    memset(&def, 0, sizeof def);
    def.name = "log";
    def.kind = SHMLIMIT_SLIDING_LOG;
    def.limit = LIMIT;
    def.period_ns = window_ns;
    if (shmlimit_limiter_create_or_open(path, &def, 1, NULL, &limiter) != SHMLIMIT_OK ||
        shmlimit_limiter_limit(limiter, "log", &log) != SHMLIMIT_OK) {
        die("opening");
    }
    shmlimit_limiter_free(limiter);
    for (p = 0; p < procs; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            int denied = 0;
            for (i = 0; i < ROUNDS; i++) {
                if (shmlimit_acquire(log, cost, &d) != SHMLIMIT_OK) {
                    die("shmlimit_acquire");
                }
                if (!d.allowed) {
                    denied++;
                    continue;
                }
                if (shmlimit_refund(log, &d) != SHMLIMIT_OK) {
                    die("shmlimit_refund");
                }
            }
            _exit(denied > 100 ? 100 : denied);
        }
    }
    for (p = 0; p < procs; p++) {
        if (wait(&status) < 0 || !WIFEXITED(status)) {
            fprintf(stderr, "log_refunds: a worker failed\n");
            return 1;
        }
        denials += WEXITSTATUS(status);
    }
    if (shmlimit_peek(log, 1, &d) != SHMLIMIT_OK) {
        die("shmlimit_peek");
    }
    available = d.allowed ? d.remaining + 1 : 0;
    printf("log refunds: %d processes, cost %" PRIu64 ": denials=%d available=%" PRIu64
           " of %d\n",
           procs, cost, denials, available, LIMIT);
    shmlimit_limit_free(log);
    return denials == 0 && available == LIMIT ? 0 : 1;
}
