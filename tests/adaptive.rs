//! Adaptive concurrency: the limit moves with pooled samples within its bounds, grants never
//! exceed it (across processes, on a real mapped file), a shrink below the permits held grants
//! nothing until fewer are held, dead holders' permits come back, and bad definitions are
//! refused.

mod common;

use std::time::Duration;

use common::adaptive::{every_permit_comes_back, kill_mid_request, manual, open, Load};
use common::{fork_workers, spawn, temp_path, Active, SharedWords, MS};
use shmlimit::{AdaptiveConcurrency, Error, Keyed, LimitKind, Limiter, Outcome};

/// Exact updates on a manual clock: growth under flat latency, the AIMD backoff, the bound of
/// one window, and the limit never outside `[min, max]`.
#[test]
fn the_limit_follows_pooled_samples_within_its_bounds() {
    let (_dir, path) = temp_path("follow.shm");
    let spec = AdaptiveConcurrency::new(2, 40)
        .initial(20)
        .window(Duration::from_millis(10));
    let limiter = manual(&path, spec);
    let clock = limiter.clock().clone();
    let dep = limiter.adaptive_concurrency("dep").unwrap();
    assert_eq!(
        limiter.limit("dep").unwrap().kind(),
        LimitKind::AdaptiveConcurrency
    );
    let s = dep.status().unwrap();
    assert_eq!(
        (s.limit, s.permits, s.min, s.max, s.in_flight),
        (20.0, 20, 2, 40, 0)
    );
    assert_eq!((s.rtt_long_us, s.rtt_recent_us), (None, None));

    // Every window: as many in flight as the limit grants, each held 10 ms, released ok.
    let mut last = 20.0;
    for window in 0..5 {
        let n = dep.status().unwrap().permits;
        let held: Vec<_> = (0..n)
            .map(|_| dep.try_acquire().unwrap().unwrap())
            .collect();
        assert!(
            dep.try_acquire().unwrap().is_none(),
            "window {window}: at the limit"
        );
        assert_eq!(dep.status().unwrap().in_flight, n);
        clock.advance(10 * MS);
        for p in held {
            assert!(p.ok());
        }
        let s = dep.status().unwrap();
        // One window closed: +s x max(1, h L) = +0.2 x 2 = +0.4 at most, and it grew.
        assert!(
            s.limit > last && s.limit <= last + 0.2 * (0.1 * last).max(1.0) + 1e-9,
            "window {window}: {last} -> {s:?}"
        );
        assert_eq!(s.rtt_recent_us, Some(10_000.0));
        last = s.limit;
    }
    // A window with a timeout: x 0.9, once per window however many.
    let held: Vec<_> = (0..3)
        .map(|_| dep.try_acquire().unwrap().unwrap())
        .collect();
    clock.advance(10 * MS);
    for p in held {
        assert!(p.release(Outcome::Timeout));
    }
    let s = dep.status().unwrap();
    assert!(
        (s.limit - last * 0.9).abs() < 0.01,
        "{} -> {}",
        last,
        s.limit
    );
    // Errors until the minimum, never below it.
    for _ in 0..40 {
        let p = dep.try_acquire().unwrap().unwrap();
        clock.advance(10 * MS);
        p.release(Outcome::Error);
    }
    assert_eq!(dep.status().unwrap().limit, 2.0);
    // Dropped permits teach nothing.
    for _ in 0..5 {
        drop(dep.try_acquire().unwrap().unwrap());
        clock.advance(10 * MS);
    }
    assert_eq!(dep.status().unwrap().limit, 2.0);
}

