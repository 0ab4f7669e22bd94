//! loom models of every CAS algorithm, run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The algorithms are generic over [`AtomicWord`](crate::sync::AtomicWord), which
//! `loom::sync::atomic::AtomicU64` implements in test builds, so each model below runs the
//! production [`decide`] loop and [`SlidingLog::acquire`] unchanged while loom explores the
//! thread interleavings (and the stale reads the memory orderings allow), with a preemption bound
//! that keeps each model to seconds in a debug build.
//!
//! What the models check:
//!
//! * **Single-word algorithms** (token bucket, fixed window, sliding-window counter): every
//!   decision records the clock value it was dated by (the last `now()` its loop read). After the
//!   threads join, [`serialize`] searches for one sequential order of all decisions, each thread's
//!   in program order, in which replaying the pure step function from the initial word gives
//!   *exactly* every recorded decision (allowed, remaining, retry-after) and ends at the observed
//!   final word. No such order exists after a lost update (an admission whose CAS did not move the
//!   word), an admission computed from a word that was no longer current, or a peek that wrote.
//!   On the order found, each algorithm's bound is then checked against a reference written from
//!   its definition (burst plus refill, per-window count, weighted estimate).
//! * **Sliding log**: after the threads join, the ring is checked claim by claim: the head is at
//!   the number of claims made, each entry carries the lap tag of the claim that lives in it, the
//!   recorded dates never decrease in claim order and are the running maximum of the admitted
//!   clock reads, the entries not freed are exactly the admissions, and no interval of length `W`
//!   holds more than `L` of them.
//!
//! Every model was checked against mutations of the code it covers (the CAS of [`decide`] made a
//! blind store, a peek that writes, a stale window read that resets the count, the log's entry
//! CAS made a blind store, dating without the newest entry, expiry one unit early, rollback
//! without the freed mark, no help for a lagging head, every ordering in the claim `Relaxed`):
//! each mutation fails at least one model. The `#[ignore]`d model reproduces a known limitation
//! of the log (a rolled-back partial claim is unusable until the entries ahead of it expire);
//! run it with `cargo test --lib loom -- --ignored`.

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::fixed_window::{self, FixedWindow};
use super::gcra::Gcra;
use super::sliding_log::{SlidingLog, TIME_SHIFT};
use super::sliding_window::{self, SlidingWindow};
use super::{decide, Decision, Step};
use crate::sync::loom_runner::model;

// ---------------------------------------------------------------------------------------------
// Single-word algorithms
// ---------------------------------------------------------------------------------------------

/// One decision as a thread saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Event {
    /// The clock value the returned decision was computed with.
    now: u64,
    n: u64,
    commit: bool,
    decision: Decision,
}

/// An event placed in a sequential order, with the word before and after it.
#[derive(Debug, Clone, Copy)]
struct Replayed {
    event: Event,
    before: u64,
    after: u64,
}

/// A pure step function `(now, word, n) -> Step`, as the algorithms provide.
type StepFn<'a> = dyn Fn(u64, u64, u64) -> Step + 'a;

/// One `decide` on `word` with cost `n`, recording the clock value the decision was dated by.
fn run(
    word: &AtomicU64,
    mut clock: impl FnMut() -> u64,
    n: u64,
    commit: bool,
    step: &StepFn<'_>,
) -> Event {
    let mut used = None;
    let decision = decide(
        word,
        || {
            let t = clock();
            used = Some(t);
            t
        },
        commit,
        |t, w| step(t, w, n),
    );
    Event {
        now: used.expect("decide reads the clock at least once"),
        n,
        commit,
        decision,
    }
}

/// A sequential order of all `threads`' events, each thread's in program order, in which
/// replaying `step` from `initial` reproduces every recorded decision and ends at `last`.
fn serialize(
    threads: &[Vec<Event>],
    initial: u64,
    last: u64,
    step: &StepFn<'_>,
) -> Option<Vec<Replayed>> {
    fn search(
        threads: &[Vec<Event>],
        next: &mut [usize],
        word: u64,
        last: u64,
        step: &StepFn<'_>,
        order: &mut Vec<Replayed>,
    ) -> bool {
        if next.iter().zip(threads).all(|(&i, t)| i == t.len()) {
            return word == last;
        }
        for t in 0..threads.len() {
            let Some(&event) = threads[t].get(next[t]) else {
                continue;
            };
            let (decision, after) = match step(event.now, word, event.n) {
                Step::Admit { new, decision } => (decision, if event.commit { new } else { word }),
                Step::Deny(decision) => (decision, word),
            };
            if decision != event.decision {
                continue;
            }
            next[t] += 1;
            order.push(Replayed {
                event,
                before: word,
                after,
            });
            if search(threads, next, after, last, step, order) {
                return true;
            }
            order.pop();
            next[t] -= 1;
        }
        false
    }
    let mut next = vec![0; threads.len()];
    let mut order = Vec::new();
    search(threads, &mut next, initial, last, step, &mut order).then_some(order)
}

/// Join every thread and collect its events.
fn join_all(handles: Vec<thread::JoinHandle<Vec<Event>>>) -> Vec<Vec<Event>> {
    handles
        .into_iter()
        .map(|h| h.join().expect("model thread panicked"))
        .collect()
}

