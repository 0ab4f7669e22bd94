//! Keyed limits: one independent state per key (user, tenant, client address, ...) of one
//! template limit, in a lock-free open-addressing table in the file.
//!
//! # Implementation details
//!
//! The table, its lookups, claims, full-table policy, retuning and peeks are the key-table
//! engine's ([`crate::engine::keys`]; its module docs have the algorithm and why it is
//! correct). What is here is the keyed handle's side: the key's hash (SipHash-1-3 of the key
//! bytes under the file's random 128-bit seed: every process and language computes the same
//! tag, and no caller can aim keys at one slot without the seed), the operations of a keyed
//! limit, and the limit as the table's [`Template`] (its step, refund and freshness read the
//! live parameters from the control line).
//!
//! # Memory per key
//!
//! | template | per key slot | per limit |
//! |---|---|---|
//! | token bucket | 16 bytes (tag, TAT) | 128-byte control line |
//! | fixed window | 16 bytes (tag, window and count) | 128-byte control line |
//! | sliding window | 16 bytes (tag, window and two counts) | 128-byte control line |
//!
//! A table for `n` keys takes `16 x n.next_power_of_two() + 128` bytes: 262,272 bytes for 2^14
//! keys (the tests measure 16.0 file bytes per key slot). Probe windows fill before the table
//! does: with uniformly hashed keys and never-idle states, a table of 2^14 slots first refuses a
//! key at 58% load, and, offered keys without end, uses all its slots (windows overlap and wrap;
//! measured by `tests::occupancy_at_first_full_window`). Size the capacity at about twice the
//! keys that hold state at once; idle keys are reclaimed on demand.
//!
//! # Collisions
//!
//! Keys are told apart by their 63-bit tag alone; two keys with the same tag share one state
//! (they are one key to the limiter). With `k` keys live at once, the probability that any two of
//! them share a tag is at most `k (k - 1) / 2^64`: about `2^-36` (1.5e-11) for `k = 2^14` keys,
//! `2^-24` (6e-8) for `2^20`, and `2^-12` (2.4e-4) for the largest table (`2^26` keys). The hash
//! is keyed with the file's secret seed, so the probability holds for keys chosen by an adversary
//! who cannot read the file.

pub(crate) mod hash;

use crate::algo::{Decision, Step};
use crate::clock::Clock;
use crate::engine::bucket::Bucket;
use crate::engine::keys::table::{self, Outcome, Table};
use crate::engine::keys::template::{self, Template};
use crate::engine::keys::NO_PAIR_CAS;
use crate::engine::site::Site;
use crate::engine::Params;
use crate::error::{Error, Result};
use crate::file::layout::bucket;

use crate::engine::site::hot::Counts;
use crate::spec::FullPolicy;

/// Longest key, in bytes, that the keyed calls accept.
pub const MAX_KEY_LEN: usize = 1024;

#[inline(always)]
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidKey {
            reason: "a key must be at least one byte".into(),
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            reason: format!("{} bytes: keys are at most {MAX_KEY_LEN} bytes", key.len()),
        });
    }
    Ok(())
}

/// The template of a keyed limit is the limit itself: its step and refund read the live
/// parameters from the control line.
impl<C: Clock> Template for Site<C> {
    #[inline(always)]
    fn step(&self, now: u64, state: u64, cost: u64) -> Result<Step> {
        self.step_word(now, state, cost)
    }

    fn refund(&self, now: u64, state: u64, grant: &Decision, units: u64) -> Result<u64> {
        self.refund_word(now, state, grant, units)
    }

    #[inline]
    fn is_fresh(&self, now: u64, state: u64) -> bool {
        match self.params() {
            // A full bucket: `tat <= now`.
            Params::TokenBucket => self.is_fresh_word(now, state),
            // Not `is_fresh_word`: a window stored ahead of `now` still counts.
            _ => self.fresh_in(now, state) == 0,
        }
    }

    fn fresh_in(&self, now: u64, state: u64) -> u64 {
        match self.params() {
            Params::TokenBucket => template::bucket_fresh_in(now, state & !bucket::PARAM_TAG),
            Params::FixedWindow(fw) => fw.fresh_in(now, state),
            Params::SlidingWindow(sw) => sw.fresh_in(now, state),
            // A key's committed permits: fresh when none is held (when is unknowable).
            Params::Concurrency { .. } if state == 0 => 0,
            // Not keyable (refused at definition): never fresh.
            Params::SlidingLog(_) | Params::Concurrency { .. } | Params::Counters { .. } => {
                u64::MAX
            }
        }
    }

