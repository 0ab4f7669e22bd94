//! The lock-free open-addressing key table: lookup, claim, duplicate retirement, decisions,
//! refunds, idle reclaim and retuning, over any [`PairWord`] slots and any [`Template`].
//!
//! See the [module docs](super) for the algorithm and why it is correct; the comments here
//! name the step of that argument each check implements.

use super::pair::PairWord;
use super::template::Template;
use crate::algo::{Decision, Step};
use crate::error::Result;

/// Tag of a slot never used since the table was created or reset.
pub(crate) const EMPTY: u64 = 0;
/// Tag of a retired slot: occupied for probing, free for a claim.
pub(crate) const TOMB: u64 = u64::MAX;
/// Slots probed from a key's home slot.
pub(crate) const MAX_PROBE: usize = 32;

/// The table tag of a key hash: the hash itself, with the two reserved values moved aside.
#[inline(always)]
pub(crate) fn tag_of(hash: u64) -> u64 {
    match hash {
        EMPTY => 1,
        TOMB => TOMB - 1,
        h => h,
    }
}

/// What a decision on the table came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The template decided (admitted or denied) on the key's state.
    Decided(Decision),
    /// The key has no slot and none can be claimed in its probe window; a slot there becomes
    /// reclaimable in `fresh_in_ns` at the earliest.
    Full { fresh_in_ns: u64 },
}

/// A key table: `slots.len()` is a power of two.
pub(crate) struct Table<'a, P> {
    slots: &'a [P],
    mask: usize,
    probe: usize,
}

/// What one scan of a probe window found first.
enum Scan {
    /// The key, at this position.
    Key(usize, (u64, u64)),
    /// An empty slot (the key is nowhere further: slots never become empty).
    Empty(usize, (u64, u64)),
    /// Neither, in the whole window.
    Exhausted,
    /// The key in two slots (a claim through a free slot raced another): retire one first.
    Duplicate,
}

impl<'a, P: PairWord> Table<'a, P> {
    /// A table over `slots` (a power of two in number, at least one).
    pub(crate) fn new(slots: &'a [P]) -> Table<'a, P> {
        debug_assert!(slots.len().is_power_of_two());
        Table {
            slots,
            mask: slots.len() - 1,
            probe: MAX_PROBE.min(slots.len()),
        }
    }

    #[inline(always)]
    fn at(&self, tag: u64, i: usize) -> usize {
        (tag as usize).wrapping_add(i) & self.mask
    }

    /// Scan `tag`'s window in probe order up to the key or an empty slot, keeping every pair
    /// passed in `seen` if given.
    #[inline(always)]
    fn scan(&self, tag: u64, mut seen: Option<&mut [(u64, u64); MAX_PROBE]>) -> Scan {
        for i in 0..self.probe {
            let at = self.at(tag, i);
            let pair = self.slots[at].load();
            if pair.0 == tag {
                // A second slot for the key can only have been claimed through a free slot, in
                // a window that had no empty slot then (empty slots never come back): look on up
                // to the first empty slot, so no decision is made on one of two slots.
                for j in i + 1..self.probe {
                    let next = self.slots[self.at(tag, j)].load();
                    if next.0 == tag {
                        return Scan::Duplicate;
                    }
                    if next.0 == EMPTY {
                        break;
                    }
                }
                return Scan::Key(at, pair);
            }
            if pair.0 == EMPTY {
                return Scan::Empty(at, pair);
            }
            if let Some(seen) = seen.as_deref_mut() {
                seen[i] = pair;
            }
        }
        Scan::Exhausted
    }

    /// Decide `cost` for the key `tag`: find its slot (or claim one, when committing) and apply
    /// the template with one CAS loop on the slot. With `commit == false` nothing is written.
    /// `now` is read once per attempt.
    pub(crate) fn decide<T: Template>(
        &self,
        t: &T,
        tag: u64,
        cost: u64,
        commit: bool,
        now: &mut impl FnMut() -> u64,
    ) -> Result<Outcome> {
        'probe: loop {
            let found = self.scan(tag, None);
            // The clock is read after the pairs: a decision is never dated earlier than the
            // clock read of any write it saw (a reclaim judged a word fresh at that time).
            let mut time = now();
            match found {
                Scan::Key(at, (_, mut state)) => loop {
                    // The pair was read whole: `state` is this key's, whatever it decides.
                    let (new, decision) = match t.step(time, state, cost)? {
                        Step::Deny(d) => return Ok(Outcome::Decided(d)),
                        Step::Admit { new, decision } => (new, decision),
                    };
                    if !commit {
                        return Ok(Outcome::Decided(decision));
                    }
                    match self.slots[at].cas((tag, state), (tag, new)) {
                        Ok(()) => return Ok(Outcome::Decided(decision)),
                        // Another decision on this key landed first: decide again on its word.
                        Err((found, s)) if found == tag => {
                            state = s;
                            time = now();
                        }
                        // The slot was reclaimed or retired: the key is elsewhere or nowhere.
                        Err(_) => continue 'probe,
                    }
                },
                Scan::Empty(at, pair) => {
                    // A new key: claim the empty slot with the admission in the same CAS.
                    match self.claim(t, tag, cost, commit, time, at, pair)? {
                        Some(decision) => return Ok(Outcome::Decided(decision)),
                        // Someone claimed it first (perhaps for this key): look again.
                        None => continue 'probe,
                    }
                }
                Scan::Exhausted => {
                    if let Some(outcome) = self.claim_free(t, tag, cost, commit, now)? {
                        return Ok(outcome);
                    }
                }
                Scan::Duplicate => self.retire_duplicates(t, tag, time)?,
            }
        }
    }

