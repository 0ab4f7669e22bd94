/*
 * Composed checks with keyed limits (`shmlimit_check.key`): a per-client keyed token bucket and
 * a global one decided in one call, as Rust's `Check::keyed`. In one process: which limit
 * denies, that a denial takes nothing from the other limit or the key, refunds by key, and the
 * errors. Then PROCS forked workers compose the same two limits for KEYS clients at once: the
 * global bucket admits exactly its burst, no client more than its own, and every client's
 * bucket holds exactly its burst minus its admissions (a composed denial took nothing).
 *
 * Usage: compose_keyed DIR   (DIR: an empty, writable directory)
 * Prints "compose keyed: ok" and exits 0 when every check holds.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define HOUR UINT64_C(3600000000000)

enum { PER_CLIENT = 3, GLOBAL = 20, PROCS = 4, KEYS = 8, ATTEMPTS = 400 };

static void def(shmlimit_def *d, const char *name, uint64_t burst, uint64_t keys) {
    memset(d, 0, sizeof *d);
    d->name = name;
    d->kind = SHMLIMIT_TOKEN_BUCKET;
    d->limit = burst;
    d->period_ns = HOUR; /* one token an hour: nothing refills during the test */
    d->rate = 1;
    d->key_capacity = keys;
}

static void check_of(shmlimit_check *c, const shmlimit_limit *limit, const char *key) {
    memset(c, 0, sizeof *c);
    c->limit = limit;
    c->cost = 1;
    c->key = (const uint8_t *)key;
    c->key_len = key ? strlen(key) : 0;
}

static void one_process(shmlimit_limit *client, shmlimit_limit *global) {
    shmlimit_check c[2];
    shmlimit_composed out, kept;
    shmlimit_decision d;
    char long_key[SHMLIMIT_MAX_KEY_LEN + 2];
    int i;

    check_of(&c[0], client, "alice");
    check_of(&c[1], global, NULL);
    for (i = 0; i < PER_CLIENT; i++) {
        OK(shmlimit_acquire_all(c, 2, &out));
        CHECK(out.allowed && out.denied_by == -1 && out.count == 2);
        CHECK(out.decisions[0].allowed && out.decisions[0].remaining == (uint64_t)(PER_CLIENT - 1 - i));
        CHECK(out.decisions[1].allowed && out.decisions[1].remaining == (uint64_t)(GLOBAL - 1 - i));
    }
    kept = out;
    /* alice is out of her budget: denied by check 0, and the global bucket keeps its tokens. */
    OK(shmlimit_acquire_all(c, 2, &out));
    CHECK(!out.allowed && out.denied_by == 0 && out.retry_after_ns > 0);
    OK(shmlimit_peek(global, 1, &d));
    CHECK(d.remaining == GLOBAL - PER_CLIENT - 1);
    /* Another key of the same limit has its own budget. */
    check_of(&c[0], client, "bob");
    OK(shmlimit_acquire_all(c, 2, &out));
    CHECK(out.allowed && out.decisions[0].remaining == PER_CLIENT - 1);
    /* Refunding alice's last grant gives one token back to her and one to the global bucket. */
    check_of(&c[0], client, "alice");
    OK(shmlimit_refund_all(c, 2, &kept));
    OK(shmlimit_peek_key(client, (const uint8_t *)"alice", 5, 1, &d));
    CHECK(d.allowed && d.remaining == 0);
    OK(shmlimit_peek(global, 1, &d));
    CHECK(d.remaining == GLOBAL - PER_CLIENT - 1 - 1 + 1);
    /* The same limit twice with two keys: all or nothing across the keys too. */
    check_of(&c[0], client, "carol");
    check_of(&c[1], client, "alice");
    OK(shmlimit_acquire_all(c, 2, &out));
    CHECK(out.allowed);
    OK(shmlimit_acquire_all(c, 2, &out));
    CHECK(!out.allowed && out.denied_by == 1);
    OK(shmlimit_peek_key(client, (const uint8_t *)"carol", 5, 1, &d));
    CHECK(d.remaining == PER_CLIENT - 1 - 1); /* only the first composed call took from carol */

    /* Errors, named by the check's index; nothing is consumed. */
    check_of(&c[0], client, NULL); /* a keyed limit without a key */
    check_of(&c[1], global, NULL);
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &out));
    check_of(&c[0], client, "dave");
    check_of(&c[1], global, "dave"); /* an unkeyed limit with a key */
    EXPECT_CODE(SHMLIMIT_WRONG_KIND, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &out));
    OK(shmlimit_peek_key(client, (const uint8_t *)"dave", 4, 1, &d));
    CHECK(d.remaining == PER_CLIENT - 1); /* the grant taken before the error was given back */
    /* The counters: the roll-backs (carol's when alice denied, dave's when the global check
     * failed) and the explicit refund count as refunded; allowed - refunded is what passed. */
    {
        shmlimit_stats st;
        OK(shmlimit_limit_stats(client, &st));
        CHECK(st.allowed == 8 && st.denied == 2 && st.refunded == 3);
        OK(shmlimit_limit_stats(global, &st));
        CHECK(st.allowed == 4 && st.denied == 0 && st.refunded == 1);
    }
    check_of(&c[1], global, NULL);
    c[0].key = NULL;
    c[0].key_len = 4;
    EXPECT_CODE(SHMLIMIT_NULL_POINTER, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &out));
    CHECK(contains(shmlimit_last_error(), "checks[0]"));
    c[0].key = (const uint8_t *)"";
    c[0].key_len = 0;
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &out));
    memset(long_key, 'k', sizeof long_key);
    long_key[sizeof long_key - 1] = '\0';
    check_of(&c[1], client, long_key);
    check_of(&c[0], global, NULL);
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_acquire_all", shmlimit_acquire_all(c, 2, &out));
    CHECK(contains(shmlimit_last_error(), "checks[1]"));
    EXPECT_CODE(SHMLIMIT_INVALID_KEY, "shmlimit_refund_all", shmlimit_refund_all(c, 2, &kept));
    OK(shmlimit_peek(global, 1, &d));
    CHECK(d.remaining == GLOBAL - PER_CLIENT - 1 - 1 + 1);
}

