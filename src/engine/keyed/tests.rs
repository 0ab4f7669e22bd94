//! Single-threaded checks of the table over real 16-byte slots.

use std::sync::atomic::AtomicU64;

use super::hash::key_hash;
use crate::algo::gcra::Gcra;
use crate::engine::keys::pair::KeySlot;
use crate::engine::keys::table::{tag_of, Outcome, Table, MAX_PROBE};
use crate::engine::keys::template::Pure;

#[repr(C, align(16))]
struct Slots(Vec<[AtomicU64; 2]>);

fn slots(n: usize) -> Slots {
    Slots(
        (0..n)
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect(),
    )
}

fn view(s: &Slots) -> &[KeySlot] {
    // SAFETY: `[AtomicU64; 2]` has the size of a slot; the Vec's buffer is only 8-byte aligned
    // in general, so `KeySlot::table` checks the alignment and the test asserts it got one.
    let words =
        unsafe { std::slice::from_raw_parts(s.0.as_ptr().cast::<AtomicU64>(), s.0.len() * 2) };
    KeySlot::table(words).expect("a 16-byte aligned allocation")
}

/// A bucket no admission in these tests ever refills: a used key never turns idle.
fn never_idle() -> Pure {
    Pure::Bucket(Gcra {
        emission_ns: 1 << 40,
        tolerance_ns: 1 << 41,
        capacity: 2,
    })
}

/// Insert uniformly hashed keys until the first one finds its probe window full: the share of
/// slots in use then is the load a table reaches before the full-table policy first applies.
#[test]
fn occupancy_at_first_full_window() {
    let n = 1 << 14;
    let storage = slots(n);
    let table = Table::new(view(&storage));
    let t = never_idle();
    let mut now = || 1_000_000u64;
    let mut inserted = 0usize;
    let mut first_full = None;
    // Offer twice as many keys as slots: the table fills as far as the windows allow.
    for i in 0..2 * n as u64 {
        let tag = tag_of(key_hash([7, 11], format!("user:{i}").as_bytes()));
        match table.decide(&t, tag, 1, true, &mut now).unwrap() {
            Outcome::Decided(d) => {
                assert!(d.is_allowed());
                inserted += 1;
            }
            Outcome::Full { fresh_in_ns } => {
                assert!(fresh_in_ns > 0);
                first_full.get_or_insert(inserted);
            }
        }
    }
    assert_eq!(table.occupancy(), inserted);
    let first = first_full.expect("twice the slots cannot fit") as f64 / n as f64;
    let last = inserted as f64 / n as f64;
    eprintln!(
        "window of {MAX_PROBE} slots, table of {n}: first full window at load {first:.3}, \
         {last:.3} of the slots used after offering {} keys",
        2 * n
    );
    assert!(first > 0.5 && last > 0.9, "loads {first} {last}");
}

#[test]
fn std_allocations_used_above_are_aligned() {
    // The Vec of `[AtomicU64; 2]` above must come out 16-byte aligned for `view`; glibc's
    // allocator aligns every allocation of 16 bytes or more to 16.
    let s = slots(4);
    assert_eq!(s.0.as_ptr() as usize % 16, 0);
}

/// What [`HookClock`] runs at its next read.
type Hook = std::sync::Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A clock that runs a hook once, at its next read: what another process does between a
/// decision's load of its key's word and its clock read.
#[derive(Clone)]
struct HookClock {
    now: std::sync::Arc<AtomicU64>,
    hook: Hook,
}

impl crate::clock::Clock for HookClock {
    fn now_ns(&self) -> u64 {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A keyed bucket decision loads its key's word, then another process retunes the bucket twice
/// in a row: the first retune moves every key's word to slot 1, the second is caught writing
/// slot 0 (its check word cleared), which the loaded word still names. The decision starts
/// again from the key's live word and admits; it used to report `CorruptState`.
#[test]
fn a_key_word_left_stale_by_two_retunes_in_a_row_is_decided_again() {
    use std::sync::atomic::Ordering;

    use crate::file::layout::bucket;
    use crate::spec::{Keyed, Rate, TokenBucket};
    use crate::Limiter;

    let dir = tempfile::tempdir().unwrap();
    let clock = HookClock {
        now: std::sync::Arc::new(AtomicU64::new(1_000_000_000)),
        hook: Default::default(),
    };
    let limiter = Limiter::builder()
        .keyed_limit(
            "per_user",
            TokenBucket::per_second(10).burst(5),
            Keyed::new(64),
        )
        .clock(clock.clone())
        .create_or_open(dir.path().join("keyed-stale.shm"))
        .unwrap();
    let limit = limiter.limit("per_user").unwrap().into_site();
    let key = b"user-1";
    assert!(super::Keyed(&limit)
        .try_acquire_key(key, 1)
        .unwrap()
        .is_allowed());
    let other = limiter.limit("per_user").unwrap().into_site();
    *clock.hook.lock().unwrap() = Some(Box::new(move || {
        other.set_rate(Rate::per_second(20).unwrap()).unwrap();
        other
            .control(bucket::PARAMS[0] + 2)
            .store(0, Ordering::Release);
    }));
    let read = clock.clone();
    let decision = super::Keyed(&limit)
        .run_key_on(key, 1, true, || crate::clock::Clock::now_ns(&read))
        .unwrap();
    assert!(decision.is_allowed());
    assert!(clock.hook.lock().unwrap().is_none(), "the retunes ran");
}
