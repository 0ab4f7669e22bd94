//! The unkeyed rate handles: token bucket, window, sliding log.

use std::time::Duration;

use super::{
    bucket_retune, typed_handle, unkeyed_rate, window_retune, LimitKind, RateLimit, TypedLimit,
};
use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::limiter::{Limit, Limiter};
use crate::spec::{Algorithm, Rate};
use crate::wait::Reservation;

/// An unkeyed token bucket (GCRA), split into sub-buckets or not: resolved with
/// [`Limiter::token_bucket`].
///
/// A decision is one clock read, a few arithmetic operations and one CAS loop on the limit's
/// cache line (plus one uncontended counter increment): no allocation, no lock, no system call.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("api.shm");
/// use std::time::Duration;
/// use shmlimit::{Limiter, Rate, TokenBucket};
/// let limiter = Limiter::builder()
///     .limit("api", TokenBucket::per_second(1).burst(2))
///     .create_or_open(&path)?;
/// let api = limiter.token_bucket("api")?; // resolve once
/// let grant = api.try_acquire(2)?; // hot path
/// assert!(grant.is_allowed());
/// assert!(api.try_acquire(1)?.is_denied());
/// api.refund(&grant)?; // the work was never done
/// assert!(api.peek(2)?.is_allowed());
/// // Book the next token, to be used after a delay of at most 2 s.
/// let booked = api.reserve(1, Duration::from_secs(2))?;
/// assert!(booked.is_granted());
/// api.set_rate(Rate::per_second(200)?)?; // live, in every process
/// assert!(limiter.window("api").is_err()); // the kind is checked when resolving
/// # Ok(()) }
/// ```
pub struct TokenBucketLimit<C: Clock = MonotonicClock>(Limit<C>);

typed_handle!(TokenBucketLimit, LimitKind::TokenBucket, token_bucket);
unkeyed_rate!(TokenBucketLimit, try_acquire_bucket);
bucket_retune!(TokenBucketLimit);

impl<C: Clock> TokenBucketLimit<C> {
    /// Book the next `n` tokens now, to be used after the returned delay, if that delay is at
    /// most `max_delay`; otherwise refuse at once and take nothing (see [`Reservation`]).
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `n` exceeds the burst;
    /// [`Error::CorruptState`]; [`Error::WrongKind`] on a split bucket (its sub-buckets cannot
    /// book in one order: use [`Self::acquire_timeout`]).
    #[inline]
    pub fn reserve(&self, n: u64, max_delay: Duration) -> Result<Reservation<C>> {
        self.0.reserve(n, max_delay)
    }

    /// Admit `cost` units, waiting up to `timeout` for them: the bucket books them with
    /// [`Self::reserve`] and sleeps the delay (refused at once, consuming nothing, when the
    /// delay exceeds `timeout`); a split bucket sleeps the exact retry-after and tries again.
    /// The returned decision is allowed, or denied with nothing consumed.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    pub fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        self.0.acquire_timeout(cost, timeout)
    }
}

/// An unkeyed fixed window or weighted sliding window: resolved with [`Limiter::window`].
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("limit.shm");
/// use std::time::Duration;
/// use shmlimit::{FixedWindow, Limiter};
/// let limiter = Limiter::builder()
///     .limit("per-minute", FixedWindow::new(2, Duration::from_secs(60)))
///     .create_or_open(&path)?;
/// let limit = limiter.window("per-minute")?;
/// assert!(limit.peek(2)?.is_allowed());        // peeking consumes nothing
/// let grant = limit.try_acquire(2)?;
/// assert!(grant.is_allowed());
/// assert!(limit.try_acquire(1)?.is_denied());
/// limit.refund(&grant)?;                       // the work was never sent
/// assert!(limit.try_acquire(1)?.is_allowed());
/// assert!(limit.try_acquire(3).is_err());      // more than the limit can ever grant
/// limit.set_limit(3)?;                         // live, in every process
/// assert!(limit.try_acquire(2)?.is_allowed());
/// assert_eq!(limit.stats().allowed, 3);
/// # Ok(()) }
/// ```
pub struct WindowLimit<C: Clock = MonotonicClock>(Limit<C>);

typed_handle!(WindowLimit, LimitKind::Window, window);
unkeyed_rate!(WindowLimit, try_acquire_window);
window_retune!(WindowLimit);

impl<C: Clock> WindowLimit<C> {
    /// Admit `cost` units, waiting up to `timeout`: sleep the exact retry-after and try again
    /// until the grant or the deadline. The returned decision is allowed, or denied with
    /// nothing consumed.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    pub fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        self.0.acquire_timeout(cost, timeout)
    }
}

/// An exact sliding log: resolved with [`Limiter::sliding_log`]. Its limit is fixed at
/// creation (the log's entries are laid out for it), so it has no live retune.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("log.shm");
/// use std::time::Duration;
/// use shmlimit::{Limiter, SlidingLog};
/// let limiter = Limiter::builder()
///     .limit("exact", SlidingLog::new(3, Duration::from_secs(1)))
///     .create_or_open(&path)?;
/// let exact = limiter.sliding_log("exact")?;
/// assert!(exact.try_acquire(3)?.is_allowed());
/// let denied = exact.try_acquire(1)?;
/// assert!(denied.is_denied() && denied.retry_after_ns() > 0);
/// # Ok(()) }
/// ```
pub struct SlidingLogLimit<C: Clock = MonotonicClock>(Limit<C>);

typed_handle!(SlidingLogLimit, LimitKind::SlidingLog, sliding_log);
unkeyed_rate!(SlidingLogLimit, try_acquire);

impl<C: Clock> SlidingLogLimit<C> {
    /// Admit `cost` units, waiting up to `timeout`: sleep the exact retry-after and try again
    /// until the grant or the deadline. The returned decision is allowed, or denied with
    /// nothing consumed.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    pub fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        self.0.acquire_timeout(cost, timeout)
    }
}
