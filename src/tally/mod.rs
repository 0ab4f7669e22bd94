//! What happens after a decision: shadow mode, the near-limit flag and the counters.
//!
//! The decision functions decide and know nothing of this module; [`Tally::after`] takes a
//! committed decision, applies shadow mode (a denial of a shadow limit is admitted and counted
//! as shadow-denied), counts it, and flags near-limit admissions. [`Tally::refunded`] counts a
//! grant given back, so `allowed - refunded` is what passed.
//!
//! # Where the counters live
//!
//! In the file's counter region (see the layout): [`LANES`] lanes, each an owner line and then
//! [`COUNTERS`] words per limit. Lanes 1.. are each owned by one thread (see [`lanes`]); lane 0
//! is shared. A thread's first decision on a mapping claims a lane (or adopts the one it
//! already owns in that file) and caches it in a thread-local; every later decision adds to
//! its lane with a plain load and store: **no locked instruction, and no line another thread
//! writes**, on admit and on deny alike. A thread that finds every lane held by a live thread
//! adds to the shared lane with an atomic add, and tries to claim again every
//! [`RETRY_CLAIM`] such additions. Readers ([`Tally::read`]) sum every lane, as before.
//!
//! **Denials.** A denial writes one word, its thread's `denied` counter, on a line only that
//! thread writes: the same cost as a process-local counter (a store to a line already in this
//! core's cache, no coherence traffic), but visible to every reader at once and kept when the
//! process is killed. It writes no shared line: not the limit's state, not the shared lane,
//! not another thread's lane (`tests/tally.rs` checks every word of the file).
//!
//! # Bounds and lifetimes
//!
//! - Counts are exact: every committed decision is added exactly once, to a word that only
//!   grows. A reader in another process sees each addition as soon as the store reaches
//!   memory (Relaxed loads: no ordering with the decision's own CAS).
//! - A lane stays with its thread until the thread exits or its process dies; the next claimer
//!   that finds no free lane takes it over and goes on from its values. Opening a file again
//!   from the same thread reuses the thread's lane.
//! - After `fork` the child is a new thread: a `pthread_atfork` child handler drops the cached
//!   lane, so the child claims its own. A child made without running the handlers (a raw
//!   `clone` system call) that decides on an inherited handle writes its parent's lane: then
//!   counts of the two may be lost (decisions are unaffected).
//! - Every lane held, or this thread's `/proc/<tid>/stat` unreadable (no `/proc`): decisions
//!   count on the shared lane (one locked add each), still exactly.
//! - A reboot that keeps the counters (translation) keeps the owner words too: they name
//!   threads of the previous boot, gone, and are taken over as any gone owner's lane (a tid
//!   reused with the same start-time bits only keeps its lane held longer; it never gives one
//!   lane two writers, as the old owner writes nothing more).

pub(crate) mod lanes;
#[cfg(test)]
mod loom_models;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::algo::Decision;
use crate::file::layout::{counter, COUNTERS, LANES, LINE};
use crate::file::{Mapped, Words};
use crate::owner::{self, liveness};

/// Decision counters of one limit, summed over every process.
///
/// Counts are exact and never go backwards: every committed decision adds one to a counter
/// word of its thread's lane in the file (see the layout), which a reader in any process sees
/// as soon as the store is visible; a lane outlives the thread or process that wrote it. What
/// passed is `allowed - refunded`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Decisions that admitted (including shadow-denied ones, which are admitted).
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
    /// Decisions a shadow limit would have denied.
    pub shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    pub near_limit: u64,
    /// Grants given back whole: explicit refunds
    /// ([`refund`](crate::TokenBucketLimit::refund),
    /// [`refund_key`](crate::KeyedTokenBucketLimit::refund_key), a composed refund) and the
    /// roll-backs of composed checks that denied ([`crate::try_acquire_all`]).
    /// `allowed - refunded` is what passed.
    pub refunded: u64,
}

/// How many additions to the shared lane a thread makes before it tries to claim a lane again.
/// A claim that finds every lane held checks each owner (a `kill` and a `/proc` read, some
/// 20 us each): about 1.3 ms, a few ns per addition at this spacing.
pub(crate) const RETRY_CLAIM: u32 = 1 << 20;

