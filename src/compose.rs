//! Composed checks: one request, several limits, all or nothing.
//!
//! # Implementation details
//!
//! A request usually has to pass several limits at once: the caller's quota, the shared
//! downstream budget, a retry budget. [`try_acquire_all`] acquires them in order; when one denies,
//! every grant already taken is refunded (see [`crate::Limit::refund`] for what a refund means per
//! algorithm), so a denied request consumes nothing anywhere. The limits after the denying one
//! are peeked, so the composed retry-after is the largest of all the limits that would deny.
//!
//! Between a grant and its refund the earlier limits are transiently charged: other requests see
//! them slightly fuller for that instant, which can only make them stricter. A refund never gives
//! back more than its grant took, so the sum over any single limit never exceeds its own bound.
//! A process killed between a grant and its refund leaves that grant consumed (fail closed).

use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{invalid, Result};
use crate::handle::dispatch;
use crate::handle::{KeyedRateLimit, RateLimit};
use crate::limiter::Limit;

/// Most limits one composed check may hold (the decisions are kept inline, without allocation).
pub const MAX_CHECKS: usize = 8;

/// One limit (and cost) in a composed check.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a, C: Clock = MonotonicClock> {
    limit: &'a Limit<C>,
    cost: u64,
    key: Option<&'a [u8]>,
}

impl<'a, C: Clock> Check<'a, C> {
    /// Check the unkeyed rate limit `limit` (a [`crate::TokenBucketLimit`],
    /// [`crate::WindowLimit`] or [`crate::SlidingLogLimit`]) for `cost` units.
    pub fn new(limit: &'a (impl RateLimit<C> + ?Sized), cost: u64) -> Self {
        Check {
            limit: limit.as_limit(),
            cost,
            key: None,
        }
    }

    /// Check the keyed rate limit `limit` (a [`crate::KeyedTokenBucketLimit`] or
    /// [`crate::KeyedWindowLimit`]) for `cost` units of `key`'s budget.
    pub fn keyed(limit: &'a (impl KeyedRateLimit<C> + ?Sized), key: &'a [u8], cost: u64) -> Self {
        Check {
            limit: limit.as_limit(),
            cost,
            key: Some(key),
        }
    }

    /// A check on an untyped handle, for the C ABI (which refuses a wrong kind at run time,
    /// with its own status codes).
    pub(crate) fn untyped(limit: &'a Limit<C>, key: Option<&'a [u8]>, cost: u64) -> Self {
        Check { limit, cost, key }
    }
}

/// The outcome of a composed check.
#[derive(Debug, Clone, Copy)]
#[must_use = "a decision that is not checked limits nothing"]
pub struct Composed {
    allowed: bool,
    denied_by: Option<usize>,
    retry_after_ns: u64,
    decisions: [Option<Decision>; MAX_CHECKS],
    len: usize,
}

impl Composed {
    /// True when every limit admitted (and their costs were consumed).
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// True when some limit denied; nothing was consumed anywhere.
    pub fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// The index (in the checks given) of the first limit that denied.
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// The largest retry-after among the limits that would deny now: the earliest time the whole
    /// composed request could pass, if nothing else is admitted meanwhile. Zero when allowed.
    pub fn retry_after_ns(&self) -> u64 {
        self.retry_after_ns
    }

    /// Retry-after in whole seconds, rounded up (for an HTTP `Retry-After` header).
    pub fn retry_after_secs_ceil(&self) -> u64 {
        self.retry_after_ns.div_ceil(1_000_000_000)
    }

    /// The decision of check `i`: the grant when allowed; for a denied composed request, the
    /// denial (for `denied_by`) or the peek (after it); `None` for refunded grants.
    pub fn decision(&self, i: usize) -> Option<&Decision> {
        self.decisions[..self.len].get(i).and_then(Option::as_ref)
    }

