/*
 * The C ABI's keyed adaptive concurrency calls, success and error paths, from C (and compiled
 * as C++ too): per key, permits within a limit that starts at its minimum; releases with
 * outcomes and latencies teach the key's own limit only; bad outcomes, latencies and keys are
 * refused without a change; the permits of a process that died holding a key's permits are
 * taken over; a permit released by its id reports nothing; the other kinds' calls are refused
 * naming the keyed adaptive ones; refused definitions.
 *
 * Usage: keyed_adaptive DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feature_helpers.h"

#define KEY(s) (const uint8_t *)(s), (sizeof(s) - 1)

static void per_key(const char *dir) {
    shmlimit_def def;
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *dep = NULL;
    shmlimit_adaptive_permit *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    shmlimit_adaptive_info one, two;
    size_t used = 0, slots = 0;

    clear_of_remeasure(2); /* the samples are read back */

    /* min 2 (rate), max 8 (limit), no lease, 16 key slots. */
    zero_def(&def, "per_host", SHMLIMIT_ADAPTIVE_CONCURRENCY, 8, 0, 2);
    def.key_capacity = 16;
    OK(one_limit(dir, "keyed_adaptive", &def, &limiter));
    OK(shmlimit_limiter_limit(limiter, "per_host", &dep));

    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &one));
    CHECK(one.limit == 2.0 && one.permits == 2 && one.min == 2 && one.max == 8);
    CHECK(one.in_flight == 0 && one.rtt_long_us == 0.0);

    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 0, &a));
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 0, &b));
    CHECK(a != NULL && b != NULL && a != b);
    c = (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50;
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 0, &c));
    CHECK(c == NULL); /* db-1 at its limit: refused, not an error */
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 2000000, &c));
    CHECK(c == NULL); /* still none after 2 ms */
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-2"), 0, &d));
    CHECK(d != NULL); /* db-2 has its own */
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &one));
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-2"), &two));
    CHECK(one.in_flight == 2 && two.in_flight == 1);
    OK(shmlimit_limit_key_occupancy(dep, &used, &slots));
    CHECK(used == 2 && slots == 16);

    /* Bad outcomes and latencies: refused, the permit still held and valid. */
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release",
                shmlimit_adaptive_release(a, 4));
    CHECK(contains(shmlimit_last_error(), "outcome 4"));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release_measured",
                shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, NAN));
    EXPECT_CODE(SHMLIMIT_INVALID_PARAMETER, "shmlimit_adaptive_release_measured",
                shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, -0.5));
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &one));
    CHECK(one.in_flight == 2 && one.rtt_recent_us == 0.0);

    /* Bad keys and handles: refused, nothing inserted. */
    c = (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50;
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_keyed_adaptive_acquire",
                shmlimit_keyed_adaptive_acquire(dep, (const uint8_t *)"", 0, 0, &c));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_keyed_adaptive_acquire",
                shmlimit_keyed_adaptive_acquire(dep, NULL, 3, 0, &c));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_keyed_adaptive_status",
                shmlimit_keyed_adaptive_status(dep, (const uint8_t *)"x", 4096, &one));
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_keyed_adaptive_acquire",
                shmlimit_keyed_adaptive_acquire(NULL, KEY("db-1"), 0, &c));
    CHECK(c == (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50);
    OK(shmlimit_limit_key_occupancy(dep, &used, &slots));
    CHECK(used == 2);
    /* The unkeyed calls are refused on a keyed limit. */
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_adaptive_acquire",
                shmlimit_adaptive_acquire(dep, 0, &c));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_adaptive_status",
                shmlimit_adaptive_status(dep, &one));
    CHECK(contains(shmlimit_last_error(), "limit `per_host`: this limit is a keyed adaptive "
                                          "concurrency limit: use its adaptive calls, with a key "
                                          "(shmlimit_keyed_adaptive_acquire)"));

    /* db-1's requests fail, db-2's succeed in 250 ms: each key learns from its own. */
    OK(shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_ERROR, 0.01));
    OK(shmlimit_adaptive_release(b, SHMLIMIT_OUTCOME_DROPPED));
    OK(shmlimit_adaptive_release_measured(d, SHMLIMIT_OUTCOME_OK, 0.25));
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &one));
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-2"), &two));
    CHECK(one.in_flight == 0 && two.in_flight == 0);
    CHECK(one.limit == 2.0 && one.rtt_recent_us == 0.0); /* errors: no RTT, at its minimum */
    CHECK(two.rtt_recent_us == 250000.0 && two.rtt_long_us == 250000.0);
    CHECK(two.limit >= 2.0 && two.limit <= 8.0);

    /* A process that dies holding db-1's permits reports nothing; they are taken over. */
    {
        pid_t pid = fork();
        if (pid == 0) {
            shmlimit_adaptive_permit *x = NULL, *y = NULL;
            int held =
                shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 0, &x) == SHMLIMIT_OK &&
                x != NULL &&
                shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 0, &y) == SHMLIMIT_OK &&
                y != NULL;
            _exit(held ? 0 : 1);
        }
        int wstatus = 0;
        CHECK(waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) &&
              WEXITSTATUS(wstatus) == 0);
    }
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &one));
    CHECK(one.in_flight == 2);
    /* At the limit, dead holders are looked for at most every 10 ms: wait up to a second. */
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 1000000000, &a));
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 1000000000, &b));
    CHECK(a != NULL && b != NULL);
    OK(shmlimit_adaptive_release(a, SHMLIMIT_OUTCOME_DROPPED));
    OK(shmlimit_adaptive_release(b, SHMLIMIT_OUTCOME_DROPPED));
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &one));
    CHECK(one.in_flight == 0 && one.limit == 2.0);

    shmlimit_limit_free(dep);
    shmlimit_limiter_free(limiter);
}

