//! loom models of the counter lanes (claim, take-over of a gone owner's lane, plain-store
//! additions, readers summing), run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The models run the production [`lanes::claim`], [`lanes::add_owned`] and
//! [`lanes::add_shared`] over `loom::sync::atomic::AtomicU64`. A lost update (two writers on one
//! owned lane, or a new owner starting from a stale value) shows as a final total below the
//! number of additions; a reader that sees the total go backwards fails its assertion. A
//! thread's death is a Release store of a flag that the liveness test reads with Acquire: what
//! the kernel provides between a thread's last store and `kill`/`/proc` telling it is gone.

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::lanes;
use crate::owner::owner;
use crate::sync::loom_runner::model;

/// `n` lanes of one counter each, and their owner words (lane 0's unused: shared).
struct File {
    owners: Vec<AtomicU64>,
    counters: Vec<AtomicU64>,
}

impl File {
    fn new(n: usize) -> Arc<File> {
        Arc::new(File {
            owners: (0..n).map(|_| AtomicU64::new(0)).collect(),
            counters: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn add(&self, lane: Option<usize>) {
        match lane {
            Some(i) => lanes::add_owned(&self.counters[i]),
            None => lanes::add_shared(&self.counters[0]),
        }
    }

    fn total(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// Two threads, one ownable lane: at most one owns it, the other adds to the shared lane, and
/// no addition is lost.
#[test]
fn one_owner_per_lane() {
    model("one_owner_per_lane", 3, || {
        let f = File::new(2);
        let handles: Vec<_> = (1..=2u32)
            .map(|tid| {
                let f = Arc::clone(&f);
                thread::spawn(move || {
                    let me = owner(tid, 7);
                    let lane = lanes::claim(2, |i| &f.owners[i], me, |_| false);
                    f.add(lane);
                    f.add(lane);
                    lane.is_some()
                })
            })
            .collect();
        let owned = handles
            .into_iter()
            .map(|h| h.join().unwrap() as u32)
            .sum::<u32>();
        assert_eq!(owned, 1, "exactly one thread owns the one lane");
        assert_eq!(f.total(), 4);
    });
}

/// A thread owns the lane, adds, and dies; another claims it (only once the first is gone),
/// goes on from its values; a reader's sums never go backwards; nothing is lost.
#[test]
fn take_over_of_a_gone_owner_keeps_totals() {
    model("take_over_of_a_gone_owner_keeps_totals", 3, || {
        let f = File::new(2);
        let dead = Arc::new(AtomicU64::new(0));
        let first = owner(1, 7);
        // The first owner claims before the others start (as a thread that decided earlier).
        let lane = lanes::claim(2, |i| &f.owners[i], first, |_| false);
        assert_eq!(lane, Some(1));
        let a = {
            let (f, dead) = (Arc::clone(&f), Arc::clone(&dead));
            thread::spawn(move || {
                f.add(lane);
                f.add(lane);
                // Release: the kernel's ordering between a thread's last store and its death.
                dead.store(1, Ordering::Release);
            })
        };
        let b = {
            let (f, dead) = (Arc::clone(&f), Arc::clone(&dead));
            thread::spawn(move || {
                let me = owner(2, 7);
                let lane = lanes::claim(
                    2,
                    |i| &f.owners[i],
                    me,
                    // Acquire: pairs with the death's Release.
                    |w| w.owner() == first && dead.load(Ordering::Acquire) == 1,
                );
                f.add(lane);
            })
        };
        let reader = {
            let f = Arc::clone(&f);
            thread::spawn(move || {
                let before = f.total();
                let after = f.total();
                assert!(
                    after >= before,
                    "the total went back from {before} to {after}"
                );
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        reader.join().unwrap();
        assert_eq!(f.total(), 3);
    });
}

/// A thread that already owns a lane (through another mapping) adopts it rather than claim a
/// second; a released lane is claimed again.
#[test]
fn adoption_and_release() {
    model("adoption_and_release", 3, || {
        let f = File::new(3);
        let me = owner(3, 9);
        let first = lanes::claim(3, |i| &f.owners[i], me, |_| false);
        let again = lanes::claim(3, |i| &f.owners[i], me, |_| false);
        assert_eq!(first, again);
        let other = {
            let f = Arc::clone(&f);
            thread::spawn(move || lanes::claim(3, |i| &f.owners[i], owner(4, 9), |_| false))
        };
        let theirs = other.join().unwrap();
        assert!(theirs.is_some() && theirs != first);
        assert!(lanes::release(&f.owners[first.unwrap()], me));
        assert_eq!(lanes::claim(3, |i| &f.owners[i], me, |_| false), first);
    });
}
