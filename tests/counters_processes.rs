//! A counters limit (keyed counters whose window comes with each call) shared by forked
//! processes on one mapped file: each strategy's bound holds per key exactly, every increment
//! is counted once, workers killed mid-storm leave no key over its bound or stuck, and a gc
//! pass in another process retires the keys of both tables that count nothing, never one that
//! still counts.

mod common;

use std::time::Duration;

use common::{fork_lock, fork_workers, spawn, temp_path};
use shmlimit::{Counters, CountersLimit, FullPolicy, Keyed, Limiter};

const WORKERS: usize = 6;
const KEYS: usize = 300;
const LIMIT: u64 = 5;
const ROUNDS: usize = 8;
/// Long enough that no fixed or moving window ends during the test.
const LONG: Duration = Duration::from_secs(3_600);

fn key(i: usize) -> Vec<u8> {
    format!("LIMITER/user-{i:04}/endpoint").into_bytes()
}

fn open(path: &std::path::Path) -> CountersLimit {
    Limiter::builder()
        .keyed_limit(
            "limits",
            Counters::new().moving_window(16),
            Keyed::new(4 * KEYS as u64).on_full(FullPolicy::Error),
        )
        .create_or_open(path)
        .unwrap()
        .counters("limits")
        .unwrap()
}

/// A Unix-aligned window for the sliding counter with no boundary in the next minute.
fn sliding_window(c: &CountersLimit) -> Duration {
    for days in 1..=3 {
        let w = Duration::from_secs(86_400 * days);
        let left = c.sliding_counts(b"probe", w).unwrap().current_expires_in - w;
        if left > Duration::from_secs(60) {
            return w;
        }
    }
    unreachable!("three day lengths cannot all end within a minute")
}

#[test]
fn six_processes_hold_every_strategy_to_its_bound_per_key() {
    let _guard = fork_lock();
    let (_dir, path) = temp_path("counters_bound");
    let c = open(&path);
    let sliding = sliding_window(&c);
    let results = fork_workers(WORKERS, |w| {
        // Half the workers attach by path with their own mapping.
        let own = if w % 2 == 0 { open(&path) } else { c.clone() };
        let mut out = vec![0u64; 4 * KEYS];
        for round in 0..ROUNDS {
            for i in 0..KEYS {
                let k = key((i + w * 37 + round) % KEYS);
                let at = (i + w * 37 + round) % KEYS;
                out[4 * at] += own.acquire_fixed(&k, LIMIT, LONG, 1).unwrap().is_allowed() as u64;
                out[4 * at + 1] +=
                    own.acquire_moving(&k, LIMIT, LONG, 1).unwrap().is_allowed() as u64;
                out[4 * at + 2] += own
                    .acquire_sliding(&k, LIMIT, sliding, 1)
                    .unwrap()
                    .is_allowed() as u64;
                // Every increment's result is distinct: its bit marks it. (A key of its own:
                // `acquire_fixed` and `incr` share a key's fixed-window counter.)
                let n = own.incr(&[&k[..], b"/incr"].concat(), LONG, 1).unwrap();
                assert!(n >= 1 && n <= (WORKERS * ROUNDS) as u64);
                out[4 * at + 3] |= 1 << (n - 1);
            }
        }
        out
    });
    for i in 0..KEYS {
        let sum = |s: usize| results.iter().map(|r| r[4 * i + s]).sum::<u64>();
        assert_eq!(sum(0), LIMIT, "fixed window, key {i}");
        assert_eq!(sum(1), LIMIT, "moving window, key {i}");
        assert_eq!(sum(2), LIMIT, "sliding window counter, key {i}");
        let seen = results.iter().fold(0u64, |acc, r| {
            assert_eq!(
                acc & r[4 * i + 3],
                0,
                "an increment result seen twice, key {i}"
            );
            acc | r[4 * i + 3]
        });
        assert_eq!(seen, (1 << (WORKERS * ROUNDS)) - 1, "increments of key {i}");
        let k = key(i);
        assert_eq!(c.count(&k).unwrap().0, LIMIT);
        let incr = [&k[..], b"/incr"].concat();
        assert_eq!(c.count(&incr).unwrap().0, (WORKERS * ROUNDS) as u64);
        assert_eq!(c.moving_window(&k, LIMIT, LONG).unwrap().0, LIMIT);
    }
}