/// The counter region of one mapping, as this process mapped it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    /// Unique in this process (never reused), so a thread's cached lane of a mapping that was
    /// unmapped never matches a later one mapped at the same address.
    id: u64,
    /// The stats region (its first word is lane 0's owner word).
    words: Words,
    /// Words per lane.
    lane_words: u32,
}

/// Words from a lane's start to its first counter: the owner line.
const HEAD_WORDS: usize = LINE / 8;

impl Region {
    /// The counter region of `mapped`.
    pub(crate) fn of(mapped: &Mapped) -> Region {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let g = &mapped.geometry;
        debug_assert_eq!(g.stats_at(0, 0) - g.lane_at(0), LINE);
        Region {
            // Relaxed: only a distinct number is needed.
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            // SAFETY: every copy of a Region lives in the `Shared` that owns `mapped` or in a
            // handle holding that `Shared`'s Arc.
            words: unsafe { mapped.unbound_words(g.stats_offset, g.stats_len / 8) },
            lane_words: u32::try_from(g.lane_stride / 8).expect("at most MAX_LIMITS limits"),
        }
    }

    /// Lane `lane`'s owner word.
    fn owner(&self, lane: usize) -> &AtomicU64 {
        assert!(lane < LANES);
        // The region holds LANES lanes of `lane_words` words (validated geometry); word 0 of a
        // lane is its owner word.
        self.words.word(lane * self.lane_words as usize)
    }

    /// Words from the region's start to lane `lane`'s first counter.
    fn counters(&self, lane: usize) -> usize {
        lane * self.lane_words as usize + HEAD_WORDS
    }
}

/// A thread's lane of one mapping: two plain words, so that the thread-local read on the hot
/// path is two loads (no flag byte, no niche to test).
#[derive(Clone, Copy)]
struct Lane {
    /// The mapping's [`Region::id`]; 0 matches none.
    id: u64,
    /// The lane's first counter word, with bit 0 set when this thread owns the lane (plain
    /// stores), clear for the shared lane (atomic adds). Words are 8-aligned, so bit 0 of the
    /// address is free.
    at: *const AtomicU64,
}

const NO_LANE: Lane = Lane {
    id: 0,
    at: std::ptr::null(),
};

impl Lane {
    /// Lane `lane` of `region`.
    fn new(region: &Region, lane: usize, owned: bool) -> Lane {
        // `counters(lane)` is inside the region (LANES lanes of validated geometry).
        let first = region.words.addr_of(region.counters(lane));
        Lane {
            id: region.id,
            at: first.map_addr(|a| a | usize::from(owned)),
        }
    }

    #[inline(always)]
    fn owned(self) -> bool {
        self.at.addr() & 1 != 0
    }

    /// The lane's first counter word.
    #[inline(always)]
    fn first(self) -> *const AtomicU64 {
        self.at.map_addr(|a| a & !1)
    }
}

/// The mappings a thread remembers beside the hot one.
const RECENT: usize = 8;

struct Cold {
    /// The fork generation the rest was filled in.
    forks: usize,
    /// This thread's owner identity; 0 until read, `u64::MAX` if it cannot be read.
    me: u64,
    recent: [Lane; RECENT],
    /// Shared-lane additions left before the next claim attempt.
    retry: u32,
}

thread_local! {
    /// The lane of the mapping this thread decided on last: what the hot path reads.
    static HOT: Cell<Lane> = const { Cell::new(NO_LANE) };
    static COLD: RefCell<Cold> = const {
        RefCell::new(Cold { forks: 0, me: 0, recent: [NO_LANE; RECENT], retry: 0 })
    };
}

/// Forks seen by this process (a `pthread_atfork` child handler counts them).
static FORKS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn forked() {
    // Relaxed: a generation read by this (now only) thread of the child.
    FORKS.fetch_add(1, Ordering::Relaxed);
    // The child's only thread is the one that forked: its cached lane is the parent's (and so
    // are the counter addresses of its hot entries, emptied by their own handler).
    HOT.with(|h| h.set(NO_LANE));
}

/// Register the fork handler once per process. Not a `Once`: a child forked while another
/// thread is inside `call_once` would wait for it forever; a swap never blocks.
fn install_fork_handler() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    // Relaxed: only which thread installs the handler is decided here.
    if !INSTALLED.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a handler with no preconditions; `forked` only adds to an atomic
        // and writes const-initialised thread-local Cells, all allowed in a child after fork.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    }
}

