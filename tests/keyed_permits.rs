//! Keyed concurrency limits across real processes: at most `C` permits per key held at once,
//! counted per key by the workers themselves; key slots changing hands under load; permits of
//! holders killed with SIGKILL coming back to that key; waiting with a deadline; inspection;
//! and the full-table policies.
//!
//! The independent counters live in a `MAP_SHARED` anonymous mapping made before `fork` (see
//! `common::Active`): a worker counts itself in right after it gets a key's permit and out
//! right before it lets it go, and every entry checks the key's count against `C`.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{
    all_permits_come_back, fork_child, fork_churners, fork_lock, fork_workers, permit_victim, pipe,
    read_byte, reap, sigkill, temp_path, write_byte, Active, SharedWords, XorShift,
};
use shmlimit::{Concurrency, Error, FullPolicy, Keyed, Limiter};

fn key(i: usize) -> Vec<u8> {
    format!("user:{i}").into_bytes()
}

/// 16 processes over 4 keys, 3 permits per key: each takes a permit of a key in turn (waiting
/// when the key's are all held), works a little and releases. No key ever has more than 3
/// holders, all work completes, and every permit is released at the end.
///
/// In the first round the holders keep their permits until all 16 have tried theirs, so that
/// the fourth process of each key waits however the machine schedules them (on a loaded
/// machine they could otherwise run one after another and never meet).
#[test]
fn sixteen_processes_hold_at_most_c_per_key() {
    let _g = fork_lock();
    const C: u64 = 3;
    const KEYS: usize = 4;
    const WORKERS: usize = 16;
    const ROUNDS: usize = 20;
    let (_dir, path) = temp_path("per_key.shm");
    let limiter = Limiter::builder()
        .keyed_limit("in_flight", Concurrency::new(C), Keyed::new(64))
        .create_or_open(&path)
        .unwrap();
    // After the keys' counters: how many processes have tried their first permit.
    const TRIED: usize = 3 * KEYS;
    let shared = SharedWords::new(3 * KEYS + 1);
    let reports = fork_workers(WORKERS, |i| {
        let in_flight = Limiter::open(&path)
            .unwrap()
            .keyed_concurrency("in_flight")
            .unwrap();
        let mut waited = 0;
        for round in 0..ROUNDS {
            let k = (i + round) % KEYS;
            let tried = in_flight.try_acquire_key_permit(&key(k)).unwrap();
            if round == 0 {
                shared.at(TRIED).fetch_add(1, Ordering::SeqCst);
            }
            let permit = match tried {
                Some(p) => p,
                None => {
                    waited += 1;
                    in_flight
                        .acquire_key_permit_timeout(&key(k), Duration::from_secs(60))
                        .unwrap()
                        .expect("a permit of the key within a minute")
                }
            };
            let active = Active(&shared, 3 * k);
            active.enter(C);
            let start = Instant::now();
            while round == 0
                && shared.at(TRIED).load(Ordering::SeqCst) < WORKERS as u64
                && start.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_micros(100));
            }
            std::thread::sleep(Duration::from_micros(200 + 100 * ((i + round) % 5) as u64));
            active.leave();
            assert!(permit.release(), "the permit was still ours");
        }
        vec![ROUNDS as u64, waited]
    });
    let done: u64 = reports.iter().map(|r| r[0]).sum();
    let waited: u64 = reports.iter().map(|r| r[1]).sum();
    let maxima: Vec<u64> = (0..KEYS).map(|k| Active(&shared, 3 * k).max()).collect();
    eprintln!("16 processes, 4 keys, C = 3 per key: max active per key {maxima:?}, {waited} waits");
    assert_eq!(done, (WORKERS * ROUNDS) as u64, "all work completes");
    for k in 0..KEYS {
        assert_eq!(
            Active(&shared, 3 * k).violations(),
            0,
            "key {k}: more than C at once"
        );
    }
    assert!(maxima.iter().all(|&m| m <= C));
    assert!(waited > 0, "16 workers on 12 permits must have waited");
    let in_flight = limiter.keyed_concurrency("in_flight").unwrap();
    assert_eq!(in_flight.stats().allowed, (WORKERS * ROUNDS) as u64);
    assert!(
        in_flight.permit_holders().is_empty(),
        "every permit released"
    );
    for k in 0..KEYS {
        assert_eq!(in_flight.key_permits_held(&key(k)).unwrap(), 0);
    }
}

