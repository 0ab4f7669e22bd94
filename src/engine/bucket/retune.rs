//! A token bucket's parameters: the two slots and the fence slot, reading them, and a retune
//! (stage, activate, rescale the states to the new slot, finish one a killed retuner left).

use crate::algo::gcra::Gcra;
use crate::algo::Fault;
use crate::clock::Clock;
use crate::engine;
use crate::engine::Params;
use crate::error::Result;
use crate::file::layout::bucket;
use crate::spec::{Algorithm, Rate};
use std::sync::atomic::{AtomicU64, Ordering};

use super::Bucket;

/// How long a decision that found the fence slot being rewritten (see [`Bucket::fence_params`])
/// tells its caller to wait: about one scheduling quantum, after which the descheduled writer
/// has usually run again and finished its three stores.
pub(crate) const FENCE_REWRITE_RETRY_NS: u64 = 1_000_000;

/// What a decision at some instant decides with (see [`Bucket::bucket_at`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BucketAt {
    /// The parameters.
    pub g: Gcra,
    /// They are the fence's: a fleet share past its lease.
    pub fenced: bool,
    /// How long they hold from that instant (a fleet share: until its deadline).
    pub horizon_ns: u64,
}

impl<C: Clock> Bucket<'_, C> {
    /// The token bucket's parameters in slot `tag`, validated against the slot's check word
    /// (a fleet share's too: these are the slot's parameters, not what a fenced decision uses;
    /// see [`Bucket::bucket_at`]).
    #[inline(always)]
    pub(crate) fn bucket_params(&self, tag: usize) -> Result<Gcra> {
        self.slot_params(bucket::PARAMS[tag & 1]).map(|(g, _)| g)
    }

    /// The parameters in the slot at control word `base` (emission, capacity, check), and
    /// whether the slot is a fleet share (its check carries [`bucket::FLEET`]).
    #[inline(always)]
    pub(crate) fn slot_params(&self, base: usize) -> Result<(Gcra, bool)> {
        engine::bucket::read_slot(self.control_line(), base)
            .ok_or_else(|| self.fault(Fault::Corrupt))
    }

    /// The words every retune of a bucket changes: `ACTIVE` and the two parameter slots'
    /// check words (a retune clears a slot's check word before it writes the slot).
    pub(crate) fn retune_words(&self) -> [u64; 3] {
        // Acquire: as the decisions' loads of the same words.
        let word = |i: usize| self.control(i).load(Ordering::Acquire);
        [
            word(bucket::ACTIVE),
            word(bucket::PARAMS[0] + 2),
            word(bucket::PARAMS[1] + 2),
        ]
    }

    /// The parameters a decision at `now` uses for slot `tag`: the slot's, unless it is a fleet
    /// share whose lease deadline does not cover `now` (then the fence's). `None` while the
    /// fence is being rewritten (see [`Bucket::fence_params`]): decide nothing, deny.
    pub(crate) fn bucket_at(&self, tag: usize, now: u64) -> Result<Option<BucketAt>> {
        let (g, fleet) = self.slot_params(bucket::PARAMS[tag & 1])?;
        if !fleet {
            return Ok(Some(BucketAt {
                g,
                fenced: false,
                horizon_ns: u64::MAX,
            }));
        }
        // Acquire: pairs with the Release store of a deadline (after the check load above).
        let deadline = self.control(bucket::DEADLINE).load(Ordering::Acquire);
        if bucket::leased(deadline, now) {
            return Ok(Some(BucketAt {
                g,
                fenced: false,
                horizon_ns: deadline - now,
            }));
        }
        Ok(self.fence_params()?.map(|g| BucketAt {
            g,
            fenced: true,
            horizon_ns: u64::MAX,
        }))
    }

    /// The fence slot: what a fleet-managed bucket decides with once its lease has passed.
    ///
    /// The fence is one slot, rewritten in place by [`Bucket::fleet_manage`] under the retune
    /// lock while fenced decisions read it (its check word cleared first, see
    /// [`engine::bucket::write_slot`]). A writer descheduled between its stores leaves the slot
    /// torn for as long as it is off the CPU, far longer than a reader's bounded retries: so a
    /// slot that does not read whole is `Ok(None)`, a rewrite under way, while another holds the
    /// retune lock (taken here without waiting: a decision never waits for a management call),
    /// and damage (`CorruptState`) only when it is still torn with the lock held here.
    pub(crate) fn fence_params(&self) -> Result<Option<Gcra>> {
        match engine::bucket::read_slot(self.control_line(), bucket::FENCE) {
            Some(slot) => self.fence_of(slot).map(Some),
            None => self.fence_torn(),
        }
    }

    /// The fence slot read torn: a rewrite under way (`None`) or damage.
    #[cold]
    #[inline(never)]
    fn fence_torn(self) -> Result<Option<Gcra>> {
        let Some(_locked) = self.shared.try_lock() else {
            return Ok(None);
        };
        self.fence_locked().map(Some)
    }

    /// The fence slot, read with the retune lock held (no rewrite under way): whole, or damaged.
    pub(crate) fn fence_locked(&self) -> Result<Gcra> {
        match engine::bucket::read_slot(self.control_line(), bucket::FENCE) {
            Some(slot) => self.fence_of(slot),
            None => Err(self.fault(Fault::Corrupt)),
        }
    }

    fn fence_of(&self, slot: (Gcra, bool)) -> Result<Gcra> {
        match slot {
            (g, false) => Ok(g),
            // A fence slot is never itself a fleet share.
            (_, true) => Err(self.fault(Fault::Corrupt)),
        }
    }

    /// Change a token bucket's capacity and rate together, live (see [`TokenBucketLimit::set_rate`](crate::TokenBucketLimit::set_rate)).
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_rate`](crate::TokenBucketLimit::set_rate).
    ///
    /// A fleet-managed bucket ([`TokenBucketLimit::fleet_manage`](crate::TokenBucketLimit::fleet_manage)) stays fleet-managed: the new rate holds
    /// until its lease deadline, like the share it replaces.
    pub(crate) fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()> {
        self.retune_bucket(capacity, rate, None)
    }

    /// Retune a token bucket; `fleet`: mark the new slot a fleet share (`Some(true)`), a plain
    /// rate (`Some(false)`), or as the active slot is (`None`).
    pub(crate) fn retune_bucket(
        &self,
        capacity: u64,
        rate: Rate,
        fleet: Option<bool>,
    ) -> Result<()> {
        debug_assert!(matches!(self.params, Params::TokenBucket));
        let algo = Algorithm::TokenBucket {
            capacity,
            emission_ns: rate.emission_ns(),
        };
        algo.validate(self.name())?;
        let _guard = self.retune_lock()?;
        self.retune_bucket_locked(capacity, rate, fleet)
    }

    /// [`Bucket::retune_bucket`] with the retune lock held.
    pub(crate) fn retune_bucket_locked(
        &self,
        capacity: u64,
        rate: Rate,
        fleet: Option<bool>,
    ) -> Result<()> {
        self.finish_interrupted_retune()?;
        let control = self.control_line();
        let engine::bucket::Retune { old, new, tag } =
            engine::bucket::stage_retune(control, rate.emission_ns(), capacity, fleet)
                .ok_or_else(|| self.fault(Fault::Corrupt))?;
        self.rescale_states(old, new, tag);
        engine::bucket::activate(control, tag);
        Ok(())
    }

    /// Move every state word of the bucket (its own, its split lanes', or every key's) from
    /// parameters `old` to `new` (slot `tag`), keeping its tokens; words already there are left.
    fn rescale_states(&self, old: Gcra, new: Gcra, tag: usize) {
        if self.split > 1 {
            for i in 0..self.split {
                self.rescale_in(
                    self.sub_state(i),
                    self.sub_params(old, i),
                    self.sub_params(new, i),
                    tag,
                );
            }
        } else if !self.kind.is_keyed() {
            self.rescale_in(self.control(0), old, new, tag);
        } else if let Some(slots) = self.key_table() {
            // (None: nothing in this process can have written a table it cannot even update.)
            engine::keys::rescale_all(slots, || self.clock.now_ns(), old, new, tag);
        }
    }

    /// Finish a retune whose process died after moving state words to the slot it staged and
    /// before naming that slot active. Outside a retune every state word names the active slot;
    /// words on the other one hold tokens in its parameters, and staging the next retune there
    /// would read them with new ones (a key moved before the death would get its tokens back,
    /// or lose them). So the rest are moved there too and the slot is named active, as the dead
    /// retune would have done. Under the retune lock: no retune is under way.
    fn finish_interrupted_retune(&self) -> Result<()> {
        let control = self.control_line();
        let staged = 1 - engine::bucket::active(control);
        // Acquire: as a decision loads a state word.
        let on_staged = |word: u64| engine::bucket::tag_of(word) == staged;
        let interrupted = if self.split > 1 {
            (0..self.split).any(|i| on_staged(self.sub_state(i).load(Ordering::Acquire)))
        } else if !self.kind.is_keyed() {
            on_staged(self.control(0).load(Ordering::Acquire))
        } else {
            self.key_table()
                .is_some_and(|slots| engine::keys::any_live_state(slots, on_staged))
        };
        if !interrupted {
            return Ok(());
        }
        let old = self.bucket_params(1 - staged)?;
        let new = self.bucket_params(staged)?;
        self.rescale_states(old, new, staged);
        engine::bucket::activate(control, staged);
        Ok(())
    }

    /// Move one bucket state from parameters `old` to `new` (slot `tag`), keeping its tokens.
    pub(crate) fn rescale_in(&self, state: &AtomicU64, old: Gcra, new: Gcra, tag: usize) {
        engine::bucket::rescale(state, || self.clock.now_ns(), old, new, tag);
    }
}
