//! Guarded limits from C: an explicit fail-open or fail-closed choice for the time the limiter
//! file is missing, unreadable or invalid (see `shmlimit::GuardedLimiter`).
//!
//! A guarded handle opens whatever the state of the file: while the file cannot be used, each
//! guarded limit decides by the policy it was given (`SHMLIMIT_FAIL_OPEN` or
//! `SHMLIMIT_FAIL_CLOSED`, no default), and its decisions are flagged
//! `SHMLIMIT_DECISION_UNAVAILABLE` in `shmlimit_decision.reserved[0]`. The file is opened again
//! at most once per reopen interval; once attached, decisions are the plain ones.

use std::ffi::c_char;
use std::sync::OnceLock;
use std::time::Duration;

use super::boundary::{arg_out, arg_ref, arg_slice, arg_str, ffi_boundary, run_void};
use super::handle::AnyHandle;
use super::keyed::SHMLIMIT_MAX_KEY_LEN;
use super::status::{shmlimit_status, Failure};
use super::types::shmlimit_decision;
use shmlimit::{GuardedDecision, GuardedLimit, GuardedLimiter, Unavailable};

/// Policy of a guarded limit (the `unavailable` argument of `shmlimit_guarded_limiter_limit`):
/// admit every request, unlimited, while the file is unavailable. For limits that protect against
/// overload, where refusing all traffic is worse than none.
pub const SHMLIMIT_FAIL_OPEN: u32 = 1;
/// Policy of a guarded limit: deny every request while the file is unavailable, with a
/// retry-after of the time until the next attempt to open it. For limits that guard money,
/// quotas owed to a third party, or anything that must never be exceeded.
pub const SHMLIMIT_FAIL_CLOSED: u32 = 2;

/// Flag in `shmlimit_decision.reserved[0]` (the decision's flags word, zero for every other
/// decision): the limiter file (or this limit's state) could not be used and the limit's
/// policy decided. Such a decision has `remaining == 0` and a zero grant record (a refund of it
/// does nothing); a fail-closed denial has `retry_after_ns` at least 1.
pub const SHMLIMIT_DECISION_UNAVAILABLE: u64 = 1;

/// A guarded limiter (opaque): one limiter file, attached when it can be opened.
///
/// Created by `shmlimit_guarded_limiter_open`, freed by `shmlimit_guarded_limiter_free`.
/// Thread-safe.
#[allow(non_camel_case_types)]
pub struct shmlimit_guarded_limiter {
    inner: GuardedLimiter,
}

/// One limit of a guarded limiter (opaque), with its policy for while the file is unavailable.
///
/// Created by `shmlimit_guarded_limiter_limit`, freed by `shmlimit_guarded_limit_free`.
/// Thread-safe. It shares its guarded limiter's state: it stays usable after
/// `shmlimit_guarded_limiter_free`.
#[allow(non_camel_case_types)]
pub struct shmlimit_guarded_limit {
    inner: GuardedLimit,
    /// The typed handle of the attached limit, resolved by its kind once it is attached (for
    /// refunds; the guarded decisions are the library's).
    typed: OnceLock<AnyHandle>,
}

// Both handles are shared across threads by C callers: they must be Send + Sync.
const _: fn() = || {
    fn thread_safe<T: Send + Sync>() {}
    thread_safe::<shmlimit_guarded_limiter>();
    thread_safe::<shmlimit_guarded_limit>();
};

fn policy_arg(unavailable: u32) -> Result<Unavailable, Failure> {
    match unavailable {
        SHMLIMIT_FAIL_OPEN => Ok(Unavailable::FailOpen),
        SHMLIMIT_FAIL_CLOSED => Ok(Unavailable::FailClosed),
        other => Err(Failure::new(
            shmlimit_status::SHMLIMIT_INVALID_PARAMETER,
            format!(
                "`unavailable` is {other}: it must be SHMLIMIT_FAIL_OPEN ({SHMLIMIT_FAIL_OPEN}) \
                 or SHMLIMIT_FAIL_CLOSED ({SHMLIMIT_FAIL_CLOSED}); there is no default"
            ),
        )),
    }
}

