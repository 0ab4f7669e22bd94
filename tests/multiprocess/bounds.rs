//! Each algorithm's bound across eight processes at cost 1, the processes opening the file by path
//! or inheriting the handle: the token bucket's and the fixed window's exact, the sliding log's
//! exact to its unit, the sliding-window counter's within its estimate.

use super::*;

fn token_bucket(attach: Attach) {
    let run = run(
        algorithm(TokenBucket::new(B, Rate::per_second(2_000).unwrap())),
        attach,
        1,
    );
    let n = run.total();
    // Upper bound over the whole run: every admission is dated in [t0, t_last].
    let bound = B + (run.t_last - run.t0) / EMISSION;
    // And over every interval between two admissions.
    assert_bucket_bound_over_every_interval(&run, "");
    // No lost admission. Write tau = B T. A denial at r means tat > r + tau - T; the parent's
    // denial at r_p also has tat <= r_p + tau (its last admission was dated <= r_p). Afterwards
    // tat grows by exactly T per admission, plus the time the bucket spends full (now > tat),
    // which can only start tau - T after a denial, and ends at the next denial. So by a denial
    // at r, at least floor((r - r_p - full) / T) admissions followed the parent's, where `full`
    // sums, over consecutive sampled denials, the time beyond tau - T between them (zero unless
    // every process was off the CPU for 250 ms at once). Checked at every sampled denial.
    let tolerance = B * EMISSION - EMISSION;
    let p = run.parent_denial();
    let mut full = 0;
    let mut floor = 0;
    for pair in run.denials.windows(2) {
        let (before, d) = (pair[0], pair[1]);
        full += d.hi.saturating_sub(before.lo + tolerance);
        let behind = run.lo_at_most(d.hi);
        let due = run.parent_admitted + d.lo.saturating_sub(p.hi + full) / EMISSION;
        assert!(
            behind >= due,
            "denial at {} ns: only {behind} admissions behind it, {due} were due",
            d.lo - run.t0
        );
        floor = floor.max(due);
    }
    println!(
        "token bucket ({attach:?}): {n} admitted (parent {}, workers {:?}), bound {bound}, \
         lower bound {floor} (full for {} ms), run {} ms",
        run.parent_admitted,
        run.per_worker,
        full / MS,
        (run.t_last - run.t0) / MS
    );
    assert!(n <= bound, "{n} admissions exceed floor(B + r T) = {bound}");
    assert!(n >= floor, "{n} admissions, at least {floor} were due");
    assert!(run.parent_admitted >= B);
}

#[test]
fn token_bucket_bound_is_exact_across_processes_opening_by_path() {
    token_bucket(Attach::OpenByPath);
}

#[test]
fn token_bucket_bound_is_exact_across_processes_inheriting_the_handle() {
    token_bucket(Attach::Inherited);
}

fn fixed_window(attach: Attach) {
    let run = run(
        algorithm(FixedWindow::new(L, Duration::from_nanos(W)).aligned(Alignment::Monotonic)),
        attach,
        1,
    );
    let n = run.total();
    let touched = window_of(run.t_last) - window_of(run.t0) + 1;
    for k in window_of(run.t0)..=window_of(run.t_last) {
        let certain = run.certain_units_in_window(k);
        assert!(certain <= L, "window {k}: {certain} admissions");
    }
    // A denial dated in window k means its count was L: the admissions possibly dated in k and
    // possibly committed before the denial must number at least L.
    let mut full = Vec::new();
    for d in &run.denials {
        let k = window_of(d.lo);
        if window_of(d.hi) != k {
            continue;
        }
        let possible = run.lo_at_most(d.hi.min((k + 1) * W - 1)) - run.hi_before(k * W);
        assert!(
            possible >= L,
            "denial in window {k} with only {possible} admissions in it"
        );
        if full.last() != Some(&k) {
            full.push(k);
        }
    }
    // Every window holding a denial holds L admissions: only the windows at the edges of the
    // run, where demand started or stopped, can hold fewer; and demand saturated every window
    // it was present in for long enough.
    let saturated = saturated_windows(&run);
    for &k in &saturated {
        assert!(
            full.contains(&k),
            "window {k}: saturated but no denial in it (no process decided for {} of its {} ms)",
            run.quiet_in(k * W, (k + 1) * W) / MS,
            W / MS
        );
    }
    let floor = L * full.len() as u64;
    println!(
        "fixed window ({attach:?}): {n} admitted (workers {:?}), bound {} ({touched} windows), \
         lower bound {floor} ({} windows full, {} saturated)",
        run.per_worker,
        L * touched,
        full.len(),
        saturated.len()
    );
    assert!(n <= L * touched, "{n} admissions in {touched} windows");
    assert!(n >= floor, "{n} admissions, {floor} due");
}

#[test]
fn fixed_window_bound_is_exact_across_processes_opening_by_path() {
    fixed_window(Attach::OpenByPath);
}

#[test]
fn fixed_window_bound_is_exact_across_processes_inheriting_the_handle() {
    fixed_window(Attach::Inherited);
}

