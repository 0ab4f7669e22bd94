/*
 * The C ABI's later calls, success and error paths, from C (and compiled as C++ too: this file
 * keeps to the common subset of C99 and C++11): definition options (keys, shadow mode,
 * near-limit, split, fleet share), refunds, live retuning and reset, composed checks, keyed
 * decisions, permits, keyed permits, timed waits and reservations.
 *
 * Usage: features DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const uint64_t SECOND = UINT64_C(1000000000);
static const uint64_t HOUR = UINT64_C(3600) * UINT64_C(1000000000);
static const uint64_t DECADE = UINT64_C(10) * 365 * 24 * 3600 * UINT64_C(1000000000);

static void zero_def(shmlimit_def *def, const char *name, uint32_t kind, uint64_t limit,
                     uint64_t period_ns, uint64_t rate) {
    memset(def, 0, sizeof *def);
    def->name = name;
    def->kind = kind;
    def->limit = limit;
    def->period_ns = period_ns;
    def->rate = rate;
}

/* A fresh file `name` in `dir` holding the one definition `def`. */
static shmlimit_status one_limit(const char *dir, const char *name, const shmlimit_def *def,
                                 shmlimit_limiter **limiter) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.shm", dir, name);
    return shmlimit_limiter_create_or_open(path, def, 1, NULL, limiter);
}

/* Creating `def` alone must fail with INVALID_PARAMETER and a message holding `needle`. */
static void refused(const char *dir, const shmlimit_def *def, const char *needle) {
    shmlimit_limiter *sentinel = (shmlimit_limiter *)(uintptr_t)0x5a5a5a50;
    shmlimit_limiter *limiter = sentinel;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                one_limit(dir, "refused", def, &limiter));
    if (!contains(shmlimit_last_error(), needle)) {
        failures++;
        fprintf(stderr, "refusal of `%s` does not mention \"%s\": %s\n", def->name, needle,
                shmlimit_last_error());
    }
    CHECK(limiter == sentinel);
}

static void definition_options(const char *dir) {
    char path[4096];
    shmlimit_def defs[6], stored[6], def;
    shmlimit_limiter *limiter = NULL, *again = NULL;
    size_t count = 0, i;

    snprintf(path, sizeof path, "%s/options.shm", dir);
    zero_def(&defs[0], "per_user", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    defs[0].key_capacity = 100;
    defs[0].on_full = SHMLIMIT_FULL_ERROR;
    zero_def(&defs[1], "dry", SHMLIMIT_FIXED_WINDOW, 1, DECADE, 0);
    defs[1].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    defs[1].flags = SHMLIMIT_DEF_SHADOW;
    zero_def(&defs[2], "hot", SHMLIMIT_TOKEN_BUCKET, 8, HOUR, 1);
    defs[2].split = 4;
    zero_def(&defs[3], "share", SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 10);
    defs[3].fleet_weight = 3;
    defs[3].fleet_emission_ns = 1000000;
    zero_def(&defs[4], "quiet", SHMLIMIT_SLIDING_LOG, 10, 10 * SECOND, 0);
    defs[4].flags = SHMLIMIT_DEF_NEAR_LIMIT;
    defs[4].near_limit = 0;
    zero_def(&defs[5], "pool", SHMLIMIT_CONCURRENCY, 2, 0, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 6, NULL, &limiter));
    OK(shmlimit_limiter_limit_count(limiter, &count));
    CHECK(count == 6);
    for (i = 0; i < 6 && i < count; i++) {
        OK(shmlimit_limiter_definition(limiter, i, &stored[i]));
        /* Every reported definition states its near-limit fraction. */
        CHECK((stored[i].flags & SHMLIMIT_DEF_NEAR_LIMIT) != 0);
    }
    CHECK(strcmp(stored[0].name, "per_user") == 0 && stored[0].key_capacity == 128);
    CHECK(stored[0].on_full == SHMLIMIT_FULL_ERROR && stored[0].split == 1);
    CHECK(stored[0].near_limit == SHMLIMIT_DEFAULT_NEAR_LIMIT);
    CHECK((stored[1].flags & SHMLIMIT_DEF_SHADOW) != 0 && stored[1].key_capacity == 0);
    CHECK(stored[1].alignment == SHMLIMIT_ALIGN_MONOTONIC);
    CHECK((stored[2].flags & SHMLIMIT_DEF_SHADOW) == 0 && stored[2].split == 4);
    CHECK(stored[3].fleet_weight == 3 && stored[3].fleet_emission_ns == 1000000);
    CHECK(stored[3].limit == 10 && stored[3].period_ns == SECOND / 10 && stored[3].rate == 1);
    CHECK(stored[4].near_limit == 0);
    CHECK(stored[5].kind == SHMLIMIT_CONCURRENCY && stored[5].fleet_weight == 0);
    /* What the library reports is a definition that attaches to the same file. */
    OK(shmlimit_limiter_create_or_open(path, stored, 6, NULL, &again));
    shmlimit_limiter_free(again);
    again = NULL;
    /* Any option that differs is a conflict. */
    defs[1].flags = 0;
    EXPECT_CODE(SHMLIMIT_DEFINITION_CONFLICT, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 6, NULL, &again));
    defs[1].flags = SHMLIMIT_DEF_SHADOW;
    defs[0].on_full = SHMLIMIT_FULL_DENY;
    EXPECT_CODE(SHMLIMIT_DEFINITION_CONFLICT, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 6, NULL, &again));
    CHECK(again == NULL);
    {
        shmlimit_limit *share = NULL;
        OK(shmlimit_limiter_limit(limiter, "share", &share));
        OK(shmlimit_limit_definition(share, &def));
        CHECK(def.fleet_weight == 3 && strcmp(def.name, "share") == 0);
        {
            /* Defined as a fleet share, but no agent manages it yet: not managed, like any
             * other limit (tests/ffi_c.rs reads a managed one, leased and fenced). */
            shmlimit_fleet_lease lease;
            memset(&lease, 0xFF, sizeof lease);
            OK(shmlimit_limit_fleet_lease(share, &lease));
            CHECK(lease.managed == 0 && lease.leased == 0 && lease.deadline_ns == 0);
            CHECK(lease.applied_capacity == 0 && lease.fence_capacity == 0);
            EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_fleet_lease",
                        shmlimit_limit_fleet_lease(share, NULL));
            EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_fleet_lease",
                        shmlimit_limit_fleet_lease(NULL, &lease));
        }
        shmlimit_limit_free(share);
    }
    shmlimit_limiter_free(limiter);

    /* Refused options: each names its field. */
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.on_full = SHMLIMIT_FULL_ALLOW;
    refused(dir, &def, "on_full");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.key_capacity = 8;
    def.on_full = 3;
    refused(dir, &def, "on_full 3");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.near_limit = 100;
    refused(dir, &def, "SHMLIMIT_DEF_NEAR_LIMIT");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.flags = 0x80;
    refused(dir, &def, "flags");
    zero_def(&def, "x", SHMLIMIT_FIXED_WINDOW, 2, SECOND, 0);
    def.split = 2;
    refused(dir, &def, "split");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 200, SECOND, 1);
    def.split = SHMLIMIT_MAX_SPLIT + 1;
    refused(dir, &def, "split");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.split = 4; /* capacity 2 leaves sub-buckets empty */
    refused(dir, &def, "split");
    zero_def(&def, "x", SHMLIMIT_SLIDING_LOG, 2, SECOND, 0);
    def.key_capacity = 8;
    refused(dir, &def, "keyed");
    zero_def(&def, "x", SHMLIMIT_CONCURRENCY, SHMLIMIT_MAX_KEY_PERMITS + 1, 0, 0);
    def.key_capacity = 8;
    refused(dir, &def, "per key");
    zero_def(&def, "x", SHMLIMIT_CONCURRENCY, SHMLIMIT_MAX_KEY_PERMITS, 0, 0);
    def.key_capacity = SHMLIMIT_MAX_KEYS;
    refused(dir, &def, "permit entries");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.key_capacity = SHMLIMIT_MAX_KEYS + 1;
    refused(dir, &def, "key capacity");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.fleet_emission_ns = 1000;
    refused(dir, &def, "fleet_weight");
    zero_def(&def, "x", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    def.fleet_weight = 1;
    refused(dir, &def, "rate");
    zero_def(&def, "x", SHMLIMIT_FIXED_WINDOW, 2, SECOND, 0);
    def.fleet_weight = 1;
    def.fleet_emission_ns = 1000;
    refused(dir, &def, "fleet");
}

