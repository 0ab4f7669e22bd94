//! Each algorithm against a simple reference model over random runs.

use super::*;

/// What a reference model decides: allowed, remaining, and (when it knows it) the retry-after.
type Reference = (bool, u64, Option<u64>);

/// Drive `name` and a reference model with the same pseudo-random arrivals (identical
/// timestamps, small and large gaps; times in multiples of 1024 ns, which the sliding log
/// stores exactly) and costs in `1..=max_cost`; every decision must agree.
fn agrees_with_reference(
    spec: shmlimit::Algorithm,
    max_cost: u64,
    steps: usize,
    seed: u64,
    mut model: impl FnMut(u64, u64) -> Reference,
) {
    let f = fixture(vec![("x", spec)], BASE);
    let x = f.limit("x");
    let mut rng = XorShift::new(seed);
    let mut t = BASE;
    for step in 0..steps {
        t += 1024
            * match rng.next_u64() % 4 {
                0 => 0,
                1 => rng.next_u64() % 64,
                2 => rng.next_u64() % 20_000,
                _ => rng.next_u64() % 400_000,
            };
        let cost = 1 + rng.next_u64() % max_cost;
        f.clock.set(t);
        let got = x.try_acquire(cost).unwrap();
        let (allowed, remaining, retry) = model(t, cost);
        let at = format!("step {step}, t = {t}, cost {cost}: {got:?}");
        assert_eq!(got.is_allowed(), allowed, "{at}");
        assert_eq!(got.remaining(), remaining, "{at}");
        if let Some(retry) = retry {
            assert_eq!(got.retry_after_ns(), retry, "{at}");
        }
    }
    // Both outcomes were exercised, many times.
    let stats = x.stats();
    assert!(
        stats.allowed > steps as u64 / 10 && stats.denied > steps as u64 / 10,
        "{stats:?}"
    );
}

#[test]
fn the_sliding_log_matches_an_exact_reference() {
    const L: u64 = 20;
    let w = SEC;
    let mut window = std::collections::VecDeque::new();
    agrees_with_reference(log(L, Duration::from_secs(1)), 5, 20_000, 11, |t, n| {
        while window.front().is_some_and(|&a| a + w <= t) {
            window.pop_front();
        }
        let held = window.len() as u64;
        if held + n <= L {
            window.extend(std::iter::repeat_n(t, n as usize));
            (true, L - held - n, Some(0))
        } else {
            // The oldest `held + n - L` admissions must expire first.
            let binding = window[(held + n - L - 1) as usize];
            (false, L - held, Some(binding + w - t))
        }
    });
}

#[test]
fn the_token_bucket_matches_a_continuous_reference() {
    // A bucket of B tokens kept as nanoseconds of credit, refilled continuously and capped.
    const CAP: u64 = 10;
    let emission = 70 * MS;
    let tau = CAP * emission;
    let (mut credit, mut last) = (tau, BASE);
    agrees_with_reference(
        bucket(CAP, 1, Duration::from_millis(70)),
        4,
        20_000,
        12,
        |t, n| {
            credit = (credit + (t - last)).min(tau);
            last = t;
            if credit >= n * emission {
                credit -= n * emission;
                (true, credit / emission, Some(0))
            } else {
                (false, credit / emission, Some(n * emission - credit))
            }
        },
    );
}

#[test]
fn the_fixed_window_matches_a_counting_reference() {
    const L: u64 = 15;
    let w = 100 * MS;
    let mut counts = std::collections::HashMap::new();
    agrees_with_reference(
        fixed(L, Duration::from_millis(100)),
        4,
        20_000,
        13,
        |t, n| {
            let count = counts.entry(t / w).or_insert(0u64);
            if *count + n <= L {
                *count += n;
                (true, L - *count, Some(0))
            } else {
                (false, L - *count, Some((t / w + 1) * w - t))
            }
        },
    );
}

#[test]
fn the_sliding_window_counter_matches_its_formula() {
    // Admit iff prev (W - e) + (cur + n) W <= L W, with prev and cur the counts of the previous
    // and the current fixed window and e the time elapsed in the current one.
    const L: u64 = 15;
    let w = 100 * MS;
    let mut counts = std::collections::HashMap::<u64, u64>::new();
    agrees_with_reference(
        sliding_window(L, Duration::from_millis(100)),
        4,
        20_000,
        14,
        |t, n| {
            let k = t / w;
            let e = t - k * w;
            let prev = counts.get(&(k - 1)).copied().unwrap_or(0) as u128;
            let cur = counts.get(&k).copied().unwrap_or(0);
            let (w128, cap) = (w as u128, L as u128 * w as u128);
            let weighted = prev * (w128 - e as u128) + cur as u128 * w128;
            let wanted = weighted + n as u128 * w128;
            if wanted <= cap {
                *counts.entry(k).or_insert(0) += n;
                (true, ((cap - wanted) / w128) as u64, Some(0))
            } else {
                (false, (cap.saturating_sub(weighted) / w128) as u64, None)
            }
        },
    );
}