/// More keys than key slots: 8 processes take permits of 12 keys at random in a table of 8
/// slots, so idle keys lose their slots to other keys all the time and the table is often
/// full. Per key the bound still holds; the full table denies (the policy) and nothing leaks.
#[test]
fn keys_changing_slots_under_load_keep_every_keys_bound() {
    let _g = fork_lock();
    const C: u64 = 2;
    const KEYS: usize = 12;
    let (_dir, path) = temp_path("churn.shm");
    let limiter = Limiter::builder()
        .keyed_limit("in_flight", Concurrency::new(C), Keyed::new(8))
        .create_or_open(&path)
        .unwrap();
    let shared = SharedWords::new(3 * KEYS);
    let reports = fork_workers(8, |i| {
        let in_flight = Limiter::open(&path)
            .unwrap()
            .keyed_concurrency("in_flight")
            .unwrap();
        let mut rng = XorShift::new(0x5EED + i as u64);
        let (mut granted, mut refused) = (0u64, 0u64);
        let deadline = Instant::now() + Duration::from_millis(1_500);
        while Instant::now() < deadline {
            let k = (rng.next_u64() % KEYS as u64) as usize;
            match in_flight.try_acquire_key_permit(&key(k)).unwrap() {
                Some(permit) => {
                    let active = Active(&shared, 3 * k);
                    active.enter(C);
                    std::thread::sleep(Duration::from_micros(50 + rng.next_u64() % 300));
                    active.leave();
                    assert!(permit.release());
                    granted += 1;
                }
                None => refused += 1,
            }
        }
        vec![granted, refused]
    });
    let granted: u64 = reports.iter().map(|r| r[0]).sum();
    let refused: u64 = reports.iter().map(|r| r[1]).sum();
    let in_flight = limiter.keyed_concurrency("in_flight").unwrap();
    eprintln!(
        "12 keys in 8 slots, 8 processes: {granted} granted, {refused} refused, occupancy {:?}",
        in_flight.key_occupancy()
    );
    for k in 0..KEYS {
        assert_eq!(
            Active(&shared, 3 * k).violations(),
            0,
            "key {k}: more than C at once"
        );
    }
    assert!(granted > 100, "the limit kept working: {granted}");
    assert!(
        in_flight.permit_holders().is_empty(),
        "every permit released"
    );
    // Every key can take all of its permits again, one key at a time.
    for k in 0..KEYS {
        let held: Vec<_> = (0..C)
            .map(|_| in_flight.try_acquire_key_permit(&key(k)).unwrap().unwrap())
            .collect();
        assert!(in_flight.try_acquire_key_permit(&key(k)).unwrap().is_none());
        drop(held);
    }
}

/// Holders of one key killed with SIGKILL while they hold, over and over, while churners keep
/// working on that key: the killed holders' permits come back to the key (the churners would
/// starve after `C` kills otherwise), the live holders never exceed `C`, and another key is
/// untouched throughout.
#[test]
fn permits_of_killed_holders_come_back_to_their_key() {
    let _g = fork_lock();
    const C: u64 = 3;
    const KILLS: usize = 9;
    let (_dir, path) = temp_path("killed.shm");
    let limiter = Limiter::builder()
        .keyed_limit("in_flight", Concurrency::new(C), Keyed::new(16))
        .create_or_open(&path)
        .unwrap();
    let in_flight = limiter.keyed_concurrency("in_flight").unwrap();
    let other = in_flight.try_acquire_key_permit(b"other").unwrap().unwrap();
    let shared = SharedWords::new(8);
    let active = Active(&shared, 0);
    let stop = || shared.at(3).load(Ordering::SeqCst) != 0;
    let churners = fork_churners(
        3,
        &active,
        C,
        stop,
        || {
            Limiter::open(&path)
                .unwrap()
                .keyed_concurrency("in_flight")
                .unwrap()
        },
        |l| {
            l.acquire_key_permit_timeout(b"hot", Duration::from_secs(20))
                .unwrap()
        },
    );
    for _ in 0..KILLS {
        let victim = permit_victim(&active, C, || {
            in_flight
                .acquire_key_permit_timeout(b"hot", Duration::from_secs(20))
                .unwrap()
        });
        // Count the victim out before it dies: the counter stays an upper bound of the holders.
        active.leave();
        sigkill(victim);
        assert_eq!(reap(victim), 128 + libc::SIGKILL);
    }
    shared.at(3).store(1, Ordering::SeqCst);
    for pid in churners {
        assert_eq!(reap(pid), 0, "a churner failed");
    }
    eprintln!(
        "{KILLS} holders of one key killed: max {} active",
        active.max()
    );
    assert_eq!(
        active.violations(),
        0,
        "more than C live holders of the key at once"
    );
    assert!(other.is_held(), "another key's permit was never touched");
    // All C of the key come back to one process, then no more.
    all_permits_come_back(C, || in_flight.try_acquire_key_permit(b"hot").unwrap());
    drop(other);
    assert!(in_flight.permit_holders().is_empty());
}

