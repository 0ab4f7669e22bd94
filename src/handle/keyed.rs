//! The keyed handles' shared operations and the keyed rate handles: keyed token bucket, keyed
//! window.

use super::kind::{self, KeyedRate, PerKey};
use super::Handle;
use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::keyed::Keyed;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// A keyed token bucket: one bucket per key (a user id, an API key, an address), all with the
/// same parameters, in one table of the file; resolved with
/// [`Limiter::keyed_token_bucket`](crate::Limiter::keyed_token_bucket).
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("keyed.shm");
/// use shmlimit::{FullPolicy, Keyed, Limiter, TokenBucket};
///
/// let limiter = Limiter::builder()
///     .keyed_limit(
///         "per_user",
///         TokenBucket::per_second(10).burst(2),
///         Keyed::new(1 << 14).on_full(FullPolicy::Deny),
///     )
///     .create_or_open(&path)?;
/// let per_user = limiter.keyed_token_bucket("per_user")?;
/// assert!(per_user.try_acquire_key(b"alice", 1)?.is_allowed());
/// let grant = per_user.try_acquire_key(b"alice", 1)?;
/// assert!(per_user.try_acquire_key(b"alice", 1)?.is_denied()); // alice's burst is spent
/// assert!(per_user.try_acquire_key(b"bob", 2)?.is_allowed()); // bob has his own
/// per_user.refund_key(b"alice", &grant)?;
/// assert!(per_user.peek_key(b"alice", 1)?.is_allowed());
/// assert_eq!(per_user.key_occupancy(), (2, 1 << 14));
/// assert!(limiter.token_bucket("per_user").is_err()); // a keyed limit needs a key
/// # Ok(()) }
/// ```
pub type KeyedTokenBucketLimit<C = MonotonicClock> = Handle<kind::KeyedTokenBucket, C>;

/// A keyed fixed or sliding window: one window state per key, all with the same limit, in one
/// table of the file; resolved with [`Limiter::keyed_window`](crate::Limiter::keyed_window).
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("peek.shm");
/// use std::time::Duration;
/// use shmlimit::{FixedWindow, Keyed, Limiter};
///
/// let limiter = Limiter::builder()
///     .keyed_limit("per_ip", FixedWindow::new(3, Duration::from_secs(60)), Keyed::new(64))
///     .create_or_open(&path)?;
/// let per_ip = limiter.keyed_window("per_ip")?;
/// assert_eq!(per_ip.peek_key(b"10.0.0.1", 1)?.remaining(), 2);
/// assert_eq!(per_ip.key_occupancy(), (0, 64)); // peeking inserted nothing
/// assert!(per_ip.try_acquire_key(b"10.0.0.1", 3)?.is_allowed());
/// assert!(per_ip.peek_key(b"10.0.0.1", 1)?.is_denied());
/// per_ip.set_limit(4)?; // every key's limit, live
/// assert!(per_ip.try_acquire_key(b"10.0.0.1", 1)?.is_allowed());
/// # Ok(()) }
/// ```
pub type KeyedWindowLimit<C = MonotonicClock> = Handle<kind::KeyedWindow, C>;

/// The decisions of a keyed rate limit (keyed token bucket or window).
impl<K: KeyedRate, C: Clock> Handle<K, C> {
    /// Admit `cost` units for `key` now, or deny and consume nothing.
    ///
    /// A key seen for the first time gets a fresh state (a full bucket, empty windows);
    /// a key whose state is back to fresh may lose its slot to another key, which loses
    /// it nothing. When the table has no slot for a new key, the limit's
    /// [`FullPolicy`](crate::FullPolicy) decides.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::InvalidKey`] for an empty key or one longer than
    /// [`MAX_KEY_LEN`](crate::consts::MAX_KEY_LEN); [`Error::CostExceedsCapacity`];
    /// [`Error::TableFull`] under [`FullPolicy::Error`](crate::FullPolicy::Error);
    /// [`Error::CorruptState`]; [`Error::WrongKind`] on a target without a 16-byte
    /// compare-and-swap.
    #[inline(always)]
    pub fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        Keyed(self.limit.site()).try_acquire_key(key, cost)
    }

    /// The decision [`Self::try_acquire_key`] would make now, consuming nothing and
    /// inserting nothing.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire_key`].
    #[inline(always)]
    pub fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        Keyed(self.limit.site()).peek_key(key, cost)
    }

    /// [`Self::try_acquire_key`] dated at `now_ns` on the monotonic timeline instead of
    /// the clock (for replaying traces and for tests); dates are checked as by
    /// [`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at): at
    /// most [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE) ahead of the clock.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire_key`]; [`Error::ClockOutOfRange`].
    pub fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision> {
        Keyed(self.limit.site()).try_acquire_key_at(key, cost, now_ns)
    }

    /// Give back what `grant` (a decision for the same `key`) admitted, for work that
    /// was admitted but never done. Refunding a denied, shadow-denied or fail-open
    /// decision is a no-op.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::CorruptState`]; [`Error::WrongKind`] for a grant
    /// another limit made.
    pub fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
        Keyed(self.limit.site()).refund_key(key, grant)
    }
}

/// The key table of a keyed limit (keyed token bucket, window or concurrency).
impl<K: PerKey, C: Clock> Handle<K, C> {
    /// How many of the table's slots hold a key, and how many slots it has.
    pub fn key_occupancy(&self) -> (usize, usize) {
        self.limit.key_occupancy()
    }

    /// Retire every key whose state is back to fresh (bucket full, windows over, no permit
    /// held), and any pending claim a killed process left behind; returns how many were
    /// retired. Decisions reclaim idle slots on demand, so this is never needed for
    /// correctness: it is an explicit garbage-collection pass (the CLI's `gc`) that reads
    /// every slot.
    pub fn reclaim_idle_keys(&self) -> usize {
        self.limit.reclaim_idle_keys()
    }

    /// The tag this file's key tables know `key` by: a 63-bit keyed hash of its bytes
    /// under the file's secret seed (the same in every process and language), what
    /// [`PermitHolder::key_tag`](crate::PermitHolder::key_tag) reports.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`].
    pub fn key_tag(&self, key: &[u8]) -> Result<u64> {
        Keyed(self.limit.site()).key_tag(key)
    }
}
