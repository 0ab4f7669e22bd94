//! loom model of a live retune of a token bucket racing decisions, run by plain `cargo test`.
//!
//! # Implementation details
//!
//! The retune runs the production protocol of [`super::bucket`] ([`stage_retune`]: read the
//! active slot, write the inactive one with its check word; [`rescale`]: move the state word
//! to the new tag through the production mutation loop; [`activate`]) on a control line of
//! loom atomics, while another thread decides with the production pieces a bucket decision
//! is made of: [`try_decide`] on the state word, [`read_slot`] of the slot its tag names, and
//! [`step`] (the GCRA step on the tagged word). The clock stands still, so that the bound is
//! exact: at one instant a full bucket grants at most its capacity, and a retune keeps the
//! tokens in use, so decisions spread over any sequence of versions grant at most the largest
//! of their capacities.
//!
//! What each execution checks:
//!
//! * **No torn parameters**: every decision computed with exactly one written version (its
//!   emission interval, capacity and tolerance `emission x capacity` all from that version);
//! * **No over-admission**: the cost admitted in all is at most the largest capacity of the
//!   versions;
//! * **The tag names a valid slot**: every state word a decision read, and the final one, is
//!   tagged with a slot that reads as a whole version; after the retunes the word is tagged
//!   with the last one's slot, `ACTIVE` names it, and it holds the last version.
//!
//! A thread's hot entry for a slot (`Bucket::bucket_cached`, `tally::hot`) is not in the model:
//! only its own thread reads or writes it, it is filled from [`read_slot`] with the check word
//! recomputed from the values read, and used while the slot's check word equals that one.
//!
//! Checked against a mutation of the protocol: the new slot published after the rescale
//! instead of before it (a decision then reads a slot not written yet) fails the first model.
//!
//! **Two retunes during one decision** (the last model): the second retune rewrites the slot
//! the decision read, and an idle bucket's word comes back to the very value the decision
//! loaded (each retune moves only its tag), so the decision's CAS succeeds with the parameters
//! of two versions ago. The decision is the production protocol of the generation
//! ([`witness`] before, [`unchanged`] after the CAS, [`give_back`] and decide again); its slot
//! read is one [`read_slot_once`] (a torn read gives up, denying), because the reader's backoff
//! loop over weak-memory loads made such a model run for more than ten minutes even with one
//! preemption. Checked against a mutation: with `unchanged` always true, the model fails
//! (19 granted at one instant with capacities of 10).

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

use super::bucket::{
    activate, give_back, read_slot, read_slot_once, rescale, stage_retune, step, tag_of, unchanged,
    witness, write_slot, Read,
};
use crate::algo::{try_decide, Fault, Step};
use crate::file::layout::bucket;
use crate::sync::loom_runner::model;

/// The instant every clock read returns.
const NOW: u64 = 1_000_000;

/// A parameter version: emission interval (ns) and capacity.
type Version = (u64, u64);

/// A control line with `first` in slot 0, `ACTIVE` = 0, and a full bucket (TAT 0, tag 0) in
/// word 0.
fn line(first: Version) -> Arc<Vec<AtomicU64>> {
    let words: Vec<AtomicU64> = (0..16).map(|_| AtomicU64::new(0)).collect();
    write_slot(&words, bucket::PARAMS[0], first.0, first.1, 0);
    Arc::new(words)
}

/// What one attempt of a decision read: the state word, the version, and its tolerance.
type Attempt = (u64, Version, u64);

/// One decision of cost 1 at [`NOW`]: whether it admitted, and each of its attempts.
fn decide(control: &[AtomicU64]) -> (Result<bool, Fault>, Vec<Attempt>) {
    let mut seen = Vec::new();
    let decision = try_decide(
        &control[0],
        || NOW,
        true,
        |t, w| {
            let (g, _) = read_slot(control, bucket::PARAMS[tag_of(w)]).ok_or(Fault::Corrupt)?;
            seen.push((w, (g.emission_ns, g.capacity), g.tolerance_ns));
            Ok(step(&g, t, w, 1))
        },
    );
    (decision.map(|d| d.is_allowed()), seen)
}

/// One retune to `to` (a plain rate), as `Limit::retune_bucket_locked` makes it.
fn retune(control: &[AtomicU64], to: Version) {
    let r = stage_retune(control, to.0, to.1, Some(false)).expect("the slots read whole");
    rescale(&control[0], || NOW, r.old, r.new, r.tag);
    activate(control, r.tag);
}

