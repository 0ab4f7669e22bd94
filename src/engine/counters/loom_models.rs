//! loom models of the counters engine's protocols, run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The models run the production code ([`log::acquire`], [`update`] over the key-table
//! engine's `Table`) over [`LoomSlot`]s (a loom mutex around each 16-byte pair: a linearizable
//! load and compare-and-swap, which `vmovdqa` and `lock cmpxchg16b` are), with a clock that is
//! one shared loom atomic every read advances by one. What they check, after the threads join:
//!
//! * **moving window, single units**: three threads admitting one unit each into a log of
//!   two admit at most two, and exactly the admitted units are live at the end;
//! * **moving window, a multi-unit claim racing**: a claim of two and a claim of one in a log
//!   of two admit at most two units, and a claim that lost entries gives back every entry it
//!   took (the live entries at the end are exactly the admitted units);
//! * **counters, claims of an idle slot**: two increments of a new key whose probe window holds
//!   only another key's idle word, both claiming through it, end with one live slot for the
//!   key holding both increments; two acquisitions of a limit of one admit exactly one.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::log::{self, Taken};
use super::{update, Change, CounterWords, Updated};
use crate::algo::counters as algo;
use crate::engine::keys::pair::{LoomSlot, PairWord};
use crate::engine::keys::table::Table;
use crate::sync::loom_runner::model;

const W: u64 = 1_000;
const KEY: u64 = 8;
const OTHER: u64 = 6;

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

    fn now(&self) -> u64 {
        // SeqCst: the clock is one timeline for every thread.
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn pairs(&self) -> Vec<(u64, u64)> {
        self.slots.iter().map(|s| s.load()).collect()
    }
}

fn live_units(pairs: &[(u64, u64)], now: u64) -> u64 {
    pairs
        .iter()
        .filter(|&&(tag, ts)| tag == KEY && ts + W > now)
        .count() as u64
}

fn admitted(world: &World, n: u64) -> u64 {
    let t = world.now();
    match log::acquire(&world.slots, KEY, t, W, n) {
        Taken::Admitted { .. } => n,
        Taken::Denied { .. } => 0,
    }
}

#[test]
fn loom_moving_window_single_units_never_exceed_the_log() {
    model("moving window: three single units, log of two", 3, || {
        let world = World::new(&[(0, 0), (OTHER, 5)], 10);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let world = Arc::clone(&world);
                thread::spawn(move || admitted(&world, 1))
            })
            .collect();
        let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(total <= 2, "admitted {total} of 2");
        assert_eq!(live_units(&world.pairs(), 20), total);
    });
}

#[test]
fn loom_moving_window_partial_claims_are_given_back() {
    model(
        "moving window: a claim of two racing a claim of one",
        3,
        || {
            let world = World::new(&[(0, 0), (KEY, 1)], 2_000);
            let two = {
                let world = Arc::clone(&world);
                thread::spawn(move || admitted(&world, 2))
            };
            let one = {
                let world = Arc::clone(&world);
                thread::spawn(move || admitted(&world, 1))
            };
            let total = two.join().unwrap() + one.join().unwrap();
            assert!(total <= 2, "admitted {total} of 2");
            assert_eq!(live_units(&world.pairs(), 2_010), total);
        },
    );
}

fn incr(world: &World, amount: u64) -> u64 {
    let last = Cell::new(0);
    let mut now = || {
        let v = world.now();
        last.set(v);
        v
    };
    let out = update(
        &Table::new(&world.slots),
        &CounterWords,
        KEY,
        true,
        &mut now,
        |t, w| {
            let (new, count) = algo::incr(t, w, W, amount)?;
            Ok(Change::Write(new, count))
        },
    )
    .expect("valid words");
    match out {
        Updated::Done(count, _) => count,
        Updated::Full { .. } => 0,
    }
}

#[test]
fn loom_counters_claims_of_an_idle_slot_lose_no_increment() {
    model(
        "counters: two increments claiming through an idle slot",
        3,
        || {
            // A full probe window of two: another key's word over since 50, and a retired slot.
            let (idle, _) = algo::incr(0, 0, 50 << 21, 1).unwrap();
            let world = World::new(&[(OTHER, idle), (u64::MAX, 0)], 1 << 28);
            let a = {
                let world = Arc::clone(&world);
                thread::spawn(move || incr(&world, 1))
            };
            let b = {
                let world = Arc::clone(&world);
                thread::spawn(move || incr(&world, 2))
            };
            let (a, b) = (a.join().unwrap(), b.join().unwrap());
            let pairs = world.pairs();
            let live: Vec<u64> = pairs.iter().filter(|p| p.0 == KEY).map(|p| p.1).collect();
            assert_eq!(live.len(), 1, "{pairs:?}");
            assert_eq!(algo::fixed_count(live[0]), 3);
            assert!(a == 1 || a == 3);
            assert_eq!(a + b, if a == 1 { 4 } else { 5 });
        },
    );
}

#[test]
fn loom_counters_a_limit_of_one_admits_once() {
    model("counters: two acquisitions of a limit of one", 3, || {
        let world = World::new(&[(0, 0), (0, 0)], 100);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let world = Arc::clone(&world);
                thread::spawn(move || {
                    let mut now = || world.now();
                    let out = update(
                        &Table::new(&world.slots),
                        &CounterWords,
                        KEY,
                        true,
                        &mut now,
                        |t, w| {
                            let (count, _) = algo::fixed_view(t, w)?;
                            if count + 1 > 1 {
                                return Ok(Change::Keep(false));
                            }
                            Ok(Change::Write(algo::incr(t, w, W << 21, 1)?.0, true))
                        },
                    )
                    .expect("valid words");
                    matches!(out, Updated::Done(true, _))
                })
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&a| a)
            .count();
        assert_eq!(admitted, 1);
    });
}
