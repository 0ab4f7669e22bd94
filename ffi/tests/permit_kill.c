/*
 * Permits across processes: a C holder takes both permits of a concurrency limit and is
 * SIGKILLed; a C waiter blocked in shmlimit_permit_acquire_timeout and this process each take
 * one of the dead holder's permits over, while live holders' permits are never taken. Then a
 * second holder is killed and reaped, and shmlimit_permit_reclaim_dead frees its permits.
 * With `keyed`, the limit is a keyed concurrency limit and every permit is the key "tenant"'s
 * (two per key); another key's permit, held throughout, is never touched.
 *
 * Usage: permit_kill DIR [keyed]   (DIR: an empty, writable directory)
 * Prints "permits: ok" and exits 0 when every check passes.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmlimit.h"

#define SECOND UINT64_C(1000000000)

static int failed = 0;
/* Keyed mode: the key every permit is taken for. */
static int keyed = 0;
static const uint8_t KEY[] = "tenant";
#define KEY_LEN (sizeof KEY - 1)

#define EXPECT(cond)                                                              \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "permit_kill:%d: check failed: %s\n", __LINE__, #cond); \
            failed = 1;                                                           \
        }                                                                         \
    } while (0)

static void die(const char *what, shmlimit_status status) {
    fprintf(stderr, "permit_kill: %s: %s (%d): %s\n", what, shmlimit_strerror(status),
            (int)status, shmlimit_last_error());
    exit(1);
}

static shmlimit_limit *attach(const char *path) {
    shmlimit_limiter *limiter;
    shmlimit_limit *pool;
    shmlimit_status s = shmlimit_limiter_open(path, NULL, &limiter);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_open", s);
    }
    s = shmlimit_limiter_limit(limiter, "pool", &pool);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_limit", s);
    }
    shmlimit_limiter_free(limiter);
    return pool;
}

static void write_all(int fd, const void *buf, size_t len) {
    if (write(fd, buf, len) != (ssize_t)len) {
        _exit(3);
    }
}

static void read_all(int fd, void *buf, size_t len) {
    if (read(fd, buf, len) != (ssize_t)len) {
        fprintf(stderr, "permit_kill: a child did not report\n");
        exit(1);
    }
}

/* One permit, without waiting (timeout 0) or waiting up to `timeout_ns`; of the key in keyed mode. */
static shmlimit_status take(shmlimit_limit *pool, uint64_t timeout_ns, uint64_t *id) {
    if (keyed) {
        return timeout_ns == 0 ? shmlimit_permit_acquire_key(pool, KEY, KEY_LEN, id)
                               : shmlimit_permit_acquire_key_timeout(pool, KEY, KEY_LEN,
                                                                     timeout_ns, id);
    }
    return timeout_ns == 0 ? shmlimit_permit_acquire(pool, id)
                           : shmlimit_permit_acquire_timeout(pool, timeout_ns, id);
}

/* A child that attaches, takes both permits, reports their ids and waits to be killed. */
static pid_t holder(const char *path, uint64_t ids[2]) {
    int fds[2];
    pid_t pid;
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(1);
    }
    pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        shmlimit_limit *pool = attach(path);
        uint64_t mine[2] = {0, 0};
        shmlimit_status s;
        close(fds[0]);
        s = take(pool, 0, &mine[0]);
        if (s == SHMLIMIT_OK) {
            s = take(pool, 0, &mine[1]);
        }
        if (s != SHMLIMIT_OK) {
            die("shmlimit_permit_acquire", s);
        }
        write_all(fds[1], mine, sizeof mine);
        for (;;) {
            pause();
        }
    }
    close(fds[1]);
    read_all(fds[0], ids, 2 * sizeof ids[0]);
    close(fds[0]);
    return pid;
}

/* Held permits and how many of them are reclaimable. */
static size_t held(shmlimit_limit *pool, size_t *reclaimable, pid_t *pids) {
    shmlimit_permit_holder list[8];
    size_t count = 0, i, of_key = 0;
    uint64_t tag = 0;
    shmlimit_status s = shmlimit_permit_holders(pool, list, 8, &count);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_permit_holders", s);
    }
    if (keyed && (s = shmlimit_key_tag(pool, KEY, KEY_LEN, &tag)) != SHMLIMIT_OK) {
        die("shmlimit_key_tag", s);
    }
    *reclaimable = 0;
    for (i = 0; i < count && i < 8; i++) {
        /* In keyed mode, only the key's holders (the other key's is this process's own). */
        if (list[i].key_tag != tag) {
            continue;
        }
        *reclaimable += list[i].reclaimable ? 1 : 0;
        if (pids != NULL) {
            pids[of_key] = (pid_t)list[i].pid;
        }
        of_key++;
    }
    return of_key;
}

