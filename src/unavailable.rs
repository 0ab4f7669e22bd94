//! What a caller gets when the limiter file is missing, unreadable or invalid: an explicit choice.
//!
//! A plain [`Limiter::open`] returns an error when the file cannot be used, and a service that
//! starts before the file exists (or whose file was damaged) must then decide for every request
//! whether to serve it unlimited or refuse it. That choice belongs to each limit, and it must be
//! visible where the limit is used, so this module has **no default**: a [`GuardedLimiter`]
//! hands out [`GuardedLimit`]s only through [`GuardedLimiter::limit`], whose [`Unavailable`]
//! argument is required.
//!
//! ```
//! # fn main() -> Result<(), shmlimit::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("late.shm");
//! use std::time::Duration;
//! use shmlimit::{Limiter, TokenBucket, Unavailable};
//!
//! // The file does not exist yet: the guarded handle opens anyway.
//! let guarded = Limiter::open_guarded(&path, Duration::from_millis(0));
//! let search = guarded.limit("search", Unavailable::FailOpen);
//! let payments = guarded.limit("payments", Unavailable::FailClosed);
//! let d = search.try_acquire(1)?;
//! assert!(d.is_allowed() && d.is_unavailable()); // served, unlimited, and said so
//! let d = payments.try_acquire(1)?;
//! assert!(d.is_denied() && d.is_unavailable() && d.retry_after_ns() > 0);
//!
//! // Once the file appears, the next attempt attaches and decisions are real ones.
//! Limiter::builder()
//!     .limit("search", TokenBucket::per_second(10).burst(1))
//!     .limit("payments", TokenBucket::per_second(10).burst(1))
//!     .create_or_open(&path)?;
//! let d = payments.try_acquire(1)?;
//! assert!(d.is_allowed() && !d.is_unavailable());
//! assert!(payments.try_acquire(1)?.is_denied()); // the real limit applies
//! # Ok(()) }
//! ```
//!
//! # What counts as unavailable
//!
//! * every error of opening the file ([`Error::Io`] for a missing or unreadable file,
//!   [`Error::Symlink`], [`Error::NotRegularFile`], [`Error::Permission`], [`Error::Foreign`],
//!   [`Error::Version`], [`Error::Size`], [`Error::Corrupt`], [`Error::NotInitialized`],
//!   [`Error::ClockMismatch`], [`Error::DefinitionConflict`]): the limiter retries opening at
//!   most once per reopen interval, and [`GuardedLimiter::last_error`] says what failed;
//! * [`Error::CorruptState`] from a decision: the limit's shared state is damaged (a plain handle
//!   fails closed with this error until the limit is reset; a guarded one applies its policy);
//! * [`Error::Io`] from a decision: the file was replaced (see
//!   [`crate::consts::REPLACEMENT_CHECK`]) by one that cannot be attached, or that no longer defines
//!   the limit; the handle retries attaching at most every 100 ms.
//!
//! Errors that are the caller's own ([`Error::ZeroCost`], [`Error::CostExceedsCapacity`],
//! [`Error::InvalidKey`], [`Error::WrongKind`], [`Error::TableFull`], [`Error::UnknownLimit`]
//! once the file is open) are returned as errors whatever the policy: serving them unlimited
//! would hide a bug.
//!
//! Once attached, a guarded handle re-validates as a plain one does: at most once a second it
//! checks that its path still names the file it mapped (device, inode and the file id in the
//! header) and moves to a replacement, so after the first successful open the hot path is the
//! plain one plus one atomic load.

use crate::handle::dispatch;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::permits::Permit;
use crate::error::{Error, Result};
use crate::limiter::{Limit, Limiter};

/// What a limit decides while its limiter file cannot be used. There is no default: every
/// [`GuardedLimiter::limit`] call names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// Admit every request, unlimited, flagged [`GuardedDecision::is_unavailable`]. For limits
    /// that protect against overload, where refusing all traffic is worse than none.
    FailOpen,
    /// Deny every request, with a retry-after of the time until the next attempt to open the
    /// file, flagged [`GuardedDecision::is_unavailable`]. For limits that guard money, quotas
    /// owed to a third party, or anything that must never be exceeded.
    FailClosed,
}

/// The outcome of a guarded decision: a real one, or the limit's [`Unavailable`] policy.
#[derive(Debug, Clone, Copy)]
pub enum GuardedDecision {
    /// The limiter decided.
    Decided(Decision),
    /// The limiter file (or this limit's state) could not be used; the policy decided.
    Unavailable {
        /// True for [`Unavailable::FailOpen`].
        allowed: bool,
        /// For a denial: nanoseconds until the next attempt to open the file (at least 1).
        retry_after_ns: u64,
    },
}