    /// Give back every grant of an allowed composed request whose work was never done, with the
    /// same checks (in the same order) it was acquired with.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidParameter`] when the checks differ in number; the first refund
    /// error otherwise (the other refunds are still attempted).
    pub fn refund<C: Clock>(&self, checks: &[Check<'_, C>]) -> Result<()> {
        if checks.len() != self.len {
            return Err(invalid("", "refund with a different number of checks"));
        }
        let mut first = Ok(());
        if self.allowed {
            for (check, decision) in checks.iter().zip(&self.decisions) {
                if let Some(d) = decision {
                    if let Err(e) = check.give_back(d) {
                        first = first.and(Err(e));
                    }
                }
            }
        }
        first
    }
}

/// The two operations composition needs from a limit: the real one for [`Check`], a loom model
/// in the tests.
pub(crate) trait Acquire {
    fn acquire(&self, commit: bool) -> Result<Decision>;
    fn give_back(&self, grant: &Decision) -> Result<()>;
}

impl<C: Clock> Acquire for Check<'_, C> {
    fn acquire(&self, commit: bool) -> Result<Decision> {
        dispatch::decide(self.limit.site(), self.key, self.cost, commit)
    }
    fn give_back(&self, grant: &Decision) -> Result<()> {
        dispatch::refund(self.limit.site(), self.key, grant)
    }
}

