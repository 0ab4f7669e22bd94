//! Concurrency (in-flight) limits with crash-safe permits.
//!
//! A concurrency limit allows at most `C` permits to be held at once across every process
//! attached to the file. A [`Permit`] is released when dropped; through the C ABI it is a
//! [`Permit::id`] given back with [`crate::Limit::release_permit`].
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
//! let db = limiter.limit("db")?;
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
//! process with that pid, a zombie, or a pid now used by a process with another start time
//! (see [`liveness`]) — or whether its lease expired; CAS the first such entry from exactly the
//! word judged to a claim of ours. Concurrent acquirers race on that CAS; one wins, the others
//! go on scanning. Nothing is locked and nobody waits for anybody.
//!
//! *Waiting* ([`crate::Limit::acquire_permit_timeout`]): sleep on a futex in the control line
//! that every release bumps and wakes (see [`futex`]); wake at least every
//! [`PERMIT_RECHECK`] to look for dead owners, because a process that dies releases nothing.
//!
//! # When a dead process's permits become available again
//!
//! A permit is never freed behind the back of a live owner (without a lease). The permits of a
//! process that died (exit, SIGKILL, crash, OOM kill) become available from the moment the
//! kernel has made it a zombie (which happens before its parent is told), to:
//!
//! 1. the next [`crate::Limit::try_acquire_permit`] (or `acquire_permit_timeout`) in any
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

mod futex;
mod liveness;
pub(crate) mod slot;

#[cfg(test)]
mod loom_models;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest a process waiting in [`crate::Limit::acquire_permit_timeout`] sleeps before it
/// looks for permits of dead holders again (100 ms): the bound on how late a waiter learns of a
/// holder's death, which releases nothing.
pub const PERMIT_RECHECK: Duration = futex::RECHECK;
use slot::{OwnerWord, Table, GEN_MASK};

use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::limiter::{Limit, Params};

/// A held permit of a concurrency limit; released when dropped.
///
/// A permit belongs to the process that acquired it: a copy inherited by a `fork`ed child
/// releases nothing when the child drops it (the entry names the parent).
#[must_use = "a permit is released as soon as it is dropped"]
pub struct Permit<C: Clock = MonotonicClock> {
    limit: Limit<C>,
    /// The entry and the owner word this permit committed; None for a shadow-mode permit.
    entry: Option<(usize, OwnerWord)>,
}

/// The C-ABI id of a permit: bit 63 set, generation in bits 16-33, entry index in bits 0-15.
fn permit_id(index: usize, word: OwnerWord) -> u64 {
    (1 << 63) | (word.gen() << 16) | index as u64
}

/// The entry and generation an id names.
fn decode_id(id: u64) -> Option<(usize, u64)> {
    if id >> 63 != 1 || (id >> 16) & !GEN_MASK & ((1 << 47) - 1) != 0 {
        return None;
    }
    Some(((id & 0xFFFF) as usize, (id >> 16) & GEN_MASK))
}

impl<C: Clock> Permit<C> {
    /// A number naming this permit, for [`crate::Limit::release_permit`] (the C ABI): unique
    /// among the permits held at once, never 0. A shadow-mode permit (granted by a shadow limit
    /// that would have refused) holds nothing and has id 0.
    pub fn id(&self) -> u64 {
        self.entry.map_or(0, |(i, w)| permit_id(i, w))
    }

    /// Whether this permit still holds its entry: false after a reset of the limit, or when its
    /// lease expired and another acquirer took it over.
    pub fn is_held(&self) -> bool {
        match (self.entry, self.limit.permit_table()) {
            (Some((i, w)), Ok((table, _))) => table.read(i).0 == w,
            _ => false,
        }
    }

    /// Keep the permit held past this handle and return its id; release it later with
    /// [`crate::Limit::release_permit`] (or let it be reclaimed when this process exits).
    pub fn into_id(mut self) -> u64 {
        let id = self.id();
        // Drop the handle (and its share of the mapping) but not the permit: with no entry
        // left, dropping `self` releases nothing.
        self.entry = None;
        id
    }

    /// Release now. False if the permit was no longer held (see [`Permit::is_held`]).
    pub fn release(mut self) -> bool {
        self.release_entry()
    }

