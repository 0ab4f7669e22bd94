//! The sliding-window counter against the exact log: its worst case under an adversarial burst,
//! and how closely it tracks the log under steady and Poisson load.

use super::*;

/// Largest number of the (sorted) times that fall in one closed interval `[s, s + len - 1]`,
/// i.e. in some interval of length `len` ns.
fn max_in_any_interval(times: &[u64], len: u64) -> usize {
    let mut best = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= len {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

#[test]
fn sliding_window_counter_worst_case_is_two_l_minus_one() {
    // The estimate at elapsed e of window k is prev (W - e) / W + cur. The adversary fills the
    // last instant of window k - 1 (prev = L, possible after an empty window), then waits until
    // the weight of prev is as small as an interval of length W still ending in window k allows:
    // at e = W - 2 the estimate admits cur = L - 1 (the weight 2 L / W > 0 still costs one).
    // Any interval of length W meets at most two windows, holds at most prev + (L - 1) <= 2L - 1,
    // so 2L - 1 is the exact worst case: with L = 100 that is 199, not 100.
    const L: u64 = 100;
    let k = 21 * 60 * SEC; // the start of window k (W = 60 s)
    let f = fixture(vec![("sw", sliding_window(L, MINUTE))], k - 1);
    let sw = f.limit("sw");
    let mut times = Vec::new();
    let first = burst(&sw, 2 * L);
    times.extend(std::iter::repeat_n(k - 1, first as usize));
    assert_eq!(first, L);
    f.clock.set(k + 60 * SEC - 2);
    let second = burst(&sw, 2 * L);
    times.extend(std::iter::repeat_n(k + 60 * SEC - 2, second as usize));
    assert_eq!(second, L - 1);
    let worst = max_in_any_interval(&times, 60 * SEC) as u64;
    assert_eq!(worst, 2 * L - 1);
    assert!(
        worst > L,
        "the counter is an approximation, not a bound of L"
    );

    // No adversary does better: bursts at random instants biased towards window ends, over many
    // windows (L = 10, W = 1 ms), never put more than 2L - 1 in any interval of length W, and
    // the best of them reach it.
    const SMALL_L: u64 = 10;
    let w = MS;
    let f = fixture(
        vec![("sw", sliding_window(SMALL_L, Duration::from_millis(1)))],
        BASE,
    );
    let sw = f.limit("sw");
    let mut rng = XorShift::new(2024);
    let mut times = Vec::new();
    let mut t = BASE;
    for _ in 0..20_000 {
        t += match rng.next_u64() % 4 {
            0 => rng.next_u64() % w,
            1 => 1 + rng.next_u64() % 8,
            2 => w - (t % w) - 1 - (rng.next_u64() % 3).min(w - (t % w) - 1),
            _ => rng.next_u64() % (3 * w),
        };
        f.clock.set(t);
        let n = burst(&sw, 1 + rng.next_u64() % (2 * SMALL_L));
        times.extend(std::iter::repeat_n(t, n as usize));
    }
    let worst = max_in_any_interval(&times, w) as u64;
    assert_eq!(
        worst,
        2 * SMALL_L - 1,
        "worst case over a random adversarial run"
    );
}

/// Feed identical arrivals to the counter and to the exact log; the admissions of each.
fn compare_with_log(arrivals: &[u64], limit: u64, window: Duration) -> (u64, u64) {
    let f = fixture(
        vec![
            ("sw", sliding_window(limit, window)),
            ("log", log(limit, window)),
        ],
        BASE,
    );
    let (sw, log) = (f.limit("sw"), f.limit("log"));
    // The clock at the last arrival: dated calls may not run ahead of it.
    f.clock.set(arrivals.iter().copied().max().unwrap_or(BASE));
    let mut admitted = (0, 0);
    for &t in arrivals {
        admitted.0 += sw.try_acquire_at(1, t).unwrap().is_allowed() as u64;
        admitted.1 += log.try_acquire_at(1, t).unwrap().is_allowed() as u64;
    }
    assert_eq!(sw.stats().allowed, admitted.0);
    assert_eq!(log.stats().allowed, admitted.1);
    admitted
}

#[test]
fn sliding_window_counter_tracks_the_exact_log_under_steady_and_poisson_load() {
    const L: u64 = 100;
    let window = Duration::from_secs(1);
    let windows = 300u64;
    // Poisson arrivals at 0.9x, 1.1x, 1.5x and 3x the limit, and evenly spaced (jittered)
    // arrivals at 1.2x: the counter's admissions stay within 2% of the exact log's.
    let mut cases = Vec::new();
    for (seed, load) in [(1u64, 0.9f64), (2, 1.1), (3, 1.5), (4, 3.0)] {
        let mut rng = XorShift::new(seed);
        let mean = SEC as f64 / (L as f64 * load);
        let mut t = BASE;
        let mut arrivals = Vec::new();
        while t < BASE + windows * SEC {
            t += rng.exp_ns(mean).max(1);
            arrivals.push(t);
        }
        cases.push((format!("poisson {load}x"), arrivals));
    }
    let mut rng = XorShift::new(5);
    let gap = SEC / (L * 12 / 10);
    let steady: Vec<u64> = (0..windows * L * 12 / 10)
        .map(|i| BASE + i * gap + rng.next_u64() % (gap / 2))
        .collect();
    cases.push(("steady 1.2x".to_string(), steady));
    for (name, arrivals) in cases {
        let (sw, log) = compare_with_log(&arrivals, L, window);
        let error = (sw as f64 - log as f64).abs() / log as f64;
        println!(
            "{name}: {} arrivals, counter {sw}, log {log}, error {:.3}%",
            arrivals.len(),
            error * 100.0
        );
        assert!(
            error <= 0.02,
            "{name}: counter {sw} vs log {log} ({:.2}%)",
            error * 100.0
        );
    }
}
