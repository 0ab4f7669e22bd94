//! The kinds of limit as types: the `K` of [`Handle<K, C>`](crate::Handle).
//!
//! Each kind is a marker type that is never built ([`TokenBucket`], [`Window`], ...), sealed:
//! only this crate defines kinds. What a kind is and which handle type name it prints as is
//! [`Kind`]; the operations kinds share are grouped by the kind traits below, and each method of
//! the handle is written once, for every kind that has its trait:
//!
//! | kind trait | its kinds | the handle's methods |
//! |---|---|---|
//! | [`Kind`] | all | `name`, `def`, `algorithm`, `capacity`, `clock`, `stats`, `live_algorithm`, `policy`, `reset`, `kind`, `as_limit` |
//! | [`UnkeyedRate`] | [`TokenBucket`], [`Window`], [`SlidingLog`] | `try_acquire`, `peek`, `try_acquire_at`, `refund`, `refund_units`, `acquire_timeout` (and [`RateLimit`](crate::RateLimit)) |
//! | [`KeyedRate`] | [`KeyedTokenBucket`], [`KeyedWindow`] | `try_acquire_key`, `peek_key`, `try_acquire_key_at`, `refund_key` (and [`KeyedRateLimit`](crate::KeyedRateLimit)) |
//! | [`PerKey`] | [`KeyedTokenBucket`], [`KeyedWindow`], [`KeyedConcurrency`], [`KeyedAdaptiveConcurrency`] | `key_occupancy`, `reclaim_idle_keys`, `key_tag` |
//! | [`Retune`] | [`TokenBucket`], [`Window`], [`KeyedTokenBucket`], [`KeyedWindow`] | `set_rate` |
//! | [`BucketRetune`] | [`TokenBucket`], [`KeyedTokenBucket`] | `set_token_bucket`, `fleet_manage`, `set_fleet_deadline`, `end_fleet_management`, `fleet_lease` |
//! | [`WindowRetune`] | [`Window`], [`KeyedWindow`] | `set_limit` |
//! | [`Permits`] | [`Concurrency`], [`KeyedConcurrency`], [`AdaptiveConcurrency`], [`KeyedAdaptiveConcurrency`] | `release_permit`, `permit_holders`, `reclaim_dead_permits` |
//!
//! A few methods belong to one kind:
//! `incr`, `acquire_fixed`, `acquire_sliding`, `acquire_moving` and their reads ([`Counters`]), `reserve` ([`TokenBucket`]), `try_acquire_permit` and
//! `acquire_permit_timeout` ([`Concurrency`]), `try_acquire_key_permit`,
//! `acquire_key_permit_timeout` and `key_permits_held` ([`KeyedConcurrency`]); `try_acquire`,
//! `acquire_timeout`, `status` and `release_with` ([`AdaptiveConcurrency`], and with a key
//! [`KeyedAdaptiveConcurrency`]).
//!
//! A new kind adds its marker here, its [`Kind`] row (a [`LimitKind`] variant and the name of
//! its handle type), its rows in the kind traits it shares, and an alias naming its handle.

use crate::clock::Clock;
use crate::engine::bucket::Bucket;
use crate::engine::log::Log;
use crate::engine::rate::RateEngine;
use crate::engine::window::Window as WindowEngine;

use super::LimitKind;

pub(crate) mod sealed {
    use super::{Clock, RateEngine};

    /// Only this crate defines kinds.
    pub trait Sealed {}

    /// The engine of an unkeyed rate kind, chosen at compile time: the handle's calls go to
    /// it on the handle's site, with no test of the kind (the binding dispatch,
    /// `handle::dispatch`, calls the same engines once it has matched a kind).
    pub trait Decide {
        /// The engine's view of a site.
        type Engine<'a, C: Clock + 'a>: RateEngine<'a, C>;
    }
}

/// A kind of limit: the `K` of [`Handle<K, C>`](crate::Handle). Sealed: implemented by the
/// markers of this module only.
pub trait Kind: sealed::Sealed {
    /// The kind as a value: what [`Limit::kind`](crate::Limit::kind) says of a limit this handle resolves.
    const KIND: LimitKind;
    /// The name of the handle's alias (e.g. `"TokenBucketLimit"`), which its `Debug` prints.
    const HANDLE: &'static str;
}

/// The kinds that decide unkeyed rates: a bucket, a window, a sliding log.
pub trait UnkeyedRate: Kind + sealed::Decide {}

/// The kinds that decide rates per key: a keyed bucket, a keyed window.
pub trait KeyedRate: PerKey {}

/// The kinds decided per key, in a table of the file: the keyed rates and keyed concurrency
/// (adaptive or not).
pub trait PerKey: Kind {}

/// The kinds whose rate can be changed live: buckets and windows, keyed or not.
pub trait Retune: Kind {}

/// The kinds with a bucket's retunes (capacity and rate, fleet management), keyed or not.
pub trait BucketRetune: Retune {}

/// The kinds with a window's retune (its limit per window), keyed or not.
pub trait WindowRetune: Retune {}

/// The kinds that hand out permits, keyed or not.
pub trait Permits: Kind {}

/// An unkeyed token bucket (GCRA), split into sub-buckets or not:
/// [`TokenBucketLimit`](crate::TokenBucketLimit).
#[derive(Debug)]
pub enum TokenBucket {}

