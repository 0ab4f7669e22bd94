//! The rate algorithms, as pure functions of `(now, stored state, parameters)`.
//!
//! # Implementation details
//!
//! Each single-word algorithm ([`gcra`], [`fixed_window`], [`sliding_window`]) is a function
//! `step(now, word, cost) -> Step` that never touches memory; [`mutate_from`] is the one CAS loop that
//! changes a word in the mapped file (or a loom atomic in the models), for decisions
//! ([`try_decide`] applies a step with it) as for refunds, the rescale of a retune and
//! reservations: load the word, read the clock, compute, and commit the new word with one
//! compare-and-swap, re-reading the clock on every retry so that the time a change is dated by is
//! never older than the state it was computed from by more than one loop iteration. A process
//! killed at any instruction leaves either the old word or the new one: nothing is ever
//! half-written.
//!
//! The exact sliding log ([`sliding_log`]) needs a ring of entries; its commit is still a single
//! CAS (on the claimed entry), with the ring head as a hint that anyone may advance.

pub(crate) mod adaptive;
pub(crate) mod calendar;
pub(crate) mod counters;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::sync::AtomicWord;

/// The near-limit threshold of a budget `whole` (tolerance ns, or a limit): `whole x fraction
/// / 65536` (`fraction` in 1/65536) without a 128-bit product: small wholes (limits) are
/// multiplied first, large ones (tolerances in ns) shifted first, exact to 1/65536. A decision
/// is near the limit when its slack is under it.
#[inline(always)]
pub(crate) fn near_threshold(whole: u64, fraction: u16) -> u64 {
    if whole >> 47 == 0 {
        (whole * fraction as u64) >> 16
    } else {
        (whole >> 16) * fraction as u64
    }
}

/// The outcome of one decision: allowed or denied, what remains, and when to retry.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("doc.shm");
/// use shmlimit::{Limiter, TokenBucket};
/// let limiter = Limiter::builder()
///     .limit("api", TokenBucket::per_second(10).burst(2))
///     .create_or_open(&path)?;
/// let api = limiter.token_bucket("api")?;
/// assert!(api.try_acquire(1)?.is_allowed());
/// assert!(api.try_acquire(1)?.is_allowed());
/// let third = api.try_acquire(1)?;
/// assert!(third.is_denied());
/// assert!(third.retry_after_ns() > 0);
/// # Ok(()) }
/// ```
#[must_use = "a decision that is not checked limits nothing"]
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    retry_after_ns: u64,
    // `remaining()` is `slack / unit`, computed only when asked: for the token bucket the unit is
    // the emission interval, and a division on every decision would cost more than the CAS.
    slack: u64,
    unit: u64,
    /// The cost this decision admitted (for refunds).
    pub(crate) cost: u64,
    /// Where the admission was recorded: the window index (windows) or the date in log units
    /// (sliding log); refunds use it never to give back into a later window.
    pub(crate) stamp: u64,
    /// A shadow limit that would have denied: reported allowed, counted as shadow-denied.
    pub(crate) shadow_denied: bool,
    /// The full budget in the unit of `slack` (tolerance ns, or the limit): for near-limit.
    pub(crate) whole: u64,
    /// Which limit (and file) made this decision, for refunds: 0 when unknown (a grant
    /// rebuilt from a C grant record whose `reserved[1]` was cleared).
    pub(crate) origin: u64,
    /// Nanoseconds until the limit is back to its whole budget if nothing else is admitted.
    reset_ns: u64,
}

/// [`Decision::relocated`] through a `Result`: how an engine's straight path returns the
/// decision its out-of-line slow path made.
#[inline(always)]
pub(crate) fn relocated(r: crate::error::Result<Decision>) -> crate::error::Result<Decision> {
    match r {
        Ok(d) => Ok(d.relocated()),
        Err(e) => Err(e),
    }
}

