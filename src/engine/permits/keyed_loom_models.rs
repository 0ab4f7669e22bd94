//! loom models of keyed concurrency (acquire, release, take-over, and a key slot changing
//! hands under an acquisition), run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The models run the production [`KeyedPermits`] code over [`LoomSlot`]s (a loom mutex around
//! each `(tag, state)` pair: the linearizable 16-byte load and CAS of the hardware) and loom
//! atomics for the permit entries, with the same two-slot window for every key (tags with the
//! same home slot). Exclusion is checked with an independent counter per key, incremented after
//! each grant and decremented before each release, which must never exceed `C`; and, after the
//! threads join, the final table must account for every permit still held: each set bit's entry
//! is held by a thread that was granted that very entry, and no bit is set for anything else.
//! The limits have no lease (releases do not pin) but in the model of a release racing a lease
//! take-over, which fails without the pin.

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::keyed::{KeyAcquire, KeyedPermits};
use super::slot::{OwnerWord, Table, ENTRY_WORDS};
use crate::engine::keys::pair::{LoomSlot, PairWord};
use crate::engine::keys::template::Pure;
use crate::owner::owner;
use crate::sync::loom_runner::model;

/// Keys with home slot 0 in a two-slot table.
const A: u64 = 2;
const B: u64 = 4;
const K: u64 = 6;

struct World {
    keys: Vec<LoomSlot>,
    entries: Vec<AtomicU64>,
    permits: usize,
    /// Whether the limit has a lease (releases pin their entry first).
    leased: bool,
    clock: AtomicU64,
    /// Per key (A, B, K): permits held now, by the threads' own count.
    active: [AtomicU64; 3],
}

impl World {
    /// A table holding `pairs`, `permits` per key, without a lease (no live holder is ever
    /// judged reclaimable in these models but in the lease model, which sets `leased`).
    fn new(pairs: &[(u64, u64)], permits: usize) -> World {
        World {
            leased: false,
            keys: pairs.iter().map(|&p| LoomSlot::new(p)).collect(),
            entries: (0..pairs.len() * permits * ENTRY_WORDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            permits,
            clock: AtomicU64::new(1_000_000),
            active: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    fn kp(&self) -> KeyedPermits<'_, LoomSlot, AtomicU64> {
        KeyedPermits::new(&self.keys, &self.entries, self.permits).leased(self.leased)
    }

    fn counter(&self, tag: u64) -> &AtomicU64 {
        &self.active[(tag / 2 - 1) as usize]
    }

    /// One acquisition for `tag` by `pid`, judging `dead` (if any) gone; counts the grant.
    fn acquire(&self, tag: u64, pid: u32, dead: Option<u64>) -> Option<(usize, usize, OwnerWord)> {
        let mut now = || self.clock.fetch_add(1, Ordering::SeqCst);
        let mut judge = |w: OwnerWord, _: Option<u64>| Some(w.owner()) == dead;
        let got = self
            .kp()
            .acquire(&Pure::Permits, tag, owner(pid, 1), 0, &mut now, &mut judge)
            .expect("no errors in a model");
        match got {
            KeyAcquire::Held { slot, entry, word } => {
                // Relaxed: the counter's modification order alone bounds it.
                let before = self.counter(tag).fetch_add(1, Ordering::Relaxed);
                assert!(
                    before < self.permits as u64,
                    "key {tag}: a permit beyond C = {}",
                    self.permits
                );
                Some((slot, entry, word))
            }
            KeyAcquire::AllHeld | KeyAcquire::Full { .. } => None,
        }
    }

    fn release(&self, tag: u64, held: (usize, usize, OwnerWord)) -> bool {
        // Relaxed: as in `acquire`.
        self.counter(tag).fetch_sub(1, Ordering::Relaxed);
        self.kp().release(held.0, held.1, held.2)
    }

    /// After the threads: every set bit's entry is one of `held` (granted and kept), and every
    /// kept grant has its bit set in a slot of its key.
    fn check_final(&self, held: &[(u64, (usize, usize, OwnerWord))]) {
        let kp = self.kp();
        for slot in 0..self.keys.len() {
            let (tag, state) = self.keys[slot].load();
            for entry in 0..self.permits {
                let bit = state & (1 << entry) != 0;
                let word = kp.block(slot).read(entry).0;
                let kept = held.iter().find(|(_, (s, e, _))| (*s, *e) == (slot, entry));
                match kept {
                    Some(&(key, (_, _, w))) => {
                        assert!(
                            bit && tag == key,
                            "a kept permit's bit: slot {slot} {tag} {state:#b}"
                        );
                        assert_eq!(word, w, "a kept permit's entry");
                    }
                    None => assert!(!bit, "a bit nobody holds: slot {slot} {state:#b} {word:?}"),
                }
            }
        }
    }
}

/// One permit per key; two threads acquire and release key K twice each: never two holders
/// of K (the counter), every grant released, and K's slot ends idle with both entries free.
#[test]
fn one_permit_per_key_excludes_and_releases() {
    model("one_permit_per_key_excludes_and_releases", 2, || {
        let world = Arc::new(World::new(&[(0, 0), (0, 0)], 1));
        let k: Vec<_> = (1..=2u32)
            .map(|pid| {
                let world = Arc::clone(&world);
                thread::spawn(move || {
                    for _ in 0..2 {
                        if let Some(h) = world.acquire(K, pid, None) {
                            assert!(world.release(K, h));
                        }
                    }
                })
            })
            .collect();
        for h in k {
            h.join().unwrap();
        }
        world.check_final(&[]);
        assert_eq!(world.kp().held(&Pure::Permits, K).unwrap(), 0);
    });
}

/// Key A's slot (slot 0) is idle; slot 1 is B's, busy. K is new: its only way in is to take
/// A's idle slot, while A's own process acquires a permit of A through that very slot. Each key
/// gets at most its one permit, an entry claimed for A in a slot that moved to K is given back,
/// and the final table holds exactly the permits the threads were granted.
#[test]
fn a_key_slot_taken_by_another_key_under_an_acquisition() {
    model(
        "a_key_slot_taken_by_another_key_under_an_acquisition",
        3,
        || {
            let world = Arc::new(World::new(&[(A, 0), (B, 1)], 1));
            // B's permit is held by a live process (pid 9) in slot 1, entry 0.
            Table::new(&world.entries[ENTRY_WORDS..2 * ENTRY_WORDS], 1)
                .claim(0, owner(9, 9), || 1)
                .unwrap();
            let a = {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(A, 1, None))
            };
            let k = {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(K, 2, None))
            };
            let (a, k) = (a.join().unwrap(), k.join().unwrap());
            assert!(a.is_some() || k.is_some(), "one of them gets the slot");
            let mut kept: Vec<_> = a.into_iter().map(|h| (A, h)).collect();
            kept.extend(k.into_iter().map(|h| (K, h)));
            // B's permit, held by pid 9 outside the threads.
            let b = world.kp().block(1).read(0).0;
            kept.push((B, (1, 0, b)));
            world.check_final(&kept);
            // Relaxed: counted across executions, read after the model.
            SLOT_OWNER[(world.keys[0].load().0 == K) as usize].fetch_add(1, Ordering::Relaxed);
        },
    );
    let [a, k] = [0, 1].map(|i| SLOT_OWNER[i].load(Ordering::Relaxed));
    assert!(
        a > 0 && k > 0,
        "both outcomes explored: A kept its slot {a}, K took it {k}"
    );
}

