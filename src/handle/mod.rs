//! Typed limit handles: the kind of a limit is a type.
//!
//! [`Limiter::limit`](crate::Limiter::limit) resolves a name to the untyped [`Limit`], the inspection view every kind
//! shares (name, definition, live parameters, statistics, reset). Deciding goes through a handle
//! resolved for the limit's kind, which has exactly the operations that apply to it:
//!
//! | the limit | resolve with | handle | decides with |
//! |---|---|---|---|
//! | token bucket (split or not) | [`Limiter::token_bucket`](crate::Limiter::token_bucket) | [`TokenBucketLimit`] | `try_acquire`, `reserve` |
//! | fixed or sliding window | [`Limiter::window`](crate::Limiter::window) | [`WindowLimit`] | `try_acquire` |
//! | sliding log | [`Limiter::sliding_log`](crate::Limiter::sliding_log) | [`SlidingLogLimit`] | `try_acquire` |
//! | concurrency | [`Limiter::concurrency`](crate::Limiter::concurrency) | [`ConcurrencyLimit`] | `try_acquire_permit` |
//! | keyed token bucket | [`Limiter::keyed_token_bucket`](crate::Limiter::keyed_token_bucket) | [`KeyedTokenBucketLimit`] | `try_acquire_key` |
//! | keyed fixed or sliding window | [`Limiter::keyed_window`](crate::Limiter::keyed_window) | [`KeyedWindowLimit`] | `try_acquire_key` |
//! | keyed concurrency | [`Limiter::keyed_concurrency`](crate::Limiter::keyed_concurrency) | [`KeyedConcurrencyLimit`] | `try_acquire_key_permit` |
//!
//! The kind is checked once, when the name is resolved: a limit of another kind is an
//! [`Error::WrongKind`] that names the limit, its kind and the accessor that resolves it. A
//! handle is a newtype over the untyped handle: a typed call runs the same code as the untyped
//! one did, with no check added. Handles are `Send + Sync` and cheap to clone, like [`Limit`].
//!
//! # Implementation details
//!
//! A file replaced at its path is followed by name (see `REPLACEMENT_CHECK`): if the limit of
//! that name in the new file has another kind, the handle's decisions fail with
//! [`Error::WrongKind`] from then on, which is the one way a typed call can still meet it.

mod concurrency;
mod keyed;
mod macros;
mod rate;

use macros::{bucket_retune, keyed_rate, permit_common, typed_handle, unkeyed_rate, window_retune};

pub use concurrency::{ConcurrencyLimit, KeyedConcurrencyLimit};
pub use keyed::{KeyedTokenBucketLimit, KeyedWindowLimit};
pub use rate::{SlidingLogLimit, TokenBucketLimit, WindowLimit};

use std::time::Duration;

use crate::algo::Decision;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter::Limit;
use crate::spec::Algorithm;

/// The kind of a limit: which typed handle resolves it (see [`Limit::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// An unkeyed token bucket, split or not: [`TokenBucketLimit`].
    TokenBucket,
    /// An unkeyed fixed or sliding window: [`WindowLimit`].
    Window,
    /// A sliding log: [`SlidingLogLimit`].
    SlidingLog,
    /// An unkeyed concurrency limit: [`ConcurrencyLimit`].
    Concurrency,
    /// A keyed token bucket: [`KeyedTokenBucketLimit`].
    KeyedTokenBucket,
    /// A keyed fixed or sliding window: [`KeyedWindowLimit`].
    KeyedWindow,
    /// A keyed concurrency limit: [`KeyedConcurrencyLimit`].
    KeyedConcurrency,
}

impl LimitKind {
    /// The kind of a limit defined with `algorithm`, keyed or not.
    pub fn of(algorithm: &Algorithm, keyed: bool) -> LimitKind {
        match (algorithm, keyed) {
            (Algorithm::TokenBucket { .. }, false) => LimitKind::TokenBucket,
            (Algorithm::TokenBucket { .. }, true) => LimitKind::KeyedTokenBucket,
            (Algorithm::FixedWindow { .. } | Algorithm::SlidingWindow { .. }, false) => {
                LimitKind::Window
            }
            (Algorithm::FixedWindow { .. } | Algorithm::SlidingWindow { .. }, true) => {
                LimitKind::KeyedWindow
            }
            // A keyed sliding log is refused at definition.
            (Algorithm::SlidingLog { .. }, _) => LimitKind::SlidingLog,
            (Algorithm::Concurrency { .. }, false) => LimitKind::Concurrency,
            (Algorithm::Concurrency { .. }, true) => LimitKind::KeyedConcurrency,
        }
    }

    /// The [`Limiter`](crate::Limiter) method that resolves a limit of this kind, e.g. `token_bucket`.
    pub fn accessor(self) -> &'static str {
        match self {
            LimitKind::TokenBucket => "token_bucket",
            LimitKind::Window => "window",
            LimitKind::SlidingLog => "sliding_log",
            LimitKind::Concurrency => "concurrency",
            LimitKind::KeyedTokenBucket => "keyed_token_bucket",
            LimitKind::KeyedWindow => "keyed_window",
            LimitKind::KeyedConcurrency => "keyed_concurrency",
        }
    }

    /// Whether limits of this kind are decided per key.
    pub fn is_keyed(self) -> bool {
        matches!(
            self,
            LimitKind::KeyedTokenBucket | LimitKind::KeyedWindow | LimitKind::KeyedConcurrency
        )
    }
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitKind::TokenBucket => "token bucket",
            LimitKind::Window => "window",
            LimitKind::SlidingLog => "sliding log",
            LimitKind::Concurrency => "concurrency limit",
            LimitKind::KeyedTokenBucket => "keyed token bucket",
            LimitKind::KeyedWindow => "keyed window",
            LimitKind::KeyedConcurrency => "keyed concurrency limit",
        })
    }
}

impl<C: Clock> Limit<C> {
    /// The kind of this limit: which typed handle resolves it.
    pub fn kind(&self) -> LimitKind {
        LimitKind::of(self.algorithm(), self.def().keyed.is_some())
    }

    /// This handle as the typed handle of kind `want`, or the [`Error::WrongKind`] that names
    /// the limit, its kind and the accessor that resolves it.
    fn typed(self, want: LimitKind) -> Result<Limit<C>> {
        let kind = self.kind();
        if kind == want {
            return Ok(self.into_typed());
        }
        Err(Error::WrongKind {
            limit: self.name().to_owned(),
            reason: format!(
                "this limit is a {kind}, not a {want}: resolve it with Limiter::{}",
                kind.accessor()
            ),
        })
    }
}

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