impl Decision {
    #[inline(always)]
    pub(crate) fn allowed(slack: u64, unit: u64) -> Self {
        Decision {
            allowed: true,
            retry_after_ns: 0,
            slack,
            unit,
            cost: 0,
            stamp: 0,
            shadow_denied: false,
            whole: 0,
            origin: 0,
            reset_ns: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn denied(retry_after_ns: u64, slack: u64, unit: u64) -> Self {
        // A denial always has something to wait for: at least one nanosecond.
        Decision {
            allowed: false,
            retry_after_ns: retry_after_ns.max(1),
            slack,
            unit,
            cost: 0,
            stamp: 0,
            shadow_denied: false,
            whole: 0,
            origin: 0,
            reset_ns: 0,
        }
    }

    /// This decision as a new value, for a decision returned through memory by an out-of-line
    /// call (the slow path of an unkeyed or keyed decision) that is merged with decisions made
    /// in registers. Returned as it is, the optimizer writes the call's
    /// result straight into the caller's result, and every inlined decision then stores all its
    /// fields there too (measured: 15 instructions per uncontended decision). The opaque read
    /// of one field (`black_box`, on the slow path only) makes it a copy, so the fast path's
    /// fields stay in registers and the unused ones are never written.
    #[inline(always)]
    pub(crate) fn relocated(self) -> Self {
        Decision {
            allowed: std::hint::black_box(self.allowed),
            ..self
        }
    }

    /// What one unit of `slack` is: a token bucket's emission interval (the nanoseconds one
    /// unit of cost added to its theoretical arrival time), a window's 1.
    #[inline(always)]
    pub(crate) fn unit(&self) -> u64 {
        self.unit
    }

    #[inline(always)]
    pub(crate) fn of(mut self, whole: u64) -> Self {
        self.whole = whole;
        self
    }

    /// Record when the limit is back to its whole budget: `ns` from the decision's `now`.
    #[inline(always)]
    pub(crate) fn resetting(mut self, ns: u64) -> Self {
        self.reset_ns = ns;
        self
    }

    #[inline(always)]
    pub(crate) fn stamped(mut self, stamp: u64) -> Self {
        self.stamp = stamp;
        self
    }

    /// Is the remaining slack under `fraction` (in 1/65536) of the whole budget?
    #[inline(always)]
    pub(crate) fn is_near(&self, fraction: u16) -> bool {
        self.slack < near_threshold(self.whole, fraction)
    }

    /// Is the remaining slack under `threshold` ([`near_threshold`] of the whole budget)?
    #[inline(always)]
    pub(crate) fn slack_under(&self, threshold: u64) -> bool {
        self.slack < threshold
    }

    /// True when a shadow (dry-run) limit would have denied this request; it was admitted anyway
    /// and nothing was consumed.
    #[inline]
    pub fn is_shadow_denied(&self) -> bool {
        self.shadow_denied
    }

    /// What a refund needs to know about this grant, as two words (for the C ABI, which keeps
    /// them in its decision struct): the cost admitted and where it was recorded.
    pub(crate) fn grant_record(&self) -> [u64; 2] {
        [self.cost(), self.stamp]
    }

    /// A grant rebuilt from [`Decision::grant_record`], good for `refund` only.
    pub(crate) fn from_grant_record(record: [u64; 2]) -> Decision {
        let mut d = Decision::allowed(0, 1);
        d.cost = record[0];
        d.stamp = record[1];
        d
    }

    /// The cost this decision admitted (0 when denied or shadow-denied).
    #[inline]
    pub fn cost(&self) -> u64 {
        if self.allowed {
            self.cost
        } else {
            0
        }
    }

    /// True when the request was admitted (and, for `try_acquire`, its cost consumed).
    #[inline(always)]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// True when the request was refused; nothing was consumed.
    #[inline(always)]
    pub fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// Units that could still be admitted right now after this decision, if no one else acts.
    #[inline]
    pub fn remaining(&self) -> u64 {
        let unit = self.unit.max(1);
        // Less than one unit left (every denial of a bucket, and an admission that emptied
        // it): 0 without the 64-bit division, which a C caller, who is always told
        // `remaining`, paid on every decision.
        if self.slack < unit {
            return 0;
        }
        self.slack / unit
    }

    /// Nanoseconds until the same request could be admitted if nothing else is admitted
    /// meanwhile; zero when allowed. Exact for the token bucket and the sliding log; the next
    /// boundary (fixed window) or the time the weighted estimate falls enough (sliding window).
    #[inline(always)]
    pub fn retry_after_ns(&self) -> u64 {
        self.retry_after_ns
    }

    /// [`Decision::retry_after_ns`] as a [`Duration`].
    #[inline]
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_ns)
    }

