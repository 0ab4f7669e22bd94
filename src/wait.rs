//! Waiting for a grant with a deadline: reservations on token buckets, exact sleeps on windows
//! and logs, futex waits on concurrency limits.
//!
//! ```
//! # fn main() -> Result<(), shmlimit::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("wait.shm");
//! use std::time::Duration;
//! use shmlimit::{Limiter, TokenBucket};
//!
//! let limiter = Limiter::builder()
//!     .limit("api", TokenBucket::per_second(10).burst(1))
//!     .create_or_open(&path)?;
//! let api = limiter.token_bucket("api")?;
//! assert!(api.try_acquire(1)?.is_allowed()); // the burst is used
//! // The next token is 100 ms away: booked now, served in booking order.
//! let r = api.reserve(1, Duration::from_secs(1))?;
//! assert!(r.is_granted());
//! assert!(r.delay() <= Duration::from_millis(100));
//! // A booking that would have to wait longer than it may is refused and takes nothing.
//! let far = api.reserve(1, Duration::ZERO)?;
//! assert!(far.is_refused() && far.delay() > Duration::from_millis(100));
//! let decision = r.wait(); // sleeps the delay
//! assert!(decision.is_allowed());
//! # Ok(()) }
//! ```
//!
//! # Implementation details
//!
//! **Reservations** (token bucket only). With the GCRA state `tat`, emission interval `T` and
//! tolerance `tau = B T` (see the token bucket's module), a reservation of `n` tokens allowed to
//! wait up to `max_delay` computes, in one CAS loop on the state word (`Gcra::book`, on the tagged
//! word `engine::bucket::book`; a cancel is `engine::bucket::unbook`):
//!
//! ```text
//! new_tat = max(tat, now) + n T
//! granted iff new_tat - now <= tau + max_delay        (then store new_tat)
//! delay   =   max(0, new_tat - now - tau)             (the caller proceeds at now + delay)
//! ```
//!
//! A refusal writes nothing. Every later booking starts from a `tat` at least as late, so the
//! times at which reservations may proceed (`new_tat - tau`) increase with the order in which
//! they were booked, across all processes: callers are served first come, first served, each
//! sleeping exactly its own delay — no polling, no thundering herd, no one woken to find the
//! budget gone. The bucket's bound is kept: a reservation is an admission dated at the time it
//! proceeds, and those dates conform to the same GCRA as immediate admissions.
//!
//! **Cancel.** [`Reservation::cancel`] moves the state back by `n T` with one CAS from exactly the
//! word the reservation stored. If anything was booked or admitted after it, the word differs and
//! nothing is given back: later reservations computed their delays from the booked tokens, and
//! handing those tokens out again would let them and the new takers exceed the bound. The
//! cancelled slot then simply goes unused (the limiter is stricter, never looser).
//!
//! **Windows and the sliding log** have no future to book into: [`TokenBucketLimit::acquire_timeout`](crate::TokenBucketLimit::acquire_timeout)
//! peeks, sleeps the exact retry-after the algorithm computed, and tries again, until the grant
//! or until the next retry-after would end past the deadline (then it refuses at once instead of
//! sleeping in vain). Each round sleeps at least the computed retry-after: never a busy loop.
//!
//! **Concurrency limits** wait for a release on a futex: see
//! [`ConcurrencyLimit::acquire_permit_timeout`](crate::ConcurrencyLimit::acquire_permit_timeout).
//!
//! # Deadlines bound queueing
//!
//! A waiter states how long its work may queue (`max_delay`, `timeout`), and the limiter turns a
//! burst into one of two outcomes, decided at once: a grant after a delay that fits the deadline,
//! or a clear rejection (with the delay it would have needed) that consumed nothing. For a token
//! bucket of rate `r` and burst `B`, at most `B + r D` requests can be granted with delays of at
//! most `D`: whatever the size of the burst, no more than that are ever queued, and the rest are
//! refused immediately instead of piling up behind them. The queue is not a list anywhere — it is
//! the distance the GCRA state runs ahead of the clock, bounded by `tau + D`. For windows the
//! bound is the limit per window; for concurrency limits each waiter leaves at its deadline. A
//! server that sets the deadline to what its caller will wait (for example the time left of a
//! request's timeout) never does work nobody waits for, and never holds more than `B + r D`
//! requests parked.

use crate::engine::bucket::Bucket;
use crate::engine::site::Site;
use std::time::{Duration, Instant};

use crate::algo::{mutate, Change, Decision};
use crate::clock::{Clock, MonotonicClock};
use crate::engine;
use crate::error::{Error, Result};
use crate::file::layout::bucket::PARAM_TAG;
use crate::limiter::{Params, FENCE_REWRITE_RETRY_NS};

