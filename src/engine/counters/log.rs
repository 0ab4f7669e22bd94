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
///
/// One pass: every free entry met is claimed until `n` are, and every live one counted (the
/// admission needs `n` free entries of `L`, which is `live + n <= L`). A pass that claimed
/// fewer than `n` gives them back and denies.
pub(crate) fn acquire<P: PairWord>(
    entries: &[P],
    tag: u64,
    t: u64,
    window_ns: u64,
    n: u64,
) -> Taken {
    let limit = entries.len() as u64;
    let mine = (tag, t);
    // The entries claimed, with what each held: on the stack for the usual costs.
    let mut few = [(0usize, (0u64, 0u64)); 8];
    let mut many: Vec<(usize, (u64, u64))> = Vec::new();
    let mut claimed = 0u64;
    let mut seen = 0u64;
    for (i, entry) in entries.iter().enumerate() {
        let mut e = entry.load();
        loop {
            if live(e, tag, t, window_ns) {
                seen += 1;
                break;
            }
            if claimed == n {
                break;
            }
            // A free entry is claimed; a CAS lost to another decision looks again at what won.
            match entry.cas(e, mine) {
                Ok(()) => {
                    if claimed < few.len() as u64 {
                        few[claimed as usize] = (i, e);
                    } else {
                        many.push((i, e));
                    }
                    claimed += 1;
                    break;
                }
                Err(found) => e = found,
            }
        }
    }
    if claimed == n {
        return Taken::Admitted { live: seen + n };
    }
    // Fewer than `n` free entries: give back what this call claimed (each entry holds what
    // this call wrote until it expires; no other decision writes a live entry).
    let taken = few.iter().take(claimed as usize).chain(many.iter());
    for &(i, was) in taken {
        let _ = entries[i].cas(mine, was);
    }
    Taken::Denied {
        retry_after_ns: wait_for(entries, tag, t, window_ns, (seen + n).saturating_sub(limit)),
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
