/*
 * One limit handle shared by several threads: decisions from all of them together respect the
 * bound, and each thread's last-error message is its own.
 *
 * Usage: threads DIR   (DIR: an empty, writable directory)
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmlimit.h"

#define THREADS 4
#define ATTEMPTS 600
#define CAPACITY 1000

struct job {
    const shmlimit_limit *limit;
    const shmlimit_limiter *limiter;
    int index;
    uint64_t allowed, denied;
    int failed;
};

static void *work(void *arg) {
    struct job *job = (struct job *)arg;
    shmlimit_decision d;
    shmlimit_limit *unused = NULL;
    char name[32], expected[64];
    int i;

    /* A failure whose message names this thread's own limit name. */
    snprintf(name, sizeof name, "missing-%d", job->index);
    snprintf(expected, sizeof expected, "`%s`", name);
    if (shmlimit_limiter_limit(job->limiter, name, &unused) != SHMLIMIT_UNKNOWN_LIMIT) {
        job->failed = 1;
    }
    for (i = 0; i < ATTEMPTS; i++) {
        if (shmlimit_acquire(job->limit, 1, &d) != SHMLIMIT_OK) {
            job->failed = 1;
            break;
        }
        if (d.allowed) {
            job->allowed++;
        } else {
            job->denied++;
        }
    }
    /* Other threads failed meanwhile; this thread's message is still its own. */
    if (strstr(shmlimit_last_error(), expected) == NULL) {
        fprintf(stderr, "thread %d: last error is \"%s\"\n", job->index, shmlimit_last_error());
        job->failed = 1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    char path[4096];
    shmlimit_def def;
    shmlimit_limiter *limiter;
    shmlimit_limit *limit;
    shmlimit_stats stats;
    pthread_t threads[THREADS];
    struct job jobs[THREADS];
    uint64_t allowed = 0, denied = 0;
    int i, failed = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/threads.shm", argv[1]);
    memset(&def, 0, sizeof def);
    def.name = "shared";
    def.kind = SHMLIMIT_TOKEN_BUCKET;
    def.limit = CAPACITY;
    def.rate = 1;
    def.period_ns = UINT64_C(3600000000000); /* one token per hour */
    if (shmlimit_limiter_create_or_open(path, &def, 1, NULL, &limiter) != SHMLIMIT_OK ||
        shmlimit_limiter_limit(limiter, "shared", &limit) != SHMLIMIT_OK) {
        fprintf(stderr, "setup: %s\n", shmlimit_last_error());
        return 1;
    }
    memset(jobs, 0, sizeof jobs);
    for (i = 0; i < THREADS; i++) {
        jobs[i].limit = limit;
        jobs[i].limiter = limiter;
        jobs[i].index = i;
        if (pthread_create(&threads[i], NULL, work, &jobs[i]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        allowed += jobs[i].allowed;
        denied += jobs[i].denied;
        failed |= jobs[i].failed;
    }
    if (shmlimit_limit_stats(limit, &stats) != SHMLIMIT_OK) {
        return 1;
    }
    printf("threads: allowed=%" PRIu64 " denied=%" PRIu64 " (stats %" PRIu64 "/%" PRIu64 ")\n",
           allowed, denied, stats.allowed, stats.denied);
    if (allowed != CAPACITY || denied != THREADS * ATTEMPTS - CAPACITY ||
        stats.allowed != allowed || stats.denied != denied) {
        fprintf(stderr, "threads: the shared handle did not admit exactly its capacity\n");
        failed = 1;
    }
    shmlimit_limit_free(limit);
    shmlimit_limiter_free(limiter);
    return failed;
}