/// A booking of `n` tokens of a token bucket, made by [`TokenBucketLimit::reserve`](crate::TokenBucketLimit::reserve).
///
/// Granted: the tokens are taken, and the caller may proceed after [`Reservation::delay`]
/// ([`Reservation::wait`] sleeps it). Refused: nothing was taken, and [`Reservation::delay`]
/// is the delay the booking would have needed. Dropping a granted reservation keeps its tokens
/// booked; [`Reservation::cancel`] gives them back when it can.
#[must_use = "a granted reservation has taken tokens: wait for it or cancel it"]
pub struct Reservation<C: Clock = MonotonicClock> {
    limit: Site<C>,
    granted: bool,
    cost: u64,
    /// The state word this reservation stored; None when it stored nothing (refused, or
    /// granted by a shadow limit).
    booked: Option<u64>,
    /// When it may proceed, on the limit's clock.
    ready_at_ns: u64,
    delay_ns: u64,
    decision: Decision,
}

impl<C: Clock> std::fmt::Debug for Reservation<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("limit", &self.limit.name())
            .field("granted", &self.granted)
            .field("cost", &self.cost)
            .field("delay_ns", &self.delay_ns)
            .finish()
    }
}

impl<C: Clock> Reservation<C> {
    /// True when the tokens are booked.
    pub fn is_granted(&self) -> bool {
        self.granted
    }

    /// True when the booking was refused (its delay exceeded the maximum); nothing was taken.
    pub fn is_refused(&self) -> bool {
        !self.granted
    }

    /// Tokens booked (or asked for, when refused).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// How long after booking the caller may proceed (granted), or would have had to wait
    /// (refused).
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns)
    }

    /// [`Reservation::delay`] in nanoseconds.
    pub fn delay_ns(&self) -> u64 {
        self.delay_ns
    }

    /// When the caller may proceed, on the limit's clock (monotonic nanoseconds): the booking
    /// time plus the delay. Increases with booking order across processes.
    pub fn ready_at_ns(&self) -> u64 {
        self.ready_at_ns
    }

    /// Sleep until the reservation may proceed and return the grant (a denied decision for a
    /// refused reservation, at once).
    pub fn wait(self) -> Decision {
        if self.granted {
            sleep_until(self.limit.clock(), self.ready_at_ns);
        }
        self.decision
    }

    /// Give the tokens back if no later booking or admission depends on them: one CAS from
    /// exactly the state word this reservation stored to that word minus its tokens. True when
    /// given back (and counted as refunded); false when something was booked after it (the tokens stay used), when the
    /// bucket was retuned or reset meanwhile, or for a refused reservation.
    ///
    /// # Errors
    ///
    /// None: what is given back is what the booking added (its cost times the emission interval
    /// it was booked with), so no parameter is read. The `Result` is kept for the callers
    /// written against earlier versions, when a damaged parameter slot was an error here.
    pub fn cancel(self) -> Result<bool> {
        let Some(booked) = self.booked else {
            return Ok(false);
        };
        // The nanoseconds the booking added: its cost times the emission interval it was
        // booked with (the decision's unit), whatever the slot holds now.
        let given_back = engine::bucket::unbook(
            self.limit.control(0),
            booked,
            self.cost.saturating_mul(self.decision.unit()),
        );
        if given_back {
            // Counted as allowed when booked: now as refunded.
            self.limit.count_refund(&self.decision, self.decision.cost);
        }
        Ok(given_back)
    }
}

