//! Exact boundary behaviour of every algorithm, driven by a manual clock on a real limiter file.

mod common;

use std::time::Duration;

use common::{XorShift, MS, SEC};
use shmlimit::{
    Alignment, Clock, Error, FixedWindow, IntoAlgorithm, Limiter, ManualClock, Rate, RateLimit,
    SlidingLog, SlidingWindow, TokenBucket,
};

/// Far from zero, so that no test depends on a fresh state looking like "time 0".
const BASE: u64 = 1_000 * SEC;
const MINUTE: Duration = Duration::from_secs(60);

struct Fixture {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    limiter: Limiter<ManualClock>,
}

impl Fixture {
    fn limit(&self, name: &str) -> Box<dyn RateLimit<ManualClock>> {
        common::rate(&self.limiter, name).expect("limit is defined")
    }
}

/// A limiter file in a fresh temporary directory holding `defs`, read through a manual clock
/// that starts at `start_ns`.
fn fixture(defs: Vec<(&str, shmlimit::Algorithm)>, start_ns: u64) -> Fixture {
    let (dir, path) = common::temp_path("limits.shm");
    let clock = ManualClock::new(start_ns);
    let mut builder = Limiter::builder().clock(clock.clone());
    for (name, algorithm) in defs {
        builder = builder.limit(name, algorithm);
    }
    let limiter = builder.create_or_open(&path).expect("create limiter file");
    Fixture {
        _dir: dir,
        clock,
        limiter,
    }
}

fn alg(spec: impl IntoAlgorithm) -> shmlimit::Algorithm {
    spec.into_algorithm("test").expect("valid definition")
}

fn fixed(limit: u64, window: Duration) -> shmlimit::Algorithm {
    alg(FixedWindow::new(limit, window).aligned(Alignment::Monotonic))
}

fn sliding_window(limit: u64, window: Duration) -> shmlimit::Algorithm {
    alg(SlidingWindow {
        limit,
        window,
        alignment: Alignment::Monotonic,
    })
}

fn log(limit: u64, window: Duration) -> shmlimit::Algorithm {
    alg(SlidingLog::new(limit, window))
}

fn bucket(capacity: u64, tokens: u64, period: Duration) -> shmlimit::Algorithm {
    alg(TokenBucket::new(
        capacity,
        Rate::new(tokens, period).expect("valid rate"),
    ))
}

/// Acquire cost 1 `attempts` times at the clock's current time; how many were admitted.
fn burst(limit: &dyn RateLimit<ManualClock>, attempts: u64) -> u64 {
    (0..attempts)
        .filter(|_| limit.try_acquire(1).expect("decision").is_allowed())
        .count() as u64
}

/// Acquire cost 1 until the first denial (at most `cap` admissions); how many were admitted.
fn until_denied(limit: &dyn RateLimit<ManualClock>, cap: u64) -> u64 {
    let mut admitted = 0;
    while admitted < cap && limit.try_acquire(1).expect("decision").is_allowed() {
        admitted += 1;
    }
    admitted
}

#[test]
fn fixed_window_passes_twice_the_limit_across_a_boundary_and_the_log_does_not() {
    // Window 20 of 60 s is [1200 s, 1260 s); 1200 s - 1 ns is the last instant of window 19.
    let boundary = 1_200 * SEC;
    let f = fixture(
        vec![("fw", fixed(100, MINUTE)), ("log", log(100, MINUTE))],
        boundary - 1,
    );
    let (fw, log) = (f.limit("fw"), f.limit("log"));

    assert_eq!(burst(&fw, 100), 100, "100 at the last instant of a window");
    let denied = fw.try_acquire(1).unwrap();
    assert!(denied.is_denied());
    assert_eq!(
        denied.retry_after_ns(),
        1,
        "the next window starts 1 ns later"
    );
    assert_eq!(burst(&log, 100), 100);
    assert!(log.try_acquire(1).unwrap().is_denied());

    f.clock.set(boundary);
    assert_eq!(
        burst(&fw, 100),
        100,
        "100 more at the first instant of the next"
    );
    let denied = fw.try_acquire(1).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.retry_after_ns(), 60 * SEC);
    assert_eq!(burst(&log, 100), 0, "the log admits only 100 of the 200");

    assert_eq!(fw.stats().allowed, 200);
    assert_eq!(fw.stats().denied, 2);
    assert_eq!(log.stats().allowed, 100);
    assert_eq!(log.stats().denied, 101);
}