/// This thread's owner identity (tid and start time), or `u64::MAX` when it cannot be read.
fn identity() -> u64 {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    if tid == 0 || tid as u64 > owner::PID_MASK {
        return u64::MAX;
    }
    match liveness::read_stat(tid) {
        Ok(Some(stat)) => owner::owner(tid, stat.start_ticks),
        _ => u64::MAX,
    }
}

/// This thread's lane of `region`, claimed if need be (the slow path: the first decision of a
/// thread on a mapping, or after another mapping's).
#[cold]
#[inline(never)]
fn lane_of(region: &Region) -> Lane {
    install_fork_handler();
    let lane = COLD
        .try_with(|cold| {
            let Ok(mut cold) = cold.try_borrow_mut() else {
                return None;
            };
            // Relaxed: see `forked`.
            let forks = FORKS.load(Ordering::Relaxed);
            if cold.forks != forks {
                // A child: the parent's identity and lanes are not ours.
                cold.forks = forks;
                cold.me = 0;
                cold.recent = [NO_LANE; RECENT];
            }
            let found = cold.recent.iter().position(|l| l.id == region.id);
            let retry = found.is_some_and(|i| !cold.recent[i].owned() && cold.retry == 0);
            let lane = match found {
                Some(i) if !retry => cold.recent[i],
                _ => {
                    if cold.me == 0 {
                        cold.me = identity();
                    }
                    let me = cold.me;
                    let claimed = (me != u64::MAX)
                        .then(|| {
                            lanes::claim(LANES, |i| region.owner(i), me, liveness::owner_is_gone)
                        })
                        .flatten();
                    cold.retry = RETRY_CLAIM;
                    Lane::new(region, claimed.unwrap_or(0), claimed.is_some())
                }
            };
            // Most recent first.
            let at = found.unwrap_or(RECENT - 1);
            cold.recent.copy_within(0..at, 1);
            cold.recent[0] = lane;
            Some(lane)
        })
        .ok()
        .flatten();
    // Without a thread-local (a decision from another thread-local's destructor), the shared
    // lane, uncached.
    let lane = lane.unwrap_or(Lane::new(region, 0, false));
    // The try_with: HOT has no destructor, so it is always there.
    HOT.with(|h| h.set(lane));
    lane
}

/// A shared-lane addition: counts down to the next claim attempt.
#[cold]
#[inline(never)]
fn add_shared(counter: &AtomicU64) {
    lanes::add_shared(counter);
    let again = COLD
        .try_with(|cold| {
            cold.try_borrow_mut().is_ok_and(|mut cold| {
                cold.retry = cold.retry.saturating_sub(1);
                cold.retry == 0
            })
        })
        .unwrap_or(false);
    if again {
        // The next decision takes the slow path, which tries to claim.
        HOT.with(|h| h.set(NO_LANE));
    }
}

/// What one limit does after its decisions: its shadow and near-limit options and its counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    region: Region,
    /// The limit's index: its counters are `index * COUNTERS` words into each lane's counters.
    index: u32,
    shadow: bool,
    near: u16,
}

impl Tally {
    pub(crate) fn new(region: Region, index: usize, shadow: bool, near: u16) -> Tally {
        Tally {
            region,
            index: u32::try_from(index).expect("at most MAX_LIMITS limits"),
            shadow,
            near,
        }
    }

    /// Apply shadow mode to a committed decision, count it, flag near-limit admissions.
    #[inline(always)]
    pub(crate) fn after(&self, mut decision: Decision) -> Decision {
        let lane = self.lane();
        if decision.is_denied() {
            if !self.shadow {
                self.add(lane, counter::DENIED);
                return decision;
            }
            decision = Decision::allowed(0, 1).resetting(decision.reset_after_ns());
            decision.cost = 0; // nothing was taken: a refund of it gives nothing back
            decision.shadow_denied = true;
            self.add(lane, counter::SHADOW_DENIED);
        }
        self.add(lane, counter::ALLOWED);
        // `near == 0`: no near-limit flag asked for (is_near would be false); skip the product.
        if self.near != 0 && decision.is_near(self.near) {
            self.add(lane, counter::NEAR_LIMIT);
        }
        decision
    }

