//! What each algorithm admits at its boundaries: exact counts at a boundary, at one instant
//! and in a run; costs beyond the capacity; `peek`; half-open and aligned windows; the rounding
//! of the emission interval.

use super::*;

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
