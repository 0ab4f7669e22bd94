//! loom models of the key table, run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The models run the production [`Table`] code over [`LoomSlot`]s (a loom mutex around each
//! `(tag, state)` pair: a linearizable 16-byte load and compare-and-swap, which is what
//! `vmovdqa` and `lock cmpxchg16b` are on x86_64) with a pure template of fixed parameters. The
//! clock is one shared loom atomic that every read advances by one, so clock reads are
//! monotonic across threads and a state can turn fresh between two reads, as in real time. Tags
//! are chosen with the same home slot, so every key probes the same two slots.
//!
//! What the models check, after the threads join, on the final table:
//!
//! * **insert**: two or three threads inserting one new key end with exactly one live slot for
//!   it, and its state carries every admission, exactly (with an empty slot; and through claims
//!   of idle slots, which can pick different slots: all but one claim are retired before any
//!   decision is made on one); a key whose budget is one token is admitted at most once, however
//!   the claims, their validations and the decisions interleave;
//! * **lookup**: a key found past another key's slot is decided on its own state only, and a peek
//!   never writes;
//! * **reclaim racing an update of the same key** (fixed window and token bucket): every
//!   admission granted to the old key is in its live state, or the state it had when it was
//!   reclaimed was fresh; the new key's state holds exactly its own admissions, never the old
//!   key's (both outcomes, reclaimed and kept, are asserted to occur among the executions);
//! * **the explicit reclaim pass racing an update**: the admission ends in exactly one live slot
//!   of its key, computed from a state no older than the one the pass retired;
//! * **a refund racing a reclaim**: the refund only ever changes its own key's state.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::pair::{LoomSlot, PairWord};
use super::table::{Outcome, Table, EMPTY, PENDING, TOMB};
use super::template::Pure;
use crate::algo::fixed_window::{self, FixedWindow};
use crate::algo::gcra::Gcra;
use crate::sync::loom_runner::model;

/// Keys with home slot 0 in a two-slot table.
const A: u64 = 2;
const B: u64 = 4;
const C: u64 = 6;
const K: u64 = 8;

struct World {
    slots: Vec<LoomSlot>,
    clock: AtomicU64,
}

impl World {
    fn new(pairs: &[(u64, u64)], start: u64) -> Arc<World> {
        Arc::new(World {
            slots: pairs.iter().map(|&p| LoomSlot::new(p)).collect(),
            clock: AtomicU64::new(start),
        })
    }

    fn table(&self) -> Table<'_, LoomSlot> {
        Table::new(&self.slots)
    }

    /// One decision for `tag`: (the clock value it was decided with, admitted?).
    fn acquire(&self, t: &Pure, tag: u64, cost: u64, commit: bool) -> (u64, bool) {
        let last = Cell::new(0);
        let mut now = || {
            // SeqCst: the clock is one timeline for every thread.
            let v = self.clock.fetch_add(1, Ordering::SeqCst);
            last.set(v);
            v
        };
        let outcome = self
            .table()
            .decide(t, tag, cost, commit, &mut now)
            .expect("valid parameters");
        let allowed = match outcome {
            Outcome::Decided(d) => d.is_allowed(),
            Outcome::Full { .. } => false,
        };
        (last.get(), allowed)
    }

    fn pairs(&self) -> Vec<(u64, u64)> {
        self.slots.iter().map(|s| s.load()).collect()
    }

    fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }
}

/// The live slots of `tag` in the final table.
fn live(pairs: &[(u64, u64)], tag: u64) -> Vec<u64> {
    pairs.iter().filter(|p| p.0 == tag).map(|p| p.1).collect()
}

fn fixed(limit: u64, window_ns: u64) -> (Pure, FixedWindow) {
    let fw = FixedWindow {
        limit,
        window_ns,
        phase_ns: 0,
    };
    (Pure::Fixed(fw), fw)
}

/// The count `word` holds for window `w` (0 if it holds another window).
fn count_in(word: u64, w: u64) -> u64 {
    let (stored, count) = fixed_window::unpack(word);
    if stored == w as u32 {
        count
    } else {
        0
    }
}

#[test]
fn loom_insert_same_key_into_empty_slots() {
    model("insert into empty slots", 3, || {
        let (t, _) = fixed(10, 1_000_000);
        let world = World::new(&[(EMPTY, 0), (EMPTY, 0)], 0);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(&t, K, 1, true))
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap().1, "a fresh key admits");
        }
        let pairs = world.pairs();
        let k = live(&pairs, K);
        assert_eq!(k.len(), 1, "one slot for the key: {pairs:?}");
        assert_eq!(count_in(k[0], 0), 2, "both admissions, exactly: {pairs:?}");
        assert_eq!(pairs[0].0, K, "in the first empty slot");
    });
}

