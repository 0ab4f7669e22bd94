//! The hot-limit split: `hot_split/<k>/<processes>` runs 2, 4 and 8 forked processes on one
//! token bucket (`k = 1`) and on the same budget split into `k = 2` and `k = 4` sub-buckets
//! (`Builder::limit_with(name, bucket, |d| d.split(k))`), decisions per second in total. The
//! bucket is the admit workload's: every decision admits.

use criterion::{Criterion, SamplingMode, Throughput};

use crate::harness::{bench_parallel_on, Workers};
use crate::peers::shmlimit::Shmlimit;
use crate::peers::Workload;

/// Sub-buckets compared (1: not split).
pub const SPLITS: [u16; 3] = [1, 2, 4];

/// Processes compared.
pub const PROCESSES: [usize; 3] = [2, 4, 8];

/// Register the group.
pub fn bench(c: &mut Criterion) {
    let workload = Workload::Admit;
    let mut group = c.benchmark_group("hot_split");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for k in SPLITS {
        bench_parallel_on(
            &mut group,
            &k.to_string(),
            &PROCESSES,
            Workers::Processes,
            workload,
            || Shmlimit::split(workload, k),
        );
    }
    group.finish();
}