    /// Retry-after in whole seconds, rounded up, for an HTTP `Retry-After` header (RFC 6585):
    /// a client that waits this long never retries too early.
    #[inline]
    pub fn retry_after_secs_ceil(&self) -> u64 {
        self.retry_after_ns.div_ceil(1_000_000_000)
    }

    /// Nanoseconds until the limit is back to its whole budget (a full bucket, an empty window
    /// or log) if nothing else is admitted meanwhile: redis-cell's `reset_after`, the `t` of the
    /// IETF `RateLimit` header. Exact for the token bucket (`tat - now`) and the sliding log
    /// (the newest admission's expiry); the end of the window that holds the last admission for
    /// the fixed window, and of the window after it for the sliding window (whose estimate
    /// still weighs the previous window). Zero for a limit already whole and for permits.
    #[inline(always)]
    pub fn reset_after_ns(&self) -> u64 {
        self.reset_ns
    }

    /// [`Decision::reset_after_ns`] as a [`Duration`].
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_ns)
    }

    /// [`Decision::reset_after_ns`] in whole seconds, rounded up.
    #[inline]
    pub fn reset_after_secs_ceil(&self) -> u64 {
        self.reset_ns.div_ceil(1_000_000_000)
    }
}

/// Decisions are equal when what they tell the caller is: allowed, remaining and retry-after
/// (a peek equals the decision the acquire then makes, although only the latter holds a grant).
impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.allowed == other.allowed
            && self.retry_after_ns == other.retry_after_ns
            && self.remaining() == other.remaining()
    }
}

impl Eq for Decision {}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("remaining", &self.remaining())
            .field("retry_after_ns", &self.retry_after_ns)
            .field("reset_after_ns", &self.reset_ns)
            .finish()
    }
}

/// What a pure step function concluded for one state word. [`mutate_from`] takes any outcome
/// `R`; decisions are `Step<Decision>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step<R = Decision> {
    /// Admit, replacing the word by `new`.
    Admit { new: u64, decision: R },
    /// Deny; the word stays as it is.
    Deny(R),
}

/// Why an algorithm could not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The shared state holds a value no valid history can produce.
    Corrupt,
    /// The clock reads beyond what the state encoding can represent.
    ClockRange(u64),
}

/// Apply `step` to `word` with one CAS loop.
///
/// `now` is called once per attempt, after the word is loaded, so a retry never decides on an
/// older time than the state it saw. With `commit == false` (peek) nothing is written.
///
/// The library itself decides through [`try_decide`]; the models and tests use this form.
#[cfg(test)]
#[inline(always)]
pub(crate) fn decide<A: AtomicWord>(
    word: &A,
    now: impl FnMut() -> u64,
    commit: bool,
    mut step: impl FnMut(u64, u64) -> Step,
) -> Decision {
    match try_decide(word, now, commit, |t, w| {
        Ok::<_, std::convert::Infallible>(step(t, w))
    }) {
        Ok(decision) => decision,
        Err(never) => match never {},
    }
}