    /// The window has no slot for the key and no empty one: claim its first retired or idle
    /// (fresh) slot, keeping the fresh word, or report the table full. `None`: the window
    /// changed meanwhile; decide again.
    #[inline(never)]
    fn claim_free<T: Template>(
        &self,
        t: &T,
        tag: u64,
        cost: u64,
        commit: bool,
        now: &mut impl FnMut() -> u64,
    ) -> Result<Option<Outcome>> {
        let mut seen = [(0, 0); MAX_PROBE];
        if !matches!(self.scan(tag, Some(&mut seen)), Scan::Exhausted) {
            return Ok(None);
        }
        // After the pairs, as in `decide`.
        let time = now();
        let window = &seen[..self.probe];
        let Some(i) = window
            .iter()
            .position(|&(tg, s)| tg == TOMB || t.is_fresh(time, s))
        else {
            let fresh_in_ns = window
                .iter()
                .map(|&(_, s)| t.fresh_in(time, s))
                .min()
                .unwrap_or(0);
            return Ok(Some(Outcome::Full { fresh_in_ns }));
        };
        if !commit {
            // A peek decides on the free slot's fresh word and claims nothing.
            return Ok(Some(Outcome::Decided(
                match t.step(time, window[i].1, cost)? {
                    Step::Deny(d) => d,
                    Step::Admit { decision, .. } => decision,
                },
            )));
        }
        // Claim the slot with its fresh word, atomic with the freshness seen: an update of the
        // old key either landed before (this CAS fails: its state changed) or fails after (its
        // tag changed). The claim admits nothing: two such claims for one key can pick different
        // slots, so the duplicate is merged and retired before any decision is made on either
        // (every scan that sees both retires one first).
        if self.slots[self.at(tag, i)]
            .cas(window[i], (tag, window[i].1))
            .is_ok()
        {
            self.retire_duplicates(t, tag, time)?;
        }
        Ok(None)
    }