/// Serialize or fail with everything needed to read the execution.
fn must_serialize(
    threads: &[Vec<Event>],
    initial: u64,
    last: u64,
    step: &StepFn<'_>,
) -> Vec<Replayed> {
    serialize(threads, initial, last, step).unwrap_or_else(|| {
        panic!(
            "no sequential order explains this execution: events {threads:#?}, \
             initial word {initial:#x}, final word {last:#x}"
        )
    })
}

/// Admitted events among `threads`, committed ones only.
fn admitted(threads: &[Vec<Event>]) -> Vec<Event> {
    threads
        .iter()
        .flatten()
        .filter(|e| e.commit && e.decision.is_allowed())
        .copied()
        .collect()
}

/// GCRA bound on the admissions: for every interval `[a, b]` between two admission dates, the
/// cost admitted with dates inside is at most `B + floor((b - a) / T)`.
fn assert_gcra_bound(g: &Gcra, admitted: &[Event]) {
    let burst = g.tolerance_ns / g.emission_ns;
    for a in admitted {
        for b in admitted.iter().filter(|b| b.now >= a.now) {
            let inside: u64 = admitted
                .iter()
                .filter(|e| e.now >= a.now && e.now <= b.now)
                .map(|e| e.n)
                .sum();
            let bound = burst + (b.now - a.now) / g.emission_ns;
            assert!(
                inside <= bound,
                "{inside} admitted in [{}, {}], bound {bound}: {admitted:?}",
                a.now,
                b.now
            );
        }
    }
}

/// Every admission moved the TAT by exactly its cost: from a fresh state the final TAT lies
/// between `earliest + k T` and `latest + k T`, `k` the admitted cost.
fn assert_tat_accounts_for_admissions(g: &Gcra, admitted: &[Event], tat: u64) {
    let k: u64 = admitted.iter().map(|e| e.n).sum();
    if k == 0 {
        assert_eq!(tat, 0, "nothing admitted, yet the TAT moved");
        return;
    }
    let earliest = admitted.iter().map(|e| e.now).min().unwrap_or(0);
    let latest = admitted.iter().map(|e| e.now).max().unwrap_or(0);
    assert!(
        tat >= earliest + k * g.emission_ns && tat <= latest + k * g.emission_ns,
        "final TAT {tat} does not account for {k} admitted units: {admitted:?}"
    );
}

#[test]
fn loom_gcra_three_at_one_instant_admit_exactly_the_burst() {
    // B = 2, T = 1 us, three single-unit requests at one instant: exactly two pass.
    let g = Gcra {
        emission_ns: 1_000,
        tolerance_ns: 2 * 1_000,
        capacity: 2,
    };
    let t = 1_000_000;
    model("gcra, three at one instant", 3, move || {
        let word = Arc::new(AtomicU64::new(0));
        let handles = (0..3)
            .map(|_| {
                let word = Arc::clone(&word);
                thread::spawn(move || vec![run(&word, || t, 1, true, &|t, w, n| g.step(t, w, n))])
            })
            .collect();
        let threads = join_all(handles);
        let tat = word.load(Ordering::SeqCst);
        must_serialize(&threads, 0, tat, &|t, w, n| g.step(t, w, n));
        let ok = admitted(&threads);
        assert_eq!(
            ok.len(),
            2,
            "B + floor(0 / T) = 2 must pass, no more, no fewer"
        );
        assert_eq!(
            tat,
            t + 2 * g.emission_ns,
            "each admission moves the TAT once"
        );
        assert_gcra_bound(&g, &ok);
    });
}

#[test]
fn loom_gcra_spread_times_and_stale_reader() {
    // B = 1, T = 1 us. Two processes decide twice each at their own times; a third reads a clock
    // three intervals behind everyone.
    let g = Gcra {
        emission_ns: 1_000,
        tolerance_ns: 1_000,
        capacity: 1,
    };
    let t = 1_000_000;
    let plans = [
        vec![t, t + 1_000],
        vec![t + 500, t + 2_000],
        vec![t - 3_000],
    ];
    model("gcra, spread times + stale reader", 2, move || {
        let word = Arc::new(AtomicU64::new(0));
        let handles = plans
            .iter()
            .map(|plan| {
                let (word, plan) = (Arc::clone(&word), plan.clone());
                thread::spawn(move || {
                    plan.iter()
                        .map(|&at| run(&word, || at, 1, true, &|t, w, n| g.step(t, w, n)))
                        .collect()
                })
            })
            .collect();
        let threads = join_all(handles);
        let tat = word.load(Ordering::SeqCst);
        let order = must_serialize(&threads, 0, tat, &|t, w, n| g.step(t, w, n));
        // The TAT never moves backwards, whatever clock a process read.
        assert!(order.iter().all(|r| r.after >= r.before), "{order:?}");
        let ok = admitted(&threads);
        assert_gcra_bound(&g, &ok);
        assert_tat_accounts_for_admissions(&g, &ok, tat);
        // Over [t, t + 2 us] the sequential bound is 1 + 2 = 3; demand is 4 there.
        assert!(ok.iter().filter(|e| e.now >= t).count() <= 3);
    });
}

