/*
 * The C ABI's error paths and its basic use, from C (and compiled as C++ too: this file keeps
 * to the common subset of C99 and C++11 to prove the header works from both).
 *
 * Usage: errors DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static void zero_def(shmlimit_def *def, const char *name, uint32_t kind, uint64_t limit,
                     uint64_t period_ns, uint64_t rate) {
    memset(def, 0, sizeof *def);
    def->name = name;
    def->kind = kind;
    def->limit = limit;
    def->period_ns = period_ns;
    def->rate = rate;
}

static const uint64_t SECOND = 1000000000u;

static void status_codes(void) {
    static const int32_t codes[] = {
        SHMLIMIT_OK, SHMLIMIT_NULL_POINTER, SHMLIMIT_BAD_UTF8, SHMLIMIT_INTERNAL,
        SHMLIMIT_BAD_LENGTH, SHMLIMIT_MISALIGNED_POINTER, SHMLIMIT_OUT_OF_RANGE, SHMLIMIT_IO,
        SHMLIMIT_SYMLINK, SHMLIMIT_NOT_REGULAR_FILE, SHMLIMIT_PERMISSION, SHMLIMIT_FOREIGN,
        SHMLIMIT_VERSION, SHMLIMIT_SIZE, SHMLIMIT_CORRUPT, SHMLIMIT_NOT_INITIALIZED,
        SHMLIMIT_CLOCK_MISMATCH, SHMLIMIT_DEFINITION_CONFLICT, SHMLIMIT_INVALID_PARAMETER,
        SHMLIMIT_UNKNOWN_LIMIT, SHMLIMIT_ZERO_COST, SHMLIMIT_COST_EXCEEDS_CAPACITY,
        SHMLIMIT_CORRUPT_STATE, SHMLIMIT_CLOCK_OUT_OF_RANGE, SHMLIMIT_TABLE_FULL,
        SHMLIMIT_INVALID_KEY, SHMLIMIT_WRONG_KIND};
    size_t i, j;
    CHECK(SHMLIMIT_OK == 0);
    /* The struct layouts the library was built with. */
    CHECK(sizeof(shmlimit_def) == 72 && offsetof(shmlimit_def, limit) == 16);
    CHECK(offsetof(shmlimit_def, key_capacity) == 40 && offsetof(shmlimit_def, flags) == 52);
    CHECK(offsetof(shmlimit_def, near_limit) == 56 && offsetof(shmlimit_def, split) == 58);
    CHECK(offsetof(shmlimit_def, fleet_emission_ns) == 64);
    CHECK(offsetof(shmlimit_decision, grant) == 24);
    CHECK(sizeof(shmlimit_check) == 32 && offsetof(shmlimit_check, cost) == 8);
    CHECK(sizeof(shmlimit_composed) == 24 + 64 * SHMLIMIT_MAX_CHECKS + 16);
    CHECK(offsetof(shmlimit_composed, count) == 8 && offsetof(shmlimit_composed, decisions) == 24);
    CHECK(sizeof(shmlimit_permit_holder) == 48 && offsetof(shmlimit_permit_holder, since_ns) == 16);
    CHECK(sizeof(shmlimit_options) == 40);
    CHECK(sizeof(shmlimit_decision) == 64 && offsetof(shmlimit_decision, remaining) == 8 && offsetof(shmlimit_decision, reset_after_ns) == 56);
    CHECK(sizeof(shmlimit_stats) == 64);
    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *text = shmlimit_strerror(codes[i]);
        CHECK(text != NULL && text[0] != '\0');
        CHECK(strcmp(text, "unknown status code") != 0);
        for (j = 0; j < i; j++) {
            CHECK(codes[i] != codes[j]);
        }
    }
    CHECK(strcmp(shmlimit_strerror(-1), "unknown status code") == 0);
    CHECK(strcmp(shmlimit_strerror(99), "unknown status code") == 0);
    CHECK(strlen(shmlimit_version()) > 0);
    /* No failure yet on this thread. */
    CHECK(strcmp(shmlimit_last_error(), "") == 0);
    CHECK(shmlimit_last_os_error() == 0);
}

