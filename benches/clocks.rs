//! Clock sources: the same token-bucket decision dated by `CLOCK_MONOTONIC` (the default) and by
//! `CLOCK_MONOTONIC_COARSE` (opt-in, one kernel tick of resolution).

use criterion::{Criterion, Throughput};
use shmlimit::{CoarseMonotonicClock, MonotonicClock, TokenBucketLimit};

use crate::harness::bench_single;
use crate::peers::shmlimit::{token_bucket, Shmlimit};
use crate::peers::Workload;

/// Register both groups.
pub fn bench(c: &mut Criterion) {
    for workload in Workload::ALL {
        let mut group = c.benchmark_group(format!("clock_source_{}", workload.name()));
        group.throughput(Throughput::Elements(1));
        let g = &mut group;
        bench_single(g, "monotonic", workload, 1, || {
            Shmlimit::<_, TokenBucketLimit>::with_clock(token_bucket(workload), MonotonicClock)
        });
        bench_single(g, "monotonic_coarse", workload, 1, || {
            Shmlimit::<_, TokenBucketLimit<_>>::with_clock(
                token_bucket(workload),
                CoarseMonotonicClock,
            )
        });
        group.finish();
    }
}