#[test]
fn loom_gcra_cost_two_against_cost_one() {
    // B = 2 at one instant: a cost-2 and a cost-1 request cannot both pass, and one always does.
    let g = Gcra {
        emission_ns: 1_000,
        tolerance_ns: 2 * 1_000,
        capacity: 2,
    };
    let t = 5_000_000;
    model("gcra, cost 2 vs cost 1", 3, move || {
        let word = Arc::new(AtomicU64::new(0));
        let handles = [2u64, 1]
            .into_iter()
            .map(|n| {
                let word = Arc::clone(&word);
                thread::spawn(move || vec![run(&word, || t, n, true, &|t, w, n| g.step(t, w, n))])
            })
            .collect();
        let threads = join_all(handles);
        let tat = word.load(Ordering::SeqCst);
        must_serialize(&threads, 0, tat, &|t, w, n| g.step(t, w, n));
        let ok = admitted(&threads);
        assert_eq!(ok.len(), 1, "{threads:?}");
        assert_eq!(tat, t + ok[0].n * g.emission_ns);
    });
}

/// Replay `order` against a reference fixed window written from its definition: an admission
/// counts in the newest window seen so far (its own, or a newer stored one for a stale read),
/// and a window never holds more than `L`. Returns `(window, count)` at the end.
fn reference_fixed_window(fw: &FixedWindow, order: &[Replayed]) -> (u64, u64) {
    let (mut window, mut count) = (0u64, 0u64);
    for r in order.iter().filter(|r| r.event.commit) {
        let own = r.event.now / fw.window_ns;
        let at = own.max(window);
        let before = if at == window { count } else { 0 };
        if r.event.decision.is_allowed() {
            assert!(
                before + r.event.n <= fw.limit,
                "window {at} would hold {} > {}: {order:#?}",
                before + r.event.n,
                fw.limit
            );
            (window, count) = (at, before + r.event.n);
            assert_eq!(r.after, fixed_window::pack(window, count), "{order:#?}");
        } else {
            assert!(
                before + r.event.n > fw.limit,
                "denied with room: {order:#?}"
            );
        }
    }
    (window, count)
}

#[test]
fn loom_fixed_window_two_processes_cross_a_boundary() {
    // L = 2 per 1 us window. The clock starts at the last instant of window 1; process A decides,
    // moves the clock to the first instant of window 2 and decides again; process B decides twice
    // on the same clock; a third process has a stale clock inside window 1.
    let fw = FixedWindow {
        limit: 2,
        window_ns: 1_000,
        phase_ns: 0,
    };
    model("fixed window, boundary crossing", 2, move || {
        let word = Arc::new(AtomicU64::new(0));
        let clock = Arc::new(AtomicU64::new(1_999));
        let step = move |t, w, n| fw.step(t, w, n);
        let read = |clock: &AtomicU64| {
            // Acquire: pairs with the Release store that moved the clock.
            clock.load(Ordering::Acquire)
        };
        let a = {
            let (word, clock) = (Arc::clone(&word), Arc::clone(&clock));
            thread::spawn(move || {
                let first = run(&word, || read(&clock), 1, true, &step);
                // Release: a reader that sees the new time sees the decision before it.
                clock.store(2_000, Ordering::Release);
                vec![first, run(&word, || read(&clock), 1, true, &step)]
            })
        };
        let b = {
            let (word, clock) = (Arc::clone(&word), Arc::clone(&clock));
            thread::spawn(move || {
                (0..2)
                    .map(|_| run(&word, || read(&clock), 1, true, &step))
                    .collect()
            })
        };
        let stale = {
            let word = Arc::clone(&word);
            thread::spawn(move || vec![run(&word, || 1_500, 1, true, &step)])
        };
        let threads = join_all(vec![a, b, stale]);
        let last = word.load(Ordering::SeqCst);
        let order = must_serialize(&threads, 0, last, &step);
        let (window, count) = reference_fixed_window(&fw, &order);
        // The count in the final word is exactly the admissions dated in the stored window.
        assert_eq!(fixed_window::unpack(last), (window as u32, count));
        assert_eq!(
            threads[0][1].now, 2_000,
            "A's own clock move is visible to A"
        );
        // Independently of the order found: each window admits at most L from clock readers,
        // and the stale reader's admission counts in one of the two windows.
        let ok = admitted(&threads);
        for w in [1, 2] {
            let readers = ok.iter().filter(|e| e.now != 1_500 && e.now / 1_000 == w);
            assert!(
                readers.count() as u64 <= fw.limit,
                "window {w}: {threads:?}"
            );
        }
        assert!(ok.len() as u64 <= 2 * fw.limit);
        // A's second decision is in window 2; it is denied only if window 2 is full.
        if threads[0][1].decision.is_denied() {
            assert_eq!(fixed_window::unpack(last), (2, fw.limit));
        }
    });
}

/// Replay `order` against a reference weighted sliding-window counter written from its
/// definition and check, at every admission, `prev (W - e) + (cur + n) W <= L W`.
fn reference_sliding_window(sw: &SlidingWindow, order: &[Replayed]) -> (u64, u64, u64) {
    let (mut window, mut prev, mut cur) = (0u64, 0u64, 0u64);
    let w = sw.window_ns;
    for r in order.iter().filter(|r| r.event.commit) {
        let now = r.event.now;
        let at = (now / w).max(window);
        let (p, c) = match at - window {
            0 => (prev, cur),
            1 => (cur, 0),
            _ => (0, 0),
        };
        // A stale read dates the decision at the start of the newer stored window.
        let elapsed = now.saturating_sub(at * w);
        let estimate = p * (w - elapsed) + (c + r.event.n) * w;
        if r.event.decision.is_allowed() {
            assert!(
                estimate <= sw.limit * w,
                "estimate {estimate} > {} at {now}: {order:#?}",
                sw.limit * w
            );
            (window, prev, cur) = (at, p, c + r.event.n);
            assert_eq!(
                r.after,
                sliding_window::pack(window, prev, cur),
                "{order:#?}"
            );
        } else {
            assert!(estimate > sw.limit * w, "denied with room: {order:#?}");
        }
    }
    (window, prev, cur)
}

