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
//! process with that pid, a zombie, or a pid now used by a process with another start time
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
//! kernel has made it a zombie (which happens before its parent is told), to:
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

mod futex;
pub(crate) mod keyed;
pub(crate) mod liveness;
pub(crate) mod slot;

#[cfg(test)]
mod keyed_loom_models;
#[cfg(test)]
mod loom_models;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest a process waiting in [`ConcurrencyLimit::acquire_permit_timeout`](crate::ConcurrencyLimit::acquire_permit_timeout) sleeps before it
/// looks for permits of dead holders again (100 ms): the bound on how late a waiter learns of a
/// holder's death, which releases nothing.
pub const PERMIT_RECHECK: Duration = futex::RECHECK;
use keyed::{KeyAcquire, KeyedPermits};
use slot::{OwnerWord, Table, GEN_MASK};

use crate::algo::Decision;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::file::layout;
use crate::keyed::{Slot, NO_PAIR_CAS};
use crate::limiter::{Limit, Params};
use crate::spec::FullPolicy;

/// A held permit of a concurrency limit; released when dropped.
///
/// A permit belongs to the process that acquired it: a copy inherited by a `fork`ed child
/// releases nothing when the child drops it (the entry names the parent).
#[must_use = "a permit is released as soon as it is dropped"]
pub struct Permit<C: Clock = MonotonicClock> {
    limit: Limit<C>,
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
enum Waited<'a, C: Clock> {
    /// With this outcome (a permit, or none when the time ran out).
    Done(Option<Permit<C>>),
    /// The file was replaced: go on waiting in the new one (its handle), for the time left.
    Moved(&'a Limit<C>, Duration),
}

impl<C: Clock> Permit<C> {
    /// A number naming this permit, for [`ConcurrencyLimit::release_permit`](crate::ConcurrencyLimit::release_permit) (the C ABI): unique
    /// among the permits held at once, never 0. A permit that holds nothing (granted by a
    /// shadow limit that would have refused, or by a full key table's `Allow` policy) has id 0.
    pub fn id(&self) -> u64 {
        self.entry
            .map_or(0, |(i, w)| permit_id(i, w, self.limit.permit_tag()))
    }