    /// Count an admission as [`Tally::after`] does (a shadow limit's admission is an
    /// admission), out of line: for a decision whose hot entry has no counters of its own.
    /// `near`: its slack is under the entry's near-limit threshold.
    #[cold]
    #[inline(never)]
    pub(crate) fn admitted_on_tally(&self, near: bool) {
        let lane = self.lane();
        self.add(lane, counter::ALLOWED);
        if near {
            self.add(lane, counter::NEAR_LIMIT);
        }
    }

    /// The near-limit fraction (in 1/65536; 0: off).
    pub(crate) fn near(&self) -> u16 {
        self.near
    }

    /// The address of this limit's first counter in this thread's own lane, for a hot entry
    /// (the hot entry's `counters`): null when the thread counts on the shared lane or the limit
    /// is a shadow limit (those decisions count through [`Tally::after`]).
    pub(crate) fn owned_counters(&self) -> *const AtomicU64 {
        if self.shadow {
            return std::ptr::null();
        }
        let lane = self.lane();
        if !lane.owned() {
            return std::ptr::null();
        }
        // In the lane: the limit's `COUNTERS` words are `index * COUNTERS` past its first
        // counter (validated geometry).
        lane.first().wrapping_add(self.index as usize * COUNTERS)
    }

    /// Count a committed decision of a limit that is not a shadow limit through its hot entry:
    /// `counters` (non-null) is [`Tally::owned_counters`] of the limit on this thread,
    /// `near_slack` the entry's near-limit threshold. What [`Tally::after`] does for it, without
    /// the lane lookup or the near-limit product.
    #[inline(always)]
    pub(crate) fn after_owned(counters: *const AtomicU64, decision: &Decision, near_slack: u64) {
        let at = |which: usize| {
            // SAFETY: `counters` is the limit's first counter in a lane this thread owns, in a
            // mapping held by the handle deciding (its entry matched the handle's id, never
            // reused); its `COUNTERS` words are in the lane.
            unsafe { &*counters.add(which) }
        };
        if decision.is_denied() {
            lanes::add_owned(at(counter::DENIED));
            return;
        }
        lanes::add_owned(at(counter::ALLOWED));
        if decision.slack_under(near_slack) {
            lanes::add_owned(at(counter::NEAR_LIMIT));
        }
    }

    /// Count a grant given back whole.
    pub(crate) fn refunded(&self) {
        self.add(self.lane(), counter::REFUNDED);
    }

    #[inline(always)]
    fn lane(&self) -> Lane {
        let lane = HOT.with(Cell::get);
        if lane.id == self.region.id {
            lane
        } else {
            lane_of(&self.region)
        }
    }

    #[inline(always)]
    fn add(&self, lane: Lane, which: usize) {
        // SAFETY: `lane.first()` is a lane's first counter word in this mapping's region (the
        // ids match, and the region outlives the handle holding this Tally), and the limit's
        // `COUNTERS` words are `index * COUNTERS` further, inside the lane (validated geometry).
        let word = unsafe { &*lane.first().add(self.index as usize * COUNTERS + which) };
        if lane.owned() {
            lanes::add_owned(word);
        } else {
            add_shared(word);
        }
    }

    /// The counters summed over every lane.
    pub(crate) fn read(&self) -> Stats {
        let mut s = Stats::default();
        for lane in 0..LANES {
            let at = self.region.counters(lane) + self.index as usize * COUNTERS;
            let c = |which: usize| self.region.words.word(at + which).load(Ordering::Relaxed);
            // Relaxed: statistics; no decision depends on them. Saturating: the counters are
            // words of a file any process may have written, not proof of 2^64 decisions.
            s.allowed = s.allowed.saturating_add(c(counter::ALLOWED));
            s.denied = s.denied.saturating_add(c(counter::DENIED));
            s.shadow_denied = s.shadow_denied.saturating_add(c(counter::SHADOW_DENIED));
            s.near_limit = s.near_limit.saturating_add(c(counter::NEAR_LIMIT));
            s.refunded = s.refunded.saturating_add(c(counter::REFUNDED));
        }
        s
    }
}
