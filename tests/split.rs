//! Hot token buckets split into sub-buckets: the budget is partitioned, never copied.

mod common;

use common::{fork_lock, fork_workers, now_ns, temp_path, MS, SEC};
use shmlimit::{Error, Limiter, ManualClock, Rate, TokenBucket};

#[test]
fn split_bucket_admits_exactly_the_burst_at_one_instant() {
    let (_dir, path) = temp_path("split.shm");
    let clock = ManualClock::new(1_000 * SEC);
    let limiter = Limiter::builder()
        .clock(clock.clone())
        .limit_with(
            "hot",
            TokenBucket::new(10, Rate::per_second(4).unwrap()),
            |d| d.split(4),
        )
        .create_or_open(&path)
        .unwrap();
    let hot = limiter.token_bucket("hot").unwrap();
    assert_eq!(
        hot.capacity(),
        3,
        "one decision can take at most one (the largest) sub-bucket"
    );
    let admitted = (0..30)
        .filter(|_| hot.try_acquire(1).unwrap().is_allowed())
        .count();
    assert_eq!(
        admitted, 10,
        "sub-buckets of 3, 3, 2, 2 borrowed from in turn"
    );
    // Each sub-bucket refills at 1/s: after one second, exactly four more.
    let denied = hot.try_acquire(1).unwrap();
    assert_eq!(denied.retry_after_ns(), SEC);
    clock.advance(SEC);
    let admitted = (0..30)
        .filter(|_| hot.try_acquire(1).unwrap().is_allowed())
        .count();
    assert_eq!(admitted, 4);
    assert!(matches!(
        hot.try_acquire(4),
        Err(Error::CostExceedsCapacity { capacity: 3, .. })
    ));
    // Refunds go back to the sub-bucket that granted; retuning rescales every sub-bucket.
    clock.advance(10 * SEC);
    let grant = hot.try_acquire(2).unwrap();
    assert!(grant.is_allowed());
    hot.refund(&grant).unwrap();
    assert_eq!(
        (0..30)
            .filter(|_| hot.try_acquire(1).unwrap().is_allowed())
            .count(),
        10
    );
    hot.set_rate(Rate::per_second(40).unwrap()).unwrap();
    clock.advance(SEC / 10);
    assert_eq!(
        (0..30)
            .filter(|_| hot.try_acquire(1).unwrap().is_allowed())
            .count(),
        4
    );
}

#[test]
fn split_definitions_are_validated() {
    let (_dir, path) = temp_path("bad-split.shm");
    let bad = |k: u16, capacity: u64| {
        Limiter::builder()
            .limit_with(
                "hot",
                TokenBucket::new(capacity, Rate::per_second(10).unwrap()),
                |d| d.split(k),
            )
            .create_or_open(&path)
            .unwrap_err()
    };
    assert!(matches!(bad(0, 10), Error::InvalidParameter { .. }));
    assert!(matches!(bad(65, 100), Error::InvalidParameter { .. }));
    assert!(matches!(bad(4, 3), Error::InvalidParameter { .. }));
}

#[test]
fn split_bucket_bound_holds_across_processes() {
    let _fork = fork_lock();
    for k in [2u16, 4] {
        let (_dir, path) = temp_path("split-mp.shm");
        let (burst, rate) = (200u64, 4_000u64);
        let limiter = Limiter::builder()
            .limit_with(
                "hot",
                TokenBucket::new(burst, Rate::per_second(rate).unwrap()),
                |d| d.split(k),
            )
            .create_or_open(&path)
            .unwrap();
        let begin = now_ns();
        let results = fork_workers(8, |_| {
            let limiter = Limiter::open(&path).unwrap();
            let hot = limiter.token_bucket("hot").unwrap();
            let until = now_ns() + 600 * MS;
            let (mut admitted, mut first, mut last) = (0u64, u64::MAX, 0u64);
            loop {
                let t = now_ns();
                if t >= until {
                    break;
                }
                if hot.try_acquire(1).unwrap().is_allowed() {
                    admitted += 1;
                    first = first.min(t);
                    last = now_ns();
                }
            }
            vec![admitted, first, last]
        });
        let end = now_ns();
        let total: u64 = results.iter().map(|r| r[0]).sum();
        let bound = burst + rate * (end - begin) / SEC;
        assert!(total <= bound, "k = {k}: {total} > {bound}");
        // Borrowing keeps utilisation close to the unsplit bucket's: the admissions span covers
        // most of the run, so at least the burst plus most of the refill got through.
        let first = results.iter().map(|r| r[1]).min().unwrap();
        let last = results.iter().map(|r| r[2]).max().unwrap();
        let floor = burst + rate * (last - first) / SEC * 9 / 10;
        assert!(
            total >= floor,
            "k = {k}: {total} < {floor}: sub-buckets stranded budget"
        );
        assert_eq!(limiter.limit("hot").unwrap().stats().allowed, total);
    }
}
