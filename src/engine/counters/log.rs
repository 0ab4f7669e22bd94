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
//! **Admission of `n` at `t`**: count the live entries; deny if `live + n > L` (the retry-after
//! is the time until enough of them expire). Otherwise claim `n` free entries, one CAS each,
//! `free -> (tag, t)`. Whatever interleaves, at most `L` entries exist, so at most `L` units
//! are ever live in any window `(t - W, t]` (in decision times): the bound holds by
//! construction, with no word to keep in step with the entries. A claim of `n > 1` that runs
//! out of free entries (others claimed them meanwhile) gives back the entries it claimed, each
//! by a CAS from exactly what it wrote to exactly what it found there, and tries again: for an
//! instant those entries looked live to others (transiently strict), never admitted. The
//! retries are bounded ([`MAX_ROUNDS`]); after them the call denies with no retry-after.
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

/// Attempts of one multi-unit admission that lose free entries to others before it denies.
pub(crate) const MAX_ROUNDS: usize = 8;

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

/// Count the key's live entries at `t`: `(count, oldest time among them)`.
pub(crate) fn window<P: PairWord>(entries: &[P], tag: u64, t: u64, window_ns: u64) -> (u64, u64) {
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
pub(crate) fn acquire<P: PairWord>(
    entries: &[P],
    tag: u64,
    t: u64,
    window_ns: u64,
    n: u64,
) -> Taken {
    let limit = entries.len() as u64;
    let mut claimed: Vec<(usize, (u64, u64))> = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let (seen, _) = window(entries, tag, t, window_ns);
        if seen + n > limit {
            return Taken::Denied {
                retry_after_ns: wait_for(entries, tag, t, window_ns, seen + n - limit),
                live: seen,
            };
        }
        let mine = (tag, t);
        for (i, entry) in entries.iter().enumerate() {
            let mut e = entry.load();
            // A free entry is claimed; a CAS lost to another decision looks again at what won.
            while !live(e, tag, t, window_ns) {
                match entry.cas(e, mine) {
                    Ok(()) => {
                        claimed.push((i, e));
                        break;
                    }
                    Err(found) => e = found,
                }
            }
            if claimed.len() as u64 == n {
                let (after, _) = window(entries, tag, t, window_ns);
                return Taken::Admitted { live: after };
            }
        }
        // Others took the free entries this admission counted on: give back what it claimed
        // (each entry holds what this call wrote until it expires; no other decision writes a
        // live entry) and count again.
        for (i, was) in claimed.drain(..) {
            let _ = entries[i].cas(mine, was);
        }
    }
    Taken::Denied {
        retry_after_ns: 0,
        live: window(entries, tag, t, window_ns).0,
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