#[test]
fn loom_sliding_window_two_processes_cross_a_boundary() {
    // L = 2 per 1 us. The clock starts 100 ns before the boundary; A decides, moves the clock to
    // the middle of the next window (the previous count then weighs half) and decides again; B
    // decides twice on the same clock; a stale process reads a time in the first window.
    let sw = SlidingWindow {
        limit: 2,
        window_ns: 1_000,
        phase_ns: 0,
    };
    model("sliding window, boundary crossing", 2, move || {
        let word = Arc::new(AtomicU64::new(0));
        let clock = Arc::new(AtomicU64::new(1_900));
        let step = move |t, w, n| sw.step(t, w, n);
        let read = |clock: &AtomicU64| {
            // Acquire: pairs with the Release store that moved the clock.
            clock.load(Ordering::Acquire)
        };
        let a = {
            let (word, clock) = (Arc::clone(&word), Arc::clone(&clock));
            thread::spawn(move || {
                let first = run(&word, || read(&clock), 1, true, &step);
                // Release: a reader that sees the new time sees the decision before it.
                clock.store(2_500, Ordering::Release);
                vec![first, run(&word, || read(&clock), 1, true, &step)]
            })
        };
        let b = {
            let (word, clock) = (Arc::clone(&word), Arc::clone(&clock));
            thread::spawn(move || {
                (0..2)
                    .map(|_| run(&word, || read(&clock), 1, true, &step))
                    .collect()
            })
        };
        let stale = {
            let word = Arc::clone(&word);
            thread::spawn(move || vec![run(&word, || 1_600, 1, true, &step)])
        };
        let threads = join_all(vec![a, b, stale]);
        let last = word.load(Ordering::SeqCst);
        let order = must_serialize(&threads, 0, last, &step);
        let (window, prev, cur) = reference_sliding_window(&sw, &order);
        assert_eq!(sliding_window::unpack(last), (window, prev, cur));
        // Independently of the order found: window 1 admits at most L, and A's second decision
        // (at 2.5 us, where the previous count weighs half) is denied only if the estimate is full.
        let ok = admitted(&threads);
        assert!(ok.iter().filter(|e| e.now < 2_000).count() as u64 <= sw.limit);
        assert_eq!(
            threads[0][1].now, 2_500,
            "A's own clock move is visible to A"
        );
        if threads[0][1].decision.is_denied() {
            let (_, prev, cur) = sliding_window::unpack(last);
            assert!(
                prev * 500 + (cur + 1) * 1_000 > sw.limit * 1_000,
                "{threads:?}"
            );
        }
    });
}

/// Model: a committer and a peeker on one word: every peek is explained by the committed
/// history and the final word is what the commit alone produces.
fn peek_beside_a_commit<S>(name: &str, step: S)
where
    S: Fn(u64, u64, u64) -> Step + Copy + Send + Sync + 'static,
{
    model(name, 3, move || {
        let word = Arc::new(AtomicU64::new(0));
        let committer = {
            let word = Arc::clone(&word);
            thread::spawn(move || vec![run(&word, || 10_000, 1, true, &step)])
        };
        let peeker = {
            let word = Arc::clone(&word);
            thread::spawn(move || {
                vec![
                    run(&word, || 10_000, 1, false, &step),
                    run(&word, || 10_500, 1, false, &step),
                ]
            })
        };
        let threads = join_all(vec![committer, peeker]);
        let last = word.load(Ordering::SeqCst);
        must_serialize(&threads, 0, last, &step);
        let Step::Admit { new, .. } = step(10_000, 0, 1) else {
            panic!("a fresh state admits one unit");
        };
        assert_eq!(last, new, "the word is the committer's alone");
        assert!(threads[0][0].decision.is_allowed());
    });
}

#[test]
fn loom_peek_never_writes_a_word() {
    let g = Gcra {
        emission_ns: 1_000,
        tolerance_ns: 1_000,
        capacity: 1,
    };
    let fw = FixedWindow {
        limit: 1,
        window_ns: 1_000,
        phase_ns: 0,
    };
    let sw = SlidingWindow {
        limit: 1,
        window_ns: 1_000,
        phase_ns: 0,
    };
    peek_beside_a_commit("peek, gcra", move |t, w, n| g.step(t, w, n));
    peek_beside_a_commit("peek, fixed window", move |t, w, n| fw.step(t, w, n));
    peek_beside_a_commit("peek, sliding window", move |t, w, n| sw.step(t, w, n));
    // Peeks alone leave the word as it was.
    model("peek only", 3, move || {
        let word = Arc::new(AtomicU64::new(0));
        let handles = [10_000u64, 20_000]
            .into_iter()
            .map(|at| {
                let word = Arc::clone(&word);
                thread::spawn(move || {
                    vec![
                        run(&word, || at, 1, false, &|t, w, n| g.step(t, w, n)),
                        run(&word, || at, 1, false, &|t, w, n| fw.step(t, w, n)),
                    ]
                })
            })
            .collect();
        let threads = join_all(handles);
        assert_eq!(word.load(Ordering::SeqCst), 0);
        assert!(threads.iter().flatten().all(|e| e.decision.is_allowed()));
    });
}

// ---------------------------------------------------------------------------------------------
// Sliding log
// ---------------------------------------------------------------------------------------------

