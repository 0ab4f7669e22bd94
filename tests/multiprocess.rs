//! Eight forked processes hammer one limit in one real file; the admissions they report must
//! stay within the algorithm's bound and reach it (no admission lost under saturating demand).
//!
//! # How the bounds are checked
//!
//! Every worker brackets each decision with two clock reads `lo <= date <= hi` (the limiter reads
//! its clock in between), records every admission's `(lo, hi, cost)` and a sample of its denials
//! (the first after each of its admissions, the first in each 100 ms window, and one per 100 us),
//! and reports them with its counts through a pipe. The parent first drains the fresh limit
//! itself (so the run starts from a known state), then forks the workers, which all start at one
//! barrier and run to one shared deadline (a worker not yet denied by then, one a loaded machine
//! ran late or hardly at all, decides on until its first denial: demand saturates the limit in
//! every worker, which the checks assume). From the merged timeline the parent checks:
//!
//! - upper bounds on every interval, counting only admissions *certainly* inside it;
//! - that every sampled denial was justified, counting every admission *possibly* committed
//!   before it (a denial without enough admissions behind it is a lost admission);
//! - the totals against the bound over the span of the admissions, and against the bound minus
//!   what the algorithm can lose: at the edges of the run, and while no process ran at all (a
//!   loaded machine deschedules all eight at times; the lower bounds are derived from the
//!   denials observed, so such stalls weaken them instead of failing them);
//! - that the per-process counts add up to the file's own statistics.
//!
//! Further tests: random costs, processes killed mid-decision, identical instants across
//! processes (exact counts), and the coarse clock.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{fork_lock, fork_workers, now_ns, rate, temp_path, XorShift, MS, SEC};
use shmlimit::{
    Algorithm, Alignment, Clock, CoarseMonotonicClock, FixedWindow, IntoAlgorithm, Limiter,
    MonotonicClock, Rate, RateLimit, SlidingLog, SlidingWindow, TokenBucket,
};

const WORKERS: usize = 8;
/// How long the workers hammer, from the end of the parent's drain.
const RUN_NS: u64 = 1_200 * MS;
/// A worker records at most this many stamps (admissions and sampled denials).
const STAMP_CAPACITY: usize = 1 << 16;
/// Sample one denial per this many nanoseconds, plus the first after each admission and the
/// first in each window of `W` (so a window in which any process was denied shows a denial).
const DENIAL_SAMPLE_NS: u64 = 100_000;
/// The sliding log stores times rounded up to this unit.
const LOG_UNIT: u64 = 1024;
/// How much longer than the deadline a worker decides while it has not seen a denial. A worker
/// deciding alone drains any of the limits here within a few thousand decisions; one still not
/// denied after this long was not run by the machine at all.
const DENIAL_GRACE_NS: u64 = 5 * SEC;

/// How each worker gets its handle.
#[derive(Debug, Clone, Copy)]
enum Attach {
    /// `Limiter::open(path)` in the child, by path alone.
    OpenByPath,
    /// The parent's `Limit`, inherited across `fork` (same mapping, same descriptor).
    Inherited,
}

/// One decision bracketed by two clock reads, and its cost.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    lo: u64,
    hi: u64,
    cost: u64,
}

/// What one worker saw.
#[derive(Debug, Default)]
struct Report {
    admitted: u64,
    denied: u64,
    /// `hi` of its first decision.
    first_hi: u64,
    /// `hi` of its last decision.
    last_hi: u64,
    overflow: bool,
    admissions: Vec<Stamp>,
    denials: Vec<Stamp>,
}

impl Report {
    fn encode(&self) -> Vec<u64> {
        let mut w = vec![
            self.admitted,
            self.denied,
            self.first_hi,
            self.last_hi,
            self.overflow as u64,
            self.admissions.len() as u64,
            self.denials.len() as u64,
        ];
        for s in self.admissions.iter().chain(&self.denials) {
            w.extend([s.lo, s.hi, s.cost]);
        }
        w
    }

    fn decode(w: &[u64]) -> Report {
        assert!(w.len() >= 7, "short report: {} words", w.len());
        let (na, nd) = (w[5] as usize, w[6] as usize);
        assert_eq!(w.len(), 7 + 3 * (na + nd), "report length");
        let stamps: Vec<Stamp> = w[7..]
            .chunks_exact(3)
            .map(|c| Stamp {
                lo: c[0],
                hi: c[1],
                cost: c[2],
            })
            .collect();
        Report {
            admitted: w[0],
            denied: w[1],
            first_hi: w[2],
            last_hi: w[3],
            overflow: w[4] != 0,
            admissions: stamps[..na].to_vec(),
            denials: stamps[na..].to_vec(),
        }
    }
}

