//! One limit as this process holds it: where its words are in the mapped file, the clock it
//! decides with, what follows its decisions, and the file that replaced its file (one entry:
//! [`Site::current`]). The engines decide on a site; the handles and the inspection view hold
//! one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::clock::{Clock, MonotonicClock};
use crate::engine::Params;
use crate::error::Result;
use crate::file::layout::{self, word};
use crate::file::Words;
use crate::reconcile;
use crate::tally::Tally;
use watch::{reattach_error, Shared};

mod finish;
pub(crate) mod hot;
mod parts;
pub(crate) mod watch;

/// One limit as this process holds it (see the module docs). `pub` only so that the sealed
/// kind traits may name it; the module is private, so no user can.
pub struct Site<C: Clock = MonotonicClock> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) clock: C,
    pub(crate) params: Params,
    pub(crate) index: usize,
    /// The limit's control line.
    pub(crate) control: Words,
    /// Everything after the control line: log entries, permits, or the key table.
    pub(crate) area: Words,
    /// What happens after a decision: shadow mode, near-limit, counters.
    pub(crate) tally: Tally,
    /// The limit's kind, fixed at creation: what the typed handle resolving it is, and what
    /// the untyped callers dispatch on (`handle::dispatch`), once per call.
    pub(crate) kind: crate::spec::LimitKind,
    /// A token bucket's sub-buckets (1: not split), the bucket engine's shape.
    pub(crate) split: usize,
    /// An unsplit token bucket: decided by `Bucket::bucket_fast` (or, when that gives up,
    /// `Bucket::bucket_run`) rather than by sub-bucket.
    pub(crate) plain_bucket: bool,
    /// The file's hash seed (header words, fixed at creation), read once.
    pub(crate) seed: [u64; 2],
    /// A keyed limit's table slots ([`Keyed::slots`]), 0 when unkeyed.
    pub(crate) key_slots: usize,
    /// This handle's id in each thread's hot entries ([`hot`]): unique in the process, shared
    /// by clones.
    pub(crate) hot_id: u64,
    /// This limit's identity in the grants it makes: its index and the file's hash seed.
    pub(crate) origin: u64,
    /// Clock time at which this handle next checks that its file is still the one at the path
    /// (one compare per decision; the check itself is off the hot path). Zero once moved.
    pub(crate) next_check: AtomicU64,
    /// The same limit in the file that replaced this one, once noticed.
    pub(crate) moved: OnceLock<Box<Site<C>>>,
    /// A typed handle's (its kind is its type): a replacement whose limit of this name is of
    /// another kind is refused, not followed. The untyped view follows any kind.
    pub(crate) typed: bool,
}

// Handles are `Send` and `Sync` with no unsafe impl of their own: their words are `file::Words`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Site>();
};

impl<C: Clock> Clone for Site<C> {
    fn clone(&self) -> Self {
        Site {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
            params: self.params,
            index: self.index,
            control: self.control,
            area: self.area,
            tally: self.tally,
            kind: self.kind,
            split: self.split,
            plain_bucket: self.plain_bucket,
            seed: self.seed,
            key_slots: self.key_slots,
            hot_id: self.hot_id,
            origin: self.origin,
            // Relaxed: a time; a stale copy only makes the clone check sooner.
            next_check: AtomicU64::new(self.next_check.load(Ordering::Relaxed)),
            moved: self.moved.clone(),
            typed: self.typed,
        }
    }
}

impl<C: Clock> std::fmt::Debug for Site<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("name", &self.name())
            .field("algorithm", self.algorithm())
            .finish()
    }
}

impl<C: Clock> Site<C> {
    /// Limit `index` of the file `shared` maps, deciding with `clock`.
    pub(crate) fn at(shared: &Arc<Shared>, clock: C, index: usize) -> Site<C> {
        let m = &shared.mapped;
        let def = &m.defs[index];
        let (offset, len) = m.geometry.slots[index];
        // SAFETY: the handle made here holds `shared`, the Arc that owns this mapping, for as
        // long as it keeps these words (and so does every clone of it).
        let control = unsafe { m.unbound_words(offset, layout::LINE / 8) };
        // Everything after the control line: log entries, permits, or the key table (and a
        // keyed concurrency limit's permit blocks after it).
        // SAFETY: as for `control`.
        let area = unsafe { m.unbound_words(offset + layout::LINE, (len - layout::LINE) / 8) };
        Site {
            shared: Arc::clone(shared),
            clock,
            params: shared.params[index],
            index,
            control,
            area,
            tally: Tally::new(shared.counters, index, def.shadow, def.near_limit),
            kind: crate::spec::LimitKind::of(&def.algorithm, def.keyed.is_some()),
            split: def.split.max(1) as usize,
            plain_bucket: matches!(shared.params[index], Params::TokenBucket)
                && def.keyed.is_none()
                && def.split <= 1,
            seed: [m.header(word::HASH_SEED), m.header(word::HASH_SEED + 1)],
            key_slots: def.keyed.map_or(0, |k| k.slots() as usize),
            hot_id: crate::engine::site::hot::next_id(),
            origin: (index as u64 + 1) | (m.header(word::HASH_SEED) << 32),
            next_check: AtomicU64::new(0),
            moved: OnceLock::new(),
            typed: false,
        }
    }

    /// The hash seed of the file's keyed tables (16 bytes, chosen at creation).
    #[inline(always)]
    pub(crate) fn hash_seed(&self) -> [u64; 2] {
        self.seed
    }

