/*
 * The C ABI's later calls on rate limits, success and error paths, from C (and compiled as C++
 * too: this file keeps to the common subset of C99 and C++11): definition options (keys,
 * shadow mode, near-limit, split, fleet share), refunds, live retuning and reset, composed
 * checks, keyed decisions. concurrency.c and lifecycle.c hold the others.
 *
 * Usage: features DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include "feature_helpers.h"

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
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
