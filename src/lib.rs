//! # shmlimit
//!
//! Lock-free rate limits shared by every process on a host through one memory-mapped file.
//!
//! Worker processes (Rust here, C and other languages through the C ABI) attach to the same file
//! and decide against the same state: a token bucket, a fixed window, an exact sliding log or a
//! weighted sliding-window counter per limit, each committed with one compare-and-swap on its
//! own cache line, dated by the host's `CLOCK_MONOTONIC`. No daemon, no lock, no system call on
//! the hot path but the (vDSO) clock read.
//!
//! ```
//! # fn main() -> Result<(), shmlimit::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("api.shm");
//! use shmlimit::{Limiter, TokenBucket};
//!
//! let limiter = Limiter::builder()
//!     .limit("api", TokenBucket::per_second(100).burst(20))
//!     .create_or_open(&path)?;
//! let api = limiter.token_bucket("api")?; // resolve once, as its kind
//! let decision = api.try_acquire(1)?; // hot path
//! assert!(decision.is_allowed());
//! assert_eq!(decision.remaining(), 19);
//! # Ok(()) }
//! ```
//!
//! ## Guarantees
//!
//! | algorithm | guarantee (admissions dated in any interval) |
//! |---|---|
//! | [`TokenBucket`] (GCRA) | at most `floor(B + r T)` in any interval of length `T` |
//! | [`FixedWindow`] | at most `L` per aligned window (up to `2 L` across one boundary) |
//! | [`SlidingLog`] | at most `L` in every `(t - W, t]`, exactly |
//! | [`SlidingWindow`] | about `L` per `W` (weighted estimate; up to ~`2 L` adversarially) |
//!
//! Each admission is dated between its clock read and its commit; the bounds are over those dates.
//!
//! ## The API
//!
//! Define limits with the builders of [`spec`] ([`TokenBucket`], [`FixedWindow`],
//! [`SlidingWindow`], [`SlidingLog`], [`Concurrency`], [`Keyed`], [`Rate`]; also at the root),
//! create or open a file with a [`Limiter`], resolve each limit once as its kind
//! ([`TokenBucketLimit`], [`WindowLimit`], [`SlidingLogLimit`], [`ConcurrencyLimit`] and the
//! keyed handles; [`Limit`] is the untyped inspection view) and decide: a [`Decision`], a
//! [`Permit`], or an [`Error`]. [`try_acquire_all`] composes decisions, [`GuardedLimiter`]
//! fails open or closed when the file is unavailable, and every bound and interval is in
//! [`consts`].
//!
//! ## Packages
//!
//! This crate is all a Rust worker needs (its dependencies: memmap2, crossbeam-utils, libc, nix).
//! The C library (`libshmlimit.so` / `libshmlimit.a`, packages `shmlimit-ffi` and `libshmlimit`
//! in `ffi/`), the fleet agent (`shmlimit-fleet`, `fleet/`) and the `shmlimit` command
//! (`shmlimit-cli`, `cli/`) are packages of the same workspace, built on this crate.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

pub mod consts;
pub mod spec;

mod algo;
#[doc(hidden)]
pub mod c_abi;
mod clock;
mod compose;
mod engine;
mod error;
mod file;
mod handle;
mod headers;

mod limiter;
mod owner;

mod reconcile;

mod sync;
mod tally;
mod unavailable;
mod wait;

pub use algo::adaptive::Outcome;
pub use algo::Decision;
pub use clock::{Clock, CoarseMonotonicClock, ManualClock, MonotonicClock};
pub use compose::{try_acquire_all, Check, Composed};
pub use engine::adaptive::{AdaptivePermit, AdaptiveStatus};
pub use engine::permits::{Permit, PermitHolder};
pub use error::{Error, Result};
pub use file::reboot::{OnReboot, RebootInfo};
pub use handle::{
    kind, AdaptiveConcurrencyLimit, ConcurrencyLimit, CountersLimit, Handle,
    KeyedAdaptiveConcurrencyLimit, KeyedConcurrencyLimit, KeyedRateLimit, KeyedTokenBucketLimit,
    KeyedWindowLimit, LimitKind, RateLimit, SlidingCounts, SlidingLogLimit, TokenBucketLimit,
    TypedLimit, WindowLimit,
};
pub use headers::{ConcurrentQuota, Policy, RateLimitHeaders, StateItem};
pub use limiter::{Builder, FileInfo, FleetLease, Limit, Limiter, Stats};
pub use reconcile::OnConflict;
// The definitions a program names to define its limits, documented in `spec`.
pub use engine::bucket::Reservation;
#[doc(no_inline)]
pub use spec::{
    Adaptive, AdaptiveConcurrency, Algorithm, Alignment, Concurrency, Counters, FixedWindow,
    FleetShare, FullPolicy, IntoAlgorithm, Keyed, LimitDef, Rate, SlidingLog, SlidingWindow,
    TokenBucket,
};
pub use unavailable::{GuardedDecision, GuardedLimit, GuardedLimiter, GuardedPermit, Unavailable};

/// The Rust examples of README.md, compiled by `cargo test --doc` (they are `no_run`: they
/// name a file under /dev/shm).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

/// The Rust examples of docs/deploy.md, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/deploy.md")]
struct DeployExamples;
