//! The time until a limit is whole again (`Decision::reset_after_ns`, the `t` of the `RateLimit`
//! header) for every algorithm, keyed or not, driven by a manual clock on a real limiter file;
//! and the header values rendered from it.

mod common;

use std::time::Duration;

use common::{MS, SEC};
use shmlimit::{
    Alignment, FixedWindow, Keyed, Limiter, ManualClock, Policy, RateLimitHeaders, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// A window boundary (every window length used here divides it), far from zero.
const BASE: u64 = 3_600 * SEC;

fn limiter(clock: &ManualClock) -> (tempfile::TempDir, Limiter<ManualClock>) {
    let (dir, path) = common::temp_path("reset.shm");
    let limiter = Limiter::builder()
        .clock(clock.clone())
        // 10 per second, burst 4: T = 100 ms.
        .limit("bucket", TokenBucket::per_second(10).burst(4))
        .limit(
            "fixed",
            FixedWindow::new(3, Duration::from_secs(10)).aligned(Alignment::Monotonic),
        )
        .limit(
            "sliding",
            SlidingWindow {
                limit: 4,
                window: Duration::from_secs(10),
                alignment: Alignment::Monotonic,
            },
        )
        .limit("log", SlidingLog::new(3, Duration::from_secs(10)))
        .keyed_limit(
            "per_user",
            TokenBucket::per_second(10).burst(4),
            Keyed::new(64),
        )
        .create_or_open(&path)
        .expect("create limiter file");
    (dir, limiter)
}

#[test]
fn a_token_bucket_resets_when_its_tat_is_reached() {
    let clock = ManualClock::new(BASE);
    let (_dir, limiter) = limiter(&clock);
    let bucket = limiter.token_bucket("bucket").unwrap();
    assert_eq!(bucket.peek(1).unwrap().reset_after_ns(), 100 * MS);
    let d = bucket.try_acquire(3).unwrap();
    assert_eq!(d.reset_after_ns(), 300 * MS);
    clock.advance(50 * MS);
    let d = bucket.try_acquire(1).unwrap();
    assert_eq!(d.reset_after_ns(), 350 * MS);
    // Empty now: a denial reports the same reset, and the retry-after of one token.
    let d = bucket.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.reset_after_ns(), 350 * MS);
    assert_eq!(d.retry_after_ns(), 50 * MS);
    clock.advance(350 * MS);
    assert_eq!(bucket.peek(1).unwrap().reset_after_ns(), 100 * MS);
}

#[test]
fn a_fixed_window_resets_at_its_end() {
    let clock = ManualClock::new(BASE + 4 * SEC);
    let (_dir, limiter) = limiter(&clock);
    let fixed = limiter.window("fixed").unwrap();
    assert_eq!(fixed.try_acquire(3).unwrap().reset_after_ns(), 6 * SEC);
    let d = fixed.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.reset_after_ns(), 6 * SEC);
    clock.advance(6 * SEC);
    assert_eq!(fixed.peek(1).unwrap().reset_after_ns(), 10 * SEC);
}

#[test]
fn a_sliding_window_resets_when_its_estimate_has_decayed() {
    let clock = ManualClock::new(BASE + 4 * SEC);
    let (_dir, limiter) = limiter(&clock);
    let sliding = limiter.window("sliding").unwrap();
    // Counts of this window weigh until the end of the next one.
    assert_eq!(sliding.try_acquire(2).unwrap().reset_after_ns(), 16 * SEC);
    clock.advance(10 * SEC);
    // Nothing new in this window (a denial adds nothing): the previous counts decay by its end.
    let d = sliding.try_acquire(4).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.reset_after_ns(), 6 * SEC);
    // A peek reports the reset of the decision it previews: one more unit in this window.
    assert_eq!(sliding.peek(1).unwrap().reset_after_ns(), 16 * SEC);
    clock.advance(6 * SEC);
    assert_eq!(sliding.peek(4).unwrap().reset_after_ns(), 20 * SEC);
}

#[test]
fn a_sliding_log_resets_when_its_newest_admission_expires() {
    let clock = ManualClock::new(BASE);
    let (_dir, limiter) = limiter(&clock);
    let log = limiter.sliding_log("log").unwrap();
    assert_eq!(log.try_acquire(1).unwrap().reset_after_ns(), 10 * SEC);
    clock.advance(2 * SEC);
    assert_eq!(log.try_acquire(2).unwrap().reset_after_ns(), 10 * SEC);
    clock.advance(3 * SEC);
    let d = log.try_acquire(1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.retry_after_ns(), 5 * SEC);
    assert_eq!(d.reset_after_ns(), 7 * SEC);
    // A cost above 1 is checked against the oldest entries first; the reset is the newest's.
    let d = log.try_acquire(2).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.reset_after_ns(), 7 * SEC);
}

#[test]
fn keyed_states_reset_like_their_template() {
    let clock = ManualClock::new(BASE);
    let (_dir, limiter) = limiter(&clock);
    let per_user = limiter.keyed_token_bucket("per_user").unwrap();
    assert_eq!(
        per_user
            .try_acquire_key(b"alice", 4)
            .unwrap()
            .reset_after_ns(),
        400 * MS
    );
    let d = per_user.try_acquire_key(b"alice", 1).unwrap();
    assert!(d.is_denied());
    assert_eq!(d.reset_after_ns(), 400 * MS);
    assert_eq!(
        per_user.peek_key(b"bob", 1).unwrap().reset_after_ns(),
        100 * MS
    );
}

#[test]
fn headers_render_the_core_values_of_every_check() {
    let clock = ManualClock::new(BASE + 4 * SEC);
    let (_dir, limiter) = limiter(&clock);
    let bucket = limiter.token_bucket("bucket").unwrap();
    let fixed = limiter.window("fixed").unwrap();
    assert_eq!(
        bucket.policy().unwrap(),
        Some(Policy {
            quota: 10,
            window_secs: 1
        })
    );
    let b = bucket.try_acquire(1).unwrap();
    let f = fixed.try_acquire(3).unwrap();
    let headers =
        RateLimitHeaders::for_decisions(&[(bucket.as_limit(), &b), (fixed.as_limit(), &f)])
            .unwrap();
    assert_eq!(
        headers.rate_limit_policy,
        "\"bucket\";q=10;w=1, \"fixed\";q=3;w=10"
    );
    assert_eq!(headers.rate_limit, "\"bucket\";r=3;t=1, \"fixed\";r=0;t=6");
    assert_eq!(headers.retry_after, None);
    let denied = fixed.try_acquire(1).unwrap();
    let headers = RateLimitHeaders::for_decisions(&[(fixed.as_limit(), &denied)]).unwrap();
    assert_eq!(headers.retry_after.as_deref(), Some("6"));
    // A retune shows in the policy at once.
    bucket
        .set_token_bucket(4, shmlimit::Rate::per_second(20).unwrap())
        .unwrap();
    assert_eq!(
        bucket.policy().unwrap(),
        Some(Policy {
            quota: 20,
            window_secs: 1
        })
    );
}
