//! Adaptive concurrency against fixed permits, in one process: `adaptive/fixed_acquire_release`
//! is one `ConcurrencyLimit::try_acquire_permit` and the permit's drop on a limit of 16 permits;
//! `adaptive/acquire_release_sample/<max>` one `AdaptiveConcurrencyLimit::try_acquire` and the
//! permit's `release(Outcome::Ok)` (its latency measured and pooled, the window closed when due)
//! on a limit at 16 of `max` entries (the grant counts the held entries: its cost grows with
//! `max`). `adaptive/keyed_fixed_acquire_release` is one
//! `KeyedConcurrencyLimit::try_acquire_key_permit` and the permit's drop (16 permits per key);
//! `adaptive/keyed_acquire_release_sample/<max>` one `KeyedAdaptiveConcurrencyLimit::try_acquire`
//! and `release(Outcome::Ok)` on a key at 16 of `max` entries (the cap is the key's bitmap: its
//! cost does not grow with `max`). One key, already in its table. Every acquisition succeeds.

use criterion::{Criterion, Throughput};
use shmlimit::{AdaptiveConcurrency, Concurrency, Keyed, Limiter, Outcome};

use crate::peers::{file_in, scratch_dir};

pub fn bench(c: &mut Criterion) {
    let dir = scratch_dir();
    let mut group = c.benchmark_group("adaptive");
    group.throughput(Throughput::Elements(1));
    let limiter = Limiter::builder()
        .limit("fixed", Concurrency::new(16))
        .limit("adaptive16", AdaptiveConcurrency::new(16, 16))
        .limit("adaptive64", AdaptiveConcurrency::new(16, 64).initial(16))
        .keyed_limit("keyed_fixed", Concurrency::new(16), Keyed::new(1024))
        .keyed_limit(
            "keyed16",
            AdaptiveConcurrency::new(16, 16),
            Keyed::new(1024),
        )
        .keyed_limit(
            "keyed64",
            AdaptiveConcurrency::new(16, 64).initial(16),
            Keyed::new(1024),
        )
        .create_or_open(file_in(&dir, "adaptive"))
        .expect("create the limiter file");
    let fixed = limiter.concurrency("fixed").expect("fixed");
    group.bench_function("fixed_acquire_release", |b| {
        b.iter(|| drop(fixed.try_acquire_permit().unwrap().expect("a free permit")))
    });
    for max in [16, 64] {
        let adaptive = limiter
            .adaptive_concurrency(&format!("adaptive{max}"))
            .expect("adaptive");
        group.bench_function(format!("acquire_release_sample/{max}"), |b| {
            b.iter(|| {
                let permit = adaptive.try_acquire().unwrap().expect("a free permit");
                permit.release(Outcome::Ok)
            })
        });
    }
    let keyed_fixed = limiter.keyed_concurrency("keyed_fixed").expect("keyed");
    group.bench_function("keyed_fixed_acquire_release", |b| {
        b.iter(|| {
            drop(
                keyed_fixed
                    .try_acquire_key_permit(b"db-1")
                    .unwrap()
                    .expect("a free permit"),
            )
        })
    });
    for max in [16, 64] {
        let keyed = limiter
            .keyed_adaptive_concurrency(&format!("keyed{max}"))
            .expect("keyed adaptive");
        group.bench_function(format!("keyed_acquire_release_sample/{max}"), |b| {
            b.iter(|| {
                let permit = keyed.try_acquire(b"db-1").unwrap().expect("a free permit");
                permit.release(Outcome::Ok)
            })
        });
    }
    group.finish();
}
