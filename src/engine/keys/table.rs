//! The lock-free open-addressing key table: lookup, claims (direct into an empty slot, or
//! pending through a free one and then validated), decisions, refunds, idle reclaim and
//! retuning, over any [`PairWord`] slots and any [`Template`].
//!
//! See the [module docs](super) for the algorithm and why it is correct; the comments here
//! name the step of that argument each check implements.

use super::pair::PairWord;
use super::template::Template;
use crate::algo::{Decision, Step};
use crate::error::Result;

/// Tag of a slot never used since the table was created or reset.
pub(crate) const EMPTY: u64 = crate::file::layout::KEY_EMPTY;
/// Tag of a retired slot: occupied for probing, free for a claim.
pub(crate) const TOMB: u64 = u64::MAX;
/// Bit 63 of a tag word: the slot is claimed for the key but not validated yet. Live tags
/// never have it.
pub(crate) const PENDING: u64 = 1 << 63;
/// Slots probed from a key's home slot.
pub(crate) const MAX_PROBE: usize = 32;

/// The live table tag of a key hash: its low 63 bits, with the values that would read as an
/// empty slot (0) or whose pending form would read as a retired one (`2^63 - 1`) moved aside.
#[inline(always)]
pub(crate) fn tag_of(hash: u64) -> u64 {
    match hash & !PENDING {
        EMPTY => 1,
        h if h == !PENDING => h - 1,
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

/// Where a key's state is, as [`Table::locate`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Located {
    /// The key's live slot, at this index, holding this pair when read.
    Live(usize, (u64, u64)),
    /// No slot for the key; this empty slot is where it goes (claimed with its first write).
    Empty(usize, (u64, u64)),
    /// No slot for the key and none to claim; a slot of its window turns free in this long.
    Full { fresh_in_ns: u64 },
    /// Only for lookups that do not insert: the key has no live slot; this is the fresh state
    /// it would start from.
    Absent(u64),
}

/// A key table: `slots.len()` is a power of two.
pub(crate) struct Table<'a, P> {
    slots: &'a [P],
    mask: usize,
    probe: usize,
}

/// What one scan of a probe window found first.
enum Scan {
    /// The key's live slot, at this index.
    Live(usize, (u64, u64)),
    /// An empty slot (the key is nowhere further: slots never become empty).
    Empty(usize, (u64, u64)),
    /// Neither, in the whole window.
    Exhausted,
}

