//! Exact boundary behaviour of every algorithm, driven by a manual clock on a real limiter file.

mod common;

#[path = "boundaries/admissions.rs"]
mod admissions;

#[path = "boundaries/retry_after.rs"]
mod retry_after;

#[path = "boundaries/stale_reads.rs"]
mod stale_reads;

#[path = "boundaries/sliding_window.rs"]
mod sliding_window;

#[path = "boundaries/references.rs"]
mod references;

use std::time::Duration;

use common::{XorShift, MS, SEC};
use shmlimit::{
    Alignment, Clock, Error, FixedWindow, IntoAlgorithm, Limiter, ManualClock, Rate, RateLimit,
    SlidingLog, SlidingWindow, TokenBucket,
};

/// Far from zero, so that no test depends on a fresh state looking like "time 0".
const BASE: u64 = 1_000 * SEC;
const MINUTE: Duration = Duration::from_secs(60);

struct Fixture {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    limiter: Limiter<ManualClock>,
}

impl Fixture {
    fn limit(&self, name: &str) -> Box<dyn RateLimit<ManualClock>> {
        common::rate(&self.limiter, name).expect("limit is defined")
    }
}

/// A limiter file in a fresh temporary directory holding `defs`, read through a manual clock
/// that starts at `start_ns`.
fn fixture(defs: Vec<(&str, shmlimit::Algorithm)>, start_ns: u64) -> Fixture {
    let (dir, path) = common::temp_path("limits.shm");
    let clock = ManualClock::new(start_ns);
    let mut builder = Limiter::builder().clock(clock.clone());
    for (name, algorithm) in defs {
        builder = builder.limit(name, algorithm);
    }
    let limiter = builder.create_or_open(&path).expect("create limiter file");
    Fixture {
        _dir: dir,
        clock,
        limiter,
    }
}

fn alg(spec: impl IntoAlgorithm) -> shmlimit::Algorithm {
    spec.into_algorithm("test").expect("valid definition")
}

fn fixed(limit: u64, window: Duration) -> shmlimit::Algorithm {
    alg(FixedWindow::new(limit, window).aligned(Alignment::Monotonic))
}

fn sliding_window(limit: u64, window: Duration) -> shmlimit::Algorithm {
    alg(SlidingWindow {
        limit,
        window,
        alignment: Alignment::Monotonic,
    })
}

fn log(limit: u64, window: Duration) -> shmlimit::Algorithm {
    alg(SlidingLog::new(limit, window))
}

fn bucket(capacity: u64, tokens: u64, period: Duration) -> shmlimit::Algorithm {
    alg(TokenBucket::new(
        capacity,
        Rate::new(tokens, period).expect("valid rate"),
    ))
}

/// Acquire cost 1 `attempts` times at the clock's current time; how many were admitted.
fn burst(limit: &dyn RateLimit<ManualClock>, attempts: u64) -> u64 {
    (0..attempts)
        .filter(|_| limit.try_acquire(1).expect("decision").is_allowed())
        .count() as u64
}

/// Acquire cost 1 until the first denial (at most `cap` admissions); how many were admitted.
fn until_denied(limit: &dyn RateLimit<ManualClock>, cap: u64) -> u64 {
    let mut admitted = 0;
    while admitted < cap && limit.try_acquire(1).expect("decision").is_allowed() {
        admitted += 1;
    }
    admitted
}
