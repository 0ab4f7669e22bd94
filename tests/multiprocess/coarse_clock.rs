//! The coarse clock: admissions within the bounds over the dates it gives, and its lag behind
//! the precise clock.

use super::*;

#[test]
fn with_the_coarse_clock_every_admission_stays_within_the_bounds_over_its_dates() {
    // CLOCK_MONOTONIC_COARSE lags the precise clock. A decision is dated by its coarse read,
    // which lies between a coarse read taken just before it and a precise read just after:
    // the bounds hold over those brackets exactly as with the precise clock.
    let run = run_with(
        algorithm(TokenBucket::new(B, Rate::per_second(2_000).unwrap())),
        Attach::OpenByPath,
        1,
        CoarseMonotonicClock,
    );
    let n = run.total();
    let bound = B + (run.t_last - run.t0) / EMISSION;
    assert_bucket_bound_over_every_interval(&run, "coarse bucket: ");
    assert!(n <= bound, "coarse bucket: {n} admissions, bound {bound}");
    let log = run_with(
        algorithm(SlidingLog::new(L, Duration::from_nanos(W))),
        Attach::OpenByPath,
        1,
        CoarseMonotonicClock,
    );
    let worst = log.max_certain_in_interval(W, LOG_UNIT);
    let log_bound = L * ((log.t_last + LOG_UNIT - log.t0) / W + 1);
    println!(
        "coarse clock: bucket {n} admitted, bound {bound}; log {} admitted, bound {log_bound}, \
         most in one window {worst}",
        log.total()
    );
    assert!(
        worst <= L,
        "coarse log: {worst} admissions within one window"
    );
    assert!(log.total() <= log_bound);
}

#[test]
#[ignore = "a measurement, not a guarantee: the coarse clock lags by one to two ticks, more when \
            timer interrupts are delayed (see CoarseMonotonicClock's docs); run it to see the lag \
            on a host"]
fn the_coarse_clock_lags_the_precise_clock_by_at_most_its_resolution() {
    let tick = CoarseMonotonicClock::resolution_ns();
    let end = now_ns() + SEC;
    let mut worst = 0;
    loop {
        // The precise read comes first: a coarse read taken after it and still behind it lags
        // by at least the difference, whatever happened in between.
        let precise = now_ns();
        let coarse = CoarseMonotonicClock.now_ns();
        if precise > end {
            break;
        }
        worst = worst.max(precise.saturating_sub(coarse));
    }
    assert!(
        worst <= tick,
        "the coarse clock lagged {worst} ns behind, its resolution is {tick} ns"
    );
}