#[test]
fn workers_killed_mid_storm_leave_no_key_over_its_bound_or_stuck() {
    let _guard = fork_lock();
    let (_dir, path) = temp_path("counters_kill");
    let c = open(&path);
    for round in 0..4 {
        let children: Vec<_> = (0..WORKERS)
            .map(|w| {
                let path = path.clone();
                spawn(move || {
                    let own = open(&path);
                    loop {
                        for i in 0..KEYS {
                            let k = key((i + w) % KEYS);
                            let _ = own.acquire_moving(&k, LIMIT, LONG, 1 + (i % 2) as u64);
                            let _ = own.acquire_fixed(&k, LIMIT, LONG, 1);
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20 + 15 * round));
        for child in &children {
            child.kill();
        }
        for child in children {
            let _ = child.wait();
        }
        for i in 0..KEYS {
            let k = key(i);
            assert!(
                c.moving_window(&k, LIMIT, LONG).unwrap().0 <= LIMIT,
                "key {i}"
            );
            assert!(c.count(&k).unwrap().0 <= LIMIT, "key {i}");
        }
    }
    // Nothing is stuck: other keys are admitted, and a key's state can be cleared and used.
    assert!(c
        .acquire_moving(b"fresh", LIMIT, LONG, LIMIT)
        .unwrap()
        .is_allowed());
    c.clear_key(&key(0)).unwrap();
    assert!(c
        .acquire_moving(&key(0), LIMIT, LONG, LIMIT)
        .unwrap()
        .is_allowed());
    assert!(c
        .acquire_fixed(&key(0), LIMIT, LONG, LIMIT)
        .unwrap()
        .is_allowed());
}

#[test]
fn a_gc_process_retires_idle_keys_of_both_tables_and_never_a_live_one() {
    let _guard = fork_lock();
    let (_dir, path) = temp_path("counters_gc");
    let c = open(&path);
    const SHORT: Duration = Duration::from_millis(2);
    // Workers decide on KEYS keys with hour-long windows in every strategy (each key holds a
    // slot of both tables throughout) and on keys of 2 ms windows that turn idle at once,
    // while one more process runs gc passes: it must retire idle keys of both tables, and
    // never a key that still counts (which would then be admitted past its bound).
    let gc = {
        let path = path.clone();
        spawn(move || {
            let own = open(&path);
            let (mut retired, mut passes) = (0, 0);
            let start = std::time::Instant::now();
            while passes < 400 || (retired == 0 && start.elapsed() < Duration::from_secs(10)) {
                retired += own.reclaim_idle_keys() as u64;
                passes += 1;
            }
            vec![retired]
        })
    };
    let results = fork_workers(WORKERS, |w| {
        let own = open(&path);
        let mut out = vec![0u64; 2 * KEYS];
        for round in 0..ROUNDS {
            for i in 0..KEYS {
                let at = (i + w * 37 + round) % KEYS;
                let k = key(at);
                out[2 * at] += own.acquire_fixed(&k, LIMIT, LONG, 1).unwrap().is_allowed() as u64;
                out[2 * at + 1] +=
                    own.acquire_moving(&k, LIMIT, LONG, 1).unwrap().is_allowed() as u64;
                if i % 8 == 0 {
                    let idle = format!("idle/{w}/{round}/{i}").into_bytes();
                    own.incr(&idle, SHORT, 1).unwrap();
                    assert!(own.acquire_moving(&idle, 1, SHORT, 1).unwrap().is_allowed());
                }
            }
        }
        out
    });
    let retired_by_gc = gc.wait().1[0];
    for i in 0..KEYS {
        let sum = |s: usize| results.iter().map(|r| r[2 * i + s]).sum::<u64>();
        assert_eq!(sum(0), LIMIT, "fixed window, key {i}");
        assert_eq!(sum(1), LIMIT, "moving window, key {i}");
    }
    std::thread::sleep(Duration::from_millis(10));
    let retired_here = c.reclaim_idle_keys();
    // The idle keys were retired, by the gc process or this pass (or reclaimed on demand by a
    // later claim); the long-window keys are all there, once in each table.
    assert!(retired_by_gc > 0, "the gc process retired nothing");
    assert_eq!(
        c.key_occupancy(),
        (2 * KEYS, 2 * (4 * KEYS).next_power_of_two())
    );
    assert_eq!(
        c.reclaim_idle_keys(),
        0,
        "{retired_here} retired, then nothing left"
    );
    for i in 0..KEYS {
        assert_eq!(c.count(&key(i)).unwrap().0, LIMIT);
        assert_eq!(c.moving_window(&key(i), LIMIT, LONG).unwrap().0, LIMIT);
    }
}
