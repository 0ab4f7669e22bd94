//! Keyed limits from C: one independent state per key (user, tenant, address...) in a bounded
//! table in the file. Keys are byte strings `(key, key_len)`, 1 to `SHMLIMIT_MAX_KEY_LEN`
//! bytes, any content (they need no NUL).

use super::boundary::{arg_out, arg_ref, arg_slice, ffi_boundary};
use super::handle::AnyHandle;
use super::status::Failure;
use super::types::shmlimit_decision;
use super::{shmlimit_limit, shmlimit_status};

/// Longest key in bytes.
pub const SHMLIMIT_MAX_KEY_LEN: usize = 1024;

const _: () = assert!(SHMLIMIT_MAX_KEY_LEN == shmlimit::consts::MAX_KEY_LEN);

/// The key argument. `(NULL, 0)` is the empty key, refused by the library as invalid; NULL
/// with a length is `SHMLIMIT_NULL_POINTER`; a length over `SHMLIMIT_MAX_KEY_LEN` is
/// `SHMLIMIT_INVALID_KEY`, refused before any byte is read.
///
/// # Safety
///
/// `key` must be NULL or point at `key_len` readable bytes for `'a`.
pub(super) unsafe fn key_arg<'a>(key: *const u8, key_len: usize) -> Result<&'a [u8], Failure> {
    if key_len > SHMLIMIT_MAX_KEY_LEN && !key.is_null() {
        return Err(shmlimit::Error::InvalidKey {
            reason: format!("{key_len} bytes: keys are at most {SHMLIMIT_MAX_KEY_LEN} bytes"),
        }
        .into());
    }
    // SAFETY: forwarded contract.
    unsafe { arg_slice("key", key, key_len) }
}

/// The keyed decision exports share this: arguments checked, then the decision (a peek's
/// grant record cleared, as in `decide`).
///
/// # Safety
///
/// As `shmlimit_acquire_key`.
unsafe fn decide_key(
    function: &'static str,
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    commit: bool,
    decision_out: *mut shmlimit_decision,
    run: impl FnOnce(&AnyHandle, &[u8]) -> shmlimit::Result<shmlimit::Decision>,
) -> shmlimit_status {
    ffi_boundary!(function, {
        let out = arg_out("decision_out", decision_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let decision = shmlimit_decision::from(run(&limit.inner, key)?);
        let decision = if commit {
            decision
        } else {
            decision.without_grant()
        };
        // SAFETY: `decision_out` is valid for one write (the caller's contract).
        unsafe { out.write(decision) };
        Ok(())
    })
}

/// Admit `cost` units for `key` now on a keyed limit, or deny and consume nothing. A new key
/// takes a free slot of the table (or one whose key is idle, back to a fresh state); when none
/// is free the limit's `on_full` policy decides: deny (the default), admit unlimited, or fail
/// with `SHMLIMIT_TABLE_FULL`.
///
/// Errors: `SHMLIMIT_NULL_POINTER` (`limit`, `decision_out`, or `key` NULL with a length),
/// `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY` (empty, longer than
/// `SHMLIMIT_MAX_KEY_LEN`, or an impossible length), `SHMLIMIT_ZERO_COST`,
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY`, `SHMLIMIT_TABLE_FULL`, `SHMLIMIT_CORRUPT_STATE`,
/// `SHMLIMIT_WRONG_KIND` (the limit is not keyed: use `shmlimit_acquire`).
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes;
/// `decision_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_acquire_key(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide_key(
            "shmlimit_acquire_key",
            limit,
            key,
            key_len,
            true,
            decision_out,
            |l, k| l.try_acquire_key(k, cost),
        )
    }
}

/// The decision `shmlimit_acquire_key` would make now, consuming nothing and inserting
/// nothing.
///
/// Errors: as `shmlimit_acquire_key`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_acquire_key`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_peek_key(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide_key(
            "shmlimit_peek_key",
            limit,
            key,
            key_len,
            false,
            decision_out,
            |l, k| l.peek_key(k, cost),
        )
    }
}

