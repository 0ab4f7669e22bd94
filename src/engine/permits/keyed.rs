//! Keyed concurrency: at most `C` permits held at once per key, over the key table of
//! [`crate::engine::keyed`] and one block of permit entries per key slot.
//!
//! # Implementation details
//!
//! A keyed concurrency limit has a key table like any keyed limit (16-byte slots `(tag, state)`,
//! looked up, claimed and reclaimed as the [keyed module](crate::engine::keyed) describes), and, for each
//! key slot, a block of `C` permit entries exactly like an unkeyed limit's (see [`slot`]: an
//! owner word naming the holder's pid, start time and a generation, and a stamp word). The key
//! slot's state word is a bitmap: **bit `i` is set while entry `i` of the slot's block holds a
//! committed permit of the slot's key**. Bits `C..64` are never set (a damaged word that has them
//! is never idle, which only keeps its slot).
//!
//! Three rules make it work:
//!
//! 1. **Only the holder of entry `i` changes bit `i`.** Entries are taken by a CAS on their
//!    owner word (claim, take over), so at most one process holds one at a time.
//! 2. **A key slot changes hands only with no bit set.** Its state `0` is its only fresh state,
//!    and every reclaim of a key slot (another key's claim, the idle-key pass) is one CAS from an
//!    idle pair. So a set bit pins its slot to its key.
//! 3. **A bit is set by a CAS on the key slot that expects the key's tag.** So a permit is
//!    committed atomically with the slot being its key's.
//!
//! The number of a key's permits held is the number of bits set in its live slot, and a key has
//! at most one live slot at any instant (the keyed module's invariant 2), so **at most `C`
//! permits of a key are held at once**, whatever the table does meanwhile.
//!
//! | step | what | rule it keeps |
//! |---|---|---|
//! | acquire | find (or claim) the key's live slot; take a free entry of its block by a CAS on the owner word; set its bit by a CAS `(tag, s) -> (tag, s \| bit)`; check the entry is still ours | 1, 3 |
//! | acquire, slot moved | the tag CAS sees another key (the slot was idle and taken): give the entry back untouched and look again | 1 |
//! | release | bump the entry's generation (so its stamp no longer matches and no lease can take it over), clear the bit, free the entry | 1 |
//! | take over | an entry held by a process that is gone, or past its lease, is taken by a CAS on its owner word; its bit is then set already (the dead holder committed: the permit is inherited) or is set as in acquire | 1, 3 |
//!
//! An acquirer whose entry is taken over (its lease expired) between its claim and its bit
//! sees it in the final check and does not count the permit as its own; the process that took
//! the entry holds it and its bit. A holder killed at any instruction leaves an entry held by a
//! dead owner, with its bit set or not: the next acquirer of that key that finds no free entry
//! (or [`crate::Limit::reclaim_dead_permits`]) takes it over, exactly as for an unkeyed limit.
//! An acquirer killed between claiming an entry and setting its bit leaves an entry without a
//! bit: it blocks nothing but that entry, and only until it is taken over.

use super::slot::{self, OwnerWord, PermitAtomic, Table as Block, ENTRY_WORDS};
use crate::engine::keys::pair::PairWord;
use crate::engine::keys::table::{Located, Table, EMPTY, PENDING};
use crate::engine::keys::template::Template;
use crate::error::Result;

/// What an acquisition for a key came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyAcquire {
    /// A permit: entry `entry` of key slot `slot`, held with owner word `word`.
    Held {
        slot: usize,
        entry: usize,
        word: OwnerWord,
    },
    /// All of the key's permits are held (none by a process that is gone, nor past a lease);
    /// for a keyed adaptive limit, as many as the key's limit grants now.
    AllHeld,
    /// The key has no slot and none can be claimed in its window; one turns free in this long
    /// at the earliest (`u64::MAX`: unknown).
    Full { fresh_in_ns: u64 },
}

/// What committing a claimed entry came to.
enum Commit {
    Held,
    /// The slot is another key's now: the entry was given back.
    Moved,
    /// The entry was taken over (its lease expired) before the commit was checked.
    Lost,
    /// The key holds as many permits as it may now (a keyed adaptive limit's cap): the entry
    /// was given back.
    AtCap,
}