#[test]
fn loom_insert_same_key_through_two_idle_slots() {
    // Slot 0 holds X, idle from window 1 on (the clock crosses into it after its first read);
    // slot 1 holds Y, idle already. One thread may claim slot 1 while the other claims slot 0.
    model("insert through idle slots", 3, || {
        let w = 101;
        let (t, _) = fixed(10, w);
        let x = fixed_window::pack(0, 5);
        let world = World::new(&[(A, x), (C, 0)], w - 1);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(&t, K, 1, true))
            })
            .collect();
        let results: Vec<(u64, bool)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results.iter().all(|r| r.1), "a new key admits: {results:?}");
        let pairs = world.pairs();
        let k = live(&pairs, K);
        assert_eq!(k.len(), 1, "one live slot, no claim left: {pairs:?}");
        // Every admission dated in the current window is charged, exactly.
        let current = world.now() / w;
        let admitted = results.iter().filter(|r| r.0 / w == current).count() as u64;
        assert_eq!(count_in(k[0], current), admitted, "{pairs:?} {results:?}");
        // Nothing but K, the other keys' untouched words, and retired slots.
        for p in &pairs {
            assert!(
                p.0 == K || p.0 == TOMB || *p == (A, x) || *p == (C, 0),
                "{pairs:?}"
            );
        }
    });
}

/// One decision: the clock value it was decided with, and whether it admitted.
type Grant = (u64, bool);

/// A bucket of one token per ms.
const BUCKET_OF_ONE: Gcra = Gcra {
    emission_ns: 1_000_000,
    tolerance_ns: 1_000_000,
    capacity: 1,
};

/// `threads` threads each decide once for K on a bucket of one in a table holding `pairs`,
/// with the clock at `start`: the final pairs, and each decision's (clock, admitted).
fn insert_one_key(
    threads: usize,
    pairs: &[(u64, u64)],
    start: u64,
) -> (Vec<(u64, u64)>, Vec<Grant>) {
    let t = Pure::Bucket(BUCKET_OF_ONE);
    let world = World::new(pairs, start);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let world = Arc::clone(&world);
            thread::spawn(move || world.acquire(&t, K, 1, true))
        })
        .collect();
    let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (world.pairs(), results)
}

/// At most one admission of a bucket of one, and at most one live slot of K.
fn assert_budget_of_one(pairs: &[(u64, u64)], results: &[(u64, bool)]) {
    let admitted = results.iter().filter(|r| r.1).count();
    assert!(
        admitted <= 1,
        "{admitted} admitted by a bucket of one within ns: {pairs:?} {results:?}"
    );
    assert!(
        live(pairs, K).len() <= 1,
        "at most one live slot: {pairs:?}"
    );
}

#[test]
fn loom_two_inserts_through_idle_slots_never_exceed_the_key_budget() {
    // A bucket of one token per ms for key K, inserted by two threads at once through the two
    // slots of a full window: slot 0 (key A) becomes idle at 100 ns, slot 1 (key C) is idle.
    // A thread that looks before 100 ns claims slot 1, one that looks later claims slot 0, so
    // the two claims can pick different slots. Claims admit nothing and every decision is made
    // on the one live slot left once the other claim is retired: at most one admission in 2 ns.
    model("budget of one through idle slots", 3, || {
        let (pairs, results) = insert_one_key(2, &[(A, 100), (C, 0)], 98);
        assert_budget_of_one(&pairs, &results);
    });
}

#[test]
fn loom_three_threads_insert_one_key_through_idle_slots() {
    // As above with a third decision on the same key: every admission lands in the one live
    // slot, exactly.
    model("three inserts through idle slots", 2, || {
        let w = 101;
        let (t, _) = fixed(10, w);
        let x = fixed_window::pack(0, 5);
        let world = World::new(&[(A, x), (C, 0)], w - 1);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(&t, K, 1, true))
            })
            .collect();
        let results: Vec<(u64, bool)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let pairs = world.pairs();
        let k = live(&pairs, K);
        assert_eq!(k.len(), 1, "one live slot, no claim left: {pairs:?}");
        let current = world.now() / w;
        let admitted = results.iter().filter(|r| r.1 && r.0 / w == current).count() as u64;
        assert_eq!(count_in(k[0], current), admitted, "{pairs:?} {results:?}");
    });
}