/// `shmlimit_acquire_key` dated at `now_ns` on `CLOCK_MONOTONIC` instead of reading the clock.
/// Dates are checked as by `shmlimit_acquire_at`: at most `SHMLIMIT_DATE_TOLERANCE_NS` ahead of
/// the clock, and at most 2^61 ns.
///
/// Errors: as `shmlimit_acquire_key`, and `SHMLIMIT_CLOCK_OUT_OF_RANGE` for a refused date.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_acquire_key`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_acquire_key_at(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide_key(
            "shmlimit_acquire_key_at",
            limit,
            key,
            key_len,
            true,
            decision_out,
            |l, k| l.try_acquire_key_at(k, cost, now_ns),
        )
    }
}

/// Give back what `grant` (a decision of `shmlimit_acquire_key` for the same key, passed back
/// unchanged) admitted. The same bounded refund as `shmlimit_refund`; a key that lost its slot
/// meanwhile was fresh, so nothing is given back. Refunding a denial does nothing.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_CORRUPT_STATE`, `SHMLIMIT_WRONG_KIND` (not keyed).
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes; `grant`
/// NULL or a valid `shmlimit_decision`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_refund_key(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    grant: *const shmlimit_decision,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_refund_key", {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: a valid decision (the caller's contract).
        let grant = unsafe { arg_ref("grant", grant) }?.to_grant();
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        limit.inner.refund_key(key, &grant)?;
        Ok(())
    })
}

/// How many of a keyed limit's slots hold a key (`used_out`) and how many slots it has
/// (`slots_out`: its key capacity rounded up to a power of two). A counters limit has two
/// tables of that size (fixed and sliding windows; moving-window logs): both are counted.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (not
/// keyed).
///
/// Thread-safety: may be called concurrently with decisions (a snapshot).
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `used_out` and `slots_out` NULL or valid for one
/// write each.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_key_occupancy(
    limit: *const shmlimit_limit,
    used_out: *mut usize,
    slots_out: *mut usize,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_key_occupancy", {
        let used_out = arg_out("used_out", used_out)?;
        let slots_out = arg_out("slots_out", slots_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let (used, slots) = limit
            .inner
            .key_occupancy()
            .ok_or_else(|| not_keyed(&limit.inner))?;
        // SAFETY: both are valid for one write (the caller's contract).
        unsafe {
            used_out.write(used);
            slots_out.write(slots);
        }
        Ok(())
    })
}

/// Retire every key whose state is back to fresh (and any pending claim a killed process
/// left); `*reclaimed_out` receives how many keys were retired (from both tables of a counters
/// limit). Decisions reclaim idle slots on demand, so this is never needed for correctness: it
/// is an explicit cleanup pass that reads the whole table.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: may be called concurrently with decisions.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `reclaimed_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_reclaim_idle_keys(
    limit: *const shmlimit_limit,
    reclaimed_out: *mut usize,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_reclaim_idle_keys", {
        let out = arg_out("reclaimed_out", reclaimed_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let reclaimed = limit
            .inner
            .reclaim_idle_keys()
            .ok_or_else(|| not_keyed(&limit.inner))?;
        // SAFETY: `reclaimed_out` is valid for one write (the caller's contract).
        unsafe { out.write(reclaimed) };
        Ok(())
    })
}

/// The key table asked of a limit that is not keyed.
#[cold]
fn not_keyed(limit: &AnyHandle) -> shmlimit::Error {
    shmlimit::c_abi::wrong_kind(limit.as_limit(), "is not keyed")
}

/// The tag this file's key tables know `key` by: a 63-bit keyed hash of its bytes under the
/// file's secret seed, the same in every process and language. `shmlimit_permit_holders`
/// reports each holder's key by this tag, so a caller can tell which key a holder holds.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`.
///
/// Thread-safety: any number of threads may call it at once.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes; `tag_out`
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_key_tag(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    tag_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_key_tag", {
        let out = arg_out("tag_out", tag_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        // The tag is the file's hash of the key: any limit of the file has it.
        let tag = shmlimit::c_abi::key_tag(limit.inner.as_limit(), key)?;
        // SAFETY: `tag_out` is valid for one write (the caller's contract).
        unsafe { out.write(tag) };
        Ok(())
    })
}