    /// A keyed limit's table of key slots: `None` for an unkeyed limit, or on a target without
    /// a 16-byte CAS.
    #[inline]
    pub(crate) fn key_table(&self) -> Option<&[crate::engine::keys::Slot]> {
        crate::engine::keys::table_in(self.area(), self.key_slots)
    }

    /// The handle to decide with at clock time `t`: this one, or (after its file was
    /// replaced) the same limit in the new file. One compare unless a check is due.
    #[inline(always)]
    pub(crate) fn current_at(&self, t: u64) -> Result<&Site<C>> {
        // Relaxed: a time; a stale value only moves the check by one decision.
        if t < self.next_check.load(Ordering::Relaxed) {
            return Ok(self);
        }
        self.recheck(t)
    }

    /// The handle a decision runs on: this one, or, once a replacement was noticed (the next
    /// check time is then 0), the handle of the file that replaced it. One load on the hot path.
    #[inline(always)]
    pub(crate) fn follow(&self) -> Result<&Site<C>> {
        // Relaxed: a time; 0 sends every later decision to the slow path.
        if self.next_check.load(Ordering::Relaxed) != 0 {
            return Ok(self);
        }
        self.recheck(self.clock.now_ns())
    }

    /// The time of one attempt of a decision, read after the attempt loaded the state word (so
    /// that it is never older than the time of the decision that wrote the word), or the
    /// caller's date `at`. The clock read doubles as the time of the replacement check: once it
    /// is due, the check runs here, off the hot path; the decision under way still completes on
    /// this file (so a replaced file serves at most one more decision per handle), and the next
    /// one starts on the file that replaced it. A failed check is reported by the next call,
    /// through [`Site::follow`].
    ///
    /// A window (fixed, sliding or a sliding log) decides a date ahead of the clock at the
    /// clock's time: its state names the window it counts, and a date in a window the clock
    /// has not reached would move the state there early, counting every other process's
    /// decisions of the current window against the next one (a fixed window of 10 then
    /// admitted 19 within one real window). A bucket's date is kept: a later date only makes
    /// the bucket's theoretical arrival time later.
    #[inline(always)]
    pub(crate) fn decision_time(&self, at: Option<u64>) -> u64 {
        let t = self.clock.now_ns();
        // Relaxed: as in `current_at`.
        if t >= self.next_check.load(Ordering::Relaxed) {
            self.check_due(t);
        }
        match at {
            None => t,
            Some(date) if self.params.counts_windows() => date.min(t),
            Some(date) => date,
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn check_due(&self, t: u64) {
        if t != 0 && self.recheck(t).is_err() {
            // Relaxed: as in `current_at`.
            self.next_check.store(0, Ordering::Relaxed);
        }
    }

    /// [`Site::current_at`] at the clock's time now.
    #[inline(always)]
    pub(crate) fn current(&self) -> Result<&Site<C>> {
        self.current_at(self.clock.now_ns())
    }

    /// This handle as the one inside a typed handle (see the `typed` field).
    pub(crate) fn into_typed(mut self) -> Site<C> {
        self.typed = true;
        self
    }

    /// The kind of this limit: which typed handle resolves it.
    #[inline(always)]
    pub(crate) fn kind(&self) -> crate::spec::LimitKind {
        self.kind
    }

    /// Check, off the hot path, that the file is still the one at the path; move to its
    /// replacement once it is not. A typed handle does not decide on a limit of another kind:
    /// a token-bucket handle deciding as a window would silently mean something else.
    #[cold]
    #[inline(never)]
    fn recheck(&self, t: u64) -> Result<&Site<C>> {
        let current = self.follow_replacements(t)?;
        if self.typed && !std::ptr::eq(current, self) && current.kind() != self.kind() {
            return Err(reattach_error(
                &self.shared.mapped.path,
                format!(
                    "the limit {} in the file now at the path is {} {}, not {} {}: resolve \
                     it again",
                    reconcile::quote(self.name()),
                    current.kind().article(),
                    current.kind(),
                    self.kind().article(),
                    self.kind()
                ),
            ));
        }
        Ok(current)
    }

    /// [`Site::recheck`] for any kind.
    fn follow_replacements(&self, t: u64) -> Result<&Site<C>> {
        if let Some(next) = self.moved.get() {
            return next.current_at(t);
        }
        match self.shared.check(t)? {
            None => {
                // Relaxed: times; see `current_at`.
                let next = self.shared.watch.next_check.load(Ordering::Relaxed);
                self.next_check.store(next, Ordering::Relaxed);
                Ok(self)
            }
            Some(mut shared) => {
                // The file that replaced this one may have been replaced in turn (a deploy that
                // removed this limit, then one that restored it): follow the chain to the file
                // at the path now. Each link checks its own path at most once per interval.
                for _ in 0..16 {
                    match shared.check(t)? {
                        Some(next) => shared = next,
                        None => break,
                    }
                }
                let index = shared
                    .mapped
                    .defs
                    .iter()
                    .position(|d| d.name == self.name());
                let index = index.ok_or_else(|| {
                    reattach_error(
                        &self.shared.mapped.path,
                        format!(
                            "the file now at the path has no limit {}",
                            reconcile::quote(self.name())
                        ),
                    )
                })?;
                let limit = Site::at(&shared, self.clock.clone(), index);
                let next = self.moved.get_or_init(|| Box::new(limit));
                // Relaxed: every later decision takes the slow path to the new file.
                self.next_check.store(0, Ordering::Relaxed);
                next.current_at(t)
            }
        }
    }
}