static void create_errors(const char *dir) {
    char path[4096];
    shmlimit_def defs[3];
    shmlimit_options options;
    shmlimit_limiter *sentinel = (shmlimit_limiter *)(uintptr_t)0x5a5a5a50;
    shmlimit_limiter *limiter = sentinel;
    char long_name[SHMLIMIT_MAX_NAME_LEN + 2];
    unsigned char raw[sizeof(shmlimit_def) * 2];

    snprintf(path, sizeof path, "%s/errors.shm", dir);
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 10);

    /* NULL pointers: each named in the message, the out-parameter untouched. */
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(NULL, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "`path`"));
    CHECK(limiter == sentinel);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, NULL));
    CHECK(contains(shmlimit_last_error(), "`limiter_out`"));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, NULL, 2, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "`defs`"));
    CHECK(limiter == sentinel);

    /* Wrong lengths and misaligned arrays. */
    EXPECT_CODE(SHMLIMIT_BAD_LENGTH, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, SIZE_MAX, NULL, &limiter));
    EXPECT_CODE(SHMLIMIT_BAD_LENGTH, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, SIZE_MAX / sizeof(shmlimit_def) + 1,
                                                NULL, &limiter));
    memset(raw, 0, sizeof raw);
    EXPECT_CODE(SHMLIMIT_MISALIGNED_POINTER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, (const shmlimit_def *)(void *)(raw + 1), 1,
                                                NULL, &limiter));
    CHECK(limiter == sentinel);

    /* Bad definitions. */
    zero_def(&defs[0], NULL, SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 10);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "defs[0].name"));
    zero_def(&defs[0], "bad\xff", SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 10);
    EXPECT_CODE(SHMLIMIT_BAD_UTF8, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "has space", SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 10);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    zero_def(&defs[0], long_name, SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 10);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "api", 99, 10, SECOND, 10);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "kind 99"));
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 0, SECOND, 10);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "limit `api`"));
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 10, SECOND, 0);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "api", SHMLIMIT_FIXED_WINDOW, 10, 1000, 0); /* window below 1 ms */
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "api", SHMLIMIT_FIXED_WINDOW, 10, SECOND, 5); /* rate on a window */
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "api", SHMLIMIT_FIXED_WINDOW, 10, SECOND, 0);
    defs[0].alignment = 7;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "api", SHMLIMIT_SLIDING_LOG, 10, SECOND, 0);
    defs[0].flags = 1u << 7;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "flags"));
    zero_def(&defs[0], "pool", SHMLIMIT_CONCURRENCY, 0, 0, 0);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    zero_def(&defs[0], "api", SHMLIMIT_SLIDING_LOG, 10, SECOND, 0);
    zero_def(&defs[1], "api", SHMLIMIT_SLIDING_LOG, 10, SECOND, 0);
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 2, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "twice"));

    /* Bad options. */
    zero_def(&defs[0], "api", SHMLIMIT_SLIDING_LOG, 10, SECOND, 0);
    memset(&options, 0, sizeof options);
    options.mode = 01777;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, &options, &limiter));
    memset(&options, 0, sizeof options);
    options.allow_other_owner = 2;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, &options, &limiter));
    memset(&options, 0, sizeof options);
    options.on_reboot = 3;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, &options, &limiter));
    memset(&options, 0, sizeof options);
    options.reserved[0] = 1;
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, &options, &limiter));
    CHECK(limiter == sentinel);
    /* None of the failures above created the file. */
    CHECK(access(path, F_OK) != 0);
}

