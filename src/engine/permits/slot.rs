//! The permit table: word encodings and the lock-free transitions on them.
//!
//! # Implementation details
//!
//! A concurrency limit of `C` permits owns `C` entries of two words in its state area:
//!
//! | word | bits 0-21 | bits 22-45 | bits 46-63 |
//! |---|---|---|---|
//! | owner | owner pid (0 = free) | start time, clock ticks (low 24 bits) | generation |
//! | stamp | acquired at, ms (rounded up; bits 0-45) | (same field) | generation of its claim |
//!
//! The owner word alone says whether the permit is held and by which process (pid and start
//! time), so every transition is **one CAS on the owner word**; a process killed at any
//! instruction leaves either the old owner word or the new one. Every transition moves the
//! generation on by one (mod 2^18):
//!
//! | transition | owner word | by |
//! |---|---|---|
//! | claim | free(g) -> held(g + 1, me) | an acquirer |
//! | release | held(g, me) -> free(g + 1) | the holder, with the exact word it committed |
//! | take over | held(g, dead) -> held(g + 1, me) | an acquirer that found no free permit |
//! | reclaim | held(g, dead) -> free(g + 1) | `gc` ([`crate::Limit::reclaim_dead_permits`]) |
//!
//! The stamp word is written (one store) after a claim and is informational: it gives
//! inspectors the acquisition time and, with a lease, the expiry. It is trusted only when its
//! generation equals the owner word's, so a stamp left by an earlier holder is never read as
//! the current one's; a holder killed between its claim and its stamp is still reclaimable by
//! liveness, because the identity is in the committed word.
//!
//! **Why the generation.** A release names the exact word it committed, so a process that
//! holds a permit, loses it to a lease take-over and later claims the same entry again cannot
//! release the newer claim with the older handle. A take-over CASes from the exact word it
//! judged, so it cannot take a claim made after its judgement either, unless the entry went
//! through exactly 2^18 transitions in between and ended held by the same process.
//!
//! All-zero is a free entry of generation 0, which is what creation and reset write.

use std::sync::atomic::Ordering;

pub(crate) use crate::owner::{OwnerWord, GEN_MASK, GEN_SHIFT};
pub(crate) use crate::sync::PermitAtomic;

/// The stamp word's time field: milliseconds, 46 bits (about 2,200 years of uptime).
pub(crate) const STAMP_MS_MASK: u64 = (1 << GEN_SHIFT) - 1;

/// Words per permit entry.
pub(crate) const ENTRY_WORDS: usize = 2;

/// The stamp word for the claim of generation `gen` at `now_ns`: milliseconds rounded up, so
/// that a lease measured from it never ends early.
pub(crate) fn stamp(gen: u64, now_ns: u64) -> u64 {
    let ms = now_ns.div_ceil(1_000_000) & STAMP_MS_MASK;
    ((gen & GEN_MASK) << GEN_SHIFT) | ms
}

/// The acquisition time (ns) a stamp records for an owner word, if it belongs to it.
pub(crate) fn stamped_since(owner: OwnerWord, stamp: u64) -> Option<u64> {
    (stamp >> GEN_SHIFT == owner.gen() && stamp & STAMP_MS_MASK != 0)
        .then(|| (stamp & STAMP_MS_MASK).saturating_mul(1_000_000))
}

/// The permit table of one limit: `permits` entries of [`ENTRY_WORDS`] words.
pub(crate) struct Table<'a, A> {
    words: &'a [A],
    permits: usize,
}

impl<'a, A: PermitAtomic> Table<'a, A> {
    /// The table over `words`, which must hold at least `permits` entries.
    pub fn new(words: &'a [A], permits: usize) -> Table<'a, A> {
        assert!(
            words.len() >= permits * ENTRY_WORDS,
            "permit area too small"
        );
        Table { words, permits }
    }

    pub fn permits(&self) -> usize {
        self.permits
    }

    fn owner_word(&self, index: usize) -> &A {
        &self.words[index * ENTRY_WORDS]
    }

    fn stamp_word(&self, index: usize) -> &A {
        &self.words[index * ENTRY_WORDS + 1]
    }

    /// Entry `index`'s owner word and stamp, as read now.
    pub fn read(&self, index: usize) -> (OwnerWord, u64) {
        // Acquire: pairs with the AcqRel CAS that committed the word.
        let word = OwnerWord(self.owner_word(index).load(Ordering::Acquire));
        // Acquire: pairs with the Release store of the stamp.
        let stamp = self.stamp_word(index).load(Ordering::Acquire);
        (word, stamp)
    }

    /// Claim the first free entry, scanning all of them from `start`; record `now_ns` in its
    /// stamp. Returns the entry and the owner word committed.
    pub fn claim(
        &self,
        start: usize,
        me: u64,
        now_ns: impl FnOnce() -> u64,
    ) -> Option<(usize, OwnerWord)> {
        for k in 0..self.permits {
            let index = (start + k) % self.permits;
            // Acquire: pairs with the release that freed the entry, so the previous holder's
            // work under the permit happens before ours.
            let mut current = OwnerWord(self.owner_word(index).load(Ordering::Acquire));
            // Each failed CAS re-reads the entry; a held entry moves the scan on.
            while current.is_free() {
                let new = OwnerWord::held(current.next_gen(), me);
                // AcqRel: Acquire as above; Release publishes our claim to inspectors.
                match self.owner_word(index).compare_exchange(
                    current.0,
                    new.0,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.stamp(index, new, now_ns());
                        return Some((index, new));
                    }
                    Err(actual) => current = OwnerWord(actual),
                }
            }
        }
        None
    }