    /// Whether this permit still holds its entry: false after a reset of the limit, or when its
    /// lease expired and another acquirer took it over.
    pub fn is_held(&self) -> bool {
        self.entry
            .is_some_and(|(i, w)| self.limit.entry_word(i) == Some(w))
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

/// Rotates the scan start of successive acquisitions in one process.
static ROTATION: AtomicUsize = AtomicUsize::new(0);

/// The permit entries of a concurrency limit: one table, or one block per key slot.
enum Entries<'a> {
    Flat(Table<'a, AtomicU64>),
    Keyed(KeyedPermits<'a, Slot, AtomicU64>),
}

/// Futex word pairs (release sequence, waiter count) in a keyed limit's control line.
const FUTEX_BUCKETS: u64 = (layout::LINE / 16) as u64;

/// Liveness answers cached per owner for one scan, and the clock read once, lazily, for leases.
struct Judge {
    me: u64,
    lease_ns: u64,
    now: Option<u64>,
    cache: HashMap<u64, bool>,
}

impl Judge {
    fn new(me: u64, lease_ns: u64) -> Judge {
        Judge {
            me,
            lease_ns,
            now: None,
            cache: HashMap::new(),
        }
    }

    /// Is the held entry `word` (acquired at `since`) reclaimable: its lease expired, or its
    /// owner is gone?
    fn reclaimable(&mut self, word: OwnerWord, since: Option<u64>, clock: &impl Clock) -> bool {
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

impl<C: Clock> Limit<C> {
    /// The permit entries of a concurrency limit and its lease (ns, 0 = none).
    fn entries(&self) -> Result<(Entries<'_>, u64)> {
        let Params::Concurrency { permits, lease_ns } = self.params() else {
            return Err(self.wrong_kind("is not a concurrency limit"));
        };
        let Some(k) = self.def().keyed else {
            return Ok((
                Entries::Flat(Table::new(self.area(), permits as usize)),
                lease_ns,
            ));
        };
        let keys = crate::keyed::slots_of(self).ok_or_else(|| self.wrong_kind(NO_PAIR_CAS))?;
        let blocks = &self.area()[layout::key_table_words(k.slots() as usize)..];
        Ok((
            Entries::Keyed(KeyedPermits::new(keys, blocks, permits as usize).leased(lease_ns > 0)),
            lease_ns,
        ))
    }

    /// The permit table and lease of an unkeyed concurrency limit.
    fn permit_table(&self) -> Result<(Table<'_, AtomicU64>, u64)> {
        match self.entries()? {
            (Entries::Flat(table), lease_ns) => Ok((table, lease_ns)),
            (Entries::Keyed(_), _) => Err(self.wrong_kind("is keyed: use try_acquire_key_permit")),
        }
    }

    /// The key table and permit blocks of a keyed concurrency limit, and its lease.
    fn keyed_permits(&self) -> Result<(KeyedPermits<'_, Slot, AtomicU64>, u64)> {
        match self.entries()? {
            (Entries::Keyed(kp), lease_ns) => Ok((kp, lease_ns)),
            (Entries::Flat(_), _) => Err(self.wrong_kind("is not keyed: use try_acquire_permit")),
        }
    }

    /// The owner word of entry `index` (as in a permit id) now; None if there is no such entry.
    fn entry_word(&self, index: usize) -> Option<OwnerWord> {
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
    fn futex_words(&self, tag: u64) -> (&AtomicU64, &AtomicU64) {
        let pair = (tag % FUTEX_BUCKETS) as usize * 2;
        (
            self.control(pair + futex::SEQ),
            self.control(pair + futex::WAITERS),
        )
    }

    fn own_identity(&self) -> Result<u64> {
        liveness::own_identity().map_err(|source| Error::Io {
            op: "reading this process's start time from /proc/self/stat",
            path: self.mapped().path.clone(),
            source,
        })
    }

    /// Where this process starts scanning a block of `permits` entries.
    fn scan_start(me: u64, permits: usize) -> usize {
        let spread = (me as u32).wrapping_mul(0x9E37_79B9) as usize;
        // Relaxed: only spreads scan starts; it orders nothing.
        spread.wrapping_add(ROTATION.fetch_add(1, Ordering::Relaxed)) % permits
    }

    /// One attempt: a free entry, else one taken over from a dead owner or an expired lease.
    fn grab(
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

    /// One attempt for the key `tag`, as [`Limit::grab`].
    fn grab_key(
        &self,
        kp: &KeyedPermits<'_, Slot, AtomicU64>,
        tag: u64,
        lease_ns: u64,
        me: u64,
    ) -> Result<KeyAcquire> {
        let mut judge = Judge::new(me, lease_ns);
        kp.acquire(
            self,
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
    fn key_outcome(
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
    fn permit_outcome(&self, held: bool, entry: Option<(usize, OwnerWord)>) -> Option<Permit<C>> {
        let decision = if held {
            Decision::allowed(0, 1)
        } else {
            Decision::denied(PERMIT_RECHECK.as_nanos() as u64, 0, 1)
        };
        let decision = self.finish(decision, 1, true);
        decision.is_allowed().then(|| Permit {
            limit: self.clone(),
            entry,
        })
    }

    /// Take a permit if one is free (or held by a dead process, or past its lease), without
    /// waiting. `None` when all `C` are held.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if this is not an unkeyed concurrency limit; [`Error::Io`] if this
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
    /// let jobs = limiter.concurrency("jobs")?;
    /// let permit = jobs.try_acquire_permit()?.unwrap();
    /// assert!(jobs.try_acquire_permit()?.is_none());
    /// let id = permit.into_id(); // e.g. handed to C code
    /// assert!(jobs.release_permit(id)?);
    /// assert!(!jobs.release_permit(id)?); // only once
    /// assert!(jobs.try_acquire_permit()?.is_some());
    /// # Ok(()) }
    /// ```
    pub(crate) fn try_acquire_permit(&self) -> Result<Option<Permit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self) {
            return this.try_acquire_permit();
        }
        let (table, lease_ns) = self.permit_table()?;
        let me = self.own_identity()?;
        let entry = self.grab(&table, lease_ns, me);
        Ok(self.permit_outcome(entry.is_some(), entry))
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
    /// As [`ConcurrencyLimit::try_acquire_permit`](crate::ConcurrencyLimit::try_acquire_permit).
    pub(crate) fn acquire_permit_timeout(&self, timeout: Duration) -> Result<Option<Permit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self) {
            return this.acquire_permit_timeout(timeout);
        }
        let (table, lease_ns) = self.permit_table()?;
        let me = self.own_identity()?;
        match self.wait_for_permit(0, timeout, || {
            let entry = self.grab(&table, lease_ns, me);
            Ok(entry.map(Some))
        })? {
            Waited::Done(permit) => Ok(permit),
            Waited::Moved(next, left) => next.acquire_permit_timeout(left),
        }
    }

    /// Try `attempt` until it grants (`Some`) or `timeout` passes, sleeping on the futex words
    /// of `tag` between attempts (woken by releases, and at least every [`PERMIT_RECHECK`]).
    ///
    /// Between attempts the replacement check runs as for decisions: once the file was
    /// replaced, the wait goes on in the new file for the time left (`Waited::Moved`).
    fn wait_for_permit(
        &self,
        tag: u64,
        timeout: Duration,
        mut attempt: impl FnMut() -> Result<Option<Option<(usize, OwnerWord)>>>,
    ) -> Result<Waited<'_, C>> {
        let deadline = Instant::now().checked_add(timeout);
        let (seq, waiters) = self.futex_words(tag);
        loop {
            // SeqCst: read before trying, so a release after the try changes it (futex docs).
            let seen = futex::futex_value(seq.load(Ordering::SeqCst));
            if let Some(entry) = attempt()? {
                return Ok(Waited::Done(self.permit_outcome(true, entry)));
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => PERMIT_RECHECK,
            };
            if left.is_zero() || self.def().shadow {
                return Ok(Waited::Done(self.permit_outcome(false, None)));
            }
            futex::wait(seq, waiters, seen, left.min(PERMIT_RECHECK));
            if let Some(next) = self.moved_handle()? {
                let left = match deadline {
                    Some(d) => d.saturating_duration_since(Instant::now()),
                    None => Duration::MAX,
                };
                return Ok(Waited::Moved(next, left));
            }
        }
    }

    /// Take a permit for `key` if fewer than `C` of that key's are held (or one of them is held
    /// by a dead process, or past its lease), without waiting. `None` when all `C` of the key's
    /// permits are held, or when the table has no slot for a new key and its policy is
    /// [`FullPolicy::Deny`] ([`FullPolicy::Allow`] grants a permit that holds nothing).
    ///
    /// A key seen for the first time gets a slot in the key table; a key holding no permit may
    /// lose its slot to another key, which loses it nothing.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if this is not a keyed concurrency limit (or on a target without a
    /// 16-byte compare-and-swap); [`Error::InvalidKey`] for an empty key or one longer than
    /// [`MAX_KEY_LEN`](crate::MAX_KEY_LEN); [`Error::TableFull`] when the table is full and the
    /// policy is [`FullPolicy::Error`]; [`Error::Io`] as [`ConcurrencyLimit::try_acquire_permit`](crate::ConcurrencyLimit::try_acquire_permit).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("per_user.shm");
    /// use shmlimit::{Concurrency, Keyed, Limiter};
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("in_flight", Concurrency::new(2), Keyed::new(1 << 12))
    ///     .create_or_open(&path)?;
    /// let in_flight = limiter.keyed_concurrency("in_flight")?;
    /// let a = in_flight.try_acquire_key_permit(b"alice")?.expect("alice has two");
    /// let b = in_flight.try_acquire_key_permit(b"alice")?.expect("alice has two");
    /// assert!(in_flight.try_acquire_key_permit(b"alice")?.is_none()); // both held
    /// assert!(in_flight.try_acquire_key_permit(b"bob")?.is_some()); // bob has his own
    /// assert_eq!(in_flight.key_permits_held(b"alice")?, 2);
    /// drop(a);
    /// assert_eq!(in_flight.key_permits_held(b"alice")?, 1);
    /// # drop(b);
    /// # Ok(()) }
    /// ```
    pub(crate) fn try_acquire_key_permit(&self, key: &[u8]) -> Result<Option<Permit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self) {
            return this.try_acquire_key_permit(key);
        }
        let tag = self.key_tag(key)?;
        let (kp, lease_ns) = self.keyed_permits()?;
        let me = self.own_identity()?;
        let got = self.grab_key(&kp, tag, lease_ns, me)?;
        Ok(match self.key_outcome(&kp, got)? {
            Some(entry) => self.permit_outcome(true, entry),
            None => self.permit_outcome(false, None),
        })
    }

    /// [`KeyedConcurrencyLimit::try_acquire_key_permit`](crate::KeyedConcurrencyLimit::try_acquire_key_permit), waiting up to `timeout` for one of the key's permits
    /// to be released (or for a holder to die or its lease to expire), on a futex in the shared
    /// file that every release of a key of the same futex bucket (one of 8, by key) wakes;
    /// re-checks at least every [`PERMIT_RECHECK`], which is also how often a waiter for a
    /// key that found the table full looks for a free slot again. A shadow limit never waits.
    ///
    /// # Errors
    ///
    /// As [`KeyedConcurrencyLimit::try_acquire_key_permit`](crate::KeyedConcurrencyLimit::try_acquire_key_permit).
    pub(crate) fn acquire_key_permit_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<Permit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self) {
            return this.acquire_key_permit_timeout(key, timeout);
        }
        let tag = self.key_tag(key)?;
        let (kp, lease_ns) = self.keyed_permits()?;
        let me = self.own_identity()?;
        match self.wait_for_permit(tag, timeout, || {
            let got = self.grab_key(&kp, tag, lease_ns, me)?;
            self.key_outcome(&kp, got)
        })? {
            Waited::Done(permit) => Ok(permit),
            Waited::Moved(next, left) => next.acquire_key_permit_timeout(key, left),
        }
    }

    /// How many of `key`'s permits are held now (0 for a key without a slot).
    ///
    /// # Errors
    ///
    /// As [`KeyedConcurrencyLimit::try_acquire_key_permit`](crate::KeyedConcurrencyLimit::try_acquire_key_permit).
    pub(crate) fn key_permits_held(&self, key: &[u8]) -> Result<u32> {
        if let Some(next) = self.moved_handle()? {
            return next.key_permits_held(key);
        }
        let tag = self.key_tag(key)?;
        let (kp, _) = self.keyed_permits()?;
        kp.held(self, tag)
    }

    /// Give back the entry `word` committed; wake waiters. False if it was not held.
    fn release_entry(&self, index: usize, word: OwnerWord) -> bool {
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
                if !kp.release(slot, entry, word) {
                    return false;
                }
                // Waiters of several keys share the words: wake them all.
                let (seq, waiters) = self.futex_words(tag);
                futex::announce_release(seq, waiters, i32::MAX);
            }
        }
        true
    }

