//! Concurrency limits across real processes: at most `C` permits held at once, counted by the
//! workers themselves through an independent counter; permits of processes killed while holding
//! them come back; leases, ids and inspection.
//!
//! The independent counter lives in a `MAP_SHARED` anonymous mapping made before `fork`: a
//! worker increments it right after it gets a permit and decrements it right before it lets the
//! permit go, so the counter's value at any instant is at least the number of live processes
//! inside that window, and every increment checks that value against `C`.

mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{
    all_permits_come_back, fork_child, fork_churners, fork_lock, fork_workers, permit_victim, pipe,
    read_byte, reap, sigkill, temp_path, write_byte, Active, SharedWords, MS,
};
use shmlimit::{Clock, Concurrency, Error, Limiter, ManualClock, TokenBucket};

#[test]
fn sixteen_processes_never_hold_more_than_five() {
    let _g = fork_lock();
    const C: u64 = 5;
    const WORKERS: usize = 16;
    const ROUNDS: u64 = 25;
    let (_dir, path) = temp_path("sixteen.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(C))
        .create_or_open(&path)
        .unwrap();
    let shared = SharedWords::new(8);
    let active = Active(&shared, 0);
    let reports = fork_workers(WORKERS, |i| {
        let limiter = Limiter::open(&path).unwrap();
        let db = limiter.concurrency("db").unwrap();
        let mut done = 0;
        let mut waited = 0;
        for round in 0..ROUNDS {
            let permit = match db.try_acquire_permit().unwrap() {
                Some(p) => p,
                None => {
                    waited += 1;
                    db.acquire_permit_timeout(Duration::from_secs(60))
                        .unwrap()
                        .expect("a permit within a minute")
                }
            };
            active.enter(C);
            // The work: hold the permit a little (varying, so holders overlap differently).
            std::thread::sleep(Duration::from_micros(200 + 100 * ((i as u64 + round) % 7)));
            active.leave();
            assert!(permit.release(), "the permit was still ours");
            done += 1;
        }
        vec![done, waited]
    });
    let done: u64 = reports.iter().map(|r| r[0]).sum();
    let waited: u64 = reports.iter().map(|r| r[1]).sum();
    eprintln!(
        "16 processes, C = 5: max {} active at once, {waited} waits",
        active.max()
    );
    assert_eq!(done, WORKERS as u64 * ROUNDS, "all work completes");
    assert_eq!(active.violations(), 0, "more than C active at once");
    assert!(active.max() <= C);
    let db = limiter.concurrency("db").unwrap();
    // Every grant was counted once (a wait is one decision, however long it slept).
    assert_eq!(db.stats().allowed, WORKERS as u64 * ROUNDS);
    assert!(db.permit_holders().is_empty(), "every permit released");
}

/// Children hold permits, the parent kills them with SIGKILL while they hold, over and over,
/// while other processes keep working through the limit: the killed holders' permits come back
/// (otherwise the workers would starve after `C` kills) and the live holders never exceed `C`.
#[test]
fn permits_of_killed_holders_come_back() {
    let _g = fork_lock();
    const C: u64 = 5;
    const KILLS: usize = 12;
    let (_dir, path) = temp_path("killed.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(C))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let shared = SharedWords::new(8);
    let active = Active(&shared, 0);
    // Word 3: set by the parent when the killing is over; the churners stop.
    let stop = || shared.at(3).load(Ordering::SeqCst) != 0;
    // Five churners and a victim compete for five permits: the victims' permits are needed.
    let churners = fork_churners(
        5,
        &active,
        C,
        stop,
        || Limiter::open(&path).unwrap().concurrency("db").unwrap(),
        |db| db.acquire_permit_timeout(Duration::from_secs(20)).unwrap(),
    );
    let mut took_over = Vec::new();
    for k in 0..KILLS {
        let victim = permit_victim(&active, C, || {
            db.acquire_permit_timeout(Duration::from_secs(20)).unwrap()
        });
        // The victim will never count itself out: do it for it before it dies.
        active.leave();
        sigkill(victim);
        if k % 2 == 0 {
            assert_eq!(reap(victim), 128 + libc::SIGKILL);
        } else {
            // Left a zombie for a while: its permit must come back all the same.
            took_over.push(victim);
        }
        if took_over.len() > 2 {
            for pid in took_over.drain(..) {
                reap(pid);
            }
        }
    }
    shared.at(3).store(1, Ordering::SeqCst);
    for pid in churners {
        assert_eq!(reap(pid), 0, "a churner failed");
    }
    for pid in took_over {
        reap(pid);
    }
    eprintln!(
        "{KILLS} holders killed: max {} active at once",
        active.max()
    );
    assert_eq!(active.violations(), 0, "more than C live holders at once");
    all_permits_come_back(C, || db.try_acquire_permit().unwrap());
    assert!(db.permit_holders().is_empty());
}

#[test]
fn a_zombie_owner_is_taken_over_and_gc_frees_the_rest() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("zombie.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(3))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let (r, w) = pipe();
    let child = fork_child(|| {
        for _ in 0..3 {
            let _ = db.try_acquire_permit().unwrap().unwrap().into_id();
        }
        write_byte(&w);
        0 // exits holding all three
    });
    drop(w);
    assert!(read_byte(&r));
    // Wait until the child has exited (a zombie: not reaped), seen through its /proc state.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{child}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "child did not exit");
        std::thread::sleep(Duration::from_millis(2));
    }
    let holders = db.permit_holders();
    assert_eq!(holders.len(), 3);
    assert!(holders
        .iter()
        .all(|h| h.pid == child as u32 && h.reclaimable));
    // None free: the next acquirer takes one over from the zombie.
    let mine = db
        .try_acquire_permit()
        .unwrap()
        .expect("taken over from a zombie");
    assert_eq!(reap(child), 0);
    // The other two: gc frees them.
    assert_eq!(db.reclaim_dead_permits(), 2);
    assert_eq!(db.reclaim_dead_permits(), 0);
    let holders = db.permit_holders();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].pid, std::process::id());
    assert_eq!(holders[0].id, mine.id());
    assert!(!holders[0].reclaimable);
}

