//! The traits for code generic over the kinds (middleware, tests, `Box<dyn RateLimit>`),
//! each implemented once for the handle of every kind with the matching kind trait.

use crate::engine::keyed::Keyed;
use std::time::Duration;

use super::kind::{KeyedRate, Kind, UnkeyedRate};
use super::{Handle, LimitKind};
#[cfg(doc)]
use super::{KeyedTokenBucketLimit, TokenBucketLimit};
use crate::algo::Decision;
use crate::clock::Clock;
use crate::error::Result;
use crate::limiter::Limit;

mod sealed {
    pub trait Sealed {}
}

/// A typed handle: its untyped inspection view. Implemented by the handles of this crate only.
pub trait TypedLimit<C: Clock>: sealed::Sealed {
    /// The untyped inspection view of this limit (name, definition, statistics, ...).
    fn as_limit(&self) -> &Limit<C>;

    /// The limit's name.
    fn name(&self) -> &str {
        self.as_limit().name()
    }

    /// Decisions of this limit so far, summed over all processes.
    fn stats(&self) -> crate::limiter::Stats {
        self.as_limit().stats()
    }

    /// The most one decision can grant under the current (possibly retuned) parameters.
    fn capacity(&self) -> u64 {
        self.as_limit().capacity()
    }

    /// The kind of this limit.
    fn kind(&self) -> LimitKind {
        self.as_limit().kind()
    }
}

// A boxed handle (`Box<dyn RateLimit>`, for code that picks the kind at run time) is a handle.
impl<T: sealed::Sealed + ?Sized> sealed::Sealed for Box<T> {}

impl<C: Clock, T: TypedLimit<C> + ?Sized> TypedLimit<C> for Box<T> {
    fn as_limit(&self) -> &Limit<C> {
        (**self).as_limit()
    }
}

impl<C: Clock, T: RateLimit<C> + ?Sized> RateLimit<C> for Box<T> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<Decision> {
        (**self).try_acquire(cost)
    }
    #[inline]
    fn peek(&self, cost: u64) -> Result<Decision> {
        (**self).peek(cost)
    }
    fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        (**self).try_acquire_at(cost, now_ns)
    }
    fn refund(&self, grant: &Decision) -> Result<()> {
        (**self).refund(grant)
    }
    fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
        (**self).refund_units(grant, units)
    }
    fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        (**self).acquire_timeout(cost, timeout)
    }
}

impl<C: Clock, T: KeyedRateLimit<C> + ?Sized> KeyedRateLimit<C> for Box<T> {
    #[inline]
    fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        (**self).try_acquire_key(key, cost)
    }
    #[inline]
    fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        (**self).peek_key(key, cost)
    }
    fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision> {
        (**self).try_acquire_key_at(key, cost, now_ns)
    }
    fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
        (**self).refund_key(key, grant)
    }
    fn key_occupancy(&self) -> (usize, usize) {
        (**self).key_occupancy()
    }
}

/// The decisions every unkeyed rate limit (token bucket, window, sliding log) makes, for code
/// generic over them (middleware, tests, `Box<dyn RateLimit>`); what
/// [`Check::new`](crate::Check::new) composes. Each method is the handle's inherent method of
/// the same name.
pub trait RateLimit<C: Clock>: TypedLimit<C> {
    /// Admit `cost` units now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`].
    fn try_acquire(&self, cost: u64) -> Result<Decision>;
    /// The decision [`RateLimit::try_acquire`] would make now, consuming nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`].
    fn peek(&self, cost: u64) -> Result<Decision>;
    /// [`RateLimit::try_acquire`] dated at `now_ns`.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire_at`].
    fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision>;
    /// Give back what `grant` admitted.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::refund`].
    fn refund(&self, grant: &Decision) -> Result<()>;
    /// Give back `units` of what `grant` admitted.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::refund`].
    fn refund_units(&self, grant: &Decision, units: u64) -> Result<()>;
    /// Admit `cost` units, waiting up to `timeout` for them.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::acquire_timeout`].
    fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision>;
}

/// The decisions every keyed rate limit (keyed token bucket or window) makes, for code generic
/// over them; what [`Check::keyed`](crate::Check::keyed) composes. Each method is the
/// handle's inherent method of the same name.
pub trait KeyedRateLimit<C: Clock>: TypedLimit<C> {
    /// Admit `cost` units for `key` now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// As [`KeyedTokenBucketLimit::try_acquire_key`].
    fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision>;
    /// The decision [`KeyedRateLimit::try_acquire_key`] would make now, consuming nothing.
    ///
    /// # Errors
    ///
    /// As [`KeyedTokenBucketLimit::try_acquire_key`].
    fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision>;
    /// [`KeyedRateLimit::try_acquire_key`] dated at `now_ns`.
    ///
    /// # Errors
    ///
    /// As [`KeyedTokenBucketLimit::try_acquire_key_at`].
    fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision>;
    /// Give back what `grant` admitted for `key`.
    ///
    /// # Errors
    ///
    /// As [`KeyedTokenBucketLimit::refund_key`].
    fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()>;
    /// How many of the table's slots hold a key, and how many slots it has.
    fn key_occupancy(&self) -> (usize, usize);
}

impl<K: Kind, C: Clock> sealed::Sealed for Handle<K, C> {}

impl<K: Kind, C: Clock> TypedLimit<C> for Handle<K, C> {
    fn as_limit(&self) -> &Limit<C> {
        &self.limit
    }
}

impl<K: UnkeyedRate, C: Clock> RateLimit<C> for Handle<K, C> {
    #[inline(always)]
    fn try_acquire(&self, cost: u64) -> Result<Decision> {
        Handle::try_acquire(self, cost)
    }
    #[inline(always)]
    fn peek(&self, cost: u64) -> Result<Decision> {
        Handle::peek(self, cost)
    }
    fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        Handle::try_acquire_at(self, cost, now_ns)
    }
    fn refund(&self, grant: &Decision) -> Result<()> {
        Handle::refund(self, grant)
    }
    fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
        Handle::refund_units(self, grant, units)
    }
    fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        Handle::acquire_timeout(self, cost, timeout)
    }
}

impl<K: KeyedRate, C: Clock> KeyedRateLimit<C> for Handle<K, C> {
    #[inline(always)]
    fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        Keyed(self.limit.site()).try_acquire_key(key, cost)
    }
    #[inline(always)]
    fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        Keyed(self.limit.site()).peek_key(key, cost)
    }
    fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision> {
        Keyed(self.limit.site()).try_acquire_key_at(key, cost, now_ns)
    }
    fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
        Keyed(self.limit.site()).refund_key(key, grant)
    }
    fn key_occupancy(&self) -> (usize, usize) {
        self.limit.key_occupancy()
    }
}