/// Decide as fast as possible until `deadline` and a first denial (or [`DENIAL_GRACE_NS`] past
/// the deadline), recording as described in the module docs, at a cost drawn from
/// `1..=max_cost` (seeded by `seed`). With `until_denied`, stop at the first denial instead (the
/// parent's drain).
///
/// `lo` is read from the limiter's own clock (`clock`, a clone of it) just before the decision
/// and `hi` from the precise clock just after: both clocks run on the same timeline and are
/// monotonic, so the decision's date lies in `[lo, hi]` whatever the clock's lag.
fn hammer<C: Clock>(
    limit: &dyn RateLimit<C>,
    clock: &C,
    deadline: u64,
    until_denied: bool,
    max_cost: u64,
    seed: u64,
) -> Report {
    let mut rng = XorShift::new(seed);
    let mut r = Report {
        admissions: Vec::with_capacity(STAMP_CAPACITY),
        denials: Vec::with_capacity(STAMP_CAPACITY),
        ..Report::default()
    };
    let mut sampled_since_admission = false;
    let mut last_sample = 0u64;
    loop {
        let cost = 1 + rng.next_u64() % max_cost;
        let lo = clock.now_ns();
        let decision = limit.try_acquire(cost).expect("decision");
        let hi = now_ns();
        if r.admitted + r.denied == 0 {
            r.first_hi = hi;
        }
        r.last_hi = hi;
        let stamp = Stamp { lo, hi, cost };
        if decision.is_allowed() {
            r.admitted += 1;
            sampled_since_admission = false;
            if r.admissions.len() < STAMP_CAPACITY {
                r.admissions.push(stamp);
            } else {
                r.overflow = true;
            }
        } else {
            r.denied += 1;
            if !sampled_since_admission
                || lo - last_sample >= DENIAL_SAMPLE_NS
                || lo / W != last_sample / W
            {
                sampled_since_admission = true;
                last_sample = lo;
                if r.denials.len() < STAMP_CAPACITY {
                    r.denials.push(stamp);
                } else {
                    r.overflow = true;
                }
            }
            if until_denied {
                return r;
            }
        }
        if hi >= deadline && (r.denied > 0 || hi >= deadline.saturating_add(DENIAL_GRACE_NS)) {
            return r;
        }
    }
}

/// The merged timeline of one run.
struct Run {
    /// `lo` of the first admission (the parent's first decision)...
    t0: u64,
    /// ...and `hi` of the last admission: every admission is dated in `[t0, t_last]`.
    t_last: u64,
    /// The latest first decision of any worker: all were running from here...
    first_all: u64,
    /// ...to the earliest last decision of any worker.
    last_all: u64,
    /// The parent's drain: how many it admitted before its denial.
    parent_admitted: u64,
    /// All admissions (parent's and workers'), sorted by `lo`.
    admissions: Vec<Stamp>,
    /// Every admission's `lo` and `hi`, each sorted, for counting.
    los: Vec<u64>,
    his: Vec<u64>,
    /// All sampled denials, the parent's first, sorted by `lo`.
    denials: Vec<Stamp>,
    /// Every recorded `lo` and `hi`, sorted: where no worker was deciding shows as a gap.
    points: Vec<u64>,
    per_worker: Vec<u64>,
}

/// A gap this long between recorded decisions means no process was deciding (a running worker
/// records a stamp at least every `DENIAL_SAMPLE_NS` plus one decision): for diagnostics.
const QUIET_GAP: u64 = 2 * DENIAL_SAMPLE_NS;

impl Run {
    fn total(&self) -> u64 {
        self.admissions.len() as u64
    }
    /// Units admitted (the sum of the admitted costs).
    fn units(&self) -> u64 {
        self.admissions.iter().map(|s| s.cost).sum()
    }
    /// Admissions with `lo <= t`.
    fn lo_at_most(&self, t: u64) -> u64 {
        self.los.partition_point(|&x| x <= t) as u64
    }
    /// Admissions with `hi < t`.
    fn hi_before(&self, t: u64) -> u64 {
        self.his.partition_point(|&x| x < t) as u64
    }
    /// Admissions with `lo < t`.
    fn lo_before(&self, t: u64) -> u64 {
        self.los.partition_point(|&x| x < t) as u64
    }
    fn parent_denial(&self) -> Stamp {
        self.denials[0]
    }

