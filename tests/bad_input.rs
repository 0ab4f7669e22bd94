//! Bad input at every public Rust entry point: zero, negative, NaN, infinite, huge and
//! overflowing values, empty and oversized keys, unknown names and wrong kinds. Each gives a
//! typed error (never a panic), and nothing is consumed: peeks and statistics are the same
//! before and after.

mod common;

#[path = "bad_input/definitions.rs"]
mod definitions;

#[path = "bad_input/decisions.rs"]
mod decisions;

#[path = "bad_input/clock.rs"]
mod clock;

use std::time::Duration;

use common::{rate, temp_path};
use shmlimit::{
    consts::{
        MAX_CAPACITY, MAX_CHECKS, MAX_KEYS, MAX_KEY_LEN, MAX_KEY_PERMITS, MAX_KEY_PERMIT_ENTRIES,
        MAX_LIMITS, MAX_LOG_LIMIT, MAX_NAME_LEN, MAX_PERMITS, MAX_SPLIT, MAX_WINDOW, MIN_WINDOW,
    },
    try_acquire_all, Algorithm, Alignment, Check, Clock, Concurrency, Decision, Error, FixedWindow,
    Keyed, LimitDef, Limiter, ManualClock, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

fn is_invalid<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(Error::InvalidParameter { reason, .. }) => assert!(!reason.is_empty(), "{what}"),
        other => panic!("{what}: expected InvalidParameter, got {other:?}"),
    }
}

/// The state of every limit as peeks and statistics see it.
fn snapshot(limiter: &Limiter<ManualClock>) -> Vec<String> {
    limiter
        .limits()
        .iter()
        .map(|l| {
            let peek = match l.name() {
                "conc" => format!("{}", l.permit_holders().len()),
                name => format!("{:?}", peek(limiter, name).map(|d| d.remaining())),
            };
            format!(
                "{} {peek} {:?} {:?}",
                l.name(),
                l.stats(),
                l.live_algorithm()
            )
        })
        .collect()
}

/// A decision of `cost` on the rate limit `name` of `limiter` (for key "k" if it is keyed),
/// dated `at` or on the clock.
fn decide<C: Clock>(
    limiter: &Limiter<C>,
    name: &str,
    cost: u64,
    at: Option<u64>,
) -> shmlimit::Result<Decision> {
    match (limiter.limit(name)?.kind().is_keyed(), at) {
        (true, None) => limiter
            .keyed_token_bucket(name)?
            .try_acquire_key(b"k", cost),
        (true, Some(t)) => limiter
            .keyed_token_bucket(name)?
            .try_acquire_key_at(b"k", cost, t),
        (false, None) => rate(limiter, name)?.try_acquire(cost),
        (false, Some(t)) => rate(limiter, name)?.try_acquire_at(cost, t),
    }
}

/// What a decision of cost 1 on the rate limit `name` would be now (for key "k" if keyed).
fn peek<C: Clock>(limiter: &Limiter<C>, name: &str) -> shmlimit::Result<Decision> {
    if limiter.limit(name)?.kind().is_keyed() {
        limiter.keyed_token_bucket(name)?.peek_key(b"k", 1)
    } else {
        rate(limiter, name)?.peek(1)
    }
}

fn limiter(path: &std::path::Path) -> Limiter<ManualClock> {
    Limiter::builder()
        .limit("tb", TokenBucket::new(10, Rate::per_second(1).unwrap()))
        .limit(
            "fw",
            FixedWindow::new(10, Duration::from_secs(60)).aligned(Alignment::Monotonic),
        )
        .limit("sw", SlidingWindow::new(10, Duration::from_secs(60)))
        .limit("log", SlidingLog::new(10, Duration::from_secs(60)))
        .limit("conc", Concurrency::new(2))
        .keyed_limit(
            "keyed",
            TokenBucket::new(10, Rate::per_second(1).unwrap()),
            Keyed::new(8),
        )
        .clock(ManualClock::new(1_000 * 1_000_000_000))
        .create_or_open(path)
        .unwrap()
}
