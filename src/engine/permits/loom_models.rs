//! loom models of the permit table (acquire, release, take-over and reclaim) and of the futex
//! handshake, run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The models run the production [`Table`] transitions over `loom::sync::atomic::AtomicU64`.
//! Exclusion is checked two ways: with one permit, the holder writes a `loom::cell::UnsafeCell`,
//! so loom reports any two holders whose accesses are not ordered by happens-before (a data
//! race) — which also checks that a release's Release pairs with the next claim's Acquire; with
//! more permits, an independent counter incremented after each acquisition and decremented
//! before each release must never exceed `C`.

use std::sync::atomic::Ordering;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::futex;
use super::slot::{OwnerWord, Table};
use crate::owner::owner;
use crate::sync::loom_runner::model;

fn words(n: usize) -> Arc<Vec<AtomicU64>> {
    Arc::new((0..n).map(|_| AtomicU64::new(0)).collect())
}

/// One permit, two processes acquiring and releasing it twice each: they never hold it at
/// once (the cell access would race), and every claim is released.
#[test]
fn acquire_release_excludes() {
    model("acquire_release_excludes", 2, || {
        let w = words(2);
        let cell = Arc::new(UnsafeCell::new(0u64));
        let handles: Vec<_> = (1..=2u32)
            .map(|pid| {
                let (w, cell) = (Arc::clone(&w), Arc::clone(&cell));
                thread::spawn(move || {
                    let t = Table::new(&w, 1);
                    let mut held = 0;
                    for _ in 0..2 {
                        if let Some((i, word)) = t.claim(0, owner(pid, 1), || 1_000_000) {
                            // SAFETY: the permit excludes the other thread; loom checks it.
                            cell.with_mut(|p| unsafe { *p += 1 });
                            assert!(t.release(i, word));
                            held += 1;
                        }
                    }
                    held
                })
            })
            .collect();
        let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        // SAFETY: both threads joined.
        assert_eq!(cell.with(|p| unsafe { *p }), total);
        let t = Table::new(&w, 1);
        assert!(t.read(0).0.is_free());
        assert_eq!(t.read(0).0.gen(), 2 * total);
    });
}

/// Two permits, three processes claiming once each and keeping what they get: exactly two
/// succeed (no free entry is missed, none is given twice), counted independently.
#[test]
fn claims_never_exceed_permits() {
    model("claims_never_exceed_permits", 2, || {
        let w = words(4);
        let active = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (1..=3u32)
            .map(|pid| {
                let (w, active) = (Arc::clone(&w), Arc::clone(&active));
                thread::spawn(move || {
                    let t = Table::new(&w, 2);
                    let got = t.claim(pid as usize, owner(pid, 1), || 1).is_some();
                    if got {
                        // Relaxed: the counter's modification order alone bounds it.
                        let before = active.fetch_add(1, Ordering::Relaxed);
                        assert!(before < 2, "a third holder");
                    }
                    got
                })
            })
            .collect();
        let granted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&g| g)
            .count();
        assert_eq!(granted, 2, "two permits, three claims: exactly two grants");
        let t = Table::new(&w, 2);
        let owners = [t.read(0).0.pid(), t.read(1).0.pid()];
        assert!(owners.iter().all(|&p| p != 0) && owners[0] != owners[1]);
    });
}

/// The permit of a dead process, claimed by two acquirers that find none free: one takes it
/// over, the other gets nothing, and their holdings never overlap.
#[test]
fn take_over_of_a_dead_owner() {
    model("take_over_of_a_dead_owner", 2, || {
        let w = words(2);
        let dead = owner(9, 9);
        Table::new(&w, 1).claim(0, dead, || 1).unwrap();
        let cell = Arc::new(UnsafeCell::new(0u64));
        let acquirers: Vec<_> = (1..=2u32)
            .map(|pid| {
                let (w, cell) = (Arc::clone(&w), Arc::clone(&cell));
                thread::spawn(move || {
                    let t = Table::new(&w, 1);
                    let me = owner(pid, 1);
                    let got = t.claim(0, me, || 2).or_else(|| {
                        t.sweep(0, Some(me), false, |w, _| w.owner() == dead, || 2)
                            .pop()
                    });
                    match got {
                        Some((i, word)) => {
                            // SAFETY: the permit excludes the other acquirer; loom checks it.
                            cell.with_mut(|p| unsafe { *p += 1 });
                            assert!(t.release(i, word));
                            1
                        }
                        None => 0,
                    }
                })
            })
            .collect();
        let got: u64 = acquirers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(got >= 1, "the dead owner's permit came back");
        assert!(Table::new(&w, 1).read(0).0.is_free());
    });
}

