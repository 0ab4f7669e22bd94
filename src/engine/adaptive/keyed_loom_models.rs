//! loom models of keyed adaptive concurrency, run by plain `cargo test`: a key's grants within
//! its limit (the cap checked by the bit's CAS) racing a release whose sample closes the key's
//! window, and a key slot's words adopted by a new key.
//!
//! # Implementation details
//!
//! The models run the production [`KeyedGate`] (over [`KeyedPermits`]) on [`LoomSlot`]s (a
//! loom mutex around each `(tag, state)` pair: the linearizable 16-byte load and CAS of the
//! hardware) and loom atomics for the permit entries and the words per key. The limit's
//! parameters keep `floor(L)` at 1 through any one window (min 1, max 2, the growth of one
//! window 0.5), so exclusion is checked exactly: an independent counter per key, raised after
//! each grant and lowered before each release, never passes 1.

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::keyed::{KeyedGate, KEY_WORDS};
use crate::algo::adaptive::{Outcome, Tuning};
use crate::engine::keys::pair::{LoomSlot, PairWord};
use crate::engine::keys::template::Pure;
use crate::engine::permits::keyed::{KeyAcquire, KeyedPermits};
use crate::engine::permits::slot::{OwnerWord, ENTRY_WORDS};
use crate::owner::owner;
use crate::sync::loom_runner::model;

/// Keys with home slot 0 in a two-slot table.
const A: u64 = 2;
const B: u64 = 4;
const K: u64 = 6;
const PERMITS: usize = 2;
/// The clock of every acquisition and release, ms: past the first window (1 ms).
const NOW_MS: u64 = 10;

fn tuning() -> Tuning {
    Tuning {
        min: 1.0,
        max: 2.0,
        initial: 1.0,
        window_ms: 1,
        smoothing: 0.5,
        tolerance: 1.0,
        headroom: 0.5,
        backoff: 0.5,
    }
}

struct World {
    keys: Vec<LoomSlot>,
    entries: Vec<AtomicU64>,
    words: Vec<AtomicU64>,
    /// Permits of key A held now, by the threads' own count.
    active: AtomicU64,
}

impl World {
    fn new(pairs: &[(u64, u64)]) -> World {
        World {
            keys: pairs.iter().map(|&p| LoomSlot::new(p)).collect(),
            entries: (0..pairs.len() * PERMITS * ENTRY_WORDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            words: (0..pairs.len() * KEY_WORDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            active: AtomicU64::new(0),
        }
    }

    fn gate(&self) -> KeyedGate<'_, LoomSlot, AtomicU64> {
        KeyedGate::new(
            KeyedPermits::new(&self.keys, &self.entries, PERMITS).leased(false),
            &self.words,
        )
    }

    /// One acquisition for `tag` by `pid`; counts the grant.
    fn acquire(&self, tag: u64, pid: u32) -> Option<(usize, usize, OwnerWord)> {
        let got = self
            .gate()
            .acquire(
                &Pure::Permits,
                &tuning(),
                tag,
                owner(pid, 1),
                0,
                NOW_MS,
                &mut || NOW_MS * 1_000_000,
                &mut |_, _| false,
            )
            .expect("no errors in a model");
        match got {
            KeyAcquire::Held { slot, entry, word } => {
                // Relaxed: the counter's modification order alone bounds it.
                let before = self.active.fetch_add(1, Ordering::Relaxed);
                assert_eq!(before, 0, "key {tag}: a permit beyond floor(L) = 1");
                Some((slot, entry, word))
            }
            KeyAcquire::AllHeld | KeyAcquire::Full { .. } => None,
        }
    }

    /// Release with an ok sample of 1 ms; whether it was held.
    fn release(&self, held: (usize, usize, OwnerWord)) -> bool {
        // Relaxed: as in `acquire`.
        self.active.fetch_sub(1, Ordering::Relaxed);
        let (ok, _closed) = self.gate().release(
            &tuning(),
            held.0,
            held.1,
            held.2,
            Some((Outcome::Ok, 1000)),
            || NOW_MS,
        );
        ok
    }

    fn limit(&self, slot: usize) -> f64 {
        tuning().limit_of(self.gate().words(slot).limit.load(Ordering::Acquire))
    }
}

/// Key A's one permit (its limit starts at 1) is held by pid 9. Pid 9 releases it with a
/// sample that closes A's window (the limit moves, within one window's growth, and its floor
/// stays at one) while two processes acquire A: never two of A's permits held at once, though the block
/// has two free entries; at the end, the bits are exactly the permits kept. Fails without the
/// cap in the bit's CAS (both acquirers commit while pid 9 holds).
#[test]
fn keyed_grants_race_a_release_and_a_window_close() {
    model("keyed_grants_race_a_release_and_a_window_close", 2, || {
        let world = Arc::new(World::new(&[(0, 0), (0, 0)]));
        let held = world.acquire(A, 9).expect("A's first permit");
        let releaser = {
            let world = Arc::clone(&world);
            thread::spawn(move || assert!(world.release(held)))
        };
        let acquirers: Vec<_> = (1..=2u32)
            .map(|pid| {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(A, pid))
            })
            .collect();
        releaser.join().unwrap();
        let kept: Vec<_> = acquirers
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert!(kept.len() <= 1);
        let gate = world.gate();
        let (tag, state) = world.keys[0].load();
        assert_eq!(tag, A);
        assert_eq!(state.count_ones() as usize, kept.len(), "{state:#b}");
        for &(slot, entry, word) in &kept {
            assert!(state & (1 << entry) != 0 && slot == 0);
            assert_eq!(gate.permits.block(slot).read(entry).0, word);
        }
        let limit = world.limit(0);
        assert!((1.0..2.0).contains(&limit), "{limit}");
    });
}

/// Slot 0 is B's and idle, its words learnt up to the maximum (2); slot 1 is busy. Two processes acquire for the
/// new key A through that slot: whoever adopts the words first zeroes them, so A is granted
/// within its initial limit (1), never within B's learnt 2; the words end A's. Fails if a new
/// key reads the old key's words.
#[test]
fn a_new_key_starts_at_the_initial_limit() {
    model("a_new_key_starts_at_the_initial_limit", 2, || {
        // Slot 1 is busy with key K (a permit held): A's only way in is B's idle slot.
        let world = Arc::new(World::new(&[(B, 0), (K, 1)]));
        let gate = world.gate();
        let w = gate.words(0);
        w.limit
            .store(tuning().limit_word(2.0, NOW_MS), Ordering::Relaxed);
        world.words[3].store(B, Ordering::Relaxed);
        let acquirers: Vec<_> = (1..=2u32)
            .map(|pid| {
                let world = Arc::clone(&world);
                thread::spawn(move || world.acquire(A, pid))
            })
            .collect();
        let kept: Vec<_> = acquirers
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(kept.len(), 1, "one of A's initial permit");
        assert_eq!(world.keys[0].load().0, A);
        assert_eq!(world.words[3].load(Ordering::Acquire), A, "adopted");
        assert_eq!(world.limit(0), 1.0);
    });
}