    /// Record the acquisition time of the claim `word` of entry `index`.
    pub fn stamp(&self, index: usize, word: OwnerWord, now_ns: u64) {
        // Release: a reader that sees this stamp (Acquire) and the matching owner word reads a
        // consistent pair; the generation check rejects a stamp of another claim.
        self.stamp_word(index)
            .store(stamp(word.gen(), now_ns), Ordering::Release);
    }

    /// Release entry `index` if it still holds exactly `held`. False when it does not (the
    /// permit was taken over, reset, or released already).
    pub fn release(&self, index: usize, held: OwnerWord) -> bool {
        // AcqRel: Release orders the holder's work before the next claim's Acquire.
        self.owner_word(index)
            .compare_exchange(
                held.0,
                OwnerWord::free(held.next_gen()).0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Replace the exact word `judged` of entry `index` by a claim of `me` (take over) or by a
    /// free word (`me == None`, reclaim). The new word on success.
    pub fn replace(&self, index: usize, judged: OwnerWord, me: Option<u64>) -> Option<OwnerWord> {
        let new = match me {
            Some(me) => OwnerWord::held(judged.next_gen(), me),
            None => OwnerWord::free(judged.next_gen()),
        };
        // AcqRel: as a claim (Acquire) and as a release (Release).
        self.owner_word(index)
            .compare_exchange(judged.0, new.0, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| new)
    }

    /// The slow path: scan every held entry from `start`, ask `reclaimable(word, since_ns)`
    /// whether its owner is gone or its lease expired, and replace the first one that is (by a
    /// claim of `me`, or free when `me` is None). With `all`, go on and reclaim every
    /// reclaimable entry (only meaningful with `me == None`). Returns what was replaced.
    pub fn sweep(
        &self,
        start: usize,
        me: Option<u64>,
        all: bool,
        mut reclaimable: impl FnMut(OwnerWord, Option<u64>) -> bool,
        mut now_ns: impl FnMut() -> u64,
    ) -> Vec<(usize, OwnerWord)> {
        let mut replaced = Vec::new();
        for k in 0..self.permits {
            let index = (start + k) % self.permits;
            let (word, stamp) = self.read(index);
            // A free entry is for the fast path (the caller scanned already; a release raced).
            if word.is_free() || !reclaimable(word, stamped_since(word, stamp)) {
                continue;
            }
            if let Some(new) = self.replace(index, word, me) {
                if me.is_some() {
                    self.stamp(index, new, now_ns());
                }
                replaced.push((index, new));
                if !all {
                    break;
                }
            }
        }
        replaced
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::{owner, START_MASK};
    use std::sync::atomic::AtomicU64;

    fn table(words: &[AtomicU64]) -> Table<'_, AtomicU64> {
        Table::new(words, words.len() / 2)
    }

    #[test]
    fn zero_is_free_and_claims_fill_then_refuse() {
        let words: Vec<AtomicU64> = (0..6).map(|_| AtomicU64::new(0)).collect();
        let t = table(&words);
        let me = owner(1234, 99);
        let a = t.claim(1, me, || 5_000_000).unwrap();
        assert_eq!(a.0, 1);
        assert_eq!(a.1.pid(), 1234);
        assert_eq!(a.1.gen(), 1);
        let (w, s) = t.read(1);
        assert_eq!(stamped_since(w, s), Some(5_000_000));
        assert!(t.claim(1, me, || 0).is_some());
        assert!(t.claim(1, me, || 0).is_some());
        assert!(t.claim(0, me, || 0).is_none());
        assert!(t.release(a.0, a.1));
        assert!(
            !t.release(a.0, a.1),
            "a second release of the same claim is refused"
        );
        let b = t.claim(0, me, || 0).unwrap();
        assert_eq!(b.0, 1);
        assert_eq!(b.1.gen(), 3);
        assert!(
            !t.release(a.0, a.1),
            "an old handle cannot release a newer claim"
        );
    }

    #[test]
    fn stamps_of_other_generations_are_ignored() {
        let w = OwnerWord::held(7, owner(5, 1));
        assert_eq!(stamped_since(w, stamp(6, 3_000_000)), None);
        assert_eq!(stamped_since(w, stamp(7, 2_500_001)), Some(3_000_000));
    }

    #[test]
    fn generations_wrap_within_their_bits() {
        let w = OwnerWord::held(GEN_MASK, owner(1, START_MASK));
        assert_eq!(w.gen(), GEN_MASK);
        assert_eq!(w.next_gen(), 0);
        assert_eq!(w.start_low(), START_MASK);
        assert!(OwnerWord::free(w.next_gen()).is_free());
        assert_eq!(OwnerWord::free(0).0, 0);
    }

    #[test]
    fn sweep_takes_over_only_what_is_judged_reclaimable() {
        let words: Vec<AtomicU64> = (0..6).map(|_| AtomicU64::new(0)).collect();
        let t = table(&words);
        let dead = owner(77, 1);
        let live = owner(78, 1);
        t.claim(0, dead, || 1).unwrap();
        t.claim(0, live, || 1).unwrap();
        t.claim(0, dead, || 1).unwrap();
        let got = t.sweep(0, None, true, |w, _| w.owner() == dead, || 0);
        assert_eq!(got.len(), 2);
        assert!(t.read(0).0.is_free() && t.read(2).0.is_free());
        assert_eq!(t.read(1).0.owner(), live);
    }
}