static void refunds(const char *dir) {
    shmlimit_def defs[4];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *bucket = NULL, *window = NULL, *log = NULL, *pool = NULL;
    shmlimit_decision a, b, denied, peek;
    unsigned char raw[sizeof(shmlimit_decision) * 2];
    char path[4096];

    snprintf(path, sizeof path, "%s/refund.shm", dir);
    zero_def(&defs[0], "bucket", SHMLIMIT_TOKEN_BUCKET, 2, HOUR, 1);
    zero_def(&defs[1], "window", SHMLIMIT_FIXED_WINDOW, 3, DECADE, 0);
    defs[1].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    zero_def(&defs[2], "log", SHMLIMIT_SLIDING_LOG, 3, HOUR, 0);
    zero_def(&defs[3], "pool", SHMLIMIT_CONCURRENCY, 1, 0, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 4, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "bucket", &bucket));
    OK(shmlimit_limiter_limit(limiter, "window", &window));
    OK(shmlimit_limiter_limit(limiter, "log", &log));
    OK(shmlimit_limiter_limit(limiter, "pool", &pool));
    shmlimit_limiter_free(limiter);

    /* A peek records no grant; a grant records its cost. */
    OK(shmlimit_peek(bucket, 2, &peek));
    CHECK(peek.allowed && peek.grant[0] == 0 && peek.grant[1] == 0);
    OK(shmlimit_acquire(bucket, 2, &a));
    CHECK(a.allowed && a.grant[0] == 2);
    OK(shmlimit_acquire(bucket, 1, &denied));
    CHECK(!denied.allowed && denied.grant[0] == 0);
    /* Refunding a denial or a peek gives nothing back. */
    OK(shmlimit_refund(bucket, &denied));
    OK(shmlimit_refund(bucket, &peek));
    OK(shmlimit_peek(bucket, 1, &b));
    CHECK(!b.allowed);
    /* One unit of the grant back, then the rest (never more than the grant). */
    OK(shmlimit_refund_units(bucket, &a, 1));
    OK(shmlimit_peek(bucket, 1, &b));
    CHECK(b.allowed && b.remaining == 0);
    OK(shmlimit_refund_units(bucket, &a, 1000));
    OK(shmlimit_peek(bucket, 1, &b));
    CHECK(b.allowed && b.remaining == 1); /* full (2), not past full */

    /* Window and log refunds. */
    OK(shmlimit_acquire(window, 3, &a));
    OK(shmlimit_acquire(window, 1, &denied));
    CHECK(a.allowed && !denied.allowed);
    OK(shmlimit_refund(window, &a));
    OK(shmlimit_acquire(window, 3, &b));
    CHECK(b.allowed);
    OK(shmlimit_acquire(log, 2, &a));
    OK(shmlimit_acquire(log, 2, &denied));
    CHECK(a.allowed && !denied.allowed);
    OK(shmlimit_refund(log, &a));
    OK(shmlimit_acquire(log, 3, &b));
    CHECK(b.allowed && b.remaining == 0);

    /* A grant record names the limit that made it: refunded on another limit it is refused,
     * and nothing is given back there. */
    {
        shmlimit_decision grant, refused;
        OK(shmlimit_acquire(bucket, 1, &grant));
        CHECK(grant.allowed && grant.reserved[1] != 0);
        OK(shmlimit_acquire(log, 1, &refused));
        CHECK(!refused.allowed && refused.reserved[1] == 0);
        EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_refund", shmlimit_refund(log, &grant));
        OK(shmlimit_peek(log, 1, &refused));
        CHECK(!refused.allowed); /* the log stays spent */
        OK(shmlimit_refund(bucket, &grant));
    }

    /* Errors. */
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_refund", shmlimit_refund(NULL, &a));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_refund", shmlimit_refund(bucket, NULL));
    CHECK(contains(shmlimit_last_error(), "`grant`"));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_refund_units",
                shmlimit_refund_units(bucket, NULL, 1));
    memset(raw, 0, sizeof raw);
    EXPECT_CODE(SHMLIMIT_MISALIGNED_POINTER, "shmlimit_refund",
                shmlimit_refund(bucket, (const shmlimit_decision *)(void *)(raw + 1)));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_refund", shmlimit_refund(pool, &a));

    shmlimit_limit_free(bucket);
    shmlimit_limit_free(window);
    shmlimit_limit_free(log);
    shmlimit_limit_free(pool);
}

static void retuning(const char *dir) {
    shmlimit_def defs[3], def;
    shmlimit_limiter *limiter = NULL, *other = NULL;
    shmlimit_limit *bucket = NULL, *seen = NULL, *window = NULL, *log = NULL;
    shmlimit_decision d;
    char path[4096];
    int i;

    snprintf(path, sizeof path, "%s/retune.shm", dir);
    zero_def(&defs[0], "bucket", SHMLIMIT_TOKEN_BUCKET, 4, HOUR, 1);
    zero_def(&defs[1], "window", SHMLIMIT_FIXED_WINDOW, 2, DECADE, 0);
    defs[1].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    zero_def(&defs[2], "log", SHMLIMIT_SLIDING_LOG, 2, HOUR, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "bucket", &bucket));
    OK(shmlimit_limiter_limit(limiter, "window", &window));
    OK(shmlimit_limiter_limit(limiter, "log", &log));
    /* A second attachment sees every retune. */
    OK(shmlimit_limiter_open(path, NULL, &other));
    OK(shmlimit_limiter_limit(other, "bucket", &seen));

    OK(shmlimit_limit_set_rate(bucket, 10, SECOND));
    OK(shmlimit_limit_live_definition(seen, &def));
    CHECK(def.kind == SHMLIMIT_TOKEN_BUCKET && def.limit == 4 && def.period_ns == SECOND / 10);
    CHECK(strcmp(def.name, "bucket") == 0);
    /* The stored definition is what the file was created with. */
    OK(shmlimit_limit_definition(seen, &def));
    CHECK(def.period_ns == HOUR);
    OK(shmlimit_limit_set_token_bucket(bucket, 6, 1, HOUR));
    OK(shmlimit_limit_live_definition(seen, &def));
    CHECK(def.limit == 6 && def.period_ns == HOUR);
    for (i = 0; i < 6; i++) {
        OK(shmlimit_acquire(seen, 1, &d));
    }
    OK(shmlimit_acquire(seen, 1, &d));
    CHECK(!d.allowed);
    /* A reset makes the bucket full again, for every attachment. */
    OK(shmlimit_limit_reset(bucket));
    OK(shmlimit_peek(seen, 1, &d));
    CHECK(d.allowed && d.remaining == 5);

    OK(shmlimit_acquire(window, 2, &d));
    OK(shmlimit_acquire(window, 1, &d));
    CHECK(!d.allowed);
    OK(shmlimit_limit_set_limit(window, 3));
    OK(shmlimit_limit_live_definition(window, &def));
    CHECK(def.limit == 3 && def.kind == SHMLIMIT_FIXED_WINDOW);
    OK(shmlimit_acquire(window, 1, &d));
    CHECK(d.allowed);

    /* Errors. */
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_set_rate",
                shmlimit_limit_set_rate(log, 1, SECOND));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_set_limit", shmlimit_limit_set_limit(log, 5));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_set_limit",
                shmlimit_limit_set_limit(bucket, 5));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_set_token_bucket",
                shmlimit_limit_set_token_bucket(window, 5, 1, SECOND));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limit_set_rate",
                shmlimit_limit_set_rate(bucket, 0, SECOND));
    CHECK(contains(shmlimit_last_error(), "bucket"));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limit_set_rate",
                shmlimit_limit_set_rate(bucket, 1, 0));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limit_set_token_bucket",
                shmlimit_limit_set_token_bucket(bucket, 0, 1, SECOND));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limit_set_limit",
                shmlimit_limit_set_limit(window, 0));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_set_rate",
                shmlimit_limit_set_rate(NULL, 1, SECOND));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_set_token_bucket",
                shmlimit_limit_set_token_bucket(NULL, 1, 1, SECOND));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_set_limit",
                shmlimit_limit_set_limit(NULL, 1));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_reset", shmlimit_limit_reset(NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_live_definition",
                shmlimit_limit_live_definition(bucket, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_live_definition",
                shmlimit_limit_live_definition(NULL, &def));
    /* The failed retunes changed nothing. */
    OK(shmlimit_limit_live_definition(seen, &def));
    CHECK(def.limit == 6 && def.period_ns == HOUR);

    shmlimit_limit_free(bucket);
    shmlimit_limit_free(seen);
    shmlimit_limit_free(window);
    shmlimit_limit_free(log);
    shmlimit_limiter_free(limiter);
    shmlimit_limiter_free(other);
}

