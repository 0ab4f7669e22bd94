/*
 * The C ABI's concurrency calls, success and error paths, from C (and compiled as C++ too):
 * permits, keyed permits, timed waits.
 *
 * Usage: concurrency DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include "feature_helpers.h"

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

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    permits(argv[1]);
    keyed_permits(argv[1]);
    waiting(argv[1]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
