//! Single-process checks of a counters limit (keyed counters whose window comes with each
//! call) on a real mapped file, with a manual clock
//! driven through exact boundaries.

use std::time::Duration;

use shmlimit::{Counters, CountersLimit, Error, FullPolicy, Keyed, Limiter, ManualClock};

const S: u64 = 1_000_000_000;
const T0: u64 = 1_000 * S;

fn store(
    keys: u64,
    policy: FullPolicy,
    entries: u64,
) -> (tempfile::TempDir, CountersLimit<ManualClock>, ManualClock) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let limiter = Limiter::builder()
        .keyed_limit(
            "limits",
            Counters::new().moving_window(entries),
            Keyed::new(keys).on_full(policy),
        )
        .clock(clock.clone())
        .create_or_open(dir.path().join("counters.shm"))
        .unwrap();
    let c = limiter.counters("limits").unwrap();
    (dir, c, clock)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn a_fixed_window_starts_at_its_first_hit_and_counts_every_increment() {
    let (_d, c, clock) = store(64, FullPolicy::Deny, 8);
    assert_eq!(c.count(b"k").unwrap(), (0, Duration::ZERO));
    assert_eq!(c.incr(b"k", secs(10), 1).unwrap(), 1);
    clock.advance(9 * S);
    assert_eq!(c.incr(b"k", secs(10), 5).unwrap(), 6);
    let (count, left) = c.count(b"k").unwrap();
    assert_eq!(count, 6);
    assert!(
        left <= secs(1) + Duration::from_nanos(1 << 21) && left >= secs(1),
        "{left:?}"
    );
    // The window ends 10 s after its first hit (to the word's 2 ms unit, never earlier).
    clock.advance(S + (1 << 21));
    assert_eq!(c.count(b"k").unwrap().0, 0);
    assert_eq!(c.incr(b"k", secs(10), 1).unwrap(), 1);
}

#[test]
fn acquire_fixed_admits_exactly_the_limit_and_a_denial_counts_nothing() {
    let (_d, c, clock) = store(64, FullPolicy::Deny, 8);
    for _ in 0..3 {
        assert!(c.acquire_fixed(b"u", 3, secs(1), 1).unwrap().is_allowed());
    }
    let d = c.acquire_fixed(b"u", 3, secs(1), 1).unwrap();
    assert!(d.is_denied());
    assert_eq!(c.count(b"u").unwrap().0, 3);
    assert!(d.retry_after() <= secs(1) + Duration::from_nanos(1 << 21));
    clock.advance(S + (1 << 21));
    assert!(c.acquire_fixed(b"u", 3, secs(1), 3).unwrap().is_allowed());
}

#[test]
fn a_moving_window_is_exact_at_its_boundary() {
    let (_d, c, clock) = store(64, FullPolicy::Deny, 4);
    let w = secs(10);
    for _ in 0..3 {
        assert!(c.acquire_moving(b"m", 3, w, 1).unwrap().is_allowed());
        clock.advance(S);
    }
    // t0 + 3 s: three in the window.
    let d = c.acquire_moving(b"m", 3, w, 1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after(), secs(7));
    assert_eq!(c.moving_window(b"m", 3, w).unwrap(), (3, secs(3)));
    // The first admission leaves the window at exactly t0 + 10 s.
    clock.set(T0 + 10 * S - 1);
    assert!(c.acquire_moving(b"m", 3, w, 1).unwrap().is_denied());
    clock.set(T0 + 10 * S);
    assert!(c.acquire_moving(b"m", 3, w, 1).unwrap().is_allowed());
    assert!(c.acquire_moving(b"m", 3, w, 1).unwrap().is_denied());
    // A cost of two waits for two entries.
    clock.set(T0 + 11 * S);
    assert!(c.acquire_moving(b"m", 3, w, 2).unwrap().is_denied());
    clock.set(T0 + 12 * S);
    assert!(c.acquire_moving(b"m", 3, w, 2).unwrap().is_allowed());
    assert_eq!(c.moving_window(b"m", 3, w).unwrap().0, 3);
}

