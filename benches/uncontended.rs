//! Single process, one thread, one limit, cost 1: every contender on the same token bucket.
//!
//! `uncontended_token_bucket_admit/*` decides on a bucket that always admits (every decision
//! writes), `uncontended_token_bucket_deny/*` on an empty bucket (every decision denies).
//! `shmlimit_fleet` is the same bucket managed by a fleet agent (a share under a lease: one more
//! compare and the deadline's load and compare per decision).

use criterion::{Criterion, Throughput};

use crate::harness::bench_single;
use crate::peers::c_reference::CReference;
use crate::peers::flock::Flock;
use crate::peers::governor::Governor;
use crate::peers::mutex::InProcessMutex;
use crate::peers::pthread_shm::PthreadShm;
use crate::peers::redis_lua::{self, RedisLua};
use crate::peers::shmlimit::Shmlimit;
use crate::peers::Workload;

/// Register both groups.
pub fn bench(c: &mut Criterion) {
    for workload in Workload::ALL {
        let mut group = c.benchmark_group(format!("uncontended_token_bucket_{}", workload.name()));
        group.throughput(Throughput::Elements(1));
        let g = &mut group;
        bench_single(g, "shmlimit", workload, 1, || {
            Shmlimit::token_bucket(workload)
        });
        bench_single(g, "shmlimit_fleet", workload, 1, || {
            Shmlimit::fleet_token_bucket(workload)
        });
        bench_single(g, "c_reference", workload, 1, || CReference::new(workload));
        bench_single(g, "governor_quanta", workload, 1, || {
            Governor::quanta(workload)
        });
        bench_single(g, "governor_monotonic", workload, 1, || {
            Governor::monotonic(workload)
        });
        bench_single(g, "mutex_in_process", workload, 1, || {
            InProcessMutex::new(workload)
        });
        bench_single(g, "pthread_robust_shm", workload, 1, || {
            PthreadShm::new(workload)
        });
        bench_single(g, "flock", workload, 1, || Flock::new(workload));
        if redis_lua::endpoint().is_some() {
            bench_single(g, "redis_lua", workload, 1, || {
                RedisLua::new(workload).expect("the server answered")
            });
        }
        group.finish();
    }
}