    fn blank(&self, state: u64) -> u64 {
        match self.params() {
            Params::TokenBucket => state & bucket::PARAM_TAG,
            _ => 0,
        }
    }
}

/// A keyed limit's decisions, on the limit's site (one reference, inlined away). Each call
/// names the key by its bytes (a user id, an API key, an address): every process that passes
/// the same bytes shares that key's state.
pub(crate) struct Keyed<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(Keyed);

impl<C: Clock> Keyed<'_, C> {
    /// Admit `cost` units for `key` now, or deny and consume nothing.
    ///
    /// A key seen for the first time gets a fresh state (a full bucket, empty windows); a key
    /// whose state is back to fresh may lose its slot to another key, which loses it nothing.
    /// When the table has no slot for a new key, the limit's [`FullPolicy`] decides.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("keyed.shm");
    /// use shmlimit::{FullPolicy, Keyed, Limiter, TokenBucket};
    ///
    /// let limiter = Limiter::builder()
    ///     .keyed_limit(
    ///         "per_user",
    ///         TokenBucket::per_second(10).burst(2),
    ///         Keyed::new(1 << 14).on_full(FullPolicy::Deny),
    ///     )
    ///     .create_or_open(&path)?;
    /// let per_user = limiter.keyed_token_bucket("per_user")?;
    /// assert!(per_user.try_acquire_key(b"alice", 1)?.is_allowed());
    /// assert!(per_user.try_acquire_key(b"alice", 1)?.is_allowed());
    /// assert!(per_user.try_acquire_key(b"alice", 1)?.is_denied()); // alice's burst is spent
    /// assert!(per_user.try_acquire_key(b"bob", 2)?.is_allowed()); // bob has his own
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::InvalidKey`] for an empty key or one longer than
    /// [`MAX_KEY_LEN`](crate::consts::MAX_KEY_LEN); [`Error::CostExceedsCapacity`];
    /// [`Error::TableFull`] when the table is full and the policy is [`FullPolicy::Error`];
    /// [`Error::CorruptState`]; [`Error::WrongKind`] if the limit is not keyed, or on a target
    /// without a 16-byte compare-and-swap.
    #[inline(always)]
    pub(crate) fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        self.run_key(key, cost, true, None)
    }

    /// The decision [`Keyed::try_acquire_key`] would make now, consuming nothing and inserting
    /// nothing.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("peek.shm");
    /// use std::time::Duration;
    /// use shmlimit::{FixedWindow, Keyed, Limiter};
    ///
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("per_ip", FixedWindow::new(3, Duration::from_secs(60)), Keyed::new(64))
    ///     .create_or_open(&path)?;
    /// let per_ip = limiter.keyed_window("per_ip")?;
    /// assert_eq!(per_ip.peek_key(b"10.0.0.1", 1)?.remaining(), 2);
    /// assert_eq!(per_ip.key_occupancy(), (0, 64)); // peeking inserted nothing
    /// assert!(per_ip.try_acquire_key(b"10.0.0.1", 3)?.is_allowed());
    /// assert!(per_ip.peek_key(b"10.0.0.1", 1)?.is_denied());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Keyed::try_acquire_key`].
    #[inline(always)]
    pub(crate) fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        self.run_key(key, cost, false, None)
    }

    /// [`Keyed::try_acquire_key`] dated at `now_ns` on the monotonic timeline instead of the
    /// clock (for replaying traces and for tests). Dates are checked as by
    /// [`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at): at most [`crate::consts::DATE_TOLERANCE`] ahead of the clock.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("at.shm");
    /// use shmlimit::{Clock, Keyed, Limiter, MonotonicClock, TokenBucket};
    ///
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("k", TokenBucket::per_second(1).burst(1), Keyed::new(16))
    ///     .create_or_open(&path)?;
    /// let k = limiter.keyed_token_bucket("k")?;
    /// // Replaying: dates in the past (never ahead of the clock).
    /// let t = MonotonicClock.now_ns().saturating_sub(5_000_000_000);
    /// assert!(k.try_acquire_key_at(b"a", 1, t)?.is_allowed());
    /// let denied = k.try_acquire_key_at(b"a", 1, t + 400_000_000)?;
    /// assert_eq!(denied.retry_after_ns(), 600_000_000);
    /// assert!(k.try_acquire_key_at(b"a", 1, t + 1_000_000_000)?.is_allowed());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Keyed::try_acquire_key`]; [`Error::ClockOutOfRange`] as [`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at).
    pub(crate) fn try_acquire_key_at(
        &self,
        key: &[u8],
        cost: u64,
        now_ns: u64,
    ) -> Result<Decision> {
        self.check_date(now_ns)?;
        self.run_key(key, cost, true, Some(now_ns))
    }

    /// Give back what `grant` (a decision of [`Keyed::try_acquire_key`] for the same `key`)
    /// admitted, for work that was admitted but never done.
    ///
    /// The same bounded refund as [`TokenBucketLimit::refund`](crate::TokenBucketLimit::refund): a bucket never fills past full, a window
    /// refund only applies while the grant's window is still counted. A key that lost its slot
    /// meanwhile had a fresh state, so there is nothing to give back. Refunding a denied,
    /// shadow-denied or fail-open decision is a no-op.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("refund.shm");
    /// use shmlimit::{Keyed, Limiter, TokenBucket};
    ///
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("per_user", TokenBucket::per_second(1).burst(2), Keyed::new(128))
    ///     .create_or_open(&path)?;
    /// let per_user = limiter.keyed_token_bucket("per_user")?;
    /// let grant = per_user.try_acquire_key(b"carol", 2)?;
    /// assert!(per_user.try_acquire_key(b"carol", 1)?.is_denied());
    /// per_user.refund_key(b"carol", &grant)?; // the request was never sent
    /// assert!(per_user.try_acquire_key(b"carol", 2)?.is_allowed());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::CorruptState`]; [`Error::WrongKind`] as for
    /// [`Keyed::try_acquire_key`].
    pub(crate) fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
        let maker = self.maker_of(grant);
        if !std::ptr::eq(maker, self.0) {
            return Keyed(maker).refund_key(key, grant);
        }
        self.keyed_only()?;
        let tag = self.key_tag(key)?;
        self.check_origin(grant)?;
        let slots = self.key_table().ok_or_else(|| self.refused(NO_PAIR_CAS))?;
        let units = grant.cost;
        if !grant.is_allowed() || units == 0 {
            // A shadow-denied (or fail-open) grant took nothing, but it was admitted.
            self.count_refund(grant, units);
            return Ok(());
        }
        let mut now = || self.clock().now_ns();
        Table::new(slots).refund(self.0, tag, grant, units, &mut now)?;
        self.count_refund(grant, units);
        Ok(())
    }

    /// How many of the table's slots hold a key, and how many slots it has: `(used, slots)`.
    /// `(0, 0)` for a limit that is not keyed.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("occupancy.shm");
    /// use shmlimit::{Keyed, Limiter, TokenBucket};
    ///
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("per_user", TokenBucket::per_second(5), Keyed::new(1000))
    ///     .create_or_open(&path)?;
    /// let per_user = limiter.keyed_token_bucket("per_user")?;
    /// for user in ["ann", "ben", "cy"] {
    ///     assert!(per_user.try_acquire_key(user.as_bytes(), 1)?.is_allowed());
    /// }
    /// assert_eq!(per_user.key_occupancy(), (3, 1024)); // 1000 rounded up to a power of two
    /// # Ok(()) }
    /// ```
    pub(crate) fn key_occupancy(&self) -> (usize, usize) {
        if self.def().keyed.is_none() {
            return (0, 0);
        }
        let slots = self.def().keyed.map_or(0, |k| k.slots() as usize);
        match self.key_table() {
            Some(s) => (Table::new(s).occupancy(), slots),
            None => (0, slots),
        }
    }

    /// Retire every key whose state is back to fresh (bucket full, windows over), and any
    /// pending claim a killed process left behind; returns how many keys were retired.
    ///
    /// Decisions reclaim idle slots on demand, so this is never needed for correctness: it is an
    /// explicit garbage-collection pass (the CLI's `gc`), after which [`Keyed::key_occupancy`]
    /// counts only keys that still hold state. A retired key that comes back starts fresh, which
    /// is what its state said. The pass reads every slot: it takes time in proportion to the
    /// table, and decisions go on meanwhile. Returns 0 for a limit that is not keyed.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> Result<(), shmlimit::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("gc.shm");
    /// use shmlimit::{Keyed, Limiter, ManualClock, TokenBucket};
    ///
    /// let limiter = Limiter::builder()
    ///     .keyed_limit("per_user", TokenBucket::per_second(10).burst(5), Keyed::new(64))
    ///     .clock(ManualClock::new(1_000_000_000_000))
    ///     .create_or_open(&path)?;
    /// let per_user = limiter.keyed_token_bucket("per_user")?;
    /// assert!(per_user.try_acquire_key(b"idle", 1)?.is_allowed());
    /// assert!(per_user.try_acquire_key(b"busy", 5)?.is_allowed());
    /// limiter.clock().advance(100_000_000); // 100 ms: one token back for each
    /// assert_eq!(per_user.reclaim_idle_keys(), 1); // "idle" is full again, "busy" is not
    /// assert_eq!(per_user.key_occupancy(), (1, 64));
    /// # Ok(()) }
    /// ```
    pub(crate) fn reclaim_idle_keys(&self) -> usize {
        if self.def().keyed.is_none() {
            return 0;
        }
        let Some(slots) = self.key_table() else {
            return 0;
        };
        let mut now = || self.clock().now_ns();
        Table::new(slots).reclaim_idle(self.0, &mut now)
    }

    fn keyed_only(&self) -> Result<FullPolicy> {
        match (self.def().keyed, self.params()) {
            (Some(_), Params::Concurrency { .. }) | (None, _) => Err(self.misdirected()),
            (Some(k), _) => Ok(k.on_full),
        }
    }

    /// The tag this file's key tables know `key` by: a 63-bit keyed hash of its bytes under
    /// the file's secret seed (the same in every process and language). What
    /// `Permits::permit_holders` reports as a holder's [`key_tag`](crate::PermitHolder::key_tag).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for an empty key or one longer than [`MAX_KEY_LEN`].
    pub(crate) fn key_tag(&self, key: &[u8]) -> Result<u64> {
        check_key(key)?;
        Ok(table::tag_of(hash::key_hash(self.hash_seed(), key)))
    }

    /// A keyed decision: the common cases inline ([`Table::decide_first`], the step of the
    /// template's algorithm inlined), everything else (a claim through a free slot, a full
    /// table, a lost CAS, every error) in [`Keyed::run_key_on`], which checks and decides
    /// again from the start.
    #[inline(always)]
    fn run_key(&self, key: &[u8], cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let this = Keyed(self.follow()?);
        // Every attempt reads the clock after loading the key's state (see
        // `Limit::decision_time`).
        let mut now = move || this.decision_time(at);
        if let Some(decision) = this.decide_key_first(key, cost, commit, &mut now) {
            return Ok(decision);
        }
        match this.run_key_on(key, cost, commit, &mut now) {
            Ok(d) => Ok(d.relocated()),
            Err(e) => Err(e),
        }
    }

    /// The fast path of [`Keyed::run_key`], the decision finished (counted when committed):
    /// `None` when it does not apply (a cost of zero, an invalid key, a limit that is not a
    /// keyed single-word one, no 16-byte CAS) or when [`Table::decide_first`] leaves the
    /// decision to [`Keyed::run_key_on`].
    #[inline(always)]
    fn decide_key_first(
        &self,
        key: &[u8],
        cost: u64,
        commit: bool,
        now: &mut impl FnMut() -> u64,
    ) -> Option<Decision> {
        if cost == 0 || key.is_empty() || key.len() > MAX_KEY_LEN {
            return None;
        }
        // A keyed limit has key slots; a keyed concurrency limit is not decided here.
        let table = Table::new(self.key_table()?);
        let tag = table::tag_of(hash::key_hash(self.hash_seed(), key));
        match self.params() {
            Params::TokenBucket => {
                // Counted through this thread's hot entry, as an unkeyed bucket decision.
                let mut counts = Counts::TALLY;
                let decision = table.decide_first(tag, commit, now, |t, s| {
                    Bucket(self).bucket_step(t, s, cost, &mut counts)
                })?;
                if commit
                    && !self.key_stands(
                        &table,
                        tag,
                        (decision.is_allowed(), decision.unit()),
                        cost,
                        counts.witness,
                        now,
                    )
                {
                    // Given back: `Keyed::run_key_on` decides again.
                    return None;
                }
                Some(self.finish_counted(decision, cost, commit, counts))
            }
            Params::FixedWindow(_) | Params::SlidingWindow(_) => {
                let decision =
                    table.decide_first(tag, commit, now, |t, s| self.step_fast(t, s, cost))?;
                Some(self.finish(decision, cost, commit))
            }
            Params::SlidingLog(_) | Params::Concurrency { .. } | Params::Counters { .. } => None,
        }
    }

    /// [`Table::decide`] for a key, decided again while live retunes of the bucket move on.
    ///
    /// A decision that loaded a key's word before two retunes in a row can find the parameter
    /// slot the word names being rewritten by the second (a retuner descheduled between its
    /// stores): its step reports the slot unreadable. The word is stale, not damaged: the
    /// first retune has moved every key's word to the other slot. So while the bucket's
    /// retune words (`ACTIVE` and both slots' check words) change between the start of an
    /// attempt and its failure, the decision starts again from the key's live word, as an
    /// unkeyed bucket's own loop does (bounded: 64 attempts). A damaged file, whose words do
    /// not move, is `CorruptState` at once.
    fn decide_key_again(
        &self,
        slots: &[crate::engine::keys::Slot],
        tag: u64,
        cost: u64,
        commit: bool,
        now: &mut impl FnMut() -> u64,
    ) -> Result<Outcome> {
        let mut attempts = 0;
        let bucket = matches!(self.params(), Params::TokenBucket);
        let table = Table::new(slots);
        loop {
            let before = Bucket(self).retune_words();
            // Read before the parameters are (`engine::bucket::witness`).
            let witness = crate::engine::bucket::witness(self.control_line());
            match table.decide(self.0, tag, cost, commit, now) {
                Err(Error::CorruptState { .. })
                    if attempts < 64 && bucket && Bucket(self).retune_words() != before =>
                {
                    attempts += 1;
                }
                Ok(Outcome::Decided(d))
                    if bucket
                        && commit
                        && !self.key_stands(
                            &table,
                            tag,
                            (d.is_allowed(), d.unit()),
                            cost,
                            witness,
                            now,
                        ) =>
                {
                    if attempts >= 64 {
                        return Err(self.fault(crate::algo::Fault::Corrupt));
                    }
                    attempts += 1;
                }
                outcome => return outcome,
            }
        }
    }

    /// Whether a committed keyed bucket decision stands: a denial always; an admission while
    /// `ACTIVE` still reads `witness` (no parameter slot rewritten since its parameters were
    /// read, see `engine::bucket`), else it is given back to the key (and the caller decides
    /// again).
    #[inline(always)]
    fn key_stands(
        &self,
        table: &Table<'_, crate::engine::keys::Slot>,
        tag: u64,
        (allowed, unit): (bool, u64),
        cost: u64,
        witness: u64,
        now: &mut impl FnMut() -> u64,
    ) -> bool {
        !allowed
            // `engine::bucket::unchanged` (Relaxed, as there), through the unchecked accessor.
            || self.control(bucket::ACTIVE).load(std::sync::atomic::Ordering::Relaxed) == witness
            || {
                self.give_back_key(table, tag, cost.saturating_mul(unit), now);
                false
            }
    }

    /// Give back `units_ns` of a bucket admission to the key `tag` (see
    /// [`crate::engine::bucket::give_back`]).
    #[cold]
    #[inline(never)]
    fn give_back_key(
        self,
        table: &Table<'_, crate::engine::keys::Slot>,
        tag: u64,
        units_ns: u64,
        now: &mut impl FnMut() -> u64,
    ) {
        // Infallible: the change is arithmetic on the word.
        let _ = table.update_key(tag, now, |now, state| {
            Ok(crate::engine::bucket::given_back(now, state, units_ns))
        });
    }

    /// A keyed decision from the start, with every check: what [`Keyed::run_key`] does not
    /// decide inline.
    #[inline(never)]
    fn run_key_on(
        self,
        key: &[u8],
        cost: u64,
        commit: bool,
        mut now: impl FnMut() -> u64,
    ) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        let on_full = self.keyed_only()?;
        let tag = self.key_tag(key)?;
        let slots = self.key_table().ok_or_else(|| self.refused(NO_PAIR_CAS))?;
        let decision = match self.decide_key_again(slots, tag, cost, commit, &mut now)? {
            Outcome::Decided(d) => d,
            Outcome::Full { fresh_in_ns } => {
                let capacity = self.capacity();
                if cost > capacity {
                    return Err(Error::CostExceedsCapacity { cost, capacity });
                }
                match on_full {
                    FullPolicy::Deny => {
                        let retry = if fresh_in_ns == 0 || fresh_in_ns == u64::MAX {
                            1_000_000_000
                        } else {
                            fresh_in_ns
                        };
                        Decision::denied(retry, 0, 1)
                    }
                    FullPolicy::Allow => {
                        let mut d = self.finish(Decision::allowed(0, 1), cost, commit);
                        d.cost = 0; // nothing was recorded: a refund of it gives nothing back
                        return Ok(d);
                    }
                    FullPolicy::Error => {
                        return Err(Error::TableFull {
                            limit: self.name().to_owned(),
                        })
                    }
                }
            }
        };
        Ok(self.finish(decision, cost, commit))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
