//! Bad input at every public Rust entry point: zero, negative, NaN, infinite, huge and
//! overflowing values, empty and oversized keys, unknown names and wrong kinds. Each gives a
//! typed error (never a panic), and nothing is consumed: peeks and statistics are the same
//! before and after.

mod common;

use std::time::Duration;

use common::{rate, temp_path};
use shmlimit::{
    consts::{
        MAX_CAPACITY, MAX_CHECKS, MAX_KEYS, MAX_KEY_LEN, MAX_KEY_PERMITS, MAX_KEY_PERMIT_ENTRIES,
        MAX_LIMITS, MAX_LOG_LIMIT, MAX_NAME_LEN, MAX_PERMITS, MAX_SPLIT, MAX_WINDOW, MIN_WINDOW,
    },
    try_acquire_all, Algorithm, Alignment, Check, Clock, Concurrency, Decision, Error, FixedWindow,
    Keyed, LimitDef, Limiter, ManualClock, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

fn is_invalid<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(Error::InvalidParameter { reason, .. }) => assert!(!reason.is_empty(), "{what}"),
        other => panic!("{what}: expected InvalidParameter, got {other:?}"),
    }
}

#[test]
fn rates_refuse_zero_negative_nan_infinite_and_overflowing_values() {
    is_invalid(Rate::new(0, Duration::from_secs(1)), "zero tokens");
    is_invalid(Rate::new(1, Duration::ZERO), "zero period");
    is_invalid(
        Rate::new(u64::MAX, Duration::from_secs(1)),
        "u64::MAX per second",
    );
    is_invalid(Rate::new(2, Duration::from_nanos(1)), "two per nanosecond");
    is_invalid(Rate::new(1, Duration::MAX), "a period beyond u64 ns");
    is_invalid(Rate::per_second(0), "zero per second");
    for bad in [
        0.0,
        -0.0,
        -1.0,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN,
        f64::MAX,
        1e10,
        1e-300,
        f64::MIN_POSITIVE,
        5e-324,
    ] {
        is_invalid(Rate::per_second_f64(bad), &format!("{bad} per second"));
    }
    for bad in [0, (1 << 62) + 1, u64::MAX] {
        is_invalid(Rate::from_emission_ns(bad), &format!("emission {bad}"));
    }
    // The extremes that are valid.
    assert_eq!(Rate::per_second_f64(1e9).unwrap().emission_ns(), 1);
    assert_eq!(
        Rate::from_emission_ns(1 << 62).unwrap().emission_ns(),
        1 << 62
    );
}

