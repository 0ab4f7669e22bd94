//! Which thread may write which counter lane: the claim protocol and the two ways of adding.
//!
//! Lane `i` (1 <= i < lanes) has an owner word: free (pid field 0) or held by one thread,
//! named as a permit owner is ([`OwnerWord`]): its tid in the pid field (a tid is a pid on
//! Linux: `kill(tid, 0)` and `/proc/<tid>/stat` answer for it), the low bits of the thread's
//! start time, and a generation bumped by every transition (so a CAS never mistakes a word for
//! an older one with the same owner). Lane 0 has no owner: it is the shared lane.
//!
//! # Invariants
//!
//! - **One writer per owned lane.** Only the thread named by a lane's owner word writes that
//!   lane's counters, with a plain load and store (no read-modify-write: nobody else writes).
//!   A lane changes hands only by a CAS of its owner word from free, or from an owner that is
//!   gone (its thread exited, or its process died): at most one claimer wins, and a gone
//!   owner writes nothing more.
//! - **Totals never go backwards.** The counters belong to the lane, not to the owner: a new
//!   owner goes on from the values it finds. It sees the last values of the gone owner because
//!   the owner's death is learnt from the kernel (`kill`, `/proc`), after the owner's last store
//!   (in the loom model, a Release store the claimer reads with Acquire). Each counter word only
//!   grows, so a reader summing the lanes sees a sum that only grows.
//! - **Adoption.** A thread that finds its own identity on a lane (it claimed it through
//!   another mapping of the same file, or forgot it) uses it again: the same thread writing
//!   through two mappings is still one writer, in program order.
//!
//! # Bounds
//!
//! A claim reads every owner word once to adopt, once for a free lane, and if none is free,
//! checks each held lane's owner with the liveness test of the permits (one `kill` and one
//! `/proc` read per lane): at most `lanes - 1` of each, once per thread and mapping, never on a
//! decision of a thread that already has its lane.

use std::sync::atomic::Ordering;

use crate::owner::OwnerWord;
use crate::sync::AtomicWord;
use crate::sync::PermitAtomic;

/// Claim a lane among `1..lanes` for the thread `me` (an owner identity: tid and start time,
/// never 0): one it already holds, else a free one, else one whose owner `is_gone`. `owner(i)`
/// is lane `i`'s owner word. `None` when every lane is held by a live thread.
pub(crate) fn claim<'a, A: AtomicWord + 'a>(
    lanes: usize,
    owner: impl Fn(usize) -> &'a A,
    me: u64,
    is_gone: impl Fn(OwnerWord) -> bool,
) -> Option<usize> {
    debug_assert!(me != 0);
    // Acquire: pairs with the claim CAS that wrote the word (for a lane we hold, our own).
    let word = |i: usize| OwnerWord(owner(i).load(Ordering::Acquire));
    if let Some(i) = (1..lanes).find(|&i| {
        let w = word(i);
        !w.is_free() && w.owner() == me
    }) {
        return Some(i);
    }
    for free_only in [true, false] {
        for i in 1..lanes {
            let w = word(i);
            let take = if free_only {
                w.is_free()
            } else {
                !w.is_free() && w.owner() != me && is_gone(w)
            };
            // AcqRel: Acquire so that this thread's counter loads come after the previous
            // owner's stores (whose death `is_gone` learnt); Release orders nothing here but is
            // the permit table's convention for a claim.
            if take
                && owner(i)
                    .compare_exchange(
                        w.0,
                        OwnerWord::held(w.next_gen(), me).0,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                return Some(i);
            }
        }
    }
    None
}

/// Give lane `i` back (free, next generation) if `me` still holds it. Used by the tests and the
/// models; threads of a process keep their lanes until they exit (see the module docs).
#[cfg(test)]
pub(crate) fn release<A: AtomicWord>(owner: &A, me: u64) -> bool {
    let w = OwnerWord(owner.load(Ordering::Acquire));
    if w.is_free() || w.owner() != me {
        return false;
    }
    // Release: the next owner (Acquire on its claim) sees this thread's last counter stores.
    owner
        .compare_exchange(
            w.0,
            OwnerWord::free(w.next_gen()).0,
            Ordering::Release,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// Add one to a counter of a lane this thread owns: a plain load and store, no locked
/// instruction (nobody else writes it), compiled to one `inc` of the word.
///
/// Wrapping: counting cannot reach 2^64 (585 years at one decision per nanosecond), so only a
/// word another process wrote can be at the maximum, and such a writer could have written any
/// value; saturating cost two instructions on every decision to keep one garbage value
/// rather than another. Readers sum the lanes saturating ([`super::Tally`]'s `stats`), so no
/// value of any word makes a sum overflow.
#[inline(always)]
pub(crate) fn add_owned<A: PermitAtomic>(counter: &A) {
    // Relaxed: a statistic; the only writer is this thread, so load and store cannot interleave
    // with another write.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Add one to a counter of the shared lane: an atomic add (other threads add to it too).
#[inline(always)]
pub(crate) fn add_shared<A: PermitAtomic>(counter: &A) {
    // Relaxed: a statistic; it orders nothing.
    counter.fetch_add(1, Ordering::Relaxed);
}