#[test]
fn a_moving_window_larger_than_the_log_is_refused_naming_the_largest() {
    let (_d, c, _clock) = store(64, FullPolicy::Deny, 4);
    let e = c.acquire_moving(b"m", 5, secs(1), 1).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("largest moving-window limit it supports is 4"),
        "{e}"
    );
    assert!(c.moving_window(b"m", 5, secs(1)).is_err());
    assert!(matches!(
        c.acquire_moving(b"m", 2, secs(1), 3),
        Err(Error::CostExceedsCapacity {
            cost: 3,
            capacity: 2
        })
    ));
    assert_eq!(
        c.moving_window(b"m", 4, secs(1)).unwrap(),
        (0, Duration::ZERO)
    );
    assert_eq!(c.max_moving_limit(), 4);
    let (_d, none, _clock) = store(64, FullPolicy::Deny, 0);
    assert!(none.acquire_moving(b"m", 1, secs(1), 1).is_err());
}

#[test]
fn bad_input_is_an_error_and_consumes_nothing() {
    let (_d, c, _clock) = store(64, FullPolicy::Deny, 4);
    assert!(matches!(c.incr(b"k", secs(1), 0), Err(Error::ZeroCost)));
    assert!(matches!(
        c.acquire_fixed(b"k", 3, secs(1), 0),
        Err(Error::ZeroCost)
    ));
    assert!(c.incr(b"k", Duration::ZERO, 1).is_err());
    assert!(c.incr(b"k", Duration::from_micros(999), 1).is_err());
    assert!(c.incr(b"k", Duration::from_secs(1 << 40), 1).is_err());
    assert!(c.incr(b"k", Duration::MAX, 1).is_err());
    assert!(c.acquire_fixed(b"k", 0, secs(1), 1).is_err());
    assert!(c.acquire_fixed(b"k", 1 << 24, secs(1), 1).is_err());
    assert!(c.acquire_sliding(b"k", 1 << 16, secs(1), 1).is_err());
    assert!(c
        .acquire_sliding(b"k", 5, Duration::from_millis(100), 1)
        .is_err());
    assert!(matches!(
        c.incr(b"", secs(1), 1),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        c.incr(&[7; 1025], secs(1), 1),
        Err(Error::InvalidKey { .. })
    ));
    assert!(c.incr(b"k", secs(1), u64::MAX).is_err());
    assert!(c.incr(b"k", secs(1), (1 << 24) - 1).is_ok());
    assert!(matches!(
        c.incr(b"k", secs(1), 1),
        Err(Error::CostExceedsCapacity { .. })
    ));
    assert_eq!(c.count(b"k").unwrap().0, (1 << 24) - 1);
    // Keys of any bytes.
    assert_eq!(c.incr(&[0, 255, 10, 0], secs(1), 2).unwrap(), 2);
    assert_eq!(c.count(b"other").unwrap().0, 0);
}

#[test]
fn the_sliding_counter_weighs_the_previous_window() {
    let (_d, c, clock) = store(64, FullPolicy::Deny, 4);
    let w = secs(10);
    // Move to the start of a Unix-aligned window.
    let start = c.sliding_counts(b"s", w).unwrap();
    clock.advance(start.current_expires_in.as_nanos() as u64 - 10 * S);
    for _ in 0..4 {
        assert!(c.acquire_sliding(b"s", 4, w, 1).unwrap().is_allowed());
    }
    assert!(c.acquire_sliding(b"s", 4, w, 1).unwrap().is_denied());
    let counts = c.sliding_counts(b"s", w).unwrap();
    assert_eq!((counts.previous, counts.current), (0, 4));
    // Into the next window: the previous four weigh less as it goes on.
    clock.advance(10 * S);
    let counts = c.sliding_counts(b"s", w).unwrap();
    assert_eq!((counts.previous, counts.current), (4, 0));
    assert_eq!(counts.previous_weighs_for, w);
    assert!(c.acquire_sliding(b"s", 4, w, 1).unwrap().is_denied());
    clock.advance(5 * S);
    // floor(4 x 5 / 10) = 2 weigh: two more fit.
    assert!(c.acquire_sliding(b"s", 4, w, 2).unwrap().is_allowed());
    assert!(c.acquire_sliding(b"s", 4, w, 1).unwrap().is_denied());
    clock.advance(20 * S);
    assert_eq!(c.sliding_counts(b"s", w).unwrap().current, 0);
}