/// [`decide`] for a step that can fail (damaged live parameters, a cost above a retuned
/// capacity): the error ends the loop with nothing written. A use of [`mutate_from`].
#[inline(always)]
pub(crate) fn try_decide<A: AtomicWord, E>(
    word: &A,
    now: impl FnMut() -> u64,
    commit: bool,
    step: impl FnMut(u64, u64) -> Result<Step, E>,
) -> Result<Decision, E> {
    // Acquire: pairs with the AcqRel CAS of the decision that wrote this word.
    mutate_from(word, word.load(Ordering::Acquire), now, commit, step)
}

/// [`try_decide`] from `current`, a value of `word` the caller loaded (Acquire) before the
/// first call of `now`: a composed check loads every limit's word, then reads the clock once
/// for all of them.
#[inline(always)]
pub(crate) fn try_decide_from<A: AtomicWord, E>(
    word: &A,
    current: u64,
    now: impl FnMut() -> u64,
    commit: bool,
    step: impl FnMut(u64, u64) -> Result<Step, E>,
) -> Result<Decision, E> {
    mutate_from(word, current, now, commit, step)
}

/// What one attempt of [`mutate`] concluded from the word it loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change<R> {
    /// Replace the word by `.0` (if it is still the word loaded), then return `.1`.
    Write(u64, R),
    /// Leave the word as it is and return this.
    Keep(R),
}

impl Change<()> {
    /// Write `new` unless it is the word `current` already holds.
    #[inline(always)]
    pub(crate) fn unless_same(current: u64, new: u64) -> Self {
        if new == current {
            Change::Keep(())
        } else {
            Change::Write(new, ())
        }
    }
}

/// [`mutate_from`] for the changes that are not decisions (refunds, the rescale of a retune,
/// reservations), in their terms: from the word loaded now, always committed.
#[inline(always)]
pub(crate) fn mutate<A: AtomicWord, R, E>(
    word: &A,
    now: impl FnMut() -> u64,
    mut change: impl FnMut(u64, u64) -> Result<Change<R>, E>,
) -> Result<R, E> {
    // Acquire: pairs with the AcqRel CAS of the change that wrote this word.
    let current = word.load(Ordering::Acquire);
    mutate_from(word, current, now, true, |t, w| {
        Ok(match change(t, w)? {
            Change::Write(new, out) => Step::Admit { new, decision: out },
            Change::Keep(out) => Step::Deny(out),
        })
    })
}

/// The one loop that changes a state word: decisions ([`try_decide`]), refunds, the rescale of
/// a retune and reservations ([`mutate`]) all go through it.
///
/// Each attempt takes `current` (a value of `word` the caller loaded, Acquire) or the word that
/// beat its CAS (on a retry), then reads the clock with `now`, then computes with `step`, then
/// commits an admission with one CAS (unless `commit` is false: a peek): the clock is always
/// read after the word it is compared with, so a retry never dates a change earlier than the
/// state it saw. An error ends the loop with nothing written. Generic over the outcome `R`,
/// so that a decision's loop is exactly the one it would be written for [`Decision`] alone.
#[inline(always)]
pub(crate) fn mutate_from<A: AtomicWord, R, E>(
    word: &A,
    mut current: u64,
    mut now: impl FnMut() -> u64,
    commit: bool,
    mut step: impl FnMut(u64, u64) -> Result<Step<R>, E>,
) -> Result<R, E> {
    loop {
        match step(now(), current)? {
            Step::Deny(out) => return Ok(out),
            Step::Admit { new, decision } => {
                if !commit {
                    return Ok(decision);
                }
                // AcqRel on success: the next change's Acquire load sees this one whole.
                // Acquire on failure: we retry from the word that beat us. No backoff on failure
                // (crossbeam's `Backoff`): a failed CAS means another change committed, and the
                // retry already has the word it wrote, so waiting would only add latency to the
                // loser; a decision is one line, one CAS, and never waits for anyone.
                match word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Ok(decision),
                    Err(actual) => current = actual,
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod loom_models;
