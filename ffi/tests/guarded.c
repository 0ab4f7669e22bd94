/*
 * Guarded limits from C: the explicit fail-open / fail-closed choice while the limiter file is
 * missing, then real decisions once the file exists and the reopen interval has passed.
 * Argument errors (an invalid policy, NULL pointers) return their codes and leave the
 * out-parameters untouched.
 *
 * Usage: guarded DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static const uint64_t HOUR = UINT64_C(3600) * UINT64_C(1000000000);
/* The reopen interval of the guarded handle: 50 ms. */
static const uint64_t REOPEN_NS = UINT64_C(50000000);
/* Capacity of every limit in the file; it refills one unit per hour, so no unit comes back
 * while the test runs (it would take an hour). */
#define CAPACITY 5
#define KEY_CAPACITY 3

static void zero_def(shmlimit_def *def, const char *name, uint64_t limit) {
    memset(def, 0, sizeof *def);
    def->name = name;
    def->kind = SHMLIMIT_TOKEN_BUCKET;
    def->limit = limit;
    def->period_ns = HOUR;
    def->rate = 1;
}

static int flagged(const shmlimit_decision *d) {
    return (d->reserved[0] & SHMLIMIT_DECISION_UNAVAILABLE) != 0;
}

/* A sentinel decision: a failed call must leave it as it is. */
static void poison(shmlimit_decision *d) {
    memset(d, 0x5a, sizeof *d);
}

static int poisoned(const shmlimit_decision *d) {
    shmlimit_decision p;
    poison(&p);
    return memcmp(d, &p, sizeof p) == 0;
}

/* Sleep at least `ns` nanoseconds on CLOCK_MONOTONIC (nanosleep may return early only on a
 * signal, which it reports, and is then resumed with the time left). */
static void sleep_ns(uint64_t ns) {
    struct timespec left, want;
    want.tv_sec = (time_t)(ns / 1000000000u);
    want.tv_nsec = (long)(ns % 1000000000u);
    while (nanosleep(&want, &left) != 0) {
        want = left;
    }
}

