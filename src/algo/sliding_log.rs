//! Exact sliding log: at most `L` admissions in every interval `(t - W, t]`.
//!
//! # Implementation details
//!
//! The log is a ring of `L` entry words and one head word, all in the mapped file:
//!
//! ```text
//! head:   63          32 31           0        entry:  63   49  48   47                  0
//!        +--------------+--------------+             +-------+------+----------------------+
//!        |  lap (u32)   | index < L    |             | lap15 | freed| time / 1024 ns (48)  |
//!        +--------------+--------------+             +-------+------+----------------------+
//! ```
//!
//! Claims are numbered in commit order; claim `c` lives in entry `c mod L`, written during head lap
//! `c / L` and tagged with entry lap `(c / L + 1) mod 2^15`. So the entry at the head index holds
//! either the claim `L` back (tag `lap mod 2^15`: the oldest admission still recorded), or, if the
//! head lags, a claim already made at this lap (tag `lap + 1`: help advance the head and retry).
//! A zero-filled ring is a valid empty log.
//!
//! One decision of cost 1:
//!
//! 1. read the head `(lap, i)` and entry `i`;
//! 2. date the decision `t = max(now, time of entry i - 1)`, so dates never decrease in commit
//!    order whatever clock read a process had;
//! 3. if entry `i` is neither freed nor expired (`time + W > t`), deny: retry after
//!    `time + W - now`;
//! 4. otherwise CAS entry `i` to `(lap + 1, t)` rounded *up* to the 1024 ns unit. **That CAS is the
//!    commit.** Then CAS the head to the next index; failure means someone helped, and a process
//!    killed between the two CASes costs nothing, because the next decider advances the head.
//!
//! **Why it is exact.** Claim `c` commits only after claim `c - L` was expired (or freed) at
//! claim `c`'s date, and dates are non-decreasing in commit order; by induction every claim
//! `<= c - L` is expired at `c`'s date, so an interval `(t - W, t]` ending at any admission holds at
//! most the `L` claims `c - L + 1 ..= c`. Recording a date rounded up to 1024 ns can only make an
//! entry expire later: stricter, never looser. Identical timestamps are distinct entries.
//!
//! A cost `n > 1` first checks that the `n` oldest entries are all free, then claims `n` entries one
//! by one; if another process takes one first and the log fills, the entries already claimed are
//! marked freed (their time is kept for dating) and the decision is denied: strict, never
//! over-admitting. Freed entries count as expired when they reach the head, so `k` units freed
//! behind a live entry stay unusable until the entries ahead of them expire: at most `W`.
//! (Only a cost above 1 that loses a race after claiming part of its cost does this.)
//!
//! Decisions are O(1) in `L`: the ring is never scanned. `remaining` is found by a galloping search
//! from the head over the (time-ordered) entries, O(log L) loads, one when the log is full.

use std::sync::atomic::Ordering;

use super::{Decision, Fault};
use crate::sync::AtomicWord;

/// Bits of time precision dropped in an entry: times are stored in units of 1024 ns.
pub(crate) const TIME_SHIFT: u32 = 10;
pub(crate) const TIME_MASK: u64 = (1 << 48) - 1;
pub(crate) const FREED: u64 = 1 << 48;
const LAP_SHIFT: u32 = 49;
const LAP_MASK: u64 = 0x7FFF;
/// The longest window: keeps `time + W` far from overflow.
pub(crate) const MAX_WINDOW_NS: u64 = 1 << 60;

/// Parameters of one sliding log, copied into process memory at attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlidingLog {
    /// `L`, also the number of entries in the ring.
    pub limit: u64,
    pub window_ns: u64,
}

/// An entry's time in 1024 ns units and its other bits (lap tag, freed), for the reboot
/// translation, which moves the time and keeps the rest.
pub(crate) fn split_entry(entry: u64) -> (u64, u64) {
    (entry & TIME_MASK, entry & !TIME_MASK)
}