#[test]
fn token_bucket_admits_exactly_23_in_two_seconds_and_120_in_a_minute() {
    // B = 20, r = 100/min: one token every 600 ms, floor(20 + 100/60 x 2) = 23 and
    // floor(20 + 100) = 120. Two buckets: one gets unlimited demand at every millisecond, the
    // other one request per millisecond.
    let f = fixture(
        vec![
            ("greedy", bucket(20, 100, MINUTE)),
            ("single", bucket(20, 100, MINUTE)),
        ],
        BASE,
    );
    let (greedy, single) = (f.limit("greedy"), f.limit("single"));
    let mut greedy_total = 0;
    let mut single_total = 0;
    for ms in 0..=60_000u64 {
        f.clock.set(BASE + ms * MS);
        greedy_total += until_denied(&greedy, 1_000);
        single_total += single.try_acquire(1).unwrap().is_allowed() as u64;
        if ms == 2_000 {
            assert_eq!(greedy_total, 23, "greedy demand in [0 s, 2 s]");
            assert_eq!(single_total, 23, "one request per ms in [0 s, 2 s]");
        }
    }
    assert_eq!(greedy_total, 120, "greedy demand in [0 s, 60 s]");
    assert_eq!(single_total, 120, "one request per ms in [0 s, 60 s]");
    assert_eq!(greedy.stats().allowed, 120);
    assert_eq!(single.stats().allowed + single.stats().denied, 60_001);
}

#[test]
fn many_admissions_at_one_timestamp_admit_exactly_the_capacity() {
    let f = fixture(
        vec![
            ("bucket", bucket(37, 1, Duration::from_secs(1))),
            ("fw", fixed(50, MINUTE)),
            ("sw", sliding_window(64, MINUTE)),
            ("log", log(75, MINUTE)),
        ],
        BASE + 123_456_789,
    );
    for (name, capacity) in [("bucket", 37), ("fw", 50), ("sw", 64), ("log", 75)] {
        let limit = f.limit(name);
        assert_eq!(limit.capacity(), capacity);
        for k in 1..=capacity {
            let d = limit.try_acquire(1).unwrap();
            assert!(d.is_allowed(), "{name}: admission {k} of {capacity}");
            assert_eq!(d.remaining(), capacity - k, "{name}: remaining after {k}");
        }
        for _ in 0..(3 * capacity) {
            let d = limit.try_acquire(1).unwrap();
            assert!(d.is_denied(), "{name}: beyond the capacity");
            assert_eq!(d.remaining(), 0, "{name}");
            assert!(d.retry_after_ns() > 0, "{name}");
        }
        assert_eq!(limit.stats().allowed, capacity, "{name}");
        assert_eq!(limit.stats().denied, 3 * capacity, "{name}");
    }
}

/// After a denial, the same request at `now + retry_after - 1` is denied and at
/// `now + retry_after` admitted (checked with a peek first, then for real).
fn assert_retry_exact(f: &Fixture, limit: &dyn RateLimit<ManualClock>, cost: u64, what: &str) {
    let now = f.clock.now_ns();
    let denied = limit.try_acquire(cost).unwrap();
    assert!(denied.is_denied(), "{what}: expected a denial");
    let retry = denied.retry_after_ns();
    assert!(retry > 0, "{what}");
    f.clock.set(now + retry - 1);
    assert!(
        limit.peek(cost).unwrap().is_denied(),
        "{what}: peek 1 ns early"
    );
    assert!(
        limit.try_acquire(cost).unwrap().is_denied(),
        "{what}: 1 ns early (retry {retry})"
    );
    f.clock.set(now + retry);
    assert!(
        limit.peek(cost).unwrap().is_allowed(),
        "{what}: peek on time"
    );
    assert!(
        limit.try_acquire(cost).unwrap().is_allowed(),
        "{what}: on time (retry {retry})"
    );
}