    /// Release the permit named by `id` ([`Permit::id`] / [`Permit::into_id`]), if this process
    /// holds it. `Ok(false)` when it does not: already released, taken over after its lease, a
    /// reset, another process's permit, or an id that names nothing.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if this is not a concurrency limit; [`Error::Io`] as
    /// [`ConcurrencyLimit::try_acquire_permit`](crate::ConcurrencyLimit::try_acquire_permit).
    pub(crate) fn release_permit(&self, id: u64) -> Result<bool> {
        self.entries()?;
        let Some((index, gen, tag)) = decode_id(id) else {
            return Ok(false);
        };
        // The file that issued it: this handle's, or one that replaced it since.
        let mut at = self;
        while at.permit_tag() != tag {
            match at.moved_to() {
                Some(next) => at = next,
                None => return Ok(false),
            }
        }
        at.release_in_this_file(index, gen)
    }

    /// This handle's file's tag in permit ids.
    pub(crate) fn permit_tag(&self) -> u64 {
        file_tag(self.file_id())
    }

    fn release_in_this_file(&self, index: usize, gen: u64) -> Result<bool> {
        let me = self.own_identity()?;
        match self.entry_word(index) {
            Some(word) if !word.is_free() && word.owner() == me && word.gen() == gen => {
                Ok(self.release_entry(index, word))
            }
            _ => Ok(false),
        }
    }

