//! The counters after a decision: refunds counted (so `allowed - refunded` is what passed),
//! exact totals across forked and SIGKILLed processes and across many threads (lanes taken
//! over from threads that exited), and a denial that writes no word another thread writes.
//!
//! The file layout these tests read (format version 7): header word 9 is the counter region's
//! offset, word 10 its length; 64 lanes of equal stride, each an owner line (word 0: owner,
//! generation in bits 46-63) and then eight counter words per limit: allowed, denied,
//! shadow-denied, near-limit, refunded.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{fork_child, reap, sigkill, temp_path, SharedWords};
use shmlimit::{try_acquire_all, Check, FixedWindow, Keyed, Limiter, TokenBucket};

const HOUR: Duration = Duration::from_secs(3600);
const LANES: u64 = 64;
const LINE: u64 = 128;
const COUNTERS: u64 = 8;
const ALLOWED: u64 = 0;
const DENIED: u64 = 1;

fn words(path: &std::path::Path) -> Vec<u64> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// (counter region offset, lane stride) in bytes.
fn region(w: &[u64]) -> (u64, u64) {
    (w[9], w[10] / LANES)
}

/// The byte offset of counter `which` of limit `index` in `lane`.
fn counter_at(w: &[u64], lane: u64, index: u64, which: u64) -> u64 {
    let (base, stride) = region(w);
    base + lane * stride + LINE + (index * COUNTERS + which) * 8
}

/// `try_acquire_all(a, b)` admitting 5 of 100: `a` granted all 100 and gave 95 back.
#[test]
fn composed_roll_backs_count_as_refunds() {
    let (_dir, path) = temp_path("composed.shm");
    let limiter = Limiter::builder()
        .limit("a", FixedWindow::new(1000, HOUR))
        .limit("b", FixedWindow::new(5, HOUR))
        .create_or_open(&path)
        .unwrap();
    let (a, b) = (limiter.window("a").unwrap(), limiter.window("b").unwrap());
    let passed = (0..100)
        .filter(|_| {
            try_acquire_all(&[Check::new(&a, 1), Check::new(&b, 1)])
                .unwrap()
                .is_allowed()
        })
        .count() as u64;
    assert_eq!(passed, 5);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.allowed, sa.denied, sa.refunded), (100, 0, 95));
    assert_eq!(sa.allowed - sa.refunded, passed);
    assert_eq!((sb.allowed, sb.denied, sb.refunded), (5, 95, 0));
    assert_eq!(sb.allowed - sb.refunded, passed);
}

/// Every way of giving a grant back counts once; partial refunds, refunds of denials and
/// failed cancellations do not.
#[test]
fn explicit_refunds_count() {
    let (_dir, path) = temp_path("refunds.shm");
    let limiter = Limiter::builder()
        .limit("window", FixedWindow::new(10, HOUR))
        .limit_with("shadow", FixedWindow::new(1, HOUR), |mut d| {
            d.shadow = true;
            d
        })
        .keyed_limit("keyed", FixedWindow::new(2, HOUR), Keyed::new(16))
        .limit("bucket", TokenBucket::per_second(1).burst(5))
        .create_or_open(&path)
        .unwrap();
    let window = limiter.window("window").unwrap();
    let g = window.try_acquire(2).unwrap();
    window.refund(&g).unwrap();
    let g = window.try_acquire(2).unwrap();
    window.refund_units(&g, 1).unwrap(); // partial: the request still passed
    for _ in 0..9 {
        let _ = window.try_acquire(1).unwrap();
    }
    let denied = window.try_acquire(1).unwrap();
    assert!(denied.is_denied());
    window.refund(&denied).unwrap(); // a denial gave nothing: not a refund
    let s = window.stats();
    assert_eq!((s.allowed, s.denied, s.refunded), (11, 1, 1));

    let shadow = limiter.window("shadow").unwrap();
    let _ = shadow.try_acquire(1).unwrap();
    let shadowed = shadow.try_acquire(1).unwrap();
    assert!(shadowed.is_shadow_denied());
    shadow.refund(&shadowed).unwrap(); // admitted (in shadow), given back
    let s = shadow.stats();
    assert_eq!((s.allowed, s.shadow_denied, s.refunded), (2, 1, 1));

    let keyed = limiter.keyed_window("keyed").unwrap();
    let g = keyed.try_acquire_key(b"k", 1).unwrap();
    keyed.refund_key(b"k", &g).unwrap();
    let checks = [Check::keyed(&keyed, b"k", 1), Check::new(&window, 1)];
    let composed = try_acquire_all(&checks).unwrap();
    assert!(composed.is_denied(), "the window is spent");
    let s = keyed.stats();
    assert_eq!((s.allowed, s.refunded), (2, 2), "a refund and a roll-back");

    let bucket = limiter.token_bucket("bucket").unwrap();
    let r = bucket.reserve(2, Duration::ZERO).unwrap();
    assert!(r.cancel().unwrap());
    let first = bucket.reserve(1, Duration::ZERO).unwrap();
    let _second = bucket.reserve(1, Duration::ZERO).unwrap();
    assert!(!first.cancel().unwrap(), "booked over: not given back");
    let checks = [Check::new(&bucket, 1)];
    let composed = try_acquire_all(&checks).unwrap();
    composed.refund(&checks).unwrap();
    let s = bucket.stats();
    assert_eq!((s.allowed, s.refunded), (4, 2));
}

