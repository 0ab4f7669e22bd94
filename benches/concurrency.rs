//! Concurrency permits: `concurrency/acquire_release` is one `try_acquire_permit()` and the
//! permit's drop (its release) in one process, `concurrency/keyed_acquire_release` the same
//! through `try_acquire_key_permit` of one key of a keyed limit, beside
//! `concurrency/token_bucket`, one admitted token-bucket decision;
//! `concurrency_processes/{acquire_release,keyed_acquire_release}/<k>` run them from 2 and 8
//! forked processes on one limit (one key: every process works on the same key slot; decisions
//! per second in total). The limit has more permits than workers, so every acquisition
//! succeeds.

use criterion::{Criterion, SamplingMode, Throughput};

use crate::harness::{bench_parallel_on, bench_single, Workers};
use crate::peers::permits::Permits;
use crate::peers::shmlimit::Shmlimit;
use crate::peers::Workload;

/// Permits of the limit: more than any run has workers.
const PERMITS: u64 = 16;

/// Register both groups.
pub fn bench(c: &mut Criterion) {
    let workload = Workload::Admit;
    let mut group = c.benchmark_group("concurrency");
    group.throughput(Throughput::Elements(1));
    bench_single(&mut group, "acquire_release", workload, 0, || {
        Permits::new(PERMITS)
    });
    bench_single(&mut group, "keyed_acquire_release", workload, 0, || {
        Permits::keyed(PERMITS)
    });
    bench_single(&mut group, "token_bucket", workload, 1, || {
        Shmlimit::token_bucket(workload)
    });
    group.finish();

    let mut group = c.benchmark_group("concurrency_processes");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    bench_parallel_on(
        &mut group,
        "acquire_release",
        &[2, 8],
        Workers::Processes,
        workload,
        || Permits::new(PERMITS),
    );
    bench_parallel_on(
        &mut group,
        "keyed_acquire_release",
        &[2, 8],
        Workers::Processes,
        workload,
        || Permits::keyed(PERMITS),
    );
    group.finish();
}