/// `decisions` decisions on one thread racing retunes through `versions[1..]` on another.
fn retune_races_decisions(name: &str, versions: &'static [Version], decisions: usize) {
    model(name, 3, move || {
        let control = line(versions[0]);
        let retuner = {
            let control = Arc::clone(&control);
            thread::spawn(move || {
                for &v in &versions[1..] {
                    retune(&control, v);
                }
            })
        };
        let decider = {
            let control = Arc::clone(&control);
            thread::spawn(move || (0..decisions).map(|_| decide(&control)).collect::<Vec<_>>())
        };
        retuner.join().unwrap();
        let outcomes = decider.join().unwrap();

        let largest = versions.iter().map(|v| v.1).max().unwrap();
        let mut admitted = 0;
        for (outcome, seen) in &outcomes {
            for &(word, version, tolerance) in seen {
                assert!(
                    versions.contains(&version),
                    "a decision used torn parameters {version:?} (versions {versions:?}), \
                     reading word {word:#x}"
                );
                assert_eq!(tolerance, version.0 * version.1, "tolerance of {version:?}");
            }
            match outcome {
                Ok(true) => admitted += 1,
                Ok(false) => {}
                // A decision never reads the slot being written (its word is tagged with it only
                // once it is published), so it never gives up on a torn slot.
                Err(e) => panic!("a decision failed ({e:?}): it read a slot being written"),
            }
        }
        assert!(
            admitted <= largest,
            "{admitted} admitted at one instant; no version allows more than {largest} \
             (versions {versions:?}, outcomes {outcomes:?})"
        );

        let last = *versions.last().unwrap();
        let word = control[0].load(Ordering::SeqCst);
        let tag = tag_of(word);
        assert_eq!(
            tag,
            (versions.len() - 1) % 2,
            "the word names the last slot"
        );
        assert_eq!(
            (control[bucket::ACTIVE].load(Ordering::SeqCst) & 1) as usize,
            tag,
            "ACTIVE names the slot the word is tagged with"
        );
        let (g, fleet) = read_slot(&control, bucket::PARAMS[tag]).expect("a whole slot");
        assert_eq!((g.emission_ns, g.capacity, fleet), (last.0, last.1, false));
    });
}

#[test]
fn loom_a_retune_racing_two_decisions_never_tears_nor_over_admits() {
    // 2 tokens of 100 ns, retuned to 3 of 50 ns.
    retune_races_decisions("retune vs two decisions", &[(100, 2), (50, 3)], 2);
}

#[test]
fn loom_a_retune_to_a_smaller_bucket_never_over_admits() {
    // 3 tokens of 50 ns, retuned to 1 of 200 ns: whatever was granted under the larger bucket
    // is carried over as tokens in use.
    retune_races_decisions("retune down vs three decisions", &[(50, 3), (200, 1)], 3);
}

/// One decision of `cost` at [`NOW`] with the generation check: admitted or not. A torn slot
/// read denies (see the module docs); at most three rounds.
fn decide_checked(control: &[AtomicU64], cost: u64) -> bool {
    for _ in 0..3 {
        let seen = witness(control);
        let decision = try_decide(
            &control[0],
            || NOW,
            true,
            |t, w| match read_slot_once(control, bucket::PARAMS[tag_of(w)]) {
                Read::Whole(g, _) => Ok(step(&g, t, w, cost)),
                Read::Torn | Read::Damaged => Err(()),
            },
        );
        let Ok(decision) = decision else {
            return false;
        };
        if !decision.is_allowed() {
            return false;
        }
        if unchanged(control, seen) {
            return true;
        }
        give_back(&control[0], || NOW, cost * decision.unit());
    }
    false
}

#[test]
fn loom_two_retunes_during_one_decision_never_over_admit() {
    // 10 tokens of 1 us, retuned twice to 10 tokens of 100 us: a decision of the whole bucket
    // that read the first version and commits after the second would, in the second's terms,
    // have taken a tenth of a token.
    const V1: Version = (1_000, 10);
    const V2: Version = (100_000, 10);
    model("decision vs two retunes", 2, || {
        let control = line(V1);
        let retuner = {
            let control = Arc::clone(&control);
            thread::spawn(move || {
                retune(&control, V2);
                retune(&control, V2);
            })
        };
        let decider = {
            let control = Arc::clone(&control);
            thread::spawn(move || decide_checked(&control, 10))
        };
        retuner.join().unwrap();
        let first = decider.join().unwrap();
        // Then, at the same instant, single units until the bucket denies.
        let mut rest = 0;
        while rest <= 10 {
            let (g, _) = read_slot(
                &control,
                bucket::PARAMS[tag_of(control[0].load(Ordering::SeqCst))],
            )
            .expect("a whole slot");
            let ok = try_decide(
                &control[0],
                || NOW,
                true,
                |t, w| Ok::<Step, ()>(step(&g, t, w, 1)),
            )
            .expect("no error")
            .is_allowed();
            if !ok {
                break;
            }
            rest += 1;
        }
        let granted = u64::from(first) * 10 + rest;
        assert!(
            granted <= 10,
            "granted {granted} at one instant with capacities of 10 (the raced decision: {first})"
        );
    });
}
