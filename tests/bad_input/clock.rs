//! Extreme clock values are errors or bounded decisions, and decisions dated zero are counted.

use super::*;

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
