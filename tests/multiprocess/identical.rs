//! Processes deciding at identical instants: exact counts.

use super::*;

#[test]
fn identical_timestamps_across_processes_admit_exact_counts() {
    // Eight processes decide at the same instants (`try_acquire_at`), 100 attempts per limit
    // each: the counts are exact whatever the interleaving. Capacities 300; the bucket refills
    // one token a second; windows are 60 s, monotonic, and every instant is a multiple of the
    // log's 1024 ns storage unit.
    //
    // | instant            | bucket | fixed window    | counter                 | log          |
    // |--------------------|--------|-----------------|-------------------------|--------------|
    // | t1 = 1200 s - 1024 | 300    | 300 (window 19) | 300                     | 300          |
    // | t2 = 1200 s        | 0      | 300 (window 20) | 0 (prev weighs in full) | 0            |
    // | t3 = t1 + 60 s     | 60     | 0 (window 20)   | 299 (prev weighs 1024/W)| 300 (expired)|
    let _serial = fork_lock();
    let (_dir, path) = temp_path("instants.shm");
    let minute = Duration::from_secs(60);
    let limiter = Limiter::builder()
        .limit(
            "bucket",
            TokenBucket::new(300, Rate::per_second(1).unwrap()),
        )
        .limit(
            "fw",
            FixedWindow::new(300, minute).aligned(Alignment::Monotonic),
        )
        .limit(
            "sw",
            SlidingWindow {
                limit: 300,
                window: minute,
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(300, minute))
        .create_or_open(&path)
        .expect("create limiter file");
    let t1 = 1_200 * SEC - 1024;
    let phases = [
        (t1, [300, 300, 300, 300]),
        (1_200 * SEC, [0, 300, 0, 0]),
        (t1 + 60 * SEC, [60, 0, 299, 300]),
    ];
    let mut expected_total = [0u64; 4];
    for (at, expected) in phases {
        let results = fork_workers(WORKERS, |_| {
            // The clock reads `at` (dates may not run ahead of the clock; a fresh machine's
            // uptime may be shorter than 20 minutes).
            let limiter = Limiter::builder()
                .clock(shmlimit::ManualClock::new(at))
                .open(&path)
                .expect("open by path");
            common::rates(&limiter)
                .iter()
                .map(|limit| {
                    (0..100)
                        .filter(|_| limit.try_acquire_at(1, at).unwrap().is_allowed())
                        .count() as u64
                })
                .collect()
        });
        let mut sums = [0u64; 4];
        for r in &results {
            for (s, v) in sums.iter_mut().zip(r) {
                *s += v;
            }
        }
        assert_eq!(sums, expected, "at {at} ns (bucket, fw, sw, log)");
        for (total, e) in expected_total.iter_mut().zip(expected) {
            *total += e;
        }
    }
    for (limit, total) in limiter.limits().iter().zip(expected_total) {
        let stats = limit.stats();
        assert_eq!(stats.allowed, total, "{}", limit.name());
        assert_eq!(
            stats.allowed + stats.denied,
            3 * WORKERS as u64 * 100,
            "{}",
            limit.name()
        );
    }
}