static void composed(const char *dir) {
    shmlimit_def defs[3];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *user = NULL, *down = NULL, *pool = NULL;
    shmlimit_check c[SHMLIMIT_MAX_CHECKS + 1];
    shmlimit_composed first, second, untouched;
    shmlimit_decision d;
    unsigned char raw[sizeof(shmlimit_check) * 2];
    char path[4096];
    int i;

    snprintf(path, sizeof path, "%s/composed.shm", dir);
    zero_def(&defs[0], "user", SHMLIMIT_TOKEN_BUCKET, 3, HOUR, 1);
    zero_def(&defs[1], "down", SHMLIMIT_SLIDING_LOG, 1, HOUR, 0);
    zero_def(&defs[2], "pool", SHMLIMIT_CONCURRENCY, 1, 0, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "user", &user));
    OK(shmlimit_limiter_limit(limiter, "down", &down));
    OK(shmlimit_limiter_limit(limiter, "pool", &pool));
    shmlimit_limiter_free(limiter);
    memset(c, 0, sizeof c);
    c[0].limit = user;
    c[0].cost = 1;
    c[1].limit = down;
    c[1].cost = 1;

    OK(shmlimit_acquire_all(c, 2, &first));
    CHECK(first.allowed && first.denied_by == -1 && first.count == 2);
    CHECK(first.retry_after_ns == 0);
    CHECK(first.decisions[0].allowed && first.decisions[0].remaining == 2);
    CHECK(first.decisions[1].allowed && first.decisions[1].grant[0] == 1);
    CHECK(first.decisions[2].allowed == false && first.decisions[2].retry_after_ns == 0);
    /* The second is denied by "down" and takes nothing from "user". */
    OK(shmlimit_acquire_all(c, 2, &second));
    CHECK(!second.allowed && second.denied_by == 1 && second.count == 2);
    CHECK(second.retry_after_ns > 0 && second.retry_after_ns <= HOUR);
    CHECK(!second.decisions[0].allowed && second.decisions[0].retry_after_ns == 0);
    CHECK(!second.decisions[1].allowed && second.decisions[1].retry_after_ns > 0);
    OK(shmlimit_peek(user, 1, &d));
    CHECK(d.remaining == 1);
    /* Refunding a denied composition does nothing; refunding the grant frees "down". */
    OK(shmlimit_refund_all(c, 2, &second));
    OK(shmlimit_peek(user, 1, &d));
    CHECK(d.remaining == 1);
    OK(shmlimit_refund_all(c, 2, &first));
    OK(shmlimit_peek(user, 1, &d));
    CHECK(d.remaining == 2);
    OK(shmlimit_peek(down, 1, &d));
    CHECK(d.allowed);
    /* No checks at all: allowed. */
    OK(shmlimit_acquire_all(NULL, 0, &first));
    CHECK(first.allowed && first.count == 0);

    /* Errors: the out-parameter stays untouched, and nothing is consumed. */
    memset(&untouched, 0x5a, sizeof untouched);
    second = untouched;
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_all", shmlimit_acquire_all(NULL, 2, &second));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, NULL));
    for (i = 0; i <= SHMLIMIT_MAX_CHECKS; i++) {
        c[i].limit = user;
        c[i].cost = 1;
    }
    EXPECT_CODE(SHMLIMIT_BAD_LENGTH, "shmlimit_acquire_all",
                shmlimit_acquire_all(c, SHMLIMIT_MAX_CHECKS + 1, &second));
    EXPECT_CODE(SHMLIMIT_BAD_LENGTH, "shmlimit_acquire_all",
                shmlimit_acquire_all(c, SIZE_MAX, &second));
    memset(raw, 0, sizeof raw);
    EXPECT_CODE(SHMLIMIT_MISALIGNED_POINTER, "shmlimit_acquire_all",
                shmlimit_acquire_all((const shmlimit_check *)(void *)(raw + 1), 1, &second));
    c[1].limit = NULL;
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &second));
    CHECK(contains(shmlimit_last_error(), "checks[1].limit"));
    c[1].limit = down;
    c[1].key_len = 7; /* a key length without a key */
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_all",
                shmlimit_acquire_all(c, 2, &second));
    c[1].key_len = 0;
    c[1].cost = 0;
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &second));
    c[1].cost = 2;
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_acquire_all",
                shmlimit_acquire_all(c, 2, &second));
    c[1].limit = pool;
    c[1].cost = 1;
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &second));
    CHECK(memcmp(&second, &untouched, sizeof second) == 0);
    /* The failed compositions refunded their first grant. */
    OK(shmlimit_peek(user, 1, &d));
    CHECK(d.remaining == 2);
    c[1].limit = down;
    OK(shmlimit_acquire_all(c, 2, &first));
    CHECK(first.allowed);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_refund_all", shmlimit_refund_all(c, 1, &first));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_refund_all", shmlimit_refund_all(c, 2, NULL));
    EXPECT_CODE(SHMLIMIT_BAD_LENGTH, "shmlimit_refund_all",
                shmlimit_refund_all(c, SHMLIMIT_MAX_CHECKS + 1, &first));
    OK(shmlimit_peek(down, 1, &d));
    CHECK(!d.allowed); /* the failed refunds gave nothing back */

    shmlimit_limit_free(user);
    shmlimit_limit_free(down);
    shmlimit_limit_free(pool);
}