static void open_errors(const char *dir) {
    char path[4096], link_path[4096];
    shmlimit_limiter *sentinel = (shmlimit_limiter *)(uintptr_t)0x5a5a5a50;
    shmlimit_limiter *limiter = sentinel;
    shmlimit_def defs[2];
    FILE *f;
    int i;

    snprintf(path, sizeof path, "%s/missing.shm", dir);
    EXPECT_CODE(SHMLIMIT_IO, "shmlimit_limiter_open", shmlimit_limiter_open(path, NULL, &limiter));
    CHECK(shmlimit_last_os_error() == ENOENT);
    CHECK(contains(shmlimit_last_error(), "missing.shm"));
    CHECK(limiter == sentinel);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_open",
                shmlimit_limiter_open(NULL, NULL, &limiter));
    CHECK(shmlimit_last_os_error() == 0);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_open",
                shmlimit_limiter_open(path, NULL, NULL));

    /* A file that is not a limiter file. */
    snprintf(path, sizeof path, "%s/foreign.shm", dir);
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f != NULL) {
        for (i = 0; i < 8192; i++) {
            fputc('x', f);
        }
        fclose(f);
    }
    EXPECT_CODE(SHMLIMIT_FOREIGN, "shmlimit_limiter_open", shmlimit_limiter_open(path, NULL, &limiter));

    /* A symbolic link to a real limiter file is refused. */
    snprintf(path, sizeof path, "%s/real.shm", dir);
    zero_def(&defs[0], "api", SHMLIMIT_SLIDING_LOG, 10, SECOND, 0);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    shmlimit_limiter_free(limiter);
    limiter = sentinel;
    snprintf(link_path, sizeof link_path, "%s/link.shm", dir);
    CHECK(symlink(path, link_path) == 0);
    EXPECT_CODE(SHMLIMIT_SYMLINK, "shmlimit_limiter_open",
                shmlimit_limiter_open(link_path, NULL, &limiter));
    CHECK(limiter == sentinel);

    /* The same path with other definitions. */
    zero_def(&defs[0], "api", SHMLIMIT_SLIDING_LOG, 11, SECOND, 0);
    EXPECT_CODE(SHMLIMIT_DEFINITION_CONFLICT, "shmlimit_limiter_create_or_open",
                shmlimit_limiter_create_or_open(path, defs, 1, NULL, &limiter));
    CHECK(contains(shmlimit_last_error(), "api"));
    CHECK(limiter == sentinel);
}

