//! The counters handle: keyed counters whose window and limit come with each call.

use std::time::Duration;

use super::kind;
use super::Handle;
use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::counters::Counters;
use crate::error::{Error, Result};

/// Keyed counters whose window (and limit) come with each call, for storage adapters of
/// libraries that declare their limits at run time (Python's `limits`, which flask-limiter
/// and slowapi use); resolved with [`Limiter::counters`](crate::Limiter::counters), defined
/// with [`Counters`](crate::Counters) and a key capacity.
///
/// Three strategies, each exact per key under every race between processes:
///
/// * **fixed window**: [`incr`](Self::incr) adds to the key's counter (a window starts at
///   the first increment after the last one ended, as `limits` counts); [`acquire_fixed`]
///   admits iff `count + cost <= limit` and counts nothing when it denies;
/// * **sliding window counter**: [`acquire_sliding`] admits iff
///   `floor(previous (W - elapsed) / W) + current + cost <= limit`, over windows aligned on
///   Unix time (an estimate: up to about `2 limit` in some window under an adversarial burst);
/// * **moving window**: [`acquire_moving`] admits iff the admissions in the last `W` plus
///   `cost` are at most `limit`: exact, with one log entry per admitted unit, so `limit` is at
///   most the file's log entries per key ([`max_moving_limit`](Self::max_moving_limit)); a
///   larger one is refused with an error naming that bound.
///
/// [`acquire_fixed`]: Self::acquire_fixed
/// [`acquire_sliding`]: Self::acquire_sliding
/// [`acquire_moving`]: Self::acquire_moving
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("storage.shm");
/// use std::time::Duration;
/// use shmlimit::{Counters, Keyed, Limiter};
/// let limiter = Limiter::builder()
///     .keyed_limit("limits", Counters::new().moving_window(64), Keyed::new(1 << 12))
///     .create_or_open(&path)?;
/// let store = limiter.counters("limits")?;
/// let minute = Duration::from_secs(60);
/// assert_eq!(store.incr(b"user:1/10/minute", minute, 1)?, 1);
/// assert_eq!(store.incr(b"user:1/10/minute", minute, 2)?, 3);
/// assert_eq!(store.count(b"user:1/10/minute")?.0, 3);
/// assert!(store.acquire_moving(b"user:1", 2, minute, 2)?.is_allowed());
/// assert!(store.acquire_moving(b"user:1", 2, minute, 1)?.is_denied());
/// assert_eq!(store.moving_window(b"user:1", 2, minute)?.0, 2);
/// assert!(store.acquire_moving(b"user:1", 65, minute, 1).is_err()); // 64 entries per key
/// # Ok(()) }
/// ```
pub type CountersLimit<C = MonotonicClock> = Handle<kind::Counters, C>;

/// A key's sliding window counter as read now ([`CountersLimit::sliding_counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounts {
    /// Admissions counted in the previous window.
    pub previous: u64,
    /// How much longer the previous window weighs (zero when it counted nothing).
    pub previous_weighs_for: Duration,
    /// Admissions counted in the current window.
    pub current: u64,
    /// How much longer the current window's count is kept (to the end of the next window).
    pub current_expires_in: Duration,
}

fn nanos(window: Duration) -> Result<u64> {
    u64::try_from(window.as_nanos()).map_err(|_| Error::InvalidParameter {
        limit: String::new(),
        reason: "window is too long".into(),
    })
}