    /// The most units certainly admitted in one interval of length `len` (dates of admission
    /// `a` lie in `[a.lo, a.hi + slack]`): for each first admission `i`, every later one (by
    /// `lo`) whose latest possible date is within `len` of `lo_i`.
    fn max_certain_in_interval(&self, len: u64, slack: u64) -> u64 {
        let a = &self.admissions;
        let mut best = 0;
        for i in 0..a.len() {
            let mut inside = 0;
            for s in &a[i..] {
                if s.lo >= a[i].lo + len {
                    break;
                }
                if s.hi + slack < a[i].lo + len {
                    inside += s.cost;
                }
            }
            best = best.max(inside);
        }
        best
    }

    /// Units certainly admitted in window `k` of length `W` (both bracket reads in it).
    fn certain_units_in_window(&self, k: u64) -> u64 {
        self.admissions
            .iter()
            .filter(|s| window_of(s.lo) == k && window_of(s.hi) == k)
            .map(|s| s.cost)
            .sum()
    }

    /// Time in `[a, b)` during which no process recorded anything for longer than `QUIET_GAP`:
    /// the machine ran something else (the test's demand was absent).
    fn quiet_in(&self, a: u64, b: u64) -> u64 {
        self.points
            .windows(2)
            .filter(|p| p[1] - p[0] > QUIET_GAP)
            .map(|p| p[1].min(b).saturating_sub(p[0].max(a)))
            .sum()
    }
}

/// Create a fresh file with one limit `x`, drain it from the parent (at cost 1), fork the
/// workers (deciding at costs `1..=max_cost`), merge.
fn run(algorithm: Algorithm, attach: Attach, max_cost: u64) -> Run {
    run_with(algorithm, attach, max_cost, MonotonicClock)
}

/// [`run`], every process deciding with `clock`.
fn run_with<C: Clock>(algorithm: Algorithm, attach: Attach, max_cost: u64, clock: C) -> Run {
    let _serial = fork_lock();
    let (_dir, path) = temp_path("multiprocess.shm");
    let limiter = Limiter::builder()
        .limit("x", algorithm)
        .clock(clock.clone())
        .create_or_open(&path)
        .expect("create limiter file");
    let limit = rate(&limiter, "x").expect("limit x");

    let drain = hammer(&limit, &clock, u64::MAX, true, 1, 1);
    assert_eq!(
        drain.denied, 1,
        "the parent's drain ends at its first denial"
    );
    let deadline = now_ns() + RUN_NS;
    let reports: Vec<Report> = fork_workers(WORKERS, |i| {
        let seed = 1_000 + i as u64;
        let report = match attach {
            Attach::Inherited => hammer(&limit, &clock, deadline, false, max_cost, seed),
            Attach::OpenByPath => {
                let own = open_by_path(&path, clock.clone());
                hammer(&own, &clock, deadline, false, max_cost, seed)
            }
        };
        report.encode()
    })
    .iter()
    .map(|w| Report::decode(w))
    .collect();

    let stats = limit.stats();
    let admitted: u64 = reports.iter().map(|r| r.admitted).sum();
    let denied: u64 = reports.iter().map(|r| r.denied).sum();
    assert_eq!(
        stats.allowed,
        admitted + drain.admitted,
        "the file's statistics count every admission the processes saw"
    );
    assert_eq!(stats.denied, denied + drain.denied);
    for (i, r) in reports.iter().enumerate() {
        assert!(!r.overflow, "worker {i} ran out of stamp space");
        assert_eq!(r.admitted, r.admissions.len() as u64);
        assert!(
            r.denied > 0,
            "worker {i} never saw a denial: demand must saturate"
        );
    }

    let mut admissions: Vec<Stamp> = drain.admissions.clone();
    let mut denials = Vec::new();
    for r in &reports {
        admissions.extend_from_slice(&r.admissions);
        denials.extend_from_slice(&r.denials);
    }
    admissions.sort_by_key(|s| s.lo);
    denials.sort_by_key(|s| s.lo);
    denials.insert(0, drain.denials[0]);
    let mut los: Vec<u64> = admissions.iter().map(|s| s.lo).collect();
    let mut his: Vec<u64> = admissions.iter().map(|s| s.hi).collect();
    los.sort_unstable();
    his.sort_unstable();
    let mut points: Vec<u64> = admissions
        .iter()
        .chain(&denials)
        .flat_map(|s| [s.lo, s.hi])
        .collect();
    points.sort_unstable();
    Run {
        t0: admissions[0].lo,
        t_last: admissions.iter().map(|s| s.hi).max().unwrap(),
        first_all: reports.iter().map(|r| r.first_hi).max().unwrap(),
        last_all: reports.iter().map(|r| r.last_hi).min().unwrap(),
        parent_admitted: drain.admitted,
        admissions,
        los,
        his,
        denials,
        points,
        per_worker: reports.iter().map(|r| r.admitted).collect(),
    }
}

