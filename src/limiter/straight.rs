//! The straight path of the common decision: [`Site::try_acquire`] on an unkeyed bucket or
//! window decides inline from this thread's hot entry when everything it needs is there, and
//! otherwise, having written nothing, decides again from scratch out of line
//! (`Limit::run`, in [`super::run`]).

use crate::engine::bucket::Bucket;
use crate::engine::site::Site;
use std::sync::atomic::Ordering;

use crate::algo::{try_decide, Decision, Step};
use crate::clock::Clock;
use crate::error::Result;
use crate::tally::hot::Counts;

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
            return Bucket(self).try_acquire_bucket(cost);
        }
        if self.plain_window {
            return crate::engine::window::Window(self).try_acquire(cost);
        }
        self.run(cost, true, None)
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
