//! Contention: 1, 2, 4 and 8 workers hammering one limit, reported as decisions per second in
//! total. The machine may have fewer cores than workers: oversubscription is part of the picture
//! (a lock holder descheduled while the others spin or sleep).
//!
//! `contention_threads_admit/<contender>/<k>` runs threads of one process;
//! `contention_processes_{admit,deny}/<contender>/<k>` forks processes, each attached on its own.

use criterion::{Criterion, SamplingMode, Throughput};

use crate::harness::{bench_parallel, Workers};
use crate::peers::c_reference::CReference;
use crate::peers::flock::Flock;
use crate::peers::governor::Governor;
use crate::peers::mutex::InProcessMutex;
use crate::peers::pthread_shm::PthreadShm;
use crate::peers::redis_lua::{self, RedisLua};
use crate::peers::shmlimit::Shmlimit;
use crate::peers::Workload;

/// Register every contention group.
pub fn bench(c: &mut Criterion) {
    threads(c, Workload::Admit);
    for workload in Workload::ALL {
        processes(c, workload);
    }
}

fn configure(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group.throughput(Throughput::Elements(1));
    // Every sample forks or spawns its workers: few, equally long samples keep that cost small.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
}

fn threads(c: &mut Criterion, workload: Workload) {
    let mut group = c.benchmark_group(format!("contention_threads_{}", workload.name()));
    configure(&mut group);
    let (g, t) = (&mut group, Workers::Threads);
    bench_parallel(g, "shmlimit", t, workload, || {
        Shmlimit::token_bucket(workload)
    });
    bench_parallel(g, "c_reference", t, workload, || CReference::new(workload));
    bench_parallel(g, "governor_quanta", t, workload, || {
        Governor::quanta(workload)
    });
    bench_parallel(g, "governor_monotonic", t, workload, || {
        Governor::monotonic(workload)
    });
    bench_parallel(g, "mutex_in_process", t, workload, || {
        InProcessMutex::new(workload)
    });
    bench_parallel(g, "pthread_robust_shm", t, workload, || {
        PthreadShm::new(workload)
    });
    bench_parallel(g, "flock", t, workload, || Flock::new(workload));
    group.finish();
}

fn processes(c: &mut Criterion, workload: Workload) {
    let mut group = c.benchmark_group(format!("contention_processes_{}", workload.name()));
    configure(&mut group);
    let (g, p) = (&mut group, Workers::Processes);
    bench_parallel(g, "shmlimit", p, workload, || {
        Shmlimit::token_bucket(workload)
    });
    bench_parallel(g, "c_reference", p, workload, || CReference::new(workload));
    bench_parallel(g, "pthread_robust_shm", p, workload, || {
        PthreadShm::new(workload)
    });
    bench_parallel(g, "flock", p, workload, || Flock::new(workload));
    if workload == Workload::Admit && redis_lua::endpoint().is_some() {
        bench_parallel(g, "redis_lua", p, workload, || {
            RedisLua::new(workload).expect("the server answered")
        });
    }
    group.finish();
}