fn sliding_log(attach: Attach) {
    let run = run(
        algorithm(SlidingLog::new(L, Duration::from_nanos(W))),
        attach,
        1,
    );
    let n = run.total();
    // Exact: at most L admissions in any interval of length W (stored dates are rounded up to
    // 1024 ns, so an admission's date lies in [lo, hi + 1024]).
    let worst = run.max_certain_in_interval(W, LOG_UNIT);
    assert!(worst <= L, "{worst} admissions within one window");
    // Over the whole run: [t0, t_last + 1024] is covered by floor(T / W) + 1 windows.
    let pieces = (run.t_last + LOG_UNIT - run.t0) / W + 1;
    let bound = L * pieces;
    // A denial at r means the ring's oldest entry, and so all L entries, are dated after r - W
    // (and at most 1024 ns after the latest read committed before it): at least L admissions
    // are possibly dated in (lo - W - 1024, hi] among those possibly committed before it.
    for d in &run.denials {
        let possible =
            run.lo_at_most(d.hi) - run.hi_before((d.lo + 1).saturating_sub(W + LOG_UNIT));
        assert!(
            possible >= L,
            "denial at {} ns with only {possible} admissions in the window before it",
            d.lo - run.t0
        );
    }
    // No lost admission over the run: two denials more than W + 1024 ns apart are backed by two
    // disjoint sets of L admissions. A chain of such denials from the parent's, each the first
    // sampled one far enough after the previous, proves L admissions per link. Under saturating
    // demand the chain has a link per window of the run; a window in which every process was off
    // the CPU when entries expired delays it, and shows as a shorter chain, never as a lost
    // admission.
    let mut links = 1u64;
    let mut last = run.parent_denial();
    for d in &run.denials {
        if d.lo >= last.hi + LOG_UNIT + W {
            links += 1;
            last = *d;
        }
    }
    let floor = L * links;
    println!(
        "sliding log ({attach:?}): {n} admitted (workers {:?}), bound {bound} ({pieces} \
         windows), lower bound {floor} ({links} links), most in one window {worst}",
        run.per_worker
    );
    assert!(n <= bound, "{n} admissions, bound {bound}");
    assert!(n >= floor, "{n} admissions, {floor} due");
}

#[test]
fn sliding_log_bound_is_exact_across_processes_opening_by_path() {
    sliding_log(Attach::OpenByPath);
}

#[test]
fn sliding_log_bound_is_exact_across_processes_inheriting_the_handle() {
    sliding_log(Attach::Inherited);
}

fn sliding_window(attach: Attach) {
    let run = run(
        algorithm(SlidingWindow {
            limit: L,
            window: Duration::from_nanos(W),
            alignment: Alignment::Monotonic,
        }),
        attach,
        1,
    );
    let n = run.total();
    let touched = window_of(run.t_last) - window_of(run.t0) + 1;
    for k in window_of(run.t0)..=window_of(run.t_last) {
        let certain = run.certain_units_in_window(k);
        assert!(certain <= L, "window {k}: {certain} admissions");
    }
    // The documented worst case of the counter: 2 L - 1 in some interval of length W.
    let worst = run.max_certain_in_interval(W, 0);
    assert!(worst < 2 * L, "{worst} admissions within one window");
    // A denial at elapsed e of window k means prev (W - e) + (cur + 1) W > L W. With every
    // admission possibly counted in prev or cur (and committed before), the inequality must hold.
    for d in &run.denials {
        let k = window_of(d.lo);
        if window_of(d.hi) != k || k == 0 {
            continue;
        }
        let elapsed = d.lo - k * W;
        let cur = run.lo_at_most(d.hi) - run.hi_before(k * W);
        let prev = run.lo_before(k * W) - run.hi_before((k - 1) * W);
        let estimate = prev as u128 * (W - elapsed) as u128 + (cur as u128 + 1) * W as u128;
        assert!(
            estimate > L as u128 * W as u128,
            "denial in window {k} at {elapsed} ns: prev {prev}, cur {cur} did not fill it"
        );
    }
    // A window whose last sampled denial is g ns before its end holds more than
    // L - 1 - prev g / W >= L - 1 - L g / W admissions: the estimate's own shortfall. Demand
    // saturated every window it was present in for long enough.
    let saturated = saturated_windows(&run);
    let mut floor = 0;
    let mut full = 0;
    for k in window_of(run.t0)..=window_of(run.t_last) {
        let Some(last) = denials_in_window(&run, k).map(|d| d.lo).max() else {
            assert!(
                !saturated.contains(&k),
                "window {k}: saturated but no denial in it (no process decided for {} of {} ms)",
                run.quiet_in(k * W, (k + 1) * W) / MS,
                W / MS
            );
            continue;
        };
        full += 1;
        let gap = (k + 1) * W - last;
        let due = ((L - 1) * W).saturating_sub(L * gap) / W;
        let possible = run.lo_at_most((k + 1) * W - 1) - run.hi_before(k * W);
        assert!(
            possible >= due,
            "window {k}: {possible} admissions, {due} due"
        );
        floor += due;
    }
    println!(
        "sliding window ({attach:?}): {n} admitted (workers {:?}), bound {} ({touched} windows), \
         lower bound {floor} ({full} windows with denials, {} saturated), most in one window \
         {worst}",
        run.per_worker,
        L * touched,
        saturated.len()
    );
    assert!(n <= L * touched, "{n} admissions in {touched} windows");
    assert!(n >= floor);
}

#[test]
fn sliding_window_counter_stays_within_its_bound_across_processes_opening_by_path() {
    sliding_window(Attach::OpenByPath);
}

#[test]
fn sliding_window_counter_stays_within_its_bound_across_processes_inheriting_the_handle() {
    sliding_window(Attach::Inherited);
}
