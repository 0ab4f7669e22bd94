//! The key-table engine: the lock-free open-addressing table of a keyed limit in the file, over
//! any 16-byte slot type ([`pair::PairWord`]) and any word algorithm ([`template::Template`]:
//! its step, refund, freshness and blank word; the keyed handle is one, `template::Pure` the
//! models' and tests'). Below the handles: it knows nothing of [`crate::limiter`], which calls it
//! for a retune ([`rescale_all`]), and the keyed handle ([`crate::engine::keyed`]) and the keyed permits
//! decide through it.
//!
//! **Table.** A keyed limit's slot region is its control line (the template's live parameters,
//! as for an unkeyed limit) followed by `slots` key slots of 16 bytes, `[tag, state]`, 16-byte
//! aligned; `slots` is the definition's capacity rounded up to a power of two. The tag is the low
//! 63 bits of a keyed hash of the key bytes (SipHash-1-3 under the file's random 128-bit seed, so
//! every process and language computes the same tag and no caller can aim keys at one slot
//! without the seed). Tag words:
//!
//! | tag word | slot |
//! |---|---|
//! | `0` | empty: never used since creation or reset (a key hashing to 0 gets tag 1) |
//! | `t` (bit 63 clear) | the live slot of the key with tag `t`; the state is its state word |
//! | `t \| 2^63` | a *pending claim* of key `t`: not yet the key's; the state word is a nonce |
//! | `u64::MAX` | retired: occupied for probing, free for a claim (tag `2^63 - 1` becomes `2^63 - 2`) |
//!
//! A slot is only ever read and written as one 16-byte unit (an atomic 16-byte load and
//! `lock cmpxchg16b`, see [`pair`]), so a state is always read with the tag it belongs to.
//! All-zero is an empty table.
//!
//! **Lookup.** A key's probe window is the `min(32, slots)` slots from `tag mod slots`, in
//! order. A decision scans it up to the first slot holding the key's live tag (the key's slot)
//! or the first empty slot, passing over pending claims, reads the clock (after the pairs, as an
//! unkeyed decision reads it after its word), then applies the template's step function to the
//! pair it read and commits with one CAS of `(tag, state) -> (tag, new)`: the hot path for a
//! present key is one hash, a short scan (usually one slot), and the same CAS loop as an unkeyed
//! limit, with no allocation. That first attempt (the scan to the key's live slot or an empty
//! one, the step, the CAS) is compiled into the caller with the template's own step
//! (`Table::decide_first`); anything else it meets (a window with neither, a lost CAS, an
//! error) wrote nothing, and the decision is made again from the start, out of line, as
//! described here. A failed CAS that still shows the key's tag retries on the new state
//! (re-reading the clock); one that shows another tag means the slot changed hands: the
//! decision starts over. A denial is computed from a pair read whole, so it is always this
//! key's state.
//!
//! **Invariant 1: a slot that held a key never becomes empty again** (until the limit is reset).
//! So a key is never stored beyond an empty slot of its window, and a scan may stop there.
//!
//! **Invariant 2: a key has at most one live slot at any instant.** Every decision commits with
//! a CAS on the key's live slot, so it is made on the key's only state (Claims, below, shows the
//! invariant holds).
//!
//! **Claims.** A key found nowhere is inserted at the first empty slot by one CAS
//! `(0, s) -> (tag, step(s))` that both claims the slot and records the admission (a denial
//! inserts nothing); the slot is live at once. If the window has no empty slot (and no live
//! slot of the key), the first *free* slot of the window is claimed: a retired slot, a pending
//! claim (which holds no state), or an *idle* slot whose state is fresh at `now` (bucket full,
//! windows over; see [`template`]). That claim is *pending*: one CAS `(old, s) -> (tag | 2^63,
//! nonce)`, atomic with the freshness check, so an update of the old key either landed before
//! (the state changed: this CAS fails) or fails after it (the tag changed: that process starts
//! over and finds its key gone). The nonce is unique to the claim (the claimer's pid and a
//! per-process count), so no claim is ever mistaken for another. Because `s` was fresh, the new
//! key loses nothing by starting from it, and the old key loses nothing by starting over: any
//! decision that sees the slot taken reads its clock after that, so not earlier than the
//! claimer's clock read (`CLOCK_MONOTONIC` is one timeline for all processes), and freshness only
//! grows with time.
//!
//! Two processes can claim free slots for one key at once, and pick different ones (freshness
//! depends on when each looked). Only its claimer can make a pending claim live: it reads the
//! whole window again, *after* its claim; if the key has a live slot, it retires its claim
//! (`-> (RETIRED, blank)`); otherwise it retires every other pending claim of the key, and only if
//! all those retirements succeeded does it CAS its own claim `(tag | 2^63, nonce) -> (tag, s)`.
//! This keeps Invariant 2: of two claims made at `c1 < c2`, the second claimer's reading of the
//! window comes after `c2`, so it sees the first slot (pending, live, or no longer the key's);
//! if live, the second retires its own; if pending, it must retire it before going live, and a
//! retired claim can never go live (its nonce is gone). A live slot also comes from an empty
//! slot only in a window that has one, and no claim through a free slot is made in such a window
//! (the claimer would have found the empty slot, or the key in it). Claims decide nothing, so
//! retiring one loses nothing; its claimer looks again. A claimer killed before it validates
//! leaves a pending claim that is a free slot for the next claim in its window, and that
//! [`crate::limiter::Limit::reclaim_idle_keys`] retires. (Loom models: two and three threads inserting one key
//! with a budget of one token through idle slots admit it at most once; a stale claim is taken
//! over.) A live slot may be taken by another key as soon as it is idle, even just after its
//! claim; its key's next decision then looks again.
//!
//! **Full table.** No slot for the key, no empty, retired or idle slot in its window: the
//! definition's [`crate::spec::FullPolicy`] applies: deny, with a retry-after of the time until the first slot
//! of the window becomes idle; allow without recording anything (fail open); or return
//! [`crate::Error::TableFull`]. Decisions are counted in the limit's statistics either way (an error is
//! not a decision).
//!
//! **Live retuning** of a keyed token bucket moves every slot's word to the new parameter slot
//! with a CAS loop per slot, empty and retired slots included, so that a later claim inherits a
//! retuned word; every other write derives from the slot's current word under CAS and keeps its
//! parameter tag, so after the pass no word refers to the old parameters. A retune of a keyed
//! bucket therefore takes time in proportion to the table (one CAS per slot).
//!
//! **Peeks** never write: a key with no slot is decided on the fresh word it would get.
//!