#[test]
fn retry_after_is_exact_for_the_token_bucket() {
    let f = fixture(vec![("b", bucket(20, 100, MINUTE))], BASE);
    let b = f.limit("b");
    assert_eq!(until_denied(&b, 100), 20);
    // Empty at BASE: the next token is 600 ms away.
    let d = b.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 600 * MS);
    assert_eq!(d.retry_after_secs_ceil(), 1);
    assert_retry_exact(&f, &b, 1, "bucket, cost 1, at a refill instant");
    // Off the refill grid: 250 ms later the next token is 600 ms after the last refill.
    f.clock.advance(250 * MS);
    let d = b.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 350 * MS);
    assert_retry_exact(&f, &b, 1, "bucket, cost 1, off the grid");
    // Cost 5 needs five tokens: 5 x 600 ms from empty.
    let d = b.try_acquire(5).unwrap();
    assert_eq!(d.retry_after_ns(), 5 * 600 * MS);
    f.clock.advance(123 * MS + 7);
    assert_retry_exact(&f, &b, 5, "bucket, cost 5");
    // The full capacity is one grant; one more is an error, not a denial.
    f.clock.advance(3_600 * SEC);
    assert!(b.try_acquire(20).unwrap().is_allowed());
    assert_retry_exact(&f, &b, 20, "bucket, cost = capacity");
}

#[test]
fn retry_after_is_exact_for_the_sliding_log() {
    let f = fixture(vec![("log", log(5, Duration::from_secs(10)))], BASE);
    let l = f.limit("log");
    // One admission per second, at times that are not multiples of the 1024 ns storage unit.
    for k in 0..5 {
        f.clock.set(BASE + k * SEC + 777);
        assert!(l.try_acquire(1).unwrap().is_allowed());
    }
    f.clock.set(BASE + 5 * SEC);
    let d = l.try_acquire(1).unwrap();
    assert!(d.is_denied());
    // The oldest admission expires 10 s after it was recorded: about 5 s from now, never earlier
    // (the entry is stored rounded up to 1024 ns).
    let expected = BASE + 10 * SEC + 777 - (BASE + 5 * SEC);
    assert!(
        d.retry_after_ns() >= expected && d.retry_after_ns() < expected + 1024,
        "retry {} vs {expected}",
        d.retry_after_ns()
    );
    assert_retry_exact(&f, &l, 1, "log, cost 1");
    // Cost 3 needs the three oldest entries free: the third oldest is the binding one.
    f.clock.set(BASE + 10 * SEC + 777 + 10);
    assert_retry_exact(&f, &l, 3, "log, cost 3");
}

#[test]
fn retry_after_lands_on_the_next_boundary_for_the_fixed_window() {
    let f = fixture(vec![("fw", fixed(100, MINUTE))], 1_200 * SEC + 17 * SEC + 5);
    let fw = f.limit("fw");
    assert_eq!(until_denied(&fw, 1_000), 100);
    let d = fw.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 60 * SEC - 17 * SEC - 5);
    assert_retry_exact(&f, &fw, 1, "fixed window, cost 1");
    // In the new window (at its first instant), 99 more fit; a cost of 2 waits for the next.
    assert_eq!(burst(&fw, 98), 98);
    f.clock.advance(SEC);
    let d = fw.try_acquire(2).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 59 * SEC);
    assert_eq!(d.remaining(), 1);
    assert_retry_exact(&f, &fw, 2, "fixed window, cost 2");
}

#[test]
fn retry_after_of_the_sliding_window_counter_leads_to_an_admission() {
    let f = fixture(
        vec![("sw", sliding_window(10, Duration::from_secs(1)))],
        BASE,
    );
    let sw = f.limit("sw");
    assert_eq!(until_denied(&sw, 100), 10);
    assert_retry_exact(&f, &sw, 1, "sliding window at the first boundary");
    let mut rng = XorShift::new(7);
    for round in 0..200 {
        f.clock.advance(rng.next_u64() % (400 * MS));
        let cost = 1 + rng.next_u64() % 4;
        if sw.peek(cost).unwrap().is_allowed() {
            let _ = sw.try_acquire(cost).unwrap();
            until_denied(&sw, 100);
        }
        if sw.peek(cost).unwrap().is_denied() {
            assert_retry_exact(&f, &sw, cost, &format!("sliding window, round {round}"));
        }
    }
}

