//! Resolving a limit as its kind: [`LimitKind`], the one check of the kind
//! (`Limit::typed`), and the [`Limiter`] accessors that make it.

use super::kind::{self, Kind};
use super::{
    ConcurrencyLimit, CountersLimit, Handle, KeyedConcurrencyLimit, KeyedTokenBucketLimit,
    KeyedWindowLimit, SlidingLogLimit, TokenBucketLimit, WindowLimit,
};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter::{Limit, Limiter};
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
    /// Keyed counters whose window comes with each call: [`CountersLimit`].
    Counters,
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
            (Algorithm::Counters { .. }, _) => LimitKind::Counters,
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
            LimitKind::Counters => "counters",
        }
    }

    /// Whether limits of this kind are decided per key.
    pub fn is_keyed(self) -> bool {
        matches!(
            self,
            LimitKind::KeyedTokenBucket
                | LimitKind::KeyedWindow
                | LimitKind::KeyedConcurrency
                | LimitKind::Counters
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
            LimitKind::Counters => "counters limit",
        })
    }
}

impl<C: Clock> Limit<C> {
    /// The kind of this limit: which typed handle resolves it.
    pub fn kind(&self) -> LimitKind {
        self.site().kind()
    }

    /// This handle as the typed handle of kind `want`, or the [`Error::WrongKind`] that names
    /// the limit, its kind and the accessor that resolves it.
    fn typed(self, want: LimitKind) -> Result<Limit<C>> {
        let kind = self.kind();
        if kind == want {
            return Ok(Limit::of(self.into_site().into_typed()));
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

impl<K: Kind, C: Clock> TryFrom<Limit<C>> for Handle<K, C> {
    type Error = Error;
    /// The typed handle of `limit`, or [`Error::WrongKind`] if it is of another kind.
    fn try_from(limit: Limit<C>) -> Result<Self> {
        limit.typed(K::KIND).map(Handle::of)
    }
}

impl<C: Clock> Limiter<C> {
    /// Resolve the limit `name` as a handle of kind `K` (a marker of [`kind`]), once; the
    /// handle is what the hot path uses. The accessors named after the kinds
    /// ([`Limiter::token_bucket`], ...) are this, for code that does not name the kind's type.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn resolve<K: Kind>(&self, name: &str) -> Result<Handle<K, C>> {
        self.limit(name)?.try_into()
    }

    /// Resolve the limit `name` as a [`TokenBucketLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn token_bucket(&self, name: &str) -> Result<TokenBucketLimit<C>> {
        self.resolve::<kind::TokenBucket>(name)
    }

    /// Resolve the limit `name` as a [`WindowLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn window(&self, name: &str) -> Result<WindowLimit<C>> {
        self.resolve::<kind::Window>(name)
    }

    /// Resolve the limit `name` as a [`SlidingLogLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn sliding_log(&self, name: &str) -> Result<SlidingLogLimit<C>> {
        self.resolve::<kind::SlidingLog>(name)
    }

    /// Resolve the limit `name` as a [`ConcurrencyLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn concurrency(&self, name: &str) -> Result<ConcurrencyLimit<C>> {
        self.resolve::<kind::Concurrency>(name)
    }

    /// Resolve the limit `name` as a [`KeyedTokenBucketLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn keyed_token_bucket(&self, name: &str) -> Result<KeyedTokenBucketLimit<C>> {
        self.resolve::<kind::KeyedTokenBucket>(name)
    }

    /// Resolve the limit `name` as a [`KeyedWindowLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn keyed_window(&self, name: &str) -> Result<KeyedWindowLimit<C>> {
        self.resolve::<kind::KeyedWindow>(name)
    }

    /// Resolve the limit `name` as a [`KeyedConcurrencyLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn keyed_concurrency(&self, name: &str) -> Result<KeyedConcurrencyLimit<C>> {
        self.resolve::<kind::KeyedConcurrency>(name)
    }

    /// Resolve the limit `name` as a [`CountersLimit`], once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn counters(&self, name: &str) -> Result<CountersLimit<C>> {
        self.resolve::<kind::Counters>(name)
    }
}