    /// Every held permit: who holds it, for which key, since when, until when. Checks each
    /// owner's liveness (system calls), for inspection; an empty list for other kinds of limit.
    pub fn permit_holders(&self) -> Vec<PermitHolder> {
        if let Ok(Some(next)) = self.moved_handle() {
            return next.permit_holders();
        }
        let Ok((entries, lease_ns)) = self.entries() else {
            return Vec::new();
        };
        let mut judge = Judge::new(liveness::own_identity().unwrap_or(0), lease_ns);
        let held: Vec<(Option<u64>, usize, OwnerWord, Option<u64>)> = match entries {
            Entries::Flat(table) => (0..table.permits())
                .filter_map(|index| {
                    let (word, stamp) = table.read(index);
                    (!word.is_free()).then(|| (None, index, word, slot::stamped_since(word, stamp)))
                })
                .collect(),
            Entries::Keyed(kp) => kp
                .holders()
                .into_iter()
                .map(|(tag, index, word, since)| (Some(tag), index, word, since))
                .collect(),
        };
        held.into_iter()
            .map(|(key_tag, index, word, since)| PermitHolder {
                id: permit_id(index, word, self.permit_tag()),
                pid: word.pid(),
                key_tag,
                since_ns: since,
                lease_expiry_ns: since
                    .filter(|_| lease_ns > 0)
                    .map(|s| s.saturating_add(lease_ns)),
                reclaimable: judge.reclaimable(word, since, self.clock()),
            })
            .collect()
    }