impl GuardedDecision {
    /// True when the request may proceed (decided allowed, or fail-open).
    pub fn is_allowed(&self) -> bool {
        match self {
            GuardedDecision::Decided(d) => d.is_allowed(),
            GuardedDecision::Unavailable { allowed, .. } => *allowed,
        }
    }

    /// True when the request must not proceed.
    pub fn is_denied(&self) -> bool {
        !self.is_allowed()
    }

    /// True when the limiter could not decide and the policy did.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, GuardedDecision::Unavailable { .. })
    }

    /// Nanoseconds until a retry may succeed; zero when allowed.
    pub fn retry_after_ns(&self) -> u64 {
        match self {
            GuardedDecision::Decided(d) => d.retry_after_ns(),
            GuardedDecision::Unavailable { allowed: true, .. } => 0,
            GuardedDecision::Unavailable { retry_after_ns, .. } => *retry_after_ns,
        }
    }

    /// The limiter's decision, when it made one (what a refund needs).
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            GuardedDecision::Decided(d) => Some(d),
            GuardedDecision::Unavailable { .. } => None,
        }
    }
}

/// The outcome of a guarded permit acquisition.
#[derive(Debug)]
#[must_use = "a held permit is released as soon as it is dropped"]
// The held permit is the common case: boxing it would allocate on every acquisition.
#[allow(clippy::large_enum_variant)]
pub enum GuardedPermit<C: Clock = MonotonicClock> {
    /// A permit of the limit, held until dropped.
    Held(Permit<C>),
    /// The limiter decided: every permit is held.
    AllHeld,
    /// The limiter file (or this limit's state) could not be used; the policy decided. A
    /// fail-open grant holds nothing: it limits nothing.
    Unavailable {
        /// True for [`Unavailable::FailOpen`].
        allowed: bool,
        /// For a denial: nanoseconds until the next attempt to open the file (at least 1).
        retry_after_ns: u64,
    },
}

impl<C: Clock> GuardedPermit<C> {
    /// True when the work may proceed (a held permit, or fail-open).
    pub fn is_allowed(&self) -> bool {
        match self {
            GuardedPermit::Held(_) => true,
            GuardedPermit::AllHeld => false,
            GuardedPermit::Unavailable { allowed, .. } => *allowed,
        }
    }

    /// True when the limiter could not decide and the policy did.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, GuardedPermit::Unavailable { .. })
    }

    /// The permit, when one is held.
    pub fn permit(&self) -> Option<&Permit<C>> {
        match self {
            GuardedPermit::Held(p) => Some(p),
            _ => None,
        }
    }
}

type Opener<C> = Box<dyn Fn() -> Result<Limiter<C>> + Send + Sync>;

struct Guard<C: Clock> {
    opener: Opener<C>,
    reopen_every_ns: u64,
    limiter: OnceLock<Limiter<C>>,
    /// `CLOCK_MONOTONIC` ns before which no new attempt is made (0: attempt now).
    next_attempt_ns: AtomicU64,
    /// Serialises attempts within this process; holds the last failure.
    attempt: Mutex<Option<Error>>,
    attempts: AtomicU64,
}

/// A limiter that may not be available yet (or any more): it opens its file when it can, and
/// until then lets each limit's [`Unavailable`] policy decide. Cheap to clone.
pub struct GuardedLimiter<C: Clock = MonotonicClock> {
    guard: Arc<Guard<C>>,
}

impl<C: Clock> Clone for GuardedLimiter<C> {
    fn clone(&self) -> Self {
        GuardedLimiter {
            guard: Arc::clone(&self.guard),
        }
    }
}

impl<C: Clock> std::fmt::Debug for GuardedLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedLimiter")
            .field("attached", &self.guard.limiter.get())
            .field("reopen_every_ns", &self.guard.reopen_every_ns)
            .finish()
    }
}

impl Limiter<MonotonicClock> {
    /// Attach to the file at `path` when it can be opened ([`Limiter::open`], default access
    /// checks), retrying at most once per `reopen_every` (zero: at every decision that finds it
    /// unavailable). Never fails: see [`GuardedLimiter`].
    pub fn open_guarded(path: impl AsRef<Path>, reopen_every: Duration) -> GuardedLimiter {
        let path: PathBuf = path.as_ref().to_owned();
        GuardedLimiter::with_opener(reopen_every, move || Limiter::open(&path))
    }
}