fn open_by_path<C: Clock>(path: &Path, clock: C) -> Box<dyn RateLimit<C>> {
    let limiter = Limiter::builder()
        .clock(clock)
        .open(path)
        .expect("a worker opens the file by path alone");
    assert_eq!(limiter.definitions().len(), 1);
    rate(&limiter, "x").expect("limit x")
}

fn algorithm(spec: impl IntoAlgorithm) -> Algorithm {
    spec.into_algorithm("x").expect("valid definition")
}

// Token bucket: B = 500, r = 2000/s (T = 500 us exactly, so floor(B + r t) = B + floor(t / T)).
// A bucket that is not full loses nothing while nobody asks: every worker would have to be off
// the CPU for about B / r = 250 ms at once before a single token is lost.
const B: u64 = 500;
const EMISSION: u64 = 500_000;

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
    let a = &run.admissions;
    for i in 0..a.len() {
        let mut latest = 0;
        for (k, s) in a[i..].iter().enumerate() {
            latest = latest.max(s.hi);
            let count = k as u64 + 1;
            assert!(
                count <= B + (latest - a[i].lo) / EMISSION,
                "{count} admissions dated within {} ns",
                latest - a[i].lo
            );
        }
    }
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

// Windows: L = 500 per W = 100 ms, so a run touches about 13 windows.
const L: u64 = 500;
const W: u64 = 100 * MS;

fn window_of(t: u64) -> u64 {
    t / W
}

/// Windows that demand certainly saturated: entirely inside the interval in which every worker
/// was running, and with some process deciding for at least 10 ms of the window (a loaded
/// machine can run none of them for a whole window). Filling one takes only L decisions; 10 ms
/// of processes deciding back to back are thousands.
fn saturated_windows(run: &Run) -> Vec<u64> {
    (window_of(run.first_all + W - 1)..window_of(run.last_all + 1))
        .filter(|&k| run.quiet_in(k * W, (k + 1) * W) < W - 10 * MS)
        .collect()
}

