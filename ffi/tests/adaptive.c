/*
 * The C ABI's adaptive concurrency calls, success and error paths, from C (and compiled as
 * C++ too): permits within a limit that starts at its minimum, releases with outcomes and
 * latencies, the status, bad outcomes and latencies refused without a change, the permits of
 * a process that died taken over, a permit released by its id (no sample), the other kinds'
 * calls refused naming the adaptive ones, refused definitions, the tuning (set, read back, bad
 * values refused).
 *
 * Usage: adaptive DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feature_helpers.h"

static void permits(const char *dir) {
    shmlimit_def def;
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *dep = NULL;
    shmlimit_adaptive_permit *a = NULL, *b = NULL, *c = NULL;
    shmlimit_adaptive_info status, untouched;

    clear_of_remeasure(2); /* the samples are read back */

    /* min 2 (rate), max 8 (limit), no lease. */
    zero_def(&def, "dep", SHMLIMIT_ADAPTIVE_CONCURRENCY, 8, 0, 2);
    OK(one_limit(dir, "adaptive", &def, &limiter));
    OK(shmlimit_limiter_limit(limiter, "dep", &dep));

    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.limit == 2.0 && status.permits == 2 && status.min == 2 && status.max == 8);
    CHECK(status.in_flight == 0 && status.rtt_long_us == 0.0 && status.rtt_recent_us == 0.0);

    OK(shmlimit_adaptive_acquire(dep, 0, &a));
    OK(shmlimit_adaptive_acquire(dep, 0, &b));
    CHECK(a != NULL && b != NULL && a != b);
    c = (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50;
    OK(shmlimit_adaptive_acquire(dep, 0, &c));
    CHECK(c == NULL); /* at the limit: refused, not an error */
    OK(shmlimit_adaptive_acquire(dep, 2000000, &c));
    CHECK(c == NULL); /* still none after 2 ms */
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.in_flight == 2);

    /* Bad outcomes and latencies: refused, the permit still held and valid. */
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release",
                shmlimit_adaptive_release(a, 4));
    CHECK(contains(shmlimit_last_error(), "outcome 4"));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release_measured",
                shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, NAN));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release_measured",
                shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, -0.5));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release_measured",
                shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, INFINITY));
    CHECK(contains(shmlimit_last_error(), "latency"));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_adaptive_release",
                shmlimit_adaptive_release(NULL, SHMLIMIT_OUTCOME_OK));
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.in_flight == 2 && status.rtt_recent_us == 0.0);

    OK(shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, 0.25));
    OK(shmlimit_adaptive_release(b, SHMLIMIT_OUTCOME_DROPPED));
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.in_flight == 0);
    /* The first window closed on the first release: its one sample, 250 ms. */
    CHECK(status.rtt_recent_us == 250000.0 && status.rtt_long_us == 250000.0);
    CHECK(status.limit >= 2.0 && status.limit <= 8.0);

    /* A process that dies holding both permits reports nothing; they are taken over. */
    {
        pid_t pid = fork();
        if (pid == 0) {
            shmlimit_adaptive_permit *x = NULL, *y = NULL;
            int held = shmlimit_adaptive_acquire(dep, 0, &x) == SHMLIMIT_OK && x != NULL &&
                       shmlimit_adaptive_acquire(dep, 0, &y) == SHMLIMIT_OK && y != NULL;
            _exit(held ? 0 : 1);
        }
        int wstatus = 0;
        CHECK(waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) &&
              WEXITSTATUS(wstatus) == 0);
    }
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.in_flight == 2);
    /* An acquirer at the limit looks for dead holders at most every 10 ms per process: wait. */
    OK(shmlimit_adaptive_acquire(dep, SECOND, &a));
    OK(shmlimit_adaptive_acquire(dep, SECOND, &b));
    CHECK(a != NULL && b != NULL);
    OK(shmlimit_adaptive_release(a, SHMLIMIT_OUTCOME_TIMEOUT));
    OK(shmlimit_adaptive_release(b, SHMLIMIT_OUTCOME_ERROR));

    /* Out-parameters are written only on success. */
    memset(&untouched, 0x77, sizeof untouched);
    status = untouched;
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_adaptive_status",
                shmlimit_adaptive_status(NULL, &status));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_adaptive_status",
                shmlimit_adaptive_status(dep, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_adaptive_acquire",
                shmlimit_adaptive_acquire(dep, 0, NULL));
    CHECK(memcmp(&status, &untouched, sizeof status) == 0);

    shmlimit_limit_free(dep);
    shmlimit_limiter_free(limiter);
}

