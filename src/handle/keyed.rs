//! The keyed rate handles: keyed token bucket, keyed window.

use super::{
    bucket_retune, keyed_rate, typed_handle, window_retune, KeyedRateLimit, LimitKind, TypedLimit,
};
use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::limiter::{Limit, Limiter};
use crate::spec::{Algorithm, Rate};

/// A keyed token bucket: one bucket per key (a user id, an API key, an address), all with the
/// same parameters, in one table of the file; resolved with [`Limiter::keyed_token_bucket`].
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("keyed.shm");
/// use shmlimit::{FullPolicy, Keyed, Limiter, TokenBucket};
///
/// let limiter = Limiter::builder()
///     .keyed_limit(
///         "per_user",
///         TokenBucket::per_second(10).burst(2),
///         Keyed::new(1 << 14).on_full(FullPolicy::Deny),
///     )
///     .create_or_open(&path)?;
/// let per_user = limiter.keyed_token_bucket("per_user")?;
/// assert!(per_user.try_acquire_key(b"alice", 1)?.is_allowed());
/// let grant = per_user.try_acquire_key(b"alice", 1)?;
/// assert!(per_user.try_acquire_key(b"alice", 1)?.is_denied()); // alice's burst is spent
/// assert!(per_user.try_acquire_key(b"bob", 2)?.is_allowed()); // bob has his own
/// per_user.refund_key(b"alice", &grant)?;
/// assert!(per_user.peek_key(b"alice", 1)?.is_allowed());
/// assert_eq!(per_user.key_occupancy(), (2, 1 << 14));
/// assert!(limiter.token_bucket("per_user").is_err()); // a keyed limit needs a key
/// # Ok(()) }
/// ```
pub struct KeyedTokenBucketLimit<C: Clock = MonotonicClock>(Limit<C>);

typed_handle!(
    KeyedTokenBucketLimit,
    LimitKind::KeyedTokenBucket,
    keyed_token_bucket
);
keyed_rate!(KeyedTokenBucketLimit);
bucket_retune!(KeyedTokenBucketLimit);

/// A keyed fixed or sliding window: one window state per key, all with the same limit, in one
/// table of the file; resolved with [`Limiter::keyed_window`].
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("peek.shm");
/// use std::time::Duration;
/// use shmlimit::{FixedWindow, Keyed, Limiter};
///
/// let limiter = Limiter::builder()
///     .keyed_limit("per_ip", FixedWindow::new(3, Duration::from_secs(60)), Keyed::new(64))
///     .create_or_open(&path)?;
/// let per_ip = limiter.keyed_window("per_ip")?;
/// assert_eq!(per_ip.peek_key(b"10.0.0.1", 1)?.remaining(), 2);
/// assert_eq!(per_ip.key_occupancy(), (0, 64)); // peeking inserted nothing
/// assert!(per_ip.try_acquire_key(b"10.0.0.1", 3)?.is_allowed());
/// assert!(per_ip.peek_key(b"10.0.0.1", 1)?.is_denied());
/// per_ip.set_limit(4)?; // every key's limit, live
/// assert!(per_ip.try_acquire_key(b"10.0.0.1", 1)?.is_allowed());
/// # Ok(()) }
/// ```
pub struct KeyedWindowLimit<C: Clock = MonotonicClock>(Limit<C>);

typed_handle!(KeyedWindowLimit, LimitKind::KeyedWindow, keyed_window);
keyed_rate!(KeyedWindowLimit);
window_retune!(KeyedWindowLimit);