/// When the limit falls below the permits held, nothing is granted until fewer than the new
/// limit are held; none is revoked.
#[test]
fn a_shrink_below_in_flight_grants_nothing_until_under_it() {
    let (_dir, path) = temp_path("shrink.shm");
    let spec = AdaptiveConcurrency::new(1, 40)
        .initial(20)
        .window(Duration::from_millis(10));
    let limiter = manual(&path, spec);
    let clock = limiter.clock().clone();
    let dep = limiter.adaptive_concurrency("dep").unwrap();
    let mut held: Vec<_> = (0..20)
        .map(|_| dep.try_acquire().unwrap().unwrap())
        .collect();
    clock.advance(10 * MS);
    assert!(held.pop().unwrap().release(Outcome::Error));
    let s = dep.status().unwrap();
    assert_eq!((s.permits, s.in_flight), (18, 19));
    assert!(dep.try_acquire().unwrap().is_none(), "19 held > 18");
    assert!(held.iter().all(|p| p.is_held()), "none revoked");
    drop(held.pop());
    assert!(dep.try_acquire().unwrap().is_none(), "18 held = 18");
    drop(held.pop());
    let p = dep.try_acquire().unwrap().expect("17 held < 18");
    assert!(dep.try_acquire().unwrap().is_none());
    drop(p);
    drop(held);
    assert_eq!(dep.status().unwrap().in_flight, 0);
}

/// Processes hammering one file with a limit of 3 out of 16 entries: never more than 3 held
/// at once (the claim-fence-count gate), and every permit comes back.
#[test]
fn processes_never_hold_more_than_the_limit() {
    let (_dir, path) = temp_path("gate.shm");
    // A window of an hour: the limit stays at 3 whatever the samples.
    let spec = AdaptiveConcurrency::new(3, 16).window(Duration::from_secs(3600));
    open(&path, spec);
    let shared = SharedWords::new(3);
    let active = Active(&shared, 0);
    let grants = fork_workers(6, |_| {
        let dep = open(&path, spec);
        let mut granted = 0;
        for _ in 0..1500 {
            if let Some(p) = dep.try_acquire().unwrap() {
                active.enter(3);
                granted += 1;
                // Hold it across a sleep: with 2 CPUs, holders must be off-CPU to overlap.
                std::thread::sleep(Duration::from_micros(20));
                active.leave();
                p.release(Outcome::Ok);
            }
        }
        vec![granted]
    });
    let total: u64 = grants.iter().map(|g| g[0]).sum();
    assert!(total > 0);
    assert_eq!(
        active.violations(),
        0,
        "more than 3 held at once (max {})",
        active.max()
    );
    let s = open(&path, spec).status().unwrap();
    assert_eq!((s.permits, s.in_flight), (3, 0));
}

/// Samples pooled from several processes move the one shared limit: errors from every worker
/// take it to its minimum, fast ok samples at full load take it back up.
#[test]
fn processes_pool_their_samples_into_one_limit() {
    let (_dir, path) = temp_path("pool.shm");
    let spec = AdaptiveConcurrency::new(2, 32)
        .initial(16)
        .window(Duration::from_millis(2));
    let dep = open(&path, spec);
    // Run the workers in a child so this process can watch the limit and stop them.
    let watch = |outcome: Outcome, reached: fn(f64, f64) -> bool| {
        let load = Load::start(
            4,
            || open(&path, spec),
            |dep, _| match dep.acquire_timeout(Duration::from_millis(5)).unwrap() {
                Some(p) => {
                    std::thread::sleep(Duration::from_micros(200));
                    p.release(outcome);
                    true
                }
                None => false,
            },
        );
        let start = dep.status().unwrap().limit;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut now = start;
        while !reached(start, now) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            now = dep.status().unwrap().limit;
            assert!((2.0..=32.0).contains(&now));
        }
        load.stop();
        now
    };
    let low = watch(Outcome::Error, |_, l| l <= 2.0);
    assert_eq!(
        low, 2.0,
        "errors from every process back the limit off to its minimum"
    );
    let high = watch(Outcome::Ok, |_, l| l >= 4.0);
    assert!(high >= 4.0, "fast ok samples at full load raise it: {high}");
    assert_eq!(dep.status().unwrap().in_flight, 0);
}

