//! Every operation of the C ABI on a limit of every kind: the status and the last error each
//! answers, compared with [`EXPECTED`], the answers the untyped handle gave when every call
//! checked the kind (so that the typed handles change none of them, byte for byte).

use std::ffi::{c_char, CStr, CString};
use std::time::Duration;

use shmlimit::{
    Clock, Concurrency, FixedWindow, Keyed, Limiter, MonotonicClock, SlidingLog, TokenBucket,
};

use crate::compose::{shmlimit_acquire_all, shmlimit_refund_all};
use crate::keyed::*;
use crate::permit::*;
use crate::reserve::*;
use crate::retune::*;
use crate::types::{shmlimit_check, shmlimit_composed, shmlimit_decision};
use crate::*;

const KINDS: [&str; 7] = [
    "bucket",
    "window",
    "log",
    "permits",
    "keyed_bucket",
    "keyed_window",
    "keyed_permits",
];

fn outcome(status: shmlimit_status) -> String {
    if status == shmlimit_status::SHMLIMIT_OK {
        return "OK".into();
    }
    // SAFETY: shmlimit_last_error returns a NUL-terminated string valid until the next
    // failure on this thread.
    let text = unsafe { CStr::from_ptr(shmlimit_last_error()) }.to_string_lossy();
    format!("{status:?}: {text}")
}

fn decision(allowed: bool, cost: u64, origin: u64) -> shmlimit_decision {
    shmlimit_decision {
        allowed,
        shadow_denied: false,
        remaining: 0,
        retry_after_ns: 0,
        grant: [cost, 0],
        reserved: [0, origin],
        reset_after_ns: 0,
    }
}

