//! Waiting with a deadline, across real processes: permit waiters woken by a release or by a
//! holder's death and returning by their deadline; token-bucket reservations served in booking
//! order, refused past their deadline without consuming anything, and cancelled; windows and
//! the sliding log waited on by exact sleeps.
//!
//! Time bounds here are generous on purpose (this machine is shared and noisy): what is exact
//! is asserted exactly (never before the deadline, never before the booked time, spacing of
//! bookings), what depends on scheduling only against bounds far above the expected figures.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fork_child, fork_lock, fork_workers, now_ns, reap, sigkill, temp_path, MS};
use shmlimit::{
    Alignment, Clock, Concurrency, FixedWindow, Limiter, ManualClock, SlidingLog, TokenBucket,
};

#[test]
fn a_permit_waiter_returns_by_its_deadline() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("deadline.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(1))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let _held = db.try_acquire_permit().unwrap().unwrap();
    let timeout = Duration::from_millis(300);
    let reports = fork_workers(3, |_| {
        let db = Limiter::open(&path).unwrap().concurrency("db").unwrap();
        let start = now_ns();
        let got = db.acquire_permit_timeout(timeout).unwrap().is_some();
        vec![got as u64, now_ns() - start]
    });
    for r in reports {
        assert_eq!(r[0], 0, "no permit was free");
        let waited = r[1];
        eprintln!("waiter gave up after {:.1} ms", waited as f64 / 1e6);
        assert!(waited >= 300 * MS, "returned before its deadline");
        assert!(waited < 800 * MS, "returned far after its deadline");
    }
}

/// The parent holds the only permit, a child waits with a 10 s deadline, the parent releases
/// 300 ms later: the child gets it right away (the release wakes it through the futex), long
/// before its deadline.
#[test]
fn a_release_wakes_a_waiter_at_once() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("wake.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(1))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let mut latencies = Vec::new();
    for _ in 0..3 {
        let held = db.try_acquire_permit().unwrap().unwrap();
        let released_at = Arc::new(AtomicU64::new(0));
        let releaser = {
            let released_at = Arc::clone(&released_at);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                released_at.store(now_ns(), Ordering::SeqCst);
                assert!(held.release());
            })
        };
        let reports = fork_workers(1, |_| {
            let db = Limiter::open(&path).unwrap().concurrency("db").unwrap();
            let p = db.acquire_permit_timeout(Duration::from_secs(10)).unwrap();
            let at = now_ns();
            vec![p.is_some() as u64, at]
        });
        releaser.join().unwrap();
        let released = released_at.load(Ordering::SeqCst);
        assert_eq!(reports[0][0], 1, "the waiter timed out");
        let got = reports[0][1];
        assert!(got > released, "granted before the release");
        latencies.push(got - released);
    }
    eprintln!(
        "release -> waiter granted: {:?} us",
        latencies.iter().map(|l| l / 1000).collect::<Vec<_>>()
    );
    for l in latencies {
        assert!(
            l < 2_000 * MS,
            "woken {l} ns after the release (deadline 10 s)"
        );
    }
}