    /// Free every permit whose owner is gone or whose lease expired, and wake waiters for them;
    /// returns how many (0 for other kinds of limit). What the CLI's `gc` runs; acquirers do the
    /// same on their slow path, so this is never needed for correctness.
    pub fn reclaim_dead_permits(&self) -> usize {
        if let Ok(Some(next)) = self.moved_handle() {
            return next.reclaim_dead_permits();
        }
        let Ok((entries, lease_ns)) = self.entries() else {
            return 0;
        };
        let me = liveness::own_identity().unwrap_or(0);
        let mut judge = Judge::new(me, lease_ns);
        match entries {
            Entries::Flat(table) => {
                let now = self.clock().now_ns();
                let freed = table.sweep(
                    0,
                    None,
                    true,
                    |w, since| judge.reclaimable(w, since, self.clock()),
                    || now,
                );
                let (seq, waiters) = self.futex_words(0);
                for _ in &freed {
                    futex::announce_release(seq, waiters, 1);
                }
                freed.len()
            }
            Entries::Keyed(kp) => {
                // Entries are taken over before their bits are cleared (only an entry's holder
                // changes its bit), which needs an identity of our own.
                if me == 0 {
                    return 0;
                }
                let freed = kp.reclaim(me, &mut || self.clock().now_ns(), &mut |w, since| {
                    judge.reclaimable(w, since, self.clock())
                });
                if freed > 0 {
                    for bucket in 0..FUTEX_BUCKETS {
                        let (seq, waiters) = self.futex_words(bucket);
                        futex::announce_release(seq, waiters, i32::MAX);
                    }
                }
                freed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_garbage() {
        let w = OwnerWord::held(GEN_MASK, slot::owner(3, 4));
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