static void keyed(const char *dir) {
    shmlimit_def defs[4];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *per_user = NULL, *strict = NULL, *open_ = NULL, *plain = NULL;
    shmlimit_decision a, d, untouched;
    size_t used = 99, slots = 99, reclaimed = 99;
    char path[4096], big[SHMLIMIT_MAX_KEY_LEN + 1], key[16];
    uint64_t t0 = monotonic_ns();
    int i;

    snprintf(path, sizeof path, "%s/keyed.shm", dir);
    zero_def(&defs[0], "per_user", SHMLIMIT_TOKEN_BUCKET, 2, HOUR, 1);
    defs[0].key_capacity = 64;
    zero_def(&defs[1], "strict", SHMLIMIT_FIXED_WINDOW, 1, DECADE, 0);
    defs[1].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    defs[1].key_capacity = 4;
    defs[1].on_full = SHMLIMIT_FULL_ERROR;
    zero_def(&defs[2], "open", SHMLIMIT_TOKEN_BUCKET, 1, HOUR, 1);
    defs[2].key_capacity = 2;
    defs[2].on_full = SHMLIMIT_FULL_ALLOW;
    zero_def(&defs[3], "plain", SHMLIMIT_TOKEN_BUCKET, 1, HOUR, 1);
    OK(shmlimit_limiter_create_or_open(path, defs, 4, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "per_user", &per_user));
    OK(shmlimit_limiter_limit(limiter, "strict", &strict));
    OK(shmlimit_limiter_limit(limiter, "open", &open_));
    OK(shmlimit_limiter_limit(limiter, "plain", &plain));
    shmlimit_limiter_free(limiter);

    OK(shmlimit_peek_key(per_user, (const uint8_t *)"alice", 5, 2, &d));
    CHECK(d.allowed && d.remaining == 0 && d.grant[0] == 0);
    OK(shmlimit_limit_key_occupancy(per_user, &used, &slots));
    CHECK(used == 0 && slots == 64); /* peeking inserted nothing */
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"alice", 5, 2, &a));
    CHECK(a.allowed && a.remaining == 0 && a.grant[0] == 2);
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"alice", 5, 1, &d));
    CHECK(!d.allowed && d.retry_after_ns > 0);
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"bob", 3, 2, &d));
    CHECK(d.allowed);
    /* Keys are bytes: embedded NULs and prefixes are distinct keys. */
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"a\0b", 3, 2, &d));
    CHECK(d.allowed);
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"a\0c", 3, 2, &d));
    CHECK(d.allowed);
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"a", 1, 2, &d));
    CHECK(d.allowed);
    OK(shmlimit_limit_key_occupancy(per_user, &used, &slots));
    CHECK(used == 5 && slots == 64);
    OK(shmlimit_refund_key(per_user, (const uint8_t *)"alice", 5, &a));
    OK(shmlimit_acquire_key(per_user, (const uint8_t *)"alice", 5, 2, &d));
    CHECK(d.allowed);
    /* Explicit times (the past: never ahead of the clock): 1 per hour, burst 2. */
    OK(shmlimit_acquire_key_at(per_user, (const uint8_t *)"carol", 5, 2, t0, &d));
    CHECK(d.allowed);
    OK(shmlimit_acquire_key_at(per_user, (const uint8_t *)"carol", 5, 1, t0, &d));
    CHECK(!d.allowed && d.retry_after_ns == HOUR);
    /* A date half an hour ahead of the clock is refused, consuming nothing. */
    CHECK(shmlimit_acquire_key_at(per_user, (const uint8_t *)"carol", 5, 1,
                                  monotonic_ns() + HOUR / 2, &d) == SHMLIMIT_CLOCK_OUT_OF_RANGE);
    OK(shmlimit_limit_reclaim_idle_keys(per_user, &reclaimed));
    CHECK(reclaimed == 0); /* every key still holds state */
    OK(shmlimit_limit_key_occupancy(per_user, &used, &slots));
    CHECK(used == 6);

    /* A full table: an error under SHMLIMIT_FULL_ERROR, unlimited under SHMLIMIT_FULL_ALLOW. */
    for (i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "k%d", i);
        OK(shmlimit_acquire_key(strict, (const uint8_t *)key, strlen(key), 1, &d));
        CHECK(d.allowed);
    }
    EXPECT_CODE(SHMLIMIT_TABLE_FULL, "shmlimit_acquire_key",
                shmlimit_acquire_key(strict, (const uint8_t *)"k4", 2, 1, &d));
    OK(shmlimit_acquire_key(strict, (const uint8_t *)"k0", 2, 1, &d));
    CHECK(!d.allowed); /* a known key still decides */
    OK(shmlimit_acquire_key(open_, (const uint8_t *)"x", 1, 1, &d));
    OK(shmlimit_acquire_key(open_, (const uint8_t *)"y", 1, 1, &d));
    for (i = 0; i < 3; i++) {
        OK(shmlimit_acquire_key(open_, (const uint8_t *)"z", 1, 1, &d));
        CHECK(d.allowed); /* fail open */
    }

    /* Errors: bad keys, wrong kinds, NULL pointers; the out-parameter untouched. */
    memset(&untouched, 0x77, sizeof untouched);
    d = untouched;
    memset(big, 'k', sizeof big);
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_acquire_key",
                shmlimit_acquire_key(per_user, NULL, 0, 1, &d));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_acquire_key",
                shmlimit_acquire_key(per_user, (const uint8_t *)big, 0, 1, &d));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_acquire_key",
                shmlimit_acquire_key(per_user, (const uint8_t *)big, sizeof big, 1, &d));
    CHECK(contains(shmlimit_last_error(), "1025"));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_peek_key",
                shmlimit_peek_key(per_user, (const uint8_t *)big, SIZE_MAX, 1, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_key",
                shmlimit_acquire_key(per_user, NULL, 3, 1, &d));
    CHECK(contains(shmlimit_last_error(), "`key`"));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_key",
                shmlimit_acquire_key(NULL, (const uint8_t *)"a", 1, 1, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_key",
                shmlimit_acquire_key(per_user, (const uint8_t *)"a", 1, 1, NULL));
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_acquire_key_at",
                shmlimit_acquire_key_at(per_user, (const uint8_t *)"a", 1, 0, t0, &d));
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_acquire_key",
                shmlimit_acquire_key(per_user, (const uint8_t *)"a", 1, 3, &d));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire", shmlimit_acquire(per_user, 1, &d));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_refund", shmlimit_refund(per_user, &a));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_key",
                shmlimit_acquire_key(plain, (const uint8_t *)"a", 1, 1, &d));
    CHECK(memcmp(&d, &untouched, sizeof d) == 0);
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_refund_key",
                shmlimit_refund_key(plain, (const uint8_t *)"a", 1, &a));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_refund_key",
                shmlimit_refund_key(per_user, NULL, 0, &a));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_refund_key",
                shmlimit_refund_key(per_user, (const uint8_t *)"a", 1, NULL));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_key_occupancy",
                shmlimit_limit_key_occupancy(plain, &used, &slots));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_key_occupancy",
                shmlimit_limit_key_occupancy(per_user, &used, NULL));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_reclaim_idle_keys",
                shmlimit_limit_reclaim_idle_keys(plain, &reclaimed));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_reclaim_idle_keys",
                shmlimit_limit_reclaim_idle_keys(per_user, NULL));

    shmlimit_limit_free(per_user);
    shmlimit_limit_free(strict);
    shmlimit_limit_free(open_);
    shmlimit_limit_free(plain);
}

