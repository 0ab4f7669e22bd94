//! The concurrency handles: permits, unkeyed or per key.

use std::time::Duration;

use super::kind::{self, Permits};
use super::Handle;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::permits::{Permit, Permits as PermitEngine};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// An unkeyed concurrency limit: at most `C` permits held at once across every process;
/// resolved with [`Limiter::concurrency`](crate::Limiter::concurrency). A permit is released
/// when dropped, and reclaimed when its holder dies or its lease (if any) expires.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("permit.shm");
/// use shmlimit::{Concurrency, Limiter};
/// let limiter = Limiter::builder()
///     .limit("jobs", Concurrency::new(1))
///     .create_or_open(&path)?;
/// let jobs = limiter.concurrency("jobs")?;
/// let permit = jobs.try_acquire_permit()?.unwrap();
/// assert!(jobs.try_acquire_permit()?.is_none());
/// assert_eq!(jobs.permit_holders().len(), 1);
/// let id = permit.into_id(); // e.g. handed to C code
/// assert!(jobs.release_permit(id)?);
/// assert!(!jobs.release_permit(id)?); // only once
/// assert!(jobs.try_acquire_permit()?.is_some());
/// assert!(limiter.token_bucket("jobs").is_err()); // no rate to acquire from
/// # Ok(()) }
/// ```
pub type ConcurrencyLimit<C = MonotonicClock> = Handle<kind::Concurrency, C>;

/// A keyed concurrency limit: at most `C` permits held at once per key; resolved with
/// [`Limiter::keyed_concurrency`](crate::Limiter::keyed_concurrency).
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("per_user.shm");
/// use shmlimit::{Concurrency, Keyed, Limiter};
/// let limiter = Limiter::builder()
///     .keyed_limit("in_flight", Concurrency::new(2), Keyed::new(1 << 12))
///     .create_or_open(&path)?;
/// let in_flight = limiter.keyed_concurrency("in_flight")?;
/// let a = in_flight.try_acquire_key_permit(b"alice")?.expect("alice has two");
/// let b = in_flight.try_acquire_key_permit(b"alice")?.expect("alice has two");
/// assert!(in_flight.try_acquire_key_permit(b"alice")?.is_none()); // both held
/// assert!(in_flight.try_acquire_key_permit(b"bob")?.is_some()); // bob has his own
/// assert_eq!(in_flight.key_permits_held(b"alice")?, 2);
/// drop(a);
/// assert_eq!(in_flight.key_permits_held(b"alice")?, 1);
/// # drop(b);
/// # Ok(()) }
/// ```
pub type KeyedConcurrencyLimit<C = MonotonicClock> = Handle<kind::KeyedConcurrency, C>;

/// The permit operations both concurrency kinds share.
impl<K: Permits, C: Clock> Handle<K, C> {
    /// Release the permit named by `id` ([`Permit::id`](crate::Permit::id) /
    /// [`Permit::into_id`](crate::Permit::into_id)), if this process holds it.
    /// `Ok(false)` when it does not: already released, taken over after its lease, a
    /// reset, another process's permit, or an id that names nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if this process's own `/proc/self/stat` cannot be read.
    pub fn release_permit(&self, id: u64) -> Result<bool> {
        PermitEngine(self.limit.site()).release_permit(id)
    }

    /// Who holds this limit's permits now (see [`Limit::permit_holders`](crate::Limit::permit_holders)).
    pub fn permit_holders(&self) -> Vec<crate::engine::permits::PermitHolder> {
        self.limit.permit_holders()
    }

    /// Free every permit whose owner is gone or whose lease expired, and wake waiters
    /// for them; returns how many. Acquirers do the same on their slow path, so this is
    /// never needed for correctness.
    pub fn reclaim_dead_permits(&self) -> usize {
        self.limit.reclaim_dead_permits()
    }
}

impl<C: Clock> Handle<kind::Concurrency, C> {
    /// Take one permit if one is free now (`None` if all are held): an RAII [`Permit`],
    /// released when dropped. When none is free, the permits of holders that died (or whose
    /// lease expired) are taken over first.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if this process's own `/proc/self/stat` cannot be read.
    #[inline]
    pub fn try_acquire_permit(&self) -> Result<Option<Permit<C>>> {
        PermitEngine(self.limit.site()).try_acquire_permit()
    }

    /// [`Self::try_acquire_permit`], waiting up to `timeout` for a permit to be released (or
    /// for a holder to die or its lease to expire), on a futex in the shared file that every
    /// release wakes; re-checks at least every [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK). A
    /// shadow limit never waits.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire_permit`].
    #[inline]
    pub fn acquire_permit_timeout(&self, timeout: Duration) -> Result<Option<Permit<C>>> {
        PermitEngine(self.limit.site()).acquire_permit_timeout(timeout)
    }
}

impl<C: Clock> Handle<kind::KeyedConcurrency, C> {
    /// Take one of `key`'s permits if one is free now (`None` if all are held): an RAII
    /// [`Permit`], released when dropped. A key's permits are its own: at most `C` of each key
    /// are held at once, whatever the key table does meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for an empty key or one longer than
    /// [`MAX_KEY_LEN`](crate::consts::MAX_KEY_LEN); [`Error::TableFull`] when the table is full and the
    /// policy is [`FullPolicy::Error`](crate::FullPolicy::Error); [`Error::Io`] as
    /// [`ConcurrencyLimit::try_acquire_permit`]; [`Error::WrongKind`] on a target without a
    /// 16-byte compare-and-swap.
    #[inline]
    pub fn try_acquire_key_permit(&self, key: &[u8]) -> Result<Option<Permit<C>>> {
        PermitEngine(self.limit.site()).try_acquire_key_permit(key)
    }

    /// [`Self::try_acquire_key_permit`], waiting up to `timeout` for one of the key's permits
    /// to be released (or for a holder to die or its lease to expire), on a futex in the shared
    /// file that every release of a key of the same futex bucket (one of 8, by key) wakes;
    /// re-checks at least every [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK), which is also how
    /// often a waiter for a key that found the table full looks for a free slot again.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire_key_permit`].
    #[inline]
    pub fn acquire_key_permit_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<Permit<C>>> {
        PermitEngine(self.limit.site()).acquire_key_permit_timeout(key, timeout)
    }

    /// How many of `key`'s permits are held now (0 for a key without a slot).
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire_key_permit`].
    pub fn key_permits_held(&self, key: &[u8]) -> Result<u32> {
        PermitEngine(self.limit.site().current()?).key_permits_held(key)
    }
}
