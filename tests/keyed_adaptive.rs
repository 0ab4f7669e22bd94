//! Keyed adaptive concurrency: each key learns its own limit within `[min, max]` from its own
//! samples, grants never exceed a key's limit (across processes, on a real mapped file), a
//! key slot that changes hands starts the new key at its initial limit, dead holders' permits
//! come back, and bad definitions and keys are refused changing nothing.

mod common;

use std::time::Duration;

use common::adaptive::{every_permit_comes_back, kill_mid_request, manual_keyed, open_keyed, Load};
use common::{fork_workers, spawn, temp_path, Active, SharedWords, MS};
use shmlimit::{AdaptiveConcurrency, Error, FullPolicy, Keyed, LimitKind, Limiter, Outcome};

/// On a manual clock: a key whose requests fail backs off to its minimum while another with
/// fast ok samples at full load grows, each from its own windows; a third key never used is
/// at its initial limit.
#[test]
fn keys_learn_their_own_limits() {
    let (_dir, path) = temp_path("learn.shm");
    let spec = AdaptiveConcurrency::new(2, 40)
        .initial(10)
        .window(Duration::from_millis(10));
    let limiter = manual_keyed(&path, spec, Keyed::new(16));
    let clock = limiter.clock().clone();
    assert_eq!(
        limiter.limit("dep").unwrap().kind(),
        LimitKind::KeyedAdaptiveConcurrency
    );
    let dep = limiter.keyed_adaptive_concurrency("dep").unwrap();
    for window in 0..30 {
        for (key, outcome) in [(&b"slow"[..], Outcome::Error), (b"fast", Outcome::Ok)] {
            let n = dep.status(key).unwrap().permits;
            let held: Vec<_> = (0..n)
                .map(|_| {
                    dep.try_acquire(key)
                        .unwrap()
                        .expect("within the key's limit")
                })
                .collect();
            assert!(dep.try_acquire(key).unwrap().is_none(), "window {window}");
            assert_eq!(dep.status(key).unwrap().in_flight, n);
            for p in held {
                assert!(p.release_measured(outcome, Duration::from_millis(2)));
            }
        }
        clock.advance(10 * MS);
    }
    let (slow, fast) = (dep.status(b"slow").unwrap(), dep.status(b"fast").unwrap());
    assert_eq!(slow.limit, 2.0, "{slow:?}");
    assert!(fast.limit > 14.0 && fast.limit <= 40.0, "{fast:?}");
    assert_eq!(fast.rtt_long_us, Some(2000.0));
    assert_eq!(slow.rtt_long_us, None, "errors report no RTT");
    let fresh = dep.status(b"unused").unwrap();
    assert_eq!((fresh.limit, fresh.in_flight), (10.0, 0));
    assert_eq!(dep.key_occupancy(), (2, 16), "a status inserts nothing");
    // Every key with a slot, by its tag: what `inspect` shows.
    let held = dep.try_acquire(b"fast").unwrap().expect("a permit");
    let mut all = dep.key_statuses().unwrap();
    all.sort_by_key(|(tag, _)| *tag);
    let mut want = vec![
        (dep.key_tag(b"slow").unwrap(), dep.status(b"slow").unwrap()),
        (dep.key_tag(b"fast").unwrap(), dep.status(b"fast").unwrap()),
    ];
    want.sort_by_key(|(tag, _)| *tag);
    assert_eq!(all, want);
    assert_eq!(dep.status(b"fast").unwrap().in_flight, 1);
    drop(held);
}

