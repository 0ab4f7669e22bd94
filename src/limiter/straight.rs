//! The straight path of the common decision: [`Site::try_acquire`] on an unkeyed bucket or
//! window decides inline from this thread's hot entry when everything it needs is there, and
//! otherwise, having written nothing, decides again from scratch out of line
//! (`Limit::run`, in [`super::run`]).

use crate::engine::site::Site;
use std::sync::atomic::Ordering;

use crate::algo::{try_decide, Decision, Step};
use crate::clock::Clock;
use crate::engine::{self};
use crate::error::Result;
use crate::file::layout::bucket;
use crate::tally::hot::{self, Counts};

impl<C: Clock> Site<C> {
    /// Admit `cost` units now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `cost` can never be granted;
    /// [`Error::CorruptState`] when the shared state is damaged (fail closed);
    /// [`Error::WrongKind`] on a keyed or concurrency limit.
    #[inline(always)]
    pub(crate) fn try_acquire(&self, cost: u64) -> Result<Decision> {
        if self.plain_bucket {
            return self.try_acquire_bucket(cost);
        }
        if self.plain_window {
            return crate::engine::window::Window(self).try_acquire(cost);
        }
        self.run(cost, true, None)
    }

    /// [`Site::try_acquire`] on a token bucket (the typed handle's call: no test of the kind).
    #[inline(always)]
    pub(crate) fn try_acquire_bucket(&self, cost: u64) -> Result<Decision> {
        if self.plain_bucket {
            if let Some(decision) = self.bucket_fast(cost) {
                return Ok(decision);
            }
        }
        self.try_acquire_slow(cost)
    }

    /// The decision of [`Site::try_acquire_again`], copied ([`Decision::relocated`]).
    #[inline(always)]
    pub(crate) fn try_acquire_slow(&self, cost: u64) -> Result<Decision> {
        match self.try_acquire_again(cost) {
            Ok(d) => Ok(d.relocated()),
            Err(e) => Err(e),
        }
    }

    /// [`Site::try_acquire`] when [`Site::bucket_fast`] did not decide, from scratch.
    #[cold]
    #[inline(never)]
    fn try_acquire_again(&self, cost: u64) -> Result<Decision> {
        self.run(cost, true, None)
    }

    /// The common token-bucket decision, straight-line: the handle is not due for its
    /// replacement check, this thread's hot entry holds the parameters of the slot the word
    /// names, the cost fits (a fleet share: and its lease covers now), and a denial is counted
    /// in this thread's own lane. `None` when any of that does not hold, having written
    /// nothing: the caller then decides from scratch through [`Site::run`], which handles
    /// every case (one more clock read, off the common path). The loop is the one mutation
    /// loop ([`try_decide`], loom-modelled): a failed CAS retries from the word that beat it.
    ///
    /// Everything else [`Site::bucket_run`] does (the stale-word retry, the fence, filling
    /// the entry, the errors) stays out of this function: their state kept the whole decision
    /// in memory and cost about 20 instructions on every call.
    #[inline(always)]
    fn bucket_fast(&self, cost: u64) -> Option<Decision> {
        // Copies: the clock call may write any memory, so fields are loaded again after it.
        let (control, hot_id) = (self.control, self.hot_id);
        // The generation of the parameter slots (`engine::bucket::witness`, Acquire as there),
        // read before the state word: the entry holds the slot the word names if it was filled
        // in this generation.
        let witness = control.word(bucket::ACTIVE).load(Ordering::Acquire);
        self.decide_fast(
            cost,
            #[inline(always)]
            |now, current, counts| {
                let (g, gate) = hot::with(hot_id, |e| {
                    if !e.holds_bucket(hot_id, witness, current) {
                        return Err(());
                    }
                    counts.counters = e.counters.get();
                    counts.near_slack = e.near_slack.get();
                    Ok((e.gcra(), e.gate.get()))
                })?;
                // A cost of 0 or over the gate (one compare for both): a fleet share (then the
                // cost must fit and the lease cover `now`), or a cost that is an error (from
                // `Limit::run`).
                if cost.wrapping_sub(1) >= gate
                    && (gate != 0
                    || cost == 0
                    || cost > g.capacity
                    // Acquire: as in `fleet_gate`.
                    || !bucket::leased(
                        control.word(bucket::DEADLINE).load(Ordering::Acquire),
                        now,
                    ))
                {
                    return Err(());
                }
                Ok(engine::bucket::step(&g, now, current, cost))
            },
            // After the CAS admitted: the parameters still stand unless a parameter slot was
            // rewritten since `witness` (`engine::bucket::unchanged`, Relaxed as there); then
            // the admission is given back, and the caller decides again from scratch.
            #[inline(always)]
            |unit| {
                control.word(bucket::ACTIVE).load(Ordering::Relaxed) == witness || {
                    self.give_back(self.control(0), cost.saturating_mul(unit));
                    false
                }
            },
        )
    }

    /// Give back `units_ns` of an admission made on `state` with parameters a retune or reset
    /// has replaced since (see `engine::bucket`): its cost times the unit of its decision.
    #[cold]
    #[inline(never)]
    pub(crate) fn give_back(&self, state: &std::sync::atomic::AtomicU64, units_ns: u64) {
        engine::bucket::give_back(state, || self.clock.now_ns(), units_ns);
    }

    /// The loop and the counting shared by [`Site::bucket_fast`] and `engine::window::Window::fast`:
    /// `step` decides at `now` on the word, with the hot entry's counters (`counts`), or gives
    /// up (`Err`) having written nothing; `stands` is asked after a CAS that admitted (with the
    /// decision's unit), before the admission is counted (`false`: it was given back, decide
    /// again).
    #[inline(always)]
    pub(crate) fn decide_fast(
        &self,
        cost: u64,
        mut step: impl FnMut(u64, u64, &mut Counts) -> Result<Step, ()>,
        stands: impl FnOnce(u64) -> bool,
    ) -> Option<Decision> {
        let mut counts = Counts::TALLY;
        // The one mutation loop: a failed CAS retries from the word that beat it.
        let decision = try_decide(
            self.control.word(0),
            #[inline(always)]
            || self.clock.now_ns(),
            true,
            #[inline(always)]
            |now, current| {
                // Relaxed: as in `current_at`; 0 (a replaced file) is always due.
                if now >= self.next_check.load(Ordering::Relaxed) {
                    return Err(());
                }
                match step(now, current, &mut counts)? {
                    // A shadow limit's denial is reported allowed: `Limit::run` decides it (a
                    // denial wrote nothing), as it does the denials of a process on the shared
                    // lane.
                    Step::Deny(_) if counts.counters.is_null() => Err(()),
                    s => Ok(s),
                }
            },
        )
        .ok()?;
        if decision.is_allowed() && !stands(decision.unit()) {
            return None;
        }
        if counts.counters.is_null() {
            // An admission of a shadow limit or on the shared lane.
            self.tally
                .admitted_on_tally(decision.slack_under(counts.near_slack));
            let mut decision = decision;
            decision.cost = cost;
            decision.origin = self.origin;
            return Some(decision);
        }
        Some(self.finish_counted(decision, cost, true, counts))
    }
}