/// A waiter for a key whose permits are all held gets one as soon as it is released, and one
/// whose key stays full returns at its deadline, not before.
#[test]
fn key_waiters_wake_on_release_and_leave_at_their_deadline() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("wait.shm");
    let limiter = Limiter::builder()
        .keyed_limit("in_flight", Concurrency::new(1), Keyed::new(16))
        .create_or_open(&path)
        .unwrap();
    let in_flight = limiter.keyed_concurrency("in_flight").unwrap();
    let held_a = in_flight.try_acquire_key_permit(b"a").unwrap().unwrap();
    let _held_b = in_flight.try_acquire_key_permit(b"b").unwrap().unwrap();
    let (ready_r, ready_w) = pipe();
    let waiter_a = fork_child(|| {
        let l = Limiter::open(&path)
            .unwrap()
            .keyed_concurrency("in_flight")
            .unwrap();
        write_byte(&ready_w);
        let got = l
            .acquire_key_permit_timeout(b"a", Duration::from_secs(30))
            .unwrap();
        i32::from(got.is_none())
    });
    let waiter_b = fork_child(|| {
        let l = Limiter::open(&path)
            .unwrap()
            .keyed_concurrency("in_flight")
            .unwrap();
        let start = Instant::now();
        let got = l
            .acquire_key_permit_timeout(b"b", Duration::from_millis(250))
            .unwrap();
        let waited = start.elapsed();
        // Refused, and not before the deadline.
        i32::from(got.is_some() || waited < Duration::from_millis(250)) * 2
    });
    drop(ready_w);
    assert!(read_byte(&ready_r));
    std::thread::sleep(Duration::from_millis(50));
    let released_at = Instant::now();
    drop(held_a);
    assert_eq!(
        reap(waiter_a),
        0,
        "the waiter for `a` got the released permit"
    );
    let woke_in = released_at.elapsed();
    eprintln!("a key waiter in another process got a released permit {woke_in:?} after it");
    assert!(woke_in < Duration::from_secs(10), "{woke_in:?}");
    assert_eq!(
        reap(waiter_b),
        0,
        "the waiter for `b` left at its deadline, empty-handed"
    );
}

/// `permit_holders` names each holder's key by its tag; a dead holder's permits are
/// reclaimable, taken over by the next acquirer of that key, and freed by `gc`.
#[test]
fn holders_are_listed_by_key_and_dead_ones_are_reclaimed() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("holders.shm");
    let limiter = Limiter::builder()
        .keyed_limit("in_flight", Concurrency::new(2), Keyed::new(16))
        .create_or_open(&path)
        .unwrap();
    let in_flight = limiter.keyed_concurrency("in_flight").unwrap();
    let (r, w) = pipe();
    let child = fork_child(|| {
        for k in [&b"x"[..], b"x", b"y"] {
            let _ = in_flight
                .try_acquire_key_permit(k)
                .unwrap()
                .unwrap()
                .into_id();
        }
        write_byte(&w);
        0 // exits holding all three
    });
    drop(w);
    assert!(read_byte(&r));
    assert_eq!(reap(child), 0);
    let (x, y) = (
        in_flight.key_tag(b"x").unwrap(),
        in_flight.key_tag(b"y").unwrap(),
    );
    let holders = in_flight.permit_holders();
    assert_eq!(holders.len(), 3);
    assert!(holders
        .iter()
        .all(|h| h.pid == child as u32 && h.reclaimable));
    assert_eq!(holders.iter().filter(|h| h.key_tag == Some(x)).count(), 2);
    assert_eq!(holders.iter().filter(|h| h.key_tag == Some(y)).count(), 1);
    assert_eq!(in_flight.key_permits_held(b"x").unwrap(), 2);
    // None of x's free: the next acquirer of x takes one over from the dead child.
    let mine = in_flight
        .try_acquire_key_permit(b"x")
        .unwrap()
        .expect("taken over");
    assert_eq!(in_flight.key_permits_held(b"x").unwrap(), 2);
    // The other two: gc frees them (x's last, and y's).
    assert_eq!(in_flight.reclaim_dead_permits(), 2);
    assert_eq!(in_flight.reclaim_dead_permits(), 0);
    assert_eq!(in_flight.key_permits_held(b"x").unwrap(), 1);
    assert_eq!(in_flight.key_permits_held(b"y").unwrap(), 0);
    let holders = in_flight.permit_holders();
    assert_eq!(holders.len(), 1);
    assert_eq!((holders[0].id, holders[0].key_tag), (mine.id(), Some(x)));
    // Release by id, once; then a reset frees everything.
    let id = mine.into_id();
    assert!(in_flight.release_permit(id).unwrap());
    assert!(!in_flight.release_permit(id).unwrap());
    let p = in_flight.try_acquire_key_permit(b"z").unwrap().unwrap();
    in_flight.reset().unwrap();
    assert!(!p.is_held());
    assert!(in_flight.permit_holders().is_empty());
}