#[test]
fn live_holders_are_never_taken_over_and_ids_belong_to_their_process() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("live.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(5))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let held: Vec<_> = (0..5)
        .map(|_| db.try_acquire_permit().unwrap().unwrap())
        .collect();
    let ids: Vec<u64> = held.iter().map(|p| p.id()).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 5);
    assert!(ids.iter().all(|&id| id != 0));
    let inherited = std::sync::Mutex::new(Some(held));
    let reports = fork_workers(4, |_| {
        let db = Limiter::open(&path).unwrap().concurrency("db").unwrap();
        let refused = db.try_acquire_permit().unwrap().is_none() as u64;
        let waited = db
            .acquire_permit_timeout(Duration::from_millis(50))
            .unwrap()
            .is_none() as u64;
        let foreign = ids
            .iter()
            .filter(|&&id| db.release_permit(id).unwrap())
            .count() as u64;
        // The parent's permits, inherited across fork: dropping them here releases nothing.
        let copies = inherited.lock().unwrap().take().unwrap_or_default();
        let released = copies.into_iter().filter(|p| p.is_held()).count() as u64;
        vec![refused, waited, foreign, released]
    });
    for r in &reports {
        assert_eq!(r[..3], [1, 1, 0], "a live holder's permit was given away");
    }
    assert_eq!(db.permit_holders().len(), 5, "all still held by the parent");
    let mut held = inherited.into_inner().unwrap().unwrap();
    assert!(held.iter().all(|p| p.is_held()));
    // The parent releases by id: once.
    let id = held.remove(0).into_id();
    assert!(db.release_permit(id).unwrap());
    assert!(!db.release_permit(id).unwrap());
    assert!(!db.release_permit(0).unwrap());
    assert!(!db.release_permit(u64::MAX).unwrap());
    assert_eq!(db.permit_holders().len(), 4);
}

#[test]
fn a_lease_expires_on_the_millisecond_after_its_length() {
    let (_dir, path) = temp_path("lease.shm");
    let clock = ManualClock::new(10_000 * MS + 1); // acquisition stamped at 10_001 ms
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(1).lease(Duration::from_secs(1)))
        .clock(clock.clone())
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let first = db.try_acquire_permit().unwrap().unwrap();
    let h = db.permit_holders();
    assert_eq!(h[0].since_ns, Some(10_001 * MS));
    assert_eq!(h[0].lease_expiry_ns, Some(11_001 * MS));
    assert!(!h[0].reclaimable);
    clock.set(11_001 * MS - 1);
    assert!(db.try_acquire_permit().unwrap().is_none());
    assert!(first.is_held());
    clock.set(11_001 * MS);
    let second = db.try_acquire_permit().unwrap().expect("the lease expired");
    assert!(!first.is_held());
    assert!(!first.release(), "an expired permit releases nothing");
    assert!(second.is_held());
    assert_eq!(db.permit_holders()[0].id, second.id());
}