#[test]
fn costs_beyond_the_capacity_are_errors_and_zero_is_refused() {
    let f = fixture(
        vec![
            ("bucket", bucket(20, 100, MINUTE)),
            ("fw", fixed(100, MINUTE)),
            ("sw", sliding_window(100, MINUTE)),
            ("log", log(100, MINUTE)),
        ],
        BASE,
    );
    for (name, capacity) in [("bucket", 20), ("fw", 100), ("sw", 100), ("log", 100)] {
        let limit = f.limit(name);
        for result in [limit.try_acquire(capacity + 1), limit.peek(capacity + 1)] {
            match result {
                Err(Error::CostExceedsCapacity {
                    cost,
                    capacity: reported,
                }) => {
                    assert_eq!((cost, reported), (capacity + 1, capacity), "{name}");
                }
                other => panic!("{name}: expected CostExceedsCapacity, got {other:?}"),
            }
        }
        assert!(
            matches!(
                limit.try_acquire(u64::MAX),
                Err(Error::CostExceedsCapacity { .. })
            ),
            "{name}"
        );
        assert!(
            matches!(limit.try_acquire(0), Err(Error::ZeroCost)),
            "{name}"
        );
        assert!(matches!(limit.peek(0), Err(Error::ZeroCost)), "{name}");
        assert_eq!(
            limit.stats(),
            shmlimit::Stats::default(),
            "{name}: errors are not decisions"
        );
        // The whole capacity at once is a valid request, and drains the limit.
        assert!(limit.try_acquire(capacity).unwrap().is_allowed(), "{name}");
        assert!(limit.try_acquire(1).unwrap().is_denied(), "{name}");
    }
}

#[test]
fn peek_consumes_nothing() {
    let f = fixture(
        vec![
            ("bucket", bucket(20, 100, MINUTE)),
            ("fw", fixed(100, MINUTE)),
            ("sw", sliding_window(100, MINUTE)),
            ("log", log(100, MINUTE)),
        ],
        BASE + 42 * SEC,
    );
    for (name, capacity) in [("bucket", 20), ("fw", 100), ("sw", 100), ("log", 100)] {
        let limit = f.limit(name);
        for _ in 0..1_000 {
            let d = limit.peek(1).unwrap();
            assert!(d.is_allowed(), "{name}");
            assert_eq!(d.remaining(), capacity - 1, "{name}");
        }
        assert!(limit.peek(capacity).unwrap().is_allowed(), "{name}");
        assert_eq!(limit.stats(), shmlimit::Stats::default(), "{name}");
        // Every peek agrees with the acquisition that follows it.
        for _ in 0..capacity + 5 {
            let peeked = limit.peek(1).unwrap();
            let acquired = limit.try_acquire(1).unwrap();
            assert_eq!(peeked, acquired, "{name}");
        }
        assert_eq!(
            limit.stats().allowed,
            capacity,
            "{name}: peeks took nothing"
        );
        let denied = limit.peek(1).unwrap();
        assert!(denied.is_denied(), "{name}");
        assert_eq!(denied, limit.try_acquire(1).unwrap(), "{name}");
    }
}

#[test]
fn a_clock_read_older_than_the_state_never_grants_more() {
    let w = MINUTE;
    let now = 1_200 * SEC + 30 * SEC;
    // How far back the stale reads are: within the window, at the previous boundary, one
    // window, many windows and a long time back.
    for back in [
        1,
        1024,
        30 * SEC,
        30 * SEC + 1,
        60 * SEC,
        600 * SEC,
        now - SEC,
    ] {
        let f = fixture(
            vec![
                ("bucket", bucket(20, 100, w)),
                ("fw", fixed(100, w)),
                ("sw", sliding_window(100, w)),
                ("log", log(100, w)),
            ],
            now,
        );
        for (name, capacity) in [("bucket", 20), ("fw", 100), ("sw", 100), ("log", 100)] {
            let limit = f.limit(name);
            f.clock.set(now);
            // One admission at `now` stores a state that knows `now`.
            assert!(limit.try_acquire(1).unwrap().is_allowed());
            f.clock.set(now - back);
            let stale = until_denied(&limit, 1_000);
            f.clock.set(now);
            let current = until_denied(&limit, 1_000);
            assert!(
                stale < capacity,
                "{name}, {back} ns back: stale reads admitted {stale}"
            );
            assert_eq!(
                stale + current,
                capacity - 1,
                "{name}, {back} ns back: stale reads must not add budget"
            );
            // The state did not move back: still empty at `now` and just before.
            f.clock.set(now - back);
            assert!(limit.try_acquire(1).unwrap().is_denied(), "{name}");
            f.clock.set(now);
            assert!(limit.try_acquire(1).unwrap().is_denied(), "{name}");
        }
    }
}

