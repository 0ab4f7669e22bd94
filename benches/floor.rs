//! The floor: what a decision cannot go below on this machine.
//!
//! `floor/clock_monotonic` and `floor/cas_local` are the two parts of a decision, `floor/clock_and_cas`
//! both together, and `floor/c_reference` the whole GCRA in plain C. The multi-process C floor
//! runs in the contention groups, next to shmlimit.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Criterion;
use shmlimit::{Clock, CoarseMonotonicClock, MonotonicClock};

use crate::peers::c_reference::CReference;
use crate::peers::{prime, Contender, Workload};

/// Register the group.
pub fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("floor");
    group.bench_function("clock_monotonic", |b| b.iter(|| MonotonicClock.now_ns()));
    group.bench_function("clock_monotonic_coarse", |b| {
        b.iter(|| CoarseMonotonicClock.now_ns())
    });
    let word = AtomicU64::new(0);
    group.bench_function("cas_local", |b| {
        b.iter(|| {
            // Acquire load, AcqRel CAS: the orderings a decision uses, on a private word.
            let current = black_box(&word).load(Ordering::Acquire);
            word.compare_exchange(current, current + 1, Ordering::AcqRel, Ordering::Acquire)
        })
    });
    group.bench_function("clock_and_cas", |b| {
        b.iter(|| {
            let current = black_box(&word).load(Ordering::Acquire);
            let now = MonotonicClock.now_ns();
            word.compare_exchange(current, now, Ordering::AcqRel, Ordering::Acquire)
        })
    });
    let mut reference = None;
    group.bench_function("c_reference", |b| {
        let reference = reference.get_or_insert_with(|| {
            let r = CReference::new(Workload::Admit);
            prime("c_reference", &r, Workload::Admit, 0);
            r
        });
        let mut worker = reference.worker();
        b.iter(|| CReference::decide(&mut worker))
    });
    group.finish();
}
