//! `retry_after` is exact: waiting it out leads to an admission, and not a nanosecond less.

use super::*;

/// After a denial, the same request at `now + retry_after - 1` is denied and at
/// `now + retry_after` admitted (checked with a peek first, then for real).
fn assert_retry_exact(f: &Fixture, limit: &dyn RateLimit<ManualClock>, cost: u64, what: &str) {
    let now = f.clock.now_ns();
    let denied = limit.try_acquire(cost).unwrap();
    assert!(denied.is_denied(), "{what}: expected a denial");
    let retry = denied.retry_after_ns();
    assert!(retry > 0, "{what}");
    f.clock.set(now + retry - 1);
    assert!(
        limit.peek(cost).unwrap().is_denied(),
        "{what}: peek 1 ns early"
    );
    assert!(
        limit.try_acquire(cost).unwrap().is_denied(),
        "{what}: 1 ns early (retry {retry})"
    );
    f.clock.set(now + retry);
    assert!(
        limit.peek(cost).unwrap().is_allowed(),
        "{what}: peek on time"
    );
    assert!(
        limit.try_acquire(cost).unwrap().is_allowed(),
        "{what}: on time (retry {retry})"
    );
}

#[test]
fn retry_after_is_exact_for_the_token_bucket() {
    let f = fixture(vec![("b", bucket(20, 100, MINUTE))], BASE);
    let b = f.limit("b");
    assert_eq!(until_denied(&b, 100), 20);
    // Empty at BASE: the next token is 600 ms away.
    let d = b.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 600 * MS);
    assert_eq!(d.retry_after_secs_ceil(), 1);
    assert_retry_exact(&f, &b, 1, "bucket, cost 1, at a refill instant");
    // Off the refill grid: 250 ms later the next token is 600 ms after the last refill.
    f.clock.advance(250 * MS);
    let d = b.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 350 * MS);
    assert_retry_exact(&f, &b, 1, "bucket, cost 1, off the grid");
    // Cost 5 needs five tokens: 5 x 600 ms from empty.
    let d = b.try_acquire(5).unwrap();
    assert_eq!(d.retry_after_ns(), 5 * 600 * MS);
    f.clock.advance(123 * MS + 7);
    assert_retry_exact(&f, &b, 5, "bucket, cost 5");
    // The full capacity is one grant; one more is an error, not a denial.
    f.clock.advance(3_600 * SEC);
    assert!(b.try_acquire(20).unwrap().is_allowed());
    assert_retry_exact(&f, &b, 20, "bucket, cost = capacity");
}

#[test]
fn retry_after_is_exact_for_the_sliding_log() {
    let f = fixture(vec![("log", log(5, Duration::from_secs(10)))], BASE);
    let l = f.limit("log");
    // One admission per second, at times that are not multiples of the 1024 ns storage unit.
    for k in 0..5 {
        f.clock.set(BASE + k * SEC + 777);
        assert!(l.try_acquire(1).unwrap().is_allowed());
    }
    f.clock.set(BASE + 5 * SEC);
    let d = l.try_acquire(1).unwrap();
    assert!(d.is_denied());
    // The oldest admission expires 10 s after it was recorded: about 5 s from now, never earlier
    // (the entry is stored rounded up to 1024 ns).
    let expected = BASE + 10 * SEC + 777 - (BASE + 5 * SEC);
    assert!(
        d.retry_after_ns() >= expected && d.retry_after_ns() < expected + 1024,
        "retry {} vs {expected}",
        d.retry_after_ns()
    );
    assert_retry_exact(&f, &l, 1, "log, cost 1");
    // Cost 3 needs the three oldest entries free: the third oldest is the binding one.
    f.clock.set(BASE + 10 * SEC + 777 + 10);
    assert_retry_exact(&f, &l, 3, "log, cost 3");
}

#[test]
fn retry_after_lands_on_the_next_boundary_for_the_fixed_window() {
    let f = fixture(vec![("fw", fixed(100, MINUTE))], 1_200 * SEC + 17 * SEC + 5);
    let fw = f.limit("fw");
    assert_eq!(until_denied(&fw, 1_000), 100);
    let d = fw.try_acquire(1).unwrap();
    assert_eq!(d.retry_after_ns(), 60 * SEC - 17 * SEC - 5);
    assert_retry_exact(&f, &fw, 1, "fixed window, cost 1");
    // In the new window (at its first instant), 99 more fit; a cost of 2 waits for the next.
    assert_eq!(burst(&fw, 98), 98);
    f.clock.advance(SEC);
    let d = fw.try_acquire(2).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 59 * SEC);
    assert_eq!(d.remaining(), 1);
    assert_retry_exact(&f, &fw, 2, "fixed window, cost 2");
}

#[test]
fn retry_after_of_the_sliding_window_counter_leads_to_an_admission() {
    let f = fixture(
        vec![("sw", sliding_window(10, Duration::from_secs(1)))],
        BASE,
    );
    let sw = f.limit("sw");
    assert_eq!(until_denied(&sw, 100), 10);
    assert_retry_exact(&f, &sw, 1, "sliding window at the first boundary");
    let mut rng = XorShift::new(7);
    for round in 0..200 {
        f.clock.advance(rng.next_u64() % (400 * MS));
        let cost = 1 + rng.next_u64() % 4;
        if sw.peek(cost).unwrap().is_allowed() {
            let _ = sw.try_acquire(cost).unwrap();
            until_denied(&sw, 100);
        }
        if sw.peek(cost).unwrap().is_denied() {
            assert_retry_exact(&f, &sw, cost, &format!("sliding window, round {round}"));
        }
    }
}