/// Admit a request on every limit, or on none.
///
/// # Errors
///
/// More than [`MAX_CHECKS`] checks, or any error of a single check ([`crate::Error::ZeroCost`],
/// [`crate::Error::CostExceedsCapacity`], ...); on an error every grant already taken is
/// refunded first.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("compose.shm");
/// use shmlimit::{try_acquire_all, Check, Limiter, TokenBucket};
/// let limiter = Limiter::builder()
///     .limit("user", TokenBucket::per_second(1).burst(10))
///     .limit("downstream", TokenBucket::per_second(1).burst(1))
///     .create_or_open(&path)?;
/// let (user, downstream) = (limiter.token_bucket("user")?, limiter.token_bucket("downstream")?);
/// let checks = [Check::new(&user, 1), Check::new(&downstream, 1)];
/// assert!(try_acquire_all(&checks)?.is_allowed());
/// let second = try_acquire_all(&checks)?;
/// assert_eq!(second.denied_by(), Some(1));   // the downstream budget is empty
/// assert_eq!(user.peek(1)?.remaining(), 8);   // and the user's token came back
/// # Ok(()) }
/// ```
#[inline]
pub fn try_acquire_all<C: Clock>(checks: &[Check<'_, C>]) -> Result<Composed> {
    // One clock read for every limit: possible when the clock has no state (a zero-sized
    // clock, as `MonotonicClock`, reads the same timeline in every handle; two `ManualClock`s
    // may not), and only for limits whose state is one word.
    if std::mem::size_of::<C>() != 0 || checks.len() > MAX_CHECKS {
        return compose(checks);
    }
    let mut loaded = [None; MAX_CHECKS];
    let mut first = None;
    for (check, slot) in checks.iter().zip(loaded.iter_mut()) {
        if check.key.is_none() {
            if let Ok(Some(word)) = dispatch::load_word(check.limit.site()) {
                first.get_or_insert(word.site);
                *slot = Some(word);
            }
        }
    }
    let Some(first) = first else {
        return compose(checks);
    };
    // Read after every load above: no limit decides on a time older than the word it loaded.
    let t = first.clock().now_ns();
    compose_with(checks, |i, check, slot| {
        // Each arm stores its decision itself: one value merged from both would be copied
        // through a temporary.
        match loaded[i] {
            // The first admission of a check whose word was loaded: from that word at `t` (a
            // retry reads the clock again).
            Some(word) => *slot = Some(word.acquire(t, check.cost)?),
            None => *slot = Some(check.acquire(true)?),
        }
        Ok(())
    })
}

pub(crate) fn compose<A: Acquire>(checks: &[A]) -> Result<Composed> {
    compose_with(checks, |_, check, slot| {
        *slot = Some(check.acquire(true)?);
        Ok(())
    })
}

/// [`compose`], with `admit(i, check, slot)` making check `i`'s admission into `slot` (peeks
/// after a denial go through [`Acquire::acquire`]).
#[inline(always)]
fn compose_with<A: Acquire>(
    checks: &[A],
    admit: impl FnMut(usize, &A, &mut Option<Decision>) -> Result<()>,
) -> Result<Composed> {
    if checks.len() > MAX_CHECKS {
        return Err(invalid(
            "",
            format!("at most {MAX_CHECKS} limits in one composed check"),
        ));
    }
    let mut out = Composed {
        allowed: true,
        denied_by: None,
        retry_after_ns: 0,
        decisions: [None; MAX_CHECKS],
        len: checks.len(),
    };
    fill(&mut out, checks, admit)?;
    Ok(out)
}

/// Decide every check into `out`, all or nothing.
#[inline(always)]
fn fill<A: Acquire>(
    out: &mut Composed,
    checks: &[A],
    mut admit: impl FnMut(usize, &A, &mut Option<Decision>) -> Result<()>,
) -> Result<()> {
    let undo = |out: &mut Composed, upto: usize| {
        for (check, slot) in checks[..upto].iter().zip(out.decisions.iter_mut()) {
            if let Some(grant) = slot.take() {
                // A failed refund leaves the grant consumed: stricter, never looser.
                let _ = check.give_back(&grant);
            }
        }
    };
    for (i, check) in checks.iter().enumerate() {
        if let Err(e) = admit(i, check, &mut out.decisions[i]) {
            out.decisions[i] = None;
            undo(out, i);
            return Err(e);
        }
        let retry_after_ns = match &out.decisions[i] {
            Some(d) if d.is_denied() => d.retry_after_ns(),
            _ => continue,
        };
        undo(out, i);
        out.allowed = false;
        out.denied_by = Some(i);
        out.retry_after_ns = retry_after_ns;
        for (j, later) in checks.iter().enumerate().skip(i + 1) {
            if let Ok(peek) = later.acquire(false) {
                out.retry_after_ns = out.retry_after_ns.max(peek.retry_after_ns());
                out.decisions[j] = Some(peek);
            }
        }
        break;
    }
    Ok(())
}

#[cfg(test)]
mod loom_models {
    //! Two threads compose the same two token buckets (A then B): refunds never let either
    //! bucket exceed its bound, and a denied composition leaves no trace.
    use super::*;
    use crate::algo::decide;
    use crate::algo::gcra::Gcra;
    use crate::sync::loom_runner::model;
    use crate::sync::AtomicWord;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;
    use std::sync::atomic::Ordering;

    struct Bucket {
        word: AtomicU64,
        g: Gcra,
        now: u64,
    }

    impl Acquire for Bucket {
        fn acquire(&self, commit: bool) -> Result<Decision> {
            let mut d = decide(&self.word, || self.now, commit, |t, w| self.g.step(t, w, 1));
            d.cost = 1;
            Ok(d)
        }
        fn give_back(&self, _grant: &Decision) -> Result<()> {
            let mut cur = AtomicWord::load(&self.word, Ordering::Acquire);
            loop {
                let new = self.g.refund(self.now, cur, 1);
                match AtomicWord::compare_exchange(
                    &self.word,
                    cur,
                    new,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(()),
                    Err(a) => cur = a,
                }
            }
        }
    }

    fn bucket(capacity: u64, now: u64) -> Bucket {
        let g = Gcra {
            emission_ns: 1_000,
            tolerance_ns: capacity * 1_000,
            capacity,
        };
        Bucket {
            word: AtomicU64::new(0),
            g,
            now,
        }
    }

    #[test]
    fn loom_composed_refund_consumes_nothing_on_denial() {
        model("loom_composed_refund_consumes_nothing_on_denial", 3, || {
            let now = 1_000_000;
            // A has room for both requests, B for one: exactly one composition passes, and A
            // ends with exactly one token used.
            let pair = Arc::new((bucket(2, now), bucket(1, now)));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let pair = Arc::clone(&pair);
                    loom::thread::spawn(move || {
                        let checks: [&dyn Acquire; 2] = [&pair.0, &pair.1];
                        compose(&checks).unwrap().is_allowed()
                    })
                })
                .collect();
            let passed = threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .filter(|&a| a)
                .count();
            assert_eq!(passed, 1);
            let a = pair.0.word.load(Ordering::Acquire);
            let b = pair.1.word.load(Ordering::Acquire);
            assert_eq!(a, now + 1_000, "A: exactly one grant kept");
            assert_eq!(b, now + 1_000, "B: exactly one grant");
        });
    }

    impl Acquire for &dyn Acquire {
        fn acquire(&self, commit: bool) -> Result<Decision> {
            (**self).acquire(commit)
        }
        fn give_back(&self, grant: &Decision) -> Result<()> {
            (**self).give_back(grant)
        }
    }
}