static void use_and_errors(const char *dir) {
    char path[4096];
    shmlimit_def defs[5], def;
    shmlimit_limiter *limiter = NULL, *again = NULL;
    shmlimit_limit *sentinel = (shmlimit_limit *)(uintptr_t)0x5a5a5a50;
    shmlimit_limit *limit = sentinel, *log = NULL;
    shmlimit_decision decision, untouched;
    shmlimit_stats stats;
    size_t count = 12345;
    uint64_t t0;
    unsigned char raw[sizeof(shmlimit_decision) * 2];

    snprintf(path, sizeof path, "%s/use.shm", dir);
    zero_def(&defs[0], "api", SHMLIMIT_TOKEN_BUCKET, 2, SECOND, 1);
    zero_def(&defs[1], "per-minute", SHMLIMIT_FIXED_WINDOW, 5, 60 * SECOND, 0);
    defs[1].alignment = SHMLIMIT_ALIGN_MONOTONIC;
    zero_def(&defs[2], "smooth", SHMLIMIT_SLIDING_WINDOW, 7, 10 * SECOND, 0);
    zero_def(&defs[3], "exact", SHMLIMIT_SLIDING_LOG, 3, 10 * SECOND, 0);
    zero_def(&defs[4], "pool", SHMLIMIT_CONCURRENCY, 4, 30 * SECOND, 0);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_create_or_open(path, defs, 5, NULL, &limiter));
    /* Attaching again with the same definitions, and by path alone, both work. */
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_create_or_open(path, defs, 5, NULL, &again));
    shmlimit_limiter_free(again);
    again = NULL;
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_open(path, NULL, &again));

    /* Listing the definitions, as stored. */
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_limit_count(again, &count));
    CHECK(count == 5);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_definition(again, 0, &def));
    CHECK(strcmp(def.name, "api") == 0 && def.kind == SHMLIMIT_TOKEN_BUCKET && def.limit == 2);
    CHECK(def.rate == 1 && def.period_ns == SECOND && def.alignment == 0);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_definition(again, 1, &def));
    CHECK(strcmp(def.name, "per-minute") == 0 && def.kind == SHMLIMIT_FIXED_WINDOW);
    CHECK(def.limit == 5 && def.period_ns == 60 * SECOND && def.rate == 0);
    CHECK(def.alignment == SHMLIMIT_ALIGN_MONOTONIC);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_definition(again, 2, &def));
    CHECK(strcmp(def.name, "smooth") == 0 && def.kind == SHMLIMIT_SLIDING_WINDOW);
    CHECK(def.limit == 7 && def.period_ns == 10 * SECOND);
    CHECK(def.alignment == SHMLIMIT_ALIGN_WALL_CLOCK);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_definition(again, 3, &def));
    CHECK(strcmp(def.name, "exact") == 0 && def.kind == SHMLIMIT_SLIDING_LOG && def.limit == 3);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_definition(again, 4, &def));
    CHECK(strcmp(def.name, "pool") == 0 && def.kind == SHMLIMIT_CONCURRENCY && def.limit == 4);
    CHECK(def.period_ns == 30 * SECOND && def.rate == 0);
    def.limit = 999;
    EXPECT_CODE(SHMLIMIT_OUT_OF_RANGE, "shmlimit_limiter_definition",
                shmlimit_limiter_definition(again, 5, &def));
    CHECK(def.limit == 999);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_definition",
                shmlimit_limiter_definition(again, 0, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_limit_count",
                shmlimit_limiter_limit_count(NULL, &count));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_limit_count",
                shmlimit_limiter_limit_count(again, NULL));

    /* Resolving by name. */
    EXPECT_CODE(SHMLIMIT_UNKNOWN_LIMIT, "shmlimit_limiter_limit",
                shmlimit_limiter_limit(again, "nope", &limit));
    CHECK(contains(shmlimit_last_error(), "`nope`"));
    CHECK(limit == sentinel);
    EXPECT_CODE(SHMLIMIT_BAD_UTF8, "shmlimit_limiter_limit",
                shmlimit_limiter_limit(again, "\xc3\x28", &limit));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_limit",
                shmlimit_limiter_limit(again, NULL, &limit));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_limit",
                shmlimit_limiter_limit(NULL, "api", &limit));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limiter_limit",
                shmlimit_limiter_limit(again, "api", NULL));
    CHECK(limit == sentinel);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_limit(again, "api", &limit));
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_limit(limiter, "exact", &log));
    {
        /* A concurrency limit takes permits, not rate decisions. */
        shmlimit_limit *pool = NULL;
        EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limiter_limit(limiter, "pool", &pool));
        EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire", shmlimit_acquire(pool, 1, &decision));
        CHECK(contains(shmlimit_last_error(), "pool"));
        shmlimit_limit_free(pool);
    }
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limit_definition(limit, &def));
    CHECK(strcmp(def.name, "api") == 0 && def.kind == SHMLIMIT_TOKEN_BUCKET);

    /* Limits outlive their limiters. */
    shmlimit_limiter_free(again);
    shmlimit_limiter_free(limiter);
    shmlimit_limiter_free(NULL);

    /* Decision errors: the out-parameter is untouched. */
    memset(&untouched, 0x77, sizeof untouched);
    decision = untouched;
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_acquire", shmlimit_acquire(limit, 0, &decision));
    CHECK(memcmp(&decision, &untouched, sizeof decision) == 0);
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_acquire",
                shmlimit_acquire(limit, 3, &decision));
    CHECK(contains(shmlimit_last_error(), "cost 3 exceeds the capacity 2"));
    EXPECT_CODE(SHMLIMIT_COST_EXCEEDS_CAPACITY, "shmlimit_peek", shmlimit_peek(log, 4, &decision));
    EXPECT_CODE(SHMLIMIT_ZERO_COST, "shmlimit_acquire_at",
                shmlimit_acquire_at(limit, 0, 1, &decision));
    CHECK(memcmp(&decision, &untouched, sizeof decision) == 0);
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire", shmlimit_acquire(NULL, 1, &decision));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire", shmlimit_acquire(limit, 1, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_peek", shmlimit_peek(limit, 1, NULL));
    EXPECT_CODE(SHMLIMIT_MISALIGNED_POINTER, "shmlimit_acquire",
                shmlimit_acquire(limit, 1, (shmlimit_decision *)(void *)(raw + 1)));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_stats", shmlimit_limit_stats(limit, NULL));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_limit_definition",
                shmlimit_limit_definition(NULL, &def));
    /* None of the failed calls decided anything. */
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limit_stats(limit, &stats));
    CHECK(stats.allowed == 0 && stats.denied == 0);

    /* Dates ahead of the clock by more than SHMLIMIT's 1 ms tolerance, or beyond what the
     * state encodes, are refused and decide nothing (counted nowhere: see the stats below). */
    EXPECT_CODE(SHMLIMIT_CLOCK_OUT_OF_RANGE, "shmlimit_acquire_at",
                shmlimit_acquire_at(limit, 1, monotonic_ns() + 3600 * SECOND, &decision));
    EXPECT_CODE(SHMLIMIT_CLOCK_OUT_OF_RANGE, "shmlimit_acquire_at",
                shmlimit_acquire_at(limit, 1, UINT64_MAX, &decision));
    EXPECT_CODE(SHMLIMIT_CLOCK_OUT_OF_RANGE, "shmlimit_acquire_at",
                shmlimit_acquire_at(limit, 1, UINT64_C(1) << 63, &decision));
    /* Decisions at explicit times (in the past: never ahead of the clock): a bucket of 2
     * refilled at one per second. */
    t0 = monotonic_ns() - 2 * SECOND;
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_peek(limit, 2, &decision));
    CHECK(decision.allowed && decision.retry_after_ns == 0);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire_at(limit, 1, t0, &decision));
    CHECK(decision.allowed && decision.remaining == 1 && decision.retry_after_ns == 0);
    /* reserved[1]: the grant record names the limit that made it. */
    CHECK(!decision.shadow_denied && decision.reserved[0] == 0 && decision.reserved[1] != 0);
    CHECK(decision.grant[0] == 1); /* the grant record: the cost admitted */
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire_at(limit, 1, t0, &decision));
    CHECK(decision.allowed && decision.remaining == 0);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire_at(limit, 1, t0, &decision));
    CHECK(!decision.allowed && decision.retry_after_ns == SECOND);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire_at(limit, 1, t0 + SECOND / 2, &decision));
    CHECK(!decision.allowed && decision.retry_after_ns == SECOND / 2);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire_at(limit, 1, t0 + SECOND, &decision));
    CHECK(decision.allowed && decision.remaining == 0);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_limit_stats(limit, &stats));
    CHECK(stats.allowed == 3 && stats.denied == 2);
    CHECK(stats.shadow_denied == 0 && stats.near_limit <= stats.allowed);
    CHECK(stats.refunded == 0 && stats.reserved[0] == 0 && stats.reserved[2] == 0);

    /* The exact log: 3 per 10 s, then denied until the first entry expires. */
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire(log, 2, &decision));
    CHECK(decision.allowed && decision.remaining == 1);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire(log, 2, &decision));
    CHECK(!decision.allowed && decision.retry_after_ns > 0 && decision.retry_after_ns <= 10 * SECOND);
    EXPECT_CODE(SHMLIMIT_OK, "", shmlimit_acquire(log, 1, &decision));
    CHECK(decision.allowed && decision.remaining == 0);

    shmlimit_limit_free(limit);
    shmlimit_limit_free(log);
    shmlimit_limit_free(NULL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    status_codes();
    create_errors(argv[1]);
    open_errors(argv[1]);
    use_and_errors(argv[1]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
