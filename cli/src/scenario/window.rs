//! The bound a token bucket's admissions are checked against at the dependency, over every
//! window between two admissions.

use super::*;

/// The tightest window of a token bucket's admissions against its bound, over every pair of
/// admissions: (count, bound) of the window with the largest excess, and whether every window
/// is within. `dates` are `(t0, t1)` brackets; `allowance_ns` widens every span (the arrival
/// delay), 0 for send dates.
pub fn fullest_window(
    dates: &mut [(u64, u64)],
    rate: u64,
    burst: u64,
    allowance_ns: u64,
    slack: u64,
) -> (u64, u64, bool) {
    dates.sort_unstable();
    // The library rounds the emission interval up: never more than the rate. Across a fleet
    // the hosts' rates add up to at most the total: `B + slack + floor(r T)`.
    let emission = SECOND_NS.div_ceil(rate);
    let bound_of = |span: u64| {
        if slack == 0 {
            burst + span / emission
        } else {
            burst + slack + (u128::from(span) * u128::from(rate) / u128::from(SECOND_NS)) as u64
        }
    };
    let mut worst: (u64, u64) = (0, burst + slack);
    let mut worst_excess = i128::MIN;
    for i in 0..dates.len() {
        let mut top = 0;
        for (j, d) in dates.iter().enumerate().skip(i) {
            top = top.max(d.1);
            let count = (j - i + 1) as u64;
            let bound = bound_of(top - dates[i].0 + allowance_ns);
            let excess = count as i128 - bound as i128;
            if excess > worst_excess {
                worst_excess = excess;
                worst = (count, bound);
            }
        }
    }
    (worst.0, worst.1, worst_excess <= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fullest_window_finds_a_window_over_the_bound() {
        // 10/s burst 2 (emission 100 ms): three sends at once fill it past its burst.
        let ms = 1_000_000;
        let mut ok = vec![
            (0, 10),
            (1, 11),
            (100 * ms, 100 * ms + 5),
            (200 * ms, 200 * ms),
        ];
        // Two at once, then one every 100 ms: the bound is reached, not passed.
        let (count, bound, within) = fullest_window(&mut ok, 10, 2, 0, 0);
        assert!(within && count == bound, "{count} of {bound}");
        let mut over = vec![(0, 10), (1, 11), (2, 12)];
        let (count, bound, within) = fullest_window(&mut over, 10, 2, 0, 0);
        assert_eq!((count, bound, within), (3, 2, false));
        // A fleet's slack admits it; an allowance of 100 ms too.
        assert!(fullest_window(&mut over, 10, 2, 0, 2).2);
        assert!(fullest_window(&mut over, 10, 2, 100 * ms, 0).2);
    }

    #[test]
    fn a_late_admission_widens_only_its_own_windows() {
        // The bracket of the second send ends late: its window is measured to that end.
        let ms = 1_000_000;
        let mut dates = vec![(0, 1), (2, 150 * ms), (3, 4)];
        let (_, _, within) = fullest_window(&mut dates, 10, 2, 0, 0);
        assert!(within, "3 sends within [0, 150 ms] are allowed 2 + 1");
    }
}