int main(int argc, char **argv) {
    char path[4096];
    shmlimit_def def;
    shmlimit_limiter *limiter;
    shmlimit_limit *pool;
    shmlimit_status s;
    uint64_t dead[2], got = 77, mine = 0, waiter_id = 0, bystander = 0;
    pid_t first, second, waiter, pids[4];
    siginfo_t info;
    size_t reclaimable, reclaimed = 99, count;
    bool released = false;
    int to_waiter[2], from_waiter[2], status;
    char go = 'g';

    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "keyed") != 0)) {
        fprintf(stderr, "usage: %s DIR [keyed]\n", argv[0]);
        return 2;
    }
    keyed = argc == 3;
    snprintf(path, sizeof path, "%s/permits.shm", argv[1]);
    memset(&def, 0, sizeof def);
    def.name = "pool";
    def.kind = SHMLIMIT_CONCURRENCY;
    def.limit = 2;
    def.key_capacity = keyed ? 16 : 0;
    s = shmlimit_limiter_create_or_open(path, &def, 1, NULL, &limiter);
    if (s != SHMLIMIT_OK) {
        die("shmlimit_limiter_create_or_open", s);
    }
    shmlimit_limiter_free(limiter);
    pool = attach(path);
    if (keyed) {
        s = shmlimit_permit_acquire_key(pool, (const uint8_t *)"bystander", 9, &bystander);
        EXPECT(s == SHMLIMIT_OK && bystander != 0);
    }

    /* A live holder's permits are never taken over. */
    first = holder(path, dead);
    EXPECT(dead[0] != 0 && dead[1] != 0 && dead[0] != dead[1]);
    s = take(pool, 0, &got);
    EXPECT(s == SHMLIMIT_OK && got == 0);
    EXPECT(held(pool, &reclaimable, pids) == 2 && reclaimable == 0);
    EXPECT(pids[0] == first && pids[1] == first);
    /* Its permits are its own: this process cannot release them. */
    s = shmlimit_permit_release(pool, dead[0], &released);
    EXPECT(s == SHMLIMIT_OK && !released);

    /* A waiter blocks for a permit (up to 30 s), then reports it and waits for a go. */
    if (pipe(to_waiter) != 0 || pipe(from_waiter) != 0) {
        perror("pipe");
        return 1;
    }
    waiter = fork();
    if (waiter < 0) {
        perror("fork");
        return 1;
    }
    if (waiter == 0) {
        shmlimit_limit *mine_pool = attach(path);
        uint64_t id = 0;
        bool ok = false;
        char byte;
        close(to_waiter[1]);
        close(from_waiter[0]);
        s = take(mine_pool, 30 * SECOND, &id);
        if (s != SHMLIMIT_OK) {
            die("waiting for a permit", s);
        }
        write_all(from_waiter[1], &id, sizeof id);
        if (read(to_waiter[0], &byte, 1) != 1) {
            _exit(4);
        }
        s = shmlimit_permit_release(mine_pool, id, &ok);
        if (s != SHMLIMIT_OK) {
            die("shmlimit_permit_release", s);
        }
        shmlimit_limit_free(mine_pool);
        _exit(id != 0 && ok ? 0 : 5);
    }
    close(to_waiter[0]);
    close(from_waiter[1]);

    /* Kill the holder; wait until it is a zombie, without reaping it. */
    EXPECT(kill(first, SIGKILL) == 0);
    memset(&info, 0, sizeof info);
    EXPECT(waitid(P_PID, (id_t)first, &info, WEXITED | WNOWAIT) == 0);
    EXPECT(info.si_pid == first && info.si_code == CLD_KILLED);

    /* The waiter takes at most one of the dead holder's permits; this process another. */
    s = take(pool, 0, &mine);
    EXPECT(s == SHMLIMIT_OK && mine != 0 && mine != SHMLIMIT_PERMIT_SHADOW);
    read_all(from_waiter[0], &waiter_id, sizeof waiter_id);
    EXPECT(waiter_id != 0 && waiter_id != mine);
    /* Both permits are now held by live processes: nothing to take, nothing reclaimable. */
    got = 77;
    s = take(pool, 0, &got);
    EXPECT(s == SHMLIMIT_OK && got == 0);
    count = held(pool, &reclaimable, pids);
    EXPECT(count == 2 && reclaimable == 0);
    EXPECT((pids[0] == getpid() && pids[1] == waiter) || (pids[0] == waiter && pids[1] == getpid()));
    /* The dead holder's ids name nothing any more. */
    s = shmlimit_permit_release(pool, dead[0], &released);
    EXPECT(s == SHMLIMIT_OK && !released);

    /* The waiter releases its permit and exits; this process takes it. */
    EXPECT(write(to_waiter[1], &go, 1) == 1);
    EXPECT(waitpid(waiter, &status, 0) == waiter && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s = take(pool, 30 * SECOND, &got);
    EXPECT(s == SHMLIMIT_OK && got != 0);
    EXPECT(waitpid(first, &status, 0) == first);
    s = shmlimit_permit_reclaim_dead(pool, &reclaimed);
    EXPECT(s == SHMLIMIT_OK && reclaimed == 0);
    s = shmlimit_permit_release(pool, mine, &released);
    EXPECT(s == SHMLIMIT_OK && released);
    s = shmlimit_permit_release(pool, got, &released);
    EXPECT(s == SHMLIMIT_OK && released);

    /* A second holder, killed and reaped: the cleanup pass frees both of its permits. */
    second = holder(path, dead);
    EXPECT(kill(second, SIGKILL) == 0);
    EXPECT(waitpid(second, &status, 0) == second && WIFSIGNALED(status));
    EXPECT(held(pool, &reclaimable, NULL) == 2 && reclaimable == 2);
    s = shmlimit_permit_reclaim_dead(pool, &reclaimed);
    EXPECT(s == SHMLIMIT_OK && reclaimed == 2);
    EXPECT(held(pool, &reclaimable, NULL) == 0);
    if (keyed) {
        /* The other key's permit was never touched. */
        s = shmlimit_permit_release(pool, bystander, &released);
        EXPECT(s == SHMLIMIT_OK && released);
    }

    shmlimit_limit_free(pool);
    if (failed) {
        return 1;
    }
    printf(keyed ? "keyed permits: ok\n" : "permits: ok\n");
    return 0;
}