static void permits(const char *dir) {
    shmlimit_def defs[3];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *pool = NULL, *dry = NULL, *bucket = NULL;
    shmlimit_permit_holder holders[3];
    shmlimit_stats stats;
    uint64_t p1 = 0, p2 = 0, p3 = 77, shadow = 0, kept = 0;
    size_t count = 99, reclaimed = 99;
    bool released = false;
    unsigned char raw[sizeof(shmlimit_permit_holder) * 2];
    char path[4096];

    snprintf(path, sizeof path, "%s/permits.shm", dir);
    zero_def(&defs[0], "pool", SHMLIMIT_CONCURRENCY, 2, 0, 0);
    zero_def(&defs[1], "dry", SHMLIMIT_CONCURRENCY, 1, 0, 0);
    defs[1].flags = SHMLIMIT_DEF_SHADOW;
    zero_def(&defs[2], "bucket", SHMLIMIT_TOKEN_BUCKET, 1, HOUR, 1);
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "pool", &pool));
    OK(shmlimit_limiter_limit(limiter, "dry", &dry));
    OK(shmlimit_limiter_limit(limiter, "bucket", &bucket));
    shmlimit_limiter_free(limiter);

    OK(shmlimit_permit_acquire(pool, &p1));
    OK(shmlimit_permit_acquire(pool, &p2));
    CHECK(p1 != 0 && p2 != 0 && p1 != p2);
    CHECK(p1 != SHMLIMIT_PERMIT_SHADOW && p2 != SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_acquire(pool, &p3));
    CHECK(p3 == 0); /* both held: refused, not an error */
    p3 = 77;
    OK(shmlimit_permit_acquire_timeout(pool, 2000000, &p3));
    CHECK(p3 == 0);

    memset(holders, 0, sizeof holders);
    OK(shmlimit_permit_holders(pool, holders, 3, &count));
    CHECK(count == 2);
    CHECK(holders[0].pid == (uint32_t)getpid() && !holders[0].reclaimable);
    CHECK(holders[0].id == p1 || holders[0].id == p2);
    CHECK(holders[1].id == p1 || holders[1].id == p2);
    CHECK(holders[0].since_ns > 0 && holders[0].lease_expiry_ns == 0);
    /* A short array gets the first holders; the count is all of them. */
    memset(holders, 0, sizeof holders);
    OK(shmlimit_permit_holders(pool, holders, 1, &count));
    CHECK(count == 2 && holders[0].id != 0 && holders[1].id == 0);
    OK(shmlimit_permit_holders(pool, NULL, 0, &count));
    CHECK(count == 2);
    OK(shmlimit_permit_reclaim_dead(pool, &reclaimed));
    CHECK(reclaimed == 0); /* this process is alive */

    OK(shmlimit_permit_release(pool, p1, &released));
    CHECK(released);
    OK(shmlimit_permit_release(pool, p1, &released));
    CHECK(!released); /* only once */
    OK(shmlimit_permit_release(pool, 0, &released));
    CHECK(!released);
    OK(shmlimit_permit_release(pool, SHMLIMIT_PERMIT_SHADOW, &released));
    CHECK(!released);
    OK(shmlimit_permit_release(pool, UINT64_MAX, &released));
    CHECK(!released);
    OK(shmlimit_permit_acquire_timeout(pool, SECOND, &p3));
    CHECK(p3 != 0);
    OK(shmlimit_permit_holders(pool, NULL, 0, &count));
    CHECK(count == 2);

    /* A shadow limit never refuses; the permit it would have refused holds nothing. */
    OK(shmlimit_permit_acquire(dry, &kept));
    CHECK(kept != 0 && kept != SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_acquire(dry, &shadow));
    CHECK(shadow == SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_release(dry, shadow, &released));
    CHECK(!released);
    OK(shmlimit_limit_stats(dry, &stats));
    CHECK(stats.allowed == 2 && stats.shadow_denied == 1 && stats.denied == 0);
    OK(shmlimit_permit_release(dry, kept, &released));
    CHECK(released);

    /* Errors. */
    p1 = 55;
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_acquire", shmlimit_permit_acquire(bucket, &p1));
    CHECK(p1 == 55);
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_acquire_timeout",
                shmlimit_permit_acquire_timeout(bucket, 1, &p1));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_release",
                shmlimit_permit_release(bucket, p2, &released));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_holders",
                shmlimit_permit_holders(bucket, NULL, 0, &count));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_reclaim_dead",
                shmlimit_permit_reclaim_dead(bucket, &reclaimed));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_acquire", shmlimit_permit_acquire(pool, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_acquire", shmlimit_permit_acquire(NULL, &p1));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_acquire_timeout",
                shmlimit_permit_acquire_timeout(pool, 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_release",
                shmlimit_permit_release(pool, p2, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_holders",
                shmlimit_permit_holders(pool, NULL, 1, &count));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_holders",
                shmlimit_permit_holders(pool, holders, 3, NULL));
    memset(raw, 0, sizeof raw);
    EXPECT_CODE(SHMLIMIT_MISALIGNED_POINTER, "shmlimit_permit_holders",
                shmlimit_permit_holders(pool, (shmlimit_permit_holder *)(void *)(raw + 1), 1,
                                        &count));
    EXPECT_CODE(SHMLIMIT_BAD_LENGTH, "shmlimit_permit_holders",
                shmlimit_permit_holders(pool, holders, SIZE_MAX, &count));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_reclaim_dead",
                shmlimit_permit_reclaim_dead(pool, NULL));
    /* A rate decision on a concurrency limit is the wrong kind, and so is a wait on it. */
    {
        shmlimit_decision d;
        EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_timeout",
                    shmlimit_acquire_timeout(pool, 1, 1, &d));
    }
    /* The permits still held are given back. */
    OK(shmlimit_permit_release(pool, p2, &released));
    CHECK(released);
    OK(shmlimit_permit_release(pool, p3, &released));
    CHECK(released);
    OK(shmlimit_permit_holders(pool, NULL, 0, &count));
    CHECK(count == 0);

    shmlimit_limit_free(pool);
    shmlimit_limit_free(dry);
    shmlimit_limit_free(bucket);
}

/* Keyed concurrency: at most `limit` permits per key, each key its own; holders name their
 * key by its tag; a full table follows its policy; the wrong calls are refused. */
