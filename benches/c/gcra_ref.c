/*
 * The reference decision: a token bucket as GCRA in plain C, the floor shmlimit is measured
 * against. One CLOCK_MONOTONIC read and one compare-and-swap loop on one 64-bit word (the
 * theoretical arrival time, absolute nanoseconds) in a shared file mapping; nothing else: no
 * statistics, no validation of the word, no retry-after.
 *
 *   new_tat = max(tat, now) + cost * emission_ns
 *   admit  iff  new_tat - now <= tolerance_ns      (then CAS tat -> new_tat)
 *
 * Built by the benchmark at startup with `gcc -O2 -shared -fPIC` and called through a function
 * pointer, once per decision.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define GCRA_REF_MAP_LEN 4096

typedef struct gcra_ref_limit {
    _Atomic uint64_t *tat;
    uint64_t emission_ns;
    uint64_t tolerance_ns;
} gcra_ref_limit;

/* Map `path` (created zero-filled if missing: a zero tat is a full bucket) and fill `out`.
 * Returns 0, or -1 with errno set. The mapping lives until the process exits. */
int gcra_ref_attach(const char *path, uint64_t emission_ns, uint64_t tolerance_ns,
                    gcra_ref_limit *out)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, GCRA_REF_MAP_LEN) != 0) {
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, GCRA_REF_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return -1;
    out->tat = (_Atomic uint64_t *)map;
    out->emission_ns = emission_ns;
    out->tolerance_ns = tolerance_ns;
    return 0;
}

static inline uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One decision of `cost` units: 1 admitted, 0 denied. */
int gcra_ref_acquire(const gcra_ref_limit *limit, uint64_t cost)
{
    uint64_t tat = atomic_load_explicit(limit->tat, memory_order_acquire);
    for (;;) {
        uint64_t now = monotonic_ns();
        uint64_t base = tat > now ? tat : now;
        uint64_t new_tat = base + cost * limit->emission_ns;
        if (new_tat - now > limit->tolerance_ns)
            return 0;
        if (atomic_compare_exchange_weak_explicit(limit->tat, &tat, new_tat,
                                                  memory_order_acq_rel, memory_order_acquire))
            return 1;
    }
}
