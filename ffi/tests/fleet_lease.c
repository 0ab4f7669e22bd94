/*
 * A fleet-managed token bucket's lease read through the C header: `fleet_lease PATH NAME
 * LEASED SHARE_CAPACITY FENCE_CAPACITY`. The file was made fleet-managed by the Rust test that
 * runs this program (tests/ffi_c.rs), with a lease deadline ahead of the clock (LEASED = 1) or
 * behind it (LEASED = 0); this checks what the header reports against that.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

int main(int argc, char **argv) {
    shmlimit_limiter *limiter = NULL;
    shmlimit_limit *limit = NULL;
    shmlimit_fleet_lease lease;
    uint64_t before;
    uint32_t leased;
    uint64_t share_capacity, fence_capacity;
    if (argc != 6) {
        fprintf(stderr, "usage: %s PATH NAME LEASED SHARE_CAPACITY FENCE_CAPACITY\n", argv[0]);
        return 2;
    }
    leased = (uint32_t)strtoul(argv[3], NULL, 10);
    share_capacity = strtoull(argv[4], NULL, 10);
    fence_capacity = strtoull(argv[5], NULL, 10);
    OK(shmlimit_limiter_open(argv[1], NULL, &limiter));
    OK(shmlimit_limiter_limit(limiter, argv[2], &limit));
    if (limit != NULL) {
        before = monotonic_ns();
        memset(&lease, 0xFF, sizeof lease);
        OK(shmlimit_limit_fleet_lease(limit, &lease));
        CHECK(lease.managed == 1);
        CHECK(lease.leased == leased);
        CHECK(lease.now_ns >= before && lease.now_ns <= monotonic_ns());
        if (leased) {
            CHECK(lease.deadline_ns > lease.now_ns);
        } else {
            CHECK(lease.deadline_ns <= lease.now_ns);
        }
        CHECK(lease.share_capacity == share_capacity && lease.share_emission_ns > 0);
        CHECK(lease.fence_capacity == fence_capacity && lease.fence_emission_ns > 0);
        CHECK(lease.applied_capacity == (leased ? share_capacity : fence_capacity));
        CHECK(lease.applied_emission_ns
              == (leased ? lease.share_emission_ns : lease.fence_emission_ns));
        printf("managed %u leased %u deadline %llu now %llu share %llu/%llu ns fence %llu/%llu ns\n",
               (unsigned)lease.managed, (unsigned)lease.leased,
               (unsigned long long)lease.deadline_ns, (unsigned long long)lease.now_ns,
               (unsigned long long)lease.share_capacity,
               (unsigned long long)lease.share_emission_ns,
               (unsigned long long)lease.fence_capacity,
               (unsigned long long)lease.fence_emission_ns);
    }
    shmlimit_limit_free(limit);
    shmlimit_limiter_free(limiter);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