/// The C form of a guarded decision (a peek's grant record cleared, as for `shmlimit_peek`).
fn to_c(decision: GuardedDecision, commit: bool) -> shmlimit_decision {
    match decision {
        GuardedDecision::Decided(d) => {
            let d = shmlimit_decision::from(d);
            if commit {
                d
            } else {
                d.without_grant()
            }
        }
        GuardedDecision::Unavailable {
            allowed,
            retry_after_ns,
        } => shmlimit_decision {
            allowed,
            shadow_denied: false,
            remaining: 0,
            retry_after_ns: if allowed { 0 } else { retry_after_ns.max(1) },
            grant: [0; 2],
            reserved: [SHMLIMIT_DECISION_UNAVAILABLE, 0],
            reset_after_ns: 0,
        },
    }
}

/// A guarded limiter on the file at `path`: attached now if the file can be opened (as by
/// `shmlimit_limiter_open` with default options), else at the first decision after
/// `reopen_every_ns` nanoseconds (0: at every decision that finds it unavailable). Never fails
/// because of the file: a missing or invalid file is what the guarded limits' policies are for.
///
/// - `path`: NUL-terminated file path (bytes, any encoding).
/// - `guarded_out`: receives a new handle owned by the caller, freed with
///   `shmlimit_guarded_limiter_free`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`.
///
/// Thread-safety: may be called from any thread.
///
/// # Safety
///
/// `path` must be NULL or a NUL-terminated string; `guarded_out` NULL or valid for writing one
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_limiter_open(
    path: *const c_char,
    reopen_every_ns: u64,
    guarded_out: *mut *mut shmlimit_guarded_limiter,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_guarded_limiter_open", {
        let out = arg_out("guarded_out", guarded_out)?;
        // SAFETY: `path` is NULL or NUL-terminated (the caller's contract).
        let path = unsafe { super::path_arg("path", path) }?;
        let inner = shmlimit::Limiter::open_guarded(path, Duration::from_nanos(reopen_every_ns));
        let guarded = Box::into_raw(Box::new(shmlimit_guarded_limiter { inner }));
        // SAFETY: `guarded_out` is valid for one write (the caller's contract).
        unsafe { out.write(guarded) };
        Ok(())
    })
}

/// Free a guarded limiter handle. NULL is a no-op. Guarded limits made from it stay valid.
///
/// Thread-safety: no other thread may be using `guarded` (or use it afterwards).
///
/// # Safety
///
/// `guarded` must be NULL or a handle returned by `shmlimit_guarded_limiter_open` and not yet
/// freed.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_limiter_free(guarded: *mut shmlimit_guarded_limiter) {
    run_void("shmlimit_guarded_limiter_free", || {
        if !guarded.is_null() {
            // SAFETY: a live handle made by Box::into_raw (the caller's contract), freed once.
            drop(unsafe { Box::from_raw(guarded) });
        }
    })
}

/// Whether the file is attached (`*attached_out`), attempting to open it first if it is not
/// and the reopen interval has passed.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`.
///
/// Thread-safety: may be called concurrently with decisions.
///
/// # Safety
///
/// `guarded` must be NULL or a live handle; `attached_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_limiter_attached(
    guarded: *const shmlimit_guarded_limiter,
    attached_out: *mut bool,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_guarded_limiter_attached", {
        let out = arg_out("attached_out", attached_out)?;
        // SAFETY: a live handle (the caller's contract).
        let guarded = unsafe { arg_ref("guarded", guarded) }?;
        let attached = guarded.inner.attached().is_some();
        // SAFETY: `attached_out` is valid for one write (the caller's contract).
        unsafe { out.write(attached) };
        Ok(())
    })
}