/// Sleep until `clock` reads `target_ns`: once for the remainder, in real time (a manual clock
/// is not waited on forever).
fn sleep_until<C: Clock>(clock: &C, target_ns: u64) {
    let now = clock.now_ns();
    if target_ns > now {
        std::thread::sleep(Duration::from_nanos(target_ns - now));
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<C: Clock> Site<C> {
    /// Book the next `n` tokens of a token bucket now, to be used after the returned delay, if
    /// that delay is at most `max_delay`; otherwise refuse at once and take nothing (see the
    /// [`Reservation`] and the module docs for the formulas and the ordering guarantee).
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `n` exceeds the burst;
    /// [`Error::WrongKind`] on other algorithms and keyed limits; [`Error::CorruptState`].
    pub(crate) fn reserve(&self, n: u64, max_delay: Duration) -> Result<Reservation<C>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self) {
            return this.reserve(n, max_delay);
        }
        if n == 0 {
            return Err(Error::ZeroCost);
        }
        if self.def().keyed.is_some() {
            return Err(self.wrong_kind("is keyed: reservations are for unkeyed token buckets"));
        }
        if !matches!(self.params(), Params::TokenBucket) {
            return Err(self.wrong_kind("is not a token bucket: use acquire_timeout"));
        }
        if Bucket(self).is_split() {
            return Err(self.wrong_kind(
                "is a split bucket: its sub-buckets cannot book in one order; use acquire_timeout",
            ));
        }
        let max_delay = nanos(max_delay);
        // A booking made with parameters a retune or reset replaced before its CAS landed is
        // given back and made again (see `engine::bucket`; bounded).
        for _ in 0..64 {
            let witness = crate::engine::bucket::witness(self.control_line());
            let (decision, booked, now, delay) = self.book_once(n, max_delay)?;
            if booked.is_some() && !crate::engine::bucket::unchanged(self.control_line(), witness) {
                Bucket(self).give_back(self.control(0), n.saturating_mul(decision.unit()));
                continue;
            }
            return Ok(self.reservation(decision, n, booked, now, delay));
        }
        Err(self.fault(crate::algo::Fault::Corrupt))
    }

    /// One booking of [`Site::reserve`]: its decision, the word it stored, when, and its
    /// delay.
    fn book_once(&self, n: u64, max_delay: u64) -> Result<(Decision, Option<u64>, u64, u64)> {
        mutate(
            self.control(0),
            || self.clock().now_ns(),
            |now, current| {
                let tag = current & PARAM_TAG;
                // A fleet share books only within its lease; past it, the fence decides.
                let Some(at) = Bucket(self).bucket_at((tag >> 63) as usize, now)? else {
                    // Fenced, and the fence is being rewritten: book nothing, retry shortly.
                    let retry = FENCE_REWRITE_RETRY_NS;
                    let decision = Decision::denied(retry, 0, 1);
                    return Ok(Change::Keep((decision, None, now, retry)));
                };
                let g = at.g;
                if n > g.capacity && at.fenced {
                    let decision = Decision::denied(u64::MAX, 0, g.emission_ns).of(g.tolerance_ns);
                    return Ok(Change::Keep((decision, None, now, u64::MAX)));
                }
                if n > g.capacity {
                    return Err(Error::CostExceedsCapacity {
                        cost: n,
                        capacity: g.capacity,
                    });
                }
                let (decision, booked, delay) =
                    engine::bucket::book(&g, now, current, n, max_delay.min(at.horizon_ns));
                Ok(match booked {
                    // A booking is an admission: stored with the loop's CAS.
                    Some(word) => Change::Write(word, (decision, Some(word), now, delay)),
                    None => Change::Keep((decision, None, now, delay)),
                })
            },
        )
    }

    /// Count the booking and build the reservation (shadow mode grants a refused one, booking
    /// nothing).
    fn reservation(
        &self,
        decision: Decision,
        n: u64,
        booked: Option<u64>,
        now: u64,
        delay: u64,
    ) -> Reservation<C> {
        let decision = self.finish(decision, n, true);
        let shadowed = decision.is_shadow_denied();
        let delay = if shadowed { 0 } else { delay };
        Reservation {
            limit: self.clone(),
            granted: decision.is_allowed(),
            cost: n,
            booked: booked.filter(|_| !shadowed),
            ready_at_ns: now.saturating_add(delay),
            delay_ns: delay,
            decision,
        }
    }

    /// Admit `cost` units, waiting up to `timeout` for them: a token bucket books them with
    /// [`TokenBucketLimit::reserve`](crate::TokenBucketLimit::reserve) and sleeps the delay (refused at once, consuming nothing, when the
    /// delay exceeds `timeout`); fixed and sliding windows and the sliding log sleep the exact
    /// retry-after and try again until the grant or the deadline. The returned decision is
    /// allowed, or denied with nothing consumed.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire) and [`TokenBucketLimit::reserve`](crate::TokenBucketLimit::reserve); [`Error::WrongKind`] on a
    /// concurrency limit (use [`ConcurrencyLimit::acquire_permit_timeout`](crate::ConcurrencyLimit::acquire_permit_timeout)) or a keyed limit.
    pub(crate) fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        let this = self.current()?;
        if !std::ptr::eq(this, self) {
            return this.acquire_timeout(cost, timeout);
        }
        match self.params() {
            Params::TokenBucket if !Bucket(self).is_split() => {
                Ok(self.reserve(cost, timeout)?.wait())
            }
            Params::TokenBucket => self.retry_until(cost, timeout),
            Params::Concurrency { .. } => {
                Err(self.wrong_kind("is a concurrency limit: use acquire_permit_timeout"))
            }
            Params::FixedWindow(_) | Params::SlidingWindow(_) | Params::SlidingLog(_) => {
                self.retry_until(cost, timeout)
            }
        }
    }

    /// Peek, sleep the exact retry-after, and try again, until granted or the deadline.
    fn retry_until(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let seen = self.peek(cost)?;
            if seen.is_allowed() {
                let d = self.try_acquire(cost)?;
                if d.is_allowed() {
                    return Ok(d);
                }
                // Another process took it between the peek and the try: wait as it says.
                if !self.sleep_within(d.retry_after(), deadline) {
                    return Ok(d);
                }
                continue;
            }
            if !self.sleep_within(seen.retry_after(), deadline) {
                // The grant cannot come before the deadline: refuse now (counted once).
                return self.try_acquire(cost);
            }
        }
    }

    /// Sleep `d` if that ends before `deadline`; false (without sleeping) if it would not.
    fn sleep_within(&self, d: Duration, deadline: Option<Instant>) -> bool {
        let wake = Instant::now().checked_add(d);
        match (wake, deadline) {
            (Some(w), Some(dl)) if w > dl => false,
            (None, Some(_)) => false,
            _ => {
                std::thread::sleep(d);
                true
            }
        }
    }
}
