//! Concurrency (in-flight) limits with crash-safe permits.
//!
//! A concurrency limit allows at most `C` permits to be held at once across every process
//! attached to the file; a keyed one, at most `C` per key ([`keyed`] describes how the key
//! table and the permit entries work together). A [`Permit`] is released when dropped; through
//! the C ABI it is a [`Permit::id`] given back with [`ConcurrencyLimit::release_permit`](crate::ConcurrencyLimit::release_permit).
//!
//! ```
//! # fn main() -> Result<(), shmlimit::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("db.shm");
//! use std::time::Duration;
//! use shmlimit::{Concurrency, Limiter};
//!
//! let limiter = Limiter::builder()
//!     .limit("db", Concurrency::new(2))
//!     .create_or_open(&path)?;
//! let db = limiter.concurrency("db")?;
//! let a = db.try_acquire_permit()?.expect("a free permit");
//! let b = db.try_acquire_permit()?.expect("a free permit");
//! assert!(db.try_acquire_permit()?.is_none()); // both held
//! assert_eq!(db.permit_holders().len(), 2);
//! drop(a); // released
//! let c = db.acquire_permit_timeout(Duration::from_millis(10))?;
//! assert!(c.is_some());
//! # drop(b);
//! # Ok(()) }
//! ```
//!
//! # Implementation details
//!
//! Each permit is an entry of two words in the limit's state area (see [`slot`] for the bit
//! layout): an **owner word** holding the owner's pid, the low bits of its start time and a
//! generation, and a stamp with the acquisition time. Taking, giving back, taking over and
//! reclaiming a permit are each one CAS on the owner word, so a process killed at any
//! instruction leaves no half-written permit; the count of held permits is the count of
//! non-free owner words, never more than `C`.
//!
//! *Fast path*: scan the entries (from a point that depends on the pid, to spread processes
//! over them) for a free owner word and CAS it to ours. No system call, no liveness check.
//!
//! *Slow path* (no entry free): read every held entry and ask whether its owner is gone — no
//! process with that pid, a zombie with no other thread left, or a pid now used by a process
//! with another start time
//! (see [`liveness`]) — or whether its lease expired; CAS the first such entry from exactly the
//! word judged to a claim of ours. Concurrent acquirers race on that CAS; one wins, the others
//! go on scanning. Nothing is locked and nobody waits for anybody.
//!
//! *Waiting* ([`ConcurrencyLimit::acquire_permit_timeout`](crate::ConcurrencyLimit::acquire_permit_timeout)): sleep on a futex in the control line
//! that every release bumps and wakes (see [`futex`]); wake at least every
//! [`PERMIT_RECHECK`] to look for dead owners, because a process that dies releases nothing.
//!
//! # When a dead process's permits become available again
//!
//! A permit is never freed behind the back of a live owner (without a lease). The permits of a
//! process that died (exit, SIGKILL, crash, OOM kill) become available from the moment the
//! kernel has made it a zombie and its other threads have exited (which happens before its
//! parent is told), to:
//!
//! 1. the next [`ConcurrencyLimit::try_acquire_permit`](crate::ConcurrencyLimit::try_acquire_permit) (or `acquire_permit_timeout`) in any
//!    process that finds no free permit: it takes one over at once;
//! 2. every process already waiting in `acquire_permit_timeout`: within [`PERMIT_RECHECK`]
//!    (100 ms) of the death, plus scheduling delay;
//! 3. [`crate::Limit::reclaim_dead_permits`] (the CLI's `gc`), which frees all of them and
//!    wakes waiters.
//!
//! While free permits remain, nobody looks at dead owners: a dead process's permits simply
//! count as held until they are needed. With a lease (`Concurrency::new(c).lease(d)`), a
//! permit held by a live process for longer than `d` (measured from its acquisition, rounded up
//! to the next millisecond, on the limit's clock) is also taken over by the next acquirer that
//! finds none free; the old holder's drop then releases nothing ([`Permit::is_held`] says so).
//!
//! Limits of the scheme, all in the safe direction (a permit held too long, never given twice):
//! the owner's start time is kept to 24 bits of clock ticks, so a dead owner whose pid is
//! reused by a process started an exact multiple of 2^24 ticks (46.6 hours at 100 Hz) later,
//! in the same tick, keeps its permits until that process exits; a process that `exec`s keeps
//! its pid and start time, so its permits stay held until it exits; when `/proc` hides a live
//! process (`hidepid`), it is taken as alive. All processes sharing a concurrency limit must
//! see each other's pids, that is share a pid namespace: a process in another pid namespace
//! would look dead to them and its permits would be taken over. (Processes in another time
//! namespace are refused by the file already, see [`crate::Limiter`].)
//!
//! Cost: an acquisition that finds a free permit makes no system call but the clock read
//! (vDSO) and `getpid`; a release adds one `FUTEX_WAKE` only when a process may be waiting. An
//! acquisition that finds none free makes one `kill(pid, 0)` and one `/proc/<pid>/stat` read per
//! distinct owning process, so callers that poll `try_acquire_permit` on a full limit should
//! wait with `acquire_permit_timeout` instead.