/// A key slot that changes hands: a key that learnt its minimum and released everything is
/// idle, another key takes its slot (a table of one) and starts at the initial limit, not at
/// what the first key learnt; the first key, back, starts fresh too. A reset makes every key
/// fresh.
#[test]
fn a_slot_that_changes_hands_starts_the_new_key_fresh() {
    let (_dir, path) = temp_path("hands.shm");
    let spec = AdaptiveConcurrency::new(1, 8)
        .initial(6)
        .window(Duration::from_millis(10));
    let limiter = manual_keyed(&path, spec, Keyed::new(1));
    let clock = limiter.clock().clone();
    let dep = limiter.keyed_adaptive_concurrency("dep").unwrap();
    for _ in 0..40 {
        if let Some(p) = dep.try_acquire(b"old").unwrap() {
            p.release(Outcome::Timeout);
        }
        clock.advance(10 * MS);
    }
    assert_eq!(dep.status(b"old").unwrap().limit, 1.0);
    // "old" holds a permit: "new" finds the one slot taken (deny by default).
    let p = dep.try_acquire(b"old").unwrap().unwrap();
    assert!(dep.try_acquire(b"new").unwrap().is_none());
    drop(p);
    let held: Vec<_> = (0..6)
        .map(|_| dep.try_acquire(b"new").unwrap().expect("the initial limit"))
        .collect();
    assert!(dep.try_acquire(b"new").unwrap().is_none());
    let s = dep.status(b"new").unwrap();
    assert_eq!((s.limit, s.in_flight, s.rtt_long_us), (6.0, 6, None));
    assert_eq!(dep.status(b"old").unwrap().limit, 6.0, "no slot: fresh");
    drop(held);
    assert_eq!(dep.reclaim_idle_keys(), 1);
    assert_eq!(dep.key_occupancy(), (0, 1));
    // Learn again, then reset.
    for _ in 0..40 {
        if let Some(p) = dep.try_acquire(b"old").unwrap() {
            p.release(Outcome::Error);
        }
        clock.advance(10 * MS);
    }
    assert_eq!(dep.status(b"old").unwrap().limit, 1.0);
    limiter.limit("dep").unwrap().reset().unwrap();
    assert_eq!(dep.status(b"old").unwrap().limit, 6.0);
    assert_eq!(dep.key_occupancy(), (0, 1));
}

/// The full-table policies apply as for every keyed limit.
#[test]
fn a_full_table_follows_its_policy() {
    let (_dir, path) = temp_path("full.shm");
    let spec = AdaptiveConcurrency::new(1, 4);
    for (policy, check) in [
        (FullPolicy::Deny, "deny"),
        (FullPolicy::Allow, "allow"),
        (FullPolicy::Error, "error"),
    ] {
        let _ = std::fs::remove_file(&path);
        let limiter = manual_keyed(&path, spec, Keyed::new(1).on_full(policy));
        let dep = limiter.keyed_adaptive_concurrency("dep").unwrap();
        let _held = dep.try_acquire(b"a").unwrap().unwrap();
        match (check, dep.try_acquire(b"b")) {
            ("deny", Ok(None)) => {}
            ("allow", Ok(Some(p))) => assert_eq!(p.id(), 0, "a permit that holds nothing"),
            ("error", Err(Error::TableFull { .. })) => {}
            (_, other) => panic!("{check}: {other:?}"),
        }
    }
}

/// Processes hammering two keys with a limit of 3 each out of 16 entries: never more than 3
/// of a key held at once (the cap checked by the bit's CAS), and every permit comes back.
#[test]
fn processes_never_hold_more_than_a_keys_limit() {
    let (_dir, path) = temp_path("gate.shm");
    // A window of an hour: each key's limit stays at 3 whatever the samples.
    let spec = AdaptiveConcurrency::new(3, 16).window(Duration::from_secs(3600));
    open_keyed(&path, spec);
    let shared = SharedWords::new(6);
    let active = [Active(&shared, 0), Active(&shared, 3)];
    let grants = fork_workers(6, |i| {
        let dep = open_keyed(&path, spec);
        let mut granted = 0;
        for n in 0..1500 {
            let k = (i + n) % 2;
            let key: &[u8] = [b"db-1", b"db-2"][k];
            if let Some(p) = dep.try_acquire(key).unwrap() {
                active[k].enter(3);
                granted += 1;
                // Hold it across a sleep: with 2 CPUs, holders must be off-CPU to overlap.
                std::thread::sleep(Duration::from_micros(20));
                active[k].leave();
                p.release(Outcome::Ok);
            }
        }
        vec![granted]
    });
    let total: u64 = grants.iter().map(|g| g[0]).sum();
    assert!(total > 0);
    for (k, a) in active.iter().enumerate() {
        assert_eq!(
            a.violations(),
            0,
            "key {k}: more than 3 at once ({})",
            a.max()
        );
        assert_eq!(a.max(), 3, "key {k}: the limit was reached");
    }
    let dep = open_keyed(&path, spec);
    for key in [&b"db-1"[..], b"db-2"] {
        let s = dep.status(key).unwrap();
        assert_eq!((s.permits, s.in_flight), (3, 0));
    }
}