/// The entry of [`split_entry`]'s parts.
pub(crate) fn join_entry(units: u64, rest: u64) -> u64 {
    (units & TIME_MASK) | (rest & !TIME_MASK)
}

#[inline(always)]
fn entry_time_ns(entry: u64) -> u64 {
    (entry & TIME_MASK) << TIME_SHIFT
}

#[inline(always)]
fn entry_lap(entry: u64) -> u64 {
    entry >> LAP_SHIFT
}

/// A grant's stamp with this bit set is a date (in log units): the grant of a cost above 1,
/// refunded by freeing the oldest entries dated no later. Without it, the stamp names the one
/// entry a cost-1 grant claimed (see [`claim_id`]), refunded exactly.
const DATE_STAMP: u64 = 1 << 63;

/// The entry a cost-1 claim wrote, as a stamp: index (24 bits), lap tag (15 bits) and the low 24
/// bits of the time. A refund frees that entry only while it still holds this claim.
fn claim_id(index: usize, value: u64) -> u64 {
    (index as u64 & 0xFF_FFFF) | (entry_lap(value) << 24) | ((value & 0xFF_FFFF) << 39)
}

/// The outcome of one attempt to claim an entry.
enum Claim {
    /// Entry `index` now holds `value`.
    Made { index: usize, value: u64, date: u64 },
    /// The peek would have claimed.
    Possible { index: usize, date: u64 },
    /// The oldest entry is still inside the window; the newest one leaves it after `reset_ns`.
    Full { retry_after_ns: u64, reset_ns: u64 },
}

impl SlidingLog {
    #[inline(always)]
    fn next_head(&self, head: u64) -> u64 {
        let index = head & 0xFFFF_FFFF;
        if index + 1 >= self.limit {
            ((head >> 32).wrapping_add(1) & 0xFFFF_FFFF) << 32
        } else {
            head + 1
        }
    }

    #[inline(always)]
    fn prev_index(&self, index: usize) -> usize {
        if index == 0 {
            self.limit as usize - 1
        } else {
            index - 1
        }
    }

    /// An entry holds no admission inside the window ending at `date`: freed, never used (time
    /// 0, which no claim records, since dates are rounded up to a whole unit), or expired.
    #[inline(always)]
    fn is_free(&self, entry: u64, date: u64) -> bool {
        entry & TIME_MASK == 0
            || entry & FREED != 0
            || entry_time_ns(entry) + self.window_ns <= date
    }

