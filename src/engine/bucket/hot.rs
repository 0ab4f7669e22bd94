//! What a token bucket keeps in a thread's hot entry ([`Entry`]): the parameters of the slot
//! its last decision used, under the generation of the parameter slots and the slot's tag, and
//! the cost gate (the capacity, or 0 for a fleet share).

use std::sync::atomic::AtomicU64;

use crate::algo::gcra::Gcra;
use crate::engine::site::hot::Entry;

/// What a bucket entry's check holds: the generation it was filled in (the `ACTIVE` word read
/// before the slot) and the tag of the slot (bit 63 of a state word), XORed so that no two
/// (generation, tag) pairs share a key even in a damaged `ACTIVE` word.
#[inline(always)]
pub(crate) fn bucket_key(witness: u64, tag: u64) -> u64 {
    witness ^ (tag & (1 << 63))
}

impl Entry {
    /// The parameters.
    #[inline(always)]
    pub(crate) fn gcra(&self) -> Gcra {
        Gcra {
            emission_ns: self.emission_ns.get(),
            tolerance_ns: self.tolerance_ns.get(),
            capacity: self.capacity.get(),
        }
    }

    /// The slot is a fleet share (an entry's capacity is never 0).
    #[inline(always)]
    pub(crate) fn fleet(&self) -> bool {
        self.gate.get() == 0
    }

    /// Fill the entry for handle `id` with parameters `g` read under `check` ([`bucket_key`] of
    /// the generation read before the slot).
    pub(crate) fn fill(
        &self,
        id: u64,
        check: u64,
        g: Gcra,
        fleet: bool,
        near_slack: u64,
        counters: *const AtomicU64,
    ) {
        self.set(
            id,
            check,
            g,
            if fleet { 0 } else { g.capacity },
            near_slack,
            counters,
        );
    }

    /// Whether this is handle `id`'s entry for the bucket parameter slot a state word tagged
    /// `tag` names, in the generation `witness` (the `ACTIVE` word as the decision read it):
    /// the entry was filled in that generation for that slot, and no parameter slot has been
    /// rewritten since (each rewrite bumps the generation, see `engine::bucket`). One compare,
    /// whatever the parameters: two parameter sets that share a check word are two generations.
    #[inline(always)]
    pub(crate) fn holds_bucket(&self, id: u64, witness: u64, tag: u64) -> bool {
        self.id.get() == id && self.check.get() == bucket_key(witness, tag)
    }
}