    /// Decide on the fresh word of the free slot `at` (found holding `pair`) and, if admitted and
    /// committing, claim it for `tag` with the new word in one CAS. `None`: the slot changed.
    /// A denial claims nothing; the word stays fresh, the slot free.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn claim<T: Template>(
        &self,
        t: &T,
        tag: u64,
        cost: u64,
        commit: bool,
        time: u64,
        at: usize,
        pair: (u64, u64),
    ) -> Result<Option<Decision>> {
        let (new, decision) = match t.step(time, pair.1, cost)? {
            Step::Deny(d) => return Ok(Some(d)),
            Step::Admit { new, decision } => (new, decision),
        };
        if !commit {
            return Ok(Some(decision));
        }
        // The admission makes the word not fresh, so the slot cannot be taken back from this key
        // before its next decision.
        Ok(self.slots[at].cas(pair, (tag, new)).ok().map(|()| decision))
    }

    /// Until `tag` is in at most one slot of its window: merge the charges of its second slot
    /// into its first, then retire the second. `now` may be stale: merges are then stricter.
    pub(crate) fn retire_duplicates<T: Template>(&self, t: &T, tag: u64, now: u64) -> Result<()> {
        loop {
            let mut first = None;
            let mut second = None;
            for i in 0..self.probe {
                let at = self.at(tag, i);
                let pair = self.slots[at].load();
                if pair.0 == tag {
                    if first.is_none() {
                        first = Some((at, pair));
                    } else {
                        second = Some((at, pair));
                        break;
                    }
                }
            }
            let (Some((a, pa)), Some((b, pb))) = (first, second) else {
                return Ok(());
            };
            // Charge the first slot with the second's admissions first, so that no admission is
            // ever out of the table; then retire the second if it still holds what was merged.
            let merged = t.merge(now, pa.1, pb.1)?;
            if self.slots[a].cas(pa, (tag, merged)).is_err() {
                continue;
            }
            // If this fails the second slot changed (a decision that raced the claim landed in
            // it): the next round merges it again, counting its old charges twice (stricter).
            let _ = self.slots[b].cas(pb, (TOMB, t.blank(pb.1)));
        }
    }

    /// Give back `units` of `grant` to the key `tag`, if it still has a slot.
    pub(crate) fn refund<T: Template>(
        &self,
        t: &T,
        tag: u64,
        grant: &Decision,
        units: u64,
        now: &mut impl FnMut() -> u64,
    ) -> Result<()> {
        'probe: loop {
            let Scan::Key(at, (_, mut state)) = self.scan(tag, None) else {
                // No slot: the key's state was fresh when it was reclaimed; nothing is held.
                return Ok(());
            };
            loop {
                let new = t.refund(now(), state, grant, units)?;
                if new == state {
                    return Ok(());
                }
                match self.slots[at].cas((tag, state), (tag, new)) {
                    Ok(()) => return Ok(()),
                    Err((found, s)) if found == tag => state = s,
                    Err(_) => continue 'probe,
                }
            }
        }
    }

    /// Retire every key whose state is fresh at `now()`, then merge any duplicate left behind
    /// (by a process killed between a claim and its duplicate scan). Returns the keys retired.
    pub(crate) fn reclaim_idle<T: Template>(
        &self,
        t: &T,
        now: &mut impl FnMut() -> u64,
    ) -> Result<usize> {
        let mut retired = 0;
        for slot in self.slots {
            let mut pair = slot.load();
            while pair.0 != EMPTY && pair.0 != TOMB && t.is_fresh(now(), pair.1) {
                match slot.cas(pair, (TOMB, t.blank(pair.1))) {
                    Ok(()) => {
                        retired += 1;
                        break;
                    }
                    Err(found) => pair = found,
                }
            }
        }
        for at in 0..self.slots.len() {
            let (tag, _) = self.slots[at].load();
            if tag == EMPTY || tag == TOMB {
                continue;
            }
            // Is the key also in an earlier slot of its window?
            let offset = at.wrapping_sub(tag as usize) & self.mask;
            if offset < self.probe
                && (0..offset).any(|i| self.slots[self.at(tag, i)].load().0 == tag)
            {
                self.retire_duplicates(t, tag, now())?;
            }
        }
        Ok(retired)
    }

    /// Replace every slot's state `s` by `f(s)` where it is `Some`, each with a CAS loop (for a
    /// live retune: empty and retired slots included, so claims inherit retuned words).
    pub(crate) fn update_states(&self, mut f: impl FnMut(u64) -> Option<u64>) {
        for slot in self.slots {
            let mut pair = slot.load();
            while let Some(new) = f(pair.1) {
                match slot.cas(pair, (pair.0, new)) {
                    Ok(()) => break,
                    Err(found) => pair = found,
                }
            }
        }
    }

    /// Slots holding a key.
    pub(crate) fn occupancy(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s.load().0, EMPTY | TOMB))
            .count()
    }
}
