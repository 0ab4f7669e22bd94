//! The token bucket's words on its control line (see `file/layout.rs`, `bucket`): two parameter
//! slots (emission ns, capacity, check word), the `ACTIVE` word naming the slot a retune last
//! finished, the fleet lease deadline and the fence slot; and bit 63 of every state word (the
//! unkeyed one, each sub-bucket's, each key's), the tag naming the slot its TAT was computed
//! with.
//!
//! # Implementation details
//!
//! A retune ([`stage_retune`], then [`rescale`] of every state word, then [`activate`]), under
//! the file's retune lock so that retunes never overlap:
//!
//! 1. reads the active slot (the old parameters) and writes the new parameters into the other,
//!    inactive one with [`write_slot`]: its check word cleared, the two parameter words, then
//!    the check word (Release). No state word is tagged with the inactive slot, so no decision
//!    uses it meanwhile; one still reading it from a stale word fails the check (the words are
//!    torn) or reads a whole version, and its CAS fails anyway, since that word was rescaled;
//! 2. moves each state word to the new slot with one CAS ([`rescale_word`]: the tokens in use
//!    are kept, so no transition admits more than the larger of the two buckets): a decision
//!    that loaded the old word fails its CAS, re-reads the word with its new tag and, through
//!    the Acquire of that read, sees the slot the retune published before;
//! 3. stores `ACTIVE` (Release), for retuners, resets and inspectors.
//!
//! **The generation.** Bit 0 of `ACTIVE` names the active slot; bits 1..63 count the changes
//! of parameter slots. A retune bumps it after writing the inactive slot (step 1) and again
//! when it names that slot active (step 3); a reset bumps it after copying the live parameters
//! into slot 0. So while `ACTIVE` reads the same, no parameter slot a state word names has
//! been rewritten: a decision reads `ACTIVE` (its [`witness`]) before it loads its state word,
//! and
//!
//! - a thread's cached parameters (`tally::hot`) hold for a word tagged `t` exactly while the
//!   entry was filled under the same witness for the same tag (`witness ^ t`): one load and one
//!   compare instead of re-reading the slot (the fill reads `ACTIVE` before the slot, and every
//!   writer bumps it after the slot, Release);
//! - an admission whose CAS succeeded stands only if `ACTIVE` still reads the witness after the
//!   CAS ([`unchanged`]). Two whole retunes during one decision can bring a state word back to
//!   the very value the decision loaded (an idle bucket's retune moves only the tag, twice), and
//!   its CAS then succeeds on a word that now means the parameters of two versions later; the
//!   second retune bumped `ACTIVE` before it wrote that word back, and the decision's CAS read
//!   that write (Acquire), so the load after it sees the bump. The admission is then given back
//!   ([`give_back`]: exactly the nanoseconds it added, never past full) and decided again. A
//!   retune that finishes during a decision without such a coincidence costs the same: one
//!   decision made twice.
//!
//! Outside a retune every state word names the active slot. A retuner killed between steps 2
//! and 3 leaves some words on the inactive slot; the next retune finishes it first (moves the
//! rest there and names it active, `Bucket::finish_interrupted_retune`) rather than stage into
//! that slot, which would read those words' tokens with its own parameters.
//!
//! A reader ([`read_slot`]) loads the check word (Acquire), then the two parameter words, and
//! accepts them only if the check matches (a fleet share's check is XORed with
//! [`bucket::FLEET`]); a mismatch is a retune between its stores, retried with a backoff, and
//! a mismatch that persists is damage.
//!
//! The loom model `engine::loom_models` runs these functions against decisions.

use std::sync::atomic::Ordering;

mod decide;
mod fleet;
pub(crate) mod hot;
pub(crate) mod reboot;
mod reserve;
mod retune;
mod split;

pub use fleet::FleetLease;
pub use reserve::Reservation;
pub(crate) use retune::FENCE_REWRITE_RETRY_NS;

/// A token bucket's decisions, parameters, retunes and fleet share, on the limit's site (one
/// reference, inlined away): what its typed handle calls. Its out-of-line methods take the view
/// by value: by reference, the caller would have to store the view on its stack for the call
/// (one more instruction on every decision, measured with `benches/instructions.sh`).
///
/// `pub` only so that the sealed kind traits may name it (as the [`Site`](crate::engine::site::Site)); the
/// module is private, so no user can.
pub struct Bucket<'a, C: crate::clock::Clock>(pub(crate) &'a crate::engine::site::Site<C>);

