//! Guarded limiters: when the file is missing, unreadable or invalid, each limit decides by the
//! policy its caller named (fail-open or fail-closed), says so, retries opening at most once per
//! interval, and recovers when the file becomes usable.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use common::{fork_lock, spawn, temp_path};
use shmlimit::{
    Error, GuardedLimiter, Limiter, ManualClock, Rate, SlidingLog, SlidingLogLimit, TokenBucket,
    TokenBucketLimit, Unavailable,
};

fn create(path: &std::path::Path) -> Limiter {
    Limiter::builder()
        .limit(
            "api",
            TokenBucket::new(2, Rate::new(1, Duration::from_secs(3_600)).unwrap()),
        )
        .limit("log", SlidingLog::new(2, Duration::from_secs(60)))
        .create_or_open(path)
        .unwrap()
}

#[test]
fn a_missing_file_decides_by_each_limits_policy_and_says_so() {
    let (_dir, path) = temp_path("missing.shm");
    let g = Limiter::open_guarded(&path, Duration::from_secs(3_600));
    let open = g.limit("api", Unavailable::FailOpen);
    let closed = g.limit("api", Unavailable::FailClosed);
    for _ in 0..100 {
        let d = open.try_acquire(1).unwrap();
        assert!(d.is_allowed() && d.is_unavailable() && d.decision().is_none());
        assert_eq!(d.retry_after_ns(), 0);
        let d = closed.try_acquire(1).unwrap();
        assert!(d.is_denied() && d.is_unavailable());
        // The retry-after is the time to the next attempt to open: at most the interval.
        assert!(d.retry_after_ns() > 0 && d.retry_after_ns() <= 3_600_000_000_000);
        assert!(closed.peek(1).unwrap().is_denied());
        assert!(open.try_acquire_key(b"k", 1).unwrap().is_allowed());
    }
    assert!(g.attached().is_none());
    assert!(
        g.last_error().unwrap().contains("missing.shm"),
        "{:?}",
        g.last_error()
    );
    // One attempt at creation; none again within the interval, whatever the traffic.
    assert_eq!(g.open_attempts(), 1);
    // The file appears: still unavailable until the interval has passed (no system call per
    // decision), which a test cannot wait for; a new guarded limiter attaches at once.
    create(&path);
    assert!(closed.try_acquire(1).unwrap().is_unavailable());
    assert_eq!(g.open_attempts(), 1);
    let g2 = Limiter::open_guarded(&path, Duration::from_secs(3_600));
    assert!(g2.attached().is_some() && g2.last_error().is_none());
}

#[test]
fn a_guarded_limit_recovers_when_the_file_appears() {
    let (_dir, path) = temp_path("late.shm");
    let g = Limiter::open_guarded(&path, Duration::from_millis(20));
    let api = g.limit("api", Unavailable::FailClosed);
    assert!(api.try_acquire(1).unwrap().is_unavailable());
    create(&path);
    // Within a few intervals the next decision attaches, and the real limit applies.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let first = loop {
        let d = api.try_acquire(1).unwrap();
        if !d.is_unavailable() {
            break d;
        }
        assert!(std::time::Instant::now() < deadline, "never attached");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(first.is_allowed() && first.decision().unwrap().is_allowed());
    assert!(api.try_acquire(1).unwrap().is_allowed());
    let d = api.try_acquire(1).unwrap();
    assert!(
        d.is_denied() && !d.is_unavailable(),
        "the real bucket (2) is empty"
    );
    // A real grant can be refunded through the plain handle.
    let plain = TokenBucketLimit::try_from(api.limit().unwrap().unwrap().clone()).unwrap();
    plain.refund(first.decision().unwrap()).unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    assert!(g.attached().is_some());
}