/// A number no other pending claim holds: this process's pid and a per-process count (below
/// bit 62, so a bucket's parameter-slot tag in bit 63 never collides with it).
fn claim_nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CLAIMS: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only distinct values are needed.
    let n = CLAIMS.fetch_add(1, Ordering::Relaxed) & ((1 << 40) - 1);
    ((std::process::id() as u64 & ((1 << 22) - 1)) << 40) | n
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

    /// The number of slots.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The pair in slot `at`, read whole.
    #[inline(always)]
    pub(crate) fn load(&self, at: usize) -> (u64, u64) {
        self.slots[at].load()
    }

    /// Replace slot `at`'s pair by `new` if it is `current` (sequentially consistent);
    /// otherwise return what it is.
    #[inline(always)]
    pub(crate) fn cas(
        &self,
        at: usize,
        current: (u64, u64),
        new: (u64, u64),
    ) -> Result<(), (u64, u64)> {
        self.slots[at].cas(current, new)
    }

    #[inline(always)]
    fn at(&self, tag: u64, i: usize) -> usize {
        (tag as usize).wrapping_add(i) & self.mask
    }

    /// Scan `tag`'s window in probe order up to the key's live slot or an empty slot, keeping
    /// every pair passed in `seen` if given. Pending claims (the key's too) are passed over:
    /// only their claimers make them live.
    #[inline(always)]
    fn scan(&self, tag: u64, mut seen: Option<&mut [(u64, u64); MAX_PROBE]>) -> Scan {
        for i in 0..self.probe {
            let at = self.at(tag, i);
            let pair = self.slots[at].load();
            // At most one live slot per key exists at any instant (module docs, "Claims"): the
            // first one found is the key's.
            if pair.0 == tag {
                return Scan::Live(at, pair);
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

    /// Find the key `tag`'s live slot; when `insert`, claim one through a free slot on the way
    /// if it has none and its window no empty slot. Returns where the key is and the clock read
    /// after the last pair (a decision is never dated earlier than the clock read of any write
    /// it saw: a reclaim judged a word fresh at that time).
    #[inline(always)]
    pub(crate) fn locate<T: Template>(
        &self,
        t: &T,
        tag: u64,
        insert: bool,
        now: &mut impl FnMut() -> u64,
    ) -> Result<(Located, u64)> {
        loop {
            match self.scan(tag, None) {
                Scan::Live(at, pair) => return Ok((Located::Live(at, pair), now())),
                Scan::Empty(at, pair) if insert => return Ok((Located::Empty(at, pair), now())),
                Scan::Empty(_, pair) => return Ok((Located::Absent(pair.1), now())),
                Scan::Exhausted => {
                    if let Some(found) = self.claim_free(t, tag, insert, now)? {
                        return Ok(found);
                    }
                }
            }
        }
    }

    /// The first attempt of [`Table::decide`] in its common cases, inlined into the caller with
    /// the template's step `step` (so that the step is not dispatched over every algorithm and
    /// the decision stays in registers): the scan ends at the key's live slot, or at an empty
    /// slot where a committed admission claims it; the step denies, or admits and (when
    /// committing) its CAS lands. `None` in every other case (no live or empty slot in the
    /// window, a step error, a lost CAS): nothing was written, and the caller decides again with
    /// [`Table::decide`], which goes through the same first steps and then the rest.
    #[inline(always)]
    pub(crate) fn decide_first<E>(
        &self,
        tag: u64,
        commit: bool,
        now: &mut impl FnMut() -> u64,
        step: impl FnOnce(u64, u64) -> Result<Step, E>,
    ) -> Option<Decision> {
        let (at, pair) = match self.scan(tag, None) {
            // As in `locate`: the clock read after the pairs.
            Scan::Live(at, pair) | Scan::Empty(at, pair) => (at, pair),
            Scan::Exhausted => return None,
        };
        // As in `decide`: the pair was read whole, so its state is this key's (or, in an empty
        // slot, the fresh word it starts from; a peek decides on it as `Located::Absent`).
        let (new, decision) = match step(now(), pair.1).ok()? {
            Step::Deny(d) => return Some(d),
            Step::Admit { new, decision } => (new, decision),
        };
        if !commit {
            return Some(decision);
        }
        // A live slot is the key's; an empty one is claimed live by the admission's CAS (see
        // `decide`). A failed CAS wrote nothing: the caller starts over.
        self.slots[at].cas(pair, (tag, new)).ok()?;
        Some(decision)
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
            let (found, mut time) = self.locate(t, tag, commit, now)?;
            let (at, mut pair) = match found {
                Located::Live(at, pair) | Located::Empty(at, pair) => (at, pair),
                Located::Full { fresh_in_ns } => return Ok(Outcome::Full { fresh_in_ns }),
                // A peek decides on the fresh word the key would start from.
                Located::Absent(state) => {
                    return Ok(Outcome::Decided(match t.step(time, state, cost)? {
                        Step::Deny(d) => d,
                        Step::Admit { decision, .. } => decision,
                    }))
                }
            };
            loop {
                // The pair was read whole: its state is this key's (or the empty slot's fresh
                // word), whatever it decides.
                let (new, decision) = match t.step(time, pair.1, cost)? {
                    Step::Deny(d) => return Ok(Outcome::Decided(d)),
                    Step::Admit { new, decision } => (new, decision),
                };
                if !commit {
                    return Ok(Outcome::Decided(decision));
                }
                // A live slot is the key's. An empty one is claimed with the admission in the
                // same CAS, live at once (no other slot of the key can exist, see "Claims"); the
                // admission makes the word not fresh, so no other key can take it back before
                // the key's next decision.
                match self.slots[at].cas(pair, (tag, new)) {
                    Ok(()) => return Ok(Outcome::Decided(decision)),
                    // Another decision on this key landed first: decide again on its word.
                    Err(found) if found.0 == tag && pair.0 == tag => {
                        pair = found;
                        time = now();
                    }
                    // The slot was taken, reclaimed or retired: the key is elsewhere or nowhere.
                    Err(_) => continue 'probe,
                }
            }
        }
    }

    /// The window has no live slot for the key and no empty one: claim its first free slot
    /// (retired, pending, or another key's whose state is fresh) as a pending claim, then
    /// validate it. Without `insert`, report the fresh word instead. `None`: look again.
    #[inline(never)]
    fn claim_free<T: Template>(
        &self,
        t: &T,
        tag: u64,
        insert: bool,
        now: &mut impl FnMut() -> u64,
    ) -> Result<Option<(Located, u64)>> {
        let mut seen = [(0, 0); MAX_PROBE];
        if !matches!(self.scan(tag, Some(&mut seen)), Scan::Exhausted) {
            return Ok(None);
        }
        // After the pairs, as in `locate`.
        let time = now();
        let window = &seen[..self.probe];
        // A pending claim holds no state (its word is a nonce): free, with a blank word.
        let free_word = |&(tg, s): &(u64, u64)| match tg {
            TOMB => Some(s),
            _ if tg & PENDING != 0 => Some(t.blank(s)),
            _ => t.is_fresh(time, s).then_some(s),
        };
        let Some((i, fresh)) = window
            .iter()
            .enumerate()
            .find_map(|(i, p)| free_word(p).map(|s| (i, s)))
        else {
            let fresh_in_ns = window
                .iter()
                .map(|&(_, s)| t.fresh_in(time, s))
                .min()
                .unwrap_or(0);
            return Ok(Some((Located::Full { fresh_in_ns }, time)));
        };
        if !insert {
            return Ok(Some((Located::Absent(fresh), time)));
        }
        // Claim the slot, atomic with the freshness seen: an update of the old key either
        // landed before (this CAS fails: its state changed) or fails after (its tag changed).
        // The claim is pending, its word a nonce no other claim has: two claims for one key can
        // pick different slots, so a claim only becomes live through its claimer's validation.
        let at = self.at(tag, i);
        let claim = (tag | PENDING, t.blank(fresh) | claim_nonce());
        if self.slots[at].cas(window[i], claim).is_ok() {
            self.validate(t, tag, at, claim, fresh);
        }
        Ok(None)
    }

    /// Resolve this process's pending claim `claim` of `tag` in slot `at` (made with the fresh
    /// word `fresh`): read the whole window (after the claim); if the key has a live slot,
    /// retire the claim; otherwise retire every other pending claim of the key and, if all of
    /// those retirements succeeded, make the claim live with the fresh word. Repeated while
    /// neither can be done (module docs, "Claims").
    fn validate<T: Template>(&self, t: &T, tag: u64, at: usize, claim: (u64, u64), fresh: u64) {
        loop {
            let mut live = false;
            let mut retired_all = true;
            let mut ours = false;
            for i in 0..self.probe {
                let j = self.at(tag, i);
                let pair = self.slots[j].load();
                if j == at {
                    ours = pair == claim;
                } else if pair.0 == tag {
                    live = true;
                } else if pair.0 == tag | PENDING {
                    // Another claim of the key. Claims decide nothing, so retiring one loses
                    // nothing; its claimer looks again.
                    retired_all &= self.slots[j].cas(pair, (TOMB, t.blank(pair.1))).is_ok();
                }
            }
            if !ours {
                // Retired by another claimer, or taken by another key: look again.
                return;
            }
            if live {
                // The key has its slot: this claim is surplus.
                let _ = self.slots[at].cas(claim, (TOMB, t.blank(claim.1)));
                return;
            }
            // No live slot, and every other claim seen is retired. A retirement that failed may
            // have lost to that claim's validation: read the window again before making a
            // second live slot.
            if retired_all {
                let _ = self.slots[at].cas(claim, (tag, fresh));
                return;
            }
        }
    }

    /// Give back `units` of `grant` to the key `tag`, if it still has a live slot.
    pub(crate) fn refund<T: Template>(
        &self,
        t: &T,
        tag: u64,
        grant: &Decision,
        units: u64,
        now: &mut impl FnMut() -> u64,
    ) -> Result<()> {
        self.update_key(tag, now, |now, state| t.refund(now, state, grant, units))
    }

    /// Replace the state of the key `tag` by `change(now, state)`, if it still has a live
    /// slot, with one CAS loop on the slot (a key that lost its slot had a fresh state: there is
    /// nothing to change).
    pub(crate) fn update_key(
        &self,
        tag: u64,
        now: &mut impl FnMut() -> u64,
        mut change: impl FnMut(u64, u64) -> Result<u64>,
    ) -> Result<()> {
        'probe: loop {
            let Scan::Live(at, (_, mut state)) = self.scan(tag, None) else {
                // No slot: the key's state was fresh when it was reclaimed; nothing is held.
                return Ok(());
            };
            loop {
                let new = change(now(), state)?;
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

    /// Retire every key whose state is fresh at `now()`, and every pending claim (which holds
    /// no state: its claimer looks again). Returns the keys retired.
    pub(crate) fn reclaim_idle<T: Template>(&self, t: &T, now: &mut impl FnMut() -> u64) -> usize {
        let mut retired = 0;
        for slot in self.slots {
            let mut pair = slot.load();
            loop {
                let pending = pair.0 != TOMB && pair.0 & PENDING != 0;
                let idle =
                    pair.0 != EMPTY && pair.0 != TOMB && (pending || t.is_fresh(now(), pair.1));
                if !idle {
                    break;
                }
                match slot.cas(pair, (TOMB, t.blank(pair.1))) {
                    Ok(()) => {
                        retired += !pending as usize;
                        break;
                    }
                    Err(found) => pair = found,
                }
            }
        }
        retired
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

    /// Whether any live key's state word satisfies `f` (empty, retired and pending slots hold
    /// no key's state).
    pub(crate) fn any_live_state(&self, mut f: impl FnMut(u64) -> bool) -> bool {
        self.slots.iter().any(|slot| {
            let (tag, state) = slot.load();
            tag != EMPTY && tag & PENDING == 0 && f(state)
        })
    }

    /// Slots holding a live key.
    pub(crate) fn occupancy(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| {
                let tag = s.load().0;
                tag != EMPTY && tag & PENDING == 0
            })
            .count()
    }
}