// The entry layout, as documented in `sliding_log`: lap tag (15 bits) | freed | time / 1024 (48).
const LAP_SHIFT: u32 = 49;
const LAP_MASK: u64 = 0x7FFF;
const FREED: u64 = 1 << 48;
const TIME_MASK: u64 = (1 << 48) - 1;
/// The unit entries record time in.
const UNIT: u64 = 1 << TIME_SHIFT;
/// The window of every log model: 64 units, so times on the unit grid expire exactly.
const W: u64 = 64 * UNIT;

fn entry_time(entry: u64) -> u64 {
    (entry & TIME_MASK) << TIME_SHIFT
}

fn entry_tag(entry: u64) -> u64 {
    entry >> LAP_SHIFT
}

fn is_freed(entry: u64) -> bool {
    entry & FREED != 0
}

/// The entry claim `claim` writes at `time` (on the unit grid).
fn entry_of(claim: u64, limit: u64, time: u64) -> u64 {
    (((claim / limit + 1) & LAP_MASK) << LAP_SHIFT) | time.div_ceil(UNIT)
}

/// The head after `claims` claims.
fn head_of(claims: u64, limit: u64) -> u64 {
    ((claims / limit) << 32) | (claims % limit)
}

/// A sliding log's head and ring, as they sit in one slot.
struct Ring {
    head: AtomicU64,
    entries: Vec<AtomicU64>,
}

impl Ring {
    /// A ring holding `head` and `entries` (all zero: a fresh log).
    fn new(head: u64, entries: &[u64]) -> Arc<Ring> {
        Arc::new(Ring {
            head: AtomicU64::new(head),
            entries: entries.iter().map(|&e| AtomicU64::new(e)).collect(),
        })
    }

    fn acquire(&self, log: &SlidingLog, now: u64, n: u64, commit: bool) -> Decision {
        log.acquire(&self.head, &self.entries, || now, n, commit)
            .expect("a consistent ring never faults")
    }

    /// Head and entries, read after every model thread has joined.
    fn snapshot(&self) -> (u64, Vec<u64>) {
        (
            self.head.load(Ordering::SeqCst),
            self.entries
                .iter()
                .map(|e| e.load(Ordering::SeqCst))
                .collect(),
        )
    }
}

/// A log run: what the ring held before the threads ran and what they did.
struct LogRun {
    log: SlidingLog,
    /// The number of the first claim in `history` (0 unless the model starts mid-history).
    first_claim: u64,
    /// Entries of the claims made before the model threads started, numbered from
    /// `first_claim`, as written.
    history: Vec<u64>,
    /// Clock reads of the admitted requests, one per admitted unit.
    admitted_at: Vec<u64>,
    /// Units claimed by requests that were denied (partial claims of a cost `n > 1`).
    rolled_back: u64,
}

impl LogRun {
    /// Check the final ring against the history and the admissions; returns the number of claims.
    fn check(&self, head: u64, entries: &[u64]) -> u64 {
        let l = self.log.limit;
        let made = self.admitted_at.len() as u64 + self.rolled_back;
        let before = self.first_claim + self.history.len() as u64;
        let claims = before + made;
        assert_eq!(
            head,
            head_of(claims, l),
            "head after {claims} claims: {entries:x?}"
        );
        // Every claim made by the threads is still in the ring (models make at most L), tagged
        // with the lap it was made in; entries not reached keep their history.
        assert!(made <= l, "model too large to check");
        let mut all = self.history.clone();
        for c in before..claims {
            let e = entries[(c % l) as usize];
            assert_eq!(entry_tag(e), (c / l + 1) & LAP_MASK, "claim {c}: {e:#x}");
            all.push(e);
        }
        for c in claims.saturating_sub(l).max(self.first_claim)..before {
            let e = entries[(c % l) as usize];
            assert_eq!(
                e,
                self.history[(c - self.first_claim) as usize],
                "claim {c}"
            );
        }
        // Dates never decrease in claim order, and the new admissions' dates are the running
        // maximum of their clock reads in some order (models with partial claims use one instant).
        let new: Vec<u64> = all[self.history.len()..]
            .iter()
            .map(|&e| entry_time(e))
            .collect();
        assert!(
            all.windows(2).all(|p| entry_time(p[0]) <= entry_time(p[1])),
            "{all:x?}"
        );
        let newest_before = self.history.last().map_or(0, |&e| entry_time(e));
        let live_new: Vec<u64> = all[self.history.len()..]
            .iter()
            .filter(|&&e| !is_freed(e))
            .map(|&e| entry_time(e))
            .collect();
        assert_eq!(
            live_new.len(),
            self.admitted_at.len(),
            "entries not freed are exactly the admissions: {all:x?}"
        );
        assert!(
            running_max_of_some_order(&self.admitted_at, newest_before, &live_new),
            "recorded dates {new:?} are not the admissions {:?} in any order",
            self.admitted_at
        );
        // No interval of length W holds more than L admissions (freed entries are not
        // admissions). Checked at the end of every interval that ends at an admission.
        let live: Vec<u64> = all
            .iter()
            .filter(|&&e| !is_freed(e))
            .map(|&e| entry_time(e))
            .collect();
        for &end in &live {
            let inside = live.iter().filter(|&&t| t <= end && t + W > end).count() as u64;
            assert!(inside <= l, "{inside} admissions in (.., {end}]: {all:x?}");
        }
        claims
    }
}

