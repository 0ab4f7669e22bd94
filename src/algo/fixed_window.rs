//! Fixed window counter.
//!
//! # Implementation details
//!
//! Window `k` is `[k W - phase, (k + 1) W - phase)` on the monotonic timeline, where `phase` is
//! chosen at creation so that window boundaries fall on multiples of `W` in Unix time ("each
//! clock-aligned minute"). The state is one word:
//!
//! ```text
//!  63            32 31             0
//! +----------------+----------------+
//! | window k mod 2^32 |    count     |
//! +----------------+----------------+
//! ```
//!
//! `admit iff count_k + n <= L`. A read of `now` that falls in an older window than the stored one
//! (a stale clock read, by less than 2^30 windows) is counted against the stored window, so the
//! state never moves backwards. An adversary can pass `2 L` through a boundary (L at its last
//! instant, L at the first instant of the next window): that is what a fixed window is.

use super::{Decision, Step};

/// Stored windows this many windows ahead of `now` or fewer are treated as a stale read of `now`;
/// anything further is an ancient state seen through the 32-bit wrap, and is a new window.
const STALE_WINDOWS: i64 = 1 << 30;

/// Parameters of one fixed window limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedWindow {
    pub limit: u64,
    pub window_ns: u64,
    /// `(Unix time - monotonic time) mod W`, fixed at creation.
    pub phase_ns: u64,
}

#[inline(always)]
pub(crate) fn pack(window: u64, count: u64) -> u64 {
    (window << 32) | (count & 0xFFFF_FFFF)
}

#[inline(always)]
pub(crate) fn unpack(word: u64) -> (u32, u64) {
    ((word >> 32) as u32, word & 0xFFFF_FFFF)
}

/// `window_ns` of calendar-month windows in process memory (never a real window length, which is
/// at most 2^60 ns): window `k` is the `k`-th month since January 1970 of the local time
/// `now + phase_ns` (the phase is then the whole wall offset plus the UTC offset, not a
/// remainder).
pub(crate) const MONTHS: u64 = u64::MAX;

impl FixedWindow {
    /// The full index of the window holding `t` (`now + phase`).
    #[inline(always)]
    fn index(&self, t: u64) -> u64 {
        if self.window_ns == MONTHS {
            super::calendar::month_index(t)
        } else {
            t / self.window_ns
        }
    }

    /// Where window `k` starts, in the units of `now + phase`.
    #[inline(always)]
    pub(crate) fn start(&self, k: u64) -> u64 {
        if self.window_ns == MONTHS {
            super::calendar::month_start(k)
        } else {
            k.saturating_mul(self.window_ns)
        }
    }

    /// The window index of `now` and the stored `(window, count)` it must count against.
    #[inline(always)]
    fn current(&self, now: u64, word: u64) -> (u64, u64, u64) {
        let t = now.saturating_add(self.phase_ns);
        let full = self.index(t);
        let (stored, count) = unpack(word);
        let diff = (full as u32).wrapping_sub(stored) as i32 as i64;
        let (window, count) = if diff == 0 {
            (full, count)
        } else if diff < 0 && diff > -STALE_WINDOWS {
            (full + diff.unsigned_abs(), count)
        } else {
            (full, 0)
        };
        (t, window, count)
    }

    #[inline(always)]
    pub fn step(&self, now: u64, word: u64, n: u64) -> Step {
        let (t, window, count) = self.current(now, word);
        // The window holding the counts ends at `next`: then the limit is whole again.
        let ends_in = self.start(window + 1).saturating_sub(t);
        if count + n <= self.limit {
            Step::Admit {
                new: pack(window, count + n),
                decision: Decision::allowed(self.limit - count - n, 1)
                    .stamped(window)
                    .of(self.limit)
                    .resetting(ends_in),
            }
        } else {
            Step::Deny(
                Decision::denied(ends_in, self.limit.saturating_sub(count), 1)
                    .resetting(if count > 0 { ends_in } else { 0 }),
            )
        }
    }

    /// The word after giving back `n` units admitted at `admitted_window`: only if that window is
    /// still the stored one (a refund into a later window would create budget).
    pub fn refund(&self, word: u64, admitted_window: u64, n: u64) -> u64 {
        let (stored, count) = unpack(word);
        if stored == admitted_window as u32 {
            pack(admitted_window, count.saturating_sub(n))
        } else {
            word
        }
    }