/// The key table of a keyed concurrency limit and its permit blocks.
pub(crate) struct KeyedPermits<'a, P, A> {
    keys: Table<'a, P>,
    entries: &'a [A],
    permits: usize,
    /// Whether permits can be taken over from live holders (a lease): releases then pin.
    leased: bool,
}

/// The clock of the key table's lookups: a key's permit state is fresh exactly when no bit is
/// set, whatever the time, so lookups need no clock read.
fn no_clock() -> u64 {
    0
}

impl<'a, P: PairWord, A: PermitAtomic> KeyedPermits<'a, P, A> {
    /// Over `keys` (a power of two in number) and `entries`, which must hold `permits` entries
    /// per key slot.
    pub(crate) fn new(keys: &'a [P], entries: &'a [A], permits: usize) -> Self {
        assert!(
            (1..=64).contains(&permits) && entries.len() >= keys.len() * permits * ENTRY_WORDS,
            "permit blocks too small"
        );
        KeyedPermits {
            keys: Table::new(keys),
            entries,
            permits,
            leased: true,
        }
    }

    /// Declare whether the limit has a lease. Without one, no live holder's entry is ever
    /// taken over, so a release need not pin its entry first (one CAS less).
    pub(crate) fn leased(mut self, leased: bool) -> Self {
        self.leased = leased;
        self
    }

    /// Permits per key.
    pub(crate) fn permits(&self) -> usize {
        self.permits
    }

    /// Key slots.
    pub(crate) fn slots(&self) -> usize {
        self.keys.len()
    }

