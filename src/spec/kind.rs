//! The kinds of limit as a value: what a definition's algorithm and keying make it, and
//! which typed handle resolves it.

use super::Algorithm;

/// The kind of a limit: which typed handle resolves it (see [`Limit::kind`](crate::Limit::kind)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// An unkeyed token bucket, split or not: [`TokenBucketLimit`](crate::TokenBucketLimit).
    TokenBucket,
    /// An unkeyed fixed or sliding window: [`WindowLimit`](crate::WindowLimit).
    Window,
    /// A sliding log: [`SlidingLogLimit`](crate::SlidingLogLimit).
    SlidingLog,
    /// An unkeyed concurrency limit: [`ConcurrencyLimit`](crate::ConcurrencyLimit).
    Concurrency,
    /// A keyed token bucket: [`KeyedTokenBucketLimit`](crate::KeyedTokenBucketLimit).
    KeyedTokenBucket,
    /// A keyed fixed or sliding window: [`KeyedWindowLimit`](crate::KeyedWindowLimit).
    KeyedWindow,
    /// A keyed concurrency limit: [`KeyedConcurrencyLimit`](crate::KeyedConcurrencyLimit).
    KeyedConcurrency,
    /// An adaptive concurrency limit: [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit).
    AdaptiveConcurrency,
    /// A keyed adaptive concurrency limit: [`KeyedAdaptiveConcurrencyLimit`](crate::KeyedAdaptiveConcurrencyLimit).
    KeyedAdaptiveConcurrency,
    /// Keyed counters whose window comes with each call: [`CountersLimit`](crate::CountersLimit).
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
            (Algorithm::AdaptiveConcurrency(_), false) => LimitKind::AdaptiveConcurrency,
            (Algorithm::AdaptiveConcurrency(_), true) => LimitKind::KeyedAdaptiveConcurrency,
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
            LimitKind::AdaptiveConcurrency => "adaptive_concurrency",
            LimitKind::KeyedAdaptiveConcurrency => "keyed_adaptive_concurrency",
            LimitKind::Counters => "counters",
        }
    }

    /// The article before the kind's name in a sentence ("a window", "an adaptive concurrency
    /// limit").
    pub(crate) fn article(self) -> &'static str {
        match self {
            LimitKind::AdaptiveConcurrency => "an",
            _ => "a",
        }
    }

    /// Whether limits of this kind are decided per key.
    pub fn is_keyed(self) -> bool {
        matches!(
            self,
            LimitKind::KeyedTokenBucket
                | LimitKind::KeyedWindow
                | LimitKind::KeyedConcurrency
                | LimitKind::KeyedAdaptiveConcurrency
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
            LimitKind::AdaptiveConcurrency => "adaptive concurrency limit",
            LimitKind::KeyedAdaptiveConcurrency => "keyed adaptive concurrency limit",
            LimitKind::Counters => "counters limit",
        })
    }
}