static void keyed_permits(const char *dir) {
    shmlimit_def defs[3];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *per_user = NULL, *tiny = NULL, *pool = NULL;
    shmlimit_permit_holder holders[4];
    uint64_t a1 = 0, a2 = 0, a3 = 77, b1 = 0, tag_a = 0, tag_b = 0, t1 = 0, t2 = 0, t3 = 0;
    uint64_t scratch = 55;
    uint32_t held = 99;
    size_t count = 0;
    bool released = false;
    char path[4096];

    snprintf(path, sizeof path, "%s/keyed_permits.shm", dir);
    zero_def(&defs[0], "per_user", SHMLIMIT_CONCURRENCY, 2, 0, 0);
    defs[0].key_capacity = 64;
    zero_def(&defs[1], "tiny", SHMLIMIT_CONCURRENCY, 1, 0, 0);
    defs[1].key_capacity = 1;
    defs[1].on_full = SHMLIMIT_FULL_ALLOW;
    zero_def(&defs[2], "pool", SHMLIMIT_CONCURRENCY, 1, 0, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "per_user", &per_user));
    OK(shmlimit_limiter_limit(limiter, "tiny", &tiny));
    OK(shmlimit_limiter_limit(limiter, "pool", &pool));
    shmlimit_limiter_free(limiter);

    OK(shmlimit_permit_acquire_key(per_user, (const uint8_t *)"alice", 5, &a1));
    OK(shmlimit_permit_acquire_key(per_user, (const uint8_t *)"alice", 5, &a2));
    CHECK(a1 != 0 && a2 != 0 && a1 != a2 && a1 != SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_acquire_key(per_user, (const uint8_t *)"alice", 5, &a3));
    CHECK(a3 == 0); /* alice's two are held */
    a3 = 77;
    OK(shmlimit_permit_acquire_key_timeout(per_user, (const uint8_t *)"alice", 5, 2000000, &a3));
    CHECK(a3 == 0);
    OK(shmlimit_permit_acquire_key(per_user, (const uint8_t *)"bob", 3, &b1));
    CHECK(b1 != 0); /* bob has his own */
    OK(shmlimit_permit_key_held(per_user, (const uint8_t *)"alice", 5, &held));
    CHECK(held == 2);
    OK(shmlimit_permit_key_held(per_user, (const uint8_t *)"carol", 5, &held));
    CHECK(held == 0);

    OK(shmlimit_key_tag(per_user, (const uint8_t *)"alice", 5, &tag_a));
    OK(shmlimit_key_tag(per_user, (const uint8_t *)"bob", 3, &tag_b));
    CHECK(tag_a != 0 && tag_b != 0 && tag_a != tag_b && (tag_a >> 63) == 0);
    memset(holders, 0, sizeof holders);
    OK(shmlimit_permit_holders(per_user, holders, 4, &count));
    CHECK(count == 3);
    {
        size_t i, of_a = 0, of_b = 0;
        for (i = 0; i < count; i++) {
            of_a += holders[i].key_tag == tag_a;
            of_b += holders[i].key_tag == tag_b && holders[i].id == b1;
            CHECK(holders[i].pid == (uint32_t)getpid() && !holders[i].reclaimable);
        }
        CHECK(of_a == 2 && of_b == 1);
    }

    OK(shmlimit_permit_release(per_user, a1, &released));
    CHECK(released);
    OK(shmlimit_permit_release(per_user, a1, &released));
    CHECK(!released);
    OK(shmlimit_permit_acquire_key_timeout(per_user, (const uint8_t *)"alice", 5, SECOND, &a3));
    CHECK(a3 != 0);
    OK(shmlimit_permit_key_held(per_user, (const uint8_t *)"alice", 5, &held));
    CHECK(held == 2);

    /* A one-slot table: a second key while the first holds a permit gets the ALLOW policy's
     * permit that holds nothing; once the first is idle, the second takes its slot. */
    OK(shmlimit_permit_acquire_key(tiny, (const uint8_t *)"k1", 2, &t1));
    CHECK(t1 != 0 && t1 != SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_acquire_key(tiny, (const uint8_t *)"k2", 2, &t2));
    CHECK(t2 == SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_release(tiny, t1, &released));
    CHECK(released);
    OK(shmlimit_permit_acquire_key(tiny, (const uint8_t *)"k2", 2, &t3));
    CHECK(t3 != 0 && t3 != SHMLIMIT_PERMIT_SHADOW);
    OK(shmlimit_permit_release(tiny, t3, &released));
    CHECK(released);

    /* Errors: keys checked, and keyed and unkeyed calls do not mix. */
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_permit_acquire_key",
                shmlimit_permit_acquire_key(per_user, (const uint8_t *)"x", 0, &scratch));
    CHECK(scratch == 55);
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_permit_acquire_key_timeout",
                shmlimit_permit_acquire_key_timeout(per_user, (const uint8_t *)"x",
                                                    SHMLIMIT_MAX_KEY_LEN + 1, 1, &scratch));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_acquire_key",
                shmlimit_permit_acquire_key(per_user, NULL, 3, &scratch));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_acquire_key",
                shmlimit_permit_acquire_key(per_user, (const uint8_t *)"x", 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_permit_key_held",
                shmlimit_permit_key_held(per_user, (const uint8_t *)"x", 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_key_tag",
                shmlimit_key_tag(per_user, (const uint8_t *)"x", 1, NULL));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_acquire", shmlimit_permit_acquire(per_user, &scratch));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_permit_acquire_key",
                shmlimit_permit_acquire_key(pool, (const uint8_t *)"x", 1, &scratch));
    CHECK(scratch == 55);
    {
        shmlimit_decision d;
        EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_key",
                    shmlimit_acquire_key(per_user, (const uint8_t *)"x", 1, 1, &d));
    }

    OK(shmlimit_permit_release(per_user, a2, &released));
    CHECK(released);
    OK(shmlimit_permit_release(per_user, a3, &released));
    CHECK(released);
    OK(shmlimit_permit_release(per_user, b1, &released));
    CHECK(released);
    OK(shmlimit_permit_holders(per_user, NULL, 0, &count));
    CHECK(count == 0);
    shmlimit_limit_free(per_user);
    shmlimit_limit_free(tiny);
    shmlimit_limit_free(pool);
}

static void waiting(const char *dir) {
    shmlimit_def defs[2];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *paced = NULL, *window = NULL;
    shmlimit_decision d, untouched;
    shmlimit_stats before, after;
    char path[4096];

    snprintf(path, sizeof path, "%s/wait.shm", dir);
    /* One token every 10 ms; a window that never ends during the test. */
    zero_def(&defs[0], "paced", SHMLIMIT_TOKEN_BUCKET, 1, SECOND / 100, 1);
    zero_def(&defs[1], "window", SHMLIMIT_FIXED_WINDOW, 1, DECADE, 0);
    defs[1].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    OK(shmlimit_limiter_create_or_open(path, defs, 2, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "paced", &paced));
    OK(shmlimit_limiter_limit(limiter, "window", &window));
    shmlimit_limiter_free(limiter);

    OK(shmlimit_acquire_timeout(paced, 1, 0, &d));
    CHECK(d.allowed);
    /* The next token is at most 10 ms away: booked and waited for within 10 s. */
    OK(shmlimit_acquire_timeout(paced, 1, 10 * SECOND, &d));
    CHECK(d.allowed && d.grant[0] == 1);
    /* The window's next grant is a decade away: refused at once, consuming nothing. */
    OK(shmlimit_acquire(window, 1, &d));
    CHECK(d.allowed);
    OK(shmlimit_limit_stats(window, &before));
    OK(shmlimit_acquire_timeout(window, 1, SECOND / 100, &d));
    CHECK(!d.allowed && d.retry_after_ns > SECOND);
    OK(shmlimit_limit_stats(window, &after));
    CHECK(after.allowed == before.allowed && after.denied == before.denied + 1);

    memset(&untouched, 0x77, sizeof untouched);
    d = untouched;
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_acquire_timeout",
                shmlimit_acquire_timeout(paced, 0, SECOND, &d));
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_acquire_timeout",
                shmlimit_acquire_timeout(paced, 2, SECOND, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_timeout",
                shmlimit_acquire_timeout(NULL, 1, SECOND, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_timeout",
                shmlimit_acquire_timeout(paced, 1, SECOND, NULL));
    CHECK(memcmp(&d, &untouched, sizeof d) == 0);

    shmlimit_limit_free(paced);
    shmlimit_limit_free(window);
}