/// Whether `dates` is `max(prior, reads[p0]), max(.., reads[p1]), ..` rounded up to the unit for
/// some order `p` of `reads`.
fn running_max_of_some_order(reads: &[u64], prior: u64, dates: &[u64]) -> bool {
    if reads.is_empty() {
        return dates.is_empty();
    }
    let Some((&first, rest)) = dates.split_first() else {
        return false;
    };
    (0..reads.len()).any(|i| {
        let date = prior.max(reads[i]).div_ceil(UNIT) * UNIT;
        let mut others = reads.to_vec();
        others.remove(i);
        date == first && running_max_of_some_order(&others, date, rest)
    })
}

/// Spawn one thread per request time; each makes one request of cost `n` and returns its time
/// and decision.
fn spawn_requests(
    ring: &Arc<Ring>,
    log: SlidingLog,
    times: &[u64],
    n: u64,
) -> Vec<thread::JoinHandle<(u64, Decision)>> {
    times
        .iter()
        .map(|&at| {
            let ring = Arc::clone(ring);
            thread::spawn(move || (at, ring.acquire(&log, at, n, true)))
        })
        .collect()
}

fn join_requests(handles: Vec<thread::JoinHandle<(u64, Decision)>>) -> Vec<(u64, Decision)> {
    handles
        .into_iter()
        .map(|h| h.join().expect("model thread panicked"))
        .collect()
}

