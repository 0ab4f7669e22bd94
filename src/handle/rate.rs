//! The unkeyed rate handles: token bucket, window, sliding log.

use std::time::Duration;

use super::kind::{self, sealed::Decide, UnkeyedRate};
use super::Handle;
use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::bucket::{Bucket, Reservation};
use crate::engine::rate::RateEngine;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// An unkeyed token bucket (GCRA), split into sub-buckets or not: resolved with
/// [`Limiter::token_bucket`](crate::Limiter::token_bucket).
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
pub type TokenBucketLimit<C = MonotonicClock> = Handle<kind::TokenBucket, C>;

/// An unkeyed fixed window or weighted sliding window: resolved with
/// [`Limiter::window`](crate::Limiter::window).
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
pub type WindowLimit<C = MonotonicClock> = Handle<kind::Window, C>;

/// An exact sliding log: resolved with [`Limiter::sliding_log`](crate::Limiter::sliding_log).
/// Its limit is fixed at creation (the log's entries are laid out for it), so it has no live
/// retune.
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
pub type SlidingLogLimit<C = MonotonicClock> = Handle<kind::SlidingLog, C>;

/// The decisions of an unkeyed rate limit (token bucket, window, sliding log).
impl<K: UnkeyedRate, C: Clock> Handle<K, C> {
    /// The engine of this handle's kind, on its site.
    #[inline(always)]
    fn engine(&self) -> <K as Decide>::Engine<'_, C> {
        RateEngine::on(self.limit.site())
    }

    /// Admit `cost` units now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `cost` can never be
    /// granted; [`Error::CorruptState`] when the shared state is damaged (fail closed).
    #[inline(always)]
    pub fn try_acquire(&self, cost: u64) -> Result<Decision> {
        self.engine().try_acquire(cost)
    }

    /// The decision [`Self::try_acquire`] would make now, consuming nothing.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    #[inline(always)]
    pub fn peek(&self, cost: u64) -> Result<Decision> {
        self.engine().run(cost, false, None)
    }

    /// [`Self::try_acquire`] dated at `now_ns` on the monotonic timeline instead of the
    /// clock (for replaying traces and for tests). A `now_ns` older than the stored
    /// state is clamped as any stale read is.
    ///
    /// A date is checked against the limit's clock (one clock read, on this dated path
    /// only): a date ahead of it by more than
    /// [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE), or beyond what the state can
    /// encode ([`MAX_DATE_NS`](crate::consts::MAX_DATE_NS)), is
    /// refused, so that no date can leave a state that locks other processes out, opens
    /// the limit to them, or fails their decisions.
    ///
    /// A window (fixed, sliding, or a sliding log) decides a date ahead of the clock at the
    /// clock's time: a window's state names the window it counts, and moving it into a window
    /// the clock has not reached would count every other caller's decisions against the next
    /// window. A bucket decides at the date.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`]; [`Error::ClockOutOfRange`] for a date ahead of the
    /// clock by more than [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE) or beyond
    /// [`MAX_DATE_NS`](crate::consts::MAX_DATE_NS), consuming nothing.
    pub fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        self.limit.site().check_date(now_ns)?;
        self.engine().run(cost, true, Some(now_ns))
    }

    /// Give back what `grant` admitted, for work that was admitted but never done.
    ///
    /// A refund can never create more budget than the grant took: a bucket never fills
    /// past full, a window refund only applies while the grant's window is still
    /// counted, and a log refund frees entries dated no later than the grant. Refunding
    /// a denied (or shadow-denied) decision is a no-op. Refund each grant at most once:
    /// a second refund of the same grant gives its cost back again, which is budget no
    /// request returned.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`]; [`Error::WrongKind`] for a grant another limit made.
    pub fn refund(&self, grant: &Decision) -> Result<()> {
        self.engine().refund_units(grant, grant.cost)
    }

    /// Give back `units` of what `grant` admitted (at most its cost).
    ///
    /// # Errors
    ///
    /// As [`Self::refund`].
    pub fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
        self.engine().refund_units(grant, units)
    }

    /// Admit `cost` units, waiting up to `timeout` for them. The returned decision is allowed,
    /// or denied with nothing consumed.
    ///
    /// A token bucket books them with [`TokenBucketLimit::reserve`] and sleeps the delay
    /// (refused at once, consuming nothing, when the delay exceeds `timeout`); a split bucket,
    /// a window and a sliding log sleep the exact retry-after and try again until the grant or
    /// the deadline.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    pub fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        self.engine().acquire_timeout(cost, timeout)
    }
}

impl<C: Clock> Handle<kind::TokenBucket, C> {
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
        Bucket(self.limit.site()).reserve(n, max_delay)
    }
}
