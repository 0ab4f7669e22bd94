//! Keyed counters from C (a limit of kind `SHMLIMIT_COUNTERS`): the window and limit come
//! with each call, for storage adapters of libraries that declare limits at run time. Keys
//! are byte strings `(key, key_len)` as for keyed limits; windows are in nanoseconds.
//!
//! Every call on a limit of another kind is `SHMLIMIT_WRONG_KIND`. Out-parameters are written
//! only on success.

use std::time::Duration;

use super::boundary::{arg_out, arg_ref, ffi_boundary};
use super::keyed::key_arg;
use super::status::Failure;
use super::types::shmlimit_decision;
use super::{shmlimit_limit, shmlimit_status};
use crate::handle::AnyHandle;

/// A key's sliding window counter as read now (`shmlimit_counters_sliding`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmlimit_sliding_counts {
    /// Admissions counted in the previous window.
    pub previous: u64,
    /// Nanoseconds the previous window still weighs (0 when it counted nothing).
    pub previous_weighs_for_ns: u64,
    /// Admissions counted in the current window.
    pub current: u64,
    /// Nanoseconds until the current window's count expires (the end of the next window).
    pub current_expires_in_ns: u64,
}

/// The arguments every counters call checks first: the handle (of kind counters) and the key.
///
/// # Safety
///
/// `limit` NULL or a live handle; `key` NULL or `key_len` readable bytes.
unsafe fn args<'a>(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
) -> Result<(&'a AnyHandle, &'a [u8]), Failure> {
    // SAFETY: a live handle (the caller's contract).
    let limit = unsafe { arg_ref("limit", limit) }?;
    // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
    let key = unsafe { key_arg(key, key_len) }?;
    Ok((&limit.inner, key))
}

/// The three admissions share this.
///
/// # Safety
///
/// As `shmlimit_counters_acquire_fixed`.
unsafe fn acquire(
    function: &'static str,
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    decision_out: *mut shmlimit_decision,
    run: impl FnOnce(&shmlimit::CountersLimit, &[u8]) -> shmlimit::Result<shmlimit::Decision>,
) -> shmlimit_status {
    ffi_boundary!(function, {
        let out = arg_out("decision_out", decision_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let decision = shmlimit_decision::from(run(limit.counters()?, key)?).without_grant();
        // SAFETY: `decision_out` is valid for one write (the caller's contract).
        unsafe { out.write(decision) };
        Ok(())
    })
}

/// Add `amount` to the key's fixed-window counter and write its count to `count_out`: a
/// window of `window_ns` starts at the first increment after the previous window ended. When
/// the table has no slot for a new key, its policy answers: `UINT64_MAX` (deny), 0 (allow,
/// nothing counted), or `SHMLIMIT_TABLE_FULL`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_ZERO_COST`, `SHMLIMIT_INVALID_PARAMETER` (a window outside 1 ms to 2^55 ns),
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY` (the count would pass 2^24 - 1; nothing added),
/// `SHMLIMIT_TABLE_FULL`, `SHMLIMIT_CORRUPT_STATE`, `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes; `count_out`
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_incr(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    window_ns: u64,
    amount: u64,
    count_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_incr", {
        let out = arg_out("count_out", count_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let count = limit
            .counters()?
            .incr(key, Duration::from_nanos(window_ns), amount)?;
        // SAFETY: valid for one write (the caller's contract).
        unsafe { out.write(count) };
        Ok(())
    })
}

/// Take `amount` from the key's fixed-window counter and write its count to `count_out`:
/// never below zero, and the window keeps its end. A key that counts nothing stays so (0).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_ZERO_COST`, `SHMLIMIT_CORRUPT_STATE`, `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_incr`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_decr(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    amount: u64,
    count_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_decr", {
        let out = arg_out("count_out", count_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let count = limit.counters()?.decr(key, amount)?;
        // SAFETY: valid for one write (the caller's contract).
        unsafe { out.write(count) };
        Ok(())
    })
}