site_view!(Bucket);

use crossbeam_utils::Backoff;

use crate::algo::gcra::{Booking, Gcra};
use crate::algo::{mutate, Change, Decision, Step};
use crate::file::layout::bucket;
use crate::spec::MAX_CAPACITY;
use crate::sync::AtomicWord;

/// The parameters in the slot at control word `base` (emission, capacity, check), and whether
/// the slot is a fleet share (its check carries [`bucket::FLEET`]); `None` for damaged ones.
#[inline(always)]
pub(crate) fn read_slot<A: AtomicWord>(control: &[A], base: usize) -> Option<(Gcra, bool)> {
    // A mismatch means a retune is between its stores: spin, exponentially longer each time
    // (crossbeam's Backoff, at most 2^6 spin hints a round), rather than re-reading the
    // line the retuning process is writing at once.
    let backoff = Backoff::new();
    for _ in 0..64 {
        match read_slot_once(control, base) {
            Read::Whole(g, fleet) => return Some((g, fleet)),
            Read::Damaged => return None,
            Read::Torn => backoff.spin(),
        }
    }
    None
}

/// What one read of a parameter slot found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Read {
    /// A whole version: its parameters, and whether it is a fleet share.
    Whole(Gcra, bool),
    /// Words of two versions (a retune between its stores): read again.
    Torn,
    /// A whole version whose parameters no bucket can have.
    Damaged,
}

/// One read of the slot at control word `base` (the body of [`read_slot`]'s loop).
#[inline(always)]
pub(crate) fn read_slot_once<A: AtomicWord>(control: &[A], base: usize) -> Read {
    // Acquire on the check word: pairs with the Release store a retune ends with, so the
    // two parameter words read after it are at least as new. A torn read fails the check.
    let check = control[base + 2].load(Ordering::Acquire);
    let emission_ns = control[base].load(Ordering::Relaxed);
    let capacity = control[base + 1].load(Ordering::Relaxed);
    // A retune writes the two words, then the check: a read that mixes versions fails the
    // check and is retried.
    let mark = bucket::check(emission_ns, capacity) ^ check;
    if mark != 0 && mark != bucket::FLEET {
        return Read::Torn;
    }
    if emission_ns == 0 || capacity == 0 || capacity > MAX_CAPACITY {
        return Read::Damaged;
    }
    match capacity.checked_mul(emission_ns) {
        Some(tol) if tol <= 1 << 62 => Read::Whole(
            Gcra {
                emission_ns,
                tolerance_ns: tol,
                capacity,
            },
            mark != 0,
        ),
        _ => Read::Damaged,
    }
}

/// Write a parameter slot at control word `base` that no state word names (the inactive slot,
/// or the fence): its check cleared first, so that a reader mid-write fails its check (and
/// retries) rather than mixing two versions; the check last, Release, publishing the words.
/// `mark`: [`bucket::FLEET`] for a fleet share, else 0.
pub(crate) fn write_slot<A: AtomicWord>(
    control: &[A],
    base: usize,
    emission_ns: u64,
    capacity: u64,
    mark: u64,
) {
    // Relaxed: published by the Release store of the check word below.
    control[base + 2].store(0, Ordering::Relaxed);
    control[base].store(emission_ns, Ordering::Relaxed);
    control[base + 1].store(capacity, Ordering::Relaxed);
    control[base + 2].store(
        bucket::check(emission_ns, capacity) ^ mark,
        Ordering::Release,
    );
}

/// The slot a retune last finished (see [`activate`]).
pub(crate) fn active<A: AtomicWord>(control: &[A]) -> usize {
    // Acquire: pairs with the Release store that ends a retune.
    (control[bucket::ACTIVE].load(Ordering::Acquire) & 1) as usize
}

/// The `ACTIVE` word as a decision's witness, read before it loads its state word: the
/// parameters it reads afterwards are those of this generation (see the module docs).
#[inline(always)]
pub(crate) fn witness<A: AtomicWord>(control: &[A]) -> u64 {
    // Acquire: pairs with the Release bump after each write of a parameter slot, so the slot
    // read after it is at least as new as this generation.
    control[bucket::ACTIVE].load(Ordering::Acquire)
}