    /// True when a decision at `now` would see an empty window: the state can be dropped or
    /// reused without losing anything. A window stored *ahead* of `now` (written by a process
    /// with a newer clock) still counts.
    pub fn is_fresh(&self, now: u64, word: u64) -> bool {
        self.current(now, word).2 == 0
    }

    /// The full index of the window `now` falls in.
    pub fn window_of(&self, now: u64) -> u64 {
        self.index(now.saturating_add(self.phase_ns))
    }

    /// The full index of the window `word` counts against at `now` and its count, or `None` when it
    /// counts nothing (as `FixedWindow::step` reads it).
    fn view(&self, now: u64, word: u64) -> Option<(u64, u64)> {
        let (stored, count) = unpack(word);
        if count == 0 {
            return None;
        }
        let full = self.window_of(now);
        let diff = (full as u32).wrapping_sub(stored) as i32 as i64;
        if diff == 0 {
            Some((full, count))
        } else if diff < 0 && diff > -STALE_WINDOWS {
            Some((full + diff.unsigned_abs(), count))
        } else {
            None
        }
    }

    /// Nanoseconds from `now` until `word` counts nothing (0 if it counts nothing now): what a key
    /// table waits for before it may reuse the word's slot, and what a reboot translation compares.
    pub(crate) fn fresh_in(&self, now: u64, word: u64) -> u64 {
        self.view(now, word).map_or(0, |(window, _)| {
            self.start(window + 1)
                .saturating_sub(now.saturating_add(self.phase_ns))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(fw: &FixedWindow, word: &mut u64, now: u64, n: u64) -> Decision {
        match fw.step(now, *word, n) {
            Step::Admit { new, decision } => {
                *word = new;
                decision
            }
            Step::Deny(d) => d,
        }
    }

    #[test]
    fn boundary_burst_passes_twice_the_limit() {
        let fw = FixedWindow {
            limit: 100,
            window_ns: 60_000_000_000,
            phase_ns: 0,
        };
        let mut w = 0;
        let last = 60_000_000_000 * 10 - 1;
        let first = last + 1;
        let a = (0..100)
            .filter(|_| apply(&fw, &mut w, last, 1).is_allowed())
            .count();
        let denied = apply(&fw, &mut w, last, 1);
        assert!(denied.is_denied());
        assert_eq!(denied.retry_after_ns(), 1);
        let b = (0..100)
            .filter(|_| apply(&fw, &mut w, first, 1).is_allowed())
            .count();
        assert_eq!((a, b), (100, 100));
        assert!(apply(&fw, &mut w, first, 1).is_denied());
    }

    #[test]
    fn stale_read_counts_against_newer_window() {
        let fw = FixedWindow {
            limit: 2,
            window_ns: 1_000,
            phase_ns: 0,
        };
        let mut w = 0;
        assert!(apply(&fw, &mut w, 5_500, 2).is_allowed());
        // A stale reader in window 4 must not reset window 5's count.
        let d = apply(&fw, &mut w, 4_900, 1);
        assert!(d.is_denied());
        assert_eq!(unpack(w), (5, 2));
        assert_eq!(d.retry_after_ns(), 6_000 - 4_900);
    }

    #[test]
    fn phase_aligns_boundaries() {
        let fw = FixedWindow {
            limit: 1,
            window_ns: 1_000,
            phase_ns: 300,
        };
        let mut w = 0;
        assert!(apply(&fw, &mut w, 699, 1).is_allowed());
        assert!(apply(&fw, &mut w, 699, 1).is_denied());
        assert!(apply(&fw, &mut w, 700, 1).is_allowed());
    }

    #[test]
    fn damaged_count_denies_until_next_window() {
        let fw = FixedWindow {
            limit: 10,
            window_ns: 1_000,
            phase_ns: 0,
        };
        let mut w = pack(3, u32::MAX as u64);
        assert!(apply(&fw, &mut w, 3_100, 1).is_denied());
        assert!(apply(&fw, &mut w, 4_000, 1).is_allowed());
    }
}
