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
//! | adaptive concurrency | [`Limiter::adaptive_concurrency`](crate::Limiter::adaptive_concurrency) | [`AdaptiveConcurrencyLimit`] | `try_acquire`, then `release(outcome)` |
//! | keyed adaptive concurrency | [`Limiter::keyed_adaptive_concurrency`](crate::Limiter::keyed_adaptive_concurrency) | [`KeyedAdaptiveConcurrencyLimit`] | `try_acquire(key)`, then `release(outcome)` |
//! | counters (window per call) | [`Limiter::counters`](crate::Limiter::counters) | [`CountersLimit`] | `incr`, `acquire_fixed`, `acquire_sliding`, `acquire_moving` |
//!
//! Each handle is one generic type, [`Handle<K, C>`](Handle), over a kind `K` (a marker of
//! [`kind`]) and a clock `C`; the names above are its aliases (`TokenBucketLimit<C>` is
//! `Handle<kind::TokenBucket, C>`). A method is written once, for every kind that has its kind
//! trait (see [`kind`] for the table), and [`Limiter::resolve`](crate::Limiter::resolve)
//! resolves any kind by its type.
//!
//! The kind is checked once, when the name is resolved: a limit of another kind is an
//! [`Error::WrongKind`] that names the limit, its kind and the accessor that resolves it. A
//! handle holds the untyped handle and nothing else: a typed call runs the same code as the
//! untyped one did, with no check added. Handles are `Send + Sync` and cheap to clone, like
//! [`Limit`].
//!
//! # Implementation details
//!
//! A file replaced at its path is followed by name (see `REPLACEMENT_CHECK`): if the limit of
//! that name in the new file has another kind, the handle's decisions fail with
//! [`Error::WrongKind`] from then on, which is the one way a typed call can still meet it.

mod adaptive;
mod concurrency;
mod counters;
pub(crate) mod dispatch;
mod keyed;
mod keyed_adaptive;
pub mod kind;
mod rate;
mod resolve;
mod retune;
mod traits;

pub use crate::spec::LimitKind;
pub use adaptive::AdaptiveConcurrencyLimit;
pub use concurrency::{ConcurrencyLimit, KeyedConcurrencyLimit};
pub use counters::{CountersLimit, SlidingCounts};
pub use keyed::{KeyedTokenBucketLimit, KeyedWindowLimit};
pub use keyed_adaptive::KeyedAdaptiveConcurrencyLimit;
pub use rate::{SlidingLogLimit, TokenBucketLimit, WindowLimit};
pub use traits::{KeyedRateLimit, RateLimit, TypedLimit};

use std::marker::PhantomData;

use crate::clock::{Clock, MonotonicClock};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::limiter::Limit;
use crate::spec::Algorithm;
use kind::Kind;

/// A limit resolved as its kind `K` (a marker of [`kind`]), deciding with the clock `C`: the
/// handle the hot path uses, with exactly the operations of its kind.
///
/// It is usually named by its alias: [`TokenBucketLimit`], [`WindowLimit`],
/// [`SlidingLogLimit`], [`ConcurrencyLimit`], [`KeyedTokenBucketLimit`], [`KeyedWindowLimit`],
/// [`KeyedConcurrencyLimit`]. It holds the untyped handle and nothing else (the kind is a type
/// only), so a call runs the untyped handle's code with no check added.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("api.shm");
/// use shmlimit::{kind, Handle, Limiter, TokenBucket, TokenBucketLimit};
/// let limiter = Limiter::builder()
///     .limit("api", TokenBucket::per_second(1).burst(2))
///     .create_or_open(&path)?;
/// let api: TokenBucketLimit = limiter.token_bucket("api")?;
/// let same: Handle<kind::TokenBucket> = limiter.resolve("api")?; // the same handle
/// assert!(api.try_acquire(2)?.is_allowed());
/// assert!(same.try_acquire(1)?.is_denied());
/// assert!(limiter.resolve::<kind::Window>("api").is_err()); // the kind is checked here
/// # Ok(()) }
/// ```
pub struct Handle<K: Kind, C: Clock = MonotonicClock> {
    limit: Limit<C>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind, C: Clock> Handle<K, C> {
    /// The handle of `limit`, whose kind is `K` (checked by the caller, once).
    fn of(limit: Limit<C>) -> Self {
        Handle {
            limit,
            kind: PhantomData,
        }
    }
}

impl<K: Kind, C: Clock> Clone for Handle<K, C> {
    fn clone(&self) -> Self {
        Handle::of(self.limit.clone())
    }
}

impl<K: Kind, C: Clock> std::fmt::Debug for Handle<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(K::HANDLE)
            .field("name", &self.name())
            .field("algorithm", self.algorithm())
            .finish()
    }
}

impl<K: Kind, C: Clock> From<Handle<K, C>> for Limit<C> {
    fn from(handle: Handle<K, C>) -> Limit<C> {
        handle.limit
    }
}

impl<K: Kind, C: Clock> AsRef<Limit<C>> for Handle<K, C> {
    fn as_ref(&self) -> &Limit<C> {
        &self.limit
    }
}

impl<K: Kind, C: Clock> Handle<K, C> {
    /// The limit's name.
    pub fn name(&self) -> &str {
        self.limit.name()
    }

    /// Its definition as stored in the file.
    pub fn def(&self) -> &crate::spec::LimitDef {
        self.limit.def()
    }

    /// Its algorithm and parameters as defined at creation.
    pub fn algorithm(&self) -> &Algorithm {
        self.limit.algorithm()
    }

    /// The most one decision can grant under the current (possibly retuned) parameters.
    pub fn capacity(&self) -> u64 {
        self.limit.capacity()
    }

    /// The clock this handle decides with.
    pub fn clock(&self) -> &C {
        self.limit.clock()
    }

    /// Decisions of this limit so far, summed over all processes.
    pub fn stats(&self) -> crate::limiter::Stats {
        self.limit.stats()
    }

    /// The algorithm with its live parameters (after any retune).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`] when the live parameters are damaged.
    pub fn live_algorithm(&self) -> Result<Algorithm> {
        self.limit.live_algorithm()
    }

    /// This limit's quota per window from its live parameters, for the
    /// `RateLimit-Policy` header; `None` for a concurrency limit.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`] if the live parameters in the file are damaged.
    pub fn policy(&self) -> Result<Option<crate::headers::Policy>> {
        self.limit.policy()
    }

    /// Return the limit's state to fresh (full bucket, empty windows, log and table, no
    /// permits), keeping its live parameters. What this grants: the whole capacity, at
    /// once.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the retune lock cannot be taken.
    pub fn reset(&self) -> Result<()> {
        self.limit.reset()
    }

    /// The kind of this limit.
    pub fn kind(&self) -> LimitKind {
        K::KIND
    }

    /// The untyped inspection view of this limit (for
    /// [`RateLimitHeaders::for_decisions`](crate::RateLimitHeaders::for_decisions),
    /// listings, ...).
    pub fn as_limit(&self) -> &Limit<C> {
        &self.limit
    }
}
