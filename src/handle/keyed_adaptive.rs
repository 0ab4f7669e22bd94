//! The keyed adaptive concurrency handle: one adaptive limit per key.

use std::time::Duration;

use super::kind;
use super::Handle;
use crate::algo::adaptive::Outcome;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::adaptive::per_key::KeyedAdaptive;
use crate::engine::adaptive::{AdaptivePermit, AdaptiveStatus};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// A keyed adaptive concurrency limit: per key (a downstream host, a tenant), at most `L_key`
/// permits held at once across every process, where each key's `L_key` moves within
/// `[min, max]` from the latency and outcome of that key's releases alone, exactly as an
/// [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit)'s limit does (the same
/// update, window, re-measure schedule and bounds, per key); resolved with
/// [`Limiter::keyed_adaptive_concurrency`](crate::Limiter::keyed_adaptive_concurrency).
/// Defined with [`Builder::keyed_limit`](crate::Builder::keyed_limit), `max` at most 64. A
/// permit is reclaimed when its holder dies (or its lease expires), as a
/// [`KeyedConcurrencyLimit`](crate::KeyedConcurrencyLimit)'s.
///
/// A key seen for the first time starts at the initial limit. A key with no permit held may
/// lose its slot (and what it learned) to another key when the table is full around it, and
/// comes back at the initial limit.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("hosts.shm");
/// use shmlimit::{AdaptiveConcurrency, Keyed, Limiter, Outcome};
/// let limiter = Limiter::builder()
///     .keyed_limit("per_host", AdaptiveConcurrency::new(2, 64), Keyed::new(256))
///     .create_or_open(&path)?;
/// let per_host = limiter.keyed_adaptive_concurrency("per_host")?;
/// let a = per_host.try_acquire(b"db-1")?.expect("a free permit");
/// let b = per_host.try_acquire(b"db-1")?.expect("a free permit");
/// assert!(per_host.try_acquire(b"db-1")?.is_none()); // db-1's limit starts at 2
/// assert!(per_host.try_acquire(b"db-2")?.is_some()); // db-2 has its own
/// a.release(Outcome::Ok); // a sample of db-1's
/// drop(b); // no sample
/// let status = per_host.status(b"db-1")?;
/// assert_eq!((status.permits, status.in_flight), (2, 0));
/// # Ok(()) }
/// ```
pub type KeyedAdaptiveConcurrencyLimit<C = MonotonicClock> =
    Handle<kind::KeyedAdaptiveConcurrency, C>;

impl<C: Clock> Handle<kind::KeyedAdaptiveConcurrency, C> {
    /// Take a permit of `key` if fewer than its current limit are held now (`None`
    /// otherwise); the permits of dead holders are taken over when the key is at its limit.
    /// When the table has no slot for a new key, the limit's
    /// [`FullPolicy`](crate::FullPolicy) decides (`Allow`: a permit that holds nothing).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for an empty key or one longer than
    /// [`MAX_KEY_LEN`](crate::consts::MAX_KEY_LEN); [`Error::TableFull`] under
    /// [`FullPolicy::Error`](crate::FullPolicy::Error); [`Error::Io`] if this process's own
    /// `/proc/self/stat` cannot be read.
    #[inline]
    pub fn try_acquire(&self, key: &[u8]) -> Result<Option<AdaptivePermit<C>>> {
        KeyedAdaptive(self.limit.site()).try_acquire(key)
    }

    /// [`Self::try_acquire`], waiting up to `timeout` on a futex in the file that every
    /// release of a key of the same futex bucket (one of 8, by key) wakes (re-checking at
    /// least every [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK)).
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    #[inline]
    pub fn acquire_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<AdaptivePermit<C>>> {
        KeyedAdaptive(self.limit.site()).acquire_timeout(key, timeout)
    }

    /// The current limit of `key`, its range, its long and recent RTT, and its permits held
    /// now (a key without a slot: its initial limit, nothing held).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::WrongKind`] if the file was replaced by one where this
    /// name is another kind.
    pub fn status(&self, key: &[u8]) -> Result<AdaptiveStatus> {
        KeyedAdaptive(self.limit.site().current()?).status(key)
    }

    /// The status of every key that has a slot now, by its tag ([`Self::key_tag`] gives a
    /// key's), in slot order: what `shmlimit inspect` shows of the keys. The table stores no
    /// key, only its tag. Each key is read on its own while decisions go on, so the list is
    /// not one instant's.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the file was replaced by one where this name is another kind.
    pub fn key_statuses(&self) -> Result<Vec<(u64, AdaptiveStatus)>> {
        KeyedAdaptive(self.limit.site().current()?).key_statuses()
    }

    /// Whether `now_ns` (on the limit's clock) falls in a re-measure of the RTT, when at most
    /// `min` permits of a key are granted (every key re-measures on the same schedule, each
    /// its own RTT; see [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit)).
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the file was replaced by one where this name is another kind.
    pub fn remeasuring_at(&self, now_ns: u64) -> Result<bool> {
        KeyedAdaptive(self.limit.site().current()?).remeasuring_at(now_ns)
    }

    /// Release the permit `id` ([`AdaptivePermit::id`], kept by id as the C ABI does)
    /// reporting `outcome` and the latency the caller measured into its key's limit.
    /// `Ok(false)` if this process does not hold it.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    pub fn release_with(&self, id: u64, outcome: Outcome, latency: Duration) -> Result<bool> {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        KeyedAdaptive(self.limit.site()).release_id(id, outcome, ns)
    }
}