/// Every call on the limit `kind`, one line each.
///
/// # Safety
///
/// `l` must be a live limit handle.
unsafe fn calls(l: *const shmlimit_limit, lines: &mut Vec<String>, kind: &str) {
    let now = MonotonicClock.now_ns();
    let ahead = now + 1_000_000_000;
    let mut d = decision(false, 0, 0);
    let (mut n, mut m, mut id, mut held, mut yes) = (0usize, 0usize, 0u64, 0u32, false);
    let denied = decision(false, 0, 0);
    let granted = decision(true, 1, 0);
    let foreign = decision(true, 1, 12345);
    let k = b"k".as_ptr();
    let mut booking = std::mem::MaybeUninit::uninit();
    let mut reservation: *mut shmlimit_reservation = std::ptr::null_mut();
    let mut push = |call: &str, status: shmlimit_status| {
        let answer = outcome(status).replace(&ahead.to_string(), "AHEAD");
        lines.push(format!("{kind} {call}: {answer}"));
    };
    // SAFETY: every pointer is live or NULL as each call allows; `composed` is always
    // initialised (zeroed, then written whole by each successful `shmlimit_acquire_all`).
    unsafe {
        push("acquire 1", shmlimit_acquire(l, 1, &mut d));
        push("acquire 0", shmlimit_acquire(l, 0, &mut d));
        push("peek 1", shmlimit_peek(l, 1, &mut d));
        push("peek 0", shmlimit_peek(l, 0, &mut d));
        push("acquire_at now", shmlimit_acquire_at(l, 1, now, &mut d));
        push("acquire_at 0 now", shmlimit_acquire_at(l, 0, now, &mut d));
        push("acquire_at ahead", shmlimit_acquire_at(l, 1, ahead, &mut d));
        push(
            "acquire_timeout 1",
            shmlimit_acquire_timeout(l, 1, 0, &mut d),
        );
        push(
            "acquire_timeout 0",
            shmlimit_acquire_timeout(l, 0, 0, &mut d),
        );
        push("refund denied", shmlimit_refund(l, &denied));
        push("refund granted", shmlimit_refund(l, &granted));
        push("refund foreign", shmlimit_refund(l, &foreign));
        push("refund_units 0", shmlimit_refund_units(l, &granted, 0));
        push("refund_units 1", shmlimit_refund_units(l, &granted, 1));
        push("acquire_key 1", shmlimit_acquire_key(l, k, 1, 1, &mut d));
        push("acquire_key 0", shmlimit_acquire_key(l, k, 1, 0, &mut d));
        push(
            "acquire_key empty",
            shmlimit_acquire_key(l, k, 0, 1, &mut d),
        );
        push("peek_key 1", shmlimit_peek_key(l, k, 1, 1, &mut d));
        push("peek_key 0", shmlimit_peek_key(l, k, 1, 0, &mut d));
        push(
            "acquire_key_at now",
            shmlimit_acquire_key_at(l, k, 1, 1, now, &mut d),
        );
        push(
            "acquire_key_at ahead",
            shmlimit_acquire_key_at(l, k, 1, 1, ahead, &mut d),
        );
        push(
            "acquire_key_at 0",
            shmlimit_acquire_key_at(l, k, 1, 0, now, &mut d),
        );
        push("refund_key denied", shmlimit_refund_key(l, k, 1, &denied));
        push("refund_key empty", shmlimit_refund_key(l, k, 0, &denied));
        push(
            "key_occupancy",
            shmlimit_limit_key_occupancy(l, &mut n, &mut m),
        );
        push(
            "reclaim_idle_keys",
            shmlimit_limit_reclaim_idle_keys(l, &mut n),
        );
        push("key_tag", shmlimit_key_tag(l, k, 1, &mut id));
        push("key_tag empty", shmlimit_key_tag(l, k, 0, &mut id));
        push(
            "reserve 1",
            shmlimit_reserve(l, 1, 0, booking.as_mut_ptr(), &mut reservation),
        );
        shmlimit_reservation_free(reservation);
        push(
            "reserve 0",
            shmlimit_reserve(l, 0, 0, booking.as_mut_ptr(), &mut reservation),
        );
        push("permit_acquire", shmlimit_permit_acquire(l, &mut id));
        push("permit_release", shmlimit_permit_release(l, id, &mut yes));
        push(
            "permit_acquire_timeout",
            shmlimit_permit_acquire_timeout(l, 0, &mut id),
        );
        push("permit_release 0", shmlimit_permit_release(l, 0, &mut yes));
        push(
            "permit_acquire_key",
            shmlimit_permit_acquire_key(l, k, 1, &mut id),
        );
        push(
            "permit_acquire_key empty",
            shmlimit_permit_acquire_key(l, k, 0, &mut id),
        );
        push(
            "permit_acquire_key_timeout",
            shmlimit_permit_acquire_key_timeout(l, k, 1, 0, &mut id),
        );
        push(
            "permit_key_held",
            shmlimit_permit_key_held(l, k, 1, &mut held),
        );
        push(
            "permit_key_held empty",
            shmlimit_permit_key_held(l, k, 0, &mut held),
        );
        push(
            "permit_holders",
            shmlimit_permit_holders(l, std::ptr::null_mut(), 0, &mut n),
        );
        push(
            "permit_reclaim_dead",
            shmlimit_permit_reclaim_dead(l, &mut n),
        );
        push("set_rate", shmlimit_limit_set_rate(l, 10, 1_000_000_000));
        push(
            "set_token_bucket",
            shmlimit_limit_set_token_bucket(l, 10, 10, 1_000_000_000),
        );
        push("set_limit", shmlimit_limit_set_limit(l, 10));
        // Zeroed: a valid `shmlimit_composed` (not allowed) until a call writes a whole one, so
        // that reading `allowed` after a failed call is defined.
        let mut composed = std::mem::MaybeUninit::<shmlimit_composed>::zeroed();
        for (what, key, key_len) in [("unkeyed", std::ptr::null(), 0), ("keyed", k, 1)] {
            let checks = [shmlimit_check {
                limit: l,
                cost: 1,
                key,
                key_len,
            }];
            push(
                &format!("acquire_all {what}"),
                shmlimit_acquire_all(checks.as_ptr(), 1, composed.as_mut_ptr()),
            );
            if composed.assume_init_ref().allowed {
                push(
                    &format!("refund_all {what}"),
                    shmlimit_refund_all(checks.as_ptr(), 1, composed.as_ptr()),
                );
            }
        }
    }
}

