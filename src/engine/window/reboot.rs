//! The windows' reboot hook: a fixed or sliding window's state word moves to the window of
//! this boot that holds its last instant after the shift (later, never earlier). Window
//! indices are stored truncated (32 and 24 bits); the full index is recovered nearest to the
//! shift's reference. A sliding window whose two windows land in one merges their counts into
//! the current one.

use crate::algo::fixed_window::{self, FixedWindow};
use crate::algo::sliding_window::{self, SlidingWindow};
use crate::file::reboot::{ok, Moved, Shift};
use crate::spec::Alignment;

/// A fixed-window state word. After an interrupted translation, whichever of the stored and
/// the moved word leaves fewer admissions now.
pub(crate) fn fixed(
    shift: &Shift,
    w: u64,
    limit: u64,
    window_ns: u64,
    alignment: Alignment,
) -> Moved {
    let moved = fixed_translated(shift, w, window_ns, alignment);
    stricter(shift, w, moved, |word| {
        FixedWindow {
            limit,
            window_ns: if alignment.is_months(window_ns) {
                fixed_window::MONTHS
            } else {
                window_ns
            },
            phase_ns: shift.phase(false, window_ns, alignment),
        }
        .fresh_in(shift.now, word)
    })
}

/// `moved`, or after an interrupted translation the stored word `w` when it leaves fewer
/// admissions now (`fresh_in`: when the word is fresh again, later is stricter).
fn stricter(shift: &Shift, w: u64, moved: Moved, fresh_in: impl Fn(u64) -> u64) -> Moved {
    if !shift.interrupted || moved.failed {
        return moved;
    }
    if fresh_in(w) > fresh_in(moved.word) {
        ok(w)
    } else {
        moved
    }
}

fn fixed_translated(shift: &Shift, w: u64, window_ns: u64, alignment: Alignment) -> Moved {
    const STALE: i128 = 1 << 30;
    let (stored, count) = fixed_window::unpack(w);
    if count == 0 {
        return ok(0);
    }
    let full_ref = shift.old_reference_window(window_ns, alignment);
    let diff = (full_ref as u64 as u32).wrapping_sub(stored) as i32 as i128;
    let k = shift.window(full_ref - diff, window_ns, alignment);
    let n = shift.now_window(window_ns, alignment);
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

/// A sliding-window state word. After an interrupted translation, whichever of the stored and
/// the moved word leaves fewer admissions now.
pub(crate) fn sliding(
    shift: &Shift,
    w: u64,
    limit: u64,
    window_ns: u64,
    alignment: Alignment,
) -> Moved {
    let moved = sliding_translated(shift, w, window_ns, alignment);
    stricter(shift, w, moved, |word| {
        SlidingWindow {
            limit,
            window_ns,
            phase_ns: shift.phase(false, window_ns, alignment),
        }
        .fresh_in(shift.now, word)
    })
}

fn sliding_translated(shift: &Shift, w: u64, window_ns: u64, alignment: Alignment) -> Moved {
    const STALE: i128 = 1 << 22;
    const MASK: u64 = sliding_window::MAX_LIMIT;
    let (stored, prev, cur) = sliding_window::unpack(w);
    if prev == 0 && cur == 0 {
        return ok(0);
    }
    let full_ref = shift.old_reference_window(window_ns, alignment);
    let raw = (full_ref as u64).wrapping_sub(stored) & ((1 << 24) - 1);
    let diff = (((raw << 40) as i64) >> 40) as i128;
    let k_old = full_ref - diff;
    let kc = shift.window(k_old, window_ns, alignment);
    let kp = shift.window(k_old - 1, window_ns, alignment);
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
    let n = shift.now_window(window_ns, alignment);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::reboot::tests::DAY;

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
        let m = fixed(&s, fixed_window::pack(k, 10), 10, DAY, Alignment::WallClock);
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