mod calls;
pub(crate) mod futex;
pub(crate) mod keyed;
pub(crate) use crate::owner::liveness;
mod protocol;
pub(crate) use protocol::Judge;
pub(crate) mod slot;

#[cfg(test)]
mod keyed_loom_models;
#[cfg(test)]
mod loom_models;

use std::time::Duration;

/// A concurrency limit's permits (keyed or not): acquiring, waiting, releasing, listing and
/// reclaiming them, on the limit's site.
pub(crate) struct Permits<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(Permits);

/// The longest a process waiting in [`ConcurrencyLimit::acquire_permit_timeout`](crate::ConcurrencyLimit::acquire_permit_timeout) sleeps before it
/// looks for permits of dead holders again (100 ms): the bound on how late a waiter learns of a
/// holder's death, which releases nothing.
pub const PERMIT_RECHECK: Duration = futex::RECHECK;
use slot::{OwnerWord, GEN_MASK};

use crate::clock::{Clock, MonotonicClock};

use crate::engine::site::Site;

/// A held permit of a concurrency limit; released when dropped.
///
/// A permit belongs to the process that acquired it: a copy inherited by a `fork`ed child
/// releases nothing when the child drops it (the entry names the parent).
#[must_use = "a permit is released as soon as it is dropped"]
pub struct Permit<C: Clock = MonotonicClock> {
    limit: Site<C>,
    /// The entry and the owner word this permit committed; None for a permit that holds
    /// nothing (a shadow-mode permit, or one a full key table's `Allow` policy granted).
    entry: Option<(usize, OwnerWord)>,
}

/// The C-ABI id of a permit: bit 63 set, the tag of the file that holds it in bits 50-62 (see
/// [`file_tag`]), generation in bits 32-49, entry index in bits 0-31 (for a keyed limit, key
/// slot x permits per key + entry).
fn permit_id(index: usize, word: OwnerWord, tag: u64) -> u64 {
    (1 << 63) | (tag << 50) | (word.gen() << 32) | index as u64
}

/// The entry, generation and file tag an id names.
fn decode_id(id: u64) -> Option<(usize, u64, u64)> {
    if id >> 63 != 1 || (id >> 50) & TAG_MASK == 0 {
        return None;
    }
    Some((
        (id & 0xFFFF_FFFF) as usize,
        (id >> 32) & GEN_MASK,
        (id >> 50) & TAG_MASK,
    ))
}

const TAG_MASK: u64 = (1 << 13) - 1;

/// 13 bits of a file's random id, never 0: which file of a chain of replacements a permit id
/// was issued by, so that a release by id after the handle moved reaches that file (two files
/// of one chain share a tag with probability 1/8191; the owner and generation checks remain).
fn file_tag(file_id: u64) -> u64 {
    file_id % TAG_MASK + 1
}

/// How a wait for a permit ended (returned once per wait: the size of the `Done` variant does
/// not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Waited<'a, C: Clock> {
    /// With this outcome (a permit, or none when the time ran out).
    Done(Option<Permit<C>>),
    /// The file was replaced: go on waiting in the new one (its handle), for the time left.
    Moved(&'a Site<C>, Duration),
}