/// Holders SIGKILLed mid-request: the limit stays in its range, and every permit comes back
/// to the next acquirers.
#[test]
fn killed_holders_report_nothing_and_their_permits_come_back() {
    let (_dir, path) = temp_path("kill.shm");
    let spec = AdaptiveConcurrency::new(2, 16)
        .initial(6)
        .window(Duration::from_millis(2));
    let dep = open(&path, spec);
    let mut rng = common::XorShift::new(7);
    for round in 0..12 {
        let children: Vec<_> = (0..4)
            .map(|_| {
                spawn(|| {
                    let dep = open(&path, spec);
                    loop {
                        if let Some(p) = dep.acquire_timeout(Duration::from_millis(50)).unwrap() {
                            std::thread::sleep(Duration::from_micros(300));
                            p.release(Outcome::Ok);
                        }
                    }
                })
            })
            .collect();
        kill_mid_request(children, &mut rng, round);
        let s = dep.status().unwrap();
        assert!((2.0..=16.0).contains(&s.limit), "round {round}: {s:?}");
        // Every permit of the current limit can be taken at once: dead holders' are taken over.
        every_permit_comes_back(s.permits, &format!("round {round}: {s:?}"), || {
            dep.try_acquire().unwrap()
        });
        dep.reclaim_dead_permits();
        assert_eq!(dep.status().unwrap().in_flight, 0, "round {round}");
    }
}

/// Every parameter survives the file: a process that opens it without definitions reads the
/// same limit (the extremes of each stored field).
#[test]
fn definitions_round_trip_through_the_file() {
    let (_dir, path) = temp_path("defs.shm");
    let spec = AdaptiveConcurrency::new(3, 65535)
        .initial(40_000)
        .window(Duration::from_millis((1 << 24) - 1))
        .lease(Duration::from_secs(9))
        .smoothing(0.9999)
        .tolerance(15.0)
        .headroom(0.0)
        .backoff(0.0001);
    let created = Limiter::builder()
        .limit("dep", spec)
        .create_or_open(&path)
        .unwrap();
    let opened = Limiter::open(&path).unwrap();
    assert_eq!(opened.definitions(), created.definitions());
    let shmlimit::Algorithm::AdaptiveConcurrency(a) = opened.definitions()[0].algorithm else {
        panic!("{:?}", opened.definitions()[0]);
    };
    assert_eq!(
        (a.min, a.max, a.initial, a.window_ms),
        (3, 65535, 40_000, (1 << 24) - 1)
    );
    assert_eq!(
        (a.lease_ns, a.headroom, a.tolerance),
        (9_000_000_000, 0, 15 * 4096)
    );
    let s = opened
        .adaptive_concurrency("dep")
        .unwrap()
        .status()
        .unwrap();
    assert_eq!((s.permits, s.in_flight), (40_000, 0));
}

/// Bad definitions are clear errors, and nothing is created.
#[test]
fn bad_definitions_are_refused_and_create_nothing() {
    let (_dir, path) = temp_path("bad.shm");
    let bad = [
        AdaptiveConcurrency::new(0, 8),
        AdaptiveConcurrency::new(9, 8),
        AdaptiveConcurrency::new(1, 0),
        AdaptiveConcurrency::new(1, 1 << 16),
        AdaptiveConcurrency::new(2, 8).initial(1),
        AdaptiveConcurrency::new(2, 8).initial(9),
        AdaptiveConcurrency::new(2, 8).window(Duration::ZERO),
        AdaptiveConcurrency::new(2, 8).lease(Duration::ZERO),
        AdaptiveConcurrency::new(2, 8).smoothing(f64::NAN),
        AdaptiveConcurrency::new(2, 8).smoothing(0.0),
        AdaptiveConcurrency::new(2, 8).smoothing(1.5),
        AdaptiveConcurrency::new(2, 8).tolerance(-1.0),
        AdaptiveConcurrency::new(2, 8).tolerance(f64::INFINITY),
        AdaptiveConcurrency::new(2, 8).headroom(-0.1),
        AdaptiveConcurrency::new(2, 8).backoff(1.0),
        AdaptiveConcurrency::new(2, 8).backoff(f64::NAN),
    ];
    for spec in bad {
        let err = Limiter::builder()
            .limit("dep", spec)
            .create_or_open(&path)
            .expect_err(&format!("{spec:?}"));
        assert!(
            matches!(err, Error::InvalidParameter { .. }),
            "{spec:?}: {err}"
        );
        assert!(!path.exists(), "{spec:?}");
    }
    // Keyed, at most 64 permits per key (tests/keyed_adaptive.rs has the rest).
    let keyed = Limiter::builder()
        .keyed_limit("dep", AdaptiveConcurrency::new(2, 65), Keyed::new(16))
        .create_or_open(&path)
        .expect_err("keyed");
    assert!(keyed.to_string().contains("at most 64"), "{keyed}");
    assert_eq!(Outcome::from_code(4), None);
    assert_eq!(Outcome::from_code(2), Some(Outcome::Timeout));
    // The other kinds' handles refuse it, and its permits are not a concurrency limit's.
    let limiter = Limiter::builder()
        .limit("dep", AdaptiveConcurrency::new(2, 8))
        .create_or_open(&path)
        .unwrap();
    assert!(limiter.concurrency("dep").is_err());
    assert!(limiter.adaptive_concurrency("dep").is_ok());
}

