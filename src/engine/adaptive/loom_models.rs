//! loom models of the adaptive limit's protocols, run by plain `cargo test`: grants within the
//! limit (claim, fence, count, give back) and the pooled window update racing acquisitions and
//! releases, over the production [`gate`](super::gate) functions and the permit [`Table`].

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::gate::{self, Admit, Closed, Remeasure, Words};
use crate::algo::adaptive::{Outcome, Tuning, Window};
use crate::engine::permits::slot::Table;
use crate::owner::owner;
use crate::sync::loom_runner::model;

fn words(n: usize) -> Arc<Vec<AtomicU64>> {
    Arc::new((0..n).map(|_| AtomicU64::new(0)).collect())
}

fn tuning() -> Tuning {
    Tuning {
        min: 1.0,
        max: 3.0,
        initial: 1.0,
        window_ms: 1,
        smoothing: 0.5,
        tolerance: 1.0,
        headroom: 0.5,
        backoff: 0.5,
    }
}

/// Three processes, three entries, a limit of one: whatever the interleaving, never two
/// granted at once (an independent counter, raised after each grant and lowered before its
/// release, never passes the limit), and every entry is free at the end.
#[test]
fn grants_never_exceed_the_limit() {
    model("grants_never_exceed_the_limit", 2, || {
        let w = words(6);
        let active = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (1..=3u32)
            .map(|pid| {
                let (w, active) = (Arc::clone(&w), Arc::clone(&active));
                thread::spawn(move || {
                    let t = Table::new(&w, 3);
                    if let Admit::Granted(i, word) =
                        gate::admit(&t, pid as usize, owner(pid, 1), 1, || 1_000_000)
                    {
                        // SeqCst: one order of every grant's count, so the check is exact.
                        let before = active.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "two granted within a limit of one");
                        active.fetch_sub(1, Ordering::SeqCst);
                        assert!(t.release(i, word));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let t = Table::new(&w, 3);
        assert_eq!(gate::count_held(&t, usize::MAX), 0);
    });
}

/// Two processes each acquire within the limit the limit word grants, release with an ok
/// sample and close the window (their clocks 10 and 20 ms, the window 1 ms), while a third
/// reads the limit: every sample is used by exactly one closed window or still waits in the
/// accumulator (none lost, none used twice), at most one process closes each window, and the
/// limit stays within its range and within one update's bound of the limit it came from.
#[test]
fn pooled_update_races_acquires_and_releases() {
    pooled_update_at("pooled_update_races_acquires_and_releases", [10, 20]);
}

/// The same race inside a re-measure of the RTT (its sampled windows: `k mod 1000 >= 996`
/// with a window of 1 ms): grants within `min`, no sample lost or used twice, and every close
/// keeps the limit and sets the long RTT.
#[test]
fn pooled_update_races_in_a_remeasure() {
    pooled_update_at("pooled_update_races_in_a_remeasure", [996, 998]);
}

fn pooled_update_at(name: &'static str, clocks: [u64; 2]) {
    model(name, 2, move || {
        let table = words(4);
        let pooled = words(3);
        let handles: Vec<_> = [(1u32, clocks[0]), (2, clocks[1])]
            .into_iter()
            .map(|(pid, now_ms)| {
                let (table, pooled) = (Arc::clone(&table), Arc::clone(&pooled));
                thread::spawn(move || {
                    let t = tuning();
                    let entries = Table::new(&table, 2);
                    let w = Words {
                        acc: &pooled[0],
                        limit: &pooled[1],
                        rtt: &pooled[2],
                    };
                    let allowed = t.allowed(w.limit.load(Ordering::Acquire), now_ms) as usize;
                    let mut closed = None;
                    let granted = gate::admit(&entries, 0, owner(pid, 1), allowed, || 1);
                    if let Admit::Granted(i, word) = granted {
                        assert!(entries.release(i, word));
                        gate::record(w.acc, Outcome::Ok, 1000);
                        closed = gate::close_window(&w, &t, || now_ms, || 1);
                    }
                    (matches!(granted, Admit::Granted(..)), closed)
                })
            })
            .collect();
        let t = tuning();
        let limit = t.limit_of(pooled[1].load(Ordering::Acquire));
        assert!((t.min..=t.max).contains(&limit));
        let results: Vec<(bool, Option<Closed>)> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let recorded = results.iter().filter(|r| r.0).count() as u64;
        let closes: Vec<Closed> = results.iter().filter_map(|r| r.1).collect();
        let used: u64 = closes.iter().map(|c| c.taken.ok).sum();
        let waiting = Window::of(pooled[0].load(Ordering::Acquire)).ok;
        assert_eq!(
            used + waiting,
            recorded,
            "a sample lost or used twice: {closes:?}"
        );
        let entries = Table::new(&table, 2);
        assert_eq!(gate::count_held(&entries, usize::MAX), 0);
        for c in &closes {
            let (lo, hi) = t.step_bound(c.old);
            assert!(c.new >= lo && c.new <= hi, "{c:?}");
            if t.remeasuring(clocks[0]) {
                assert!(c.new == c.old, "a re-measure moved the limit: {c:?}");
                assert!(matches!(c.remeasure, Remeasure::Sampled { .. }), "{c:?}");
            }
        }
        // (A close may have taken no sample: the other's waits in the accumulator.)
        if t.remeasuring(clocks[0]) && closes.iter().any(|c| c.taken.ok > 0) {
            let rtt = crate::algo::adaptive::Rtt::of(pooled[2].load(Ordering::Acquire));
            assert_eq!(rtt.long_us, Some(1000.0), "the re-measure set the long RTT");
        }
        let final_limit = t.limit_of(pooled[1].load(Ordering::Acquire));
        assert!((t.min..=t.max).contains(&final_limit));
    });
}
