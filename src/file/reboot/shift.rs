//! The translation of one stored state word onto this boot's timeline ([`Shift`]): token
//! buckets, log entries, fixed and sliding windows (see the module docs of `reboot`).

use crate::algo::fixed_window::{self, FixedWindow};
use crate::algo::sliding_log;
use crate::algo::sliding_window::{self, SlidingWindow};
use crate::file::layout;
use crate::spec::Alignment;

/// How to move one old-boot state onto this boot's timeline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shift {
    /// Nanoseconds to add to an old-boot time: `P_old (highest) - P_new`.
    pub d: i128,
    /// The old boot's phase offset (word 16) and this boot's wall offset.
    pub phase_old: u64,
    pub phase_new: u64,
    /// The reference on the old timeline for recovering truncated window indices.
    pub reference: i128,
    /// This boot's monotonic now at the translation.
    pub now: u64,
    /// A translation of this boot was interrupted: store the stricter reading of every word.
    pub interrupted: bool,
}

/// What one translated word came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub word: u64,
    /// The state could not be represented and was stored failing closed.
    pub failed: bool,
}

pub(super) fn ok(word: u64) -> Moved {
    Moved {
        word,
        failed: false,
    }
}

fn floor_div(a: i128, b: u64) -> i128 {
    a.div_euclid(b as i128)
}

const TAT_MAX: u64 = (1 << 63) - 1;

/// The full index of the window holding `t` (`now + phase`): calendar months or `t / W`.
fn index_of(t: i128, window_ns: u64, alignment: Alignment) -> i128 {
    if alignment.is_months(window_ns) {
        if t < 0 {
            floor_div(t, window_ns)
        } else {
            crate::algo::calendar::month_index(t.min(u64::MAX as i128) as u64) as i128
        }
    } else {
        floor_div(t, window_ns)
    }
}

/// Where window `k` starts, in the units of `now + phase`.
fn start_of(k: i128, window_ns: u64, alignment: Alignment) -> i128 {
    if alignment.is_months(window_ns) && k >= 0 {
        crate::algo::calendar::month_start(k.min(u64::MAX as i128) as u64) as i128
    } else {
        k * window_ns as i128
    }
}

impl Shift {
    /// A token-bucket state word (bit 63: parameter-slot tag).
    pub fn bucket(&self, w: u64) -> Moved {
        let tag = w & layout::bucket::PARAM_TAG;
        let tat = w & !layout::bucket::PARAM_TAG;
        if tat == 0 {
            return ok(w);
        }
        let moved = tat as i128 + self.d;
        let (mut new, failed) = if moved <= 0 {
            (0, false)
        } else if moved > TAT_MAX as i128 {
            (TAT_MAX, true)
        } else {
            (moved as u64, false)
        };
        if self.interrupted {
            new = new.max(tat);
        }
        Moved {
            word: tag | new,
            failed,
        }
    }

    /// A sliding-log entry of a log with window `window_ns`.
    pub fn log_entry(&self, e: u64, window_ns: u64) -> Moved {
        let (units, flags) = sliding_log::split_entry(e);
        if units == 0 {
            return ok(e);
        }
        let t = (units as i128) << sliding_log::TIME_SHIFT;
        let mut moved = t + self.d;
        if self.interrupted {
            moved = moved.max(t);
        }
        let max = (sliding_log::TIME_MASK as i128) << sliding_log::TIME_SHIFT;
        if moved > max {
            return Moved {
                word: sliding_log::join_entry(sliding_log::TIME_MASK, flags),
                failed: true,
            };
        }
        if moved + window_ns as i128 <= 0 {
            // Its window ended before this boot began: expired, kept only for dating.
            return ok(sliding_log::join_entry(1, flags | sliding_log::FREED));
        }
        let unit = 1i128 << sliding_log::TIME_SHIFT;
        let units = ((moved + unit - 1).div_euclid(unit)).max(1);
        ok(sliding_log::join_entry(units as u64, flags))
    }