    fn release_entry(&mut self) -> bool {
        match self.entry.take() {
            // Only the process that acquired it: a forked child's copy names its parent.
            Some((index, word)) if liveness::own_identity().ok() == Some(word.owner()) => {
                self.limit.release_entry(index, word)
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
    /// When it was acquired, in monotonic nanoseconds (to the millisecond, rounded up); None
    /// for an acquisition not yet stamped (a holder caught between its claim and its stamp).
    pub since_ns: Option<u64>,
    /// When its lease expires (`since + lease`); None without a lease or a stamp.
    pub lease_expiry_ns: Option<u64>,
    /// True when the next acquirer finding no free permit may take it over: its owner is gone
    /// or its lease expired.
    pub reclaimable: bool,
}

/// Rotates the scan start of successive acquisitions in one process.
static ROTATION: AtomicUsize = AtomicUsize::new(0);

impl<C: Clock> Limit<C> {
    /// The permit table and the lease (ns, 0 = none) of a concurrency limit.
    fn permit_table(&self) -> Result<(Table<'_, AtomicU64>, u64)> {
        match self.params() {
            Params::Concurrency { permits, lease_ns } if self.def().keyed.is_none() => {
                Ok((Table::new(self.area(), permits as usize), lease_ns))
            }
            Params::Concurrency { .. } => Err(self.wrong_kind("is keyed")),
            _ => Err(self.wrong_kind("is not a concurrency limit")),
        }
    }

    fn own_identity(&self) -> Result<u64> {
        liveness::own_identity().map_err(|source| Error::Io {
            op: "reading this process's start time from /proc/self/stat",
            path: self.mapped().path.clone(),
            source,
        })
    }

    /// Is the held entry `word` (acquired at `since`) reclaimable at `now`? Liveness answers
    /// are cached per owner for one scan.
    fn judge(
        word: OwnerWord,
        since: Option<u64>,
        now: u64,
        lease_ns: u64,
        me: u64,
        cache: &mut HashMap<u64, bool>,
    ) -> bool {
        if lease_ns > 0 && since.is_some_and(|s| now >= s.saturating_add(lease_ns)) {
            return true;
        }
        if word.owner() == me {
            return false;
        }
        *cache
            .entry(word.owner())
            .or_insert_with(|| liveness::owner_is_gone(word))
    }

    /// One attempt: a free entry, else one taken over from a dead owner or an expired lease.
    fn grab(&self, table: &Table<'_, AtomicU64>, lease_ns: u64, me: u64) -> Option<(usize, u64)> {
        let spread = (me as u32).wrapping_mul(0x9E37_79B9) as usize;
        // Relaxed: only spreads scan starts; it orders nothing.
        let start = spread.wrapping_add(ROTATION.fetch_add(1, Ordering::Relaxed)) % table.permits();
        if let Some((i, w)) = table.claim(start, me, || self.clock().now_ns()) {
            return Some((i, w.0));
        }
        let now = self.clock().now_ns();
        let mut cache = HashMap::new();
        table
            .sweep(
                start,
                Some(me),
                false,
                |w, since| Self::judge(w, since, now, lease_ns, me, &mut cache),
                || now,
            )
            .pop()
            .map(|(i, w)| (i, w.0))
    }

    /// Count the outcome and wrap it in a permit (shadow mode may turn a refusal into a permit
    /// holding nothing).
    fn permit_outcome(&self, entry: Option<(usize, u64)>) -> Option<Permit<C>> {
        let decision = match entry {
            Some(_) => Decision::allowed(0, 1),
            None => Decision::denied(PERMIT_RECHECK.as_nanos() as u64, 0, 1),
        };
        let decision = self.finish(decision, 1, true, self.def().shadow);
        decision.is_allowed().then(|| Permit {
            limit: self.clone(),
            entry: entry.map(|(i, w)| (i, OwnerWord(w))),
        })
    }

    /// Take a permit if one is free (or held by a dead process, or past its lease), without
    /// waiting. `None` when all `C` are held.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if this is not a concurrency limit; [`Error::Io`] if this
    /// process's own `/proc/self/stat` cannot be read.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("permit.shm");
    /// use shmlimit::{Concurrency, Limiter};
    /// let limiter = Limiter::builder()
    ///     .limit("jobs", Concurrency::new(1))
    ///     .create_or_open(&path)?;
    /// let jobs = limiter.limit("jobs")?;
    /// let permit = jobs.try_acquire_permit()?.unwrap();
    /// assert!(jobs.try_acquire_permit()?.is_none());
    /// let id = permit.into_id(); // e.g. handed to C code
    /// assert!(jobs.release_permit(id)?);
    /// assert!(!jobs.release_permit(id)?); // only once
    /// assert!(jobs.try_acquire_permit()?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_permit(&self) -> Result<Option<Permit<C>>> {
        let (table, lease_ns) = self.permit_table()?;
        let me = self.own_identity()?;
        let entry = self.grab(&table, lease_ns, me);
        Ok(self.permit_outcome(entry))
    }

    /// Take a permit, waiting up to `timeout` for one to be released (or for a holder to die
    /// or its lease to expire). Sleeps on a futex in the shared file: no spinning, woken by the
    /// first release; re-checks for dead owners at least every [`PERMIT_RECHECK`]. `None` when
    /// the timeout passed with all permits held. A shadow limit never waits.
    ///
    /// Each release wakes one sleeping waiter; waiters are not queued in order, and a process
    /// that acquires without waiting may take a released permit before the woken waiter does
    /// (which then sleeps again until the next release or its deadline).
    ///
    /// # Errors
    ///
    /// As [`Limit::try_acquire_permit`].
    pub fn acquire_permit_timeout(&self, timeout: Duration) -> Result<Option<Permit<C>>> {
        let (table, lease_ns) = self.permit_table()?;
        let me = self.own_identity()?;
        let deadline = Instant::now().checked_add(timeout);
        let seq = self.control(futex::SEQ);
        let waiters = self.control(futex::WAITERS);
        loop {
            // SeqCst: read before trying, so a release after the try changes it (futex docs).
            let seen = futex::futex_value(seq.load(Ordering::SeqCst));
            if let Some(entry) = self.grab(&table, lease_ns, me) {
                return Ok(self.permit_outcome(Some(entry)));
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => PERMIT_RECHECK,
            };
            if left.is_zero() || self.def().shadow {
                return Ok(self.permit_outcome(None));
            }
            futex::wait(seq, waiters, seen, left.min(PERMIT_RECHECK));
        }
    }

    /// Give back the entry `word` committed; wake a waiter. False if it was not held.
    fn release_entry(&self, index: usize, word: OwnerWord) -> bool {
        let Ok((table, _)) = self.permit_table() else {
            return false;
        };
        if index >= table.permits() || !table.release(index, word) {
            return false;
        }
        futex::announce_release(self.control(futex::SEQ), self.control(futex::WAITERS));
        true
    }

    /// Release the permit named by `id` ([`Permit::id`] / [`Permit::into_id`]), if this process
    /// holds it. `Ok(false)` when it does not: already released, taken over after its lease, a
    /// reset, another process's permit, or an id that names nothing.
    ///
    /// # Errors
    ///
    /// As [`Limit::try_acquire_permit`].
    pub fn release_permit(&self, id: u64) -> Result<bool> {
        let (table, _) = self.permit_table()?;
        let me = self.own_identity()?;
        let Some((index, gen)) = decode_id(id) else {
            return Ok(false);
        };
        if index >= table.permits() {
            return Ok(false);
        }
        let (word, _) = table.read(index);
        if word.is_free() || word.owner() != me || word.gen() != gen {
            return Ok(false);
        }
        Ok(self.release_entry(index, word))
    }

    /// Every held permit: who holds it, since when, until when. Checks each owner's liveness
    /// (system calls), for inspection; an empty list for other kinds of limit.
    pub fn permit_holders(&self) -> Vec<PermitHolder> {
        let Ok((table, lease_ns)) = self.permit_table() else {
            return Vec::new();
        };
        let me = liveness::own_identity().unwrap_or(0);
        let now = self.clock().now_ns();
        let mut cache = HashMap::new();
        (0..table.permits())
            .filter_map(|index| {
                let (word, stamp) = table.read(index);
                if word.is_free() {
                    return None;
                }
                let since = slot::stamped_since(word, stamp);
                Some(PermitHolder {
                    id: permit_id(index, word),
                    pid: word.pid(),
                    since_ns: since,
                    lease_expiry_ns: since
                        .filter(|_| lease_ns > 0)
                        .map(|s| s.saturating_add(lease_ns)),
                    reclaimable: Self::judge(word, since, now, lease_ns, me, &mut cache),
                })
            })
            .collect()
    }

    /// Free every permit whose owner is gone or whose lease expired, and wake waiters for them;
    /// returns how many (0 for other kinds of limit). What the CLI's `gc` runs; acquirers do the
    /// same on their slow path, so this is never needed for correctness.
    pub fn reclaim_dead_permits(&self) -> usize {
        let Ok((table, lease_ns)) = self.permit_table() else {
            return 0;
        };
        let me = liveness::own_identity().unwrap_or(0);
        let now = self.clock().now_ns();
        let mut cache = HashMap::new();
        let freed = table.sweep(
            0,
            None,
            true,
            |w, since| Self::judge(w, since, now, lease_ns, me, &mut cache),
            || now,
        );
        for _ in &freed {
            futex::announce_release(self.control(futex::SEQ), self.control(futex::WAITERS));
        }
        freed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_garbage() {
        let w = OwnerWord::held(GEN_MASK, slot::owner(3, 4));
        let id = permit_id(65535, w);
        assert_eq!(decode_id(id), Some((65535, GEN_MASK)));
        assert_eq!(decode_id(0), None);
        assert_eq!(decode_id(id | 1 << 40), None);
    }
}