static int across_processes(const char *dir) {
    shmlimit_def defs[2];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *client = NULL, *global = NULL;
    shmlimit_check c[2];
    shmlimit_composed out;
    shmlimit_decision d;
    char path[4096], key[16];
    unsigned *admitted;
    unsigned total = 0;
    int p, i, k, status;

    snprintf(path, sizeof path, "%s/compose-keyed-fork.shm", dir);
    def(&defs[0], "client", PER_CLIENT, 64);
    def(&defs[1], "global", GLOBAL, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 2, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "client", &client));
    OK(shmlimit_limiter_limit(limiter, "global", &global));
    shmlimit_limiter_free(limiter);
    admitted = (unsigned *)mmap(NULL, sizeof(unsigned) * KEYS, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (admitted == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(admitted, 0, sizeof(unsigned) * KEYS);
    for (p = 0; p < PROCS; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            for (i = 0; i < ATTEMPTS; i++) {
                k = (i + p) % KEYS;
                snprintf(key, sizeof key, "client-%d", k);
                check_of(&c[0], client, key);
                check_of(&c[1], global, NULL);
                if (shmlimit_acquire_all(c, 2, &out) != SHMLIMIT_OK) {
                    fprintf(stderr, "worker %d: %s\n", p, shmlimit_last_error());
                    _exit(1);
                }
                if (out.allowed) {
                    __atomic_fetch_add(&admitted[k], 1, __ATOMIC_RELAXED);
                }
            }
            _exit(0);
        }
    }
    for (p = 0; p < PROCS; p++) {
        CHECK(wait(&status) > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    for (k = 0; k < KEYS; k++) {
        total += admitted[k];
        CHECK(admitted[k] <= PER_CLIENT);
        snprintf(key, sizeof key, "client-%d", k);
        OK(shmlimit_peek_key(client, (const uint8_t *)key, strlen(key), 1, &d));
        /* Every token a client lost is one it was admitted with (a peek's `remaining` is
         * what would be left after it). */
        CHECK(admitted[k] == PER_CLIENT ? !d.allowed
                                        : d.allowed && d.remaining == PER_CLIENT - admitted[k] - 1);
    }
    /* 8 clients of 3 could take 24: the global bucket admits exactly its 20. */
    CHECK(total == GLOBAL);
    OK(shmlimit_peek(global, 1, &d));
    CHECK(!d.allowed && d.remaining == 0);
    printf("compose keyed: %u admitted across %d processes (global %d, %d per client)\n", total,
           PROCS, GLOBAL, PER_CLIENT);
    munmap(admitted, sizeof(unsigned) * KEYS);
    shmlimit_limit_free(client);
    shmlimit_limit_free(global);
    return 0;
}

int main(int argc, char **argv) {
    shmlimit_def defs[2];
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *client = NULL, *global = NULL;
    char path[4096];

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/compose-keyed.shm", argv[1]);
    def(&defs[0], "client", PER_CLIENT, 64);
    def(&defs[1], "global", GLOBAL, 0);
    OK(shmlimit_limiter_create_or_open(path, defs, 2, NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, "client", &client));
    OK(shmlimit_limiter_limit(limiter, "global", &global));
    shmlimit_limiter_free(limiter);
    if (client && global) {
        one_process(client, global);
    }
    shmlimit_limit_free(client);
    shmlimit_limit_free(global);
    if (across_processes(argv[1]) != 0) {
        return 1;
    }
    printf("%d passed, %d failed\n", checks - failures, failures);
    if (failures == 0) {
        printf("compose keyed: ok\n");
    }
    return failures == 0 ? 0 : 1;
}