    fn phase(&self, old: bool, window_ns: u64, alignment: Alignment) -> u64 {
        let wall = if old { self.phase_old } else { self.phase_new };
        alignment.phase_ns(window_ns, wall)
    }

    /// The new full index of old window `k`: the window of this boot that holds the old
    /// window's last instant after the shift. For wall-aligned windows whose boot kept one wall
    /// offset this is exactly the same calendar window; a wall clock stepped forward during the
    /// old boot (a highest offset above the phase word) moves it later, never earlier.
    fn window(&self, k: i128, window_ns: u64, alignment: Alignment) -> i128 {
        let last = start_of(k + 1, window_ns, alignment)
            - self.phase(true, window_ns, alignment) as i128
            - 1;
        index_of(
            last + self.d + self.phase(false, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }

    /// The index of this boot's now, with this boot's phase.
    fn now_window(&self, window_ns: u64, alignment: Alignment) -> i128 {
        index_of(
            self.now as i128 + self.phase(false, window_ns, alignment) as i128,
            window_ns,
            alignment,
        )
    }

    /// A fixed-window state word.
    pub fn fixed(&self, w: u64, limit: u64, window_ns: u64, alignment: Alignment) -> Moved {
        let moved = self.fixed_translated(w, window_ns, alignment);
        if !self.interrupted || moved.failed {
            return moved;
        }
        let fw = FixedWindow {
            limit,
            window_ns: if alignment.is_months(window_ns) {
                fixed_window::MONTHS
            } else {
                window_ns
            },
            phase_ns: self.phase(false, window_ns, alignment),
        };
        let keep = fw.fresh_in(self.now, w) > fw.fresh_in(self.now, moved.word);
        if keep {
            ok(w)
        } else {
            moved
        }
    }

    fn fixed_translated(&self, w: u64, window_ns: u64, alignment: Alignment) -> Moved {
        const STALE: i128 = 1 << 30;
        let (stored, count) = fixed_window::unpack(w);
        if count == 0 {
            return ok(0);
        }
        let full_ref = index_of(
            self.reference + self.phase(true, window_ns, alignment) as i128,
            window_ns,
            alignment,
        );
        let diff = (full_ref as u64 as u32).wrapping_sub(stored) as i32 as i128;
        let k = self.window(full_ref - diff, window_ns, alignment);
        let n = self.now_window(window_ns, alignment);
        if k < 0 || k < n - STALE / 2 {
            return ok(0);
        }
        if k - n >= STALE - 1 {
            return Moved {
                word: fixed_window::pack((n + STALE - 2) as u64, 0xFFFF_FFFF),
                failed: true,
            };
        }
        ok(fixed_window::pack(k as u64, count))
    }

    /// A sliding-window state word.
    pub fn sliding(&self, w: u64, limit: u64, window_ns: u64, alignment: Alignment) -> Moved {
        let moved = self.sliding_translated(w, window_ns, alignment);
        if !self.interrupted || moved.failed {
            return moved;
        }
        let sw = SlidingWindow {
            limit,
            window_ns,
            phase_ns: self.phase(false, window_ns, alignment),
        };
        let keep = sw.fresh_in(self.now, w) > sw.fresh_in(self.now, moved.word);
        if keep {
            ok(w)
        } else {
            moved
        }
    }

    fn sliding_translated(&self, w: u64, window_ns: u64, alignment: Alignment) -> Moved {
        const STALE: i128 = 1 << 22;
        const MASK: u64 = sliding_window::MAX_LIMIT;
        let (stored, prev, cur) = sliding_window::unpack(w);
        if prev == 0 && cur == 0 {
            return ok(0);
        }
        let full_ref = index_of(
            self.reference + self.phase(true, window_ns, alignment) as i128,
            window_ns,
            alignment,
        );
        let raw = (full_ref as u64).wrapping_sub(stored) & ((1 << 24) - 1);
        let diff = (((raw << 40) as i64) >> 40) as i128;
        let k_old = full_ref - diff;
        let kc = self.window(k_old, window_ns, alignment);
        let kp = self.window(k_old - 1, window_ns, alignment);
        let (mut prev, mut cur) = if kp == kc {
            (0, (prev + cur).min(MASK))
        } else {
            (prev, cur)
        };
        let mut kc = kc;
        if kc < 0 {
            if kc == -1 {
                // The current count is window 0's previous one.
                (prev, cur, kc) = (cur, 0, 0);
            } else {
                return ok(0);
            }
        }
        let n = self.now_window(window_ns, alignment);
        if kc < n - STALE / 2 || (prev == 0 && cur == 0) {
            return ok(0);
        }
        if kc - n >= STALE - 1 {
            return Moved {
                word: sliding_window::pack((n + STALE - 2) as u64, MASK, MASK),
                failed: true,
            };
        }
        ok(sliding_window::pack(kc as u64, prev, cur))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000_000_000;

    fn shift(d: i128) -> Shift {
        Shift {
            d,
            phase_old: 0,
            phase_new: 0,
            reference: 0,
            now: 0,
            interrupted: false,
        }
    }

    #[test]
    fn bucket_moves_by_the_wall_clock_and_keeps_its_tag() {
        let s = shift(-1_000);
        let tag = layout::bucket::PARAM_TAG;
        assert_eq!(s.bucket(tag | 5_000).word, tag | 4_000);
        assert_eq!(s.bucket(500).word, 0, "before the origin: full");
        assert_eq!(s.bucket(tag).word, tag, "fresh stays fresh");
        let far = shift(i64::MAX as i128);
        assert!(far.bucket(TAT_MAX - 5).failed);
        let mut again = shift(-1_000);
        again.interrupted = true;
        assert_eq!(again.bucket(5_000).word, 5_000, "the stricter reading");
    }

    #[test]
    fn log_entries_expire_or_are_dated_at_the_origin() {
        let s = shift(-10 * DAY as i128);
        let w = DAY;
        let entry = |t_ns: u64| sliding_log::join_entry(t_ns >> sliding_log::TIME_SHIFT, 0);
        // 9.5 days old boot time -> half a day before the origin: still in a 1-day window.
        let m = s.log_entry(entry(19 * DAY / 2 + 1024 * 7), w);
        assert_eq!(sliding_log::split_entry(m.word).0, 1);
        assert_eq!(m.word & sliding_log::FREED, 0);
        // Two days before the origin: expired.
        let m = s.log_entry(entry(8 * DAY), w);
        assert_ne!(m.word & sliding_log::FREED, 0);
        // After the origin: moved exactly.
        let m = s.log_entry(entry(11 * DAY), w);
        assert_eq!(
            sliding_log::split_entry(m.word).0,
            DAY >> sliding_log::TIME_SHIFT
        );
    }

    #[test]
    fn wall_aligned_windows_keep_their_calendar_window() {
        // Old boot: offset 100 days + 3 h; new boot: offset 103 days; the same Unix day.
        let h = 3_600_000_000_000u64;
        let s = Shift {
            d: (100 * DAY + 3 * h) as i128 - (103 * DAY) as i128,
            phase_old: 100 * DAY + 3 * h,
            phase_new: 103 * DAY,
            reference: (5 * DAY) as i128,
            now: 2 * h,
            interrupted: false,
        };
        // Old mono 4 days + 22 h: Unix day 105 (100 d 3 h + 4 d 22 h = 105 d 1 h).
        let old = FixedWindow {
            limit: 10,
            window_ns: DAY,
            phase_ns: 3 * h,
        };
        let k = old.window_of(4 * DAY + 22 * h);
        let m = s.fixed(fixed_window::pack(k, 10), 10, DAY, Alignment::WallClock);
        let new = FixedWindow {
            limit: 10,
            window_ns: DAY,
            phase_ns: 0,
        };
        // New mono 2 h is Unix day 103 + 2 h: two days before the old admissions' day.
        assert_eq!(fixed_window::unpack(m.word), (2, 10));
        assert!(!new.is_fresh(2 * h, m.word));
        assert!(new.is_fresh(3 * DAY, m.word));
    }
}
