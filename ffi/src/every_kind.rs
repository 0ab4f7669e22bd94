//! Every operation of the C ABI on a limit of every kind: the status and the last error each
//! answers on a real file, compared line by line with the frozen table `every_kind/answers.txt`
//! (so that no change of the handles changes an answer, byte for byte, unnoticed). The rows of
//! the rate and concurrency kinds and their calls are the answers the untyped handle gave when
//! every call checked the kind; the adaptive and counters kinds, and their calls on every kind,
//! were added as the typed handles answered them; those three kinds answer a call they do not
//! have naming their own calls (`shmlimit_bindings::handle::wrong::own_calls`), and the
//! adaptive kinds have the permit calls by id. `SHMLIMIT_PRINT_ANSWERS=1` prints the answers,
//! to write the table anew when an answer changes on purpose.

use std::ffi::{c_char, CStr, CString};
use std::time::Duration;

use shmlimit::{
    AdaptiveConcurrency, Clock, Concurrency, Counters, FixedWindow, Keyed, Limiter, MonotonicClock,
    SlidingLog, TokenBucket,
};

use crate::adaptive::*;
use crate::adaptive_tuning::shmlimit_adaptive_tuning_of;
use crate::compose::{shmlimit_acquire_all, shmlimit_refund_all};
use crate::counters::*;
use crate::keyed::*;
use crate::keyed_adaptive::*;
use crate::permit::*;
use crate::reserve::*;
use crate::retune::*;
use crate::types::{shmlimit_check, shmlimit_composed, shmlimit_decision};
use crate::*;

const KINDS: [&str; 10] = [
    "bucket",
    "window",
    "log",
    "permits",
    "keyed_bucket",
    "keyed_window",
    "keyed_permits",
    "adaptive",
    "keyed_adaptive",
    "counters",
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

/// Every adaptive concurrency call on the limit `kind`, one line each; a permit granted is
/// released (a bad outcome first, refused).
///
/// # Safety
///
/// `l` must be a live limit handle.
unsafe fn adaptive_calls(l: *const shmlimit_limit, lines: &mut Vec<String>, kind: &str) {
    let k = b"k".as_ptr();
    let mut info = shmlimit_adaptive_info::default();
    let mut tuning = std::mem::MaybeUninit::uninit();
    let mut push = |call: &str, status: shmlimit_status| {
        lines.push(format!("{kind} {call}: {}", outcome(status)));
    };
    // SAFETY: every pointer is live or NULL as each call allows; a permit granted is released
    // (and freed) once, by the last call on it.
    unsafe {
        let mut permit = std::ptr::null_mut();
        push(
            "adaptive_acquire",
            shmlimit_adaptive_acquire(l, 0, &mut permit),
        );
        if !permit.is_null() {
            push("adaptive_release 4", shmlimit_adaptive_release(permit, 4));
            push(
                "adaptive_release",
                shmlimit_adaptive_release(permit, shmlimit_outcome::SHMLIMIT_OUTCOME_OK as u32),
            );
        }
        push("adaptive_status", shmlimit_adaptive_status(l, &mut info));
        let mut permit = std::ptr::null_mut();
        push(
            "keyed_adaptive_acquire",
            shmlimit_keyed_adaptive_acquire(l, k, 1, 0, &mut permit),
        );
        if !permit.is_null() {
            push(
                "keyed_adaptive release",
                shmlimit_adaptive_release_measured(
                    permit,
                    shmlimit_outcome::SHMLIMIT_OUTCOME_OK as u32,
                    0.001,
                ),
            );
        }
        push(
            "keyed_adaptive_acquire empty",
            shmlimit_keyed_adaptive_acquire(l, k, 0, 0, &mut permit),
        );
        push(
            "keyed_adaptive_status",
            shmlimit_keyed_adaptive_status(l, k, 1, &mut info),
        );
        push(
            "keyed_adaptive_status empty",
            shmlimit_keyed_adaptive_status(l, k, 0, &mut info),
        );
        push(
            "adaptive_tuning_of",
            shmlimit_adaptive_tuning_of(l, tuning.as_mut_ptr()),
        );
    }
}

/// Every counters call on the limit `kind`, one line each.
///
/// # Safety
///
/// `l` must be a live limit handle.
unsafe fn counters_calls(l: *const shmlimit_limit, lines: &mut Vec<String>, kind: &str) {
    const SECOND: u64 = 1_000_000_000;
    let k = b"k".as_ptr();
    let (mut count, mut age) = (0u64, 0u64);
    let mut d = decision(false, 0, 0);
    let mut sliding = shmlimit_sliding_counts::default();
    let mut push = |call: &str, status: shmlimit_status| {
        lines.push(format!("{kind} {call}: {}", outcome(status)));
    };
    // SAFETY: every pointer is live or NULL as each call allows.
    unsafe {
        push(
            "counters_incr",
            shmlimit_counters_incr(l, k, 1, SECOND, 1, &mut count),
        );
        push(
            "counters_incr empty",
            shmlimit_counters_incr(l, k, 0, SECOND, 1, &mut count),
        );
        push(
            "counters_decr",
            shmlimit_counters_decr(l, k, 1, 1, &mut count),
        );
        push(
            "counters_set",
            shmlimit_counters_set(l, k, 1, SECOND, 3, &mut count),
        );
        push(
            "counters_count",
            shmlimit_counters_count(l, k, 1, &mut count, &mut age),
        );
        push(
            "counters_acquire_fixed 1",
            shmlimit_counters_acquire_fixed(l, k, 1, 5, SECOND, 1, &mut d),
        );
        push(
            "counters_acquire_fixed 0",
            shmlimit_counters_acquire_fixed(l, k, 1, 5, SECOND, 0, &mut d),
        );
        push(
            "counters_acquire_sliding",
            shmlimit_counters_acquire_sliding(l, k, 1, 5, SECOND, 1, &mut d),
        );
        push(
            "counters_acquire_moving",
            shmlimit_counters_acquire_moving(l, k, 1, 5, SECOND, 1, &mut d),
        );
        push(
            "counters_acquire_moving over the log",
            shmlimit_counters_acquire_moving(l, k, 1, 9, SECOND, 1, &mut d),
        );
        push(
            "counters_sliding",
            shmlimit_counters_sliding(l, k, 1, SECOND, &mut sliding),
        );
        push(
            "counters_moving",
            shmlimit_counters_moving(l, k, 1, 5, SECOND, &mut count, &mut age),
        );
        push("counters_clear_key", shmlimit_counters_clear_key(l, k, 1));
        push(
            "counters_clear_all",
            shmlimit_counters_clear_all(l, &mut count),
        );
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
            .limit("adaptive", AdaptiveConcurrency::new(2, 8))
            .keyed_limit(
                "keyed_adaptive",
                AdaptiveConcurrency::new(2, 8),
                Keyed::new(16),
            )
            .keyed_limit("counters", Counters::new().moving_window(8), Keyed::new(16))
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
            adaptive_calls(limit, &mut lines, kind);
            counters_calls(limit, &mut lines, kind);
            shmlimit_limit_free(limit);
        }
        shmlimit_limiter_free(limiter);
    }
    let _ = std::fs::remove_file(&path);
    lines
}

/// What each call answered, one line each: `KIND CALL: ANSWER`.
const EXPECTED: &str = include_str!("every_kind/answers.txt");

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