/* A permit released by its id (as `shmlimit_permit_holders` lists it, with its key's tag), as
 * a keyed concurrency limit's: released as dropped, so the key's limit learns nothing from it,
 * and the `shmlimit_adaptive_permit` released later reports nothing. */
static void released_by_id(const char *dir) {
    shmlimit_def def;
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *dep = NULL;
    shmlimit_adaptive_permit *a = NULL;
    shmlimit_adaptive_info status;
    shmlimit_permit_holder holders[2];
    size_t count = 9;
    bool released = false;
    uint64_t tag = 0;

    clear_of_remeasure(2); /* a sample would be read back */
    zero_def(&def, "by_id", SHMLIMIT_ADAPTIVE_CONCURRENCY, 8, 0, 2);
    def.key_capacity = 16;
    OK(one_limit(dir, "keyed_by_id", &def, &limiter));
    OK(shmlimit_limiter_limit(limiter, "by_id", &dep));
    OK(shmlimit_keyed_adaptive_acquire(dep, KEY("db-1"), 0, &a));
    CHECK(a != NULL);
    OK(shmlimit_key_tag(dep, KEY("db-1"), &tag));
    OK(shmlimit_permit_holders(dep, holders, 2, &count));
    CHECK(count == 1 && holders[0].pid == (uint32_t)getpid() && holders[0].key_tag == tag);
    OK(shmlimit_permit_release(dep, holders[0].id, &released));
    CHECK(released);
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &status));
    CHECK(status.in_flight == 0);
    /* Released already: its outcome is no sample (the key's first would close a window). */
    OK(shmlimit_adaptive_release_measured(a, SHMLIMIT_OUTCOME_OK, 0.25));
    OK(shmlimit_keyed_adaptive_status(dep, KEY("db-1"), &status));
    CHECK(status.in_flight == 0 && status.rtt_recent_us == 0.0 && status.limit == 2.0);
    OK(shmlimit_permit_reclaim_dead(dep, &count));
    CHECK(count == 0);
    shmlimit_limit_free(dep);
    shmlimit_limiter_free(limiter);
}

static void refusals(const char *dir) {
    shmlimit_def def;
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *plain = NULL;
    shmlimit_adaptive_permit *p = (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50;
    shmlimit_adaptive_info status;

    zero_def(&def, "plain", SHMLIMIT_ADAPTIVE_CONCURRENCY, 8, 0, 2);
    OK(one_limit(dir, "plain", &def, &limiter));
    OK(shmlimit_limiter_limit(limiter, "plain", &plain));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_keyed_adaptive_acquire",
                shmlimit_keyed_adaptive_acquire(plain, KEY("k"), 0, &p));
    CHECK(p == (shmlimit_adaptive_permit *)(uintptr_t)0x5a5a5a50);
    CHECK(contains(shmlimit_last_error(), "limit `plain`: this limit is an adaptive concurrency "
                                          "limit: use its adaptive calls, without a key "
                                          "(shmlimit_adaptive_acquire)"));
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_keyed_adaptive_status",
                shmlimit_keyed_adaptive_status(plain, KEY("k"), &status));
    shmlimit_limit_free(plain);
    shmlimit_limiter_free(limiter);

    zero_def(&def, "too_many", SHMLIMIT_ADAPTIVE_CONCURRENCY, 65, 0, 2);
    def.key_capacity = 16;
    refused(dir, &def, "at most 64");
    adaptive_definitions_refused(dir, 16);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    per_key(argv[1]);
    released_by_id(argv[1]);
    refusals(argv[1]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