/* A permit released by its id (as `shmlimit_permit_holders` lists it), as a concurrency limit's:
 * released as dropped, so the limit learns nothing from it, and the `shmlimit_adaptive_permit`
 * released later reports nothing; the fixed permits' calls are refused naming the adaptive
 * ones. */
static void released_by_id(const char *dir) {
    shmlimit_def def;
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *dep = NULL;
    shmlimit_adaptive_permit *a = NULL;
    shmlimit_adaptive_info status;
    shmlimit_permit_holder holders[2];
    shmlimit_decision d;
    size_t count = 9;
    bool released = false;
    uint64_t id = 7;

    clear_of_remeasure(2); /* a sample would be read back */
    zero_def(&def, "by_id", SHMLIMIT_ADAPTIVE_CONCURRENCY, 8, 0, 2);
    OK(one_limit(dir, "by_id", &def, &limiter));
    OK(shmlimit_limiter_limit(limiter, "by_id", &dep));
    OK(shmlimit_adaptive_acquire(dep, 0, &a));
    CHECK(a != NULL);
    OK(shmlimit_permit_holders(dep, holders, 2, &count));
    CHECK(count == 1 && holders[0].pid == (uint32_t)getpid() && holders[0].key_tag == 0);
    OK(shmlimit_permit_release(dep, holders[0].id, &released));
    CHECK(released);
    OK(shmlimit_permit_release(dep, holders[0].id, &released));
    CHECK(!released); /* only once */
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.in_flight == 0);
    OK(shmlimit_permit_holders(dep, NULL, 0, &count));
    CHECK(count == 0);
    /* Released already: its outcome is no sample (the limit's first would close a window). */
    OK(shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, 0.25));
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.in_flight == 0 && status.rtt_recent_us == 0.0 && status.limit == 2.0);
    OK(shmlimit_permit_reclaim_dead(dep, &count));
    CHECK(count == 0);

    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_acquire", shmlimit_permit_acquire(dep, &id));
    CHECK(id == 7);
    CHECK(contains(shmlimit_last_error(),
                   "is an adaptive concurrency limit: use its adaptive calls, without a key "
                   "(shmlimit_adaptive_acquire)"));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire", shmlimit_acquire(dep, 1, &d));
    CHECK(contains(shmlimit_last_error(), "(shmlimit_adaptive_acquire)"));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_key",
                shmlimit_acquire_key(dep, (const uint8_t *)"k", 1, 1, &d));
    CHECK(contains(shmlimit_last_error(), "(shmlimit_adaptive_acquire)"));
    shmlimit_limit_free(dep);
    shmlimit_limiter_free(limiter);
}

static void wrong_kinds_and_refusals(const char *dir) {
    shmlimit_def def;
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *bucket = NULL;
    shmlimit_adaptive_permit *p = (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50;
    shmlimit_adaptive_info status;

    zero_def(&def, "bucket", SHMLIMIT_TOKEN_BUCKET, 1, HOUR, 1);
    OK(one_limit(dir, "bucket", &def, &limiter));
    OK(shmlimit_limiter_limit(limiter, "bucket", &bucket));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_adaptive_acquire",
                shmlimit_adaptive_acquire(bucket, 0, &p));
    CHECK(p == (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50);
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_adaptive_status",
                shmlimit_adaptive_status(bucket, &status));
    shmlimit_limit_free(bucket);
    shmlimit_limiter_free(limiter);

    adaptive_definitions_refused(dir, 0);
    zero_def(&def, "huge", SHMLIMIT_ADAPTIVE_CONCURRENCY, UINT64_C(1) << 16, 0, 1);
    refused(dir, &def, "maximum 65536");
    zero_def(&def, "aligned", SHMLIMIT_ADAPTIVE_CONCURRENCY, 4, 0, 1);
    def.alignment = SHMLIMIT_ALIGN_MONOTONIC;
    refused(dir, &def, "alignment");
}

/* Creating `def` with `tuning` must fail with INVALID_PARAMETER naming `needle`, and leave no
 * file behind. */
static void tuning_refused(const char *dir, const shmlimit_def *def,
                           const shmlimit_adaptive_tuning *tuning, const char *needle) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tuning-refused.shm", dir);
    shmlimit_limiter *sentinel = (shmlimit_limiter *)(uintptr_t)0x5a5a5a50;
    shmlimit_limiter *limiter = sentinel;
    const shmlimit_adaptive_tuning *tunings[1] = {tuning};
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open_tuned",
                shmlimit_limiter_create_or_open_tuned(path, def, 1, tunings, NULL, &limiter));
    if (!contains(shmlimit_last_error(), needle)) {
        failures++;
        fprintf(stderr, "refused tuning does not mention \"%s\": %s\n", needle,
                shmlimit_last_error());
    }
    CHECK(limiter == sentinel);
    CHECK(access(path, F_OK) != 0);
}

