//! Processes SIGKILLed in the middle of their decisions leave every limit consistent.

use super::*;

#[test]
fn processes_killed_mid_decision_leave_every_limit_consistent() {
    // Every decision commits with one CAS (the log: one per claimed entry), so a process killed
    // at any instruction leaves each word old or new. Six processes hammer four limits at costs
    // 1..=3 and are SIGKILLed one by one at arbitrary moments, three rounds over; the survivors'
    // file must still decide without error and, once every window has passed, grant exactly
    // each limit's capacity at one instant.
    let _serial = fork_lock();
    let (_dir, path) = temp_path("killed.shm");
    let window = Duration::from_millis(10);
    let limiter = Limiter::builder()
        .limit(
            "bucket",
            TokenBucket::new(50, Rate::per_second(5_000).unwrap()),
        )
        .limit(
            "fw",
            FixedWindow::new(50, window).aligned(Alignment::Monotonic),
        )
        .limit(
            "sw",
            SlidingWindow {
                limit: 50,
                window,
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(50, window))
        .create_or_open(&path)
        .expect("create limiter file");
    let limits = common::rates(&limiter);
    let mut rng = XorShift::new(31);
    for round in 0..3 {
        let safety = now_ns() + 20 * SEC;
        let children: Vec<_> = (0..6)
            .map(|i| {
                let limits = &limits;
                common::spawn(move || {
                    let mut rng = XorShift::new(round * 100 + i);
                    while now_ns() < safety {
                        for limit in limits {
                            let cost = 1 + rng.next_u64() % 3;
                            let _ = limit.try_acquire(cost).expect("no error after a kill");
                        }
                    }
                    Vec::new()
                })
            })
            .collect();
        for child in children {
            std::thread::sleep(Duration::from_micros(2_000 + rng.next_u64() % 20_000));
            child.kill();
            let (status, _) = child.wait();
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                "round {round}: a worker ended by itself (status {status:#x}): it failed"
            );
        }
        // Decisions still work now...
        for limit in &limits {
            let _ = limit.try_acquire(1).expect("a decision after the kills");
        }
        // ...and a second after the last kill every window has passed: exactly the capacity.
        // (A handle whose clock reads that second: a date may not run ahead of the clock.)
        let later = now_ns() + SEC;
        let ahead = shmlimit::Limiter::builder()
            .clock(shmlimit::ManualClock::new(later))
            .open(&path)
            .unwrap();
        for limit in &common::rates(&ahead) {
            let mut granted = 0;
            while limit.try_acquire_at(1, later).unwrap().is_allowed() {
                granted += 1;
                assert!(granted <= 50, "{}: more than its capacity", limit.name());
            }
            assert_eq!(granted, 50, "round {round}: {}", limit.name());
        }
        // Let the clock pass the dates used above before the next round.
        std::thread::sleep(Duration::from_millis(1_050));
    }
}
