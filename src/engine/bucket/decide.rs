//! A token bucket's decision: the straight path from this thread's hot entry, the general
//! loop, the step with the parameters of the slot the state word names (a fleet share's lease
//! and fence included), and the check after a CAS that admitted (see the module's
//! generation).

use std::sync::atomic::Ordering;

use crate::algo::gcra::Gcra;
use std::time::Duration;

use crate::algo::{mutate, near_threshold, try_decide, try_decide_from, Change, Decision, Step};
use crate::clock::Clock;
use crate::engine::rate::RateEngine;
use crate::engine::site::hot::{self, Counts};
use crate::engine::site::Site;
use crate::engine::{self, StepError};
use crate::error::{Error, Result};
use crate::file::layout::bucket;
use crate::wait::retry_until;

use super::{Bucket, FENCE_REWRITE_RETRY_NS};

impl<'a, C: Clock> RateEngine<'a, C> for Bucket<'a, C> {
    #[inline(always)]
    fn on(site: &'a Site<C>) -> Self {
        Bucket(site)
    }

    #[inline(always)]
    fn site(self) -> &'a Site<C> {
        self.0
    }

    #[inline(always)]
    fn fast(self, cost: u64) -> Option<Decision> {
        if self.plain_bucket {
            return self.bucket_fast(cost);
        }
        None
    }

    /// The general loop of an unsplit bucket, the sub-buckets of a split one.
    #[inline(always)]
    fn decide(self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        if self.plain_bucket {
            return self.bucket_run(cost, commit, at);
        }
        self.split_decide(cost, commit, at)
    }

    /// To its sub-bucket on a split bucket, else to the state word.
    fn give_units(maker: &Site<C>, grant: &Decision, units: u64) -> Result<()> {
        let this = Bucket(maker);
        if this.plain_bucket {
            return maker.refund_in(maker.control(0), grant, units);
        }
        let i = grant.stamp as usize % this.split;
        mutate(
            this.sub_state(i),
            || maker.clock.now_ns(),
            |now, current| {
                let g = this.bucket_params(engine::bucket::tag_of(current))?;
                let sub = this.sub_params(g, i);
                let new = engine::bucket::refund(&sub, now, current, units);
                Ok(Change::unless_same(current, new))
            },
        )
    }

    /// An unsplit bucket books the units ([`Bucket::reserve`]) and sleeps the delay; a split
    /// one sleeps each retry-after ([`crate::wait::retry_until`]).
    fn acquire_timeout(self, cost: u64, timeout: Duration) -> Result<Decision> {
        let this = Bucket(self.current()?);
        if this.is_split() {
            return retry_until(
                timeout,
                || this.run(cost, false, None),
                || this.run(cost, true, None),
            );
        }
        Ok(this.reserve(cost, timeout)?.wait())
    }
}