/// A holder killed with SIGKILL releases nothing; a process already waiting finds its permit
/// within the re-check period (100 ms), far before its deadline.
#[test]
fn a_waiter_gets_the_permit_of_a_holder_killed_meanwhile() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("killwait.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(1))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array for pipe to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let holder = fork_child(|| {
        let p = db.try_acquire_permit().unwrap().unwrap();
        let b = 1u8;
        // SAFETY: one byte from a valid buffer to the pipe's write end.
        unsafe { libc::write(fds[1], (&b as *const u8).cast(), 1) };
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let _ = p.id();
        }
    });
    let mut b = 0u8;
    // SAFETY: reads one byte into a valid buffer from the pipe's read end.
    assert_eq!(
        unsafe { libc::read(fds[0], (&mut b as *mut u8).cast(), 1) },
        1
    );
    // SAFETY: closing the two descriptors pipe gave us.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert!(db.try_acquire_permit().unwrap().is_none());
    let killed_at = Arc::new(AtomicU64::new(0));
    let killer = {
        let killed_at = Arc::clone(&killed_at);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(250));
            sigkill(holder);
            killed_at.store(now_ns(), Ordering::SeqCst);
            reap(holder);
        })
    };
    let start = Instant::now();
    let p = db.acquire_permit_timeout(Duration::from_secs(10)).unwrap();
    let got = now_ns();
    killer.join().unwrap();
    assert!(p.is_some(), "the dead holder's permit never came back");
    let latency = got.saturating_sub(killed_at.load(Ordering::SeqCst));
    eprintln!(
        "holder killed -> waiter granted: {:.1} ms (waited {:.1?})",
        latency as f64 / 1e6,
        start.elapsed()
    );
    assert!(latency < 3_000 * MS, "the re-check period is 100 ms");
}

/// Six processes book one token each on a bucket of 10/s with burst 1 (T = 100 ms): they may
/// proceed at times spaced by at least T in booking order, and none proceeds before its time.
#[test]
fn reservations_are_served_in_booking_order_across_processes() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("order.shm");
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::per_second(10).burst(1))
        .create_or_open(&path)
        .unwrap();
    let api = limiter.limit("api").unwrap();
    const T: u64 = 100 * MS;
    let reports = fork_workers(6, |_| {
        let api = Limiter::open(&path).unwrap().token_bucket("api").unwrap();
        let r = api.reserve(1, Duration::from_secs(10)).unwrap();
        assert!(r.is_granted());
        let ready = r.ready_at_ns();
        let booked_delay = r.delay_ns();
        let d = r.wait();
        let proceeded = now_ns();
        vec![d.is_allowed() as u64, ready, proceeded, booked_delay]
    });
    let mut by_ready: Vec<(u64, u64)> = reports
        .iter()
        .map(|r| {
            assert_eq!(r[0], 1);
            assert!(r[2] >= r[1], "proceeded before its booked time");
            (r[1], r[2])
        })
        .collect();
    by_ready.sort_unstable();
    for pair in by_ready.windows(2) {
        assert!(
            pair[1].0 >= pair[0].0 + T,
            "bookings closer than one emission interval"
        );
    }
    let proceeded_in_order = by_ready.windows(2).all(|p| p[0].1 <= p[1].1);
    eprintln!(
        "ready offsets (ms): {:?}; proceeded in booking order: {proceeded_in_order}",
        by_ready
            .iter()
            .map(|(r, _)| (r - by_ready[0].0) / MS)
            .collect::<Vec<_>>()
    );
    // Six tokens at 10/s with burst 1 after the first: the last may go 500 ms after the first.
    assert!(by_ready[5].0 - by_ready[0].0 >= 5 * T);
    assert_eq!(api.stats().allowed, 6);
}

#[test]
fn a_reservation_past_its_deadline_is_refused_and_consumes_nothing() {
    let (_dir, path) = temp_path("refuse.shm");
    let clock = ManualClock::new(1_000_000 * MS);
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::per_second(10).burst(2))
        .clock(clock.clone())
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    assert!(api.try_acquire(2).unwrap().is_allowed()); // empty now
    let refused = api.reserve(1, Duration::from_millis(99)).unwrap();
    assert!(refused.is_refused());
    assert_eq!(
        refused.delay_ns(),
        100 * MS,
        "the delay it would have needed"
    );
    assert!(!refused.cancel().unwrap());
    // Nothing was consumed: the same booking now needs the same delay, and fits 100 ms.
    let granted = api.reserve(1, Duration::from_millis(100)).unwrap();
    assert!(granted.is_granted());
    assert_eq!(granted.delay_ns(), 100 * MS);
    assert_eq!(granted.ready_at_ns(), clock.now_ns() + 100 * MS);
    // The next one queues behind it.
    let behind = api.reserve(2, Duration::from_secs(1)).unwrap();
    assert_eq!(behind.delay_ns(), 300 * MS);
    // acquire_timeout refuses at once what does not fit, consuming nothing.
    let start = Instant::now();
    let d = api.acquire_timeout(1, Duration::from_millis(399)).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 400 * MS);
    assert!(
        start.elapsed() < Duration::from_millis(399),
        "refused without sleeping"
    );
    assert_eq!(api.reserve(1, Duration::ZERO).unwrap().delay_ns(), 400 * MS);
    let s = api.stats();
    assert_eq!((s.allowed, s.denied), (3, 3));
}

