//! One key's moving-window log: `L` entries of 16 bytes, `(tag, timestamp)`, each replaced
//! whole by a 16-byte CAS ([`PairWord`]).
//!
//! # Implementation details
//!
//! A key's log is the first `L` entries (its limit) of the block of its key slot. An entry
//! holds one admitted unit: the key's tag and the monotonic time of the decision. An entry is
//! *live* for the key at `t` if it carries the key's tag and its time is inside the window,
//! `ts > t - W`; anything else (another key's entry left in the block by a previous owner of
//! the slot, an expired one, the empty entry `(0, 0)`) is *free*.
//!
//! **Admission of `n` at `t`**: `live + n <= L` is `free >= n`, so one pass over the entries
//! claims each free one it meets, one CAS each, `free -> (tag, t)`, until it holds `n`, and
//! counts the live ones (for the remaining budget). Whatever interleaves, at most `L` entries
//! exist, so at most `L` units are ever live in any window `(t - W, t]` (in decision times):
//! the bound holds by construction, with no word to keep in step with the entries. A pass that
//! claimed fewer than `n` (not enough free entries, or others claimed them meanwhile) gives
//! back the entries it claimed, each by a CAS from exactly what it wrote to exactly what it
//! found there, and denies (the retry-after is the time until enough live entries expire): for
//! an instant those entries looked live to others (transiently strict), never admitted.
//!
//! **Ring order.** Any free entry may be claimed (the bound needs nothing more), so the pass claims
//! them in an order that keeps the key's entries sorted by time around the block: it starts at the
//! *head*, the oldest entry, and goes round. Admissions then write `head, head + 1, ...` with
//! rising times, so the block reads as one rotated sorted sequence (an entry free for the key
//! counting as time 0, older than all): the head is where the times drop, found by a binary search
//! ([`head`]), and the entries that expired come first from the head, so the first live one is
//! found by a binary search too ([`expired_from`]). An admission reads `O(log L)` entries and
//! claims from the head; a read of the window ([`window`]) reads `O(log L)` entries. Only a denial
//! (the head entry is live: so, in order, every entry) reads the whole log, which also makes its
//! retry-after exact.
//!
//! Order is what the searches *assume*, not what the bound rests on. Decisions racing on one key
//! can land their times out of order by the width of the race (two processes read the same head;
//! the later clock reading may claim the earlier entry), and a file written by a build that claimed
//! the first free entry has no order at all: then the head found is some entry, the claim pass
//! still goes round the whole block if it must (so admissions and denials stay exact), and only the
//! counts the searches return (the `remaining` of an admission, the count of a read) are estimates,
//! off by the entries out of place.
//!
//! **Crashes.** A process killed before its first claim wrote nothing. One killed between the
//! claims of a multi-unit admission leaves the entries it claimed live until they expire (at
//! most `W`): strict for that long, never over. A single unit is one CAS.
//!
//! **The key's slot.** The block belongs to a key slot of the log table whose state word is a
//! deadline, the latest `t + W` of the key's admissions; an admission raises it (with the same
//! `t`) before it claims entries, so a slot is only reclaimed for another key ([`super`]) once
//! every entry its key could claim at a `t` it has read is expired, and an entry written late
//! by a process descheduled past its own deadline is expired (and, in another key's block,
//! foreign) the moment it lands.

use crate::engine::keys::pair::PairWord;

/// What one admission came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// `n` entries now hold the key's tag and the decision's time.
    Admitted {
        /// Live entries after the admission (its own included).
        live: u64,
    },
    /// Nothing was written (or everything written was given back).
    Denied {
        /// Nanoseconds until enough entries expire (0: lost to concurrent claims).
        retry_after_ns: u64,
        /// Live entries seen.
        live: u64,
    },
}

#[inline(always)]
fn live(e: (u64, u64), tag: u64, t: u64, window_ns: u64) -> bool {
    // `ts > t - W`, for a clock still inside the first window too.
    e.0 == tag && (t < window_ns || e.1 > t - window_ns)
}

