//! The permit calls the typed handles make: acquire (waiting or not, keyed or not), release by
//! id, and the inspection and reclaim of every held permit.

use super::Permits;
use crate::engine::keyed::Keyed;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::protocol::{Entries, Judge, FUTEX_BUCKETS};
use super::slot::{self, OwnerWord};
use super::PERMIT_RECHECK;
use super::{decode_id, file_tag, futex, liveness, permit_id, Permit, PermitHolder, Waited};
use crate::clock::Clock;
use crate::error::Result;

impl<C: Clock> Permits<'_, C> {
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
        if !std::ptr::eq(this, self.0) {
            return Permits(this).try_acquire_permit();
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
        if !std::ptr::eq(this, self.0) {
            return Permits(this).acquire_permit_timeout(timeout);
        }
        let (table, lease_ns) = self.permit_table()?;
        let me = self.own_identity()?;
        match self.wait_for_permit(0, timeout, || {
            let entry = self.grab(&table, lease_ns, me);
            Ok(entry.map(Some))
        })? {
            Waited::Done(permit) => Ok(permit),
            Waited::Moved(next, left) => Permits(next).acquire_permit_timeout(left),
        }
    }

    /// Try `attempt` until it grants (`Some`) or `timeout` passes, sleeping on the futex words
    /// of `tag` between attempts (woken by releases, and at least every [`PERMIT_RECHECK`]).
    ///
    /// Between attempts the replacement check runs as for decisions: once the file was
    /// replaced, the wait goes on in the new file for the time left (`Waited::Moved`).
    pub(crate) fn wait_for_permit(
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
    /// [`MAX_KEY_LEN`](crate::consts::MAX_KEY_LEN); [`Error::TableFull`] when the table is full and the
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
        if !std::ptr::eq(this, self.0) {
            return Permits(this).try_acquire_key_permit(key);
        }
        let tag = Keyed(self.0).key_tag(key)?;
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
        if !std::ptr::eq(this, self.0) {
            return Permits(this).acquire_key_permit_timeout(key, timeout);
        }
        let tag = Keyed(self.0).key_tag(key)?;
        let (kp, lease_ns) = self.keyed_permits()?;
        let me = self.own_identity()?;
        match self.wait_for_permit(tag, timeout, || {
            let got = self.grab_key(&kp, tag, lease_ns, me)?;
            self.key_outcome(&kp, got)
        })? {
            Waited::Done(permit) => Ok(permit),
            Waited::Moved(next, left) => Permits(next).acquire_key_permit_timeout(key, left),
        }
    }

    /// How many of `key`'s permits are held now (0 for a key without a slot).
    ///
    /// # Errors
    ///
    /// As [`KeyedConcurrencyLimit::try_acquire_key_permit`](crate::KeyedConcurrencyLimit::try_acquire_key_permit).
    pub(crate) fn key_permits_held(&self, key: &[u8]) -> Result<u32> {
        let tag = Keyed(self.0).key_tag(key)?;
        let (kp, _) = self.keyed_permits()?;
        kp.held(self.0, tag)
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
        self.release_permit_sampled(id, None)
    }

    /// [`Self::release_permit`]; a keyed adaptive limit's permit reports `sample` (outcome,
    /// latency ns) into its key's words as it is released.
    pub(crate) fn release_permit_sampled(
        &self,
        id: u64,
        sample: Option<(crate::algo::adaptive::Outcome, u64)>,
    ) -> Result<bool> {
        self.entries()?;
        let Some((index, gen, tag)) = decode_id(id) else {
            return Ok(false);
        };
        // The file that issued it: this handle's, or one that replaced it since.
        let mut at = self.0;
        while Permits(at).permit_tag() != tag {
            match at.moved_to() {
                Some(next) => at = next,
                None => return Ok(false),
            }
        }
        Permits(at).release_in_this_file(index, gen, sample)
    }

    /// This handle's file's tag in permit ids.
    pub(crate) fn permit_tag(&self) -> u64 {
        file_tag(self.file_id())
    }

    /// Every held permit: who holds it, for which key, since when, until when. Checks each
    /// owner's liveness (system calls), for inspection; an empty list for other kinds of limit.
    pub fn permit_holders(&self) -> Vec<PermitHolder> {
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
