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

#[path = "multiprocess/bounds.rs"]
mod bounds;

#[path = "multiprocess/costs.rs"]
mod costs;

#[path = "multiprocess/killed.rs"]
mod killed;

#[path = "multiprocess/identical.rs"]
mod identical;

#[path = "multiprocess/coarse_clock.rs"]
mod coarse_clock;

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
/// How many decisions past the deadline a worker makes at most while it has not seen a denial.
/// A worker deciding alone drains any of the limits here within a few thousand decisions, so one
/// the machine ran late or hardly at all is denied long before this, however late it ran (a
/// count, not a time: a worker first run seconds after the deadline still saturates the limit).
/// One admitted this many times past the deadline would be a limit admitting without end.
const DENIAL_GRACE_DECISIONS: u64 = 1_000_000;

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

/// Decide as fast as possible until `deadline` and a first denial (or [`DENIAL_GRACE_DECISIONS`]
/// decisions past the deadline), recording as described in the module docs, at a cost drawn from
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
    let mut past_deadline = 0u64;
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
        if hi >= deadline {
            if r.denied > 0 || past_deadline >= DENIAL_GRACE_DECISIONS {
                return r;
            }
            past_deadline += 1;
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

/// The token bucket's bound at cost 1 over every interval between two admissions of `run`: the
/// admissions from the `i`-th on whose latest possible date is `latest` are at most
/// `B + (latest - lo_i) / T`. A failure's message starts with `what`.
fn assert_bucket_bound_over_every_interval(run: &Run, what: &str) {
    let a = &run.admissions;
    for i in 0..a.len() {
        let mut latest = 0;
        for (k, s) in a[i..].iter().enumerate() {
            latest = latest.max(s.hi);
            let count = k as u64 + 1;
            assert!(
                count <= B + (latest - a[i].lo) / EMISSION,
                "{what}{count} admissions dated within {} ns",
                latest - a[i].lo
            );
        }
    }
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
