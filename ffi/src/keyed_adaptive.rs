//! Keyed adaptive concurrency limits from C: per key, permits within a limit that moves with
//! the outcome and latency of that key's releases (an `SHMLIMIT_ADAPTIVE_CONCURRENCY` limit
//! with a `key_capacity`). Its permits are `shmlimit_adaptive_permit`s, released with
//! `shmlimit_adaptive_release` (or `_release_measured`), which report into the key's limit.

use std::time::Duration;

use super::adaptive::{boxed, info, shmlimit_adaptive_info, shmlimit_adaptive_permit};
use super::boundary::{arg_out, arg_ref, ffi_boundary};
use super::keyed::key_arg;
use super::{shmlimit_limit, shmlimit_status};

/// Take a permit of `key` (`key_len` bytes, 1 to `SHMLIMIT_MAX_KEY_LEN`) of a keyed adaptive
/// concurrency limit, waiting up to `timeout_ns` (0: not at all; `UINT64_MAX`: as long as it
/// takes) for fewer than the key's current limit to be held. `*permit_out` receives the
/// permit, or NULL when the time ran out: like a denial, that is not an error. Release it with
/// `shmlimit_adaptive_release`, whose outcome and latency teach the key's limit alone. A key
/// seen for the first time starts at the initial limit; when the key table has no slot for a
/// new key, the limit's `on_full` policy decides (`SHMLIMIT_FULL_ALLOW`: a permit that holds
/// nothing).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_WRONG_KIND` (not a keyed adaptive concurrency limit), `SHMLIMIT_TABLE_FULL`,
/// `SHMLIMIT_IO`.
///
/// Thread-safety: any number of threads and processes may acquire and release at once.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes;
/// `permit_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_keyed_adaptive_acquire(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    timeout_ns: u64,
    permit_out: *mut *mut shmlimit_adaptive_permit,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_keyed_adaptive_acquire", {
        let out = arg_out("permit_out", permit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let keyed = limit.inner.keyed_adaptive()?;
        let permit = if timeout_ns == 0 {
            keyed.try_acquire(key)?
        } else {
            keyed.acquire_timeout(key, Duration::from_nanos(timeout_ns))?
        };
        // SAFETY: `permit_out` is valid for one write (the caller's contract).
        unsafe { out.write(boxed(permit)) };
        Ok(())
    })
}

/// The current limit of `key`, its range, its round trips and its permits held now (a key
/// without a slot: the initial limit, none held, round trips 0).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: any thread, any time.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes;
/// `status_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_keyed_adaptive_status(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    status_out: *mut shmlimit_adaptive_info,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_keyed_adaptive_status", {
        let out = arg_out("status_out", status_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let status = info(limit.inner.keyed_adaptive()?.status(key)?);
        // SAFETY: `status_out` is valid for one write (the caller's contract).
        unsafe { out.write(status) };
        Ok(())
    })
}