#[test]
fn cancel_gives_back_only_what_nothing_later_depends_on() {
    let (_dir, path) = temp_path("cancel.shm");
    let clock = ManualClock::new(1_000_000 * MS);
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::per_second(10).burst(1))
        .clock(clock.clone())
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    let a = api.reserve(1, Duration::from_secs(1)).unwrap();
    assert_eq!(a.delay_ns(), 100 * MS);
    assert!(a.cancel().unwrap(), "the latest booking is given back");
    let a = api.reserve(1, Duration::from_secs(1)).unwrap();
    assert_eq!(a.delay_ns(), 100 * MS, "as if it had never been booked");
    let b = api.reserve(1, Duration::from_secs(1)).unwrap();
    assert_eq!(b.delay_ns(), 200 * MS);
    assert!(
        !a.cancel().unwrap(),
        "b was booked after a: a's token stays used"
    );
    assert!(b.cancel().unwrap());
    let c = api.reserve(1, Duration::from_secs(1)).unwrap();
    assert_eq!(c.delay_ns(), 200 * MS, "only b's token came back");
    // Once the clock passes, a cancel returns the tokens as a refund would (never overfilling).
    clock.advance(500 * MS);
    assert!(c.cancel().unwrap());
    assert!(api.try_acquire(1).unwrap().is_allowed());
    assert!(
        api.try_acquire(1).unwrap().is_denied(),
        "burst 1: never fuller than full"
    );
}

#[test]
fn windows_and_logs_wait_the_exact_retry_after() {
    let (_dir, path) = temp_path("windows.shm");
    let limiter = Limiter::builder()
        .limit(
            "fw",
            FixedWindow::new(2, Duration::from_millis(200)).aligned(Alignment::Monotonic),
        )
        .limit("log", SlidingLog::new(2, Duration::from_millis(200)))
        .create_or_open(&path)
        .unwrap();
    let fw = limiter.window("fw").unwrap();
    let w = 200 * MS;
    // Fill whatever window we are in, then wait for the next.
    while fw.try_acquire(1).unwrap().is_allowed() {}
    let full_at = now_ns();
    let refused = fw.acquire_timeout(1, Duration::from_micros(1)).unwrap();
    if refused.is_denied() {
        assert!(refused.retry_after_ns() > 0);
    }
    let d = fw.acquire_timeout(1, Duration::from_secs(2)).unwrap();
    assert!(d.is_allowed());
    let at = now_ns();
    assert!(at / w > full_at / w, "admitted in the window that was full");

    let log = limiter.sliding_log("log").unwrap();
    let before = now_ns();
    assert!(log.try_acquire(2).unwrap().is_allowed());
    let d = log.acquire_timeout(1, Duration::from_secs(2)).unwrap();
    assert!(d.is_allowed());
    // Both entries are dated at or after `before`; a third fits once one is a window old.
    assert!(
        now_ns() >= before + w,
        "admitted while two entries were in the window"
    );
    let start = Instant::now();
    let d = log.acquire_timeout(2, Duration::from_millis(10)).unwrap();
    assert!(
        d.is_denied(),
        "the deadline comes before the entries expire"
    );
    assert!(
        start.elapsed() < Duration::from_millis(150),
        "refused without waiting it out"
    );
}
