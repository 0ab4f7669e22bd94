//! Unit tests of the decision path's handling of a state word that went stale under retunes,
//! and of a fleet fence caught mid-rewrite.

use crate::engine::bucket::Bucket;
use crate::engine::keyed::Keyed;
use std::sync::atomic::Ordering;

use super::{Limiter, StepError};
use crate::clock::{Clock, ManualClock};
use crate::engine::site::hot::Counts;
use crate::file::layout::bucket;
use crate::spec::{Rate, TokenBucket};

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
    let limit = limiter.limit("api").unwrap().into_site();
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
    let limit = limiter.limit("api").unwrap().into_site();
    let now = limit.clock().now_ns();
    let live = limit.control(0).load(Ordering::Acquire);
    // The word as a decision loaded it before the first retune: tag 0, the slot now rewritten.
    let stale = live & !bucket::PARAM_TAG;
    assert!(matches!(
        Bucket(&limit).bucket_step(now, stale, 1, &mut { Counts::TALLY }),
        Err(StepError::Stale)
    ));
    // The live word decides on the active slot.
    assert!(Bucket(&limit)
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
    let limit = limiter.limit("api").unwrap().into_site();
    let now = limit.clock().now_ns();
    // Damage the active slot (1) instead: no retune rewrites it, so the state is corrupt.
    limit
        .control(bucket::PARAMS[1] + 2)
        .store(0, Ordering::Release);
    let live = limit.control(0).load(Ordering::Acquire);
    assert!(matches!(
        Bucket(&limit).bucket_step(now, live, 1, &mut { Counts::TALLY }),
        Err(StepError::Corrupt)
    ));
}

#[test]
fn a_live_word_naming_the_rewritten_slot_is_corrupt_and_decisions_end() {
    let (_dir, limiter) = caught_mid_retune();
    let limit = limiter.limit("api").unwrap().into_site();
    let now = limit.clock().now_ns();
    // A damaged file: `ACTIVE` names slot 1 but the live word itself names slot 0, which is
    // unreadable. Deciding again could never help: corrupt, and the decision returns.
    let word = limit.control(0).load(Ordering::Acquire) & !bucket::PARAM_TAG;
    limit.control(0).store(word, Ordering::Release);
    assert!(matches!(
        Bucket(&limit).bucket_step(now, word, 1, &mut { Counts::TALLY }),
        Err(StepError::Corrupt)
    ));
    assert!(matches!(
        limiter.token_bucket("api").unwrap().try_acquire(1),
        Err(crate::Error::CorruptState { .. })
    ));
}

/// A fleet-managed bucket past its lease (deadline 0), so that its decisions use the fence
/// slot (50/s, 2 tokens); two opens of its file, as the agent and a worker have.
fn fenced_bucket() -> (
    tempfile::TempDir,
    Limiter<ManualClock>,
    Limiter<ManualClock>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence.shm");
    let clock = ManualClock::new(1_000_000_000);
    let open = || {
        Limiter::builder()
            .limit("api", TokenBucket::per_second(10).burst(5))
            .clock(clock.clone())
            .create_or_open(&path)
            .unwrap()
    };
    let (agent, worker) = (open(), open());
    let api = agent.token_bucket("api").unwrap();
    api.fleet_manage(2, Rate::per_second(50).unwrap()).unwrap();
    api.set_fleet_deadline(0).unwrap();
    (dir, agent, worker)
}

/// The fence is one slot rewritten in place while fenced decisions read it. A writer
/// descheduled between its stores (here: the retune lock held, the check word cleared, as
/// `write_slot` leaves it) must not turn the readers' decisions into `CorruptState` (a worker
/// that treats it as fatal stops, and the host's demand with it): they deny, consuming
/// nothing, and retry shortly. Torn with nobody writing is damage.
#[test]
fn a_fence_being_rewritten_denies_and_a_torn_one_nobody_writes_is_corrupt() {
    let (_dir, agent, worker) = fenced_bucket();
    let tb = worker.token_bucket("api").unwrap();
    assert!(tb.try_acquire(1).unwrap().is_allowed());
    let writer = agent.limit("api").unwrap().into_site();
    let check = writer.control(bucket::FENCE + 2).load(Ordering::Acquire);
    {
        let _writing = writer.retune_lock().unwrap();
        writer
            .control(bucket::FENCE + 2)
            .store(0, Ordering::Release);
        for _ in 0..3 {
            let d = tb.try_acquire(1).unwrap();
            assert!(d.is_denied());
            assert_eq!(
                d.retry_after_ns(),
                crate::engine::bucket::FENCE_REWRITE_RETRY_NS
            );
        }
        let r = tb.reserve(1, std::time::Duration::from_secs(1)).unwrap();
        assert!(!r.is_granted());
        // The share's mark is read without the fence: still fleet-managed.
        assert!(Bucket(&worker.limit("api").unwrap().into_site()).is_fleet_managed());
        // A decision in the writer's own process (its mutex held by another thread) too.
        std::thread::scope(|s| {
            s.spawn(|| {
                let d = agent.token_bucket("api").unwrap().try_acquire(1).unwrap();
                assert_eq!(
                    d.retry_after_ns(),
                    crate::engine::bucket::FENCE_REWRITE_RETRY_NS
                );
            });
        });
    }
    // Nobody holds the retune lock and the slot is still torn: damage.
    assert!(matches!(
        tb.try_acquire(1),
        Err(crate::Error::CorruptState { .. })
    ));
    assert!(matches!(
        tb.fleet_lease(),
        Err(crate::Error::CorruptState { .. })
    ));
    // The rewrite finished: the fence decides again (one token left of its two).
    writer
        .control(bucket::FENCE + 2)
        .store(check, Ordering::Release);
    assert!(tb.try_acquire(1).unwrap().is_allowed());
    assert!(tb.try_acquire(1).unwrap().is_denied());
    assert!(!tb.fleet_lease().unwrap().unwrap().leased);
}

