/*
 * What the feature tests of the C ABI share (features.c, concurrency.c, lifecycle.c,
 * adaptive.c, keyed_adaptive.c): the time constants, a zeroed definition, a file of one limit,
 * a refused definition, the definitions every adaptive concurrency limit refuses, and waiting
 * clear of an adaptive limit's re-measure. Static inline: each test program uses some of them.
 */
#ifndef SHMLIMIT_FEATURE_HELPERS_H
#define SHMLIMIT_FEATURE_HELPERS_H

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

static inline void zero_def(shmlimit_def *def, const char *name, uint32_t kind, uint64_t limit,
                            uint64_t period_ns, uint64_t rate) {
    memset(def, 0, sizeof *def);
    def->name = name;
    def->kind = kind;
    def->limit = limit;
    def->period_ns = period_ns;
    def->rate = rate;
}

/* A fresh file `name` in `dir` holding the one definition `def`. */
static inline shmlimit_status one_limit(const char *dir, const char *name, const shmlimit_def *def,
                                        shmlimit_limiter **limiter) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.shm", dir, name);
    return shmlimit_limiter_create_or_open(path, def, 1, NULL, limiter);
}

/* Creating `def` alone must fail with INVALID_PARAMETER and a message holding `needle`. */
static inline void refused(const char *dir, const shmlimit_def *def, const char *needle) {
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

/* The definitions an adaptive concurrency limit refuses whether keyed (`key_capacity` slots)
 * or not (0), each with a message naming the fault: a minimum (`rate`) above the maximum
 * (`limit`), a minimum of 0, a maximum of 0. */
static inline void adaptive_definitions_refused(const char *dir, uint64_t key_capacity) {
    static const struct {
        const char *name;
        uint64_t max;
        uint64_t min;
        const char *needle;
    } bad[] = {
        {"min_above_max", 4, 8, "above maximum"},
        {"zero_min", 4, 0, "minimum 0"},
        {"zero_max", 0, 1, "above maximum"},
    };
    shmlimit_def def;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zero_def(&def, bad[i].name, SHMLIMIT_ADAPTIVE_CONCURRENCY, bad[i].max, 0, bad[i].min);
        def.key_capacity = key_capacity;
        refused(dir, &def, bad[i].needle);
    }
}

/* Sleep, if need be, until the next `seconds` hold none of an adaptive limit's re-measure
 * windows (20 ms each, the default tuning). Every 1,000 windows on the limit's clock
 * (CLOCK_MONOTONIC), the last 8 grant at most the minimum and keep the limit, and the samples
 * of the first 4 of them are not used (docs/adaptive.md): a test that reads a sample back must
 * not release its permits there. */
static inline void clear_of_remeasure(uint64_t seconds) {
    const uint64_t window_ns = UINT64_C(20000000);
    const uint64_t period_ns = 1000 * window_ns;
    const uint64_t at_ns = monotonic_ns() % period_ns;
    if (at_ns + seconds * SECOND > period_ns - 8 * window_ns) {
        const uint64_t wait_ns = period_ns - at_ns + UINT64_C(5000000);
        struct timespec pause;
        pause.tv_sec = (time_t)(wait_ns / SECOND);
        pause.tv_nsec = (long)(wait_ns % SECOND);
        while (nanosleep(&pause, &pause) != 0) {
        }
    }
}

#endif