/// An unkeyed fixed or weighted sliding window: [`WindowLimit`](crate::WindowLimit).
#[derive(Debug)]
pub enum Window {}

/// An exact sliding log: [`SlidingLogLimit`](crate::SlidingLogLimit).
#[derive(Debug)]
pub enum SlidingLog {}

/// An unkeyed concurrency limit: [`ConcurrencyLimit`](crate::ConcurrencyLimit).
#[derive(Debug)]
pub enum Concurrency {}

/// A keyed token bucket: [`KeyedTokenBucketLimit`](crate::KeyedTokenBucketLimit).
#[derive(Debug)]
pub enum KeyedTokenBucket {}

/// A keyed fixed or sliding window: [`KeyedWindowLimit`](crate::KeyedWindowLimit).
#[derive(Debug)]
pub enum KeyedWindow {}

/// A keyed concurrency limit: [`KeyedConcurrencyLimit`](crate::KeyedConcurrencyLimit).
#[derive(Debug)]
pub enum KeyedConcurrency {}

/// Keyed counters whose window and limit come with each call:
/// [`CountersLimit`](crate::CountersLimit).
#[derive(Debug)]
pub enum Counters {}

impl sealed::Sealed for TokenBucket {}
impl Kind for TokenBucket {
    const KIND: LimitKind = LimitKind::TokenBucket;
    const HANDLE: &'static str = "TokenBucketLimit";
}
impl UnkeyedRate for TokenBucket {}
impl sealed::Decide for TokenBucket {
    type Engine<'a, C: Clock + 'a> = Bucket<'a, C>;
}
impl Retune for TokenBucket {}
impl BucketRetune for TokenBucket {}

impl sealed::Sealed for Window {}
impl Kind for Window {
    const KIND: LimitKind = LimitKind::Window;
    const HANDLE: &'static str = "WindowLimit";
}
impl UnkeyedRate for Window {}
impl sealed::Decide for Window {
    type Engine<'a, C: Clock + 'a> = WindowEngine<'a, C>;
}
impl Retune for Window {}
impl WindowRetune for Window {}

impl sealed::Sealed for SlidingLog {}
impl Kind for SlidingLog {
    const KIND: LimitKind = LimitKind::SlidingLog;
    const HANDLE: &'static str = "SlidingLogLimit";
}
impl UnkeyedRate for SlidingLog {}
impl sealed::Decide for SlidingLog {
    type Engine<'a, C: Clock + 'a> = Log<'a, C>;
}

impl sealed::Sealed for Concurrency {}
impl Kind for Concurrency {
    const KIND: LimitKind = LimitKind::Concurrency;
    const HANDLE: &'static str = "ConcurrencyLimit";
}
impl Permits for Concurrency {}

/// An adaptive concurrency limit: [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit).
#[derive(Debug)]
pub enum AdaptiveConcurrency {}

impl sealed::Sealed for AdaptiveConcurrency {}
impl Kind for AdaptiveConcurrency {
    const KIND: LimitKind = LimitKind::AdaptiveConcurrency;
    const HANDLE: &'static str = "AdaptiveConcurrencyLimit";
}
impl Permits for AdaptiveConcurrency {}

/// A keyed adaptive concurrency limit:
/// [`KeyedAdaptiveConcurrencyLimit`](crate::KeyedAdaptiveConcurrencyLimit).
#[derive(Debug)]
pub enum KeyedAdaptiveConcurrency {}

impl sealed::Sealed for KeyedAdaptiveConcurrency {}
impl Kind for KeyedAdaptiveConcurrency {
    const KIND: LimitKind = LimitKind::KeyedAdaptiveConcurrency;
    const HANDLE: &'static str = "KeyedAdaptiveConcurrencyLimit";
}
impl PerKey for KeyedAdaptiveConcurrency {}
impl Permits for KeyedAdaptiveConcurrency {}

impl sealed::Sealed for KeyedTokenBucket {}
impl Kind for KeyedTokenBucket {
    const KIND: LimitKind = LimitKind::KeyedTokenBucket;
    const HANDLE: &'static str = "KeyedTokenBucketLimit";
}
impl PerKey for KeyedTokenBucket {}
impl KeyedRate for KeyedTokenBucket {}
impl Retune for KeyedTokenBucket {}
impl BucketRetune for KeyedTokenBucket {}

impl sealed::Sealed for KeyedWindow {}
impl Kind for KeyedWindow {
    const KIND: LimitKind = LimitKind::KeyedWindow;
    const HANDLE: &'static str = "KeyedWindowLimit";
}
impl PerKey for KeyedWindow {}
impl KeyedRate for KeyedWindow {}
impl Retune for KeyedWindow {}
impl WindowRetune for KeyedWindow {}

impl sealed::Sealed for KeyedConcurrency {}
impl Kind for KeyedConcurrency {
    const KIND: LimitKind = LimitKind::KeyedConcurrency;
    const HANDLE: &'static str = "KeyedConcurrencyLimit";
}
impl PerKey for KeyedConcurrency {}
impl Permits for KeyedConcurrency {}

impl sealed::Sealed for Counters {}
impl Kind for Counters {
    const KIND: LimitKind = LimitKind::Counters;
    const HANDLE: &'static str = "CountersLimit";
}