/// A denial writes one word: its thread's own `denied` counter of the limit, on a lane no
/// other thread writes. The limit's state, the shared lane 0 and every other word of the file
/// stay as they were.
#[test]
fn a_denial_writes_only_its_threads_own_counter() {
    let (_dir, path) = temp_path("deny.shm");
    let limiter = Limiter::builder()
        .limit("other", FixedWindow::new(5, HOUR))
        .limit("bucket", TokenBucket::per_second(1).burst(1))
        .create_or_open(&path)
        .unwrap();
    let bucket = limiter.token_bucket("bucket").unwrap();
    assert!(bucket.try_acquire(1).unwrap().is_allowed()); // the thread's lane is claimed
    let before = words(&path);
    for _ in 0..1000 {
        assert!(bucket.try_acquire(1).unwrap().is_denied());
    }
    let after = words(&path);
    let changed: Vec<usize> = (0..before.len())
        .filter(|&i| before[i] != after[i])
        .collect();
    assert_eq!(
        changed.len(),
        1,
        "words changed by 1000 denials: {changed:?}"
    );
    let at = changed[0] as u64 * 8;
    assert_eq!(after[changed[0]] - before[changed[0]], 1000);
    let (base, stride) = region(&before);
    let lane = (at - base) / stride;
    assert!(
        (1..LANES).contains(&lane),
        "an owned lane, not the shared one"
    );
    assert_eq!(at, counter_at(&before, lane, 1, DENIED));
    // The lane's owner word names this thread: its tid in the low 22 bits.
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
    assert_eq!(
        before[((base + lane * stride) / 8) as usize] & 0x3F_FFFF,
        tid
    );
}