impl<C: Clock> GuardedLimiter<C> {
    /// A guarded limiter that attaches with `opener` (for example a [`crate::Builder`] chain
    /// ending in `open` or `create_or_open`, which may set a clock, definitions to check and
    /// access options), retrying at most once per `reopen_every`. One attempt is made at once.
    pub fn with_opener(
        reopen_every: Duration,
        opener: impl Fn() -> Result<Limiter<C>> + Send + Sync + 'static,
    ) -> GuardedLimiter<C> {
        let g = GuardedLimiter {
            guard: Arc::new(Guard {
                opener: Box::new(opener),
                reopen_every_ns: u64::try_from(reopen_every.as_nanos()).unwrap_or(u64::MAX),
                limiter: OnceLock::new(),
                next_attempt_ns: AtomicU64::new(0),
                attempt: Mutex::new(None),
                attempts: AtomicU64::new(0),
            }),
        };
        g.attached();
        g
    }

    /// A handle to the limit `name`, deciding by `policy` while the file is unavailable.
    pub fn limit(&self, name: &str, policy: Unavailable) -> GuardedLimit<C> {
        GuardedLimit {
            guard: Arc::clone(&self.guard),
            name: name.to_owned(),
            policy,
            limit: OnceLock::new(),
        }
    }

    /// The attached limiter, attempting to open the file if it is not attached and the reopen
    /// interval has passed.
    pub fn attached(&self) -> Option<&Limiter<C>> {
        self.guard.attached()
    }

    /// Why the last attempt to open the file failed (as text), if the file is not attached.
    pub fn last_error(&self) -> Option<String> {
        if self.guard.limiter.get().is_some() {
            return None;
        }
        let last = self.guard.attempt.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().map(|e| e.to_string())
    }

    /// How many times opening the file was attempted so far.
    pub fn open_attempts(&self) -> u64 {
        // Relaxed: a statistic.
        self.guard.attempts.load(Ordering::Relaxed)
    }
}

impl<C: Clock> Guard<C> {
    fn attached(&self) -> Option<&Limiter<C>> {
        if let Some(l) = self.limiter.get() {
            return Some(l);
        }
        let now = MonotonicClock.now_ns();
        // Relaxed: the deadline is a hint that spares system calls; the mutex serialises attempts.
        if now < self.next_attempt_ns.load(Ordering::Relaxed) {
            return None;
        }
        // Another thread of this process is attempting: do not wait for it.
        let mut last = self.attempt.try_lock().ok()?;
        if let Some(l) = self.limiter.get() {
            return Some(l);
        }
        // Relaxed: as above.
        self.attempts.fetch_add(1, Ordering::Relaxed);
        match (self.opener)() {
            Ok(limiter) => {
                *last = None;
                Some(self.limiter.get_or_init(|| limiter))
            }
            Err(e) => {
                *last = Some(e);
                let next = MonotonicClock.now_ns().saturating_add(self.reopen_every_ns);
                // Relaxed: as above.
                self.next_attempt_ns.store(next, Ordering::Relaxed);
                None
            }
        }
    }

    /// Nanoseconds until the next attempt to open the file, at least 1.
    fn retry_after_ns(&self) -> u64 {
        // Relaxed: a hint.
        let next = self.next_attempt_ns.load(Ordering::Relaxed);
        next.saturating_sub(MonotonicClock.now_ns()).max(1)
    }
}

/// One limit of a [`GuardedLimiter`], with its [`Unavailable`] policy. Cheap to clone.
pub struct GuardedLimit<C: Clock = MonotonicClock> {
    guard: Arc<Guard<C>>,
    name: String,
    policy: Unavailable,
    limit: OnceLock<Limit<C>>,
}

impl<C: Clock> Clone for GuardedLimit<C> {
    fn clone(&self) -> Self {
        GuardedLimit {
            guard: Arc::clone(&self.guard),
            name: self.name.clone(),
            policy: self.policy,
            limit: self.limit.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for GuardedLimit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedLimit")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .field("attached", &self.limit.get().is_some())
            .finish()
    }
}

impl<C: Clock> GuardedLimit<C> {
    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it decides while unavailable.
    pub fn policy(&self) -> Unavailable {
        self.policy
    }

    /// The attached limit, attempting to open the file if needed; `Ok(None)` while unavailable.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`] when the file is open and has no limit of this name.
    pub fn limit(&self) -> Result<Option<&Limit<C>>> {
        if let Some(l) = self.limit.get() {
            return Ok(Some(l));
        }
        let Some(limiter) = self.guard.attached() else {
            return Ok(None);
        };
        let limit = limiter.limit(&self.name)?;
        Ok(Some(self.limit.get_or_init(|| limit)))
    }