/// After a decision's CAS committed an admission: whether no parameter slot was rewritten since
/// the decision read `witness` (otherwise the admission is given back and decided again).
#[inline(always)]
pub(crate) fn unchanged<A: AtomicWord>(control: &[A], witness: u64) -> bool {
    // Relaxed: after the CAS (AcqRel), which read the word a rescale or reset wrote after its
    // bump (Release), or a word written after that one: coherence then shows the bump here.
    control[bucket::ACTIVE].load(Ordering::Relaxed) == witness
}

/// Name slot `slot` active and count one more change of the parameter slots (Release: after
/// the slot's words and, at the end of a retune, the rescaled state words). Only under the
/// retune lock (or at a reset, which holds it too), so bumps never race.
pub(crate) fn bump<A: AtomicWord>(control: &[A], slot: usize) {
    // Relaxed: only the holder of the retune lock stores this word.
    let generation = control[bucket::ACTIVE].load(Ordering::Relaxed) >> 1;
    let next = (generation.wrapping_add(1) << 1) & !bucket::PARAM_TAG;
    control[bucket::ACTIVE].store(next | (slot as u64 & 1), Ordering::Release);
}

/// A reset's part of a bucket's control line (see `engine::reset`): the live parameter slot
/// copied to slot 0 as it is (a damaged slot stays damaged), in a retune's order (its check
/// cleared first, so that a reader mid-copy fails its check and retries, and stored last); slot
/// 0 active in a new generation ([`bump`]: a cached copy of slot 0 from before the copy no
/// longer matches, and a decision racing the reset that loaded a word equal to the fresh one
/// gives its admission back); and the fleet lease forgotten ([`forget_lease`]). The caller
/// stores the fresh state word after this (Release).
pub(crate) fn reset_params<A: AtomicWord>(control: &[A]) {
    // Relaxed: only the holder of the retune lock (or the reboot's flock) writes these words.
    if control[bucket::ACTIVE].load(Ordering::Relaxed) & 1 == 1 {
        let from = |k: usize| control[bucket::PARAMS[1] + k].load(Ordering::Acquire);
        let to = |k: usize| &control[bucket::PARAMS[0] + k];
        let check = from(2);
        to(2).store(0, Ordering::Relaxed);
        to(0).store(from(0), Ordering::Relaxed);
        to(1).store(from(1), Ordering::Relaxed);
        to(2).store(check, Ordering::Release);
    }
    bump(control, 0);
    forget_lease(control);
}

/// Forget a fleet share's lease deadline, a time of the monotonic clock of the boot that wrote
/// it: the share is fenced (the host's reserved minimum) until its agent renews the lease. A
/// reset and a reboot's translation both do.
pub(crate) fn forget_lease<A: AtomicWord>(control: &[A]) {
    // Relaxed: only the holder of the retune lock (or the reboot's flock) writes this word;
    // the state word stored after it publishes it.
    control[bucket::DEADLINE].store(0, Ordering::Relaxed);
}