/// An entry's time in the ring order: the key's entries by their time, anything free for the
/// key (another key's entry, the empty one) as 0, older than every admission.
#[inline(always)]
fn time_of(e: (u64, u64), tag: u64) -> u64 {
    if e.0 == tag {
        e.1
    } else {
        0
    }
}

/// The entry at `i` places after `start`, round the block.
#[inline(always)]
fn at<P: PairWord>(entries: &[P], start: usize, i: usize) -> (u64, u64) {
    let j = start + i;
    let j = if j >= entries.len() {
        j - entries.len()
    } else {
        j
    };
    entries[j].load()
}

/// The head of the log: where the times of a block in ring order drop (its oldest entry), 0
/// when they never do. Entries `1..` of a block in ring order read: times equal to the first
/// entry's, larger ones, smaller ones (those before the first entry in the order), equal ones
/// again (same-time admissions: a cost above one, or one clock reading); so the trailing equal
/// ones are skipped (one read where there are none), then a binary search finds the first
/// smaller one. Exact for a block in ring order, some entry otherwise (see "Ring order").
pub(crate) fn head<P: PairWord>(entries: &[P], tag: u64) -> usize {
    let len = entries.len();
    if len < 2 {
        return 0;
    }
    let first = time_of(entries[0].load(), tag);
    if first == 0 && time_of(entries[len - 1].load(), tag) == 0 {
        // Free at both ends: in ring order the free entries are one run, so every entry is
        // free (a new key's block, or one cleared), and the first one is as good as any.
        return 0;
    }
    let mut end = len;
    while end > 1 && time_of(entries[end - 1].load(), tag) == first {
        end -= 1;
    }
    if end == 1 {
        // Every entry at one time: any may be the head.
        return 0;
    }
    let (mut lo, mut hi) = (1, end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if time_of(entries[mid].load(), tag) < first {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    match lo {
        // The first smaller one.
        lo if lo < end => lo,
        // None smaller: the trailing equal ones lead (or, with none, the first entry does).
        _ if end < len => end,
        _ => 0,
    }
}

/// Of the `len` entries from `start` round the block, how many come before the first live
/// one (all `len` when none is live). A binary search: in ring order the entries that expired
/// (or are free) come first.
pub(crate) fn expired_from<P: PairWord>(
    entries: &[P],
    start: usize,
    len: usize,
    tag: u64,
    t: u64,
    window_ns: u64,
) -> usize {
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if live(at(entries, start, mid), tag, t, window_ns) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The key's live entries at `t`: `(count, oldest time among them)`, `(0, u64::MAX)` when
/// none is live. Two binary searches (exact for a block in ring order, see "Ring order"); if
/// the entry found first is not live after all (the block is out of order), one pass counts.
pub(crate) fn window<P: PairWord>(entries: &[P], tag: u64, t: u64, window_ns: u64) -> (u64, u64) {
    let len = entries.len();
    let start = head(entries, tag);
    let skip = expired_from(entries, start, len, tag, t, window_ns);
    if skip == len {
        return (0, u64::MAX);
    }
    let oldest = at(entries, start, skip);
    if live(oldest, tag, t, window_ns) {
        return ((len - skip) as u64, oldest.1);
    }
    let (mut n, mut oldest) = (0, u64::MAX);
    for e in entries {
        let e = e.load();
        if live(e, tag, t, window_ns) {
            n += 1;
            oldest = oldest.min(e.1);
        }
    }
    (n, oldest)
}

/// The time until `need` more of the key's live entries expire at `t`.
fn wait_for<P: PairWord>(entries: &[P], tag: u64, t: u64, window_ns: u64, need: u64) -> u64 {
    let mut times: Vec<u64> = entries
        .iter()
        .map(|e| e.load())
        .filter(|&e| live(e, tag, t, window_ns))
        .map(|e| e.1)
        .collect();
    times.sort_unstable();
    let Some(&ts) = times.get(need.saturating_sub(1) as usize) else {
        return 0;
    };
    (ts + window_ns).saturating_sub(t).max(1)
}

/// Admit `n` units for the key `tag` at `t` in a window of `window_ns`, in `entries` (its
/// limit's worth: `n <= entries.len()`, checked by the caller).
///
/// One pass round the block from its [`head`]: every free entry met is claimed until `n` are,
/// and every live one counted (the admission needs `n` free entries of `L`, which is
/// `live + n <= L`). Once `n` are claimed, the live entries of the rest of the block are
/// counted by [`expired_from`]. A pass that went round and claimed fewer than `n` gives them
/// back and denies.
pub(crate) fn acquire<P: PairWord>(
    entries: &[P],
    tag: u64,
    t: u64,
    window_ns: u64,
    n: u64,
) -> Taken {
    let len = entries.len();
    let limit = len as u64;
    let mine = (tag, t);
    // The entries claimed, with what each held: on the stack for the usual costs.
    let mut few = [(0usize, (0u64, 0u64)); 8];
    let mut many: Vec<(usize, (u64, u64))> = Vec::new();
    let mut claimed = 0u64;
    let mut seen = 0u64;
    // The oldest live entry met: the retry-after of a denial that needs one to expire.
    let mut oldest = u64::MAX;
    let start = head(entries, tag);
    for i in 0..len {
        let j = if start + i >= len {
            start + i - len
        } else {
            start + i
        };
        let entry = &entries[j];
        let mut e = entry.load();
        loop {
            if live(e, tag, t, window_ns) {
                seen += 1;
                oldest = oldest.min(e.1);
                break;
            }
            // A free entry is claimed; a CAS lost to another decision looks again at what won.
            match entry.cas(e, mine) {
                Ok(()) => {
                    if claimed < few.len() as u64 {
                        few[claimed as usize] = (j, e);
                    } else {
                        many.push((j, e));
                    }
                    claimed += 1;
                    break;
                }
                Err(found) => e = found,
            }
        }
        if claimed == n {
            // Admitted. The rest of the block, in ring order, holds its expired entries first.
            let rest = len - i - 1;
            let next = if j + 1 == len { 0 } else { j + 1 };
            seen += (rest - expired_from(entries, next, rest, tag, t, window_ns)) as u64;
            return Taken::Admitted { live: seen + n };
        }
    }
    // Fewer than `n` free entries: give back what this call claimed (each entry holds what
    // this call wrote until it expires; no other decision writes a live entry).
    let taken = few.iter().take(claimed as usize).chain(many.iter());
    for &(i, was) in taken {
        let _ = entries[i].cas(mine, was);
    }
    Taken::Denied {
        retry_after_ns: match (seen + n).saturating_sub(limit) {
            // The pass went round: `oldest` is the oldest live entry of the whole log.
            1 => oldest.saturating_add(window_ns).saturating_sub(t).max(1),
            need => wait_for(entries, tag, t, window_ns, need),
        },
        live: seen,
    }
}

/// Free every entry of the key `tag` (a clear); returns how many were.
pub(crate) fn clear<P: PairWord>(entries: &[P], tag: u64) -> u64 {
    let mut freed = 0;
    for entry in entries {
        let mut e = entry.load();
        while e.0 == tag {
            match entry.cas(e, (0, 0)) {
                Ok(()) => {
                    freed += 1;
                    break;
                }
                Err(found) => e = found,
            }
        }
    }
    freed
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::prelude::*;

    use super::*;

    const KEY: u64 = 5;
    const W: u64 = 1_000;

    /// An entry in process memory that counts the loads of its block.
    struct Entry<'a> {
        pair: Cell<(u64, u64)>,
        loads: &'a Cell<u64>,
    }

    impl PairWord for Entry<'_> {
        fn load(&self) -> (u64, u64) {
            self.loads.set(self.loads.get() + 1);
            self.pair.get()
        }
        fn cas(&self, current: (u64, u64), new: (u64, u64)) -> Result<(), (u64, u64)> {
            let found = self.pair.get();
            if found == current {
                self.pair.set(new);
                Ok(())
            } else {
                Err(found)
            }
        }
    }

    fn block(loads: &Cell<u64>, pairs: impl IntoIterator<Item = (u64, u64)>) -> Vec<Entry<'_>> {
        pairs
            .into_iter()
            .map(|p| Entry {
                pair: Cell::new(p),
                loads,
            })
            .collect()
    }

    /// The exact sliding log: the times of the admitted units.
    fn model_live(admitted: &[u64], t: u64) -> Vec<u64> {
        admitted
            .iter()
            .copied()
            .filter(|&ts| t < W || ts > t - W)
            .collect()
    }

    #[test]
    fn an_admission_and_a_read_of_a_long_log_read_a_few_entries() {
        let loads = Cell::new(0);
        let entries = block(
            &loads,
            (0..1024).map(|i| (if i % 3 == 0 { 9 } else { 0 }, 7)),
        );
        // 1000 admissions of 1 unit (1000 live: the window is 1000 ns wide).
        for t in 10_000..11_000 {
            loads.set(0);
            assert!(matches!(
                acquire(&entries, KEY, t, W, 1),
                Taken::Admitted { live } if live == t - 9_999
            ));
            assert!(loads.get() <= 2 * 11 + 4, "{} loads at {t}", loads.get());
        }
        loads.set(0);
        assert_eq!(window(&entries, KEY, 11_000, W), (999, 10_001));
        assert!(loads.get() <= 2 * 11 + 3, "{} loads", loads.get());
        // Round the block: every admission takes the oldest entry, expired by then.
        for t in 11_000..14_000 {
            loads.set(0);
            assert!(matches!(
                acquire(&entries, KEY, t, W, 1),
                Taken::Admitted { live: 1000 }
            ));
            assert!(loads.get() <= 2 * 11 + 4, "{} loads at {t}", loads.get());
        }
    }

    #[test]
    fn a_log_out_of_order_still_admits_exactly() {
        // Live entries scattered among free ones (as a build claiming the first free entry
        // leaves them): the pass goes round, every decision stays exact.
        let loads = Cell::new(0);
        let pairs = [
            (KEY, 950),
            (0, 0),
            (KEY, 990),
            (KEY, 10),
            (KEY, 980),
            (3, 999),
        ];
        let entries = block(&loads, pairs);
        assert!(matches!(
            acquire(&entries, KEY, 1_020, W, 3),
            Taken::Admitted { .. }
        ));
        assert!(matches!(
            acquire(&entries, KEY, 1_020, W, 1),
            Taken::Denied {
                retry_after_ns: 930,
                live: 6
            }
        ));
        assert_eq!(window(&entries, KEY, 1_020, W).0, 6);
    }

    proptest! {
        /// One process deciding alone: every decision, remaining count and read is the exact
        /// sliding log's, through wraps of the ring, costs above one and denials.
        #[test]
        fn decisions_and_reads_are_the_exact_logs(
            len in 1usize..12,
            steps in proptest::collection::vec((0u64..700, 1u64..4, any::<bool>()), 1..120),
            foreign in proptest::collection::vec(any::<bool>(), 12),
        ) {
            let loads = Cell::new(0);
            let entries = block(
                &loads,
                (0..len).map(|i| if foreign[i] { (KEY + 1, 5) } else { (0, 0) }),
            );
            let mut admitted: Vec<u64> = Vec::new();
            let mut t = 2_000;
            for (dt, cost, read) in steps {
                t += dt;
                let live = model_live(&admitted, t);
                if read {
                    let expect = if live.is_empty() {
                        (0, u64::MAX)
                    } else {
                        (live.len() as u64, *live.iter().min().unwrap())
                    };
                    prop_assert_eq!(window(&entries, KEY, t, W), expect);
                }
                if cost > len as u64 {
                    continue;
                }
                match acquire(&entries, KEY, t, W, cost) {
                    Taken::Admitted { live: n } => {
                        prop_assert!(live.len() as u64 + cost <= len as u64);
                        admitted.extend(std::iter::repeat_n(t, cost as usize));
                        prop_assert_eq!(n, live.len() as u64 + cost);
                    }
                    Taken::Denied { retry_after_ns, live: n } => {
                        prop_assert!(live.len() as u64 + cost > len as u64);
                        prop_assert_eq!(n, live.len() as u64);
                        let mut sorted = live.clone();
                        sorted.sort_unstable();
                        let need = live.len() + cost as usize - len;
                        prop_assert_eq!(retry_after_ns, sorted[need - 1] + W - t);
                    }
                }
            }
        }
    }
}