static void reservations(const char *dir) {
    shmlimit_def defs[3];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *slow = NULL, *paced = NULL, *window = NULL;
    shmlimit_reservation *sentinel = (shmlimit_reservation *)(uintptr_t)0x5a5a5a50;
    shmlimit_reservation *r1 = NULL, *r2 = NULL, *r3 = NULL, *none = sentinel;
    shmlimit_booking b, untouched;
    shmlimit_decision d, again;
    bool cancelled = true;
    char path[4096];

    CHECK(sizeof(shmlimit_booking) == 48 && offsetof(shmlimit_booking, cost) == 8);
    snprintf(path, sizeof path, "%s/reserve.shm", dir);
    zero_def(&defs[0], "slow", SHMLIMIT_TOKEN_BUCKET, 2, HOUR, 1);
    zero_def(&defs[1], "paced", SHMLIMIT_TOKEN_BUCKET, 1, SECOND / 100, 1);
    zero_def(&defs[2], "window", SHMLIMIT_FIXED_WINDOW, 1, DECADE, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "slow", &slow));
    OK(shmlimit_limiter_limit(limiter, "paced", &paced));
    OK(shmlimit_limiter_limit(limiter, "window", &window));
    shmlimit_limiter_free(limiter);

    /* The burst is booked at once; the next token is up to an hour away. */
    OK(shmlimit_reserve(slow, 2, 0, &b, &r1));
    CHECK(b.granted && b.cost == 2 && b.delay_ns == 0 && r1 != NULL);
    OK(shmlimit_reserve(slow, 1, 0, &b, &none));
    CHECK(!b.granted && b.delay_ns > 0 && b.delay_ns <= HOUR && none == NULL);
    OK(shmlimit_reserve(slow, 1, 2 * HOUR, &b, &r2));
    CHECK(b.granted && b.delay_ns > 0 && b.delay_ns <= HOUR && r2 != NULL);
    OK(shmlimit_reserve(slow, 1, 3 * HOUR, &b, &r3));
    CHECK(b.granted && b.delay_ns > HOUR && b.delay_ns <= 2 * HOUR && r3 != NULL);
    /* r2 cannot be given back (r3 was booked after it); r3 can, once. */
    OK(shmlimit_reservation_cancel(r2, &cancelled));
    CHECK(!cancelled);
    OK(shmlimit_reservation_cancel(r3, &cancelled));
    CHECK(cancelled);
    OK(shmlimit_reservation_cancel(r3, &cancelled));
    CHECK(!cancelled);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_reservation_wait",
                shmlimit_reservation_wait(r3, &d));
    /* After the cancel, the next booking waits as long as r3 did, not longer. */
    OK(shmlimit_reserve(slow, 1, 3 * HOUR, &b, &none));
    CHECK(b.granted && b.delay_ns > HOUR && b.delay_ns <= 2 * HOUR);
    shmlimit_reservation_free(none);
    none = NULL;

    /* A booking with no delay is waited for at once, and its grant is kept. */
    OK(shmlimit_reservation_wait(r1, &d));
    CHECK(d.allowed && d.grant[0] == 2);
    OK(shmlimit_reservation_wait(r1, &again));
    CHECK(memcmp(&d, &again, sizeof d) == 0);
    OK(shmlimit_reservation_cancel(r1, &cancelled));
    CHECK(!cancelled); /* used */
    /* One token every 10 ms: the second booking sleeps at most that. */
    OK(shmlimit_acquire(paced, 1, &d));
    OK(shmlimit_reserve(paced, 1, SECOND, &b, &none));
    CHECK(b.granted && b.delay_ns <= SECOND / 100);
    OK(shmlimit_reservation_wait(none, &d));
    CHECK(d.allowed);
    shmlimit_reservation_free(none);
    none = sentinel;

    /* Errors. */
    memset(&untouched, 0x77, sizeof untouched);
    b = untouched;
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_reserve", shmlimit_reserve(window, 1, 0, &b, &none));
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_reserve", shmlimit_reserve(slow, 0, 0, &b, &none));
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_reserve",
                shmlimit_reserve(slow, 3, HOUR, &b, &none));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reserve", shmlimit_reserve(NULL, 1, 0, &b, &none));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reserve", shmlimit_reserve(slow, 1, 0, NULL, &none));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reserve", shmlimit_reserve(slow, 1, 0, &b, NULL));
    CHECK(memcmp(&b, &untouched, sizeof b) == 0 && none == sentinel);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reservation_wait",
                shmlimit_reservation_wait(NULL, &d));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reservation_wait",
                shmlimit_reservation_wait(r2, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reservation_cancel",
                shmlimit_reservation_cancel(NULL, &cancelled));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_reservation_cancel",
                shmlimit_reservation_cancel(r2, NULL));

    shmlimit_reservation_free(r1);
    shmlimit_reservation_free(r2); /* its token stays booked */
    shmlimit_reservation_free(r3);
    shmlimit_reservation_free(NULL);
    shmlimit_limit_free(slow);
    shmlimit_limit_free(paced);
    shmlimit_limit_free(window);
}

/* A deploy that changes a limit: refused by default, naming the fields; adopted live with
 * SHMLIMIT_ON_CONFLICT_ADOPT (same file, usage kept); a new limit replaces the file, and a
 * handle of the old file moves to the new one within about a second. */
static void deploys(const char *dir) {
    char path[4096];
    shmlimit_def defs[2], def;
    shmlimit_limiter *old = NULL, *limiter = NULL;
    shmlimit_limit *api = NULL, *fresh = NULL;
    shmlimit_options options;
    shmlimit_decision d;
    struct timespec pause = {1, 100000000};

    snprintf(path, sizeof path, "%s/deploy.shm", dir);
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 20, SECOND, 2);
    OK(shmlimit_limiter_create_or_open(path, defs, 1, NULL, &old));
    OK(shmlimit_limiter_limit(old, "api", &api));
    OK(shmlimit_acquire(api, 15, &d));
    CHECK(d.allowed);
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 20, SECOND, 3);
    EXPECT_CODE(SHMLIMIT_DEFINITION_CONFLICT, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(),
                   "`api`: rate 2/s in the file, 3/s requested; burst 20 in both"));
    memset(&options, 0, sizeof options);
    options.on_conflict = 7;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, &options, &limiter));
    options.on_conflict = SHMLIMIT_ON_CONFLICT_ADOPT;
    OK(shmlimit_limiter_create_or_open(path, defs, 1, &options, &limiter));
    shmlimit_limiter_free(limiter);
    limiter = NULL;
    OK(shmlimit_limit_live_definition(api, &def));
    CHECK(def.limit == 20 && def.period_ns == (SECOND + 2) / 3); /* 3/s */
    OK(shmlimit_acquire(api, 10, &d));
    CHECK(!d.allowed); /* 15 of 20 still used: 10 more need 5 tokens, 1.7 s of refill at 3/s */
    /* The retuned file now matches 3/s under the default policy. */
    OK(shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    shmlimit_limiter_free(limiter);
    limiter = NULL;
    /* A new limit: a new file replaces the old one. */
    zero_def(&defs[1], "log", SHMLIMIT_SLIDING_LOG, 3, HOUR, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 2, &options, &limiter));
    OK(shmlimit_limiter_limit(limiter, "api", &fresh));
    nanosleep(&pause, NULL);
    OK(shmlimit_peek(api, 1, &d)); /* runs the check, on the old file; the next decision moves */
    OK(shmlimit_acquire(api, 20, &d)); /* the old handle, on the new file's full bucket */
    CHECK(d.allowed);
    OK(shmlimit_peek(fresh, 1, &d));
    CHECK(!d.allowed || d.remaining < 20);
    shmlimit_limit_free(fresh);
    shmlimit_limit_free(api);
    shmlimit_limiter_free(limiter);
    shmlimit_limiter_free(old);
}