#[test]
fn loom_lookup_past_another_key() {
    model("lookup past another key", 3, || {
        let (t, _) = fixed(2, 1_000_000);
        let world = World::new(
            &[(A, fixed_window::pack(0, 1)), (K, fixed_window::pack(0, 1))],
            0,
        );
        let k = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                let peek = world.acquire(&t, K, 1, false).1;
                let first = world.acquire(&t, K, 1, true).1;
                let second = world.acquire(&t, K, 1, true).1;
                (peek, first, second)
            })
        };
        let a = {
            let world = Arc::clone(&world);
            thread::spawn(move || world.acquire(&t, A, 1, true).1)
        };
        assert_eq!(k.join().unwrap(), (true, true, false));
        assert!(a.join().unwrap());
        let pairs = world.pairs();
        assert_eq!(
            pairs,
            vec![(A, fixed_window::pack(0, 2)), (K, fixed_window::pack(0, 2))]
        );
    });
}

#[test]
fn loom_reclaim_races_an_update_of_the_same_key_fixed_window() {
    // A's slot turns idle when the clock enters window 1; B (same home) finds no empty slot and
    // may reclaim it while A's own process updates it. C's word is ahead of the first clock read
    // (window 1 while the clock is in window 0): it is not idle.
    model("reclaim vs update, fixed window", 3, || {
        let w = 101;
        let (t, _) = fixed(5, w);
        let c = fixed_window::pack(1, 1);
        let world = World::new(&[(A, fixed_window::pack(0, 2)), (C, c)], w - 1);
        let a = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                vec![world.acquire(&t, A, 1, true), world.acquire(&t, A, 1, true)]
            })
        };
        let b = {
            let world = Arc::clone(&world);
            thread::spawn(move || vec![world.acquire(&t, B, 1, true)])
        };
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let pairs = world.pairs();
        let current = world.now() / w;
        assert_eq!(current, 1);
        for (tag, decisions, initial) in [(A, &a, 0), (B, &b, 0), (C, &vec![], 1)] {
            let slots = live(&pairs, tag);
            assert!(slots.len() <= 1, "{pairs:?}");
            let charged = slots.first().map_or(0, |&s| count_in(s, current));
            let admitted = decisions
                .iter()
                .filter(|d| d.1 && d.0 / w == current)
                .count() as u64;
            assert_eq!(
                charged,
                initial + admitted,
                "key {tag}: {pairs:?}, A {a:?}, B {b:?}"
            );
        }
        assert_eq!(
            live(&pairs, C),
            vec![c],
            "C's word ahead of the clock was never taken"
        );
        // Relaxed: counted across executions, read after the model.
        RECLAIMED_FIXED[live(&pairs, A).is_empty() as usize].fetch_add(1, Ordering::Relaxed);
    });
    let [kept, taken] = [0, 1].map(|i| RECLAIMED_FIXED[i].load(Ordering::Relaxed));
    assert!(
        kept > 0 && taken > 0,
        "both outcomes explored: {kept} kept, {taken} reclaimed"
    );
}

/// Executions of the fixed-window reclaim model in which A kept / lost its slot.
static RECLAIMED_FIXED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// The same for the token-bucket model.
static RECLAIMED_BUCKET: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

#[test]
fn loom_reclaim_races_an_update_of_the_same_key_token_bucket() {
    // A's bucket is full from t = 101 on; C's never is. B may reclaim A's slot.
    model("reclaim vs update, token bucket", 3, || {
        let g = Gcra {
            emission_ns: 10,
            tolerance_ns: 30,
            capacity: 3,
        };
        let t = Pure::Bucket(g);
        let world = World::new(&[(A, 101), (C, 1_000_000)], 100);
        let a = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                vec![world.acquire(&t, A, 1, true), world.acquire(&t, A, 1, true)]
            })
        };
        let b = {
            let world = Arc::clone(&world);
            thread::spawn(move || world.acquire(&t, B, 1, true))
        };
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let pairs = world.pairs();
        // A's state as its granted admissions alone make it, in the order its thread made them.
        let replay = a
            .iter()
            .filter(|d| d.1)
            .fold(101, |tat: u64, d| tat.max(d.0) + g.emission_ns);
        match live(&pairs, A).as_slice() {
            [tat] => assert_eq!(*tat, replay, "A's admissions, exactly: {pairs:?} {a:?}"),
            [] => {
                // Reclaimed: then only when every admission it had been granted had drained.
                assert!(b.1, "only B takes A's slot");
                assert!(replay <= b.0, "A lost charges: {pairs:?} A {a:?} B {b:?}");
            }
            _ => panic!("A twice: {pairs:?}"),
        }
        match live(&pairs, B).as_slice() {
            // B's inherited word was fresh at its decision: B's state is its admission alone.
            [tat] => assert_eq!(*tat, b.0 + g.emission_ns, "{pairs:?} A {a:?} B {b:?}"),
            [] => assert!(!b.1, "an admitted B is in the table: {pairs:?}"),
            _ => panic!("B twice: {pairs:?}"),
        }
        assert!(live(&pairs, C) == vec![1_000_000]);
        // Relaxed: counted across executions, read after the model.
        RECLAIMED_BUCKET[live(&pairs, A).is_empty() as usize].fetch_add(1, Ordering::Relaxed);
    });
    let [kept, taken] = [0, 1].map(|i| RECLAIMED_BUCKET[i].load(Ordering::Relaxed));
    assert!(
        kept > 0 && taken > 0,
        "both outcomes explored: {kept} kept, {taken} reclaimed"
    );
}

