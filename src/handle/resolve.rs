//! Resolving a limit as its kind: the one check of the kind
//! (`Limit::typed`), and the [`Limiter`] accessors that make it.

use super::kind::{self, Kind};
use super::{
    ConcurrencyLimit, CountersLimit, Handle, KeyedConcurrencyLimit, KeyedTokenBucketLimit,
    KeyedWindowLimit, SlidingLogLimit, TokenBucketLimit, WindowLimit,
};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter::{Limit, Limiter};
use crate::spec::LimitKind;

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
                "this limit is {} {kind}, not {} {want}: resolve it with Limiter::{}",
                kind.article(),
                want.article(),
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

    /// Resolve the limit `name` as an [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit), once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn adaptive_concurrency(&self, name: &str) -> Result<crate::AdaptiveConcurrencyLimit<C>> {
        self.resolve::<kind::AdaptiveConcurrency>(name)
    }

    /// Resolve the limit `name` as a [`KeyedAdaptiveConcurrencyLimit`](crate::KeyedAdaptiveConcurrencyLimit), once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`]; [`Error::WrongKind`] if the limit is of another kind (the
    /// error names the accessor that resolves it).
    pub fn keyed_adaptive_concurrency(
        &self,
        name: &str,
    ) -> Result<crate::KeyedAdaptiveConcurrencyLimit<C>> {
        self.resolve::<kind::KeyedAdaptiveConcurrency>(name)
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
