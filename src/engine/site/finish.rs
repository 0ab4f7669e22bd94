//! What every engine's decision shares, one layer: the straight path's loop and its counting
//! ([`Site::decide_fast`]), and what follows a decision ([`Site::finish`]: stamping it with its
//! cost and origin, then shadow mode, near-limit and the counters through the [`Tally`]).

use std::sync::atomic::Ordering;

use crate::algo::{try_decide, Decision, Step};
use crate::clock::Clock;
use crate::engine::site::hot::Counts;
use crate::tally::Tally;

use super::Site;

impl<C: Clock> Site<C> {
    /// The loop and the counting shared by `Bucket::bucket_fast` and `engine::window::Window::fast`:
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
                    // A shadow limit's denial is reported allowed: the engine's `run` decides it (a
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

    /// The times of a decision from a state word loaded before the clock read `t` (a composed
    /// check reads the clock once for all its limits): `t` first, with the replacement check
    /// run at it when due (as in [`Site::decision_time`]), then the clock for a retry.
    #[inline(always)]
    pub(crate) fn loaded_time(&self, t: u64) -> impl FnMut() -> u64 + '_ {
        let mut first = Some(t);
        move || match first.take() {
            Some(t) => {
                // Relaxed: as in `current_at`.
                if t >= self.next_check.load(Ordering::Relaxed) {
                    self.check_due(t);
                }
                t
            }
            None => self.decision_time(None),
        }
    }

    /// Stamp a decision with its cost and origin; a committed one then goes through the
    /// [`Tally`] (shadow mode, counters, near-limit). Shared with the keyed, permit and wait
    /// paths.
    #[inline(always)]
    pub(crate) fn finish(&self, mut decision: Decision, cost: u64, commit: bool) -> Decision {
        decision.cost = cost;
        decision.origin = self.origin;
        if !commit {
            return decision;
        }
        self.tally.after(decision)
    }

    /// [`Site::finish`] for a decision counted through this thread's hot entry when it has
    /// the counters (`counts`, from `Bucket::bucket_cached` or `Window::live_limit`).
    #[inline(always)]
    pub(crate) fn finish_counted(
        &self,
        mut decision: Decision,
        cost: u64,
        commit: bool,
        counts: Counts,
    ) -> Decision {
        if !commit || counts.counters.is_null() {
            return self.finish(decision, cost, commit);
        }
        decision.cost = cost;
        decision.origin = self.origin;
        Tally::after_owned(counts.counters, &decision, counts.near_slack);
        decision
    }

    /// What every refund of an unkeyed grant does around giving its units back to the state
    /// (`give(maker, units)`): it runs on the limit that made the grant (the limit of a file
    /// since replaced, while this handle still knows it), refuses a grant another limit made,
    /// gives nothing back for a denial (a shadow-denied grant took nothing), and counts it.
    ///
    /// A refund can never create more budget than the grant took: a bucket never fills past
    /// full, a window refund only applies while the grant's window is still counted, and a log
    /// refund frees entries dated no later than the grant. Refund each grant at most once: a
    /// second refund of the same grant gives its cost back again, which is budget no request
    /// returned.
    pub(crate) fn refund_grant(
        &self,
        grant: &Decision,
        units: u64,
        give: impl FnOnce(&Site<C>, u64) -> crate::error::Result<()>,
    ) -> crate::error::Result<()> {
        let maker = self.maker_of(grant);
        maker.check_origin(grant)?;
        let units = units.min(grant.cost);
        if grant.is_allowed() && units != 0 {
            give(maker, units)?;
        }
        maker.count_refund(grant, units);
        Ok(())
    }

    /// Count a grant given back: called once per refund of a whole grant, by every refund path
    /// (so composed checks count their roll-backs).
    ///
    /// A grant of cost 0 counts only when it is shadow-denied (admitted, taking nothing): a
    /// denial, a peek or a grant record without its grant (from C) gives nothing back.
    pub(crate) fn count_refund(&self, grant: &Decision, units: u64) {
        let whole = if grant.cost == 0 {
            grant.shadow_denied
        } else {
            units >= grant.cost
        };
        if grant.is_allowed() && whole {
            self.tally.refunded();
        }
    }
}
