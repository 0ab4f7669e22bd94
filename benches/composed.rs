//! Composed checks: `composed/three_checks` admits one unit from three token buckets at once
//! with `try_acquire_all` (all or nothing), `composed/three_separate` calls `try_acquire(1)` on
//! each of the same three buckets. Single process, admit workload on all three buckets.

use criterion::{Criterion, Throughput};

use crate::harness::bench_single;
use crate::peers::composed::ThreeLimits;
use crate::peers::Workload;

/// Register the group.
pub fn bench(c: &mut Criterion) {
    let workload = Workload::Admit;
    let mut group = c.benchmark_group("composed");
    group.throughput(Throughput::Elements(1));
    bench_single(&mut group, "three_checks", workload, 1, || {
        ThreeLimits::<true>::new(workload)
    });
    bench_single(&mut group, "three_separate", workload, 1, || {
        ThreeLimits::<false>::new(workload)
    });
    group.finish();
}
