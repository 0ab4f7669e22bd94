//! The sliding log's reboot hook: every entry's time moves by the shift, rounded up to the log's
//! 1024 ns unit. An entry whose window ended before this boot's origin is marked freed; one
//! still in its window but dated before the origin is dated at the origin (one unit): it
//! expires up to that much later than it should, never earlier. The shift is one constant, so
//! dates stay in commit order.

use crate::algo::sliding_log;
use crate::file::reboot::{ok, Moved, Shift};

/// A sliding-log entry of a log with window `window_ns`.
pub(crate) fn entry(shift: &Shift, e: u64, window_ns: u64) -> Moved {
    let (units, flags) = sliding_log::split_entry(e);
    if units == 0 {
        return ok(e);
    }
    let moved = shift.time((units as i128) << sliding_log::TIME_SHIFT);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::reboot::tests::{shift, DAY};

    #[test]
    fn log_entries_expire_or_are_dated_at_the_origin() {
        let s = shift(-10 * DAY as i128);
        let w = DAY;
        let at = |t_ns: u64| sliding_log::join_entry(t_ns >> sliding_log::TIME_SHIFT, 0);
        // 9.5 days old boot time -> half a day before the origin: still in a 1-day window.
        let m = entry(&s, at(19 * DAY / 2 + 1024 * 7), w);
        assert_eq!(sliding_log::split_entry(m.word).0, 1);
        assert_eq!(m.word & sliding_log::FREED, 0);
        // Two days before the origin: expired.
        let m = entry(&s, at(8 * DAY), w);
        assert_ne!(m.word & sliding_log::FREED, 0);
        // After the origin: moved exactly.
        let m = entry(&s, at(11 * DAY), w);
        assert_eq!(
            sliding_log::split_entry(m.word).0,
            DAY >> sliding_log::TIME_SHIFT
        );
    }
}
