//! A token bucket's reservations: booking the next `n` tokens now, to be used after a delay
//! within the caller's deadline, or refusing at once (see `crate::wait` for the bound on what
//! is ever queued), and giving a booking back.

use std::time::Duration;

use crate::algo::{mutate, Change, Decision};
use crate::clock::{Clock, MonotonicClock};
use crate::engine;
use crate::engine::site::Site;
use crate::error::{Error, Result};
use crate::file::layout::bucket::PARAM_TAG;

use super::{Bucket, FENCE_REWRITE_RETRY_NS};

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

impl<C: Clock> Bucket<'_, C> {
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
        if !std::ptr::eq(this, self.0) {
            return Bucket(this).reserve(n, max_delay);
        }
        if n == 0 {
            return Err(Error::ZeroCost);
        }
        debug_assert_eq!(self.kind, crate::spec::LimitKind::TokenBucket);
        if self.is_split() {
            return Err(self.refused(
                "is a split bucket: its sub-buckets cannot book in one order; use acquire_timeout",
            ));
        }
        let max_delay = u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX);
        // A booking made with parameters a retune or reset replaced before its CAS landed is
        // given back and made again (see `engine::bucket`; bounded).
        for _ in 0..64 {
            let witness = crate::engine::bucket::witness(self.control_line());
            let (decision, booked, now, delay) = self.book_once(n, max_delay)?;
            if booked.is_some() && !crate::engine::bucket::unchanged(self.control_line(), witness) {
                self.give_back(self.control(0), n.saturating_mul(decision.unit()));
                continue;
            }
            return Ok(self.reservation(decision, n, booked, now, delay));
        }
        Err(self.fault(crate::algo::Fault::Corrupt))
    }

    /// One booking of [`Bucket::reserve`]: its decision, the word it stored, when, and its
    /// delay.
    fn book_once(&self, n: u64, max_delay: u64) -> Result<(Decision, Option<u64>, u64, u64)> {
        mutate(
            self.control(0),
            || self.clock().now_ns(),
            |now, current| {
                let tag = current & PARAM_TAG;
                // A fleet share books only within its lease; past it, the fence decides.
                let Some(at) = self.bucket_at((tag >> 63) as usize, now)? else {
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
            limit: self.0.clone(),
            granted: decision.is_allowed(),
            cost: n,
            booked: booked.filter(|_| !shadowed),
            ready_at_ns: now.saturating_add(delay),
            delay_ns: delay,
            decision,
        }
    }
}