/// Executions of the slot model that ended with slot 0 still A's / taken by K.
static SLOT_OWNER: [std::sync::atomic::AtomicUsize; 2] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// K's one permit is held by a dead process that had committed it (bit set). Two acquirers
/// that find it held judge its owner gone: exactly one takes it over and inherits the bit.
#[test]
fn a_dead_holders_permit_is_taken_over_once() {
    model("a_dead_holders_permit_is_taken_over_once", 2, || {
        let world = Arc::new(World::new(&[(K, 1), (0, 0)], 1));
        let dead = owner(7, 7);
        Table::new(&world.entries[..ENTRY_WORDS], 1)
            .claim(0, dead, || 1)
            .unwrap();
        let handles: Vec<_> = (1..=2u32)
            .map(|pid| {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(K, pid, Some(dead)))
            })
            .collect();
        let kept: Vec<_> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .map(|h| (K, h))
            .collect();
        assert_eq!(kept.len(), 1, "one permit: one take-over");
        world.check_final(&kept);
    });
}

/// K's one permit is held by a process past its lease, which releases it while another
/// acquirer takes it over: either the release wins (the permit is free, then possibly taken
/// fresh) or the take-over does (the release finds nothing to release), never both, and the
/// bit always matches.
#[test]
fn a_release_racing_a_lease_take_over() {
    model("a_release_racing_a_lease_take_over", 3, || {
        let world = Arc::new(World {
            leased: true,
            ..World::new(&[(0, 0), (0, 0)], 1)
        });
        let holder = world.acquire(K, 1, None).expect("a free permit");
        let expired = holder.2.owner();
        let releaser = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                // Relaxed: as in `World::release`, but only if it still holds the permit.
                let released = world.kp().release(holder.0, holder.1, holder.2);
                world.counter(K).fetch_sub(1, Ordering::Relaxed);
                released
            })
        };
        let taker = {
            let world = Arc::clone(&world);
            thread::spawn(move || {
                let mut now = || world.clock.fetch_add(1, Ordering::SeqCst);
                // A lease is judged from the entry's stamp: a pinned (releasing) entry has none.
                let mut lease_expired =
                    |w: OwnerWord, since: Option<u64>| w.owner() == expired && since.is_some();
                match world
                    .kp()
                    .acquire(
                        &Pure::Permits,
                        K,
                        owner(2, 1),
                        0,
                        &mut now,
                        &mut lease_expired,
                    )
                    .unwrap()
                {
                    KeyAcquire::Held { slot, entry, word } => Some((slot, entry, word)),
                    _ => None,
                }
            })
        };
        let released = releaser.join().unwrap();
        let taken = taker.join().unwrap();
        let kept: Vec<_> = taken.into_iter().map(|h| (K, h)).collect();
        if !released {
            assert_eq!(kept.len(), 1, "the release lost only to a take-over");
        }
        world.check_final(&kept);
    });
}