pub(crate) mod pair;
pub(crate) mod table;
pub(crate) mod template;

#[cfg(test)]
mod loom_models;

use std::sync::atomic::AtomicU64;

use crate::algo::gcra::Gcra;
use crate::engine::bucket::rescale_word;

use table::Table;

/// The reason keyed calls fail on targets without a 16-byte compare-and-swap.
pub(crate) const NO_PAIR_CAS: &str =
    "is keyed, and keyed limits need a 16-byte CAS (cmpxchg16b) on this target";

/// The key slot type of this target.
#[cfg(target_arch = "x86_64")]
pub(crate) type Slot = pair::KeySlot;
/// The key slot type of this target.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) type Slot = NoSlot;

/// The table of `slots` key slots at the start of `area` (a keyed limit's state area; a keyed
/// concurrency limit keeps its permit entries after them). `None` on a target without a
/// 16-byte CAS, for `slots == 0` (not keyed), or an area too short.
#[inline]
pub(crate) fn table_in(area: &[AtomicU64], slots: usize) -> Option<&[Slot]> {
    if slots == 0 {
        return None;
    }
    pair_table(area.get(..2 * slots)?)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn pair_table(words: &[AtomicU64]) -> Option<&[Slot]> {
    pair::KeySlot::table(words)
}

#[cfg(not(target_arch = "x86_64"))]
fn pair_table(_words: &[AtomicU64]) -> Option<&[Slot]> {
    None
}

/// Stands in for the slot type where there is none.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) enum NoSlot {}

#[cfg(not(target_arch = "x86_64"))]
impl pair::PairWord for NoSlot {
    fn load(&self) -> (u64, u64) {
        match *self {}
    }
    fn cas(&self, _: (u64, u64), _: (u64, u64)) -> Result<(), (u64, u64)> {
        match *self {}
    }
}

/// Move every key's bucket state in `slots` to parameter slot `tag` (a live retune of a keyed
/// bucket from `old` to `new`), each word dated by a read of `now`. Runs under the retune lock,
/// so no other retune overwrites the old slot meanwhile.
/// Whether any live key's state word satisfies `f` (a retune left unfinished leaves some on
/// the slot it staged).
pub(crate) fn any_live_state(slots: &[Slot], f: impl FnMut(u64) -> bool) -> bool {
    Table::new(slots).any_live_state(f)
}

pub(crate) fn rescale_all(slots: &[Slot], now: impl Fn() -> u64, old: Gcra, new: Gcra, tag: usize) {
    Table::new(slots).update_states(|word| {
        ((word >> 63) as usize != tag).then(|| rescale_word(now(), word, old, new, tag))
    });
}
