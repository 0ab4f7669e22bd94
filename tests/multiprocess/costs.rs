//! Costs of 1 to 4 per decision: a cost-n admission of the sliding log claims n entries one by
//! one and gives back the ones it got when another process fills the log first, the path most
//! likely to over-admit under contention. Only bounds are checked here: the admitted units.

use super::*;

const MAX_COST: u64 = 4;

#[test]
fn token_bucket_with_costs_never_over_admits() {
    let run = run(
        algorithm(TokenBucket::new(B, Rate::per_second(2_000).unwrap())),
        Attach::Inherited,
        MAX_COST,
    );
    let units = run.units();
    let bound = B + (run.t_last - run.t0) / EMISSION;
    let a = &run.admissions;
    for i in 0..a.len() {
        let (mut latest, mut sum) = (0, 0);
        for s in &a[i..] {
            latest = latest.max(s.hi);
            sum += s.cost;
            assert!(
                sum <= B + (latest - a[i].lo) / EMISSION,
                "{sum} units dated within {} ns",
                latest - a[i].lo
            );
        }
    }
    // A denial of cost n at r means tat > r + tau - n T: as for cost 1, less n - 1 units.
    let tolerance = B * EMISSION - MAX_COST * EMISSION;
    let p = run.parent_denial();
    // Units admitted by the admissions before index i (admissions are sorted by `lo`).
    let prefix: Vec<u64> = std::iter::once(0)
        .chain(a.iter().scan(0, |sum, s| {
            *sum += s.cost;
            Some(*sum)
        }))
        .collect();
    let mut full = 0;
    for pair in run.denials.windows(2) {
        let (before, d) = (pair[0], pair[1]);
        full += d.hi.saturating_sub(before.lo + tolerance);
        let behind = prefix[a.partition_point(|s| s.lo <= d.hi)];
        let due = (run.parent_admitted + d.lo.saturating_sub(p.hi + full) / EMISSION + 1)
            .saturating_sub(d.cost);
        assert!(
            behind >= due,
            "cost-{} denial at {} ns: {behind} units behind it, {due} due",
            d.cost,
            d.lo - run.t0
        );
    }
    println!(
        "token bucket, costs 1..=4: {units} units in {} admissions, bound {bound}",
        run.total()
    );
    assert!(
        units <= bound,
        "{units} units exceed floor(B + r T) = {bound}"
    );
}

#[test]
fn sliding_log_with_costs_never_over_admits() {
    let run = run(
        algorithm(SlidingLog::new(L, Duration::from_nanos(W))),
        Attach::Inherited,
        MAX_COST,
    );
    let worst = run.max_certain_in_interval(W, LOG_UNIT);
    let units = run.units();
    let bound = L * ((run.t_last + LOG_UNIT - run.t0) / W + 1);
    println!(
        "sliding log, costs 1..=4: {units} units in {} admissions, bound {bound}, most in one \
         window {worst}",
        run.total()
    );
    assert!(worst <= L, "{worst} units within one window");
    assert!(units <= bound, "{units} units, bound {bound}");
    // Not starved either: the run spans several windows, each of which admits units again.
    assert!(units > 2 * L, "{units} units");
}

#[test]
fn fixed_window_and_counter_with_costs_never_over_admit() {
    let fixed = run(
        algorithm(FixedWindow::new(L, Duration::from_nanos(W)).aligned(Alignment::Monotonic)),
        Attach::Inherited,
        MAX_COST,
    );
    for k in window_of(fixed.t0)..=window_of(fixed.t_last) {
        let certain = fixed.certain_units_in_window(k);
        assert!(certain <= L, "fixed window {k}: {certain} units");
    }
    let counter = run(
        algorithm(SlidingWindow {
            limit: L,
            window: Duration::from_nanos(W),
            alignment: Alignment::Monotonic,
        }),
        Attach::Inherited,
        MAX_COST,
    );
    for k in window_of(counter.t0)..=window_of(counter.t_last) {
        let certain = counter.certain_units_in_window(k);
        assert!(certain <= L, "counter window {k}: {certain} units");
    }
    let worst = counter.max_certain_in_interval(W, 0);
    println!(
        "costs 1..=4: fixed window {} units, counter {} units (most in one window {worst})",
        fixed.units(),
        counter.units()
    );
    assert!(worst < 2 * L, "counter: {worst} units within one window");
}