impl<C: Clock> Permit<C> {
    /// A number naming this permit, for [`ConcurrencyLimit::release_permit`](crate::ConcurrencyLimit::release_permit) (the C ABI): unique
    /// among the permits held at once, never 0. A permit that holds nothing (granted by a
    /// shadow limit that would have refused, or by a full key table's `Allow` policy) has id 0.
    pub fn id(&self) -> u64 {
        self.entry.map_or(0, |(i, w)| {
            permit_id(i, w, Permits(&self.limit).permit_tag())
        })
    }

    /// Whether this permit still holds its entry: false after a reset of the limit, or when its
    /// lease expired and another acquirer took it over.
    pub fn is_held(&self) -> bool {
        self.entry
            .is_some_and(|(i, w)| Permits(&self.limit).entry_word(i) == Some(w))
    }

    /// Keep the permit held past this handle and return its id; release it later with
    /// [`ConcurrencyLimit::release_permit`](crate::ConcurrencyLimit::release_permit) (or let it be reclaimed when this process exits).
    pub fn into_id(mut self) -> u64 {
        let id = self.id();
        // Drop the handle (and its share of the mapping) but not the permit: with no entry
        // left, dropping `self` releases nothing.
        self.entry = None;
        id
    }

    /// The limit this permit belongs to.
    pub(crate) fn site(&self) -> &Site<C> {
        &self.limit
    }

    /// Release now. False if the permit was no longer held (see [`Permit::is_held`]).
    pub fn release(mut self) -> bool {
        self.release_entry()
    }

    /// Release now, a keyed adaptive limit's permit reporting `sample` (outcome, latency ns)
    /// into its key's words before its bit is cleared. False if it was no longer held.
    pub(crate) fn release_sampled(
        mut self,
        sample: Option<(crate::algo::adaptive::Outcome, u64)>,
    ) -> bool {
        match self.entry.take() {
            Some((index, word)) if liveness::own_identity().ok() == Some(word.owner()) => {
                Permits(&self.limit).release_entry_sampled(index, word, sample)
            }
            _ => false,
        }
    }

    fn release_entry(&mut self) -> bool {
        match self.entry.take() {
            // Only the process that acquired it: a forked child's copy names its parent.
            Some((index, word)) if liveness::own_identity().ok() == Some(word.owner()) => {
                Permits(&self.limit).release_entry(index, word)
            }
            _ => false,
        }
    }
}

impl<C: Clock> Drop for Permit<C> {
    fn drop(&mut self) {
        self.release_entry();
    }
}

impl<C: Clock> std::fmt::Debug for Permit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("limit", &self.limit.name())
            .field("id", &self.id())
            .finish()
    }
}

/// One held permit, as [`crate::Limit::permit_holders`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitHolder {
    /// The permit's id (as [`Permit::id`]).
    pub id: u64,
    /// The owner process.
    pub pid: u32,
    /// For a keyed limit, the key's tag (as [`KeyedConcurrencyLimit::key_tag`](crate::KeyedConcurrencyLimit::key_tag) computes it from the key);
    /// None for an unkeyed limit.
    pub key_tag: Option<u64>,
    /// When it was acquired, in monotonic nanoseconds (to the millisecond, rounded up); None
    /// for an acquisition not yet stamped (a holder caught between its claim and its stamp).
    pub since_ns: Option<u64>,
    /// When its lease expires (`since + lease`); None without a lease or a stamp.
    pub lease_expiry_ns: Option<u64>,
    /// True when the next acquirer finding no free permit may take it over: its owner is gone
    /// or its lease expired.
    pub reclaimable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_garbage() {
        let w = OwnerWord::held(GEN_MASK, crate::owner::owner(3, 4));
        // The largest index: 2^26 key slots x 64 permits - 1; the largest tag.
        let id = permit_id((1 << 32) - 1, w, TAG_MASK);
        assert_eq!(decode_id(id), Some(((1 << 32) - 1, GEN_MASK, TAG_MASK)));
        assert_eq!(
            decode_id(permit_id(7, OwnerWord::held(5, 9), 1)),
            Some((7, 5, 1))
        );
        assert_eq!(decode_id(0), None);
        assert_eq!(decode_id(id & !(1 << 63)), None);
        assert_eq!(decode_id(id & !(TAG_MASK << 50)), None, "no tag");
        for file_id in [0, 1, TAG_MASK - 1, TAG_MASK, u64::MAX] {
            assert!((1..=TAG_MASK).contains(&file_tag(file_id)));
        }
    }
}