    /// The block of permit entries of key slot `slot`.
    pub(crate) fn block(&self, slot: usize) -> Block<'a, A> {
        let words = self.permits * ENTRY_WORDS;
        Block::new(
            &self.entries[slot * words..(slot + 1) * words],
            self.permits,
        )
    }

    /// Key slot `slot`'s pair, read whole.
    pub(crate) fn key_pair(&self, slot: usize) -> (u64, u64) {
        self.keys.load(slot)
    }

    /// The bits of committed permits in a state word (bits `C..64` never count).
    pub(crate) fn held_bits(&self, state: u64) -> u64 {
        state & (u64::MAX >> (64 - self.permits))
    }

    /// Take a permit of the key `tag` for `me` (an owner identity): a free entry of its block,
    /// else one whose holder `reclaimable` judges gone (or past its lease). `start` spreads
    /// processes over the entries; `now` dates the stamps.
    pub(crate) fn acquire<T: Template>(
        &self,
        t: &T,
        tag: u64,
        me: u64,
        start: usize,
        now: &mut impl FnMut() -> u64,
        reclaimable: &mut impl FnMut(OwnerWord, Option<u64>) -> bool,
    ) -> Result<KeyAcquire> {
        let all = self.permits as u32;
        self.acquire_within(t, tag, me, start, now, reclaimable, &mut |_| all)
    }

    /// [`KeyedPermits::acquire`] within a cap per key slot: `cap(slot)` is how many permits the
    /// key of `slot` may hold now (at most `C`; a keyed adaptive limit's current limit, see
    /// [`crate::engine::adaptive::keyed`]). The bit of a permit is set only by a CAS from a
    /// state with fewer than `cap` bits set, so the cap is checked atomically with the commit;
    /// an entry claimed over the cap is given back. With `cap = C` this is exactly `acquire`
    /// (an entry is claimable only while fewer than `C` bits are set).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_within<T: Template>(
        &self,
        t: &T,
        tag: u64,
        me: u64,
        start: usize,
        now: &mut impl FnMut() -> u64,
        reclaimable: &mut impl FnMut(OwnerWord, Option<u64>) -> bool,
        cap: &mut impl FnMut(usize) -> u32,
    ) -> Result<KeyAcquire> {
        loop {
            let (slot, state) = match self.keys.locate(t, tag, true, &mut no_clock)?.0 {
                Located::Live(at, pair) => (at, pair.1),
                // A new key: make the empty slot its live slot (holding no permit), then take
                // a permit as from any slot.
                Located::Empty(at, pair) => {
                    let _ = self.keys.cas(at, pair, (tag, pair.1));
                    continue;
                }
                Located::Full { fresh_in_ns } => return Ok(KeyAcquire::Full { fresh_in_ns }),
                // An inserting lookup never reports a key as absent.
                Located::Absent(_) => continue,
            };
            let cap = cap(slot).min(self.permits as u32);
            let block = self.block(slot);
            let start = start % self.permits;
            // At the cap, no free entry is claimed (the commit would give it back): only a
            // reclaimable holder's entry, whose bit may already be set (inherited).
            let at_cap = self.held_bits(state).count_ones() >= cap;
            let claimed = if at_cap {
                None
            } else {
                block.claim(start, me, &mut *now)
            };
            let taken = claimed.or_else(|| {
                block
                    .sweep(start, Some(me), false, &mut *reclaimable, &mut *now)
                    .pop()
            });
            let Some((entry, word)) = taken else {
                if self.keys.load(slot).0 != tag {
                    continue; // the slot changed hands while we looked: look again
                }
                return Ok(KeyAcquire::AllHeld);
            };
            match self.commit(slot, tag, entry, word, cap) {
                Commit::Held => return Ok(KeyAcquire::Held { slot, entry, word }),
                Commit::AtCap => return Ok(KeyAcquire::AllHeld),
                Commit::Moved | Commit::Lost => continue,
            }
        }
    }

    /// Set bit `entry` of key slot `slot` for the key `tag`, whose entry this process holds
    /// with `word` (claimed or taken over), if fewer than `cap` bits are set; then check the
    /// entry is still ours.
    fn commit(&self, slot: usize, tag: u64, entry: usize, word: OwnerWord, cap: u32) -> Commit {
        let bit = 1u64 << entry;
        let block = self.block(slot);
        loop {
            let pair = self.keys.load(slot);
            if pair.0 != tag {
                // The slot was idle (no bit set: rule 2) and changed hands, or holds a claim:
                // our entry holds no permit of anyone's. Give it back untouched.
                block.release(entry, word);
                return Commit::Moved;
            }
            if pair.1 & bit != 0 {
                // Set already: the holder this entry was taken over from had committed it.
                break;
            }
            if self.held_bits(pair.1).count_ones() >= cap {
                // The cap, checked on the very state the CAS would replace: the entry holds
                // no permit, give it back untouched.
                block.release(entry, word);
                return Commit::AtCap;
            }
            // Rule 3: the bit is set only while the slot is the key's.
            if self.keys.cas(slot, pair, (tag, pair.1 | bit)).is_ok() {
                break;
            }
        }
        // Taken over between the claim and now (its lease expired): the taker holds the entry
        // and the bit; this acquisition holds nothing.
        if block.read(entry).0 != word {
            return Commit::Lost;
        }
        Commit::Held
    }

    /// Release the permit of entry `entry` of key slot `slot` that this process holds with
    /// `word`. False if it was no longer held (taken over after its lease, or reset).
    pub(crate) fn release(&self, slot: usize, entry: usize, word: OwnerWord) -> bool {
        self.release_reporting(slot, entry, word, |_| {})
    }

    /// [`KeyedPermits::release`], calling `report` with the key slot's pair `(tag, state)` while
    /// the permit's bit is still set (so the slot is still the key's, rule 2), before clearing it.
    /// `report` is not called for a permit no longer held.
    pub(crate) fn release_reporting(
        &self,
        slot: usize,
        entry: usize,
        word: OwnerWord,
        report: impl FnOnce((u64, u64)),
    ) -> bool {
        let block = self.block(slot);
        let held = if self.leased {
            // Pin the entry: a new generation makes its stamp stale, so no lease take-over can
            // judge it while the bit is cleared (a take-over from a dead owner still can).
            match block.replace(entry, word, Some(word.owner())) {
                Some(pinned) => pinned,
                None => return false,
            }
        } else {
            // Without a lease only a dead holder's entry is taken over: while we live, the
            // entry and its bit stay ours.
            if block.read(entry).0 != word {
                return false;
            }
            word
        };
        report(self.keys.load(slot));
        self.clear_bit(slot, entry);
        block.release(entry, held)
    }

    /// Clear bit `entry` of key slot `slot` (rule 1: the caller holds the entry).
    fn clear_bit(&self, slot: usize, entry: usize) {
        let bit = 1u64 << entry;
        loop {
            let pair = self.keys.load(slot);
            if pair.1 & bit == 0 || self.keys.cas(slot, pair, (pair.0, pair.1 & !bit)).is_ok() {
                return;
            }
        }
    }

    /// Free every entry whose holder `reclaimable` judges gone or past its lease, in every
    /// block: take it over for `me`, clear its bit, free it. Returns how many.
    pub(crate) fn reclaim(
        &self,
        me: u64,
        now: &mut impl FnMut() -> u64,
        reclaimable: &mut impl FnMut(OwnerWord, Option<u64>) -> bool,
    ) -> usize {
        let mut freed = 0;
        for slot in 0..self.slots() {
            let block = self.block(slot);
            for (entry, word) in block.sweep(0, Some(me), true, &mut *reclaimable, &mut *now) {
                self.clear_bit(slot, entry);
                freed += block.release(entry, word) as usize;
            }
        }
        freed
    }

    /// The live slot of the key `tag` and its pair, if it has one (inserting nothing).
    pub(crate) fn live_slot<T: Template>(
        &self,
        t: &T,
        tag: u64,
    ) -> Result<Option<(usize, (u64, u64))>> {
        Ok(match self.keys.locate(t, tag, false, &mut no_clock)?.0 {
            Located::Live(at, pair) => Some((at, pair)),
            _ => None,
        })
    }

    /// Committed permits of the key `tag` now: the bits set in its live slot (0 without one).
    pub(crate) fn held<T: Template>(&self, t: &T, tag: u64) -> Result<u32> {
        Ok(match self.keys.locate(t, tag, false, &mut no_clock)?.0 {
            Located::Live(_, (_, state)) => self.held_bits(state).count_ones(),
            _ => 0,
        })
    }

    /// Every committed permit: (key slot, entry, owner word, acquired at ns), with the slot's
    /// tag as the key's name. Only live keys' slots: an empty, retired or pending slot's state
    /// word is no permit bitmap (a pending claim's is a nonce).
    pub(crate) fn holders(&self) -> Vec<(u64, usize, OwnerWord, Option<u64>)> {
        let mut out = Vec::new();
        for s in 0..self.slots() {
            let (tag, state) = self.keys.load(s);
            if tag == EMPTY || tag & PENDING != 0 {
                continue;
            }
            let bits = self.held_bits(state);
            if bits == 0 {
                continue;
            }
            let block = self.block(s);
            for entry in (0..self.permits).filter(|e| bits & (1 << e) != 0) {
                let (word, stamp) = block.read(entry);
                if !word.is_free() {
                    out.push((
                        tag,
                        s * self.permits + entry,
                        word,
                        slot::stamped_since(word, stamp),
                    ));
                }
            }
        }
        out
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::engine::keys::pair::KeySlot;
    use crate::engine::keys::template::Pure;

    #[repr(C, align(16))]
    struct Words(Vec<[AtomicU64; 2]>);

    fn words(n: usize) -> Words {
        Words(
            (0..n)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        )
    }

    fn flat(w: &Words) -> &[AtomicU64] {
        // SAFETY: `[AtomicU64; 2]` is two contiguous atomics; the Vec's buffer holds `len` of them.
        unsafe { std::slice::from_raw_parts(w.0.as_ptr().cast::<AtomicU64>(), w.0.len() * 2) }
    }

    const ME: u64 = 0x1234;
    const DEAD: u64 = 0x5678;

    #[test]
    fn a_key_holds_at_most_c_and_gets_them_back_on_release() {
        let keys = words(4);
        let entries = words(4 * 3);
        let slots = KeySlot::table(flat(&keys)).expect("aligned, cmpxchg16b");
        let kp = KeyedPermits::new(slots, flat(&entries), 3);
        let t = Pure::Permits;
        let mut now = || 5_000_000;
        let mut never = |_: OwnerWord, _: Option<u64>| false;
        let mut held = Vec::new();
        for i in 0..3 {
            match kp.acquire(&t, 7, ME, i, &mut now, &mut never).unwrap() {
                KeyAcquire::Held { slot, entry, word } => held.push((slot, entry, word)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(kp.held(&t, 7).unwrap(), 3);
        assert_eq!(
            kp.acquire(&t, 7, ME, 0, &mut now, &mut never).unwrap(),
            KeyAcquire::AllHeld
        );
        // Another key has its own three.
        assert!(matches!(
            kp.acquire(&t, 9, ME, 0, &mut now, &mut never).unwrap(),
            KeyAcquire::Held { .. }
        ));
        let (slot, entry, word) = held.pop().unwrap();
        assert!(kp.release(slot, entry, word));
        assert!(!kp.release(slot, entry, word), "only once");
        assert_eq!(kp.held(&t, 7).unwrap(), 2);
        assert!(matches!(
            kp.acquire(&t, 7, ME, 0, &mut now, &mut never).unwrap(),
            KeyAcquire::Held { .. }
        ));
        assert_eq!(kp.holders().len(), 4);
    }

    /// A slot pending for another key holds a nonce where a live key's holds its permit
    /// bitmap: `holders` reports no permit from it, even while an owner word of its block is
    /// still set.
    #[test]
    fn holders_come_from_live_keys_only() {
        use std::sync::atomic::Ordering;
        let keys = words(2);
        let entries = words(2);
        let slots = KeySlot::table(flat(&keys)).expect("aligned, cmpxchg16b");
        let kp = KeyedPermits::new(slots, flat(&entries), 1);
        let t = Pure::Permits;
        let mut now = || 1_000_000;
        let mut never = |_: OwnerWord, _: Option<u64>| false;
        let KeyAcquire::Held { slot, .. } = kp.acquire(&t, 3, ME, 0, &mut now, &mut never).unwrap()
        else {
            panic!("a free permit");
        };
        assert_eq!(kp.holders().len(), 1);
        // The slot as a pending claim of key 5 leaves it: its state word is a nonce with bit 0
        // set; the block's owner word is untouched.
        let raw = flat(&keys);
        raw[2 * slot].store(5 | PENDING, Ordering::SeqCst);
        raw[2 * slot + 1].store(1, Ordering::SeqCst);
        assert_eq!(kp.holders().len(), 0);
    }

    #[test]
    fn a_dead_holders_permit_is_inherited_with_its_bit() {
        let keys = words(2);
        let entries = words(2);
        let slots = KeySlot::table(flat(&keys)).expect("aligned, cmpxchg16b");
        let kp = KeyedPermits::new(slots, flat(&entries), 1);
        let t = Pure::Permits;
        let mut now = || 1_000_000;
        let mut never = |_: OwnerWord, _: Option<u64>| false;
        let KeyAcquire::Held { slot, .. } =
            kp.acquire(&t, 3, DEAD, 0, &mut now, &mut never).unwrap()
        else {
            panic!("a free permit");
        };
        assert_eq!(
            kp.acquire(&t, 3, ME, 0, &mut now, &mut never).unwrap(),
            KeyAcquire::AllHeld
        );
        let mut dead = |w: OwnerWord, _: Option<u64>| w.owner() == DEAD;
        let got = kp.acquire(&t, 3, ME, 0, &mut now, &mut dead).unwrap();
        let KeyAcquire::Held { entry, word, .. } = got else {
            panic!("{got:?}");
        };
        assert_eq!(word.owner(), ME);
        assert_eq!(
            kp.key_pair(slot).1,
            1,
            "the bit stayed set: one permit, now ours"
        );
        assert!(kp.release(slot, entry, word));
        assert_eq!(kp.key_pair(slot), (3, 0), "released: the key is idle");
        // An idle key's slot goes to another key; the first key comes back elsewhere.
        assert!(matches!(
            kp.acquire(&t, 5, ME, 0, &mut now, &mut never).unwrap(),
            KeyAcquire::Held { .. }
        ));
    }

    #[test]
    fn gc_frees_dead_holders_entries_and_bits() {
        let keys = words(2);
        let entries = words(2 * 2);
        let slots = KeySlot::table(flat(&keys)).expect("aligned, cmpxchg16b");
        let kp = KeyedPermits::new(slots, flat(&entries), 2);
        let t = Pure::Permits;
        let mut now = || 1_000_000;
        let mut never = |_: OwnerWord, _: Option<u64>| false;
        for owner in [DEAD, ME] {
            assert!(matches!(
                kp.acquire(&t, 4, owner, 0, &mut now, &mut never).unwrap(),
                KeyAcquire::Held { .. }
            ));
        }
        let mut dead = |w: OwnerWord, _: Option<u64>| w.owner() == DEAD;
        assert_eq!(kp.reclaim(0x9999, &mut now, &mut dead), 1);
        assert_eq!(kp.held(&t, 4).unwrap(), 1);
        assert_eq!(kp.holders().len(), 1);
        assert_eq!(kp.holders()[0].2.owner(), ME);
    }
}
