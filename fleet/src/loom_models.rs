//! loom model of the share / lease-deadline pair of a fleet-managed token bucket, run by plain
//! `cargo test`.
//!
//! The words and orderings are those of `Limit::set_token_bucket` (a retune writes the inactive
//! parameter slot, publishes it with a Release store of its check word, then flips the state
//! word's slot tag with an AcqRel CAS), `Limit::set_fleet_deadline` (a Release store) and a
//! decision (Acquire load of the state word, Acquire load of the tagged slot's check, Acquire
//! load of the deadline, AcqRel CAS of the state word). The agent's order: a lowered share is
//! published before the new deadline, a raised one after it.
//!
//! What is checked: every admission was decided with a share that the grant behind the deadline
//! it read covers (`share <= grant(deadline)`), across one renewal: the hard lowering (a grant
//! below the share applied: a new epoch, where the server's grant restarts at 0, so the old share
//! is not covered by the new lease) and a raise. The same models with the other order (the
//! deadline before the lowering, the raise before the deadline) are shown to fail, so the check
//! is not vacuous.
//!
//! Not covered, and a known limit: two retunes within one decision can return the state word to
//! the value the decision read (the slot tag flips back, and a full bucket's TAT is kept), so a
//! decision preempted across two renewals can commit one admission computed with the share
//! before them (the model finds it with two renewals). That is at most one decision per worker
//! so preempted, as for any retune of a plain bucket.

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

/// The check of a slot holding `share` (a stand-in for `bucket::check`).
fn check(share: u64) -> u64 {
    share ^ 0x5A17_C0DE
}

/// The grant behind each deadline the agent writes: (deadline, grant).
const LEASES: [(u64, u64); 3] = [(100, 10), (200, 4), (300, 8)];

fn grant_of(deadline: u64) -> u64 {
    LEASES
        .iter()
        .find(|(d, _)| *d == deadline)
        .map(|(_, g)| *g)
        .expect("a deadline the agent wrote")
}

struct Bucket {
    /// Bit 63: the slot tag; the rest: a count of admissions (the TAT's stand-in).
    state: AtomicU64,
    /// Two parameter slots: (share, check).
    slots: [(AtomicU64, AtomicU64); 2],
    active: AtomicU64,
    deadline: AtomicU64,
}

impl Bucket {
    fn new(share: u64, deadline: u64) -> Bucket {
        Bucket {
            state: AtomicU64::new(0),
            slots: [
                (AtomicU64::new(share), AtomicU64::new(check(share))),
                (AtomicU64::new(0), AtomicU64::new(0)),
            ],
            active: AtomicU64::new(0),
            deadline: AtomicU64::new(deadline),
        }
    }

    /// `set_token_bucket`: the inactive slot, its check (Release), the state word's flip.
    fn retune(&self, share: u64) {
        let next = (1 - self.active.load(Ordering::Acquire)) as usize;
        let (v, c) = &self.slots[next];
        v.store(share, Ordering::Relaxed);
        c.store(check(share), Ordering::Release);
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let new = (cur & !(1 << 63)) | ((next as u64) << 63);
            match self
                .state
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(a) => cur = a,
            }
        }
        self.active.store(next as u64, Ordering::Release);
    }

    /// `set_fleet_deadline`.
    fn set_deadline(&self, d: u64) {
        self.deadline.store(d, Ordering::Release);
    }

    /// One admission at a `now` every deadline covers: the (share, deadline) it decided with.
    fn admit(&self) -> (u64, u64) {
        loop {
            let w = self.state.load(Ordering::Acquire);
            let (v, c) = &self.slots[(w >> 63) as usize];
            let chk = c.load(Ordering::Acquire);
            let share = v.load(Ordering::Relaxed);
            if chk != check(share) {
                thread::yield_now();
                continue; // a torn read: retried, as bucket_params does
            }
            let d = self.deadline.load(Ordering::Acquire);
            if self
                .state
                .compare_exchange(w, w + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return (share, d);
            }
        }
    }
}

/// One renewal against one worker deciding twice, from the bucket at `(from, deadline 100 or
/// 200)`: a lowering to 4 under a lease to 200 with a grant of 4 (a new epoch), or a raise to 8
/// under a lease to 300 with a grant of 8. `ordered`: the production order (a lowered share
/// before its deadline, a raised one after).
fn renewal(lower: bool, ordered: bool) {
    let b = Arc::new(if lower {
        Bucket::new(10, 100)
    } else {
        Bucket::new(4, 200)
    });
    let agent = {
        let b = Arc::clone(&b);
        thread::spawn(move || {
            let (share, deadline) = if lower { (4, 200) } else { (8, 300) };
            if ordered == lower {
                b.retune(share);
                b.set_deadline(deadline);
            } else {
                b.set_deadline(deadline);
                b.retune(share);
            }
        })
    };
    for _ in 0..2 {
        let (share, d) = b.admit();
        assert!(
            share <= grant_of(d),
            "admitted with share {share} under the lease to {d} (grant {})",
            grant_of(d)
        );
    }
    agent.join().unwrap();
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.max_duration = None;
    builder.max_permutations = None;
    builder.check(f);
}

#[test]
fn loom_a_lowered_share_never_pairs_with_a_lease_that_does_not_cover_it() {
    model(|| renewal(true, true));
}

#[test]
fn loom_a_raised_share_never_pairs_with_the_older_lease() {
    model(|| renewal(false, true));
}

#[test]
fn loom_the_wrong_orders_are_caught() {
    for lower in [true, false] {
        let caught = std::panic::catch_unwind(|| model(move || renewal(lower, false)));
        assert!(
            caught.is_err(),
            "the model missed a decision pairing a share with a lease that does not cover it"
        );
    }
}