#[test]
fn stale_reads_mixed_into_a_run_keep_the_bucket_within_its_bound() {
    // Demand at every millisecond, but every third read is up to 50 ms stale: the admissions
    // in [0, t] still never exceed floor(B + r t), where t is the newest time read so far.
    let f = fixture(vec![("b", bucket(20, 100, Duration::from_secs(1)))], BASE);
    let b = f.limit("b");
    let mut rng = XorShift::new(99);
    let mut admitted = 0u64;
    for ms in 0..5_000u64 {
        let t = BASE + ms * MS;
        let read = if ms % 3 == 0 {
            t.saturating_sub(rng.next_u64() % (50 * MS))
        } else {
            t
        };
        f.clock.set(read.max(BASE));
        admitted += until_denied(&b, 1_000);
        // T = 10 ms exactly: floor(20 + 100/s x ms).
        assert!(
            admitted <= 20 + ms / 10,
            "{admitted} admitted by {ms} ms, bound {}",
            20 + ms / 10
        );
    }
    assert!(
        admitted >= 20 + 4_990 / 10,
        "demand was saturating: {admitted}"
    );
}

/// Largest number of the (sorted) times that fall in one closed interval `[s, s + len - 1]`,
/// i.e. in some interval of length `len` ns.
fn max_in_any_interval(times: &[u64], len: u64) -> usize {
    let mut best = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= len {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

#[test]
fn sliding_window_counter_worst_case_is_two_l_minus_one() {
    // The estimate at elapsed e of window k is prev (W - e) / W + cur. The adversary fills the
    // last instant of window k - 1 (prev = L, possible after an empty window), then waits until
    // the weight of prev is as small as an interval of length W still ending in window k allows:
    // at e = W - 2 the estimate admits cur = L - 1 (the weight 2 L / W > 0 still costs one).
    // Any interval of length W meets at most two windows, holds at most prev + (L - 1) <= 2L - 1,
    // so 2L - 1 is the exact worst case: with L = 100 that is 199, not 100.
    const L: u64 = 100;
    let k = 21 * 60 * SEC; // the start of window k (W = 60 s)
    let f = fixture(vec![("sw", sliding_window(L, MINUTE))], k - 1);
    let sw = f.limit("sw");
    let mut times = Vec::new();
    let first = burst(&sw, 2 * L);
    times.extend(std::iter::repeat_n(k - 1, first as usize));
    assert_eq!(first, L);
    f.clock.set(k + 60 * SEC - 2);
    let second = burst(&sw, 2 * L);
    times.extend(std::iter::repeat_n(k + 60 * SEC - 2, second as usize));
    assert_eq!(second, L - 1);
    let worst = max_in_any_interval(&times, 60 * SEC) as u64;
    assert_eq!(worst, 2 * L - 1);
    assert!(
        worst > L,
        "the counter is an approximation, not a bound of L"
    );

    // No adversary does better: bursts at random instants biased towards window ends, over many
    // windows (L = 10, W = 1 ms), never put more than 2L - 1 in any interval of length W, and
    // the best of them reach it.
    const SMALL_L: u64 = 10;
    let w = MS;
    let f = fixture(
        vec![("sw", sliding_window(SMALL_L, Duration::from_millis(1)))],
        BASE,
    );
    let sw = f.limit("sw");
    let mut rng = XorShift::new(2024);
    let mut times = Vec::new();
    let mut t = BASE;
    for _ in 0..20_000 {
        t += match rng.next_u64() % 4 {
            0 => rng.next_u64() % w,
            1 => 1 + rng.next_u64() % 8,
            2 => w - (t % w) - 1 - (rng.next_u64() % 3).min(w - (t % w) - 1),
            _ => rng.next_u64() % (3 * w),
        };
        f.clock.set(t);
        let n = burst(&sw, 1 + rng.next_u64() % (2 * SMALL_L));
        times.extend(std::iter::repeat_n(t, n as usize));
    }
    let worst = max_in_any_interval(&times, w) as u64;
    assert_eq!(
        worst,
        2 * SMALL_L - 1,
        "worst case over a random adversarial run"
    );
}

/// Feed identical arrivals to the counter and to the exact log; the admissions of each.
fn compare_with_log(arrivals: &[u64], limit: u64, window: Duration) -> (u64, u64) {
    let f = fixture(
        vec![
            ("sw", sliding_window(limit, window)),
            ("log", log(limit, window)),
        ],
        BASE,
    );
    let (sw, log) = (f.limit("sw"), f.limit("log"));
    // The clock at the last arrival: dated calls may not run ahead of it.
    f.clock.set(arrivals.iter().copied().max().unwrap_or(BASE));
    let mut admitted = (0, 0);
    for &t in arrivals {
        admitted.0 += sw.try_acquire_at(1, t).unwrap().is_allowed() as u64;
        admitted.1 += log.try_acquire_at(1, t).unwrap().is_allowed() as u64;
    }
    assert_eq!(sw.stats().allowed, admitted.0);
    assert_eq!(log.stats().allowed, admitted.1);
    admitted
}

#[test]
fn sliding_window_counter_tracks_the_exact_log_under_steady_and_poisson_load() {
    const L: u64 = 100;
    let window = Duration::from_secs(1);
    let windows = 300u64;
    // Poisson arrivals at 0.9x, 1.1x, 1.5x and 3x the limit, and evenly spaced (jittered)
    // arrivals at 1.2x: the counter's admissions stay within 2% of the exact log's.
    let mut cases = Vec::new();
    for (seed, load) in [(1u64, 0.9f64), (2, 1.1), (3, 1.5), (4, 3.0)] {
        let mut rng = XorShift::new(seed);
        let mean = SEC as f64 / (L as f64 * load);
        let mut t = BASE;
        let mut arrivals = Vec::new();
        while t < BASE + windows * SEC {
            t += rng.exp_ns(mean).max(1);
            arrivals.push(t);
        }
        cases.push((format!("poisson {load}x"), arrivals));
    }
    let mut rng = XorShift::new(5);
    let gap = SEC / (L * 12 / 10);
    let steady: Vec<u64> = (0..windows * L * 12 / 10)
        .map(|i| BASE + i * gap + rng.next_u64() % (gap / 2))
        .collect();
    cases.push(("steady 1.2x".to_string(), steady));
    for (name, arrivals) in cases {
        let (sw, log) = compare_with_log(&arrivals, L, window);
        let error = (sw as f64 - log as f64).abs() / log as f64;
        println!(
            "{name}: {} arrivals, counter {sw}, log {log}, error {:.3}%",
            arrivals.len(),
            error * 100.0
        );
        assert!(
            error <= 0.02,
            "{name}: counter {sw} vs log {log} ({:.2}%)",
            error * 100.0
        );
    }
}

#[test]
fn the_rounding_of_the_emission_interval_never_loosens_the_bucket() {
    // Rates whose emission interval is not a whole number of nanoseconds: 3/s, 7/min, 0.7/s.
    // Under demand at every millisecond, admissions in [0, t] follow B + #{k : ceil(k T) <= t}
    // exactly and never exceed floor(B + r t), checked in exact integer arithmetic.
    let cases: [(&str, shmlimit::Rate, u128, u128, u64); 3] = [
        (
            "3/s",
            Rate::per_second(3).unwrap(),
            3,
            SEC as u128,
            20 * SEC,
        ),
        (
            "7/min",
            Rate::new(7, MINUTE).unwrap(),
            7,
            60 * SEC as u128,
            180 * SEC,
        ),
        (
            "0.7/s",
            Rate::per_second_f64(0.7).unwrap(),
            7,
            10 * SEC as u128,
            30 * SEC,
        ),
    ];
    for (name, rate, tokens, per_ns, span) in cases {
        const CAP: u64 = 2;
        let f = fixture(vec![("b", alg(TokenBucket::new(CAP, rate)))], BASE);
        let b = f.limit("b");
        let t_emission = rate.emission_ns();
        assert!(
            t_emission as u128 * tokens >= per_ns,
            "{name}: the emission interval is rounded up"
        );
        let mut times = Vec::new();
        for ms in 0..=span / MS {
            let t = ms * MS;
            f.clock.set(BASE + t);
            for _ in 0..until_denied(&b, 100) {
                times.push(t);
            }
            let admitted = times.len() as u64;
            let bound = CAP + (tokens * t as u128 / per_ns) as u64;
            assert!(
                admitted <= bound,
                "{name}: {admitted} by {t} ns, bound {bound}"
            );
            // GCRA at millisecond demand: the k-th refill is taken at the first ms >= k T.
            let refills = (1..)
                .take_while(|k| (k * t_emission).div_ceil(MS) * MS <= t)
                .count();
            assert_eq!(admitted, CAP + refills as u64, "{name} at {t} ns");
        }
        // Every interval between two admissions, not just those starting at 0.
        for i in 0..times.len() {
            for j in i..times.len() {
                let count = (j - i + 1) as u64;
                let bound = CAP + (tokens * (times[j] - times[i]) as u128 / per_ns) as u64;
                assert!(
                    count <= bound,
                    "{name}: {count} in [{}, {}]",
                    times[i],
                    times[j]
                );
            }
        }
    }
}

#[test]
fn the_sliding_log_window_is_half_open() {
    // At most L in every (t - W, t]: an admission at t no longer counts at t + W.
    let t = 1_000_000 * 1024; // a multiple of the 1024 ns storage unit: stored exactly
    let f = fixture(vec![("log", log(1, Duration::from_secs(1)))], t);
    let l = f.limit("log");
    assert!(l.try_acquire(1).unwrap().is_allowed());
    f.clock.set(t + SEC - 1);
    let d = l.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 1);
    f.clock.set(t + SEC);
    assert!(l.try_acquire(1).unwrap().is_allowed());
}

#[test]
fn fixed_windows_are_aligned_to_wall_clock_minutes_by_default() {
    // The file records realtime - monotonic at creation; a default fixed window of one minute
    // turns over when Unix time crosses a whole minute. Measure the same offset around the
    // creation and probe 50 ms either side of the monotonic instant of a minute boundary.
    let w = 60 * SEC;
    let (dir, path) = common::temp_path("wall.shm");
    let clock = ManualClock::new(BASE);
    let unix_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = unix_ns().wrapping_sub(common::now_ns());
    let limiter = Limiter::builder()
        .limit("fw", FixedWindow::new(3, MINUTE))
        .clock(clock.clone())
        .create_or_open(&path)
        .unwrap();
    let after = unix_ns().wrapping_sub(common::now_ns());
    let offset = before / 2 + after / 2;
    assert!(
        before.abs_diff(after) < 10 * MS,
        "the clocks were read far apart"
    );
    // The monotonic instant at which Unix time is a whole minute, after BASE.
    let boundary = (BASE / w + 2) * w - offset % w;
    assert_eq!((boundary + offset) % w, 0);
    let fw = limiter.window("fw").unwrap();
    clock.set(boundary - 50 * MS);
    assert!(fw.try_acquire(3).unwrap().is_allowed());
    let d = fw.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert!(
        d.retry_after_ns() > 30 * MS && d.retry_after_ns() < 70 * MS,
        "the window ends at the minute: retry {} ns",
        d.retry_after_ns()
    );
    clock.set(boundary + 50 * MS);
    assert!(fw.try_acquire(3).unwrap().is_allowed(), "a new minute");
    drop(dir);
}

/// What a reference model decides: allowed, remaining, and (when it knows it) the retry-after.
type Reference = (bool, u64, Option<u64>);

/// Drive `name` and a reference model with the same pseudo-random arrivals (identical
/// timestamps, small and large gaps; times in multiples of 1024 ns, which the sliding log
/// stores exactly) and costs in `1..=max_cost`; every decision must agree.
fn agrees_with_reference(
    spec: shmlimit::Algorithm,
    max_cost: u64,
    steps: usize,
    seed: u64,
    mut model: impl FnMut(u64, u64) -> Reference,
) {
    let f = fixture(vec![("x", spec)], BASE);
    let x = f.limit("x");
    let mut rng = XorShift::new(seed);
    let mut t = BASE;
    for step in 0..steps {
        t += 1024
            * match rng.next_u64() % 4 {
                0 => 0,
                1 => rng.next_u64() % 64,
                2 => rng.next_u64() % 20_000,
                _ => rng.next_u64() % 400_000,
            };
        let cost = 1 + rng.next_u64() % max_cost;
        f.clock.set(t);
        let got = x.try_acquire(cost).unwrap();
        let (allowed, remaining, retry) = model(t, cost);
        let at = format!("step {step}, t = {t}, cost {cost}: {got:?}");
        assert_eq!(got.is_allowed(), allowed, "{at}");
        assert_eq!(got.remaining(), remaining, "{at}");
        if let Some(retry) = retry {
            assert_eq!(got.retry_after_ns(), retry, "{at}");
        }
    }
    // Both outcomes were exercised, many times.
    let stats = x.stats();
    assert!(
        stats.allowed > steps as u64 / 10 && stats.denied > steps as u64 / 10,
        "{stats:?}"
    );
}

#[test]
fn the_sliding_log_matches_an_exact_reference() {
    const L: u64 = 20;
    let w = SEC;
    let mut window = std::collections::VecDeque::new();
    agrees_with_reference(log(L, Duration::from_secs(1)), 5, 20_000, 11, |t, n| {
        while window.front().is_some_and(|&a| a + w <= t) {
            window.pop_front();
        }
        let held = window.len() as u64;
        if held + n <= L {
            window.extend(std::iter::repeat_n(t, n as usize));
            (true, L - held - n, Some(0))
        } else {
            // The oldest `held + n - L` admissions must expire first.
            let binding = window[(held + n - L - 1) as usize];
            (false, L - held, Some(binding + w - t))
        }
    });
}

#[test]
fn the_token_bucket_matches_a_continuous_reference() {
    // A bucket of B tokens kept as nanoseconds of credit, refilled continuously and capped.
    const CAP: u64 = 10;
    let emission = 70 * MS;
    let tau = CAP * emission;
    let (mut credit, mut last) = (tau, BASE);
    agrees_with_reference(
        bucket(CAP, 1, Duration::from_millis(70)),
        4,
        20_000,
        12,
        |t, n| {
            credit = (credit + (t - last)).min(tau);
            last = t;
            if credit >= n * emission {
                credit -= n * emission;
                (true, credit / emission, Some(0))
            } else {
                (false, credit / emission, Some(n * emission - credit))
            }
        },
    );
}

#[test]
fn the_fixed_window_matches_a_counting_reference() {
    const L: u64 = 15;
    let w = 100 * MS;
    let mut counts = std::collections::HashMap::new();
    agrees_with_reference(
        fixed(L, Duration::from_millis(100)),
        4,
        20_000,
        13,
        |t, n| {
            let count = counts.entry(t / w).or_insert(0u64);
            if *count + n <= L {
                *count += n;
                (true, L - *count, Some(0))
            } else {
                (false, L - *count, Some((t / w + 1) * w - t))
            }
        },
    );
}

#[test]
fn the_sliding_window_counter_matches_its_formula() {
    // Admit iff prev (W - e) + (cur + n) W <= L W, with prev and cur the counts of the previous
    // and the current fixed window and e the time elapsed in the current one.
    const L: u64 = 15;
    let w = 100 * MS;
    let mut counts = std::collections::HashMap::<u64, u64>::new();
    agrees_with_reference(
        sliding_window(L, Duration::from_millis(100)),
        4,
        20_000,
        14,
        |t, n| {
            let k = t / w;
            let e = t - k * w;
            let prev = counts.get(&(k - 1)).copied().unwrap_or(0) as u128;
            let cur = counts.get(&k).copied().unwrap_or(0);
            let (w128, cap) = (w as u128, L as u128 * w as u128);
            let weighted = prev * (w128 - e as u128) + cur as u128 * w128;
            let wanted = weighted + n as u128 * w128;
            if wanted <= cap {
                *counts.entry(k).or_insert(0) += n;
                (true, ((cap - wanted) / w128) as u64, Some(0))
            } else {
                (false, (cap.saturating_sub(weighted) / w128) as u64, None)
            }
        },
    );
}
