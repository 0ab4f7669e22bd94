/*
 * The C ABI's calls around decisions, success and error paths, from C (and compiled as C++
 * too): reservations, deploys that adopt changed definitions, the reboot policy, and the
 * headers a client reads.
 *
 * Usage: lifecycle DIR   (DIR: an empty, writable directory)
 * Exit status 0 when every check passes; each failed check is printed.
 */
#include "feature_helpers.h"

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
    reservations(argv[1]);
    deploys(argv[1]);
    reboot_choice(argv[1]);
    client_headers(argv[1]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