/// Model: threads making cost-1 requests at the times of their `plans` (one after the other)
/// on a fresh log of limit `limit`; all times lie within one window.
fn requests_on_fresh_log(name: &str, limit: u64, plans: Vec<Vec<u64>>, preemptions: usize) {
    let log = SlidingLog {
        limit,
        window_ns: W,
    };
    let requests = plans.iter().map(Vec::len).sum::<usize>() as u64;
    model(name, preemptions, move || {
        let ring = Ring::new(0, &vec![0; limit as usize]);
        let handles: Vec<_> = plans
            .iter()
            .map(|plan| {
                let (ring, plan) = (Arc::clone(&ring), plan.clone());
                thread::spawn(move || {
                    plan.into_iter()
                        .map(|at| (at, ring.acquire(&log, at, 1, true)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<(u64, Decision)> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("model thread panicked"))
            .collect();
        let admitted_at: Vec<u64> = results
            .iter()
            .filter(|(_, d)| d.is_allowed())
            .map(|&(at, _)| at)
            .collect();
        // All times lie within one window: exactly min(L, requests) pass, whatever the
        // interleaving.
        assert_eq!(admitted_at.len() as u64, limit.min(requests), "{results:?}");
        let (head, entries) = ring.snapshot();
        LogRun {
            log,
            first_claim: 0,
            history: Vec::new(),
            admitted_at,
            rolled_back: 0,
        }
        .check(head, &entries);
        for (at, d) in results.iter().filter(|(_, d)| d.is_denied()) {
            // A denial waits exactly until some recorded admission leaves the window.
            assert!(
                entries
                    .iter()
                    .any(|&e| entry_time(e) + W - at == d.retry_after_ns()),
                "{d:?} at {at}: {entries:x?}"
            );
        }
    });
}

#[test]
fn loom_sliding_log_limit_one_three_at_one_instant() {
    let t = 1_000 * UNIT;
    let plans = vec![vec![t], vec![t], vec![t]];
    requests_on_fresh_log("sliding log, L=1, 3 threads, one instant", 1, plans, 1);
    // Two threads, three requests, deeper.
    let plans = vec![vec![t, t], vec![t]];
    requests_on_fresh_log("sliding log, L=1, 2 threads, one instant", 1, plans, 3);
}

#[test]
fn loom_sliding_log_limit_two_three_at_one_instant() {
    // Three threads, one preemption: enough for a claimer to be switched out between its entry
    // CAS and its head CAS while the others run (the head-lag help path).
    let t = 1_000 * UNIT;
    let plans = vec![vec![t], vec![t], vec![t]];
    requests_on_fresh_log("sliding log, L=2, 3 threads, one instant", 2, plans, 1);
}

#[test]
fn loom_sliding_log_limit_two_three_at_distinct_times() {
    // Distinct times inside one window, one of them off the unit grid: the ring must hold the
    // running maximum of the admitted reads in claim order.
    let t = 1_000 * UNIT;
    let plans = vec![vec![t + 3 * UNIT], vec![t], vec![t + UNIT + 17]];
    requests_on_fresh_log("sliding log, L=2, 3 threads, distinct times", 2, plans, 1);
}

#[test]
fn loom_sliding_log_limit_two_two_threads_deeper() {
    // Two threads, three requests, a deeper preemption bound: one thread asks twice (early,
    // then late), the other once in between.
    let t = 1_000 * UNIT;
    let plans = vec![vec![t, t + 2 * UNIT + 5], vec![t + UNIT]];
    requests_on_fresh_log("sliding log, L=2, 2 threads, distinct times", 2, plans, 3);
}

/// Fails today: a zero-filled ring reads as `L` admissions dated 0, so a fresh log denies every
/// request until the clock passes `W`. `CLOCK_MONOTONIC` starts near zero at boot, so on a host
/// (or in a time namespace) up for less than `W` a fresh log admits nothing: with a daily window,
/// nothing for the first day of uptime.
#[test]
fn loom_sliding_log_fresh_ring_admits_before_the_first_window_ends() {
    let plans = vec![vec![5 * UNIT], vec![5 * UNIT]];
    requests_on_fresh_log("sliding log, fresh ring before W", 2, plans, 1);
}

#[test]
fn loom_sliding_log_head_left_behind_by_a_killed_process() {
    // A process committed claim 0 and was killed before advancing the head: the next deciders
    // must help the head on and admit exactly the one unit left.
    let log = SlidingLog {
        limit: 2,
        window_ns: W,
    };
    let t = 1_000 * UNIT;
    model("sliding log, head left behind", 3, move || {
        let claimed = entry_of(0, 2, t);
        let ring = Ring::new(head_of(0, 2), &[claimed, 0]);
        let results = join_requests(spawn_requests(&ring, log, &[t, t], 1));
        let admitted_at: Vec<u64> = results
            .iter()
            .filter(|(_, d)| d.is_allowed())
            .map(|&(at, _)| at)
            .collect();
        assert_eq!(admitted_at.len(), 1, "{results:?}");
        let (head, entries) = ring.snapshot();
        LogRun {
            log,
            first_claim: 0,
            history: vec![claimed],
            admitted_at,
            rolled_back: 0,
        }
        .check(head, &entries);
    });
}

/// Model: a full log of limit 2 whose claims `first..first + 2` were made at `t0`; requests at
/// `t0 + W` (both entries expired) and one read 1 unit earlier (not expired unless dated by a
/// newer entry). Exactly two pass.
fn expiry_model(name: &str, first: u64) {
    let log = SlidingLog {
        limit: 2,
        window_ns: W,
    };
    let t0 = 1_000 * UNIT;
    model(name, 2, move || {
        let history = vec![entry_of(first, 2, t0), entry_of(first + 1, 2, t0)];
        let mut slots = [0; 2];
        for (k, &e) in history.iter().enumerate() {
            slots[((first + k as u64) % 2) as usize] = e;
        }
        let ring = Ring::new(head_of(first + 2, 2), &slots);
        let times = [t0 + W, t0 + W, t0 + W - UNIT];
        let results = join_requests(spawn_requests(&ring, log, &times, 1));
        let admitted_at: Vec<u64> = results
            .iter()
            .filter(|(_, d)| d.is_allowed())
            .map(|&(at, _)| at)
            .collect();
        // The early reader alone finds both entries live; dated after an entry at t0 + W it
        // finds the other expired. Either way the two expired entries are reused, no more.
        assert_eq!(admitted_at.len(), 2, "{results:?}");
        let (head, entries) = ring.snapshot();
        LogRun {
            log,
            first_claim: first,
            history,
            admitted_at,
            rolled_back: 0,
        }
        .check(head, &entries);
        assert!(
            entries.iter().all(|&e| entry_time(e) == t0 + W),
            "{entries:x?}"
        );
    });
}

#[test]
fn loom_sliding_log_expired_entries_are_reused() {
    expiry_model("sliding log, expiry and reuse", 0);
}

#[test]
fn loom_sliding_log_lap_tag_wraps() {
    // The history is tagged with the last 15-bit lap: the new claims are tagged 0 while the
    // head's 32-bit lap goes on past 2^15 - 1.
    expiry_model("sliding log, lap tag wrap", (LAP_MASK - 1) * 2);
}

#[test]
fn loom_sliding_log_cost_two_rolls_back() {
    // L = 3, two requests of cost 2 at one instant: at most one gets both units, the loser's
    // partial claim is marked freed, and never more than L entries are live.
    let log = SlidingLog {
        limit: 3,
        window_ns: W,
    };
    let t = 1_000 * UNIT;
    model("sliding log, cost 2 rollback", 3, move || {
        let ring = Ring::new(0, &[0; 3]);
        let results = join_requests(spawn_requests(&ring, log, &[t, t], 2));
        let winners = results.iter().filter(|(_, d)| d.is_allowed()).count();
        // Three entries and two requests of two: exactly one wins (both pass the pre-check and
        // race, or the second sees the first's claims and stops at the pre-check).
        assert_eq!(winners, 1, "{results:?}");
        let (head, entries) = ring.snapshot();
        let claimed = (head & 0xFFFF_FFFF) + (head >> 32) * 3;
        let rolled_back = claimed - 2;
        assert!(rolled_back <= 1, "{entries:x?}");
        assert_eq!(
            entries.iter().filter(|&&e| is_freed(e)).count() as u64,
            rolled_back,
            "the loser's claims are freed: {entries:x?}"
        );
        let claims = LogRun {
            log,
            first_claim: 0,
            history: Vec::new(),
            admitted_at: vec![t, t],
            rolled_back,
        }
        .check(head, &entries);
        // Afterwards, cost-1 requests at the same instant take the free entries from the head on:
        // the run of free entries starting at the head, never more than L minus the live ones.
        let after = drain(&ring, &log, t);
        assert_eq!(after, free_run_at_head(&entries, claims, t), "{entries:x?}");
        assert!(after + 2 <= 3);
    });
}

/// Cost-1 requests at `t` admitted one after the other until the first denial.
fn drain(ring: &Ring, log: &SlidingLog, t: u64) -> usize {
    (0..log.limit)
        .take_while(|_| ring.acquire(log, t, 1, true).is_allowed())
        .count()
}

/// The entries free at `t` from the head on, in ring order, up to the first live one.
fn free_run_at_head(entries: &[u64], claims: u64, t: u64) -> usize {
    let l = entries.len() as u64;
    (0..l)
        .map(|k| entries[((claims + k) % l) as usize])
        .take_while(|&e| is_freed(e) || entry_time(e) + W <= t)
        .count()
}

/// Model: L = 2 at one instant, a cost-2 and a cost-1 request race; exactly one passes and a
/// partial claim of the cost-2 request is freed. With `exact_reuse`, also require that later
/// cost-1 requests get every unit that is not live back at once.
fn cost_two_against_cost_one(name: &str, exact_reuse: bool) {
    let log = SlidingLog {
        limit: 2,
        window_ns: W,
    };
    let t = 1_000 * UNIT;
    model(name, 3, move || {
        let ring = Ring::new(0, &[0; 2]);
        let big = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || ring.acquire(&log, t, 2, true))
        };
        let small = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || ring.acquire(&log, t, 1, true))
        };
        let (big, small) = (big.join().unwrap(), small.join().unwrap());
        assert!(big.is_allowed() != small.is_allowed(), "{big:?} {small:?}");
        let (head, entries) = ring.snapshot();
        let claims = (head >> 32) * 2 + (head & 0xFFFF_FFFF);
        let admitted = if big.is_allowed() { 2 } else { 1 };
        LogRun {
            log,
            first_claim: 0,
            history: Vec::new(),
            admitted_at: vec![t; admitted],
            rolled_back: claims - admitted as u64,
        }
        .check(head, &entries);
        let after = drain(&ring, &log, t);
        assert_eq!(after, free_run_at_head(&entries, claims, t), "{entries:x?}");
        assert!(after + admitted <= 2, "{entries:x?}");
        if exact_reuse {
            assert_eq!(
                after + admitted,
                2,
                "a unit is neither admitted nor available: {entries:x?}"
            );
        }
    });
}

#[test]
fn loom_sliding_log_cost_two_against_cost_one() {
    cost_two_against_cost_one("sliding log, cost 2 vs cost 1", false);
}

/// Fails today: when the cost-1 request commits between the cost-2 request's pre-check and its
/// first claim, the cost-2 request claims entry 1, finds entry 0 live, frees entry 1 and is
/// denied. Entry 1 is free but behind the live entry 0 in ring order, so the log admits nothing
/// more until entry 0 expires: one unit of L = 2 is lost for up to a window.
#[test]
#[ignore = "sliding log: a rolled-back partial claim behind a live entry is unusable for up to W"]
fn loom_sliding_log_rolled_back_units_are_reusable_at_once() {
    cost_two_against_cost_one("sliding log, rolled-back units reusable", true);
}

#[test]
fn loom_sliding_log_refund_gives_back_exactly_one_unit() {
    // L = 2, full with two admissions at t. One process refunds the first while two others ask
    // for one unit each at t: at most one of them passes, and the refunded unit is never lost
    // (what they do not take, a later request gets at once).
    let log = SlidingLog {
        limit: 2,
        window_ns: W,
    };
    let t = 1_000 * UNIT;
    model("sliding log, refund vs claims", 3, move || {
        let ring = Ring::new(0, &[0; 2]);
        let first = ring.acquire(&log, t, 1, true);
        assert!(ring.acquire(&log, t, 1, true).is_allowed());
        let history = vec![entry_of(0, 2, t), entry_of(1, 2, t)];
        assert_eq!(ring.snapshot(), (head_of(2, 2), history.clone()));
        let refunder = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || log.refund(&ring.head, &ring.entries, t, first.stamp, 1))
        };
        let results = join_requests(spawn_requests(&ring, log, &[t, t], 1));
        assert_eq!(
            refunder.join().unwrap(),
            1,
            "one live entry dated at t is freed"
        );
        let admitted_at: Vec<u64> = results
            .iter()
            .filter(|(_, d)| d.is_allowed())
            .map(|&(at, _)| at)
            .collect();
        assert!(
            admitted_at.len() <= 1,
            "a refund of one unit admitted two: {results:?}"
        );
        let (head, entries) = ring.snapshot();
        let claims = 2 + admitted_at.len() as u64;
        assert_eq!(head, head_of(claims, 2), "{entries:x?}");
        // The refund freed the oldest entry (claim 0), which a request may have reused.
        let freed = entries.iter().filter(|&&e| is_freed(e)).count();
        assert_eq!(freed + admitted_at.len(), 1, "{entries:x?}");
        let after = drain(&ring, &log, t);
        assert_eq!(
            after + admitted_at.len(),
            1,
            "the refunded unit is available exactly once: {entries:x?}"
        );
    });
}

#[test]
fn loom_sliding_log_peek_never_writes() {
    // One committer and one peeker (cost 1 then cost 2) on a log of limit 2: the ring ends as the
    // committer alone leaves it.
    let log = SlidingLog {
        limit: 2,
        window_ns: W,
    };
    let t = 1_000 * UNIT;
    model("sliding log, peek", 3, move || {
        let ring = Ring::new(0, &[0; 2]);
        let committer = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || ring.acquire(&log, t, 1, true))
        };
        let peeker = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                [
                    ring.acquire(&log, t, 1, false),
                    ring.acquire(&log, t, 2, false),
                ]
            })
        };
        assert!(committer.join().unwrap().is_allowed());
        let [one, _two] = peeker.join().unwrap();
        assert!(one.is_allowed(), "one unit is always free for a peek");
        assert_eq!(ring.snapshot(), (head_of(1, 2), vec![entry_of(0, 2, t), 0]));
    });
}