/// Forked processes hammer one limit, some on a handle inherited from a parent that decided
/// first (its cached lane must not be theirs), some opening the file; one is SIGKILLed while
/// paused. The summed stats equal the admissions and denials the processes counted
/// themselves, the killed one's included.
macro_rules! forked_and_killed {
    ($kind:ident, $spec:expr) => {{
        const WORKERS: usize = 6;
        const DECISIONS: u64 = 200_000;
        const VICTIM_DECISIONS: u64 = 1234;
        let (_dir, path) = temp_path("fork.shm");
        let limiter = Limiter::builder()
            .limit("w", $spec)
            .create_or_open(&path)
            .unwrap();
        let limit = limiter.$kind("w").unwrap();
        // The parent decides first: its thread claims a lane the children inherit in its cache.
        assert!(limit.try_acquire(1).unwrap().is_allowed());
        let own = SharedWords::new(2 * (WORKERS + 1) + 2);
        let start = WORKERS * 2 + 3;
        let count = |i: usize, allowed: bool| {
            // SeqCst: read by the parent after the child is reaped or paused.
            own.at(2 * i + usize::from(!allowed))
                .fetch_add(1, Ordering::SeqCst);
        };
        let pids: Vec<_> = (0..WORKERS)
            .map(|i| {
                let (limit, path, count, own) = (&limit, &path, &count, &own);
                fork_child(move || {
                    let opened;
                    let l = if i % 2 == 0 {
                        limit
                    } else {
                        opened = Limiter::open(path).unwrap().$kind("w").unwrap();
                        &opened
                    };
                    // All at once, so that they decide at the same time.
                    while own.at(start).load(Ordering::SeqCst) == 0 {
                        std::hint::spin_loop();
                    }
                    for _ in 0..DECISIONS {
                        count(i, l.try_acquire(1).unwrap().is_allowed());
                    }
                    0
                })
            })
            .collect();
        let paused = WORKERS * 2 + 2;
        let victim = {
            let (limit, count, own) = (&limit, &count, &own);
            fork_child(move || {
                for _ in 0..VICTIM_DECISIONS {
                    count(WORKERS, limit.try_acquire(1).unwrap().is_allowed());
                }
                own.at(paused).store(1, Ordering::SeqCst);
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        own.at(start).store(1, Ordering::SeqCst);
        for pid in pids {
            assert_eq!(reap(pid), 0);
        }
        while own.at(paused).load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        sigkill(victim);
        assert_eq!(reap(victim), 128 + libc::SIGKILL);
        let (mut allowed, mut denied) = (1, 0); // the parent's first decision
        for i in 0..=WORKERS {
            allowed += own.at(2 * i).load(Ordering::SeqCst);
            denied += own.at(2 * i + 1).load(Ordering::SeqCst);
        }
        assert_eq!(
            allowed + denied,
            1 + WORKERS as u64 * DECISIONS + VICTIM_DECISIONS
        );
        assert_eq!(allowed, 700_000, "saturating demand takes the whole window");
        let s = limit.stats();
        assert_eq!((s.allowed, s.denied), (allowed, denied));
        // The same from a fresh attachment, as another process reads them.
        let s = Limiter::open(&path).unwrap().limit("w").unwrap().stats();
        assert_eq!((s.allowed, s.denied), (allowed, denied));
    }};
}

#[test]
fn forked_and_killed_processes_are_counted_exactly() {
    forked_and_killed!(window, FixedWindow::new(700_000, HOUR));
}

/// The same on a token bucket, whose decisions count through each thread's hot entry (a
/// child's entries, inherited from the parent that decided first, must not count into the
/// parent's lane).
#[test]
fn forked_and_killed_processes_are_counted_exactly_on_a_bucket() {
    forked_and_killed!(
        token_bucket,
        TokenBucket::new(700_000, shmlimit::Rate::new(1, HOUR).unwrap())
    );
}

/// More threads than lanes, twice: the threads without a lane count on the shared lane, the
/// second round takes over the lanes of the first round's exited threads, and every decision
/// is counted exactly once.
#[test]
fn threads_beyond_the_lanes_and_lanes_of_exited_threads() {
    const THREADS: usize = 80;
    const EACH: u64 = 50;
    let (_dir, path) = temp_path("threads.shm");
    let limiter = Limiter::builder()
        .limit("w", FixedWindow::new(1_000_000, HOUR))
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.window("w").unwrap();
    let round = || {
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (limit, barrier) = (limit.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    assert!(limit.try_acquire(1).unwrap().is_allowed());
                    // Every thread holds its lane (or found none) before any exits.
                    barrier.wait();
                    for _ in 1..EACH {
                        assert!(limit.try_acquire(1).unwrap().is_allowed());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    };
    let generations = || {
        let w = words(&path);
        let (base, stride) = region(&w);
        (1..LANES)
            .map(|lane| w[((base + lane * stride) / 8) as usize] >> 46)
            .collect::<Vec<_>>()
    };
    round();
    assert_eq!(limit.stats().allowed, THREADS as u64 * EACH);
    assert!(
        generations().iter().all(|&g| g == 1),
        "every lane claimed once"
    );
    let w = words(&path);
    assert!(
        w[(counter_at(&w, 0, 0, ALLOWED) / 8) as usize] > 0,
        "threads beyond the lanes counted on the shared lane"
    );
    round();
    assert_eq!(limit.stats().allowed, 2 * THREADS as u64 * EACH);
    assert!(
        generations().iter().all(|&g| g == 2),
        "every lane taken over from an exited thread: {:?}",
        generations()
    );
}

/// A fenced decision (a fleet share whose lease has run out is decided with the fence) is
/// counted near the limit against the fence's capacity, not the share's: leaving 99 of the
/// fence's 100 units is not near its limit.
#[test]
fn a_fenced_decision_is_counted_near_the_limit_of_the_fence() {
    use shmlimit::{ManualClock, Rate};
    let (_dir, path) = temp_path("fenced-near.shm");
    let limiter = Limiter::builder()
        .clock(ManualClock::new(1_000 * 1_000_000_000))
        .limit("f", TokenBucket::new(100, Rate::per_second(1).unwrap()))
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.token_bucket("f").unwrap();
    // The fence: 100 units at 1/s. Then a share far larger, with no lease (deadline 0): every
    // decision is the fence's.
    limit
        .fleet_manage(100, Rate::per_second(1).unwrap())
        .unwrap();
    limit
        .set_token_bucket(1_000_000, Rate::per_second(1_000).unwrap())
        .unwrap();
    assert!(!limit.fleet_lease().unwrap().unwrap().leased);
    for expected in [99, 98] {
        let d = limit.try_acquire(1).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), expected, "decided with the fence");
    }
    let s = limit.stats();
    assert_eq!((s.allowed, s.near_limit), (2, 0), "{s:?}");
    // Down to 9 of the fence's 100: the admissions leaving 10 and 9 are near (under
    // 6554/65536 of 100 units, 10.0006).
    let rest = (0..89)
        .filter(|_| limit.try_acquire(1).unwrap().is_allowed())
        .count();
    assert_eq!(rest, 89);
    let s = limit.stats();
    assert_eq!((s.allowed, s.near_limit), (91, 2), "{s:?}");
}
