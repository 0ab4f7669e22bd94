//! Limit definitions: what a user asks for, validated before anything touches a file.
//!
//! A definition is stored in the limiter file, so every process (in every language) that attaches
//! decides with the same parameters. Every constructor here is checked: zero, negative, NaN,
//! infinite and overflowing values are refused with [`Error::InvalidParameter`] when the limit is
//! defined, never discovered at decision time.

mod algorithm;
mod builders;
mod def;
mod keyed;
mod rate;

pub use algorithm::{Algorithm, IntoAlgorithm};
pub use builders::{
    Alignment, Concurrency, FixedWindow, SlidingLog, SlidingWindow, TokenBucket, TokenBucketSpec,
};
pub(crate) use def::validate_name;
pub use def::{FleetShare, LimitDef, DEFAULT_NEAR_LIMIT};
pub use keyed::{FullPolicy, Keyed};
pub use rate::Rate;

use std::time::Duration;

use crate::algo::sliding_log;

/// Longest limit name, in bytes.
pub const MAX_NAME_LEN: usize = 63;
/// Shortest window any windowed algorithm accepts.
pub const MIN_WINDOW: Duration = Duration::from_millis(1);
/// Longest window: about 36 years.
pub const MAX_WINDOW: Duration = Duration::from_nanos(sliding_log::MAX_WINDOW_NS);
/// Largest token-bucket capacity.
pub const MAX_CAPACITY: u64 = 1 << 40;
/// Most entries one sliding log may hold (8 bytes each).
pub const MAX_LOG_LIMIT: u64 = 1 << 24;
/// Most permits one concurrency limit may have.
pub const MAX_PERMITS: u64 = 1 << 16;
/// Most sub-buckets a split token bucket may have.
pub const MAX_SPLIT: usize = 64;
/// Most key slots one keyed limit may have.
pub const MAX_KEYS: u64 = 1 << 26;
/// Most permits per key of a keyed concurrency limit (one bit each in the key's state word).
pub const MAX_KEY_PERMITS: u64 = 64;
/// Most permit entries (key slots times permits per key) of one keyed concurrency limit: 16
/// bytes each, so at most 1 GiB.
pub const MAX_KEY_PERMIT_ENTRIES: u64 = 1 << 26;

#[cfg(test)]
mod tests {
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
