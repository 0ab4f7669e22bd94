//! Bad rates and definitions are refused with typed errors and create no file.

use super::*;

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