/// A guarded handle to the limit `name`, deciding by `unavailable` (`SHMLIMIT_FAIL_OPEN` or
/// `SHMLIMIT_FAIL_CLOSED`: there is no default) while the file is unavailable. The name is
/// resolved once the file is attached: a name the file does not define is then
/// `SHMLIMIT_UNKNOWN_LIMIT` from every decision.
///
/// - `name`: NUL-terminated UTF-8.
/// - `limit_out`: receives a new handle owned by the caller, freed with
///   `shmlimit_guarded_limit_free`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_BAD_UTF8`,
/// `SHMLIMIT_INVALID_PARAMETER` (`unavailable` is neither policy).
///
/// Thread-safety: may be called concurrently on one guarded handle.
///
/// # Safety
///
/// `guarded` must be NULL or a live handle; `name` NULL or a NUL-terminated string;
/// `limit_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_limiter_limit(
    guarded: *const shmlimit_guarded_limiter,
    name: *const c_char,
    unavailable: u32,
    limit_out: *mut *mut shmlimit_guarded_limit,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_guarded_limiter_limit", {
        let out = arg_out("limit_out", limit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let guarded = unsafe { arg_ref("guarded", guarded) }?;
        // SAFETY: `name` is NULL or NUL-terminated (the caller's contract).
        let name = unsafe { arg_str("name", name) }?;
        let policy = policy_arg(unavailable)?;
        let inner = guarded.inner.limit(name, policy);
        let limit = Box::into_raw(Box::new(shmlimit_guarded_limit {
            inner,
            typed: OnceLock::new(),
        }));
        // SAFETY: `limit_out` is valid for one write (the caller's contract).
        unsafe { out.write(limit) };
        Ok(())
    })
}

/// Free a guarded limit handle. NULL is a no-op.
///
/// Thread-safety: no other thread may be using `limit` (or use it afterwards).
///
/// # Safety
///
/// `limit` must be NULL or a handle returned by `shmlimit_guarded_limiter_limit` and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_limit_free(limit: *mut shmlimit_guarded_limit) {
    run_void("shmlimit_guarded_limit_free", || {
        if !limit.is_null() {
            // SAFETY: a live handle made by Box::into_raw (the caller's contract), freed once.
            drop(unsafe { Box::from_raw(limit) });
        }
    })
}

/// The key argument, as for `shmlimit_acquire_key`: `(NULL, 0)` is the empty key (refused as
/// invalid), NULL with a length is `SHMLIMIT_NULL_POINTER`, a length over
/// `SHMLIMIT_MAX_KEY_LEN` is `SHMLIMIT_INVALID_KEY`, refused before any byte is read.
///
/// # Safety
///
/// `key` must be NULL or point at `key_len` readable bytes for `'a`.
unsafe fn key_arg<'a>(key: *const u8, key_len: usize) -> Result<&'a [u8], Failure> {
    if key_len > SHMLIMIT_MAX_KEY_LEN && !key.is_null() {
        return Err(shmlimit::Error::InvalidKey {
            reason: format!("{key_len} bytes: keys are at most {SHMLIMIT_MAX_KEY_LEN} bytes"),
        }
        .into());
    }
    // SAFETY: forwarded contract.
    unsafe { arg_slice("key", key, key_len) }
}