#[test]
fn other_kinds_refuse_permits_and_permits_refuse_rates() {
    let (_dir, path) = temp_path("kinds.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(2))
        .limit("api", TokenBucket::per_second(10).burst(2))
        .create_or_open(&path)
        .unwrap();
    // The kinds are checked when the names are resolved, naming the right accessor.
    let e = limiter.token_bucket("db").unwrap_err();
    assert!(
        matches!(&e, Error::WrongKind { limit, reason } if limit == "db" && reason.contains("Limiter::concurrency")),
        "{e}"
    );
    assert!(matches!(
        limiter.concurrency("api"),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        limiter.keyed_concurrency("db"),
        Err(Error::WrongKind { .. })
    ));
    let db = limiter.concurrency("db").unwrap();
    // The inspection view of a rate limit has no permits.
    let api = limiter.limit("api").unwrap();
    assert!(api.permit_holders().is_empty());
    assert_eq!(api.reclaim_dead_permits(), 0);
    // Reset frees every permit; a handle from before releases nothing.
    let p = db.try_acquire_permit().unwrap().unwrap();
    db.reset().unwrap();
    assert!(!p.is_held());
    assert!(db.permit_holders().is_empty());
    let _ = db.clock().now_ns();
}

/// A child forked after its parent used permits records itself, not its parent, as the owner.
#[test]
fn a_forked_child_owns_its_own_permits() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("forked.shm");
    let limiter = Limiter::builder()
        .limit("db", Concurrency::new(2))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.concurrency("db").unwrap();
    let mine = db.try_acquire_permit().unwrap().unwrap();
    let reports = fork_workers(1, |_| {
        let p = db.try_acquire_permit().unwrap().unwrap();
        let owner = db
            .permit_holders()
            .iter()
            .find(|h| h.id == p.id())
            .map_or(0, |h| h.pid);
        let id = p.into_id(); // held when the child exits
        vec![owner as u64, std::process::id() as u64, id]
    });
    let (owner, child, id) = (reports[0][0], reports[0][1], reports[0][2]);
    assert_eq!(owner, child, "the child's permit names the child");
    assert_ne!(owner, std::process::id() as u64);
    // The child is gone: its permit is reclaimable, the parent's is not.
    assert!(
        !db.release_permit(id).unwrap(),
        "not the parent's to release"
    );
    assert_eq!(db.reclaim_dead_permits(), 1);
    assert!(mine.is_held());
}

/// A child made with a raw `fork` system call (no `pthread_atfork` handler runs, so nothing in
/// the library learns of the fork) records its permits under its own pid all the same: killed
/// while it holds one, its parent gets the permit back.
///
/// The raw fork happens in a single-threaded middle process (a child of the test), so the
/// grandchild cannot inherit a lock another test thread held.
#[test]
fn a_raw_fork_child_killed_holding_a_permit_gives_it_back() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("raw-fork.shm");
    Limiter::builder()
        .limit("db", Concurrency::new(2))
        .create_or_open(&path)
        .unwrap();
    let (r, w) = pipe();
    let middle = fork_child(|| {
        let limiter = Limiter::open(&path).unwrap();
        let db = limiter.concurrency("db").unwrap();
        // The middle process's identity is now cached by the library.
        let mine = db.try_acquire_permit().unwrap().expect("a first permit");
        // SAFETY: a raw clone with SIGCHLD and no new stack is fork without the libc wrapper:
        // no atfork handler runs. This process is single-threaded, so the child inherits no
        // held lock; the child only takes a permit, writes to a pipe and sleeps until killed.
        let child =
            unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
        if child < 0 {
            return 10;
        }
        if child == 0 {
            let held = db.try_acquire_permit();
            // SAFETY: getpid has no preconditions.
            let me = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
            let named_me = db.permit_holders().iter().any(|h| h.pid == me as u32);
            let report: i32 = if matches!(held, Ok(Some(_))) && named_me {
                me
            } else {
                -me
            };
            // SAFETY: writes four bytes from a valid buffer to an open descriptor.
            unsafe { libc::write(w.as_raw_fd(), (&report as *const i32).cast(), 4) };
            loop {
                std::thread::sleep(Duration::from_secs(1));
                std::hint::black_box(&held);
            }
        }
        // The test process kills the grandchild; reap it here.
        let mut status = 0;
        // SAFETY: `child` is this process's own unreaped child; `status` is a valid int.
        let reaped = unsafe { libc::waitpid(child as libc::pid_t, &mut status, 0) };
        if reaped != child as libc::pid_t || !libc::WIFSIGNALED(status) {
            return 11;
        }
        // Both permits were held (ours and the dead child's): the child's comes back.
        let back = db.try_acquire_permit().unwrap();
        if back.is_none() {
            return 12;
        }
        drop((back, mine));
        0
    });
    let mut f = std::fs::File::from(r.try_clone().unwrap());
    let mut b = [0u8; 4];
    std::io::Read::read_exact(&mut f, &mut b).unwrap();
    let report = i32::from_ne_bytes(b);
    assert!(report != 0);
    sigkill(report.abs());
    assert!(
        report > 0,
        "the raw-fork child's permit names its parent, not itself"
    );
    assert_eq!(
        reap(middle),
        0,
        "10: clone failed, 11: the child was not killed, 12: its permit did not come back"
    );
}
