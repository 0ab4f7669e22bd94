//! Calendar months for fixed windows: the index of the month a local time falls in, and the
//! local time a month starts, on the proleptic Gregorian calendar (Howard Hinnant's
//! `days_from_civil` / `civil_from_days`, exact for every day representable here).
//!
//! Times are nanoseconds since 1970-01-01T00:00 *local* (Unix time plus the fixed UTC offset of
//! the window); month `k` is the `k`-th month after January 1970.

const DAY: i128 = 86_400_000_000_000;

/// Days since 1970-01-01 of the civil date `y-m-d`.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = (y - era * 400) as u64;
    let mp = (m as u64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as u64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe as i64 - 719_468
}

/// The civil date `(y, m, d)` of day `z` since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = (z - era * 146_097) as u64;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe as i64 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The month (since January 1970) of local time `t`.
#[inline]
pub(crate) fn month_index(t: u64) -> u64 {
    let (y, m, _) = civil_from_days((t as i128 / DAY) as i64);
    ((y - 1970) * 12 + m as i64 - 1) as u64
}

/// The local time month `k` starts at, saturating at `u64::MAX` far in the future.
#[inline]
pub(crate) fn month_start(k: u64) -> u64 {
    if k >= 12 * 500_000 {
        return u64::MAX;
    }
    let y = 1970 + (k / 12) as i64;
    let m = (k % 12) as u32 + 1;
    let ns = days_from_civil(y, m, 1) as i128 * DAY;
    ns.clamp(0, u64::MAX as i128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        for z in (-1_000_000..1_000_000).step_by(997) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        // February of a leap year (2028) and of a common year (2027).
        let feb_2028 = (2028 - 1970) * 12 + 1;
        assert_eq!(
            (month_start(feb_2028 + 1) - month_start(feb_2028)) as i128 / DAY,
            29
        );
        assert_eq!(
            (month_start(feb_2028 - 11) - month_start(feb_2028 - 12)) as i128 / DAY,
            28
        );
        // u64 nanoseconds reach the year 2554: month 7,007 is the last whole one.
        for k in [0, 1, 11, 12, 686, 7_000] {
            assert_eq!(month_index(month_start(k)), k);
            assert_eq!(month_index(month_start(k + 1) - 1), k);
        }
        assert_eq!(month_start(u64::MAX / 2), u64::MAX);
        assert_eq!(month_start(1_000_000), u64::MAX);
    }
}
