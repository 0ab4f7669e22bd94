//! The pure decision on one single-word state with its live parameters: the token bucket's
//! parameters from this thread's hot entry (the slot the word's tag names, filled out of line),
//! a window's live limit, the fleet share's lease and fence, and the small errors of the hot
//! path ([`StepError`]), turned into [`Error`]s out of line.

use crate::engine::site::Site;
use crate::engine::window::Window;
use std::sync::atomic::Ordering;

use super::StepError;
use super::FENCE_REWRITE_RETRY_NS;
use crate::algo::gcra::Gcra;
use crate::algo::{near_threshold, Decision, Fault, Step};
use crate::clock::Clock;
use crate::engine::Params;
use crate::error::{Error, Result};
use crate::file::layout::bucket;
use crate::tally::hot::{self, Counts};

impl<C: Clock> Site<C> {
    /// The pure decision for one single-word state (token bucket, fixed or sliding window) at
    /// `now`: shared by unkeyed limits and key slots.
    #[inline(always)]
    pub(crate) fn step_word(&self, now: u64, word: u64, cost: u64) -> Result<Step> {
        self.step_fast(now, word, cost)
            .map_err(|e| self.step_error(e, cost))
    }

    /// [`Site::step_word`] with a small, `Copy` error, so the hot path passes it in registers;
    /// [`Site::step_error`] makes the [`Error`] out of line.
    #[inline(always)]
    pub(crate) fn step_fast(&self, now: u64, word: u64, cost: u64) -> Result<Step, StepError> {
        match self.params {
            Params::TokenBucket => self.bucket_step(now, word, cost, &mut { Counts::TALLY }),
            Params::FixedWindow(fw) => {
                Window(self).fixed_step(fw, now, word, cost, &mut { Counts::TALLY })
            }
            Params::SlidingWindow(sw) => {
                Window(self).sliding_step(sw, now, word, cost, &mut { Counts::TALLY })
            }
            Params::SlidingLog(_) | Params::Concurrency { .. } => Err(StepError::NoWord),
        }
    }

    /// The [`Error`] for a [`StepError`], made out of line.
    #[cold]
    #[inline(never)]
    pub(crate) fn step_error(&self, e: StepError, cost: u64) -> Error {
        match e {
            StepError::Corrupt => self.fault(Fault::Corrupt),
            StepError::Cost(capacity) => Error::CostExceedsCapacity { cost, capacity },
            StepError::NoWord => self.wrong_kind("has no single-word state"),
            // `step_fast` turns them into denials; they never get here.
            StepError::Fenced | StepError::FenceRewrite => self.fault(Fault::Corrupt),
            // Decided again from the live word by an unkeyed bucket's own loop, and by a keyed
            // decision while the retune words move (`decide_key_again`); a composed check's
            // loaded word reports the slot as it looked: unreadable (each way of deciding it
            // again measured 40-160 instructions more on every composed check).
            StepError::Stale => self.fault(Fault::Corrupt),
        }
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

    /// What `read` takes from this thread's hot entry for this handle, the entry filled by
    /// `fill` first unless `holds` it (this handle's, for the slot or limit word as loaded);
    /// `counts` gets the entry's counters and near-limit threshold. Shared by the bucket and
    /// window decisions.
    #[inline(always)]
    pub(crate) fn hot_entry<R>(
        &self,
        holds: impl FnOnce(&hot::Entry) -> bool,
        counts: &mut Counts,
        fill: impl FnOnce(&hot::Entry) -> Result<(), StepError>,
        read: impl FnOnce(&hot::Entry) -> R,
    ) -> Result<R, StepError> {
        hot::with(self.hot_id, |e| {
            if !holds(e) {
                fill(e)?;
            }
            counts.counters = e.counters.get();
            counts.near_slack = e.near_slack.get();
            Ok(read(e))
        })
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
    fn fenced(&self, cost: u64, counts: &mut Counts) -> Result<Gcra, StepError> {
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
    fn hot_fill(&self, witness: u64, tag: u64, e: &hot::Entry) -> Result<(), StepError> {
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
            hot::bucket_key(witness, tag_word),
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
