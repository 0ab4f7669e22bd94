//! Unit tests of the decision path's handling of a state word that went stale under retunes.

use std::sync::atomic::Ordering;

use super::{Limiter, StepError};
use crate::clock::{Clock, ManualClock};
use crate::file::layout::bucket;
use crate::spec::{Rate, TokenBucket};
use crate::tally::hot::Counts;

/// A bucket retuned once (its live parameters in slot 1, its word tagged 1), then caught in the
/// middle of a second retune: slot 0's check word cleared, as `write_slot` leaves it while it
/// writes the slot.
fn caught_mid_retune() -> (tempfile::TempDir, Limiter<ManualClock>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000_000);
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::per_second(10).burst(5))
        .clock(clock)
        .create_or_open(dir.path().join("stale.shm"))
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    api.set_rate(Rate::per_second(20).unwrap()).unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    let limit = limiter.limit("api").unwrap();
    assert_eq!(crate::engine::bucket::active(limit.control_line()), 1);
    assert_ne!(
        limit.control(0).load(Ordering::Acquire) & bucket::PARAM_TAG,
        0
    );
    limit
        .control(bucket::PARAMS[0] + 2)
        .store(0, Ordering::Release);
    (dir, limiter)
}

#[test]
fn a_word_naming_a_slot_being_rewritten_is_stale_not_corrupt() {
    let (_dir, limiter) = caught_mid_retune();
    let limit = limiter.limit("api").unwrap();
    let now = limit.clock().now_ns();
    let live = limit.control(0).load(Ordering::Acquire);
    // The word as a decision loaded it before the first retune: tag 0, the slot now rewritten.
    let stale = live & !bucket::PARAM_TAG;
    assert!(matches!(
        limit.bucket_step(now, stale, 1, &mut { Counts::TALLY }),
        Err(StepError::Stale)
    ));
    // The live word decides on the active slot.
    assert!(limit
        .bucket_step(now, live, 1, &mut { Counts::TALLY })
        .is_ok());
    // And a decision loads the live word: it admits.
    assert!(limiter
        .token_bucket("api")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_allowed());
}

#[test]
fn the_active_slot_unreadable_is_corrupt() {
    let (_dir, limiter) = caught_mid_retune();
    let limit = limiter.limit("api").unwrap();
    let now = limit.clock().now_ns();
    // Damage the active slot (1) instead: no retune rewrites it, so the state is corrupt.
    limit
        .control(bucket::PARAMS[1] + 2)
        .store(0, Ordering::Release);
    let live = limit.control(0).load(Ordering::Acquire);
    assert!(matches!(
        limit.bucket_step(now, live, 1, &mut { Counts::TALLY }),
        Err(StepError::Corrupt)
    ));
}

#[test]
fn a_live_word_naming_the_rewritten_slot_is_corrupt_and_decisions_end() {
    let (_dir, limiter) = caught_mid_retune();
    let limit = limiter.limit("api").unwrap();
    let now = limit.clock().now_ns();
    // A damaged file: `ACTIVE` names slot 1 but the live word itself names slot 0, which is
    // unreadable. Deciding again could never help: corrupt, and the decision returns.
    let word = limit.control(0).load(Ordering::Acquire) & !bucket::PARAM_TAG;
    limit.control(0).store(word, Ordering::Release);
    assert!(matches!(
        limit.bucket_step(now, word, 1, &mut { Counts::TALLY }),
        Err(StepError::Corrupt)
    ));
    assert!(matches!(
        limiter.token_bucket("api").unwrap().try_acquire(1),
        Err(crate::Error::CorruptState { .. })
    ));
}
