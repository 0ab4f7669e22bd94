//! The permit protocol under the calls: where a limit's entries are, one attempt to grab an
//! entry (free, or taken over from a dead owner or an expired lease), the outcome as a
//! [`Permit`], and giving an entry back (see the module docs of `permit`).

use super::Permits;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::keyed::{KeyAcquire, KeyedPermits};
use super::slot::{OwnerWord, Table};
use super::{futex, liveness, Permit, PERMIT_RECHECK};
use crate::algo::adaptive::Outcome;
use crate::algo::Decision;
use crate::clock::Clock;
use crate::engine::adaptive::per_key::KeyedAdaptive;
use crate::engine::keys::{Slot, NO_PAIR_CAS};
use crate::engine::Params;
use crate::error::{Error, Result};
use crate::file::layout;
use crate::spec::{Algorithm, FullPolicy};

/// Rotates the scan start of successive acquisitions in one process.
static ROTATION: AtomicUsize = AtomicUsize::new(0);

/// The permit entries of a concurrency limit: one table, or one block per key slot.
pub(super) enum Entries<'a> {
    Flat(Table<'a, AtomicU64>),
    Keyed(KeyedPermits<'a, Slot, AtomicU64>),
}

/// Futex word pairs (release sequence, waiter count) in a keyed limit's control line.
pub(super) const FUTEX_BUCKETS: u64 = (layout::LINE / 16) as u64;

/// Liveness answers cached per owner for one scan, and the clock read once, lazily, for leases.
pub(crate) struct Judge {
    me: u64,
    lease_ns: u64,
    now: Option<u64>,
    cache: HashMap<u64, bool>,
}

impl Judge {
    pub(crate) fn new(me: u64, lease_ns: u64) -> Judge {
        Judge {
            me,
            lease_ns,
            now: None,
            cache: HashMap::new(),
        }
    }

    /// Is the held entry `word` (acquired at `since`) reclaimable: its lease expired, or its
    /// owner is gone?
    pub(crate) fn reclaimable(
        &mut self,
        word: OwnerWord,
        since: Option<u64>,
        clock: &impl Clock,
    ) -> bool {
        if self.lease_ns > 0 {
            let now = *self.now.get_or_insert_with(|| clock.now_ns());
            if since.is_some_and(|s| now >= s.saturating_add(self.lease_ns)) {
                return true;
            }
        }
        if word.owner() == self.me {
            return false;
        }
        *self
            .cache
            .entry(word.owner())
            .or_insert_with(|| liveness::owner_is_gone(word))
    }
}

impl<'a, C: Clock> Permits<'a, C> {
    /// The permit entries of a concurrency limit and its lease (ns, 0 = none).
    pub(super) fn entries(&self) -> Result<(Entries<'a>, u64)> {
        let Params::Concurrency { permits, lease_ns } = self.params() else {
            return Err(self.misdirected());
        };
        let Some(k) = self.def().keyed else {
            return Ok((
                Entries::Flat(Table::new(self.0.area(), permits as usize)),
                lease_ns,
            ));
        };
        let keys = self
            .0
            .key_table()
            .ok_or_else(|| self.refused(NO_PAIR_CAS))?;
        let blocks = &self.0.area()[layout::key_table_words(k.slots() as usize)..];
        Ok((
            Entries::Keyed(KeyedPermits::new(keys, blocks, permits as usize).leased(lease_ns > 0)),
            lease_ns,
        ))
    }

    /// The permit table and lease of an unkeyed concurrency limit.
    pub(super) fn permit_table(&self) -> Result<(Table<'_, AtomicU64>, u64)> {
        if matches!(self.def().algorithm, Algorithm::AdaptiveConcurrency(_)) {
            // Its permits are granted by the adaptive engine, within its current limit.
            return Err(self.misdirected());
        }
        self.flat_entries()
    }

    /// The permit table and lease of an unkeyed concurrency limit, adaptive or not: for the
    /// adaptive engine, which grants its entries within its current limit.
    pub(crate) fn flat_entries(&self) -> Result<(Table<'_, AtomicU64>, u64)> {
        match self.entries()? {
            (Entries::Flat(table), lease_ns) => Ok((table, lease_ns)),
            (Entries::Keyed(_), _) => Err(self.misdirected()),
        }
    }

    /// The key table and permit blocks of a keyed concurrency limit, and its lease.
    pub(super) fn keyed_permits(&self) -> Result<(KeyedPermits<'_, Slot, AtomicU64>, u64)> {
        if matches!(self.def().algorithm, Algorithm::AdaptiveConcurrency(_)) {
            // Its permits are granted by the adaptive engine, within each key's limit.
            return Err(self.misdirected());
        }
        self.keyed_entries()
    }

    /// The key table and permit blocks of a keyed concurrency limit, adaptive or not, and its
    /// lease: for the keyed adaptive engine, which grants them within each key's limit.
    pub(crate) fn keyed_entries(&self) -> Result<(KeyedPermits<'a, Slot, AtomicU64>, u64)> {
        match self.entries()? {
            (Entries::Keyed(kp), lease_ns) => Ok((kp, lease_ns)),
            (Entries::Flat(_), _) => Err(self.misdirected()),
        }
    }

    /// The owner word of entry `index` (as in a permit id) now; None if there is no such entry.
    pub(super) fn entry_word(&self, index: usize) -> Option<OwnerWord> {
        match self.entries().ok()?.0 {
            Entries::Flat(t) => (index < t.permits()).then(|| t.read(index).0),
            Entries::Keyed(kp) => {
                let (slot, entry) = (index / kp.permits(), index % kp.permits());
                (slot < kp.slots()).then(|| kp.block(slot).read(entry).0)
            }
        }
    }

    /// The futex words (release sequence, waiter count) that waiters for the key `tag` sleep
    /// on; an unkeyed limit's are words 0 and 1.
    pub(crate) fn futex_words(&self, tag: u64) -> (&AtomicU64, &AtomicU64) {
        let pair = (tag % FUTEX_BUCKETS) as usize * 2;
        (
            self.control(pair + futex::SEQ),
            self.control(pair + futex::WAITERS),
        )
    }

    pub(crate) fn own_identity(&self) -> Result<u64> {
        liveness::own_identity().map_err(|source| Error::Io {
            op: "reading this process's start time from /proc/self/stat",
            path: self.mapped().path.clone(),
            source,
        })
    }

    /// Where this process starts scanning a block of `permits` entries.
    pub(crate) fn scan_start(me: u64, permits: usize) -> usize {
        let spread = (me as u32).wrapping_mul(0x9E37_79B9) as usize;
        // Relaxed: only spreads scan starts; it orders nothing.
        spread.wrapping_add(ROTATION.fetch_add(1, Ordering::Relaxed)) % permits
    }

    /// One attempt: a free entry, else one taken over from a dead owner or an expired lease.
    pub(super) fn grab(
        &self,
        table: &Table<'_, AtomicU64>,
        lease_ns: u64,
        me: u64,
    ) -> Option<(usize, OwnerWord)> {
        let start = Self::scan_start(me, table.permits());
        if let Some(taken) = table.claim(start, me, || self.clock().now_ns()) {
            return Some(taken);
        }
        let mut judge = Judge::new(me, lease_ns);
        table
            .sweep(
                start,
                Some(me),
                false,
                |w, since| judge.reclaimable(w, since, self.clock()),
                || self.clock().now_ns(),
            )
            .pop()
    }

    /// One attempt for the key `tag`, as [`Site::grab`].
    pub(super) fn grab_key(
        &self,
        kp: &KeyedPermits<'_, Slot, AtomicU64>,
        tag: u64,
        lease_ns: u64,
        me: u64,
    ) -> Result<KeyAcquire> {
        let mut judge = Judge::new(me, lease_ns);
        kp.acquire(
            self.0,
            tag,
            me,
            Self::scan_start(me, kp.permits()),
            &mut || self.clock().now_ns(),
            &mut |w, since| judge.reclaimable(w, since, self.clock()),
        )
    }

    /// A keyed acquisition as an entry, applying the full-table policy: `Ok(None)` for no
    /// permit; `Ok(Some(None))` for a permit that holds nothing (`FullPolicy::Allow`).
    #[allow(clippy::type_complexity)]
    pub(crate) fn key_outcome(
        &self,
        kp: &KeyedPermits<'_, Slot, AtomicU64>,
        got: KeyAcquire,
    ) -> Result<Option<Option<(usize, OwnerWord)>>> {
        Ok(match got {
            KeyAcquire::Held { slot, entry, word } => {
                Some(Some((slot * kp.permits() + entry, word)))
            }
            KeyAcquire::AllHeld => None,
            KeyAcquire::Full { .. } => match self.def().keyed.map(|k| k.on_full) {
                Some(FullPolicy::Allow) => Some(None),
                Some(FullPolicy::Error) => {
                    return Err(Error::TableFull {
                        limit: self.name().to_owned(),
                    })
                }
                _ => None,
            },
        })
    }

    /// Count the outcome and wrap it in a permit: `held` is whether one was granted, `entry`
    /// what it holds (shadow mode may turn a refusal into a permit holding nothing).
    pub(crate) fn permit_outcome(
        &self,
        held: bool,
        entry: Option<(usize, OwnerWord)>,
    ) -> Option<Permit<C>> {
        let decision = if held {
            Decision::allowed(0, 1)
        } else {
            Decision::denied(PERMIT_RECHECK.as_nanos() as u64, 0, 1)
        };
        let decision = self.finish(decision, 1, true);
        decision.is_allowed().then(|| Permit {
            limit: self.0.clone(),
            entry,
        })
    }

    /// Give back the entry `word` committed; wake waiters. False if it was not held.
    pub(super) fn release_entry(&self, index: usize, word: OwnerWord) -> bool {
        self.release_entry_sampled(index, word, None)
    }

    /// [`Self::release_entry`]; a keyed adaptive limit's permit reports `sample` (outcome,
    /// latency ns) into its key's words before its bit is cleared.
    pub(super) fn release_entry_sampled(
        &self,
        index: usize,
        word: OwnerWord,
        sample: Option<(Outcome, u64)>,
    ) -> bool {
        let Ok((entries, _)) = self.entries() else {
            return false;
        };
        match entries {
            Entries::Flat(table) => {
                if index >= table.permits() || !table.release(index, word) {
                    return false;
                }
                let (seq, waiters) = self.futex_words(0);
                futex::announce_release(seq, waiters, 1);
            }
            Entries::Keyed(kp) => {
                let (slot, entry) = (index / kp.permits(), index % kp.permits());
                if slot >= kp.slots() {
                    return false;
                }
                // Read before the release: while our bit is set the slot is our key's.
                let tag = kp.key_pair(slot).0;
                let held = match sample {
                    Some(sample) if self.is_adaptive() => {
                        KeyedAdaptive(self.0).release_reporting(kp, slot, entry, word, sample)
                    }
                    _ => kp.release(slot, entry, word),
                };
                if !held {
                    return false;
                }
                // Waiters of several keys share the words: wake them all.
                let (seq, waiters) = self.futex_words(tag);
                futex::announce_release(seq, waiters, i32::MAX);
            }
        }
        true
    }

    fn is_adaptive(&self) -> bool {
        matches!(self.def().algorithm, Algorithm::AdaptiveConcurrency(_))
    }

    pub(super) fn release_in_this_file(
        &self,
        index: usize,
        gen: u64,
        sample: Option<(Outcome, u64)>,
    ) -> Result<bool> {
        let me = self.own_identity()?;
        match self.entry_word(index) {
            Some(word) if !word.is_free() && word.owner() == me && word.gen() == gen => {
                Ok(self.release_entry_sampled(index, word, sample))
            }
            _ => Ok(false),
        }
    }
}