/// `gc` reclaiming a dead owner's permit races an acquirer taking it over: the dead owner's
/// claim is replaced exactly once, and the acquirer's claim is never reclaimed.
#[test]
fn reclaim_races_take_over() {
    model("reclaim_races_take_over", 2, || {
        let w = words(2);
        let dead = owner(9, 9);
        Table::new(&w, 1).claim(0, dead, || 1).unwrap();
        let acquirer = {
            let w = Arc::clone(&w);
            thread::spawn(move || {
                let t = Table::new(&w, 1);
                let me = owner(1, 1);
                t.claim(0, me, || 2)
                    .or_else(|| {
                        t.sweep(0, Some(me), false, |w, _| w.owner() == dead, || 2)
                            .pop()
                    })
                    .map(|(_, w)| w)
            })
        };
        let t = Table::new(&w, 1);
        let freed = t.sweep(0, None, true, |w, _| w.owner() == dead, || 2).len();
        let got = acquirer.join().unwrap();
        let now = t.read(0).0;
        match got {
            // Took it over from the dead owner (then gc found it live) or claimed it after gc.
            Some(mine) => assert_eq!(now, mine),
            // Only if gc freed it after the acquirer's claim scan and before its sweep.
            None => assert!(freed == 1 && now.is_free()),
        }
        assert!(freed <= 1);
        assert_ne!(now.owner(), dead);
    });
}

/// A live holder whose lease expired races a taker: the holder's release and the take-over
/// are exclusive, and a re-claim by the holder cannot be taken with the old judgement.
#[test]
fn lease_take_over_races_release_and_reclaim() {
    model("lease_take_over_races_release_and_reclaim", 2, || {
        let w = words(2);
        let holder = owner(5, 5);
        let first = {
            let t = Table::new(&w, 1);
            t.claim(0, holder, || 1).unwrap().1
        };
        let h = {
            let w = Arc::clone(&w);
            thread::spawn(move || {
                let t = Table::new(&w, 1);
                let released = t.release(0, first);
                // Claim again: a newer generation, not expired.
                let again = t.claim(0, holder, || 2);
                (released, again.map(|(_, w)| w))
            })
        };
        let taker = {
            let w = Arc::clone(&w);
            thread::spawn(move || {
                let t = Table::new(&w, 1);
                let me = owner(6, 6);
                // The judgement: only the first claim's lease has expired.
                t.sweep(0, Some(me), false, |w: OwnerWord, _| w == first, || 3)
                    .pop()
                    .map(|(_, w)| w)
            })
        };
        let (released, again) = h.join().unwrap();
        let took = taker.join().unwrap();
        assert!(
            released != took.is_some(),
            "exactly one of release and take-over"
        );
        let t = Table::new(&w, 1);
        let now = t.read(0).0;
        match (again, took) {
            (Some(a), None) => assert_eq!(now, a),
            (None, Some(b)) => assert_eq!(now, b),
            (None, None) => unreachable!("someone holds it"),
            (Some(_), Some(_)) => panic!("two holders"),
        }
    });
}

/// The futex handshake: a waiter that registered and then saw no new sequence, and a releaser
/// that saw no waiter, cannot both happen (the wake-up would be lost).
#[test]
fn no_lost_wake_up() {
    model("no_lost_wake_up", 2, || {
        let seq = Arc::new(AtomicU64::new(0));
        let waiters = Arc::new(AtomicU64::new(0));
        let w = {
            let (seq, waiters) = (Arc::clone(&seq), Arc::clone(&waiters));
            thread::spawn(move || futex::register(&*seq, &*waiters, 0))
        };
        let woke = futex::bump(&*seq, &*waiters);
        let sleeps = w.join().unwrap();
        assert!(!sleeps || woke, "a sleeper no release will wake");
        futex::deregister(&*waiters);
        assert_eq!(waiters.load(Ordering::Relaxed), 0);
    });
}