#[test]
fn strategies_and_keys_are_separate() {
    let (_d, c, _clock) = store(64, FullPolicy::Deny, 4);
    assert_eq!(c.incr(b"x", secs(5), 2).unwrap(), 2);
    assert!(c.acquire_moving(b"x", 1, secs(5), 1).unwrap().is_allowed());
    assert!(c.acquire_sliding(b"x", 1, secs(5), 1).unwrap().is_allowed());
    assert_eq!(c.count(b"x").unwrap().0, 2);
    assert_eq!(c.count(b"y").unwrap().0, 0);
    c.clear_key(b"x").unwrap();
    assert_eq!(c.count(b"x").unwrap().0, 0);
    assert_eq!(c.moving_window(b"x", 1, secs(5)).unwrap().0, 0);
    assert!(c.acquire_sliding(b"x", 1, secs(5), 1).unwrap().is_allowed());
    assert!(c.clear_all().unwrap() >= 1);
    assert!(c.acquire_sliding(b"x", 1, secs(5), 1).unwrap().is_allowed());
}

#[test]
fn a_full_table_follows_its_policy_and_reclaims_idle_keys() {
    let (_d, c, clock) = store(1, FullPolicy::Deny, 2);
    assert_eq!(c.incr(b"a", secs(1), 1).unwrap(), 1);
    assert_eq!(c.incr(b"b", secs(1), 1).unwrap(), u64::MAX);
    assert!(c.acquire_fixed(b"b", 5, secs(1), 1).unwrap().is_denied());
    assert!(c.acquire_moving(b"a", 2, secs(1), 1).unwrap().is_allowed());
    assert!(c.acquire_moving(b"b", 2, secs(1), 1).unwrap().is_denied());
    // Once a's window is over, its slot is b's.
    clock.advance(2 * S);
    assert_eq!(c.incr(b"b", secs(1), 1).unwrap(), 1);
    assert!(c.acquire_moving(b"b", 2, secs(1), 2).unwrap().is_allowed());
    let (_d, e, _clock) = store(1, FullPolicy::Error, 2);
    e.incr(b"a", secs(1), 1).unwrap();
    assert!(matches!(
        e.incr(b"b", secs(1), 1),
        Err(Error::TableFull { .. })
    ));
    let (_d, a, _clock) = store(1, FullPolicy::Allow, 2);
    a.incr(b"a", secs(1), 1).unwrap();
    assert_eq!(a.incr(b"b", secs(1), 1).unwrap(), 0);
    assert!(a.acquire_fixed(b"b", 1, secs(1), 1).unwrap().is_allowed());
}

#[test]
fn a_counters_limit_must_be_keyed_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let e = Limiter::builder()
        .limit("c", Counters::new())
        .create_or_open(dir.path().join("c.shm"))
        .unwrap_err();
    assert!(e.to_string().contains("keyed"), "{e}");
    let e = Limiter::builder()
        .keyed_limit("c", Counters::new().moving_window(1 << 17), Keyed::new(4))
        .create_or_open(dir.path().join("c.shm"))
        .unwrap_err();
    assert!(e.to_string().contains("log entries"), "{e}");
    // Another kind's accessor names the right one.
    let (_d, c, _clock) = store(4, FullPolicy::Deny, 0);
    let _ = c;
}