/// Resolved with another kind's accessor, an adaptive limit is named as what it is, in a
/// sentence, with the accessor that resolves it.
#[test]
fn an_adaptive_limit_resolved_as_another_kind_names_its_own_accessor() {
    let (_dir, path) = temp_path("adaptive-kind.shm");
    let limiter = Limiter::builder()
        .limit("dep", AdaptiveConcurrency::new(2, 8))
        .create_or_open(&path)
        .unwrap();
    let e = limiter.concurrency("dep").unwrap_err().to_string();
    assert_eq!(
        e,
        "limit `dep`: this limit is an adaptive concurrency limit, not a concurrency limit: \
         resolve it with Limiter::adaptive_concurrency"
    );
}

/// The headers of a request holding an adaptive permit: `qu="concurrent-requests"` with the
/// current permits as the quota and the permits left as `r`, beside a rate limit's items; a
/// refused permit sets `Retry-After`.
#[test]
fn headers_state_the_permits_as_concurrent_requests() {
    let (_dir, path) = temp_path("headers.shm");
    let limiter = Limiter::builder()
        .limit("api", shmlimit::TokenBucket::per_second(10).burst(10))
        .limit("dep", AdaptiveConcurrency::new(3, 8))
        .create_or_open(&path)
        .unwrap();
    let (api, dep) = (
        limiter.token_bucket("api").unwrap(),
        limiter.adaptive_concurrency("dep").unwrap(),
    );
    let granted = shmlimit::c_abi::view(true, 0, 0, 0);
    let d = api.try_acquire(1).unwrap();
    let _held = dep.try_acquire().unwrap().unwrap();
    let h = shmlimit::RateLimitHeaders::for_decisions(&[
        (api.as_limit(), &d),
        (dep.as_limit(), &granted),
    ])
    .unwrap();
    assert_eq!(
        h.rate_limit_policy,
        r#""api";q=10;w=1, "dep";q=3;qu="concurrent-requests""#
    );
    assert_eq!(h.rate_limit, r#""api";r=9;t=1, "dep";r=2"#);
    assert_eq!(h.retry_after, None);
    let refused = shmlimit::c_abi::view(false, 0, 5_000_000, 0);
    let mut h = shmlimit::RateLimitHeaders::new();
    h.add_limit(dep.as_limit(), &refused, false).unwrap();
    assert_eq!(
        (h.rate_limit.as_str(), h.rate_limit_policy.as_str()),
        (r#""dep";r=2"#, "")
    );
    assert_eq!(h.retry_after.as_deref(), Some("1"));
    // Only an adaptive limit has a concurrent quota.
    assert_eq!(
        dep.as_limit()
            .concurrent_quota()
            .unwrap()
            .map(|q| q.permits),
        Some(3)
    );
    assert_eq!(api.as_limit().concurrent_quota().unwrap(), None);
}

/// A dependency that becomes slower for good (1 ms to 2 ms, flat up to a knee of 30, queueing
/// past it): the gradient drives the limit down, and the periodic re-measure (8 windows at the
/// minimum in every 1000) learns the new latency, after which the limit climbs back near the
/// knee. Without the re-measure the long RTT learns the new latency over minutes and the
/// limit stays near 2 meanwhile.
#[test]
fn the_limit_recovers_after_a_permanent_latency_shift() {
    let (_dir, path) = temp_path("shift.shm");
    let window = 10 * MS;
    let spec = AdaptiveConcurrency::new(1, 100)
        .initial(10)
        .window(Duration::from_millis(10));
    let limiter = manual(&path, spec);
    let clock = limiter.clock().clone();
    let dep = limiter.adaptive_concurrency("dep").unwrap();
    // One window: every permit granted taken, held for the dependency's latency at that
    // concurrency, released with it.
    let step = |flat_us: u64| {
        let mut held = Vec::new();
        while let Some(p) = dep.try_acquire().unwrap() {
            held.push(p);
        }
        let n = held.len() as u64;
        let latency = Duration::from_micros(flat_us * n.max(30) / 30);
        clock.advance(window);
        for p in held {
            assert!(p.release_measured(Outcome::Ok, latency));
        }
        n
    };
    for _ in 0..400 {
        step(1000);
    }
    let before = dep.status().unwrap();
    assert!(before.limit > 28.0, "settled near the knee: {before:?}");
    // Slower for good: down to the bottom within a few hundred windows.
    for _ in 0..300 {
        step(2000);
    }
    let low = dep.status().unwrap();
    assert!(low.limit < 5.0, "{low:?}");
    // The re-measure comes within 1000 windows of the last; then the limit climbs back.
    let mut windows = 0;
    let mut at_min = 0;
    while dep.status().unwrap().limit < 28.0 && windows < 1400 {
        if step(2000) <= 1 {
            at_min += 1;
        }
        windows += 1;
    }
    let after = dep.status().unwrap();
    assert!(
        after.limit >= 28.0,
        "still {after:?} after {windows} windows at 2 ms"
    );
    assert!(
        after.rtt_long_us.unwrap() > 1900.0,
        "the new latency learnt: {after:?}"
    );
    assert!(at_min >= 8, "the re-measure granted the minimum: {at_min}");
    eprintln!(
        "recovered to {:.1} in {windows} windows of 10 ms",
        after.limit
    );
}

/// A permit released by its id (`release_permit`, as the bindings' permit calls do) is released
/// as dropped: nothing is held, the limit learns nothing, and its guard released afterwards
/// reports nothing (a release with its outcome is a sample the status shows).
#[test]
fn a_permit_released_by_id_teaches_nothing() {
    let (_dir, path) = temp_path("adaptive-by-id.shm");
    let limiter = manual(&path, AdaptiveConcurrency::new(2, 8));
    let dep = limiter.adaptive_concurrency("dep").unwrap();
    let p = dep.try_acquire().unwrap().expect("a free permit");
    let holders: Vec<u64> = dep.permit_holders().iter().map(|h| h.id).collect();
    assert_eq!(holders, vec![p.id()]);
    assert!(dep.release_permit(p.id()).unwrap());
    assert!(!dep.release_permit(p.id()).unwrap(), "only once");
    assert!(dep.permit_holders().is_empty());
    assert!(!p.release_measured(Outcome::Ok, Duration::from_millis(250)));
    let s = dep.status().unwrap();
    assert_eq!((s.in_flight, s.rtt_recent_us, s.limit), (0, None, 2.0));
    assert_eq!(dep.reclaim_dead_permits(), 0);
    let q = dep.try_acquire().unwrap().expect("a free permit");
    assert!(q.release_measured(Outcome::Ok, Duration::from_millis(250)));
    assert_eq!(dep.status().unwrap().rtt_recent_us, Some(250_000.0));
}
