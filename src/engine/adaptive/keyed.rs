//! Keyed adaptive concurrency: one adaptive limit per key (a downstream host, a tenant), each
//! learning its own limit from its own samples, over a keyed concurrency limit's key table and
//! permit blocks; the protocols over any [`PairWord`] and [`PermitAtomic`], so that the loom
//! models run them unchanged.
//!
//! # Implementation details
//!
//! The permits are a keyed concurrency limit's ([`crate::engine::permits::keyed`], whose three
//! rules this module keeps): per key slot, a block of `max` permit entries (`max <= 64`), and
//! the slot's state word as the bitmap of the entries holding a committed permit of the slot's
//! key. Per key slot there are also four words ([`KEY_WORDS`]): the adaptive limit's
//! accumulator, limit word (limit and window start) and RTT word, exactly the unkeyed limit's
//! three words, changed by the same functions ([`gate::record`], [`gate::close_window`], the
//! pure updates of [`crate::algo::adaptive`]); and an **owner word**, the tag of the key those
//! three words learn for.
//!
//! **Granting within the key's limit.** The bit of a permit is set by a CAS on the key slot
//! `(tag, s) -> (tag, s | bit)` that is attempted only if `popcount(s) < floor(L)` for the
//! very `s` it replaces (`L` read from the key's limit word before, `min` in a re-measure); a
//! claimed entry the check refuses is given back untouched
//! ([`KeyedPermits::acquire_within`]). The bitmap is the count, so the check is atomic with
//! the commit: every committed permit was granted with fewer than `floor(L)` others of its key
//! held, `L` the key's limit at most one clock read before. This is stronger than the unkeyed
//! gate's claim-fence-count ([`gate`]), which needs the `SeqCst` fence and can give back
//! transiently; here no fence is needed and nothing is given back but to the cap. A limit that
//! shrinks after the read bites at the next grant, as it does unkeyed (no holder is revoked).
//! A dead holder's entry keeps its bit: it counts against the key until it is taken over
//! (inherited with its bit, no new bit set) by an acquirer at the cap or by the gc.
//!
//! **Reporting.** A release reports its sample into the key's words *while its bit is still
//! set* ([`KeyedPermits::release_reporting`]): by rule 2 the slot cannot change hands before
//! the bit is cleared, so every sample reaches the words of the key that took the permit. The
//! first report after a window is over closes it (per key: each key has its own window start,
//! re-measure of its RTT on the clock's schedule and bound per window, the unkeyed update
//! unchanged), with the key's held bits, ours included, as the in-flight count.
//!
//! **A slot that changes hands.** A key slot is reclaimed by another key only when idle (no bit
//! set), but its three words still hold the old key's learning. They are the new key's only
//! once *adopted*: whoever uses the words of slot `s` for key `k` (an acquirer, before it reads
//! the limit; a releaser, before it records) first checks the owner word; if it is not `k`
//! (and the slot is `k`'s), it stores zero (the fresh state: the initial limit, no RTT, an
//! empty window) into the three words, then CASes the owner word to `k` (Release; the check is
//! an Acquire load). Until an adoption completes, the words are read as fresh (limit word 0).
//! Why this is sound, whatever interleaving or crash:
//!
//! - **The limit is always within `[min, max]`.** The algorithm clamps every limit it reads
//!   from a word ([`Tuning::limit_of`]), and zero is the initial limit; the cap is also
//!   clamped to the block's `max` entries. So no content of the words, stale, zeroed or
//!   damaged, grants more than `max` per key, and none grants more than `floor(L)` of the
//!   limit the words hold.
//! - **A new key starts at the initial limit.** Its first acquirer reads the old owner, zeroes,
//!   adopts; before the owner word says `k`, `k` is granted within the fresh limit.
//! - **A process killed at any instruction leaves nothing that over-admits:** killed before
//!   the owner CAS, the words are the old key's (or partly zeroed), the owner is not `k`, and
//!   the next user zeroes them again; after it, they are zero or `k`'s own later learning.
//! - **The races are harmless:** an adopter that read the old owner and is delayed may zero
//!   the words after another adopted and `k` learned a little: `k` goes back to its initial
//!   limit once (its CAS then fails, the owner being `k` already). An acquirer of the old key
//!   that located the slot before it changed hands may adopt it back for the old key; its
//!   commit CAS then fails on the tag (rule 3) and the next user of the new key adopts again.
//!   Each case is a reset to fresh, never a limit out of range, never a sample of one key in
//!   another key's words (reports are made under the bit).
//!
//! The idle-key reclaim of the table (on demand, or the CLI's `gc`) retires a key whose permits
//! are all released: its learning is dropped with its slot, and it comes back at its initial
//! limit, as a keyed bucket's full bucket or a keyed window's empty window does.

use std::sync::atomic::Ordering;

use super::gate::{self, Closed, Words};
use crate::algo::adaptive::{Outcome, Tuning};
use crate::engine::keys::pair::PairWord;
use crate::engine::keys::template::Template;
use crate::engine::permits::keyed::{KeyAcquire, KeyedPermits};
use crate::engine::permits::slot::OwnerWord;
use crate::error::Result;
use crate::sync::PermitAtomic;