#[test]
fn decr_takes_from_the_window_without_moving_it_and_stops_at_zero() {
    let (_d, c, clock) = store(64, FullPolicy::Deny, 8);
    assert_eq!(c.decr(b"k", 1).unwrap(), 0);
    assert_eq!(c.count(b"k").unwrap(), (0, Duration::ZERO));
    assert_eq!(c.incr(b"k", secs(10), 5).unwrap(), 5);
    let (_, left) = c.count(b"k").unwrap();
    clock.advance(S);
    assert_eq!(c.decr(b"k", 2).unwrap(), 3);
    let (count, left_after) = c.count(b"k").unwrap();
    assert_eq!((count, left - left_after), (3, secs(1)));
    assert_eq!(c.decr(b"k", 99).unwrap(), 0);
    assert!(matches!(c.decr(b"k", 0), Err(Error::ZeroCost)));
    // The window still ends where it did: the next increment counts in it.
    assert_eq!(c.incr(b"k", secs(10), 1).unwrap(), 1);
    assert_eq!(c.count(b"k").unwrap().1, left_after);
}

#[test]
fn set_replaces_the_count_and_starts_its_window_now() {
    let (_d, c, clock) = store(64, FullPolicy::Deny, 8);
    assert_eq!(c.incr(b"k", secs(100), 5).unwrap(), 5);
    clock.advance(S);
    assert_eq!(c.set(b"k", secs(3), 9).unwrap(), 9);
    let (count, left) = c.count(b"k").unwrap();
    assert_eq!(count, 9);
    assert!(
        left >= secs(3) && left <= secs(3) + Duration::from_nanos(1 << 21),
        "{left:?}"
    );
    clock.advance(3 * S + (1 << 21));
    assert_eq!(c.count(b"k").unwrap().0, 0);
    assert!(matches!(
        c.set(b"k", Duration::ZERO, 1),
        Err(Error::InvalidParameter { .. })
    ));
    assert!(matches!(
        c.set(b"k", secs(1), 1 << 24),
        Err(Error::CostExceedsCapacity { .. })
    ));
    assert_eq!(c.count(b"k").unwrap().0, 0);
}

#[test]
fn occupancy_and_gc_cover_both_key_tables() {
    let (_d, c, clock) = store(16, FullPolicy::Deny, 4);
    // Fixed and sliding windows hold slots of the counter table; moving windows of the log
    // table ("a" holds one of each).
    assert_eq!(c.incr(b"a", secs(1), 1).unwrap(), 1);
    assert_eq!(c.incr(b"b", secs(10), 1).unwrap(), 1);
    assert!(c.acquire_sliding(b"c", 5, secs(1), 1).unwrap().is_allowed());
    assert!(c.acquire_moving(b"d", 4, secs(1), 1).unwrap().is_allowed());
    assert!(c.acquire_moving(b"e", 4, secs(10), 2).unwrap().is_allowed());
    assert!(c.acquire_moving(b"a", 4, secs(1), 1).unwrap().is_allowed());
    assert_eq!(c.key_occupancy(), (6, 32));
    // The untyped view (what the CLI's inspect and gc, the C ABI and Python call) agrees.
    assert_eq!(c.as_limit().key_occupancy(), (6, 32));
    assert_eq!(c.reclaim_idle_keys(), 0, "every key still counts");
    clock.advance(3 * S);
    // a (fixed), c (both sliding windows over), d and a (every log entry expired).
    assert_eq!(c.as_limit().reclaim_idle_keys(), 4);
    assert_eq!(c.key_occupancy(), (2, 32));
    // What was kept still counts in full.
    assert_eq!(c.count(b"b").unwrap().0, 1);
    assert_eq!(c.moving_window(b"e", 4, secs(10)).unwrap().0, 2);
    assert!(c.acquire_moving(b"e", 4, secs(10), 3).unwrap().is_denied());
    // A retired key comes back fresh, its whole log free.
    assert!(c.acquire_moving(b"d", 4, secs(1), 4).unwrap().is_allowed());
    assert_eq!(c.incr(b"a", secs(1), 1).unwrap(), 1);
    clock.advance(10 * S);
    assert_eq!(c.reclaim_idle_keys(), 4);
    assert_eq!(c.key_occupancy(), (0, 32));
}
