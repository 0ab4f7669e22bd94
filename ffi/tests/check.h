/*
 * What the C test programs share: counted checks that print each failure with its line, the
 * status-code check that also wants the last-error message to name the failing function, and
 * small helpers. Each program keeps `checks` and `failures` through these macros and prints
 * "N passed, M failed" at the end. Kept to the common subset of C99 and C++11.
 */
#ifndef SHMLIMIT_TESTS_CHECK_H
#define SHMLIMIT_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shmlimit.h"

static int checks = 0;
static int failures = 0;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

/* `call` must return `code`, and leave a last-error message naming `function`. */
#define EXPECT_CODE(code, function, call)                                               \
    do {                                                                                \
        shmlimit_status got_ = (call);                                                  \
        checks++;                                                                       \
        if (got_ != (code)) {                                                           \
            failures++;                                                                 \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d: %s\n", __FILE__,  \
                    __LINE__, #call, (int)got_, shmlimit_strerror((int32_t)got_),       \
                    (int)(code), shmlimit_last_error());                                \
        } else if ((code) != SHMLIMIT_OK &&                                             \
                   strncmp(shmlimit_last_error(), function ": ", strlen(function ": ")) \
                       != 0) {                                                          \
            failures++;                                                                 \
            fprintf(stderr, "%s:%d: message of %s does not name %s: \"%s\"\n",         \
                    __FILE__, __LINE__, #call, function, shmlimit_last_error());        \
        }                                                                               \
    } while (0)

#define OK(call) EXPECT_CODE(SHMLIMIT_OK, "", call)

/* CLOCK_MONOTONIC now, in nanoseconds: the timeline every limiter file uses. */
static inline uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static inline int contains(const char *haystack, const char *needle) {
    return strstr(haystack, needle) != NULL;
}

#endif
