//! Bad decisions are typed errors and consume nothing: costs, keys, names, kinds, permit
//! timeouts and grants refunded on another limit.

use super::*;

#[test]
fn bad_decisions_are_typed_errors_and_consume_nothing() {
    let (_dir, path) = temp_path("decide.shm");
    let limiter = limiter(&path);
    let rates = ["tb", "fw", "sw", "log"].map(|name| (name, rate(&limiter, name).unwrap()));
    let keyed = limiter.keyed_token_bucket("keyed").unwrap();
    let conc = limiter.concurrency("conc").unwrap();
    // Some state first, so that "nothing consumed" is checked against a used limit.
    for (_, l) in &rates {
        assert!(l.try_acquire(3).unwrap().is_allowed());
    }
    assert!(keyed.try_acquire_key(b"k", 3).unwrap().is_allowed());
    let before = snapshot(&limiter);
    let long_key = vec![b'k'; MAX_KEY_LEN + 1];
    let check_cost =
        |name: &str, what: &str, cost: u64, r: shmlimit::Result<shmlimit::Decision>| match r {
            Err(Error::ZeroCost) => assert_eq!(cost, 0, "{name} {what}"),
            Err(Error::CostExceedsCapacity { cost: c, .. }) => assert_eq!(c, cost),
            other => panic!("{name}: cost {what}: {other:?}"),
        };
    // Zero, over-capacity and huge costs.
    for (cost, what) in [
        (0, "zero"),
        (11, "capacity + 1"),
        (u64::MAX, "u64::MAX"),
        (1 << 63, "2^63"),
    ] {
        for (name, l) in &rates {
            check_cost(name, what, cost, l.try_acquire(cost));
            check_cost(name, what, cost, l.peek(cost));
            check_cost(
                name,
                what,
                cost,
                l.try_acquire_at(cost, 1_000 * 1_000_000_000),
            );
            let r = l.acquire_timeout(cost, Duration::from_millis(1));
            assert!(r.is_err(), "{name}: acquire_timeout({what}) {r:?}");
            let c = [Check::new(&**l, cost)];
            assert!(try_acquire_all(&c).is_err(), "{name}: composed cost {what}");
        }
        let tb = limiter.token_bucket("tb").unwrap();
        let r = tb.reserve(cost, Duration::from_secs(1));
        assert!(r.is_err(), "tb: reserve({what}) {r:?}");
        check_cost("keyed", what, cost, keyed.try_acquire_key(b"k", cost));
        check_cost("keyed", what, cost, keyed.peek_key(b"k", cost));
        let c = [Check::keyed(&keyed, b"k", cost)];
        assert!(try_acquire_all(&c).is_err(), "keyed: composed cost {what}");
    }
    // Keys: empty, one byte too long.
    for key in [&b""[..], &long_key[..]] {
        assert!(matches!(
            keyed.try_acquire_key(key, 1),
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            keyed.peek_key(key, 1),
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            keyed.refund_key(key, &keyed.peek_key(b"k", 1).unwrap()),
            Err(Error::InvalidKey { .. })
        ));
    }
    // A key of exactly MAX_KEY_LEN bytes is fine (peeked: nothing consumed).
    assert!(keyed
        .peek_key(&long_key[..MAX_KEY_LEN], 1)
        .unwrap()
        .is_allowed());
    // A kind is checked when its name is resolved: every other accessor refuses it.
    for (name, _) in &rates {
        assert!(matches!(
            limiter.keyed_token_bucket(name),
            Err(Error::WrongKind { .. })
        ));
        assert!(matches!(
            limiter.concurrency(name),
            Err(Error::WrongKind { .. })
        ));
    }
    assert!(matches!(
        limiter.token_bucket("keyed"),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        limiter.token_bucket("conc"),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        limiter.sliding_log("tb"),
        Err(Error::WrongKind { .. })
    ));
    // Garbage permit ids.
    for id in [0, 1, u64::MAX, 1 << 63, (1 << 63) | 0xFFFF] {
        assert!(
            !conc.release_permit(id).unwrap(),
            "a permit id naming nothing"
        );
    }
    // Retuning with bad values.
    let tb = limiter.token_bucket("tb").unwrap();
    for r in [
        tb.set_token_bucket(0, Rate::per_second(1).unwrap()),
        tb.set_token_bucket(u64::MAX, Rate::per_second(1).unwrap()),
        tb.set_token_bucket(MAX_CAPACITY, Rate::from_emission_ns(1 << 62).unwrap()),
        keyed.set_token_bucket(0, Rate::per_second(1).unwrap()),
        keyed.set_token_bucket(MAX_CAPACITY, Rate::from_emission_ns(1 << 62).unwrap()),
    ] {
        assert!(
            matches!(r, Err(Error::InvalidParameter { .. })),
            "bad bucket retune {r:?}"
        );
    }
    for name in ["fw", "sw"] {
        let w = limiter.window(name).unwrap();
        for r in [w.set_limit(0), w.set_limit(u64::MAX), w.set_limit(1 << 32)] {
            assert!(
                matches!(r, Err(Error::InvalidParameter { .. })),
                "{name}: bad retune {r:?}"
            );
        }
    }
    // Refunds of more than a grant took give back at most the grant.
    for (name, l) in &rates {
        let denied = l.peek(10).unwrap();
        assert!(denied.is_denied(), "{name}");
        l.refund_units(&denied, u64::MAX).unwrap();
    }
    // Composed checks: more than MAX_CHECKS.
    let many: Vec<_> = (0..=MAX_CHECKS).map(|_| Check::new(&tb, 1)).collect();
    assert!(matches!(
        try_acquire_all(&many),
        Err(Error::InvalidParameter { .. })
    ));
    assert_eq!(before, snapshot(&limiter), "a bad call consumed something");
    // Unknown names.
    for name in ["", "nope", "TB", "tb ", &"x".repeat(1000)] {
        assert!(matches!(limiter.limit(name), Err(Error::UnknownLimit(n)) if n == name));
    }
}