#[test]
fn invalid_files_are_unavailable_with_the_reason() {
    let (dir, path) = temp_path("bad.shm");
    // Foreign bytes.
    fs::write(&path, vec![0xAB; 8192]).unwrap();
    let g = Limiter::open_guarded(&path, Duration::ZERO);
    let api = g.limit("api", Unavailable::FailClosed);
    assert!(api.try_acquire(1).unwrap().is_unavailable());
    assert!(
        g.last_error().unwrap().contains("not a shmlimit file"),
        "{:?}",
        g.last_error()
    );
    // A damaged definition (checksum).
    fs::remove_file(&path).unwrap();
    drop(create(&path));
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"X", 4096).unwrap();
    let g = Limiter::open_guarded(&path, Duration::ZERO);
    assert!(g
        .limit("api", Unavailable::FailOpen)
        .try_acquire(1)
        .unwrap()
        .is_allowed());
    assert!(
        g.last_error().unwrap().contains("corrupt"),
        "{:?}",
        g.last_error()
    );
    // Repaired (recreated): the zero interval retries at the next decision.
    fs::remove_file(&path).unwrap();
    drop(create(&path));
    let d = g
        .limit("api", Unavailable::FailOpen)
        .try_acquire(1)
        .unwrap();
    assert!(!d.is_unavailable());
    // A directory and a symlink at the path.
    let sub = dir.path().join("sub");
    fs::create_dir(&sub).unwrap();
    let g = Limiter::open_guarded(&sub, Duration::ZERO);
    assert!(g
        .limit("api", Unavailable::FailClosed)
        .try_acquire(1)
        .unwrap()
        .is_denied());
    let link = dir.path().join("link.shm");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let g = Limiter::open_guarded(&link, Duration::ZERO);
    assert!(g
        .limit("api", Unavailable::FailClosed)
        .try_acquire(1)
        .unwrap()
        .is_unavailable());
    assert!(g.last_error().unwrap().contains("symbolic link"));
}

#[test]
fn damaged_state_applies_the_policy_and_callers_errors_stay_errors() {
    let (_dir, path) = temp_path("state.shm");
    drop(create(&path));
    // The log's head index out of range (its control line word 0): CorruptState.
    let head_at = {
        let mut b = [0u8; 8];
        fs::File::open(&path)
            .unwrap()
            .read_exact_at(&mut b, 4096 + 128 + 12 * 8)
            .unwrap();
        u64::from_ne_bytes(b)
    };
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&u64::MAX.to_ne_bytes(), head_at).unwrap();
    let g = Limiter::open_guarded(&path, Duration::from_secs(1));
    let open = g.limit("log", Unavailable::FailOpen);
    let closed = g.limit("log", Unavailable::FailClosed);
    assert!(matches!(
        SlidingLogLimit::try_from(open.limit().unwrap().unwrap().clone())
            .unwrap()
            .try_acquire(1),
        Err(Error::CorruptState { .. })
    ));
    let d = open.try_acquire(1).unwrap();
    assert!(d.is_allowed() && d.is_unavailable());
    let d = closed.try_acquire(1).unwrap();
    assert!(d.is_denied() && d.is_unavailable());
    // The caller's own errors are errors, attached or not, whatever the policy.
    assert!(matches!(open.try_acquire(0), Err(Error::ZeroCost)));
    assert!(matches!(
        g.limit("api", Unavailable::FailOpen).try_acquire(3),
        Err(Error::CostExceedsCapacity { .. })
    ));
    assert!(matches!(
        g.limit("nope", Unavailable::FailOpen).try_acquire(1),
        Err(Error::UnknownLimit(_))
    ));
    assert!(matches!(
        g.limit("api", Unavailable::FailOpen)
            .try_acquire_key(b"k", 1),
        Err(Error::WrongKind { .. })
    ));
    let missing = Limiter::open_guarded(path.with_extension("none"), Duration::from_secs(1));
    let m = missing.limit("api", Unavailable::FailOpen);
    assert!(matches!(m.try_acquire(0), Err(Error::ZeroCost)));
    assert!(matches!(
        m.try_acquire_key(b"", 1),
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(
        m.try_acquire_key(&vec![0; shmlimit::consts::MAX_KEY_LEN + 1], 1),
        Err(Error::InvalidKey { .. })
    ));
    assert_eq!(m.policy(), Unavailable::FailOpen);
}

/// Any opener: here a builder with its own clock that creates the file when it can.
#[test]
fn a_custom_opener_with_a_clock() {
    let (dir, path) = temp_path("sub/custom.shm");
    let clock = ManualClock::new(1_000_000_000);
    let p = path.clone();
    let c = clock.clone();
    let g: GuardedLimiter<ManualClock> = GuardedLimiter::with_opener(Duration::ZERO, move || {
        Limiter::builder()
            .limit("api", TokenBucket::new(1, Rate::per_second(1).unwrap()))
            .clock(c.clone())
            .create_or_open(&p)
    });
    let api = g.limit("api", Unavailable::FailClosed);
    // The directory does not exist yet.
    assert!(api.try_acquire(1).unwrap().is_unavailable());
    fs::create_dir(dir.path().join("sub")).unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    assert!(api.try_acquire(1).unwrap().is_denied());
    clock.advance(1_000_000_000);
    assert!(api.try_acquire(1).unwrap().is_allowed());
}