/// A retune whose process is killed while it moves the keys of a keyed bucket (the new slot
/// staged, some keys moved to it, `ACTIVE` not yet naming it) is finished by the next retune
/// before it stages its own parameters: otherwise that retune would stage into the same slot
/// and skip the moved keys as already moved, reading their tokens, kept for the dead retune's
/// parameters, with its own. Here both keys have used their whole bucket at one instant, and
/// after the next retune (back to the first rate) at that instant neither admits.
#[test]
fn a_retune_killed_while_moving_keys_is_finished_by_the_next() {
    use crate::engine::keys::pair::PairWord;
    use crate::spec::Keyed;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000_000_000);
    let limiter = Limiter::builder()
        .keyed_limit("k", TokenBucket::per_second(1).burst(5), Keyed::new(64))
        .clock(clock)
        .create_or_open(dir.path().join("killed.shm"))
        .unwrap();
    let limit = limiter.limit("k").unwrap().into_site();
    for key in [&b"moved"[..], b"unmoved"] {
        assert!(Keyed(&limit).try_acquire_key(key, 5).unwrap().is_allowed());
        assert!(Keyed(&limit).try_acquire_key(key, 1).unwrap().is_denied());
    }
    // The retune that dies: 1,000/s staged, only the key "moved" moved to it, no activation.
    let r = crate::engine::bucket::stage_retune(
        limit.control_line(),
        Rate::per_second(1000).unwrap().emission_ns(),
        5,
        Some(false),
    )
    .unwrap();
    let tag = Keyed(&limit).key_tag(b"moved").unwrap();
    let now = limit.clock().now_ns();
    for slot in limit.key_table().unwrap() {
        let pair = slot.load();
        if pair.0 == tag {
            let moved = crate::engine::bucket::rescale_word(now, pair.1, r.old, r.new, r.tag);
            slot.cas(pair, (tag, moved)).unwrap();
        }
    }
    assert_eq!(crate::engine::bucket::active(limit.control_line()), 0);
    for key in [&b"moved"[..], b"unmoved"] {
        assert!(Keyed(&limit).peek_key(key, 1).unwrap().is_denied());
    }
    // The next retune, back to 1/s, at the same instant: both keys stay empty.
    limit.set_rate(Rate::per_second(1).unwrap()).unwrap();
    for key in [&b"moved"[..], b"unmoved"] {
        assert!(
            Keyed(&limit).try_acquire_key(key, 1).unwrap().is_denied(),
            "{} admitted at the instant its bucket was empty",
            String::from_utf8_lossy(key)
        );
    }
    // And every key's word names the active slot again.
    let active = crate::engine::bucket::active(limit.control_line());
    assert!(!crate::engine::keys::any_live_state(
        limit.key_table().unwrap(),
        |w| crate::engine::bucket::tag_of(w) != active
    ));
}

/// The same for an unkeyed bucket killed between moving its word and activating the slot.
#[test]
fn an_unkeyed_retune_killed_before_activating_is_finished_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000_000_000);
    let limiter = Limiter::builder()
        .limit("b", TokenBucket::per_second(1).burst(5))
        .clock(clock)
        .create_or_open(dir.path().join("killed.shm"))
        .unwrap();
    let b = limiter.token_bucket("b").unwrap();
    assert!(b.try_acquire(5).unwrap().is_allowed());
    let limit = limiter.limit("b").unwrap().into_site();
    let r = crate::engine::bucket::stage_retune(
        limit.control_line(),
        Rate::per_second(1000).unwrap().emission_ns(),
        5,
        Some(false),
    )
    .unwrap();
    Bucket(&limit).rescale_in(limit.control(0), r.old, r.new, r.tag);
    // Killed before `activate`: the next retune, back to 1/s, at the same instant.
    b.set_rate(Rate::per_second(1).unwrap()).unwrap();
    assert!(
        b.try_acquire(1).unwrap().is_denied(),
        "admitted from an empty bucket"
    );
    assert_eq!(
        crate::engine::bucket::active(limit.control_line()),
        crate::engine::bucket::tag_of(limit.control(0).load(Ordering::Acquire))
    );
}