static void argument_errors(shmlimit_guarded_limiter *g, shmlimit_guarded_limit *l) {
    shmlimit_guarded_limiter *gs = (shmlimit_guarded_limiter *)(uintptr_t)0x5a5a5a50;
    shmlimit_guarded_limit *ls = (shmlimit_guarded_limit *)(uintptr_t)0x5a5a5a50;
    shmlimit_guarded_limiter *gout = gs;
    shmlimit_guarded_limit *lout = ls;
    shmlimit_decision d;
    bool attached = true;
    const uint8_t key[3] = {'a', 'b', 'c'};

    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_open",
                shmlimit_guarded_limiter_open(NULL, REOPEN_NS, &gout));
    CHECK(gout == gs);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_open",
                shmlimit_guarded_limiter_open("/nonexistent/x.shm", REOPEN_NS, NULL));

    /* The policy is required: 0 (no default) and unknown values are refused. */
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(g, "search", 0, &lout));
    CHECK(lout == ls);
    CHECK(strstr(shmlimit_last_error(), "no default") != NULL);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(g, "search", 3, &lout));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(g, "search", UINT32_MAX, &lout));
    CHECK(lout == ls);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(NULL, "search", SHMLIMIT_FAIL_OPEN, &lout));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(g, NULL, SHMLIMIT_FAIL_OPEN, &lout));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(g, "search", SHMLIMIT_FAIL_OPEN, NULL));
    EXPECT_CODE(SHMLIMIT_BAD_UTF8, "shmlimit_guarded_limiter_limit",
                shmlimit_guarded_limiter_limit(g, "\xff", SHMLIMIT_FAIL_OPEN, &lout));
    CHECK(lout == ls);

    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_attached",
                shmlimit_guarded_limiter_attached(NULL, &attached));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_limiter_attached",
                shmlimit_guarded_limiter_attached(g, NULL));
    CHECK(attached);

    poison(&d);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_acquire",
                shmlimit_guarded_acquire(NULL, 1, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_acquire",
                shmlimit_guarded_acquire(l, 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_peek", shmlimit_guarded_peek(NULL, 1, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_peek", shmlimit_guarded_peek(l, 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_acquire_key",
                shmlimit_guarded_acquire_key(NULL, key, sizeof key, 1, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_acquire_key",
                shmlimit_guarded_acquire_key(l, key, sizeof key, 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_acquire_key",
                shmlimit_guarded_acquire_key(l, NULL, 3, 1, &d));
    /* The caller's own errors are errors whatever the policy and the file's state. */
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_guarded_acquire_key",
                shmlimit_guarded_acquire_key(l, NULL, 0, 1, &d));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_guarded_acquire_key",
                shmlimit_guarded_acquire_key(l, key, SHMLIMIT_MAX_KEY_LEN + 1, 1, &d));
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_guarded_acquire", shmlimit_guarded_acquire(l, 0, &d));
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_guarded_peek", shmlimit_guarded_peek(l, 0, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_refund",
                shmlimit_guarded_refund(NULL, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_guarded_refund", shmlimit_guarded_refund(l, NULL));
    CHECK(poisoned(&d));

    shmlimit_guarded_limiter_free(NULL);
    shmlimit_guarded_limit_free(NULL);
}

int main(int argc, char **argv) {
    char path[4096];
    shmlimit_guarded_limiter *g = NULL;
    shmlimit_guarded_limit *search = NULL, *payments = NULL, *per_user = NULL, *unknown = NULL;
    shmlimit_limiter *limiter = NULL;
    shmlimit_def defs[3];
    shmlimit_decision d, grant;
    bool attached = true;
    int i, allowed;
    const uint8_t alice[5] = {'a', 'l', 'i', 'c', 'e'};

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/late.shm", argv[1]);

    /* The file does not exist: the guarded handle opens anyway. */
    OK(shmlimit_guarded_limiter_open(path, REOPEN_NS, &g));
    OK(shmlimit_guarded_limiter_attached(g, &attached));
    CHECK(!attached);
    OK(shmlimit_guarded_limiter_limit(g, "search", SHMLIMIT_FAIL_OPEN, &search));
    OK(shmlimit_guarded_limiter_limit(g, "payments", SHMLIMIT_FAIL_CLOSED, &payments));
    OK(shmlimit_guarded_limiter_limit(g, "per_user", SHMLIMIT_FAIL_OPEN, &per_user));
    OK(shmlimit_guarded_limiter_limit(g, "nope", SHMLIMIT_FAIL_OPEN, &unknown));
    argument_errors(g, search);

    /* Fail-open admits, unlimited (far more than any limit of the file), flagged, with nothing
     * to refund. */
    allowed = 0;
    for (i = 0; i < 100; i++) {
        poison(&d);
        OK(shmlimit_guarded_acquire(search, 1, &d));
        if (d.allowed && flagged(&d) && d.retry_after_ns == 0 && d.grant[0] == 0 &&
            d.grant[1] == 0 && !d.shadow_denied) {
            allowed++;
        }
    }
    CHECK(allowed == 100);
    OK(shmlimit_guarded_refund(search, &d));
    poison(&d);
    OK(shmlimit_guarded_peek(search, 1, &d));
    CHECK(d.allowed && flagged(&d) && d.grant[0] == 0 && d.grant[1] == 0);
    poison(&d);
    OK(shmlimit_guarded_acquire_key(per_user, alice, sizeof alice, 1, &d));
    CHECK(d.allowed && flagged(&d) && d.grant[0] == 0 && d.grant[1] == 0);
    /* A name the file may not define is only known once it is attached: the policy decides. */
    poison(&d);
    OK(shmlimit_guarded_acquire(unknown, 1, &d));
    CHECK(d.allowed && flagged(&d));

    /* Fail-closed denies, flagged, with a retry-after of at most the reopen interval. */
    for (i = 0; i < 10; i++) {
        poison(&d);
        OK(shmlimit_guarded_acquire(payments, 1, &d));
        CHECK(!d.allowed && flagged(&d));
        CHECK(d.retry_after_ns >= 1 && d.retry_after_ns <= REOPEN_NS);
        CHECK(d.grant[0] == 0 && d.grant[1] == 0 && d.remaining == 0);
    }
    poison(&d);
    OK(shmlimit_guarded_peek(payments, 1, &d));
    CHECK(!d.allowed && flagged(&d) && d.retry_after_ns >= 1 && d.retry_after_ns <= REOPEN_NS);
    OK(shmlimit_guarded_refund(payments, &d));
    OK(shmlimit_guarded_limiter_attached(g, &attached));
    CHECK(!attached);

    /* Create the file from C. Every failed attempt to open it so far happened before this
     * point, so after one reopen interval (plus a millisecond) the next decision attaches. */
    zero_def(&defs[0], "search", CAPACITY);
    zero_def(&defs[1], "payments", CAPACITY);
    zero_def(&defs[2], "per_user", KEY_CAPACITY);
    defs[2].key_capacity = 16;
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    sleep_ns(REOPEN_NS + UINT64_C(1000000));

    /* Real decisions now: not flagged, bounded by the limit (no unit refills within an hour). */
    allowed = 0;
    memset(&grant, 0, sizeof grant);
    for (i = 0; i < 3 * CAPACITY; i++) {
        poison(&d);
        OK(shmlimit_guarded_acquire(payments, 1, &d));
        CHECK(!flagged(&d) && d.reserved[0] == 0);
        /* reserved[1] names the limit of a grant, and is zero without one. */
        CHECK((d.reserved[1] != 0) == d.allowed);
        if (d.allowed) {
            allowed++;
            CHECK(d.grant[0] != 0 || d.grant[1] != 0);
            grant = d;
        } else {
            CHECK(d.retry_after_ns > 0);
        }
    }
    CHECK(allowed == CAPACITY);
    OK(shmlimit_guarded_limiter_attached(g, &attached));
    CHECK(attached);
    /* A real grant refunds: exactly one more admission. */
    CHECK(grant.allowed);
    OK(shmlimit_guarded_refund(payments, &grant));
    poison(&d);
    OK(shmlimit_guarded_peek(payments, 1, &d));
    CHECK(d.allowed && !flagged(&d) && d.grant[0] == 0 && d.grant[1] == 0);
    OK(shmlimit_guarded_acquire(payments, 1, &d));
    CHECK(d.allowed && !flagged(&d));
    OK(shmlimit_guarded_acquire(payments, 1, &d));
    CHECK(!d.allowed && !flagged(&d) && d.retry_after_ns > 0);
    /* A flagged decision passed back took nothing: its refund gives nothing back. */
    memset(&d, 0, sizeof d);
    d.allowed = true;
    d.reserved[0] = SHMLIMIT_DECISION_UNAVAILABLE;
    OK(shmlimit_guarded_refund(payments, &d));
    OK(shmlimit_guarded_acquire(payments, 1, &d));
    CHECK(!d.allowed && !flagged(&d));

    /* The fail-open limit is now limited too. */
    allowed = 0;
    for (i = 0; i < 3 * CAPACITY; i++) {
        OK(shmlimit_guarded_acquire(search, 1, &d));
        CHECK(!flagged(&d));
        allowed += d.allowed ? 1 : 0;
    }
    CHECK(allowed == CAPACITY);

    /* Keyed: each key has its own bucket. */
    allowed = 0;
    for (i = 0; i < 3 * KEY_CAPACITY; i++) {
        OK(shmlimit_guarded_acquire_key(per_user, alice, sizeof alice, 1, &d));
        CHECK(!flagged(&d));
        allowed += d.allowed ? 1 : 0;
    }
    /* The admission made while unavailable took nothing from the file. */
    CHECK(allowed == KEY_CAPACITY);
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_guarded_acquire",
                shmlimit_guarded_acquire(per_user, 1, &d));

    /* Once attached, a name the file does not define is the caller's error, not the policy's. */
    poison(&d);
    EXPECT_CODE(SHMLIMIT_UNKNOWN_LIMIT, "shmlimit_guarded_acquire",
                shmlimit_guarded_acquire(unknown, 1, &d));
    CHECK(poisoned(&d));
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_guarded_acquire",
                shmlimit_guarded_acquire(search, CAPACITY + 1, &d));

    /* A guarded limit stays usable after its guarded limiter is freed. */
    shmlimit_guarded_limiter_free(g);
    OK(shmlimit_guarded_acquire(payments, 1, &d));
    CHECK(!d.allowed && !flagged(&d));

    shmlimit_guarded_limit_free(search);
    shmlimit_guarded_limit_free(payments);
    shmlimit_guarded_limit_free(per_user);
    shmlimit_guarded_limit_free(unknown);
    shmlimit_limiter_free(limiter);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
