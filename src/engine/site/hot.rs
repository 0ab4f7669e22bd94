//! A thread's hot entries for token-bucket and window handles: what an uncontended decision
//! reads besides its state word, in one place that only this thread writes. The entry is the
//! site's; what a bucket keeps in it (its slot's parameters, under the generation and tag) is
//! read and filled by the bucket engine (`engine/bucket/hot.rs`), a window's live limit by the
//! window engine (`engine/window/mod.rs`).
//!
//! An entry holds, for one handle: the parameters of the slot the last decision used (with the
//! generation of the parameter slots it was read in, so a retune or reset is noticed) or, for a
//! window, its live limit
//! (with the packed limit word it was unpacked from), the near-limit threshold precomputed for
//! them, and the address of the handle's counters in this thread's lane (when the thread owns a
//! lane). A decision compares the handle's id and the generation (the bucket's `ACTIVE` word,
//! with the slot's tag: `Entry::holds_bucket`), or a window's packed limit word, and then
//! uses the entry as it is: no
//! re-validation of the parameters, no lookup of the lane, no product for the near-limit flag.
//!
//! The entry is what makes the straight path of a decision (`Bucket::bucket_fast`,
//! `Window::fast`) possible: when the entry matches, the cost is within its gate (the
//! capacity, or 0 for a fleet share, which then also checks its lease) and a denial has its own
//! counters, the decision is the pure step, one CAS and one counter; anything else (no entry
//! yet, a retune, a shadow limit, an error) gives up having written nothing, and the decision
//! is made again from scratch on the general path, which fills the entry.
//!
//! # Invariants
//!
//! - **One writer, one reader: this thread.** The entries are a thread-local; nothing else reads
//!   or writes them, so they need no atomics and no protocol (and no loom model).
//! - **An entry is the file's slot as it was read.** It is filled only from a slot read whole
//!   and validated (`engine::bucket::read_slot`) after reading the generation it keeps, so the
//!   slot cannot have been rewritten in that generation after the read; a window's, only from a
//!   packed limit word whose check holds, the word itself kept as the check.
//! - **Ids are never reused.** A handle's id is unique in the process for its life (and shared
//!   by its clones, which decide on the same mapping and limit): an entry left by a dropped
//!   handle never matches a later one, so its counter address (into a mapping that may be gone)
//!   is never used.
//! - **Counters are this thread's own lane.** The address is set only while the thread owns
//!   its lane of the handle's mapping (it keeps it until it exits) and the limit is not a
//!   shadow limit; otherwise it is null and the decision counts through [`super::Tally`].
//! - **Fork.** The child's thread is a new thread: a `pthread_atfork` child handler, installed
//!   with the first handle id, empties every entry (their counter addresses are the parent's
//!   lane).
//!
//! # Bounds
//!
//! [`ENTRIES`] entries per thread, direct-mapped by id: handles made one after another never
//! share an entry among the last [`ENTRIES`]; two handles that do share one take turns filling
//! it (one slot read each time, as a decision did before the entries existed).

use std::cell::Cell;
use std::sync::atomic::AtomicU64;

use crate::algo::gcra::Gcra;
use crate::clock::Clock;
use crate::engine::site::Site;
use crate::engine::StepError;

/// Entries per thread (a power of two): 4 KiB of thread-local storage.
pub(crate) const ENTRIES: usize = 64;

/// A handle's entry: one `Cell` per word, so that a decision loads only the words it uses; one
/// cache line each (aligned to 64, not `CachePadded`'s 128: the lines are this thread's own,
/// so there is no other core's line for the adjacent-line prefetcher to fight over).
#[repr(align(64))]
pub(crate) struct Entry {
    /// The handle's id; 0 matches none.
    pub id: Cell<u64>,
    /// A bucket's: the generation and slot tag the parameters were read in (`bucket_key`);
    /// a window's: the packed limit word.
    pub check: Cell<u64>,
    /// The slot's emission interval (`Gcra::emission_ns`).
    pub emission_ns: Cell<u64>,
    /// `Gcra::tolerance_ns`.
    pub tolerance_ns: Cell<u64>,
    /// `Gcra::capacity`.
    pub capacity: Cell<u64>,
    /// An admission whose slack is under this is near the limit
    /// ([`crate::algo::near_threshold`] of the parameters; 0: never, near-limit off).
    pub near_slack: Cell<u64>,
    /// The handle's first counter in this thread's lane, or null (count through the Tally).
    pub counters: Cell<*const AtomicU64>,
    /// The largest cost admitted with no other test than the bucket's: the capacity, or 0
    /// for a fleet share (whose decision also checks the lease deadline). One compare for
    /// both on the common path.
    pub gate: Cell<u64>,
}

impl Entry {
    /// An entry that matches no handle.
    const fn empty() -> Entry {
        Entry {
            id: Cell::new(0),
            check: Cell::new(0),
            emission_ns: Cell::new(1),
            tolerance_ns: Cell::new(0),
            capacity: Cell::new(0),
            near_slack: Cell::new(0),
            counters: Cell::new(std::ptr::null()),
            gate: Cell::new(0),
        }
    }