#[test]
fn permit_timeouts_of_any_length_do_not_overflow() {
    let (_dir, path) = temp_path("permits.shm");
    let limiter = limiter(&path);
    let conc = limiter.concurrency("conc").unwrap();
    let a = conc.acquire_permit_timeout(Duration::MAX).unwrap().unwrap();
    let b = conc
        .acquire_permit_timeout(Duration::ZERO)
        .unwrap()
        .unwrap();
    assert!(conc
        .acquire_permit_timeout(Duration::ZERO)
        .unwrap()
        .is_none());
    assert!(conc
        .acquire_permit_timeout(Duration::from_nanos(1))
        .unwrap()
        .is_none());
    drop((a, b));
    let tb = limiter.token_bucket("tb").unwrap();
    assert!(tb.acquire_timeout(1, Duration::MAX).unwrap().is_allowed());
    assert!(tb.reserve(1, Duration::MAX).unwrap().is_granted());
}

/// A grant refunded on a limit that did not make it gives back budget no request returned.
#[test]
fn a_grant_refunded_on_another_limit_is_refused() {
    let (_dir, path) = temp_path("cross.shm");
    let limiter = Limiter::builder()
        .limit(
            "big",
            FixedWindow::new(100, Duration::from_secs(60)).aligned(Alignment::Monotonic),
        )
        .limit(
            "small",
            FixedWindow::new(10, Duration::from_secs(60)).aligned(Alignment::Monotonic),
        )
        .clock(ManualClock::new(1_000 * 1_000_000_000))
        .create_or_open(&path)
        .unwrap();
    let (big, small) = (
        limiter.window("big").unwrap(),
        limiter.window("small").unwrap(),
    );
    let grant = big.try_acquire(50).unwrap();
    assert!(small.try_acquire(10).unwrap().is_allowed());
    let r = small.refund(&grant);
    let admitted_after = (0..20)
        .filter(|_| small.try_acquire(1).unwrap().is_allowed())
        .count();
    assert!(
        r.is_err() && admitted_after == 0,
        "refund of another limit's grant: {r:?}, then {admitted_after} more admitted in a window of 10"
    );
}
