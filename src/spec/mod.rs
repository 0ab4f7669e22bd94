//! Limit definitions: what a user asks for, validated before anything touches a file.
//!
//! A definition is stored in the limiter file, so every process (in every language) that attaches
//! decides with the same parameters. Every constructor here is checked: zero, negative, NaN,
//! infinite and overflowing values are refused with [`Error::InvalidParameter`] when the limit is
//! defined, never discovered at decision time.
//!
//! | to define | write | stored as |
//! |---|---|---|
//! | a token bucket | [`TokenBucket::per_second`]`(r).burst(b)`, [`TokenBucket::new`]`(b, `[`Rate`]`)` | [`Algorithm::TokenBucket`] |
//! | a fixed window | [`FixedWindow::new`], [`FixedWindow::daily`], ... with an [`Alignment`] | [`Algorithm::FixedWindow`] |
//! | a sliding window | [`SlidingWindow::new`] | [`Algorithm::SlidingWindow`] |
//! | an exact sliding log | [`SlidingLog::new`] | [`Algorithm::SlidingLog`] |
//! | a concurrency limit | [`Concurrency::new`]`(c).lease(d)` | [`Algorithm::Concurrency`] |
//! | an adaptive concurrency limit | [`AdaptiveConcurrency::new`]`(min, max)` | [`Algorithm::AdaptiveConcurrency`] |
//! | one state per key | [`Keyed::new`]`(slots).on_full(`[`FullPolicy`]`)` | [`LimitDef::keyed`] |
//!
//! [`Builder::limit`](crate::Builder::limit) takes any of them ([`IntoAlgorithm`]); a file's
//! definitions read back as [`LimitDef`]s. The builders are also at the crate root
//! (`shmlimit::TokenBucket`, ...); the bounds they are checked against are in
//! [`consts`](crate::consts).

#[cfg(doc)]
use crate::error::Error;

mod adaptive;
mod algorithm;
pub(crate) mod bounds;
mod builders;
mod def;
mod keyed;
mod kind;
mod rate;

pub use adaptive::{Adaptive, AdaptiveConcurrency, MAX_ADAPTIVE_PERMITS, MAX_ADAPTIVE_WINDOW_MS};
pub use algorithm::{Algorithm, IntoAlgorithm};
pub use builders::{
    Alignment, Concurrency, Counters, FixedWindow, SlidingLog, SlidingWindow, TokenBucket,
    TokenBucketSpec,
};
pub(crate) use def::validate_name;
pub use def::{FleetShare, LimitDef};
pub use keyed::{FullPolicy, Keyed};
pub use kind::LimitKind;
pub use rate::Rate;

pub(crate) use bounds::{
    DEFAULT_NEAR_LIMIT, MAX_CAPACITY, MAX_COUNTER_LOG_ENTRIES, MAX_KEYS, MAX_KEY_PERMITS,
    MAX_KEY_PERMIT_ENTRIES, MAX_LOG_ENTRIES, MAX_LOG_LIMIT, MAX_NAME_LEN, MAX_PERMITS, MAX_SPLIT,
    MAX_WINDOW, MIN_WINDOW,
};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rejects_bad_parameters() {
        assert!(Rate::per_second(0).is_err());
        assert!(Rate::new(5, Duration::ZERO).is_err());
        assert!(Rate::per_second_f64(-1.0).is_err());
        assert!(Rate::per_second_f64(f64::INFINITY).is_err());
        assert!(Rate::per_second_f64(2e9).is_err());
        assert!(Rate::per_second_f64(1e-30).is_err());
        assert!(TokenBucket::per_second(10)
            .burst(0)
            .into_algorithm("a")
            .is_err());
        assert!(TokenBucket::new(1 << 41, Rate::per_second(1).unwrap())
            .into_algorithm("a")
            .is_err());
        assert!(FixedWindow::new(0, Duration::from_secs(1))
            .into_algorithm("a")
            .is_err());
        assert!(FixedWindow::new(5, Duration::from_micros(10))
            .into_algorithm("a")
            .is_err());
        assert!(SlidingWindow::new(1 << 20, Duration::from_secs(1))
            .into_algorithm("a")
            .is_err());
        assert!(SlidingLog::new(0, Duration::from_secs(1))
            .into_algorithm("a")
            .is_err());
        assert!(SlidingLog::new(5, Duration::MAX)
            .into_algorithm("a")
            .is_err());
        let e = TokenBucket::per_second(0)
            .into_algorithm("api")
            .unwrap_err();
        assert!(e.to_string().contains("limit `api`"), "{e}");
    }

    #[test]
    fn rate_rounds_emission_up() {
        assert_eq!(Rate::per_second(3).unwrap().emission_ns(), 333_333_334);
        assert_eq!(
            Rate::per_second_f64(0.5).unwrap().emission_ns(),
            2_000_000_000
        );
    }

    #[test]
    fn names() {
        assert!(validate_name("api.v1:search/x_y-z").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("has space").is_err());
        assert!(validate_name(&"x".repeat(64)).is_err());
    }
}