    /// Fill the entry for handle `id` with the words it caches: its parameters `g` as read
    /// under `check`, the precomputed near-limit threshold, its counters, and the cost `gate`.
    /// The engines fill it through their own accessors (`Entry::fill` of the bucket,
    /// `Entry::fill_window` of a window).
    pub(crate) fn set(
        &self,
        id: u64,
        check: u64,
        g: Gcra,
        gate: u64,
        near_slack: u64,
        counters: *const AtomicU64,
    ) {
        self.id.set(id);
        self.check.set(check);
        self.emission_ns.set(g.emission_ns);
        self.tolerance_ns.set(g.tolerance_ns);
        self.capacity.set(g.capacity);
        self.near_slack.set(near_slack);
        self.counters.set(counters);
        self.gate.set(gate);
    }

    fn clear(&self) {
        let none = Gcra {
            emission_ns: 1,
            tolerance_ns: 0,
            capacity: 0,
        };
        self.set(0, 0, none, 0, 0, std::ptr::null());
    }
}

/// What a decision takes from its entry to count itself after the CAS, and (a bucket's) to
/// check that its parameters still stand.
#[derive(Clone, Copy)]
pub(crate) struct Counts {
    /// [`Entry::counters`]: null counts through the Tally.
    pub counters: *const AtomicU64,
    /// [`Entry::near_slack`].
    pub near_slack: u64,
    /// A bucket decision's: the `ACTIVE` word its parameters were read in (see
    /// `engine::bucket::unchanged`).
    pub witness: u64,
}

impl Counts {
    /// Count through the Tally.
    pub(crate) const TALLY: Counts = Counts {
        counters: std::ptr::null(),
        near_slack: 0,
        witness: 0,
    };
}

thread_local! {
    static HOT: [Entry; ENTRIES] = const { [const { Entry::empty() }; ENTRIES] };
}

/// A new handle id: never 0, never reused in this process. Ids are multiples of [`ENTRIES`],
/// and the entry of id `n * ENTRIES` is `n % ENTRIES`: its byte offset in the array is one
/// mask of the id.
pub(crate) fn next_id() -> u64 {
    use std::sync::atomic::Ordering;
    install_fork_handler();
    static NEXT: AtomicU64 = AtomicU64::new(ENTRIES as u64);
    // Relaxed: only a distinct number is needed.
    NEXT.fetch_add(ENTRIES as u64, Ordering::Relaxed)
}

/// `f` of this thread's entry for id `id` (possibly another handle's: compare [`Entry::id`]).
#[inline(always)]
pub(crate) fn with<R>(id: u64, f: impl FnOnce(&Entry) -> R) -> R {
    // Only the address comes out of `LocalKey::with` (a closure it always inlines; `f` itself,
    // passed in, made it an out-of-line call).
    let entry = HOT.with(|h| std::ptr::from_ref(&h[(id as usize / ENTRIES) & (ENTRIES - 1)]));
    // SAFETY: HOT is const-initialised and has no destructor, so its storage lives as long as
    // this thread, and `entry` is used only here, on this thread; `Entry` is all `Cell`s, so
    // other references to it (a nested call for the same id) may coexist.
    f(unsafe { &*entry })
}

/// Empty every entry of this thread (the fork child handler).
fn forget() {
    HOT.with(|h| h.iter().for_each(Entry::clear));
}

extern "C" fn forked() {
    forget();
}

/// Register the fork child handler once per process, before the first handle has an id (so
/// before any entry is filled). Not a `Once`, as the counters' handler (`tally`).
fn install_fork_handler() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    // Relaxed: only which thread installs the handler is decided here.
    if !INSTALLED.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a handler with no preconditions; `forked` only writes
        // const-initialised thread-local Cells, allowed in a child after fork.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    }
}

impl<C: Clock> Site<C> {
    /// What `read` takes from this thread's hot entry for this handle, the entry filled by
    /// `fill` first unless `holds` it (this handle's, for the slot or limit word as loaded);
    /// `counts` gets the entry's counters and near-limit threshold. Shared by the bucket and
    /// window decisions.
    #[inline(always)]
    pub(crate) fn hot_entry<R>(
        &self,
        holds: impl FnOnce(&Entry) -> bool,
        counts: &mut Counts,
        fill: impl FnOnce(&Entry) -> Result<(), StepError>,
        read: impl FnOnce(&Entry) -> R,
    ) -> Result<R, StepError> {
        with(self.hot_id, |e| {
            if !holds(e) {
                fill(e)?;
            }
            counts.counters = e.counters.get();
            counts.near_slack = e.near_slack.get();
            Ok(read(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_entries_direct_mapped() {
        let a = next_id();
        let b = next_id();
        assert!(a != 0 && b > a);
        let g = Gcra {
            emission_ns: 5,
            tolerance_ns: 50,
            capacity: 10,
        };
        with(a, |e| e.set(a, 7, g, 10, 40, std::ptr::null()));
        assert_eq!(
            with(a, |e| (e.id.get(), e.check.get(), e.capacity.get())),
            (a, 7, 10)
        );
        assert_ne!(with(b, |e| e.id.get()), b);
        forget();
        assert_eq!(with(a, |e| e.id.get()), 0);
    }
}