    /// One claim attempt loop: returns once the head entry is claimed or found in the window.
    #[inline(always)]
    fn claim<A: AtomicWord>(
        &self,
        head: &A,
        entries: &[A],
        now: &mut impl FnMut() -> u64,
        commit: bool,
    ) -> Result<Claim, Fault> {
        let mut stuck = 0u32;
        loop {
            // Acquire: pairs with the AcqRel head CAS, so the entries it covers are visible.
            let h = head.load(Ordering::Acquire);
            let index = (h & 0xFFFF_FFFF) as usize;
            if index >= entries.len() {
                return Err(Fault::Corrupt);
            }
            let lap = (h >> 32) & LAP_MASK;
            let claim_lap = (lap + 1) & LAP_MASK;
            // Acquire: pairs with the AcqRel entry CAS that committed the claim.
            let entry = entries[index].load(Ordering::Acquire);
            let tag = entry_lap(entry);
            if tag == claim_lap {
                // Claimed at this lap already; the head lags. Help it and retry.
                let _ = head.compare_exchange(
                    h,
                    self.next_head(h),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                continue;
            }
            if tag != lap {
                // Either our head read is stale (retry) or the ring is damaged (fail closed).
                if head.load(Ordering::Acquire) != h {
                    continue;
                }
                stuck += 1;
                if stuck > 2 {
                    return Err(Fault::Corrupt);
                }
                continue;
            }
            // Acquire: the previous claim's entry, for dating (committed before the head moved).
            let newest = entries[self.prev_index(index)].load(Ordering::Acquire);
            let read = now();
            let date = read.max(entry_time_ns(newest));
            if !self.is_free(entry, date) {
                let until = entry_time_ns(entry) + self.window_ns;
                // A refunded newest entry no longer counts: the oldest live one bounds the reset.
                let newest_until = if self.is_free(newest, read) {
                    until
                } else {
                    entry_time_ns(newest) + self.window_ns
                };
                return Ok(Claim::Full {
                    retry_after_ns: until - read.min(until),
                    reset_ns: newest_until - read.min(newest_until),
                });
            }
            if !commit {
                return Ok(Claim::Possible { index, date });
            }
            // At least one unit: time 0 marks a never-used entry, so a claim dated 0 ns (a
            // clock at its origin) is recorded as the first unit.
            let units = date.div_ceil(1 << TIME_SHIFT).max(1);
            if units > TIME_MASK {
                return Err(Fault::ClockRange(read));
            }
            let value = (claim_lap << LAP_SHIFT) | units;
            // AcqRel: publishes the claim; the commit point of the admission.
            if entries[index]
                .compare_exchange(entry, value, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // AcqRel: whoever sees the new head sees our entry. Failure: someone helped.
                let _ = head.compare_exchange(
                    h,
                    self.next_head(h),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                return Ok(Claim::Made { index, value, date });
            }
        }
    }

    /// How long after `date` the entry `value` leaves the window, at most `W`: entries are
    /// dated in units of 1024 ns rounded up, so an admission at `date` is stored up to 1023 ns
    /// later, and a reset of `W` plus those few nanoseconds would read as one more second in a
    /// `RateLimit` header.
    #[inline(always)]
    fn expires_in(&self, value: u64, date: u64) -> u64 {
        let until = entry_time_ns(value) + self.window_ns;
        (until - date.min(until)).min(self.window_ns)
    }

    /// Entries after `index` (in ring order) that are free at `date`: what remains after a claim
    /// at `index`. Galloping search over the time-ordered entries.
    fn free_after<A: AtomicWord>(&self, entries: &[A], index: usize, date: u64) -> u64 {
        let len = self.limit as usize;
        let at = |j: usize| {
            let pos = index + j;
            let pos = if pos >= len { pos - len } else { pos };
            // Relaxed: an estimate for `remaining`; no decision depends on it.
            self.is_free(entries[pos].load(Ordering::Relaxed), date)
        };
        // Find the first j in 1..len whose entry is not free; entries 1..j are free.
        let (mut lo, mut hi) = (0usize, 1usize);
        while hi < len && at(hi) {
            lo = hi;
            hi = (hi * 2).min(len);
        }
        // Invariant: lo is free (or 0), hi is not free (or len).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if at(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo as u64
    }

    /// Decide a cost `n` (`1 <= n <= L`, checked by the caller); `commit == false` is a peek.
    pub fn acquire<A: AtomicWord>(
        &self,
        head: &A,
        entries: &[A],
        mut now: impl FnMut() -> u64,
        n: u64,
        commit: bool,
    ) -> Result<Decision, Fault> {
        if entries.len() as u64 != self.limit || self.limit == 0 {
            return Err(Fault::Corrupt);
        }
        if n == 1 {
            return Ok(match self.claim(head, entries, &mut now, commit)? {
                Claim::Made { index, value, date } => {
                    Decision::allowed(self.free_after(entries, index, date), 1)
                        .stamped(claim_id(index, value))
                        .of(self.limit)
                        .resetting(self.expires_in(value, date))
                }
                Claim::Possible { index, date } => {
                    Decision::allowed(self.free_after(entries, index, date), 1)
                        .of(self.limit)
                        .resetting(self.window_ns)
                }
                Claim::Full {
                    retry_after_ns,
                    reset_ns,
                } => Decision::denied(retry_after_ns, 0, 1).resetting(reset_ns),
            });
        }
        // Check the n oldest entries first, so a cost that cannot fit claims nothing.
        if let Some(denied) = self.check_oldest(head, entries, &mut now, n)? {
            return Ok(denied);
        }
        if !commit {
            let h = head.load(Ordering::Acquire);
            let index = (h & 0xFFFF_FFFF) as usize % entries.len();
            let last = (index + n as usize - 1) % entries.len();
            let date = now();
            return Ok(Decision::allowed(self.free_after(entries, last, date), 1)
                .of(self.limit)
                .resetting(self.window_ns));
        }
        let mut made: Vec<(usize, u64)> = Vec::with_capacity(n as usize);
        loop {
            match self.claim(head, entries, &mut now, true) {
                Ok(Claim::Made { index, value, date }) => {
                    made.push((index, value));
                    if made.len() as u64 == n {
                        return Ok(Decision::allowed(self.free_after(entries, index, date), 1)
                            .stamped(DATE_STAMP | date.div_ceil(1 << TIME_SHIFT).max(1))
                            .of(self.limit)
                            .resetting(self.expires_in(value, date)));
                    }
                }
                Ok(Claim::Full {
                    retry_after_ns,
                    reset_ns,
                }) => {
                    self.free(entries, &made);
                    return Ok(Decision::denied(retry_after_ns, 0, 1).resetting(reset_ns));
                }
                Ok(Claim::Possible { .. }) => unreachable!("claim with commit never only peeks"),
                Err(fault) => {
                    self.free(entries, &made);
                    return Err(fault);
                }
            }
        }
    }

    /// Deny early when the `n` oldest entries are not all free; `None` means they are.
    fn check_oldest<A: AtomicWord>(
        &self,
        head: &A,
        entries: &[A],
        now: &mut impl FnMut() -> u64,
        n: u64,
    ) -> Result<Option<Decision>, Fault> {
        let h = head.load(Ordering::Acquire);
        let index = (h & 0xFFFF_FFFF) as usize;
        if index >= entries.len() {
            return Err(Fault::Corrupt);
        }
        let read = now();
        let len = entries.len();
        let mut wait = 0u64;
        let mut free = 0u64;
        for j in 0..n as usize {
            let pos = (index + j) % len;
            // Acquire: pairs with the claim CAS; a stale value only makes the pre-check stricter
            // or lets the claims below find the truth.
            let e = entries[pos].load(Ordering::Acquire);
            if self.is_free(e, read) {
                free += 1;
            } else {
                let until = entry_time_ns(e) + self.window_ns;
                wait = wait.max(until - read.min(until));
            }
        }
        if free >= n {
            return Ok(None);
        }
        // Acquire: as above; the entry before the head is the newest admission.
        let newest = entries[self.prev_index(index)].load(Ordering::Acquire);
        let reset = if self.is_free(newest, read) {
            0
        } else {
            self.expires_in(newest, read)
        };
        Ok(Some(Decision::denied(wait, free, 1).resetting(reset)))
    }

    /// Give back `n` admissions dated `stamp` (log units) or earlier: frees the *oldest* `n`
    /// entries still inside the window at `now` whose time is at most `stamp`, scanning forward
    /// from the head. The log then holds, instead of the refunded admission, one dated no
    /// earlier; at every future instant it counts at least as many admissions as it would had
    /// the refunded one never happened, so a refund never creates budget. Freeing from the head
    /// makes the budget available at once. Returns how many entries were freed.
    pub fn refund<A: AtomicWord>(
        &self,
        head: &A,
        entries: &[A],
        now: u64,
        stamp: u64,
        n: u64,
    ) -> u64 {
        if stamp & DATE_STAMP == 0 {
            return self.refund_claim(entries, now, stamp);
        }
        let stamp = stamp & !DATE_STAMP;
        let len = entries.len();
        let mut freed = 0;
        let mut attempts = 0;
        while freed < n && attempts < 4 * n + 8 {
            attempts += 1;
            // Acquire: pairs with the head CAS, so entries before it are visible. Re-read for
            // every unit: freeing from the current head (not a stale one) frees the entry the
            // next claim reuses, instead of one just claimed behind the head.
            let h = head.load(Ordering::Acquire);
            let index = (h & 0xFFFF_FFFF) as usize;
            if index >= len {
                return freed;
            }
            let mut found = None;
            for j in 0..len {
                let pos = if index + j >= len {
                    index + j - len
                } else {
                    index + j
                };
                // Acquire: pairs with the claim CAS of the entry.
                let e = entries[pos].load(Ordering::Acquire);
                if e & FREED != 0 || self.is_free(e, now) {
                    continue;
                }
                if e & TIME_MASK > stamp {
                    break; // time-ordered from the head: nothing older is left to give back
                }
                found = Some((pos, e));
                break;
            }
            let Some((pos, e)) = found else {
                return freed;
            };
            // AcqRel: the freed mark is seen by the next claimer of this entry. Failure: the entry
            // changed (reused, or freed by someone else): look again.
            if entries[pos]
                .compare_exchange(e, e | FREED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                freed += 1;
            }
        }
        freed
    }

    /// Free exactly the entry a cost-1 grant claimed, if it still holds that claim and is still
    /// inside the window (otherwise there is nothing left to give back).
    fn refund_claim<A: AtomicWord>(&self, entries: &[A], now: u64, id: u64) -> u64 {
        let index = (id & 0xFF_FFFF) as usize;
        let Some(entry) = entries.get(index) else {
            return 0;
        };
        // Acquire: pairs with the claim CAS of the entry.
        let e = entry.load(Ordering::Acquire);
        let ours = entry_lap(e) == (id >> 24) & LAP_MASK && e & 0xFF_FFFF == id >> 39;
        if !ours || e & FREED != 0 || self.is_free(e, now) {
            return 0;
        }
        // AcqRel: the freed mark is seen by the next claimer. Failure: reused or already freed.
        u64::from(
            entry
                .compare_exchange(e, e | FREED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
        )
    }

    /// Mark claims made by this call as freed, keeping their time for dating.
    fn free<A: AtomicWord>(&self, entries: &[A], made: &[(usize, u64)]) {
        for &(index, value) in made {
            // AcqRel: the refund is visible to whoever next claims over it. Failure: the entry
            // has already been reused after expiring, so there is nothing left to free.
            let _ = entries[index].compare_exchange(
                value,
                value | FREED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn ring(l: usize) -> (AtomicU64, Vec<AtomicU64>) {
        (
            AtomicU64::new(0),
            (0..l).map(|_| AtomicU64::new(0)).collect(),
        )
    }

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn boundary_burst_admits_only_the_limit() {
        let log = SlidingLog {
            limit: 100,
            window_ns: 60 * SEC,
        };
        let (head, entries) = ring(100);
        let base = 1_000 * SEC;
        let last = base + 60 * SEC - 1;
        let mut admitted = 0;
        for _ in 0..100 {
            let d = log.acquire(&head, &entries, || last, 1, true).unwrap();
            admitted += d.is_allowed() as u32;
        }
        for _ in 0..100 {
            let d = log.acquire(&head, &entries, || last + 1, 1, true).unwrap();
            admitted += d.is_allowed() as u32;
        }
        assert_eq!(admitted, 100);
        let d = log.acquire(&head, &entries, || last + 1, 1, true).unwrap();
        assert!(d.is_denied());
        // The oldest entry expires W after it was recorded (rounded up to 1024 ns).
        assert!(d.retry_after_ns() >= 60 * SEC - 1 && d.retry_after_ns() <= 60 * SEC + 1024);
    }

    #[test]
    fn identical_timestamps_are_distinct() {
        let log = SlidingLog {
            limit: 5,
            window_ns: SEC,
        };
        let (head, entries) = ring(5);
        let t = 77 * SEC;
        let results: Vec<bool> = (0..8)
            .map(|_| {
                log.acquire(&head, &entries, || t, 1, true)
                    .unwrap()
                    .is_allowed()
            })
            .collect();
        assert_eq!(results, [true, true, true, true, true, false, false, false]);
        // One window later all five have expired.
        let d = log
            .acquire(&head, &entries, || t + SEC + 1024, 1, true)
            .unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 4);
    }

    #[test]
    fn cost_n_is_all_or_nothing() {
        let log = SlidingLog {
            limit: 4,
            window_ns: SEC,
        };
        let (head, entries) = ring(4);
        let t = 5 * SEC;
        assert!(log
            .acquire(&head, &entries, || t, 3, true)
            .unwrap()
            .is_allowed());
        let d = log.acquire(&head, &entries, || t, 2, true).unwrap();
        assert!(d.is_denied());
        assert_eq!(d.remaining(), 1);
        assert!(log
            .acquire(&head, &entries, || t, 1, true)
            .unwrap()
            .is_allowed());
        assert!(log
            .acquire(&head, &entries, || t, 1, true)
            .unwrap()
            .is_denied());
    }

    #[test]
    fn remaining_counts_expired_entries() {
        let log = SlidingLog {
            limit: 10,
            window_ns: SEC,
        };
        let (head, entries) = ring(10);
        for k in 0..10u64 {
            let d = log
                .acquire(&head, &entries, || 10 * SEC + k * SEC / 10, 1, true)
                .unwrap();
            assert_eq!(d.remaining(), 9 - k);
        }
        // At t = 11.55 s the entries dated 10.0 .. 10.5 have expired: 6 free (one used now).
        let d = log
            .acquire(&head, &entries, || 11 * SEC + SEC / 2 + SEC / 20, 1, true)
            .unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 5);
    }

    #[test]
    fn stale_clock_is_dated_after_newest() {
        let log = SlidingLog {
            limit: 2,
            window_ns: SEC,
        };
        let (head, entries) = ring(2);
        assert!(log
            .acquire(&head, &entries, || 10 * SEC, 1, true)
            .unwrap()
            .is_allowed());
        // A stale reader at 9 s is dated 10 s: dates never decrease in commit order.
        assert!(log
            .acquire(&head, &entries, || 9 * SEC, 1, true)
            .unwrap()
            .is_allowed());
        assert_eq!(entry_time_ns(entries[1].load(Ordering::Relaxed)), 10 * SEC);
        assert!(log
            .acquire(&head, &entries, || 10 * SEC + SEC / 2, 1, true)
            .unwrap()
            .is_denied());
    }

    #[test]
    fn fresh_log_is_empty_even_when_the_window_is_longer_than_uptime() {
        let year = 365 * 86_400 * SEC;
        let log = SlidingLog {
            limit: 3,
            window_ns: 10 * year,
        };
        let (head, entries) = ring(3);
        let now = 60 * SEC; // a machine booted a minute ago
        for _ in 0..3 {
            assert!(log
                .acquire(&head, &entries, || now, 1, true)
                .unwrap()
                .is_allowed());
        }
        let d = log.acquire(&head, &entries, || now, 1, true).unwrap();
        assert!(d.is_denied());
        assert!(d.retry_after_ns() >= 10 * year - 1024);
    }

    #[test]
    fn damaged_head_fails_closed() {
        let log = SlidingLog {
            limit: 3,
            window_ns: SEC,
        };
        let (head, entries) = ring(3);
        head.store(7, Ordering::Relaxed);
        assert_eq!(
            log.acquire(&head, &entries, || SEC, 1, true),
            Err(Fault::Corrupt)
        );
        head.store(0, Ordering::Relaxed);
        entries[0].store(0x1234 << LAP_SHIFT, Ordering::Relaxed);
        assert_eq!(
            log.acquire(&head, &entries, || SEC, 1, true),
            Err(Fault::Corrupt)
        );
    }
}