/// Every bad definition is refused by `create_or_open`, before any file is made.
#[test]
fn bad_definitions_are_refused_and_create_no_file() {
    let (_dir, path) = temp_path("defs.shm");
    type Case = (&'static str, fn(shmlimit::Builder) -> shmlimit::Builder);
    let cases: Vec<Case> = vec![
        ("bucket capacity 0", |b| {
            b.limit("x", TokenBucket::new(0, Rate::per_second(1).unwrap()))
        }),
        ("bucket capacity max", |b| {
            b.limit(
                "x",
                TokenBucket::new(u64::MAX, Rate::per_second(1).unwrap()),
            )
        }),
        ("bucket capacity over MAX_CAPACITY", |b| {
            b.limit(
                "x",
                TokenBucket::new(MAX_CAPACITY + 1, Rate::from_emission_ns(1).unwrap()),
            )
        }),
        ("bucket B*T overflows", |b| {
            b.limit(
                "x",
                TokenBucket::new(MAX_CAPACITY, Rate::from_emission_ns(1 << 62).unwrap()),
            )
        }),
        ("per_second(0)", |b| {
            b.limit("x", TokenBucket::per_second(0))
        }),
        ("per_second(0).burst(5)", |b| {
            b.limit("x", TokenBucket::per_second(0).burst(5))
        }),
        ("burst(0)", |b| {
            b.limit("x", TokenBucket::per_second(5).burst(0))
        }),
        ("fixed limit 0", |b| {
            b.limit("x", FixedWindow::new(0, Duration::from_secs(1)))
        }),
        ("fixed limit u64::MAX", |b| {
            b.limit("x", FixedWindow::new(u64::MAX, Duration::from_secs(1)))
        }),
        ("fixed window 0", |b| {
            b.limit("x", FixedWindow::new(1, Duration::ZERO))
        }),
        ("fixed window below MIN_WINDOW", |b| {
            b.limit(
                "x",
                FixedWindow::new(1, MIN_WINDOW - Duration::from_nanos(1)),
            )
        }),
        ("fixed window Duration::MAX", |b| {
            b.limit("x", FixedWindow::new(1, Duration::MAX))
        }),
        ("sliding limit 2^20", |b| {
            b.limit("x", SlidingWindow::new(1 << 20, Duration::from_secs(1)))
        }),
        ("sliding limit 0", |b| {
            b.limit("x", SlidingWindow::new(0, Duration::from_secs(1)))
        }),
        ("sliding window 0", |b| {
            b.limit("x", SlidingWindow::new(1, Duration::ZERO))
        }),
        ("log limit 0", |b| {
            b.limit("x", SlidingLog::new(0, Duration::from_secs(1)))
        }),
        ("log limit above MAX_LOG_LIMIT", |b| {
            b.limit(
                "x",
                SlidingLog::new(MAX_LOG_LIMIT + 1, Duration::from_secs(1)),
            )
        }),
        ("log window above MAX_WINDOW", |b| {
            b.limit(
                "x",
                SlidingLog::new(1, MAX_WINDOW + Duration::from_nanos(1)),
            )
        }),
        ("log window Duration::MAX", |b| {
            b.limit("x", SlidingLog::new(1, Duration::MAX))
        }),
        ("permits 0", |b| b.limit("x", Concurrency::new(0))),
        ("permits above MAX_PERMITS", |b| {
            b.limit("x", Concurrency::new(MAX_PERMITS + 1))
        }),
        ("permits u64::MAX", |b| {
            b.limit("x", Concurrency::new(u64::MAX))
        }),
        ("lease 0", |b| {
            b.limit("x", Concurrency::new(1).lease(Duration::ZERO))
        }),
        ("lease Duration::MAX", |b| {
            b.limit("x", Concurrency::new(1).lease(Duration::MAX))
        }),
        ("keys 0", |b| {
            b.keyed_limit("x", TokenBucket::per_second(1), Keyed::new(0))
        }),
        ("keys above MAX_KEYS", |b| {
            b.keyed_limit("x", TokenBucket::per_second(1), Keyed::new(MAX_KEYS + 1))
        }),
        ("keyed log", |b| {
            b.keyed_limit(
                "x",
                SlidingLog::new(1, Duration::from_secs(1)),
                Keyed::new(4),
            )
        }),
        ("keyed concurrency above MAX_KEY_PERMITS per key", |b| {
            b.keyed_limit("x", Concurrency::new(MAX_KEY_PERMITS + 1), Keyed::new(4))
        }),
        ("keyed concurrency above MAX_KEY_PERMIT_ENTRIES", |b| {
            b.keyed_limit(
                "x",
                Concurrency::new(64),
                Keyed::new(MAX_KEY_PERMIT_ENTRIES / 32),
            )
        }),
        ("empty name", |b| b.limit("", TokenBucket::per_second(1))),
        ("name too long", |b| {
            b.limit(&"n".repeat(MAX_NAME_LEN + 1), TokenBucket::per_second(1))
        }),
        ("name with a space", |b| {
            b.limit("a b", TokenBucket::per_second(1))
        }),
        ("name with a NUL", |b| {
            b.limit("a\0b", TokenBucket::per_second(1))
        }),
        ("name not ASCII", |b| {
            b.limit("caf\u{e9}", TokenBucket::per_second(1))
        }),
        ("name defined twice", |b| {
            b.limit("x", TokenBucket::per_second(1))
                .limit("x", TokenBucket::per_second(2))
        }),
        ("split 0", |b| {
            b.define(
                LimitDef::new(
                    "x",
                    Algorithm::TokenBucket {
                        capacity: 64,
                        emission_ns: 1_000,
                    },
                )
                .split(0),
            )
        }),
        ("split above MAX_SPLIT", |b| {
            let k = MAX_SPLIT as u16 + 1;
            b.define(
                LimitDef::new(
                    "x",
                    Algorithm::TokenBucket {
                        capacity: 1 << 20,
                        emission_ns: 1_000,
                    },
                )
                .split(k),
            )
        }),
        ("split of a log", |b| {
            b.define(
                LimitDef::new(
                    "x",
                    Algorithm::SlidingLog {
                        limit: 64,
                        window_ns: 1_000_000_000,
                    },
                )
                .split(2),
            )
        }),
        ("raw bucket emission 0", |b| {
            b.define(LimitDef::new(
                "x",
                Algorithm::TokenBucket {
                    capacity: 1,
                    emission_ns: 0,
                },
            ))
        }),
        ("raw fixed window of u64::MAX ns", |b| {
            b.define(LimitDef::new(
                "x",
                Algorithm::FixedWindow {
                    limit: 1,
                    window_ns: u64::MAX,
                    alignment: Alignment::WallClock,
                },
            ))
        }),
    ];
    for (what, case) in cases {
        let r = case(Limiter::builder()).create_or_open(&path);
        is_invalid(r, what);
        assert!(!path.exists(), "{what}: a file was created");
    }
    // Too many limits.
    let mut b = Limiter::builder();
    for i in 0..=MAX_LIMITS {
        b = b.limit(&format!("l{i}"), TokenBucket::per_second(1));
    }
    is_invalid(b.create_or_open(&path), "MAX_LIMITS + 1 limits");
    assert!(!path.exists());
}

/// A huge key capacity is refused, not a panic (rounding it up to a power of two overflows).
#[test]
fn a_key_capacity_beyond_u64_powers_of_two_is_refused() {
    let (_dir, path) = temp_path("keys.shm");
    for capacity in [(1u64 << 63) + 1, u64::MAX] {
        let r = std::panic::catch_unwind(|| {
            Limiter::builder()
                .keyed_limit("x", TokenBucket::per_second(1), Keyed::new(capacity))
                .create_or_open(&path)
        });
        match r {
            Ok(r) => is_invalid(r, &format!("keys {capacity}")),
            Err(_) => panic!("Keyed::new({capacity}) panicked in the builder"),
        }
    }
}

/// The state of every limit as peeks and statistics see it.
fn snapshot(limiter: &Limiter<ManualClock>) -> Vec<String> {
    limiter
        .limits()
        .iter()
        .map(|l| {
            let peek = match l.name() {
                "conc" => format!("{}", l.permit_holders().len()),
                name => format!("{:?}", peek(limiter, name).map(|d| d.remaining())),
            };
            format!(
                "{} {peek} {:?} {:?}",
                l.name(),
                l.stats(),
                l.live_algorithm()
            )
        })
        .collect()
}

/// A decision of `cost` on the rate limit `name` of `limiter` (for key "k" if it is keyed),
/// dated `at` or on the clock.
fn decide<C: Clock>(
    limiter: &Limiter<C>,
    name: &str,
    cost: u64,
    at: Option<u64>,
) -> shmlimit::Result<Decision> {
    match (limiter.limit(name)?.kind().is_keyed(), at) {
        (true, None) => limiter
            .keyed_token_bucket(name)?
            .try_acquire_key(b"k", cost),
        (true, Some(t)) => limiter
            .keyed_token_bucket(name)?
            .try_acquire_key_at(b"k", cost, t),
        (false, None) => rate(limiter, name)?.try_acquire(cost),
        (false, Some(t)) => rate(limiter, name)?.try_acquire_at(cost, t),
    }
}

/// What a decision of cost 1 on the rate limit `name` would be now (for key "k" if keyed).
fn peek<C: Clock>(limiter: &Limiter<C>, name: &str) -> shmlimit::Result<Decision> {
    if limiter.limit(name)?.kind().is_keyed() {
        limiter.keyed_token_bucket(name)?.peek_key(b"k", 1)
    } else {
        rate(limiter, name)?.peek(1)
    }
}

fn limiter(path: &std::path::Path) -> Limiter<ManualClock> {
    Limiter::builder()
        .limit("tb", TokenBucket::new(10, Rate::per_second(1).unwrap()))
        .limit(
            "fw",
            FixedWindow::new(10, Duration::from_secs(60)).aligned(Alignment::Monotonic),
        )
        .limit("sw", SlidingWindow::new(10, Duration::from_secs(60)))
        .limit("log", SlidingLog::new(10, Duration::from_secs(60)))
        .limit("conc", Concurrency::new(2))
        .keyed_limit(
            "keyed",
            TokenBucket::new(10, Rate::per_second(1).unwrap()),
            Keyed::new(8),
        )
        .clock(ManualClock::new(1_000 * 1_000_000_000))
        .create_or_open(path)
        .unwrap()
}

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

/// Clock values at and beyond what the state encodings hold: a typed error or a decision, never
/// a panic, and no admission beyond the capacity.
#[test]
fn extreme_clock_values_are_errors_or_bounded_decisions() {
    let (_dir, path) = temp_path("clock.shm");
    let limiter = limiter(&path);
    // Time 0 is `decisions_dated_zero_are_counted`.
    for now in [
        1,
        1023,
        1024,
        1 << 48,
        1 << 58,
        1 << 60,
        (1 << 62) + 1,
        1 << 63,
        u64::MAX - 1,
        u64::MAX,
    ] {
        limiter.clock().set(now);
        for l in limiter.limits() {
            let mut admitted = 0;
            for _ in 0..20 {
                let r = match l.name() {
                    "conc" => continue,
                    name => decide(&limiter, name, 1, Some(now)),
                };
                match r {
                    Ok(d) => admitted += d.is_allowed() as u64,
                    Err(Error::ClockOutOfRange(_) | Error::CorruptState { .. }) => {}
                    Err(e) => panic!("{} at {now}: {e:?}", l.name()),
                }
                let _ = peek(&limiter, l.name());
            }
            assert!(admitted <= 10, "{} admitted {admitted} at {now}", l.name());
        }
    }
    // Dated calls on a file on the real clock: every date the state cannot encode, or ahead of
    // the clock by more than `DATE_TOLERANCE` (2^63, u64::MAX, 2^60, an hour ahead, two windows
    // ahead), is refused with ClockOutOfRange for every kind, keyed or not, and consumes
    // nothing; another handle's ordinary decisions over the following 1.2 s of real time are
    // exactly what a fresh file gives: not locked out (at least one full burst or window), not
    // opened up (at most the bound over 1.2 s), never CorruptState.
    let real = |path: &std::path::Path| {
        Limiter::builder()
            .limit("tb", TokenBucket::new(10, Rate::per_second(10).unwrap()))
            .limit(
                "fw",
                FixedWindow::new(10, Duration::from_secs(1)).aligned(Alignment::Monotonic),
            )
            .limit("sw", SlidingWindow::new(10, Duration::from_secs(1)))
            .limit("log", SlidingLog::new(10, Duration::from_secs(1)))
            .keyed_limit(
                "keyed",
                TokenBucket::new(10, Rate::per_second(10).unwrap()),
                Keyed::new(8),
            )
            .create_or_open(path)
            .unwrap()
    };
    let tolerance = shmlimit::consts::DATE_TOLERANCE.as_nanos() as u64;
    // (what, date given the clock now): each date is computed just before its calls.
    type Dated = fn(u64) -> u64;
    let dates: [(&str, Dated); 6] = [
        ("2^63", |_| 1 << 63),
        ("u64::MAX", |_| u64::MAX),
        ("2^60", |_| 1 << 60),
        ("now + 1 h", |now| now + 3_600_000_000_000),
        ("now + 2 windows", |now| now + 2_000_000_000),
        ("now + 100 ms", |now| now + 100_000_000),
    ];
    assert!(tolerance < 100_000_000);
    let dirs: Vec<_> = dates.iter().map(|_| temp_path("dated.shm")).collect();
    for ((what, date), (_, path)) in dates.iter().zip(&dirs) {
        let dater = real(path);
        let date = &date(common::now_ns());
        for l in dater.limits() {
            for _ in 0..20 {
                let r = decide(&dater, l.name(), 1, Some(*date));
                assert!(
                    matches!(r, Err(Error::ClockOutOfRange(d)) if d == *date),
                    "{} dated {what}: {r:?}",
                    l.name()
                );
            }
        }
        // A date within the tolerance is accepted (and is a decision like any other).
        let tb = dater.token_bucket("tb").unwrap();
        assert!(tb.try_acquire_at(1, common::now_ns()).unwrap().is_allowed());
        dater.limit("tb").unwrap().reset().unwrap();
    }
    // Another handle (another open of each file), ordinary decisions over real time.
    let others: Vec<_> = dirs
        .iter()
        .map(|(_, p)| Limiter::open(p).unwrap())
        .collect();
    let mut admitted = vec![[0u64; 5]; others.len()];
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(1200) {
        for (o, counts) in others.iter().zip(admitted.iter_mut()) {
            for (i, l) in o.limits().iter().enumerate() {
                let d =
                    decide(o, l.name(), 1, None).unwrap_or_else(|e| panic!("{}: {e}", l.name()));
                counts[i] += d.is_allowed() as u64;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let elapsed = start.elapsed().as_secs_f64();
    for ((what, _), counts) in dates.iter().zip(&admitted) {
        for (name, (&n, bound)) in ["tb", "fw", "sw", "log", "keyed"].iter().zip(
            counts
                .iter()
                // tb, keyed: B + r T; fw, sw: the windows 1.2 s can touch; log: 10 per second.
                .zip([
                    11.0 + 10.0 * elapsed,
                    30.0,
                    30.0,
                    20.0,
                    11.0 + 10.0 * elapsed,
                ]),
        ) {
            assert!(
                n >= 10,
                "after a call dated {what}, {name} admitted only {n} in {elapsed:.2} s"
            );
            assert!(
                n as f64 <= bound,
                "after a call dated {what}, {name} admitted {n} in {elapsed:.2} s (bound {bound})"
            );
        }
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

/// A decision dated at time 0 (a `ManualClock::new(0)`, or `try_acquire_at(n, 0)`) is counted
/// like any other.
#[test]
fn decisions_dated_zero_are_counted() {
    let (_dir, path) = temp_path("zero.shm");
    let limiter = limiter(&path);
    limiter.clock().set(0);
    for l in limiter.limits() {
        let admitted = (0..20)
            .filter(|_| match l.name() {
                "conc" => false,
                name => decide(&limiter, name, 1, Some(0)).unwrap().is_allowed(),
            })
            .count();
        assert!(
            admitted <= 10,
            "{} admitted {admitted} at t = 0, limit 10",
            l.name()
        );
    }
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