/// Give back an admission of `units_ns` nanoseconds of a tagged state word (its cost times the
/// emission interval it was decided with): the theoretical arrival time moves back by as much,
/// never below `now` (never fuller than full); the tag is kept.
#[cold]
#[inline(never)]
pub(crate) fn give_back<A: AtomicWord>(state: &A, now: impl FnMut() -> u64, units_ns: u64) {
    let given = mutate(state, now, |now, current| {
        Ok::<_, std::convert::Infallible>(Change::unless_same(
            current,
            given_back(now, current, units_ns),
        ))
    });
    match given {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// The tagged state word after giving back `units_ns` at `now` (see [`give_back`]).
#[inline]
pub(crate) fn given_back(now: u64, word: u64, units_ns: u64) -> u64 {
    let tat = word & !bucket::PARAM_TAG;
    tat.saturating_sub(units_ns).max(now.min(tat)) | (word & bucket::PARAM_TAG)
}

/// A retune under way: what each state word moves from and to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retune {
    /// The active slot's parameters.
    pub old: Gcra,
    /// The new parameters, now in slot `tag`.
    pub new: Gcra,
    /// The slot they were written to.
    pub tag: usize,
}

/// The first step of a retune (under the retune lock): write `emission_ns`, `capacity` into the
/// inactive slot, a fleet share (`Some(true)`), a plain rate (`Some(false)`) or as the active
/// slot is (`None`). `None` back when the active slot or the new one reads as damaged.
pub(crate) fn stage_retune<A: AtomicWord>(
    control: &[A],
    emission_ns: u64,
    capacity: u64,
    fleet: Option<bool>,
) -> Option<Retune> {
    let from = active(control);
    let (old, was_fleet) = read_slot(control, bucket::PARAMS[from])?;
    let mark = if fleet.unwrap_or(was_fleet) {
        bucket::FLEET
    } else {
        0
    };
    let tag = 1 - from;
    write_slot(control, bucket::PARAMS[tag], emission_ns, capacity, mark);
    // A new generation: a cached copy of the slot's previous contents no longer matches.
    bump(control, from);
    let (new, _) = read_slot(control, bucket::PARAMS[tag])?;
    Some(Retune { old, new, tag })
}

/// The last step of a retune, once every state word was rescaled: name slot `tag` active, in a
/// new generation.
pub(crate) fn activate<A: AtomicWord>(control: &[A], tag: usize) {
    // Release (in `bump`): readers of ACTIVE (retuners, resets, inspectors, decisions) see the
    // finished slot and the rescaled words.
    bump(control, tag);
}

/// Move one bucket state from parameters `old` to `new` (slot `tag`), keeping its tokens: one
/// CAS, unless a retune already moved it.
pub(crate) fn rescale<A: AtomicWord>(
    state: &A,
    now: impl FnMut() -> u64,
    old: Gcra,
    new: Gcra,
    tag: usize,
) {
    let moved = mutate(state, now, |now, current| {
        Ok::<_, std::convert::Infallible>(if tag_of(current) == tag {
            Change::Keep(()) // already moved
        } else {
            Change::Write(rescale_word(now, current, old, new, tag), ())
        })
    });
    match moved {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

/// A reservation of `n` tokens on a tagged state word at `now` with `g`, waiting at most
/// `max_delay` (see the `wait` module): its decision, the word to store if granted (the tag
/// kept), and the delay.
pub(crate) fn book(
    g: &Gcra,
    now: u64,
    word: u64,
    n: u64,
    max_delay: u64,
) -> (Decision, Option<u64>, u64) {
    let tag = word & bucket::PARAM_TAG;
    let tat = word & !bucket::PARAM_TAG;
    match g.book(now, tat, n, max_delay) {
        Booking::Refused { delay } => {
            let decision = Decision::denied(delay, 0, g.emission_ns)
                .of(g.tolerance_ns)
                .resetting(tat.saturating_sub(now));
            (decision, None, delay)
        }
        Booking::Granted { new_tat, delay } => {
            let slack = g.tolerance_ns.saturating_sub(new_tat - now);
            let decision = Decision::allowed(slack, g.emission_ns)
                .of(g.tolerance_ns)
                .resetting(new_tat - now);
            (decision, Some(new_tat | tag), delay)
        }
    }
}

/// Give back a booking of `units_ns` if nothing changed the state word since it stored
/// `booked`: one CAS from exactly that word to the word without the booking (the tag kept).
/// False when something was booked, admitted, retuned or reset after it.
pub(crate) fn unbook<A: AtomicWord>(state: &A, booked: u64, units_ns: u64) -> bool {
    let tag = booked & bucket::PARAM_TAG;
    let back = ((booked & !bucket::PARAM_TAG).saturating_sub(units_ns)) | tag;
    // AcqRel: a state change like any decision (pairs with their Acquire loads).
    state
        .compare_exchange(booked, back, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}

/// The parameter slot (0 or 1) a state word's tag names.
#[inline(always)]
pub(crate) fn tag_of(word: u64) -> usize {
    (word >> 63) as usize
}

/// The GCRA decision with `g` on a tagged state word: on its TAT, the new word keeping the tag.
#[inline(always)]
pub(crate) fn step(g: &Gcra, now: u64, word: u64, cost: u64) -> Step {
    let tag = word & bucket::PARAM_TAG;
    match g.step(now, word & !bucket::PARAM_TAG, cost) {
        Step::Admit { new, decision } => Step::Admit {
            new: new | tag,
            decision,
        },
        deny => deny,
    }
}

/// The word after giving `units` back to a tagged state word with `g`, keeping the tag.
pub(crate) fn refund(g: &Gcra, now: u64, word: u64, units: u64) -> u64 {
    g.refund(now, word & !bucket::PARAM_TAG, units) | (word & bucket::PARAM_TAG)
}

/// A bucket state computed with `old` parameters, re-expressed with `new` ones (slot `tag`):
/// the tokens in use `(tat - now) / T_old` are kept, rounded up.
pub(crate) fn rescale_word(now: u64, word: u64, old: Gcra, new: Gcra, tag: usize) -> u64 {
    let tat = word & !bucket::PARAM_TAG;
    let used = tat.saturating_sub(now) as u128;
    let scaled = (used * new.emission_ns as u128).div_ceil(old.emission_ns as u128);
    let scaled = scaled.min((new.tolerance_ns as u128) * 2) as u64;
    let tat = if used == 0 { tat } else { now + scaled };
    (tat & !bucket::PARAM_TAG) | ((tag as u64) << 63)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::algo::try_decide;

    const NOW: u64 = 1_000_000_000;

    /// A whole retune at `NOW`: stage, rescale the one state word, activate.
    fn retune(control: &[AtomicU64], emission_ns: u64, capacity: u64) {
        let r = stage_retune(control, emission_ns, capacity, Some(false)).expect("a valid slot");
        rescale(&control[0], || NOW, r.old, r.new, r.tag);
        activate(control, r.tag);
    }

    /// A bucket decision at `NOW` from the production pieces, with the generation check
    /// (`witness`, `unchanged`, `give_back`, decided again); `between` runs after the step is
    /// computed and before its CAS (the decider descheduled there).
    fn decide(control: &[AtomicU64], cost: u64, mut between: impl FnMut()) -> bool {
        loop {
            let seen = witness(control);
            let decision = try_decide(
                &control[0],
                || NOW,
                true,
                |now, word| {
                    let (g, _) = read_slot(control, bucket::PARAMS[tag_of(word)]).ok_or(())?;
                    let s = step(&g, now, word, cost);
                    between();
                    Ok::<Step, ()>(s)
                },
            )
            .expect("a whole slot");
            if !decision.is_allowed() || unchanged(control, seen) {
                return decision.is_allowed();
            }
            give_back(&control[0], || NOW, cost * decision.unit());
        }
    }

    /// Two whole retunes between a decision's read of its slot and its CAS bring an idle
    /// bucket's state word back to the very value the decision loaded (a retune keeps a TAT at
    /// or before now and only moves the tag, twice), so the CAS succeeds with the parameters
    /// of two versions ago (ABA). The generation in `ACTIVE` moved meanwhile: the admission is
    /// given back and decided again with the live parameters. The loom model
    /// `engine::loom_models::loom_two_retunes_during_one_decision_never_over_admit` explores
    /// the same race.
    #[test]
    fn two_retunes_between_a_decisions_slot_read_and_its_cas_are_noticed() {
        let control: Vec<AtomicU64> = (0..16).map(|_| AtomicU64::new(0)).collect();
        // Version 1: 10 units, 1 us each; versions 2 and 3: 10 units, 100 us each.
        write_slot(&control, bucket::PARAMS[0], 1_000, 10, 0);
        let loaded = control[0].load(Ordering::Relaxed);
        let mut once = true;
        let first = decide(&control, 10, || {
            if std::mem::take(&mut once) {
                retune(&control, 100_000, 10);
                retune(&control, 100_000, 10);
                assert_eq!(control[0].load(Ordering::Relaxed), loaded, "the same word");
            }
        });
        let rest = (0..100).filter(|_| decide(&control, 1, || {})).count();
        // Every version holds 10 units: at one instant, 10 in all.
        assert!(
            u64::from(first) * 10 + rest as u64 <= 10,
            "granted {} at one instant with capacities of 10",
            u64::from(first) * 10 + rest as u64
        );
    }
}