/* The tuning beyond min, max and lease: defaults, a tuned file read back (and by a second
 * opener with the same tuning; another tuning conflicts), bad values refused. */
static void tuning(const char *dir) {
    shmlimit_def defs[2];
    shmlimit_adaptive_tuning t, back, bad;
    shmlimit_limiter *limiter = NULL, *again = NULL, *other = NULL;
    shmlimit_limit *dep = NULL, *bucket = NULL;
    shmlimit_adaptive_info status;
    char path[4096];
    snprintf(path, sizeof path, "%s/tuned.shm", dir);

    OK(shmlimit_adaptive_tuning_default(&t));
    CHECK(t.initial == 0 && t.window_ns == 20000000 && t.smoothing == 0.2);
    CHECK(t.tolerance == 1.0 && t.headroom == 0.1 && t.backoff == 0.9);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_adaptive_tuning_default",
                shmlimit_adaptive_tuning_default(NULL));

    zero_def(&defs[0], "dep", SHMLIMIT_ADAPTIVE_CONCURRENCY, 40, 0, 2);
    zero_def(&defs[1], "bucket", SHMLIMIT_TOKEN_BUCKET, 1, HOUR, 1);
    t.initial = 6;
    t.window_ns = 50000000;
    t.smoothing = 0.5;
    t.tolerance = 2.0;
    t.headroom = 0.0;
    t.backoff = 0.5;
    const shmlimit_adaptive_tuning *tunings[2] = {&t, NULL};
    OK(shmlimit_limiter_create_or_open_tuned(path, defs, 2, tunings, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "dep", &dep));
    OK(shmlimit_adaptive_status(dep, &status));
    CHECK(status.permits == 6 && status.min == 2 && status.max == 40);
    OK(shmlimit_adaptive_tuning_of(dep, &back));
    CHECK(back.initial == 6 && back.window_ns == 50000000 && back.smoothing == 0.5);
    CHECK(back.tolerance == 2.0 && back.headroom == 0.0 && back.backoff == 0.5);
    OK(shmlimit_limiter_limit(limiter, "bucket", &bucket));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_adaptive_tuning_of",
                shmlimit_adaptive_tuning_of(bucket, &back));
    CHECK(contains(shmlimit_last_error(),
                   "limit `bucket`: this limit is not an adaptive concurrency limit"));
    /* The same tuning attaches; the default one conflicts. */
    OK(shmlimit_limiter_create_or_open_tuned(path, defs, 2, tunings, NULL, &again));
    EXPECT_CODE(SHMLIMIT_DEFINITION_CONFLICT, "shmlimit_limiter_create_or_open_tuned",
                shmlimit_limiter_create_or_open_tuned(path, defs, 2, NULL, NULL, &other));
    shmlimit_limiter_free(again);
    shmlimit_limit_free(bucket);
    shmlimit_limit_free(dep);
    shmlimit_limiter_free(limiter);

    /* Bad tunings: refused with the field named, no file created. */
    bad = t;
    bad.smoothing = NAN;
    tuning_refused(dir, &defs[0], &bad, "smoothing");
    bad = t;
    bad.tolerance = 0.5;
    tuning_refused(dir, &defs[0], &bad, "tolerance");
    bad = t;
    bad.backoff = 1.0;
    tuning_refused(dir, &defs[0], &bad, "backoff");
    bad = t;
    bad.headroom = -0.1;
    tuning_refused(dir, &defs[0], &bad, "headroom");
    bad = t;
    bad.initial = 41;
    tuning_refused(dir, &defs[0], &bad, "initial limit 41");
    bad = t;
    bad.window_ns = 0;
    tuning_refused(dir, &defs[0], &bad, "window 0 ms");
    bad = t;
    bad.window_ns = 1500000;
    tuning_refused(dir, &defs[0], &bad, "whole number of milliseconds");
    bad = t;
    bad.reserved[2] = 1;
    tuning_refused(dir, &defs[0], &bad, "reserved");
    tuning_refused(dir, &defs[1], &t, "not an adaptive concurrency limit");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    permits(argv[1]);
    released_by_id(argv[1]);
    wrong_kinds_and_refusals(argv[1]);
    tuning(argv[1]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