/// The lines of every call on every kind, on a fresh file.
fn answers() -> Vec<String> {
    let path = std::env::temp_dir().join(format!("shmlimit-every-kind-{}.shm", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let minute = Duration::from_secs(60);
    drop(
        Limiter::builder()
            .limit("bucket", TokenBucket::per_second(10).burst(10))
            .limit("window", FixedWindow::new(10, minute))
            .limit("log", SlidingLog::new(10, minute))
            .limit("permits", Concurrency::new(2))
            .keyed_limit(
                "keyed_bucket",
                TokenBucket::per_second(10).burst(10),
                Keyed::new(16),
            )
            .keyed_limit("keyed_window", FixedWindow::new(10, minute), Keyed::new(16))
            .keyed_limit("keyed_permits", Concurrency::new(2), Keyed::new(16))
            .create_or_open(&path)
            .expect("create the file"),
    );
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).expect("a path");
    let mut limiter = std::ptr::null_mut();
    let mut lines = Vec::new();
    // SAFETY: valid strings and out-pointers; each handle is freed once.
    unsafe {
        assert_eq!(
            shmlimit_limiter_open(c_path.as_ptr(), std::ptr::null(), &mut limiter),
            shmlimit_status::SHMLIMIT_OK
        );
        for kind in KINDS {
            let name = CString::new(kind).expect("a name");
            let mut limit = std::ptr::null_mut();
            assert_eq!(
                shmlimit_limiter_limit(limiter, name.as_ptr() as *const c_char, &mut limit),
                shmlimit_status::SHMLIMIT_OK
            );
            calls(limit, &mut lines, kind);
            shmlimit_limit_free(limit);
        }
        shmlimit_limiter_free(limiter);
    }
    let _ = std::fs::remove_file(&path);
    lines
}

#[test]
fn every_call_on_every_kind_answers_as_before() {
    let got = answers();
    if std::env::var_os("SHMLIMIT_PRINT_ANSWERS").is_some() {
        println!("{}", got.join("\n"));
    }
    let expected: Vec<&str> = EXPECTED.lines().collect();
    for (got, expected) in got.iter().zip(&expected) {
        assert_eq!(got, expected);
    }
    assert_eq!(got.len(), expected.len());
}

/// What each call answered before the C ABI held typed handles (`SHMLIMIT_PRINT_ANSWERS=1`
/// prints the answers).
const EXPECTED: &str = "\
bucket acquire 1: OK\n\
bucket acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
bucket peek 1: OK\n\
bucket peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
bucket acquire_at now: OK\n\
bucket acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
bucket acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
bucket acquire_timeout 1: OK\n\
bucket acquire_timeout 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_timeout: a cost must be at least 1\n\
bucket refund denied: OK\n\
bucket refund granted: OK\n\
bucket refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `bucket`: this limit did not make this grant: refund it on the limit that did\n\
bucket refund_units 0: OK\n\
bucket refund_units 1: OK\n\
bucket acquire_key 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
bucket acquire_key empty: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket peek_key 1: SHMLIMIT_WRONG_KIND: shmlimit_peek_key: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
bucket acquire_key_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key_at: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
bucket acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
bucket refund_key denied: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket refund_key empty: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket key_occupancy: SHMLIMIT_WRONG_KIND: shmlimit_limit_key_occupancy: limit `bucket`: this limit is not keyed\n\
bucket reclaim_idle_keys: SHMLIMIT_WRONG_KIND: shmlimit_limit_reclaim_idle_keys: limit `bucket`: this limit is not keyed\n\
bucket key_tag: OK\n\
bucket key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
bucket reserve 1: OK\n\
bucket reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
bucket permit_acquire: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_release: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_acquire_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_timeout: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_release 0: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_acquire_key: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
bucket permit_acquire_key_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key_timeout: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_key_held: SHMLIMIT_WRONG_KIND: shmlimit_permit_key_held: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
bucket permit_holders: SHMLIMIT_WRONG_KIND: shmlimit_permit_holders: limit `bucket`: this limit is not a concurrency limit\n\
bucket permit_reclaim_dead: SHMLIMIT_WRONG_KIND: shmlimit_permit_reclaim_dead: limit `bucket`: this limit is not a concurrency limit\n\
bucket set_rate: OK\n\
bucket set_token_bucket: OK\n\
bucket set_limit: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_limit: limit `bucket`: this limit is not a fixed or sliding window\n\
bucket acquire_all unkeyed: OK\n\
bucket refund_all unkeyed: OK\n\
bucket acquire_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `bucket`: this limit is not keyed: use try_acquire\n\
bucket refund_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_refund_all: limit `bucket`: this limit is not keyed: use try_acquire\n\
window acquire 1: OK\n\
window acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
window peek 1: OK\n\
window peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
window acquire_at now: OK\n\
window acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
window acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
window acquire_timeout 1: OK\n\
window acquire_timeout 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_timeout: a cost must be at least 1\n\
window refund denied: OK\n\
window refund granted: OK\n\
window refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `window`: this limit did not make this grant: refund it on the limit that did\n\
window refund_units 0: OK\n\
window refund_units 1: OK\n\
window acquire_key 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `window`: this limit is not keyed: use try_acquire\n\
window acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
window acquire_key empty: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `window`: this limit is not keyed: use try_acquire\n\
window peek_key 1: SHMLIMIT_WRONG_KIND: shmlimit_peek_key: limit `window`: this limit is not keyed: use try_acquire\n\
window peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
window acquire_key_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key_at: limit `window`: this limit is not keyed: use try_acquire\n\
window acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
window acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
window refund_key denied: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `window`: this limit is not keyed: use try_acquire\n\
window refund_key empty: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `window`: this limit is not keyed: use try_acquire\n\
window key_occupancy: SHMLIMIT_WRONG_KIND: shmlimit_limit_key_occupancy: limit `window`: this limit is not keyed\n\
window reclaim_idle_keys: SHMLIMIT_WRONG_KIND: shmlimit_limit_reclaim_idle_keys: limit `window`: this limit is not keyed\n\
window key_tag: OK\n\
window key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
window reserve 1: SHMLIMIT_WRONG_KIND: shmlimit_reserve: limit `window`: this limit is not a token bucket: use acquire_timeout\n\
window reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
window permit_acquire: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire: limit `window`: this limit is not a concurrency limit\n\
window permit_release: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `window`: this limit is not a concurrency limit\n\
window permit_acquire_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_timeout: limit `window`: this limit is not a concurrency limit\n\
window permit_release 0: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `window`: this limit is not a concurrency limit\n\
window permit_acquire_key: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key: limit `window`: this limit is not a concurrency limit\n\
window permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
window permit_acquire_key_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key_timeout: limit `window`: this limit is not a concurrency limit\n\
window permit_key_held: SHMLIMIT_WRONG_KIND: shmlimit_permit_key_held: limit `window`: this limit is not a concurrency limit\n\
window permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
window permit_holders: SHMLIMIT_WRONG_KIND: shmlimit_permit_holders: limit `window`: this limit is not a concurrency limit\n\
window permit_reclaim_dead: SHMLIMIT_WRONG_KIND: shmlimit_permit_reclaim_dead: limit `window`: this limit is not a concurrency limit\n\
window set_rate: OK\n\
window set_token_bucket: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_token_bucket: limit `window`: this limit is not a token bucket\n\
window set_limit: OK\n\
window acquire_all unkeyed: OK\n\
window refund_all unkeyed: OK\n\
window acquire_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `window`: this limit is not keyed: use try_acquire\n\
window refund_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_refund_all: limit `window`: this limit is not keyed: use try_acquire\n\
log acquire 1: OK\n\
log acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
log peek 1: OK\n\
log peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
log acquire_at now: OK\n\
log acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
log acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
log acquire_timeout 1: OK\n\
log acquire_timeout 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_timeout: a cost must be at least 1\n\
log refund denied: OK\n\
log refund granted: OK\n\
log refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `log`: this limit did not make this grant: refund it on the limit that did\n\
log refund_units 0: OK\n\
log refund_units 1: OK\n\
log acquire_key 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `log`: this limit is not keyed: use try_acquire\n\
log acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
log acquire_key empty: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `log`: this limit is not keyed: use try_acquire\n\
log peek_key 1: SHMLIMIT_WRONG_KIND: shmlimit_peek_key: limit `log`: this limit is not keyed: use try_acquire\n\
log peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
log acquire_key_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key_at: limit `log`: this limit is not keyed: use try_acquire\n\
log acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
log acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
log refund_key denied: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `log`: this limit is not keyed: use try_acquire\n\
log refund_key empty: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `log`: this limit is not keyed: use try_acquire\n\
log key_occupancy: SHMLIMIT_WRONG_KIND: shmlimit_limit_key_occupancy: limit `log`: this limit is not keyed\n\
log reclaim_idle_keys: SHMLIMIT_WRONG_KIND: shmlimit_limit_reclaim_idle_keys: limit `log`: this limit is not keyed\n\
log key_tag: OK\n\
log key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
log reserve 1: SHMLIMIT_WRONG_KIND: shmlimit_reserve: limit `log`: this limit is not a token bucket: use acquire_timeout\n\
log reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
log permit_acquire: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire: limit `log`: this limit is not a concurrency limit\n\
log permit_release: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `log`: this limit is not a concurrency limit\n\
log permit_acquire_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_timeout: limit `log`: this limit is not a concurrency limit\n\
log permit_release 0: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `log`: this limit is not a concurrency limit\n\
log permit_acquire_key: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key: limit `log`: this limit is not a concurrency limit\n\
log permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
log permit_acquire_key_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key_timeout: limit `log`: this limit is not a concurrency limit\n\
log permit_key_held: SHMLIMIT_WRONG_KIND: shmlimit_permit_key_held: limit `log`: this limit is not a concurrency limit\n\
log permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
log permit_holders: SHMLIMIT_WRONG_KIND: shmlimit_permit_holders: limit `log`: this limit is not a concurrency limit\n\
log permit_reclaim_dead: SHMLIMIT_WRONG_KIND: shmlimit_permit_reclaim_dead: limit `log`: this limit is not a concurrency limit\n\
log set_rate: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_rate: limit `log`: this limit has no rate to change\n\
log set_token_bucket: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_token_bucket: limit `log`: this limit is not a token bucket\n\
log set_limit: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_limit: limit `log`: this limit is not a fixed or sliding window\n\
log acquire_all unkeyed: OK\n\
log refund_all unkeyed: OK\n\
log acquire_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `log`: this limit is not keyed: use try_acquire\n\
log refund_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_refund_all: limit `log`: this limit is not keyed: use try_acquire\n\
permits acquire 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire: limit `permits`: this limit is a concurrency limit: use try_acquire_permit\n\
permits acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
permits peek 1: SHMLIMIT_WRONG_KIND: shmlimit_peek: limit `permits`: this limit is a concurrency limit: use try_acquire_permit\n\
permits peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
permits acquire_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_at: limit `permits`: this limit is a concurrency limit: use try_acquire_permit\n\
permits acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
permits acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
permits acquire_timeout 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_timeout: limit `permits`: this limit is a concurrency limit: use acquire_permit_timeout\n\
permits acquire_timeout 0: SHMLIMIT_WRONG_KIND: shmlimit_acquire_timeout: limit `permits`: this limit is a concurrency limit: use acquire_permit_timeout\n\
permits refund denied: OK\n\
permits refund granted: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `permits`: this limit is a concurrency limit: drop the permit\n\
permits refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `permits`: this limit did not make this grant: refund it on the limit that did\n\
permits refund_units 0: OK\n\
permits refund_units 1: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `permits`: this limit is a concurrency limit: drop the permit\n\
permits acquire_key 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `permits`: this limit is not keyed: use try_acquire\n\
permits acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
permits acquire_key empty: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `permits`: this limit is not keyed: use try_acquire\n\
permits peek_key 1: SHMLIMIT_WRONG_KIND: shmlimit_peek_key: limit `permits`: this limit is not keyed: use try_acquire\n\
permits peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
permits acquire_key_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key_at: limit `permits`: this limit is not keyed: use try_acquire\n\
permits acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
permits acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
permits refund_key denied: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `permits`: this limit is not keyed: use try_acquire\n\
permits refund_key empty: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `permits`: this limit is not keyed: use try_acquire\n\
permits key_occupancy: SHMLIMIT_WRONG_KIND: shmlimit_limit_key_occupancy: limit `permits`: this limit is not keyed\n\
permits reclaim_idle_keys: SHMLIMIT_WRONG_KIND: shmlimit_limit_reclaim_idle_keys: limit `permits`: this limit is not keyed\n\
permits key_tag: OK\n\
permits key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
permits reserve 1: SHMLIMIT_WRONG_KIND: shmlimit_reserve: limit `permits`: this limit is not a token bucket: use acquire_timeout\n\
permits reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
permits permit_acquire: OK\n\
permits permit_release: OK\n\
permits permit_acquire_timeout: OK\n\
permits permit_release 0: OK\n\
permits permit_acquire_key: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key: limit `permits`: this limit is not keyed: use try_acquire_permit\n\
permits permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
permits permit_acquire_key_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key_timeout: limit `permits`: this limit is not keyed: use try_acquire_permit\n\
permits permit_key_held: SHMLIMIT_WRONG_KIND: shmlimit_permit_key_held: limit `permits`: this limit is not keyed: use try_acquire_permit\n\
permits permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
permits permit_holders: OK\n\
permits permit_reclaim_dead: OK\n\
permits set_rate: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_rate: limit `permits`: this limit has no rate to change\n\
permits set_token_bucket: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_token_bucket: limit `permits`: this limit is not a token bucket\n\
permits set_limit: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_limit: limit `permits`: this limit is not a fixed or sliding window\n\
permits acquire_all unkeyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `permits`: this limit is a concurrency limit: use try_acquire_permit\n\
permits acquire_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `permits`: this limit is not keyed: use try_acquire\n\
keyed_bucket acquire 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire: limit `keyed_bucket`: this limit is keyed: use try_acquire_key\n\
keyed_bucket acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
keyed_bucket peek 1: SHMLIMIT_WRONG_KIND: shmlimit_peek: limit `keyed_bucket`: this limit is keyed: use try_acquire_key\n\
keyed_bucket peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
keyed_bucket acquire_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_at: limit `keyed_bucket`: this limit is keyed: use try_acquire_key\n\
keyed_bucket acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
keyed_bucket acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
keyed_bucket acquire_timeout 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_timeout: limit `keyed_bucket`: this limit is keyed: reservations are for unkeyed token buckets\n\
keyed_bucket acquire_timeout 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_timeout: a cost must be at least 1\n\
keyed_bucket refund denied: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_bucket`: this limit is keyed: use refund_key\n\
keyed_bucket refund granted: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_bucket`: this limit is keyed: use refund_key\n\
keyed_bucket refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_bucket`: this limit is keyed: use refund_key\n\
keyed_bucket refund_units 0: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `keyed_bucket`: this limit is keyed: use refund_key\n\
keyed_bucket refund_units 1: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `keyed_bucket`: this limit is keyed: use refund_key\n\
keyed_bucket acquire_key 1: OK\n\
keyed_bucket acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
keyed_bucket acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_acquire_key: invalid key: a key must be at least one byte\n\
keyed_bucket peek_key 1: OK\n\
keyed_bucket peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
keyed_bucket acquire_key_at now: OK\n\
keyed_bucket acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
keyed_bucket acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
keyed_bucket refund_key denied: OK\n\
keyed_bucket refund_key empty: SHMLIMIT_INVALID_KEY: shmlimit_refund_key: invalid key: a key must be at least one byte\n\
keyed_bucket key_occupancy: OK\n\
keyed_bucket reclaim_idle_keys: OK\n\
keyed_bucket key_tag: OK\n\
keyed_bucket key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
keyed_bucket reserve 1: SHMLIMIT_WRONG_KIND: shmlimit_reserve: limit `keyed_bucket`: this limit is keyed: reservations are for unkeyed token buckets\n\
keyed_bucket reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
keyed_bucket permit_acquire: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_release: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_acquire_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_timeout: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_release 0: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_acquire_key: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
keyed_bucket permit_acquire_key_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key_timeout: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_key_held: SHMLIMIT_WRONG_KIND: shmlimit_permit_key_held: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
keyed_bucket permit_holders: SHMLIMIT_WRONG_KIND: shmlimit_permit_holders: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket permit_reclaim_dead: SHMLIMIT_WRONG_KIND: shmlimit_permit_reclaim_dead: limit `keyed_bucket`: this limit is not a concurrency limit\n\
keyed_bucket set_rate: OK\n\
keyed_bucket set_token_bucket: OK\n\
keyed_bucket set_limit: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_limit: limit `keyed_bucket`: this limit is not a fixed or sliding window\n\
keyed_bucket acquire_all unkeyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `keyed_bucket`: this limit is keyed: use try_acquire_key\n\
keyed_bucket acquire_all keyed: OK\n\
keyed_bucket refund_all keyed: OK\n\
keyed_window acquire 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire: limit `keyed_window`: this limit is keyed: use try_acquire_key\n\
keyed_window acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
keyed_window peek 1: SHMLIMIT_WRONG_KIND: shmlimit_peek: limit `keyed_window`: this limit is keyed: use try_acquire_key\n\
keyed_window peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
keyed_window acquire_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_at: limit `keyed_window`: this limit is keyed: use try_acquire_key\n\
keyed_window acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
keyed_window acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
keyed_window acquire_timeout 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_timeout: limit `keyed_window`: this limit is keyed: use try_acquire_key\n\
keyed_window acquire_timeout 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_timeout: a cost must be at least 1\n\
keyed_window refund denied: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_window`: this limit is keyed: use refund_key\n\
keyed_window refund granted: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_window`: this limit is keyed: use refund_key\n\
keyed_window refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_window`: this limit is keyed: use refund_key\n\
keyed_window refund_units 0: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `keyed_window`: this limit is keyed: use refund_key\n\
keyed_window refund_units 1: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `keyed_window`: this limit is keyed: use refund_key\n\
keyed_window acquire_key 1: OK\n\
keyed_window acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
keyed_window acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_acquire_key: invalid key: a key must be at least one byte\n\
keyed_window peek_key 1: OK\n\
keyed_window peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
keyed_window acquire_key_at now: OK\n\
keyed_window acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
keyed_window acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
keyed_window refund_key denied: OK\n\
keyed_window refund_key empty: SHMLIMIT_INVALID_KEY: shmlimit_refund_key: invalid key: a key must be at least one byte\n\
keyed_window key_occupancy: OK\n\
keyed_window reclaim_idle_keys: OK\n\
keyed_window key_tag: OK\n\
keyed_window key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
keyed_window reserve 1: SHMLIMIT_WRONG_KIND: shmlimit_reserve: limit `keyed_window`: this limit is keyed: reservations are for unkeyed token buckets\n\
keyed_window reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
keyed_window permit_acquire: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_release: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_acquire_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_timeout: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_release 0: SHMLIMIT_WRONG_KIND: shmlimit_permit_release: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_acquire_key: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
keyed_window permit_acquire_key_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_key_timeout: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_key_held: SHMLIMIT_WRONG_KIND: shmlimit_permit_key_held: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
keyed_window permit_holders: SHMLIMIT_WRONG_KIND: shmlimit_permit_holders: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window permit_reclaim_dead: SHMLIMIT_WRONG_KIND: shmlimit_permit_reclaim_dead: limit `keyed_window`: this limit is not a concurrency limit\n\
keyed_window set_rate: OK\n\
keyed_window set_token_bucket: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_token_bucket: limit `keyed_window`: this limit is not a token bucket\n\
keyed_window set_limit: OK\n\
keyed_window acquire_all unkeyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `keyed_window`: this limit is keyed: use try_acquire_key\n\
keyed_window acquire_all keyed: OK\n\
keyed_window refund_all keyed: OK\n\
keyed_permits acquire 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire: limit `keyed_permits`: this limit is keyed: use try_acquire_key\n\
keyed_permits acquire 0: SHMLIMIT_ZERO_COST: shmlimit_acquire: a cost must be at least 1\n\
keyed_permits peek 1: SHMLIMIT_WRONG_KIND: shmlimit_peek: limit `keyed_permits`: this limit is keyed: use try_acquire_key\n\
keyed_permits peek 0: SHMLIMIT_ZERO_COST: shmlimit_peek: a cost must be at least 1\n\
keyed_permits acquire_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_at: limit `keyed_permits`: this limit is keyed: use try_acquire_key\n\
keyed_permits acquire_at 0 now: SHMLIMIT_ZERO_COST: shmlimit_acquire_at: a cost must be at least 1\n\
keyed_permits acquire_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
keyed_permits acquire_timeout 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_timeout: limit `keyed_permits`: this limit is a concurrency limit: use acquire_permit_timeout\n\
keyed_permits acquire_timeout 0: SHMLIMIT_WRONG_KIND: shmlimit_acquire_timeout: limit `keyed_permits`: this limit is a concurrency limit: use acquire_permit_timeout\n\
keyed_permits refund denied: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_permits`: this limit is keyed: use refund_key\n\
keyed_permits refund granted: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_permits`: this limit is keyed: use refund_key\n\
keyed_permits refund foreign: SHMLIMIT_WRONG_KIND: shmlimit_refund: limit `keyed_permits`: this limit is keyed: use refund_key\n\
keyed_permits refund_units 0: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `keyed_permits`: this limit is keyed: use refund_key\n\
keyed_permits refund_units 1: SHMLIMIT_WRONG_KIND: shmlimit_refund_units: limit `keyed_permits`: this limit is keyed: use refund_key\n\
keyed_permits acquire_key 1: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n\
keyed_permits acquire_key 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key: a cost must be at least 1\n\
keyed_permits acquire_key empty: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n\
keyed_permits peek_key 1: SHMLIMIT_WRONG_KIND: shmlimit_peek_key: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n\
keyed_permits peek_key 0: SHMLIMIT_ZERO_COST: shmlimit_peek_key: a cost must be at least 1\n\
keyed_permits acquire_key_at now: SHMLIMIT_WRONG_KIND: shmlimit_acquire_key_at: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n\
keyed_permits acquire_key_at ahead: SHMLIMIT_CLOCK_OUT_OF_RANGE: shmlimit_acquire_key_at: time AHEAD ns is beyond what the state can encode (2305843009213693952 ns) or ahead of the limit's clock by more than 1 ms\n\
keyed_permits acquire_key_at 0: SHMLIMIT_ZERO_COST: shmlimit_acquire_key_at: a cost must be at least 1\n\
keyed_permits refund_key denied: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n\
keyed_permits refund_key empty: SHMLIMIT_WRONG_KIND: shmlimit_refund_key: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n\
keyed_permits key_occupancy: OK\n\
keyed_permits reclaim_idle_keys: OK\n\
keyed_permits key_tag: OK\n\
keyed_permits key_tag empty: SHMLIMIT_INVALID_KEY: shmlimit_key_tag: invalid key: a key must be at least one byte\n\
keyed_permits reserve 1: SHMLIMIT_WRONG_KIND: shmlimit_reserve: limit `keyed_permits`: this limit is keyed: reservations are for unkeyed token buckets\n\
keyed_permits reserve 0: SHMLIMIT_ZERO_COST: shmlimit_reserve: a cost must be at least 1\n\
keyed_permits permit_acquire: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire: limit `keyed_permits`: this limit is keyed: use try_acquire_key_permit\n\
keyed_permits permit_release: OK\n\
keyed_permits permit_acquire_timeout: SHMLIMIT_WRONG_KIND: shmlimit_permit_acquire_timeout: limit `keyed_permits`: this limit is keyed: use try_acquire_key_permit\n\
keyed_permits permit_release 0: OK\n\
keyed_permits permit_acquire_key: OK\n\
keyed_permits permit_acquire_key empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_acquire_key: invalid key: a key must be at least one byte\n\
keyed_permits permit_acquire_key_timeout: OK\n\
keyed_permits permit_key_held: OK\n\
keyed_permits permit_key_held empty: SHMLIMIT_INVALID_KEY: shmlimit_permit_key_held: invalid key: a key must be at least one byte\n\
keyed_permits permit_holders: OK\n\
keyed_permits permit_reclaim_dead: OK\n\
keyed_permits set_rate: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_rate: limit `keyed_permits`: this limit has no rate to change\n\
keyed_permits set_token_bucket: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_token_bucket: limit `keyed_permits`: this limit is not a token bucket\n\
keyed_permits set_limit: SHMLIMIT_WRONG_KIND: shmlimit_limit_set_limit: limit `keyed_permits`: this limit is not a fixed or sliding window\n\
keyed_permits acquire_all unkeyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `keyed_permits`: this limit is keyed: use try_acquire_key\n\
keyed_permits acquire_all keyed: SHMLIMIT_WRONG_KIND: shmlimit_acquire_all: limit `keyed_permits`: this limit is a keyed concurrency limit: use try_acquire_key_permit\n";