    fn unavailable(&self) -> GuardedDecision {
        match self.policy {
            Unavailable::FailOpen => GuardedDecision::Unavailable {
                allowed: true,
                retry_after_ns: 0,
            },
            Unavailable::FailClosed => GuardedDecision::Unavailable {
                allowed: false,
                retry_after_ns: self.guard.retry_after_ns(),
            },
        }
    }

    fn decide(
        &self,
        cost: u64,
        f: impl FnOnce(&Limit<C>) -> Result<Decision>,
    ) -> Result<GuardedDecision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        match self.limit()? {
            None => Ok(self.unavailable()),
            Some(l) => match f(l) {
                Ok(d) => Ok(GuardedDecision::Decided(d)),
                // Damaged state, or a file replaced by one that cannot be attached.
                Err(Error::CorruptState { .. } | Error::Io { .. }) => Ok(self.unavailable()),
                Err(e) => Err(e),
            },
        }
    }

    /// [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire), or the policy while unavailable.
    ///
    /// # Errors
    ///
    /// The caller's errors of [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire) ([`Error::ZeroCost`],
    /// [`Error::CostExceedsCapacity`], [`Error::WrongKind`]), [`Error::UnknownLimit`],
    /// [`Error::ClockOutOfRange`].
    pub fn try_acquire(&self, cost: u64) -> Result<GuardedDecision> {
        self.decide(cost, |l| dispatch::decide(l.site(), None, cost, true))
    }

    /// [`TokenBucketLimit::peek`](crate::TokenBucketLimit::peek), or the policy while unavailable.
    ///
    /// # Errors
    ///
    /// As [`GuardedLimit::try_acquire`].
    pub fn peek(&self, cost: u64) -> Result<GuardedDecision> {
        self.decide(cost, |l| dispatch::decide(l.site(), None, cost, false))
    }

    /// [`KeyedTokenBucketLimit::try_acquire_key`](crate::KeyedTokenBucketLimit::try_acquire_key), or the policy while unavailable.
    ///
    /// # Errors
    ///
    /// As [`GuardedLimit::try_acquire`], plus [`Error::InvalidKey`] and [`Error::TableFull`].
    /// A bad key is refused even while unavailable.
    pub fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<GuardedDecision> {
        check_key_len(key)?;
        self.decide(cost, |l| dispatch::decide(l.site(), Some(key), cost, true))
    }

    /// [`ConcurrencyLimit::try_acquire_permit`](crate::ConcurrencyLimit::try_acquire_permit), or the policy while unavailable.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the limit is not a concurrency limit (once attached),
    /// [`Error::UnknownLimit`].
    pub fn try_acquire_permit(&self) -> Result<GuardedPermit<C>> {
        self.permit(|l| dispatch::try_acquire_permit(l.site(), None))
    }

    /// [`KeyedConcurrencyLimit::try_acquire_key_permit`](crate::KeyedConcurrencyLimit::try_acquire_key_permit), or the policy while unavailable.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] (even while unavailable); once attached, [`Error::WrongKind`] if
    /// the limit is not a keyed concurrency limit and [`Error::TableFull`];
    /// [`Error::UnknownLimit`].
    pub fn try_acquire_key_permit(&self, key: &[u8]) -> Result<GuardedPermit<C>> {
        check_key_len(key)?;
        self.permit(|l| dispatch::try_acquire_permit(l.site(), Some(key)))
    }

    /// A permit from `acquire` once attached, else the policy's answer.
    fn permit(
        &self,
        acquire: impl FnOnce(&Limit<C>) -> Result<Option<Permit<C>>>,
    ) -> Result<GuardedPermit<C>> {
        let unavailable = |d: GuardedDecision| match d {
            GuardedDecision::Unavailable {
                allowed,
                retry_after_ns,
            } => GuardedPermit::Unavailable {
                allowed,
                retry_after_ns,
            },
            GuardedDecision::Decided(_) => GuardedPermit::AllHeld,
        };
        match self.limit()? {
            None => Ok(unavailable(self.unavailable())),
            Some(l) => match acquire(l) {
                Ok(Some(p)) => Ok(GuardedPermit::Held(p)),
                Ok(None) => Ok(GuardedPermit::AllHeld),
                Err(Error::CorruptState { .. } | Error::Io { .. }) => {
                    Ok(unavailable(self.unavailable()))
                }
                Err(e) => Err(e),
            },
        }
    }
}

/// A key's length is checked even while the file is unavailable: a bad key is the caller's
/// error whatever state the file is in.
fn check_key_len(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > crate::engine::keyed::MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            reason: format!(
                "a key must be 1..={} bytes, not {}",
                crate::engine::keyed::MAX_KEY_LEN,
                key.len()
            ),
        });
    }
    Ok(())
}