/// A worker process started before the file exists serves by its policy, then attaches.
#[test]
fn a_process_started_before_the_file_attaches_later() {
    let _serial = fork_lock();
    let (_dir, path) = temp_path("proc.shm");
    let p = path.clone();
    let child = spawn(move || {
        let g = Limiter::open_guarded(&p, Duration::from_millis(5));
        let api = g.limit("api", Unavailable::FailClosed);
        let mut unavailable = 0u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let d = api.try_acquire(1).unwrap();
            if !d.is_unavailable() {
                return vec![unavailable, d.is_allowed() as u64];
            }
            unavailable += 1;
            if std::time::Instant::now() > deadline {
                return vec![unavailable, 99];
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    let limiter = create(&path);
    let (status, words) = child.wait();
    assert_eq!(status, 0);
    assert!(words[0] > 0, "the child decided by its policy first");
    assert_eq!(words[1], 1, "then attached and was granted");
    assert_eq!(limiter.limit("api").unwrap().stats().allowed, 1);
}

#[test]
fn guarded_permits_follow_the_policy_then_the_real_limit() {
    let (_dir, path) = temp_path("permits.shm");
    let g = Limiter::open_guarded(&path, Duration::ZERO);
    let open = g.limit("db", Unavailable::FailOpen);
    let closed = g.limit("db", Unavailable::FailClosed);
    let p = open.try_acquire_permit().unwrap();
    assert!(p.is_allowed() && p.is_unavailable() && p.permit().is_none());
    let p = closed.try_acquire_permit().unwrap();
    assert!(!p.is_allowed() && p.is_unavailable());
    Limiter::builder()
        .limit("db", shmlimit::Concurrency::new(1))
        .create_or_open(&path)
        .unwrap();
    let held = closed.try_acquire_permit().unwrap();
    assert!(held.is_allowed() && !held.is_unavailable() && held.permit().is_some());
    let busy = open.try_acquire_permit().unwrap();
    assert!(matches!(busy, shmlimit::GuardedPermit::AllHeld), "{busy:?}");
    drop(held);
    assert!(open.try_acquire_permit().unwrap().permit().is_some());
    // A permit asked of a rate limit is the caller's error.
    let (_dir2, path2) = temp_path("rate.shm");
    drop(create(&path2));
    let g = Limiter::open_guarded(&path2, Duration::ZERO);
    assert!(matches!(
        g.limit("api", Unavailable::FailOpen).try_acquire_permit(),
        Err(Error::WrongKind { .. })
    ));
}

#[test]
fn guarded_keyed_permits_follow_the_policy_then_each_keys_limit() {
    let (_dir, path) = temp_path("keyed_permits.shm");
    let g = Limiter::open_guarded(&path, Duration::ZERO);
    let open = g.limit("in_flight", Unavailable::FailOpen);
    let closed = g.limit("in_flight", Unavailable::FailClosed);
    let p = open.try_acquire_key_permit(b"u1").unwrap();
    assert!(p.is_allowed() && p.is_unavailable() && p.permit().is_none());
    assert!(!closed.try_acquire_key_permit(b"u1").unwrap().is_allowed());
    // A bad key is refused even while the file is missing.
    assert!(matches!(
        open.try_acquire_key_permit(b""),
        Err(Error::InvalidKey { .. })
    ));
    Limiter::builder()
        .keyed_limit(
            "in_flight",
            shmlimit::Concurrency::new(1),
            shmlimit::Keyed::new(16),
        )
        .create_or_open(&path)
        .unwrap();
    let held = closed.try_acquire_key_permit(b"u1").unwrap();
    assert!(held.is_allowed() && held.permit().is_some());
    let busy = open.try_acquire_key_permit(b"u1").unwrap();
    assert!(matches!(busy, shmlimit::GuardedPermit::AllHeld), "{busy:?}");
    assert!(open
        .try_acquire_key_permit(b"u2")
        .unwrap()
        .permit()
        .is_some());
    drop(held);
    assert!(open
        .try_acquire_key_permit(b"u1")
        .unwrap()
        .permit()
        .is_some());
    assert!(matches!(
        open.try_acquire_permit(),
        Err(Error::WrongKind { .. })
    ));
}