/// Make the key's fixed-window counter hold `count` in a window of `window_ns` that starts
/// now, whatever it held, and write the count to `count_out` (or the table-full policy's
/// answer, as `shmlimit_counters_incr` writes it).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_INVALID_PARAMETER` (a window outside 1 ms to 2^55 ns),
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY` (a count above 2^24 - 1), `SHMLIMIT_TABLE_FULL`,
/// `SHMLIMIT_CORRUPT_STATE`, `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_incr`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_set(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    window_ns: u64,
    count: u64,
    count_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_set", {
        let out = arg_out("count_out", count_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let n = limit
            .counters()?
            .set(key, Duration::from_nanos(window_ns), count)?;
        // SAFETY: valid for one write (the caller's contract).
        unsafe { out.write(n) };
        Ok(())
    })
}

/// The key's fixed-window count and the nanoseconds until its window ends (0 and 0 when it
/// has none).
///
/// Errors: as `shmlimit_counters_incr`, but for the amount and window.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_incr`; `expires_in_ns_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_count(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    count_out: *mut u64,
    expires_in_ns_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_count", {
        let count_o = arg_out("count_out", count_out)?;
        let expires_o = arg_out("expires_in_ns_out", expires_in_ns_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let (count, left) = limit.counters()?.count(key)?;
        // SAFETY: each valid for one write (the caller's contract).
        unsafe {
            count_o.write(count);
            expires_o.write(left.as_nanos() as u64);
        }
        Ok(())
    })
}

/// Admit `cost` of `max` in the key's fixed window of `window_ns` (started by its first
/// admission); a denial counts nothing. The decision carries no grant (nothing to refund).
///
/// Errors: as `shmlimit_counters_incr`; `SHMLIMIT_COST_EXCEEDS_CAPACITY` when `cost > max`,
/// `SHMLIMIT_INVALID_PARAMETER` for `max` 0 or above 2^24 - 1.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_incr`, with `decision_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_acquire_fixed(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    max: u64,
    window_ns: u64,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        acquire(
            "shmlimit_counters_acquire_fixed",
            limit,
            key,
            key_len,
            decision_out,
            |c, k| c.acquire_fixed(k, max, Duration::from_nanos(window_ns), cost),
        )
    }
}

/// Admit `cost` of `max` by the key's sliding window counter over Unix-aligned windows of
/// `window_ns` (`floor(previous x (W - elapsed) / W) + current + cost <= max`).
///
/// Errors: as `shmlimit_counters_acquire_fixed`, with `max` of 1 to 65535 and windows of at
/// least 2^28 ns.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_acquire_fixed`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_acquire_sliding(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    max: u64,
    window_ns: u64,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        acquire(
            "shmlimit_counters_acquire_sliding",
            limit,
            key,
            key_len,
            decision_out,
            |c, k| c.acquire_sliding(k, max, Duration::from_nanos(window_ns), cost),
        )
    }
}

/// Admit `cost` of `max` in the key's moving window of `window_ns`: at most `max` admissions
/// in every window, exactly. `max` is at most the definition's log entries per key: a larger
/// one is `SHMLIMIT_INVALID_PARAMETER`, and the message names the largest supported.
///
/// Errors: as `shmlimit_counters_acquire_fixed`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_acquire_fixed`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_acquire_moving(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    max: u64,
    window_ns: u64,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        acquire(
            "shmlimit_counters_acquire_moving",
            limit,
            key,
            key_len,
            decision_out,
            |c, k| c.acquire_moving(k, max, Duration::from_nanos(window_ns), cost),
        )
    }
}

/// The key's sliding window counter for windows of `window_ns`, as read now.
///
/// Errors: as `shmlimit_counters_acquire_sliding`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_incr`; `counts_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_sliding(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    window_ns: u64,
    counts_out: *mut shmlimit_sliding_counts,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_sliding", {
        let out = arg_out("counts_out", counts_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let c = limit
            .counters()?
            .sliding_counts(key, Duration::from_nanos(window_ns))?;
        // SAFETY: valid for one write (the caller's contract).
        unsafe {
            out.write(shmlimit_sliding_counts {
                previous: c.previous,
                previous_weighs_for_ns: c.previous_weighs_for.as_nanos() as u64,
                current: c.current,
                current_expires_in_ns: c.current_expires_in.as_nanos() as u64,
            })
        };
        Ok(())
    })
}

/// The key's moving window of `max` over `window_ns`: the admissions in it and the
/// nanoseconds since the oldest of them (0 and 0 when empty).
///
/// Errors: as `shmlimit_counters_acquire_moving`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_counters_incr`; `age_ns_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_moving(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    max: u64,
    window_ns: u64,
    count_out: *mut u64,
    age_ns_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_moving", {
        let count_o = arg_out("count_out", count_out)?;
        let age_o = arg_out("age_ns_out", age_ns_out)?;
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        let (n, age) =
            limit
                .counters()?
                .moving_window(key, max, Duration::from_nanos(window_ns))?;
        // SAFETY: each valid for one write (the caller's contract).
        unsafe {
            count_o.write(n);
            age_o.write(age.as_nanos() as u64);
        }
        Ok(())
    })
}

/// Forget the key: its fixed-window count, its sliding window counter and its moving log.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_clear_key(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_clear_key", {
        // SAFETY: forwarded contract.
        let (limit, key) = unsafe { args(limit, key, key_len) }?;
        limit.counters()?.clear_key(key)?;
        Ok(())
    })
}

/// Forget every key, writing how many held something to `cleared_out`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `cleared_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_counters_clear_all(
    limit: *const shmlimit_limit,
    cleared_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_counters_clear_all", {
        let out = arg_out("cleared_out", cleared_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let n = limit.inner.counters()?.clear_all()?;
        // SAFETY: valid for one write (the caller's contract).
        unsafe { out.write(n as u64) };
        Ok(())
    })
}