impl<C: Clock> Bucket<'_, C> {
    /// The general decision of a split bucket (out of line: its loop over the sub-buckets would
    /// make the unsplit one's registers worse).
    #[inline(never)]
    fn split_decide(self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let decision = self.split_run(cost, commit, || self.decision_time(at))?;
        Ok(self.finish(decision, cost, commit))
    }

    /// A composed check's decision of `cost` from the state word it loaded before its clock
    /// read `t` (see `handle::dispatch::load_word`): the bucket's step in the one mutation
    /// loop, its admission checked against the generation as [`Bucket::bucket_run`]'s.
    #[inline(always)]
    pub(crate) fn acquire_loaded(self, word: u64, t: u64, cost: u64) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        let mut counts = Counts::TALLY;
        let decision = try_decide_from(self.control(0), word, self.loaded_time(t), true, |t, w| {
            self.bucket_step(t, w, cost, &mut counts)
        })
        .map_err(|e| self.step_error(e, cost))?;
        if !self.stands(decision.is_allowed(), decision.unit(), cost, counts.witness) {
            // Given back: decide again from the live word.
            return self.bucket_run(cost, true, None);
        }
        Ok(self.finish_counted(decision, cost, true, counts))
    }

    /// The common token-bucket decision, straight-line: the handle is not due for its
    /// replacement check, this thread's hot entry holds the parameters of the slot the word
    /// names, the cost fits (a fleet share: and its lease covers now), and a denial is counted
    /// in this thread's own lane. `None` when any of that does not hold, having written
    /// nothing: the caller then decides from scratch through [`Bucket::run`], which handles
    /// every case (one more clock read, off the common path). The loop is the one mutation
    /// loop ([`try_decide`], loom-modelled): a failed CAS retries from the word that beat it.
    ///
    /// Everything else [`Bucket::bucket_run`] does (the stale-word retry, the fence, filling
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
                // `Bucket::run`).
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
    pub(crate) fn give_back(self, state: &std::sync::atomic::AtomicU64, units_ns: u64) {
        engine::bucket::give_back(state, || self.clock.now_ns(), units_ns);
    }

    /// The decision of an unkeyed, unsplit token bucket: the one CAS loop with the bucket's
    /// step and nothing else, so that it compiles to straight-line code (no dispatch on the
    /// algorithm, no call, the decision in registers). A split bucket decides by sub-bucket
    /// (`split_run`).
    ///
    /// A loaded word that went stale under two retunes in a row ([`StepError::Stale`]: the
    /// live word names the other slot, so each round starts from a word that moved) is decided
    /// again from the live word, here in the loop: a separate function for it returned the
    /// decision through memory, and the whole `Decision` was stored on every call.
    ///
    /// An admission made with parameters that a retune or reset replaced before its CAS landed
    /// (see `engine::bucket`) is given back and decided again, in the same bounded loop.
    #[inline(always)]
    pub(crate) fn bucket_run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let mut counts = Counts::TALLY;
        // Bounded: a process flipping the word's tag (or `ACTIVE`) without end gets
        // `CorruptState`.
        let mut rounds = 0;
        loop {
            match self.bucket_loop(cost, commit, at, &mut counts) {
                Ok(decision)
                    if !commit
                        || self.stands(
                            decision.is_allowed(),
                            decision.unit(),
                            cost,
                            counts.witness,
                        ) =>
                {
                    return Ok(self.finish_counted(decision, cost, commit, counts))
                }
                Ok(_) if rounds < 64 => rounds += 1,
                Err(StepError::Stale) if rounds < 64 => rounds += 1,
                Ok(_) => return Err(self.step_error(StepError::Stale, cost)),
                Err(e) => return Err(self.step_error(e, cost)),
            }
        }
    }

    /// Whether a committed bucket decision on the unkeyed state word stands: a denial always;
    /// an admission (of `cost`, its decision's `unit`) while `ACTIVE` still reads `witness`,
    /// else it is given back (the caller decides again). By value, not the decision itself: a
    /// reference would keep the decision in memory on the hot path.
    #[inline(always)]
    pub(crate) fn stands(&self, allowed: bool, unit: u64, cost: u64, witness: u64) -> bool {
        // `engine::bucket::unchanged` (Relaxed, as there), through the handle's unchecked word
        // accessor (a slice index checks the control line's length again).
        let unchanged = || {
            self.control(crate::file::layout::bucket::ACTIVE)
                .load(Ordering::Relaxed)
                == witness
        };
        !allowed || unchanged() || {
            self.give_back(self.control(0), cost.saturating_mul(unit));
            false
        }
    }

    /// The bucket's CAS loop on its state word, the step inlined.
    #[inline(always)]
    fn bucket_loop(
        &self,
        cost: u64,
        commit: bool,
        at: Option<u64>,
        counts: &mut Counts,
    ) -> Result<Decision, StepError> {
        try_decide(
            self.control(0),
            || self.decision_time(at),
            commit,
            |t, w| self.bucket_step(t, w, cost, counts),
        )
    }

    /// The bucket's parameters in slot `tag`, from this thread's hot entry for this handle
    /// while it was filled in the generation `ACTIVE` reads now (one load of the already
    /// fetched control line and one compare, see `engine::bucket`), instead of reading and
    /// re-validating the slot and recomputing its check on every decision. `counts` gets what
    /// the decision counts itself with, and the generation read ([`Counts::witness`]), for the
    /// check after its CAS.
    ///
    /// A fleet share's slot costs one more test, one load of the deadline word on the same 64
    /// bytes and one compare with `now`; once the deadline has passed the decision uses the
    /// fence slot instead (cold path).
    #[inline(always)]
    fn bucket_cached(
        &self,
        tag: usize,
        now: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Gcra, StepError> {
        let tag = ((tag & 1) as u64) << 63;
        // `engine::bucket::witness` (Acquire, as there), through the handle's unchecked word
        // accessor: the control line's length is known, and a slice index checks it again.
        let witness = self.control(bucket::ACTIVE).load(Ordering::Acquire);
        // Filled with the generation read before the slot: an entry of this generation holds
        // the slot's parameters, whatever a retune does next (then the word this decision
        // loaded is rewritten or `ACTIVE` moves, and the admission does not stand).
        let (g, fleet) = self.hot_entry(
            |e| e.holds_bucket(self.hot_id, witness, tag),
            counts,
            |e| self.hot_fill(witness, tag, e),
            |e| (e.gcra(), e.fleet()),
        )?;
        counts.witness = witness;
        if fleet {
            return self.fleet_gate(g, now, cost, counts);
        }
        Ok(g)
    }

    /// A fleet share `g` at `now`: `g` while the lease deadline covers `now`, else the fence
    /// (and `counts` then gets the fence's near-limit threshold: the decision is the fence's).
    #[inline(always)]
    fn fleet_gate(
        &self,
        g: Gcra,
        now: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Gcra, StepError> {
        // Acquire: pairs with the agent's Release store of the deadline, after the check load.
        if bucket::leased(self.control(bucket::DEADLINE).load(Ordering::Acquire), now) {
            Ok(g)
        } else {
            self.fenced(cost, counts)
        }
    }

    #[cold]
    #[inline(never)]
    fn fenced(self, cost: u64, counts: &mut Counts) -> Result<Gcra, StepError> {
        let g = match self.fence_params() {
            Ok(Some(g)) => g,
            Ok(None) => return Err(StepError::FenceRewrite),
            Err(_) => return Err(StepError::Corrupt),
        };
        if cost > g.capacity {
            return Err(StepError::Fenced);
        }
        counts.near_slack = near_threshold(g.tolerance_ns, self.tally.near());
        Ok(g)
    }

    /// Fill this thread's entry `e` for this handle from the slot a state word tagged `tag`
    /// names, read whole after `ACTIVE` read `witness`.
    #[cold]
    #[inline(never)]
    fn hot_fill(self, witness: u64, tag: u64, e: &hot::Entry) -> Result<(), StepError> {
        let tag_word = tag;
        let tag = (tag >> 63) as usize;
        let (g, fleet) = self.slot_params(bucket::PARAMS[tag & 1]).map_err(|_| {
            // The slot did not read whole for 64 rounds. If a retune has since made the other
            // slot the active one, this one is being rewritten by the next retune and the word
            // that named it is stale. Otherwise the slot the live parameters are in is damaged.
            // Both must say so: the active slot is the other one, and so is the live word's
            // (a damaged file whose word and `ACTIVE` disagree is corrupt, not stale).
            let live = (self.control(0).load(Ordering::Acquire) >> 63) as usize;
            if crate::engine::bucket::active(self.control_line()) != tag & 1 && live != tag & 1 {
                StepError::Stale
            } else {
                StepError::Corrupt
            }
        })?;
        e.fill(
            self.hot_id,
            super::hot::bucket_key(witness, tag_word),
            g,
            fleet,
            near_threshold(g.tolerance_ns, self.tally.near()),
            self.tally.owned_counters(),
        );
        Ok(())
    }

    /// The token bucket's pure decision on state word `word` at `now`: the bucket's parameters
    /// from the slot the word's tag names (through this thread's hot entry), then GCRA.
    #[inline(always)]
    pub(crate) fn bucket_step(
        &self,
        now: u64,
        word: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Step, StepError> {
        let tag = word & bucket::PARAM_TAG;
        let g = match self.bucket_cached((tag >> 63) as usize, now, cost, counts) {
            Ok(g) => g,
            // Fenced, and the fence's bucket can never grant this much: deny.
            Err(StepError::Fenced) => return Ok(Step::Deny(Decision::denied(u64::MAX, 0, 1))),
            // Fenced, and the fence is being rewritten: deny, consuming nothing (fail closed).
            Err(StepError::FenceRewrite) => {
                return Ok(Step::Deny(Decision::denied(FENCE_REWRITE_RETRY_NS, 0, 1)))
            }
            Err(e) => return Err(e),
        };
        if cost > g.capacity {
            return Err(StepError::Cost(g.capacity));
        }
        Ok(crate::engine::bucket::step(&g, now, word, cost))
    }
}
