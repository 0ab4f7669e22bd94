//! Live retuning, refunds, composed checks, shadow mode and counters, across real processes.

mod common;

use std::time::Duration;

use common::{fork_lock, fork_workers, now_ns, temp_path, MS, SEC};
use shmlimit::{
    try_acquire_all, Check, Error, FixedWindow, Limiter, ManualClock, Rate, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// Admissions whose decision is certainly inside `[a, b]` (clock read before the call at or after
/// `a`, clock read after it at or before `b`), for every interval of the given length.
fn max_in_window(grants: &[(u64, u64)], len: u64) -> usize {
    let mut by_start: Vec<(u64, u64)> = grants.to_vec();
    by_start.sort_unstable();
    let mut best = 0;
    for (i, &(a, _)) in by_start.iter().enumerate() {
        let n = by_start[i..]
            .iter()
            .take_while(|&&(before, _)| before <= a + len)
            .filter(|&&(_, after)| after <= a + len)
            .count();
        best = best.max(n);
    }
    best
}

#[test]
fn set_rate_under_load_never_exceeds_the_larger_bound() {
    let _fork = fork_lock();
    let (_dir, path) = temp_path("retune.shm");
    let burst = 50;
    let limiter = Limiter::builder()
        .limit(
            "api",
            TokenBucket::new(burst, Rate::per_second(2_000).unwrap()),
        )
        .create_or_open(&path)
        .unwrap();
    drop(limiter);
    let start = now_ns() + 50 * MS;
    let run = 900 * MS;
    // Workers 0..8 hammer; worker 8 retunes at 300 ms (to 500/s) and 600 ms (to 4000/s).
    let results = fork_workers(9, |index| {
        let limiter = Limiter::open(&path).unwrap();
        let api = limiter.token_bucket("api").unwrap();
        while now_ns() < start {
            std::hint::spin_loop();
        }
        if index == 8 {
            std::thread::sleep(Duration::from_nanos(
                (start + 300 * MS).saturating_sub(now_ns()),
            ));
            api.set_rate(Rate::per_second(500).unwrap()).unwrap();
            let first = now_ns();
            std::thread::sleep(Duration::from_nanos(
                (start + 600 * MS).saturating_sub(now_ns()),
            ));
            api.set_rate(Rate::per_second(4_000).unwrap()).unwrap();
            return vec![first, now_ns()];
        }
        let mut out = Vec::new();
        loop {
            let before = now_ns();
            if before > start + run {
                break;
            }
            if api.try_acquire(1).unwrap().is_allowed() {
                out.push(before);
                out.push(now_ns());
            }
        }
        out
    });
    let grants: Vec<(u64, u64)> = results[..8]
        .iter()
        .flat_map(|w| w.chunks_exact(2).map(|c| (c[0], c[1])))
        .collect();
    // The larger of the bounds in force: burst + 4000/s x the interval.
    for len in [20 * MS, 100 * MS, 300 * MS, run] {
        let seen = max_in_window(&grants, len);
        let bound = burst as f64 + 4_000.0 * len as f64 / SEC as f64;
        assert!(
            seen as f64 <= bound.floor(),
            "{seen} admissions in {len} ns > {bound}"
        );
    }
    // Each phase ran at its own rate: the slow middle phase admits about 500/s, not 2000/s.
    let (slow_from, slow_to) = (results[8][0], results[8][1]);
    let middle = grants
        .iter()
        .filter(|&&(b, a)| b >= slow_from + 20 * MS && a <= slow_to)
        .count() as f64;
    let secs = slow_to.saturating_sub(slow_from + 20 * MS) as f64 / SEC as f64;
    if secs < 0.1 {
        // The retuning worker ran so late that the slow phase barely existed: the bound
        // above was checked; the phase's own rate has too few grants to judge.
        eprintln!(
            "the slow phase lasted {secs} s (the retuning worker ran late): its rate is not judged"
        );
        return;
    }
    assert!(
        middle <= burst as f64 + 500.0 * secs + 1.0,
        "slow phase admitted {middle} in {secs} s"
    );
    assert!(
        middle >= 500.0 * secs * 0.5,
        "slow phase starved: {middle} in {secs} s"
    );
}

#[test]
fn composed_denials_consume_nothing_across_processes() {
    let _fork = fork_lock();
    let (_dir, path) = temp_path("compose.shm");
    // The user quota barely refills; the downstream budget is the bottleneck. If a denial at the
    // downstream consumed the user quota, thousands of denied attempts would drain it.
    let limiter = Limiter::builder()
        .limit(
            "user",
            TokenBucket::new(1_000, Rate::per_second(1).unwrap()),
        )
        .limit(
            "downstream",
            TokenBucket::new(100, Rate::per_second(100).unwrap()),
        )
        .create_or_open(&path)
        .unwrap();
    let begin = now_ns();
    let results = fork_workers(8, |_| {
        let limiter = Limiter::open(&path).unwrap();
        let (user, downstream) = (
            limiter.token_bucket("user").unwrap(),
            limiter.token_bucket("downstream").unwrap(),
        );
        let checks = [Check::new(&user, 1), Check::new(&downstream, 1)];
        let (mut ok, mut denied) = (0u64, 0u64);
        let until = now_ns() + 700 * MS;
        while now_ns() < until {
            let c = try_acquire_all(&checks).unwrap();
            if c.is_allowed() {
                ok += 1;
            } else {
                assert_eq!(c.denied_by(), Some(1));
                assert!(c.retry_after_ns() > 0);
                denied += 1;
            }
        }
        vec![ok, denied]
    });
    let elapsed = (now_ns() - begin) as f64 / SEC as f64;
    let ok: u64 = results.iter().map(|r| r[0]).sum();
    let denied: u64 = results.iter().map(|r| r[1]).sum();
    assert!(
        denied > 1_000,
        "the downstream budget must have denied often ({denied})"
    );
    let downstream_bound = (100.0 + 100.0 * elapsed).floor() as u64;
    assert!(ok <= downstream_bound, "{ok} > {downstream_bound}");
    assert!(ok >= 100, "the burst alone admits 100 ({ok})");
    // The user quota was charged for the admitted requests only (plus at most its refill).
    let user = limiter.token_bucket("user").unwrap();
    // `remaining` of a peek is what would remain after admitting it.
    let remaining = user.peek(1).unwrap().remaining();
    let refill = elapsed.ceil() as u64 + 1;
    assert!(
        remaining + 1 + ok >= 1_000 && remaining + 1 + ok <= 1_000 + refill,
        "user remaining {remaining} after {ok} admitted: denials consumed budget"
    );
}

#[test]
fn refunds_never_create_budget() {
    let (_dir, path) = temp_path("refund.shm");
    let clock = ManualClock::new(1_000 * SEC);
    let limiter = Limiter::builder()
        .clock(clock.clone())
        .limit("tb", TokenBucket::new(3, Rate::per_second(1).unwrap()))
        .limit(
            "fw",
            FixedWindow::new(2, Duration::from_secs(10)).aligned(shmlimit::Alignment::Monotonic),
        )
        .limit("log", SlidingLog::new(2, Duration::from_secs(10)))
        .limit(
            "sw",
            SlidingWindow {
                limit: 2,
                window: Duration::from_secs(10),
                alignment: shmlimit::Alignment::Monotonic,
            },
        )
        .create_or_open(&path)
        .unwrap();
    for name in ["tb", "fw", "log", "sw"] {
        let limit = common::rate(&limiter, name).unwrap();
        let cap = limit.capacity();
        let first = limit.try_acquire(1).unwrap();
        assert!(first.is_allowed(), "{name}");
        limit.refund(&first).unwrap();
        // Refunding twice, or a denied decision, gives nothing more than full.
        limit.refund(&first).unwrap();
        let grants: Vec<_> = (0..cap).map(|_| limit.try_acquire(1).unwrap()).collect();
        assert!(
            grants.iter().all(|d| d.is_allowed()),
            "{name}: full after the refund"
        );
        let denied = limit.try_acquire(1).unwrap();
        assert!(denied.is_denied(), "{name}: never more than full");
        limit.refund(&denied).unwrap();
        assert!(
            limit.try_acquire(1).unwrap().is_denied(),
            "{name}: a denial refunds nothing"
        );
        limit.refund(&grants[0]).unwrap();
        assert!(
            limit.try_acquire(1).unwrap().is_allowed(),
            "{name}: one grant back"
        );
        assert!(
            limit.try_acquire(1).unwrap().is_denied(),
            "{name}: only one"
        );
    }
    // A fixed-window grant refunded after its window ended gives nothing to the new window.
    let fw = limiter.window("fw").unwrap();
    clock.advance(10 * SEC);
    let old = fw.try_acquire(2).unwrap();
    clock.advance(10 * SEC);
    assert!(fw.try_acquire(2).unwrap().is_allowed());
    fw.refund(&old).unwrap();
    assert!(fw.try_acquire(1).unwrap().is_denied());
}

#[test]
fn shadow_limits_count_but_never_deny() {
    let (_dir, path) = temp_path("shadow.shm");
    let limiter = Limiter::builder()
        .clock(ManualClock::new(5 * SEC))
        .limit_with(
            "new",
            TokenBucket::new(5, Rate::per_second(1).unwrap()),
            |mut d| {
                d.shadow = true;
                d
            },
        )
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.token_bucket("new").unwrap();
    let decisions: Vec<_> = (0..12).map(|_| limit.try_acquire(1).unwrap()).collect();
    assert!(decisions.iter().all(|d| d.is_allowed()));
    assert_eq!(decisions.iter().filter(|d| d.is_shadow_denied()).count(), 7);
    let stats = limit.stats();
    assert_eq!(
        (stats.allowed, stats.denied, stats.shadow_denied),
        (12, 0, 7)
    );
    // Near-limit: the fifth admission leaves 0 of 5, the fourth 1 of 5 (20%, over the 10% mark).
    assert_eq!(stats.near_limit, 1);
    // Shadow-denied grants took nothing: refunding one gives nothing back.
    limit.refund(&decisions[11]).unwrap();
    assert!(limit.peek(1).unwrap().is_denied());
}

/// Near-limit admissions of a token bucket (not a shadow limit: counted through the deciding
/// thread's own entry) are those that leave under 10% of the live capacity, before and after a
/// retune changes it.
#[test]
fn near_limit_admissions_follow_the_live_capacity() {
    let (_dir, path) = temp_path("near.shm");
    let limiter = Limiter::builder()
        .clock(ManualClock::new(5 * SEC))
        .limit("b", TokenBucket::new(5, Rate::per_second(1).unwrap()))
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.token_bucket("b").unwrap();
    for _ in 0..5 {
        assert!(limit.try_acquire(1).unwrap().is_allowed());
    }
    assert!(limit.try_acquire(1).unwrap().is_denied());
    let s = limit.stats();
    // Only the fifth leaves under 10% of 5 (0 left; the fourth leaves 1, 20%).
    assert_eq!((s.allowed, s.denied, s.near_limit), (5, 1, 1));

    limit
        .set_token_bucket(40, Rate::per_second(1).unwrap())
        .unwrap();
    // The default mark is 6554/65536 of the capacity: 4.0002 tokens of 40, so an admission
    // leaving 0 to 4 tokens is near.
    let mut near = 0;
    let mut admitted = 0;
    loop {
        let d = limit.try_acquire(1).unwrap();
        if d.is_denied() {
            break;
        }
        admitted += 1;
        near += u64::from(d.remaining() <= 4);
    }
    assert!(admitted >= 5, "the retune raised the capacity: {admitted}");
    assert_eq!(near, 5);
    let s = limit.stats();
    assert_eq!(
        (s.allowed, s.denied, s.near_limit),
        (5 + admitted, 2, 1 + near)
    );
}

/// A retune to parameters whose slot check word equals the old one's is seen by the thread
/// that decided before it: the check word is a 64-bit function of the two parameters, so two
/// parameter sets can share it (`rotl(emission, 17) ^ capacity` is the same for both pairs
/// below), and a thread's cached parameters must be matched on the values, not only the check.
#[test]
fn a_retune_to_parameters_with_the_same_check_word_is_seen() {
    // (emission ns, capacity) before and after: 1,000,000 ns x 131,082 -> 1,000,001 ns x 10,
    // and a bandwidth retune, 1,004 ns per byte x 1.5 MiB -> 1,000 ns x 1 MiB.
    for (before, after) in [
        ((1_000_000, 131_082), (1_000_001, 10)),
        ((1_004, 1_572_864), (1_000, 1_048_576)),
    ] {
        let (_dir, path) = temp_path("same-check.shm");
        let limiter = Limiter::builder()
            .clock(ManualClock::new(1_000 * SEC))
            .limit(
                "b",
                TokenBucket::new(before.1, Rate::from_emission_ns(before.0).unwrap()),
            )
            .create_or_open(&path)
            .unwrap();
        let limit = limiter.token_bucket("b").unwrap();
        // Fills this thread's cached parameters for the slot.
        assert!(limit.try_acquire(1).unwrap().is_allowed());
        limit
            .set_token_bucket(after.1, Rate::from_emission_ns(after.0).unwrap())
            .unwrap();
        let capacity = after.1;
        match limit.try_acquire(capacity + 1) {
            Err(Error::CostExceedsCapacity { cost, capacity: c }) => {
                assert_eq!((cost, c), (capacity + 1, capacity));
            }
            other => panic!("a cost over the live capacity {capacity} decided: {other:?}"),
        }
        // The clock stands still: the unit taken before the retune is still in use (rescaled,
        // rounded up), so the bucket admits `capacity - 1` more and no more.
        let tries = 25;
        let admitted = (0..tries)
            .filter(|_| limit.try_acquire(1).unwrap().is_allowed())
            .count() as u64;
        assert_eq!(
            admitted,
            (capacity - 1).min(tries),
            "{before:?} -> {after:?}"
        );
    }
}

/// The same for a fixed window: near-limit admissions leave under 10% of the live limit
/// (`slack < limit x 6554 / 65536`, rounded down), before and after `set_limit`.
#[test]
fn near_limit_admissions_of_a_window_follow_the_live_limit() {
    let (_dir, path) = temp_path("near-window.shm");
    let limiter = Limiter::builder()
        .clock(ManualClock::new(5 * SEC))
        .limit("w", FixedWindow::new(20, Duration::from_secs(3600)))
        .create_or_open(&path)
        .unwrap();
    let limit = limiter.window("w").unwrap();
    let take = |n: u64| {
        (0..n)
            .map(|_| limit.try_acquire(1).unwrap())
            .filter(|d| d.is_allowed())
            .count() as u64
    };
    assert_eq!(take(21), 20);
    let s = limit.stats();
    // 20 x 6554 / 65536 = 2 (rounded down): the admissions leaving 1 and 0.
    assert_eq!((s.allowed, s.denied, s.near_limit), (20, 1, 2));
    limit.set_limit(40).unwrap();
    assert_eq!(take(21), 20);
    let s = limit.stats();
    // 40 x 6554 / 65536 = 4: the admissions leaving 3, 2, 1 and 0.
    assert_eq!((s.allowed, s.denied, s.near_limit), (40, 2, 6));
}

#[test]
fn retuning_is_seen_by_other_handles_and_validated() {
    let (_dir, path) = temp_path("live.shm");
    let clock = ManualClock::new(100 * SEC);
    let a = Limiter::builder()
        .clock(clock.clone())
        .limit("tb", TokenBucket::new(10, Rate::per_second(10).unwrap()))
        .limit("fw", FixedWindow::new(10, Duration::from_secs(1)))
        .limit("log", SlidingLog::new(3, Duration::from_secs(1)))
        .create_or_open(&path)
        .unwrap();
    let b = Limiter::builder().clock(clock.clone()).open(&path).unwrap();
    let (tb_a, tb_b) = (a.token_bucket("tb").unwrap(), b.token_bucket("tb").unwrap());
    assert!(tb_b.try_acquire(10).unwrap().is_allowed());
    tb_a.set_token_bucket(20, Rate::per_second(1).unwrap())
        .unwrap();
    // The ten tokens used stay used; the new capacity leaves ten more.
    assert_eq!(tb_b.peek(1).unwrap().remaining(), 9);
    assert!(tb_b.try_acquire(10).unwrap().is_allowed());
    let d = tb_b.try_acquire(1).unwrap();
    assert_eq!(
        d.retry_after_ns(),
        SEC,
        "the new rate: one token per second"
    );
    assert_eq!(
        tb_b.live_algorithm().unwrap(),
        shmlimit::Algorithm::TokenBucket {
            capacity: 20,
            emission_ns: SEC
        }
    );
    // The stored definition is unchanged, so openers with the original definitions still attach.
    assert!(matches!(
        tb_b.algorithm(),
        shmlimit::Algorithm::TokenBucket { capacity: 10, .. }
    ));
    let fw = b.window("fw").unwrap();
    a.window("fw").unwrap().set_limit(3).unwrap();
    assert!(fw.try_acquire(3).unwrap().is_allowed());
    assert!(fw.try_acquire(1).unwrap().is_denied());
    assert!(matches!(
        fw.try_acquire(4),
        Err(Error::CostExceedsCapacity { capacity: 3, .. })
    ));
    // A log has no live retune: it does not resolve as a window.
    assert!(matches!(a.window("log"), Err(Error::WrongKind { .. })));
    assert!(matches!(
        fw.set_limit(0),
        Err(Error::InvalidParameter { .. })
    ));
    assert!(matches!(
        tb_a.set_token_bucket(0, Rate::per_second(1).unwrap()),
        Err(Error::InvalidParameter { .. })
    ));
    // Reset grants the whole capacity again and keeps the retuned parameters.
    tb_a.reset().unwrap();
    assert_eq!(tb_b.peek(1).unwrap().remaining(), 19);
}

#[test]
fn composed_checks_take_keyed_limits() {
    let (_dir, path) = temp_path("keyed-compose.shm");
    let limiter = Limiter::builder()
        .clock(ManualClock::new(10 * SEC))
        .keyed_limit(
            "per_user",
            TokenBucket::new(3, Rate::per_second(1).unwrap()),
            shmlimit::Keyed::new(64),
        )
        .limit(
            "downstream",
            TokenBucket::new(1, Rate::per_second(1).unwrap()),
        )
        .create_or_open(&path)
        .unwrap();
    let (user, downstream) = (
        limiter.keyed_token_bucket("per_user").unwrap(),
        limiter.token_bucket("downstream").unwrap(),
    );
    let checks = [Check::keyed(&user, b"alice", 1), Check::new(&downstream, 1)];
    let first = try_acquire_all(&checks).unwrap();
    assert!(first.is_allowed());
    assert_eq!(user.peek_key(b"alice", 1).unwrap().remaining(), 1);
    let second = try_acquire_all(&checks).unwrap();
    assert_eq!(second.denied_by(), Some(1));
    assert_eq!(
        user.peek_key(b"alice", 1).unwrap().remaining(),
        1,
        "the denied request took nothing from alice"
    );
    first.refund(&checks).unwrap();
    assert_eq!(user.peek_key(b"alice", 1).unwrap().remaining(), 2);
    assert!(downstream.peek(1).unwrap().is_allowed());
    assert_eq!(
        user.peek_key(b"bob", 1).unwrap().remaining(),
        2,
        "bob is untouched"
    );
}

#[test]
fn composed_check_of_one_limit_twice_takes_both_units() {
    // A composed check loads every limit's word before its one clock read: the second check of
    // the same limit starts from a word the first one has already replaced, fails its CAS and
    // decides again on the new word. Both units are taken, or neither.
    let (_dir, path) = temp_path("twice.shm");
    let limiter = Limiter::builder()
        .limit("a", TokenBucket::new(3, Rate::per_day(1).unwrap()))
        .limit("w", FixedWindow::new(3, Duration::from_secs(3_600)))
        .create_or_open(&path)
        .unwrap();
    let (a, w) = (
        limiter.token_bucket("a").unwrap(),
        limiter.window("w").unwrap(),
    );
    let checks = [Check::new(&a, 1), Check::new(&w, 1), Check::new(&a, 1)];
    assert!(try_acquire_all(&checks).unwrap().is_allowed());
    assert_eq!(a.peek(1).unwrap().remaining(), 0, "two of three taken");
    assert_eq!(w.peek(1).unwrap().remaining(), 1);
    let second = try_acquire_all(&checks).unwrap();
    assert_eq!(second.denied_by(), Some(2), "one token left for two checks");
    // The denial gave back what the first two checks took.
    assert_eq!(a.peek(1).unwrap().remaining(), 0);
    assert_eq!(w.peek(1).unwrap().remaining(), 1);
    let stats = a.stats();
    assert_eq!(stats.allowed - stats.refunded, 2, "{stats:?}");
}