/// A table with no slot for a new key follows its policy: deny (no permit), allow (a permit
/// that holds nothing, id 0), or the `TableFull` error. Keys holding permits are never evicted.
#[test]
fn a_full_key_table_follows_its_policy() {
    for policy in [FullPolicy::Deny, FullPolicy::Allow, FullPolicy::Error] {
        let (_dir, path) = temp_path("full.shm");
        let limiter = Limiter::builder()
            .keyed_limit(
                "in_flight",
                Concurrency::new(1),
                Keyed::new(2).on_full(policy),
            )
            .create_or_open(&path)
            .unwrap();
        let l = limiter.keyed_concurrency("in_flight").unwrap();
        let held: Vec<_> = (0..2)
            .map(|i| l.try_acquire_key_permit(&key(i)).unwrap().unwrap())
            .collect();
        assert_eq!(l.key_occupancy(), (2, 2));
        match (policy, l.try_acquire_key_permit(b"newcomer")) {
            (FullPolicy::Deny, Ok(None)) => {}
            (FullPolicy::Allow, Ok(Some(p))) => {
                assert_eq!(p.id(), 0, "holds nothing");
                assert!(!p.is_held());
            }
            (FullPolicy::Error, Err(Error::TableFull { limit })) => assert_eq!(limit, "in_flight"),
            (policy, other) => panic!("{policy:?}: {other:?}"),
        }
        assert!(
            held.iter().all(|p| p.is_held()),
            "{policy:?}: a holder was evicted"
        );
        // A key that released its permit is idle: its slot goes to the newcomer.
        drop(held);
        assert!(l.try_acquire_key_permit(b"newcomer").unwrap().is_some());
    }
}

/// Keyed and unkeyed calls do not mix, and bad keys are refused before anything is taken.
#[test]
fn keyed_permits_refuse_the_wrong_calls_and_bad_keys() {
    let (_dir, path) = temp_path("kinds.shm");
    let limiter = Limiter::builder()
        .keyed_limit("in_flight", Concurrency::new(2), Keyed::new(16))
        .limit("pool", Concurrency::new(2))
        .create_or_open(&path)
        .unwrap();
    // The kinds are checked when the names are resolved.
    assert!(matches!(
        limiter.concurrency("in_flight"),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        limiter.keyed_token_bucket("in_flight"),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        limiter.keyed_concurrency("pool"),
        Err(Error::WrongKind { .. })
    ));
    let in_flight = limiter.keyed_concurrency("in_flight").unwrap();
    let pool = limiter.concurrency("pool").unwrap();
    assert!(matches!(
        in_flight.try_acquire_key_permit(b""),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        in_flight.try_acquire_key_permit(&vec![b'k'; shmlimit::consts::MAX_KEY_LEN + 1]),
        Err(Error::InvalidKey { .. })
    ));
    assert_eq!(in_flight.key_occupancy(), (0, 16), "nothing was inserted");
    // A permit id of one limit means nothing to another.
    let p = pool.try_acquire_permit().unwrap().unwrap();
    assert!(!in_flight.release_permit(p.id()).unwrap());
    assert!(p.is_held());
}