/* The reboot choice: stored at creation, and an opener asking for the other one is refused. */
static void reboot_choice(const char *dir) {
    char path[4096];
    shmlimit_def def;
    shmlimit_options options;
    shmlimit_limiter *limiter = NULL;

    snprintf(path, sizeof path, "%s/reboot.shm", dir);
    zero_def(&def, "daily", SHMLIMIT_FIXED_WINDOW, 10, 86400 * SECOND, 0);
    memset(&options, 0, sizeof options);
    options.on_reboot = SHMLIMIT_ON_REBOOT_RESET;
    OK(shmlimit_limiter_create_or_open(path, &def, 1, &options, &limiter));
    shmlimit_limiter_free(limiter);
    limiter = NULL;
    options.on_reboot = SHMLIMIT_ON_REBOOT_TRANSLATE;
    EXPECT_CODE(SHMLIMIT_DEFINITION_CONFLICT, "shmlimit_limiter_open",
                shmlimit_limiter_open(path, &options, &limiter));
    options.on_reboot = SHMLIMIT_ON_REBOOT_DEFAULT;
    OK(shmlimit_limiter_open(path, &options, &limiter));
    shmlimit_limiter_free(limiter);
    limiter = NULL;
    options.on_reboot = SHMLIMIT_ON_REBOOT_RESET;
    OK(shmlimit_limiter_open(path, &options, &limiter));
    shmlimit_limiter_free(limiter);
    limiter = NULL;

    /* A calendar day in UTC-05:00: the offset travels in the rate field, both ways. */
    snprintf(path, sizeof path, "%s/calendar.shm", dir);
    zero_def(&def, "day", SHMLIMIT_FIXED_WINDOW, 10, 86400 * SECOND, 0);
    def.alignment = SHMLIMIT_ALIGN_CALENDAR;
    def.rate = (uint64_t)(int64_t)(-5 * 3600);
    OK(shmlimit_limiter_create_or_open(path, &def, 1, NULL, &limiter));
    {
        shmlimit_def stored;
        OK(shmlimit_limiter_definition(limiter, 0, &stored));
        CHECK(stored.alignment == SHMLIMIT_ALIGN_CALENDAR);
        CHECK((int64_t)stored.rate == -5 * 3600);
    }
    shmlimit_limiter_free(limiter);
    limiter = NULL;
    /* A calendar month in UTC: full, it waits for the 1st of the next month (at most 31 days). */
    snprintf(path, sizeof path, "%s/monthly.shm", dir);
    zero_def(&def, "month", SHMLIMIT_FIXED_WINDOW, 3, SHMLIMIT_MONTH_NS, 0);
    def.alignment = SHMLIMIT_ALIGN_CALENDAR;
    OK(shmlimit_limiter_create_or_open(path, &def, 1, NULL, &limiter));
    {
        shmlimit_limit *month = NULL;
        shmlimit_decision d;
        OK(shmlimit_limiter_limit(limiter, "month", &month));
        OK(shmlimit_acquire(month, 3, &d));
        CHECK(d.allowed);
        OK(shmlimit_acquire(month, 1, &d));
        CHECK(!d.allowed && d.retry_after_ns > 0 && d.retry_after_ns <= 31 * 86400 * SECOND);
        shmlimit_limit_free(month);
    }
    shmlimit_limiter_free(limiter);
    limiter = NULL;
    def.rate = (uint64_t)(int64_t)(19 * 3600);
    zero_def(&def, "day", SHMLIMIT_FIXED_WINDOW, 10, 86400 * SECOND, 0);
    def.alignment = SHMLIMIT_ALIGN_CALENDAR;
    def.rate = (uint64_t)(int64_t)(19 * 3600);
    snprintf(path, sizeof path, "%s/calendar-bad.shm", dir);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, &def, 1, NULL, &limiter));
}

/* What an HTTP client is told: the reset of each decision, each limit's policy, and the header
 * values rendered by the core. */
static void client_headers(const char *dir) {
    shmlimit_def defs[3];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *api = NULL, *log = NULL, *slots = NULL;
    const shmlimit_limit *both[2];
    shmlimit_decision d[2], held;
    shmlimit_policy policy;
    shmlimit_headers headers;
    char path[4096];

    snprintf(path, sizeof path, "%s/headers.shm", dir);
    /* 10 per hour with a burst of 2: 6 minutes per token. */
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 2, HOUR, 10);
    zero_def(&defs[1], "log", SHMLIMIT_SLIDING_LOG, 3, 90 * SECOND, 0);
    zero_def(&defs[2], "slots", SHMLIMIT_CONCURRENCY, 1, 0, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 3, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "api", &api));
    OK(shmlimit_limiter_limit(limiter, "log", &log));
    OK(shmlimit_limiter_limit(limiter, "slots", &slots));

    OK(shmlimit_limit_policy(api, &policy));
    CHECK(policy.quota == 2 && policy.window_secs == 720);
    OK(shmlimit_limit_policy(log, &policy));
    CHECK(policy.quota == 3 && policy.window_secs == 90);
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_limit_policy", shmlimit_limit_policy(slots, &policy));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_policy", shmlimit_limit_policy(api, NULL));

    OK(shmlimit_acquire(api, 1, &d[0]));
    CHECK(d[0].allowed && d[0].reset_after_ns > 0 && d[0].reset_after_ns <= 360 * SECOND);
    OK(shmlimit_acquire(log, 3, &d[1]));
    CHECK(d[1].allowed && d[1].reset_after_ns > 89 * SECOND &&
          d[1].reset_after_ns <= 90 * SECOND);
    both[0] = api;
    both[1] = log;
    OK(shmlimit_ratelimit_headers(both, d, 2, &headers));
    CHECK(strcmp(headers.rate_limit_policy, "\"api\";q=2;w=720, \"log\";q=3;w=90") == 0);
    CHECK(strcmp(headers.rate_limit, "\"api\";r=1;t=360, \"log\";r=0;t=90") == 0);
    CHECK(headers.retry_after[0] == '\0');

    OK(shmlimit_acquire(log, 1, &d[1]));
    CHECK(!d[1].allowed);
    OK(shmlimit_ratelimit_headers(both, d, 2, &headers));
    CHECK(strcmp(headers.retry_after, "90") == 0);

    /* A concurrency limit adds no policy item, but its denial (told by the caller, as a
     * permit call returns no decision) sets Retry-After. */
    memset(&held, 0, sizeof held);
    held.retry_after_ns = SECOND / 10;
    both[1] = slots;
    d[1] = held;
    OK(shmlimit_ratelimit_headers(both, d, 2, &headers));
    CHECK(strcmp(headers.rate_limit_policy, "\"api\";q=2;w=720") == 0);
    CHECK(strcmp(headers.rate_limit, "\"api\";r=1;t=360") == 0);
    CHECK(strcmp(headers.retry_after, "1") == 0);

    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_ratelimit_headers",
                shmlimit_ratelimit_headers(both, d, 0, &headers));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_ratelimit_headers",
                shmlimit_ratelimit_headers(NULL, d, 2, &headers));
    shmlimit_limit_free(api);
    shmlimit_limit_free(log);
    shmlimit_limit_free(slots);
    shmlimit_limiter_free(limiter);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    definition_options(argv[1]);
    refunds(argv[1]);
    retuning(argv[1]);
    composed(argv[1]);
    keyed(argv[1]);
    permits(argv[1]);
    keyed_permits(argv[1]);
    waiting(argv[1]);
    reservations(argv[1]);
    deploys(argv[1]);
    reboot_choice(argv[1]);
    client_headers(argv[1]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