/// Sampled denials certainly dated in window `k`.
fn denials_in_window(run: &Run, k: u64) -> impl Iterator<Item = &Stamp> {
    run.denials
        .iter()
        .filter(move |s| window_of(s.lo) == k && window_of(s.hi) == k)
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

// Costs of 1 to 4 per decision: a cost-n admission of the sliding log claims n entries one by
// one and gives back the ones it got when another process fills the log first, the path most
// likely to over-admit under contention. Only bounds are checked here: the admitted units.

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

#[test]
fn processes_killed_mid_decision_leave_every_limit_consistent() {
    // Every decision commits with one CAS (the log: one per claimed entry), so a process killed
    // at any instruction leaves each word old or new. Six processes hammer four limits at costs
    // 1..=3 and are SIGKILLed one by one at arbitrary moments, three rounds over; the survivors'
    // file must still decide without error and, once every window has passed, grant exactly
    // each limit's capacity at one instant.
    let _serial = fork_lock();
    let (_dir, path) = temp_path("killed.shm");
    let window = Duration::from_millis(10);
    let limiter = Limiter::builder()
        .limit(
            "bucket",
            TokenBucket::new(50, Rate::per_second(5_000).unwrap()),
        )
        .limit(
            "fw",
            FixedWindow::new(50, window).aligned(Alignment::Monotonic),
        )
        .limit(
            "sw",
            SlidingWindow {
                limit: 50,
                window,
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(50, window))
        .create_or_open(&path)
        .expect("create limiter file");
    let limits = common::rates(&limiter);
    let mut rng = XorShift::new(31);
    for round in 0..3 {
        let safety = now_ns() + 20 * SEC;
        let children: Vec<_> = (0..6)
            .map(|i| {
                let limits = &limits;
                common::spawn(move || {
                    let mut rng = XorShift::new(round * 100 + i);
                    while now_ns() < safety {
                        for limit in limits {
                            let cost = 1 + rng.next_u64() % 3;
                            let _ = limit.try_acquire(cost).expect("no error after a kill");
                        }
                    }
                    Vec::new()
                })
            })
            .collect();
        for child in children {
            std::thread::sleep(Duration::from_micros(2_000 + rng.next_u64() % 20_000));
            child.kill();
            let (status, _) = child.wait();
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                "round {round}: a worker ended by itself (status {status:#x}): it failed"
            );
        }
        // Decisions still work now...
        for limit in &limits {
            let _ = limit.try_acquire(1).expect("a decision after the kills");
        }
        // ...and a second after the last kill every window has passed: exactly the capacity.
        // (A handle whose clock reads that second: a date may not run ahead of the clock.)
        let later = now_ns() + SEC;
        let ahead = shmlimit::Limiter::builder()
            .clock(shmlimit::ManualClock::new(later))
            .open(&path)
            .unwrap();
        for limit in &common::rates(&ahead) {
            let mut granted = 0;
            while limit.try_acquire_at(1, later).unwrap().is_allowed() {
                granted += 1;
                assert!(granted <= 50, "{}: more than its capacity", limit.name());
            }
            assert_eq!(granted, 50, "round {round}: {}", limit.name());
        }
        // Let the clock pass the dates used above before the next round.
        std::thread::sleep(Duration::from_millis(1_050));
    }
}

#[test]
fn identical_timestamps_across_processes_admit_exact_counts() {
    // Eight processes decide at the same instants (`try_acquire_at`), 100 attempts per limit
    // each: the counts are exact whatever the interleaving. Capacities 300; the bucket refills
    // one token a second; windows are 60 s, monotonic, and every instant is a multiple of the
    // log's 1024 ns storage unit.
    //
    // | instant            | bucket | fixed window    | counter                 | log          |
    // |--------------------|--------|-----------------|-------------------------|--------------|
    // | t1 = 1200 s - 1024 | 300    | 300 (window 19) | 300                     | 300          |
    // | t2 = 1200 s        | 0      | 300 (window 20) | 0 (prev weighs in full) | 0            |
    // | t3 = t1 + 60 s     | 60     | 0 (window 20)   | 299 (prev weighs 1024/W)| 300 (expired)|
    let _serial = fork_lock();
    let (_dir, path) = temp_path("instants.shm");
    let minute = Duration::from_secs(60);
    let limiter = Limiter::builder()
        .limit(
            "bucket",
            TokenBucket::new(300, Rate::per_second(1).unwrap()),
        )
        .limit(
            "fw",
            FixedWindow::new(300, minute).aligned(Alignment::Monotonic),
        )
        .limit(
            "sw",
            SlidingWindow {
                limit: 300,
                window: minute,
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(300, minute))
        .create_or_open(&path)
        .expect("create limiter file");
    let t1 = 1_200 * SEC - 1024;
    let phases = [
        (t1, [300, 300, 300, 300]),
        (1_200 * SEC, [0, 300, 0, 0]),
        (t1 + 60 * SEC, [60, 0, 299, 300]),
    ];
    let mut expected_total = [0u64; 4];
    for (at, expected) in phases {
        let results = fork_workers(WORKERS, |_| {
            // The clock reads `at` (dates may not run ahead of the clock; a fresh machine's
            // uptime may be shorter than 20 minutes).
            let limiter = Limiter::builder()
                .clock(shmlimit::ManualClock::new(at))
                .open(&path)
                .expect("open by path");
            common::rates(&limiter)
                .iter()
                .map(|limit| {
                    (0..100)
                        .filter(|_| limit.try_acquire_at(1, at).unwrap().is_allowed())
                        .count() as u64
                })
                .collect()
        });
        let mut sums = [0u64; 4];
        for r in &results {
            for (s, v) in sums.iter_mut().zip(r) {
                *s += v;
            }
        }
        assert_eq!(sums, expected, "at {at} ns (bucket, fw, sw, log)");
        for (total, e) in expected_total.iter_mut().zip(expected) {
            *total += e;
        }
    }
    for (limit, total) in limiter.limits().iter().zip(expected_total) {
        let stats = limit.stats();
        assert_eq!(stats.allowed, total, "{}", limit.name());
        assert_eq!(
            stats.allowed + stats.denied,
            3 * WORKERS as u64 * 100,
            "{}",
            limit.name()
        );
    }
}

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
    let a = &run.admissions;
    for i in 0..a.len() {
        let mut latest = 0;
        for (k, s) in a[i..].iter().enumerate() {
            latest = latest.max(s.hi);
            let count = k as u64 + 1;
            assert!(
                count <= B + (latest - a[i].lo) / EMISSION,
                "coarse bucket: {count} admissions dated within {} ns",
                latest - a[i].lo
            );
        }
    }
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