/// Samples from several processes move each key's own limit: one key's errors take it to its
/// minimum while the other key's fast ok samples at full load raise it.
#[test]
fn processes_teach_each_key_its_own_limit() {
    let (_dir, path) = temp_path("pool.shm");
    let spec = AdaptiveConcurrency::new(2, 32)
        .initial(4)
        .window(Duration::from_millis(2));
    let dep = open_keyed(&path, spec);
    let load = Load::start(
        4,
        || open_keyed(&path, spec),
        |dep, i| {
            // One worker's requests fail; three others' succeed in a steady 1 ms (as measured
            // by the caller: no scheduling noise in the gradient), three in flight at once,
            // enough for the healthy key to grow.
            let (key, outcome): (&[u8], _) = if i == 0 {
                (b"failing", Outcome::Error)
            } else {
                (b"healthy", Outcome::Ok)
            };
            match dep.acquire_timeout(key, Duration::from_millis(5)).unwrap() {
                Some(p) => {
                    std::thread::sleep(Duration::from_micros(200));
                    p.release_measured(outcome, Duration::from_millis(1));
                    true
                }
                None => false,
            }
        },
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut failing, mut healthy) = (4.0, 4.0);
    while !(failing <= 2.0 && healthy >= 5.0) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        failing = dep.status(b"failing").unwrap().limit;
        healthy = dep.status(b"healthy").unwrap().limit;
        assert!((2.0..=32.0).contains(&failing) && (2.0..=32.0).contains(&healthy));
    }
    load.stop();
    assert_eq!(failing, 2.0, "the failing key backs off to its minimum");
    assert!(healthy >= 5.0, "the healthy key grows: {healthy}");
    for key in [&b"failing"[..], b"healthy"] {
        assert_eq!(dep.status(key).unwrap().in_flight, 0);
    }
}

/// Holders of two keys SIGKILLed mid-request: each key's limit stays in its range, and every
/// permit of each key comes back to the next acquirers.
#[test]
fn killed_holders_permits_come_back_per_key() {
    let (_dir, path) = temp_path("kill.shm");
    let spec = AdaptiveConcurrency::new(2, 16)
        .initial(6)
        .window(Duration::from_millis(2));
    let dep = open_keyed(&path, spec);
    let mut rng = common::XorShift::new(11);
    let keys: [&[u8]; 2] = [b"a", b"b"];
    for round in 0..8 {
        let children: Vec<_> = (0..4)
            .map(|c| {
                let path = &path;
                spawn(move || {
                    let dep = open_keyed(path, spec);
                    loop {
                        let key = keys[c % 2];
                        if let Some(p) =
                            dep.acquire_timeout(key, Duration::from_millis(50)).unwrap()
                        {
                            std::thread::sleep(Duration::from_micros(300));
                            p.release(Outcome::Ok);
                        }
                    }
                })
            })
            .collect();
        kill_mid_request(children, &mut rng, round);
        for key in keys {
            let s = dep.status(key).unwrap();
            assert!((2.0..=16.0).contains(&s.limit), "round {round}: {s:?}");
            // Every permit of the key's limit at once: dead holders' are taken over.
            every_permit_comes_back(s.permits, &format!("round {round}: {s:?}"), || {
                dep.try_acquire(key).unwrap()
            });
        }
        dep.reclaim_dead_permits();
        for key in keys {
            assert_eq!(dep.status(key).unwrap().in_flight, 0, "round {round}");
        }
        assert!(dep.permit_holders().is_empty());
    }
}