/// The guarded decision exports share this: arguments checked, then the decision.
///
/// # Safety
///
/// As `shmlimit_guarded_acquire`.
unsafe fn decide(
    function: &'static str,
    limit: *const shmlimit_guarded_limit,
    commit: bool,
    decision_out: *mut shmlimit_decision,
    run: impl FnOnce(&GuardedLimit) -> shmlimit::Result<GuardedDecision>,
) -> shmlimit_status {
    ffi_boundary!(function, {
        let out = arg_out("decision_out", decision_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let decision = to_c(run(&limit.inner)?, commit);
        // SAFETY: `decision_out` is valid for one write (the caller's contract).
        unsafe { out.write(decision) };
        Ok(())
    })
}

/// `shmlimit_acquire` on the guarded limit once the file is attached; while it is unavailable
/// (or the limit's shared state is damaged) the limit's policy decides, flagged
/// `SHMLIMIT_DECISION_UNAVAILABLE`: fail-open admits, fail-closed denies with a retry-after of
/// the time until the next attempt to open the file. A denial is not an error.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_ZERO_COST`
/// (whatever the policy), and once attached `SHMLIMIT_UNKNOWN_LIMIT`,
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY`, `SHMLIMIT_WRONG_KIND`, `SHMLIMIT_CLOCK_OUT_OF_RANGE`: the
/// caller's own errors are never hidden by the policy.
///
/// Thread-safety: any number of threads and processes may decide on one limit at once; an
/// attempt to open the file is made by one thread at a time (the others apply the policy
/// meanwhile).
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `decision_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_acquire(
    limit: *const shmlimit_guarded_limit,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide("shmlimit_guarded_acquire", limit, true, decision_out, |l| {
            l.try_acquire(cost)
        })
    }
}

/// The decision `shmlimit_guarded_acquire` would make now, consuming nothing (the grant record
/// is zero).
///
/// Errors: as `shmlimit_guarded_acquire`.
///
/// Thread-safety: as `shmlimit_guarded_acquire`.
///
/// # Safety
///
/// As `shmlimit_guarded_acquire`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_peek(
    limit: *const shmlimit_guarded_limit,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide("shmlimit_guarded_peek", limit, false, decision_out, |l| {
            l.peek(cost)
        })
    }
}

/// `shmlimit_acquire_key` on the guarded limit once the file is attached, else the policy (as
/// `shmlimit_guarded_acquire`). A bad key is refused even while the file is unavailable.
///
/// Errors: as `shmlimit_guarded_acquire`, plus `SHMLIMIT_NULL_POINTER` (`key` NULL with a
/// length), `SHMLIMIT_INVALID_KEY` (empty or longer than `SHMLIMIT_MAX_KEY_LEN`) and once
/// attached `SHMLIMIT_TABLE_FULL`.
///
/// Thread-safety: as `shmlimit_guarded_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes;
/// `decision_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_acquire_key(
    limit: *const shmlimit_guarded_limit,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_guarded_acquire_key", {
        let out = arg_out("decision_out", decision_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let decision = to_c(limit.inner.try_acquire_key(key, cost)?, true);
        // SAFETY: `decision_out` is valid for one write (the caller's contract).
        unsafe { out.write(decision) };
        Ok(())
    })
}

/// Give back what `grant` (a decision of `shmlimit_guarded_acquire` on this limit, passed back
/// unchanged) admitted, as `shmlimit_refund` does. A decision flagged
/// `SHMLIMIT_DECISION_UNAVAILABLE` took nothing: refunding it does nothing, and so does any
/// refund while the file is unavailable.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, and once attached
/// `SHMLIMIT_UNKNOWN_LIMIT`, `SHMLIMIT_WRONG_KIND`, `SHMLIMIT_CORRUPT_STATE`.
///
/// Thread-safety: as `shmlimit_guarded_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `grant` NULL or a valid `shmlimit_decision`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_guarded_refund(
    limit: *const shmlimit_guarded_limit,
    grant: *const shmlimit_decision,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_guarded_refund", {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: a valid decision (the caller's contract).
        let grant = unsafe { arg_ref("grant", grant) }?;
        if grant.reserved[0] & SHMLIMIT_DECISION_UNAVAILABLE != 0 {
            return Ok(());
        }
        if let Some(attached) = limit.inner.limit()? {
            let typed = match limit.typed.get() {
                Some(typed) => typed,
                None => {
                    let typed = AnyHandle::of(attached.clone())?;
                    limit.typed.get_or_init(|| typed)
                }
            };
            typed.refund(&grant.to_grant(), None)?;
        }
        Ok(())
    })
}