impl<C: Clock> Handle<kind::Counters, C> {
    fn engine(&self) -> Result<Counters<'_, C>> {
        Ok(Counters(self.limit.site().follow()?))
    }

    /// Add `amount` to the key's fixed-window counter and return its count: a window of
    /// `window` starts at the first increment after the previous one ended (what `limits`
    /// calls `incr`). When the table has no slot for a new key, its policy answers:
    /// `u64::MAX` (deny: above every limit), `0` (allow: nothing counted), or the error.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::InvalidParameter`] for a window outside 1 ms to 2^55 ns;
    /// [`Error::CostExceedsCapacity`] when the count would pass 2^24 - 1 (nothing added);
    /// [`Error::InvalidKey`]; [`Error::TableFull`] by the policy; [`Error::ClockOutOfRange`].
    pub fn incr(&self, key: &[u8], window: Duration, amount: u64) -> Result<u64> {
        self.engine()?.incr(key, nanos(window)?, amount)
    }

    /// Take `amount` from the key's fixed-window counter and return its count: never below
    /// zero, and the window keeps its end (what express-rate-limit's `decrement` and
    /// rate-limiter-flexible's `reward` do). A key that counts nothing stays so: `0`.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::InvalidKey`]; [`Error::CorruptState`] for a damaged word.
    pub fn decr(&self, key: &[u8], amount: u64) -> Result<u64> {
        self.engine()?.decr(key, amount)
    }

    /// Make the key's fixed-window counter hold `count` in a window of `window` that starts
    /// now, whatever it held (rate-limiter-flexible's `set` and `block`); returns `count`, or
    /// the table-full policy's answer as [`Self::incr`] gives it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] for a window outside 1 ms to 2^55 ns;
    /// [`Error::CostExceedsCapacity`] for a count above 2^24 - 1; [`Error::InvalidKey`];
    /// [`Error::TableFull`] by the policy; [`Error::ClockOutOfRange`].
    pub fn set(&self, key: &[u8], window: Duration, count: u64) -> Result<u64> {
        self.engine()?.set(key, nanos(window)?, count)
    }

    /// The key's fixed-window count and how long until its window ends (`(0, ZERO)` when it
    /// has none).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::CorruptState`] for a damaged word.
    pub fn count(&self, key: &[u8]) -> Result<(u64, Duration)> {
        let (count, left) = self.engine()?.fixed(key)?;
        Ok((count, Duration::from_nanos(left)))
    }

    /// Admit `cost` of `limit` in the key's fixed window of `window` (started by its first
    /// admission); a denial counts nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`], [`Error::CostExceedsCapacity`] (`cost > limit`),
    /// [`Error::InvalidParameter`] (a limit of 0 or above 2^24 - 1, a window outside 1 ms to
    /// 2^55 ns), [`Error::InvalidKey`], [`Error::TableFull`] by the policy.
    pub fn acquire_fixed(
        &self,
        key: &[u8],
        limit: u64,
        window: Duration,
        cost: u64,
    ) -> Result<Decision> {
        self.engine()?
            .acquire_fixed(key, limit, nanos(window)?, cost)
    }

    /// Admit `cost` of `limit` by the key's sliding window counter over Unix-aligned windows
    /// of `window`.
    ///
    /// # Errors
    ///
    /// As [`Self::acquire_fixed`], with limits of 1 to 65535 and windows of at least 2^28 ns
    /// (about 268 ms).
    pub fn acquire_sliding(
        &self,
        key: &[u8],
        limit: u64,
        window: Duration,
        cost: u64,
    ) -> Result<Decision> {
        self.engine()?
            .acquire_sliding(key, limit, nanos(window)?, cost)
    }

    /// The key's sliding window counter for windows of `window`, as read now.
    ///
    /// # Errors
    ///
    /// As [`Self::acquire_sliding`].
    pub fn sliding_counts(&self, key: &[u8], window: Duration) -> Result<SlidingCounts> {
        let (previous, weighs, current, expires) = self.engine()?.sliding(key, nanos(window)?)?;
        Ok(SlidingCounts {
            previous,
            previous_weighs_for: Duration::from_nanos(weighs),
            current,
            current_expires_in: Duration::from_nanos(expires),
        })
    }

    /// Admit `cost` of `limit` in the key's moving window of `window`: at most `limit`
    /// admissions in any `window`, exactly.
    ///
    /// # Errors
    ///
    /// As [`Self::acquire_fixed`]; [`Error::InvalidParameter`] naming the largest limit the
    /// file supports when `limit` exceeds [`Self::max_moving_limit`].
    pub fn acquire_moving(
        &self,
        key: &[u8],
        limit: u64,
        window: Duration,
        cost: u64,
    ) -> Result<Decision> {
        self.engine()?
            .acquire_moving(key, limit, nanos(window)?, cost)
    }

    /// The key's moving window of `limit` over `window`: the admissions in it and the time
    /// since the oldest of them (`(0, ZERO)` when empty).
    ///
    /// # Errors
    ///
    /// As [`Self::acquire_moving`].
    pub fn moving_window(
        &self,
        key: &[u8],
        limit: u64,
        window: Duration,
    ) -> Result<(u64, Duration)> {
        let (n, age) = self.engine()?.moving(key, limit, nanos(window)?)?;
        Ok((n, Duration::from_nanos(age)))
    }

    /// The largest moving-window limit this file supports: its log entries per key.
    pub fn max_moving_limit(&self) -> u64 {
        match *self.limit.algorithm() {
            crate::spec::Algorithm::Counters { log_entries } => log_entries,
            _ => 0,
        }
    }

    /// How many slots of the limit's two key tables hold a key, and how many slots both
    /// have: `(used, slots)`, `slots` twice the key capacity (rounded up to a power of two).
    /// A key used with a fixed or sliding window holds a slot of the counter table; one used
    /// with a moving window a slot of the log table; a key used with both holds one of each.
    pub fn key_occupancy(&self) -> (usize, usize) {
        self.limit.key_occupancy()
    }

    /// Retire every key, in both tables, whose state counts nothing any more (a fixed window
    /// ended, a sliding counter's two windows over, every entry of a moving log expired), and
    /// any pending claim a killed process left; returns how many keys were retired.
    ///
    /// Decisions reclaim idle slots on demand, so this is never needed for correctness: it is
    /// the explicit pass of the CLI's `gc`, after which [`Self::key_occupancy`] counts only keys
    /// that still hold something. It reads every slot, while decisions go on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("gc.shm");
    /// use std::time::Duration;
    /// use shmlimit::{Counters, Keyed, Limiter, ManualClock};
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("limits", Counters::new().moving_window(8), Keyed::new(64))
    ///     .clock(ManualClock::new(1_000_000_000_000))
    ///     .create_or_open(&path)?;
    /// let store = limiter.counters("limits")?;
    /// store.incr(b"a", Duration::from_secs(1), 1)?;
    /// store.acquire_moving(b"b", 8, Duration::from_secs(1), 1)?;
    /// store.acquire_moving(b"c", 8, Duration::from_secs(5), 1)?;
    /// assert_eq!(store.key_occupancy(), (3, 128)); // two tables of 64
    /// limiter.clock().advance(2_000_000_000);
    /// assert_eq!(store.reclaim_idle_keys(), 2); // "a" and "b"; "c" counts for 3 s more
    /// assert_eq!(store.key_occupancy(), (1, 128));
    /// # Ok(()) }
    /// ```
    pub fn reclaim_idle_keys(&self) -> usize {
        self.limit.reclaim_idle_keys()
    }

    /// Forget the key: its fixed-window count, its sliding window counter and its moving log.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`].
    pub fn clear_key(&self, key: &[u8]) -> Result<()> {
        self.engine()?.clear(key)
    }

    /// Forget every key; returns how many held something. Unlike
    /// [`Self::reset`](Handle::reset), keys keep their slots, and a call racing this one is
    /// decided on either side of it.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] on a target without a 16-byte compare-and-swap.
    pub fn clear_all(&self) -> Result<usize> {
        self.engine()?.clear_all()
    }
}