#[test]
fn loom_gc_pass_races_an_update() {
    // The explicit reclaim pass retires A while A's process may be deciding: A's admission ends
    // up in exactly one live slot of A, computed from a fresh state, whichever lands first.
    model("gc pass vs update", 3, || {
        let g = Gcra {
            emission_ns: 10,
            tolerance_ns: 30,
            capacity: 3,
        };
        let t = Pure::Bucket(g);
        let world = World::new(&[(A, 101), (EMPTY, 0)], 100);
        let a = {
            let world = Arc::clone(&world);
            thread::spawn(move || world.acquire(&t, A, 1, true))
        };
        let gc = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                let mut now = || world.clock.fetch_add(1, Ordering::SeqCst);
                world.table().reclaim_idle(&t, &mut now)
            })
        };
        let ((at, allowed), retired) = (a.join().unwrap(), gc.join().unwrap());
        assert!(allowed);
        let pairs = world.pairs();
        assert_eq!(
            live(&pairs, A),
            vec![at.max(101) + g.emission_ns],
            "A's admission, exactly, in one slot: {pairs:?} (retired {retired})"
        );
        assert!(retired <= 1);
    });
}

#[test]
fn loom_refund_races_a_reclaim() {
    // A holds two tokens (T = 10) until 120; its refund makes it idle, and B (same home, one
    // slot) may then reclaim the slot. A refund never lands on B's state.
    model("refund vs reclaim", 3, || {
        let g = Gcra {
            emission_ns: 10,
            tolerance_ns: 30,
            capacity: 3,
        };
        let t = Pure::Bucket(g);
        let world = World::new(&[(A, 120)], 100);
        let refund = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                let grant = crate::algo::Decision::allowed(0, 1);
                let mut now = || world.clock.fetch_add(1, Ordering::SeqCst);
                world.table().refund(&t, A, &grant, 2, &mut now).unwrap();
            })
        };
        let b = {
            let world = Arc::clone(&world);
            thread::spawn(move || world.acquire(&t, B, 1, true))
        };
        refund.join().unwrap();
        let b = b.join().unwrap();
        let pairs = world.pairs();
        match pairs[0] {
            (A, tat) => {
                assert!(!b.1, "B admitted without a slot: {pairs:?}");
                assert!(tat <= 120, "{pairs:?}");
            }
            (B, tat) => {
                assert!(b.1);
                assert_eq!(
                    tat,
                    b.0 + g.emission_ns,
                    "B's state is its admission: {pairs:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn loom_three_inserts_of_a_bucket_of_one_through_idle_slots() {
    // As the two-thread model, with a third decision: one thread may claim slot 1 (before A
    // turns idle), another slot 0 (after), and a third may read slot 0 before its claim and slot
    // 1 after the other: still at most one admission.
    model("bucket of one, three inserts", 3, || {
        let (pairs, results) = insert_one_key(3, &[(A, 100), (C, 0)], 98);
        assert_budget_of_one(&pairs, &results);
    });
}

#[test]
fn loom_a_stale_claim_left_by_a_killed_claimer_is_taken_over() {
    // Slot 0 holds a pending claim of K whose claimer died before validating it; slot 1 holds
    // an idle key. Two threads insert K with a budget of one token: the stale claim is a free
    // slot like any other, K ends with one live slot, no claim is left, one admission at most.
    model("stale claim taken over", 3, || {
        let (pairs, results) = insert_one_key(2, &[(K | PENDING, 12345), (C, 0)], 100);
        assert_eq!(
            results.iter().filter(|r| r.1).count(),
            1,
            "{pairs:?} {results:?}"
        );
        assert_eq!(live(&pairs, K).len(), 1, "{pairs:?}");
        assert!(
            pairs
                .iter()
                .all(|p| p.0 == K || p.0 == TOMB || *p == (C, 0)),
            "no claim left: {pairs:?}"
        );
    });
}