/// Bad definitions and keys are clear errors that create or change nothing; the kind is named
/// with its accessor when resolved as another kind.
#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let (_dir, path) = temp_path("bad.shm");
    let bad = [
        (AdaptiveConcurrency::new(0, 8), "minimum 0"),
        (AdaptiveConcurrency::new(9, 8), "above maximum"),
        (AdaptiveConcurrency::new(1, 0), "above maximum"),
        (AdaptiveConcurrency::new(2, 65), "at most 64"),
        (AdaptiveConcurrency::new(2, 8).initial(9), "initial limit"),
    ];
    for (spec, says) in bad {
        let err = Limiter::builder()
            .keyed_limit("dep", spec, Keyed::new(16))
            .create_or_open(&path)
            .expect_err(&format!("{spec:?}"));
        assert!(
            matches!(err, Error::InvalidParameter { .. }) && err.to_string().contains(says),
            "{spec:?}: {err}"
        );
        assert!(!path.exists(), "{spec:?}");
    }
    let too_many = Limiter::builder()
        .keyed_limit("dep", AdaptiveConcurrency::new(2, 64), Keyed::new(1 << 26))
        .create_or_open(&path)
        .expect_err("2^26 x 64 entries");
    assert!(too_many.to_string().contains("2^26"), "{too_many}");
    let limiter = manual_keyed(&path, AdaptiveConcurrency::new(2, 8), Keyed::new(4));
    let dep = limiter.keyed_adaptive_concurrency("dep").unwrap();
    for key in [&b""[..], &[7u8; 1025][..]] {
        assert!(matches!(
            dep.try_acquire(key),
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            dep.acquire_timeout(key, Duration::from_millis(1)),
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(dep.status(key), Err(Error::InvalidKey { .. })));
    }
    assert_eq!(dep.key_occupancy(), (0, 4));
    let e = limiter.adaptive_concurrency("dep").unwrap_err().to_string();
    assert_eq!(
        e,
        "limit `dep`: this limit is a keyed adaptive concurrency limit, not an adaptive \
         concurrency limit: resolve it with Limiter::keyed_adaptive_concurrency"
    );
    assert!(limiter.keyed_concurrency("dep").is_err());
    // Released by id with an outcome; an id it does not hold is refused, changing nothing.
    let p = dep.try_acquire(b"k").unwrap().unwrap();
    let id = p.id();
    std::mem::forget(p);
    assert!(!dep
        .release_with(id ^ 1, Outcome::Ok, Duration::from_millis(1))
        .unwrap());
    assert_eq!(dep.status(b"k").unwrap().in_flight, 1);
    assert!(dep
        .release_with(id, Outcome::Ok, Duration::from_millis(1))
        .unwrap());
    assert!(!dep
        .release_with(id, Outcome::Ok, Duration::from_millis(1))
        .unwrap());
    assert_eq!(dep.status(b"k").unwrap().in_flight, 0);
}

/// Every parameter survives the file: a process that opens it without definitions resolves the
/// same keyed adaptive limit.
#[test]
fn definitions_round_trip_through_the_file() {
    let (_dir, path) = temp_path("defs.shm");
    let spec = AdaptiveConcurrency::new(3, 64)
        .initial(40)
        .lease(Duration::from_secs(9))
        .window(Duration::from_millis(77));
    let created = Limiter::builder()
        .keyed_limit("dep", spec, Keyed::new(100).on_full(FullPolicy::Allow))
        .create_or_open(&path)
        .unwrap();
    let opened = Limiter::open(&path).unwrap();
    assert_eq!(opened.definitions(), created.definitions());
    let dep = opened.keyed_adaptive_concurrency("dep").unwrap();
    let s = dep.status(b"x").unwrap();
    assert_eq!((s.permits, s.min, s.max, s.in_flight), (40, 3, 64, 0));
    assert_eq!(dep.key_occupancy(), (0, 128));
}

/// A key's permit released by its id (`release_permit`, as the bindings' permit calls do) is
/// released as dropped: nothing of the key is held, the key learns nothing, and its guard
/// released afterwards reports nothing (a release with its outcome is a sample the key's
/// status shows).
#[test]
fn a_permit_released_by_id_teaches_its_key_nothing() {
    let (_dir, path) = temp_path("keyed-adaptive-by-id.shm");
    let limiter = manual_keyed(&path, AdaptiveConcurrency::new(2, 8), Keyed::new(16));
    let dep = limiter.keyed_adaptive_concurrency("dep").unwrap();
    let p = dep.try_acquire(b"db-1").unwrap().expect("a free permit");
    let holders: Vec<(u64, Option<u64>)> = dep
        .permit_holders()
        .iter()
        .map(|h| (h.id, h.key_tag))
        .collect();
    assert_eq!(holders, vec![(p.id(), Some(dep.key_tag(b"db-1").unwrap()))]);
    assert!(dep.release_permit(p.id()).unwrap());
    assert!(!dep.release_permit(p.id()).unwrap(), "only once");
    assert!(!p.release_measured(Outcome::Ok, Duration::from_millis(250)));
    let s = dep.status(b"db-1").unwrap();
    assert_eq!((s.in_flight, s.rtt_recent_us, s.limit), (0, None, 2.0));
    assert_eq!(dep.reclaim_dead_permits(), 0);
    let q = dep.try_acquire(b"db-1").unwrap().expect("a free permit");
    assert!(q.release_measured(Outcome::Ok, Duration::from_millis(250)));
    assert_eq!(dep.status(b"db-1").unwrap().rtt_recent_us, Some(250_000.0));
}