/// Words per key slot: accumulator, limit word, RTT word, owner (the tag they learn for).
pub(crate) const KEY_WORDS: usize = 4;
const ACC: usize = 0;
const LIMIT: usize = 1;
const RTT: usize = 2;
const OWNER: usize = 3;

/// A keyed adaptive limit's permits (a keyed concurrency limit's) and its words per key slot.
pub(crate) struct KeyedGate<'a, P, A> {
    pub(crate) permits: KeyedPermits<'a, P, A>,
    words: &'a [A],
}

impl<'a, P: PairWord, A: PermitAtomic> KeyedGate<'a, P, A> {
    /// Over `permits` and `words`, which must hold [`KEY_WORDS`] per key slot.
    pub(crate) fn new(permits: KeyedPermits<'a, P, A>, words: &'a [A]) -> Self {
        assert!(
            words.len() >= permits.slots() * KEY_WORDS,
            "adaptive words too few"
        );
        KeyedGate { permits, words }
    }

    fn word(&self, slot: usize, i: usize) -> &'a A {
        &self.words[slot * KEY_WORDS + i]
    }

    /// The pooled words of key slot `slot`.
    pub(crate) fn words(&self, slot: usize) -> Words<'a, A> {
        Words {
            acc: self.word(slot, ACC),
            limit: self.word(slot, LIMIT),
            rtt: self.word(slot, RTT),
        }
    }

    /// Make the words of `slot` the key `tag`'s if the slot is its and they are not yet (see
    /// the module docs); true if they are `tag`'s now.
    pub(crate) fn adopt(&self, slot: usize, tag: u64) -> bool {
        let owner = self.word(slot, OWNER);
        // Acquire: pairs with the Release CAS of the adoption, so the zeros (or the key's
        // later words) are what the caller reads next.
        let was = owner.load(Ordering::Acquire);
        if was == tag {
            return true;
        }
        if self.permits.key_pair(slot).0 != tag {
            return false; // not the key's slot (any more): nothing of the key's to adopt
        }
        let w = self.words(slot);
        // Relaxed: published by the CAS below (Release).
        w.acc.store(0, Ordering::Relaxed);
        w.limit.store(0, Ordering::Relaxed);
        w.rtt.store(0, Ordering::Relaxed);
        match owner.compare_exchange(was, tag, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(now) => now == tag,
        }
    }

    /// The limit word of the key `tag` in `slot` (adopting the words first): 0, the fresh
    /// limit, while they are not the key's.
    pub(crate) fn limit_word(&self, slot: usize, tag: u64) -> u64 {
        if !self.adopt(slot, tag) {
            return 0;
        }
        // Acquire: pairs with the AcqRel CAS of the window that set the limit.
        self.word(slot, LIMIT).load(Ordering::Acquire)
    }

    /// The key's limit and RTT words as they are, without adopting: fresh (0, 0) if the
    /// words are another key's.
    pub(crate) fn peek(&self, slot: usize, tag: u64) -> (u64, u64) {
        // Acquire: as in `adopt`.
        if self.word(slot, OWNER).load(Ordering::Acquire) != tag {
            return (0, 0);
        }
        (
            self.word(slot, LIMIT).load(Ordering::Acquire),
            self.word(slot, RTT).load(Ordering::Acquire),
        )
    }

    /// Take a permit of the key `tag` for `me` if fewer than `floor(L)` of the key's are held
    /// (`L` the key's limit at `now_ms`, `min` in a re-measure), checked by the bit's CAS.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire<T: Template>(
        &self,
        t: &T,
        tuning: &Tuning,
        tag: u64,
        me: u64,
        start: usize,
        now_ms: u64,
        now: &mut impl FnMut() -> u64,
        reclaimable: &mut impl FnMut(OwnerWord, Option<u64>) -> bool,
    ) -> Result<KeyAcquire> {
        let mut cap = |slot: usize| {
            let word = self.limit_word(slot, tag);
            tuning.allowed(word, now_ms).min(u32::MAX as u64) as u32
        };
        self.permits
            .acquire_within(t, tag, me, start, now, reclaimable, &mut cap)
    }

    /// Release the permit of entry `entry` of `slot` held with `word`, reporting `sample`
    /// (outcome, latency µs) into the key's words before its bit is cleared, and closing the
    /// key's window if it is over. Returns whether it was held, and the window it closed.
    pub(crate) fn release(
        &self,
        tuning: &Tuning,
        slot: usize,
        entry: usize,
        word: OwnerWord,
        sample: Option<(Outcome, u64)>,
        now_ms: impl FnMut() -> u64,
    ) -> (bool, Option<Closed>) {
        let mut closed = None;
        let held = self
            .permits
            .release_reporting(slot, entry, word, |(tag, state)| {
                let Some((outcome, rtt_us)) = sample.filter(|s| s.0 != Outcome::Dropped) else {
                    return;
                };
                // Our bit is set: the slot is our key's (rule 2), `tag` is our key.
                if !self.adopt(slot, tag) {
                    return;
                }
                let w = self.words(slot);
                gate::record(w.acc, outcome, rtt_us);
                // Our permit is still counted in `state`: it was in flight through the window.
                let in_flight = self.permits.held_bits(state).count_ones() as u64;
                closed = gate::close_window(&w, tuning, now_ms, || in_flight);
            });
        (held, closed)
    }
}
