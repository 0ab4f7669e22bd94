//! Live retuning and resetting of a limit: every process attached to the file picks the new
//! parameters up on its next decision, without reopening.

use std::time::Duration;

use super::boundary::{arg_out, arg_ref, ffi_boundary};
use super::types::{self, shmlimit_def};
use super::{shmlimit_limit, shmlimit_status};
use shmlimit::Rate;

/// A rate of `tokens` per `period_ns`, with the name of the limit it is for in its errors.
fn rate(limit: &shmlimit_limit, tokens: u64, period_ns: u64) -> shmlimit::Result<Rate> {
    Rate::new(tokens, Duration::from_nanos(period_ns)).map_err(|e| match e {
        shmlimit::Error::InvalidParameter { reason, .. } => shmlimit::Error::InvalidParameter {
            limit: limit.inner.as_limit().name().to_owned(),
            reason,
        },
        other => other,
    })
}

/// Change the refill rate to `tokens` per `period_ns`, live. A token bucket keeps its fill
/// level in tokens (the transition never admits more than the larger of the old and new bounds
/// over any interval); a fixed or sliding window gets the limit per window this rate means,
/// rounded down (see `shmlimit_limit_set_limit`). Retunes are serialised across processes by
/// an exclusive `flock` on the file.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_PARAMETER`
/// (a zero or too fast rate, or one that does not fit the capacity), `SHMLIMIT_WRONG_KIND` (a
/// sliding log or a concurrency limit), `SHMLIMIT_CORRUPT_STATE`, `SHMLIMIT_IO` (the lock could
/// not be taken within 10 s).
///
/// Thread-safety: may be called concurrently with decisions and with other retunes.
///
/// # Safety
///
/// `limit` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_set_rate(
    limit: *const shmlimit_limit,
    tokens: u64,
    period_ns: u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_set_rate", {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        limit.inner.set_rate(rate(limit, tokens, period_ns)?)?;
        Ok(())
    })
}

/// Change a token bucket's capacity and rate together, live (see `shmlimit_limit_set_rate`).
///
/// Errors: as `shmlimit_limit_set_rate`; `SHMLIMIT_WRONG_KIND` for any other algorithm.
///
/// Thread-safety: as `shmlimit_limit_set_rate`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_set_token_bucket(
    limit: *const shmlimit_limit,
    capacity: u64,
    tokens: u64,
    period_ns: u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_set_token_bucket", {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        limit
            .inner
            .set_token_bucket(capacity, rate(limit, tokens, period_ns)?)?;
        Ok(())
    })
}

/// Change a fixed or sliding window's limit per window, live. Within the window in which it
/// changes, at most the larger of the old and new limits is admitted.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_PARAMETER`,
/// `SHMLIMIT_WRONG_KIND` (not a fixed or sliding window), `SHMLIMIT_IO`.
///
/// Thread-safety: as `shmlimit_limit_set_rate`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_set_limit(
    limit: *const shmlimit_limit,
    new_limit: u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_set_limit", {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        limit.inner.set_limit(new_limit)?;
        Ok(())
    })
}

/// This limit's definition with its live parameters (after any retune, by any process) into
/// `def_out`; `def_out->name` points into the limit handle, valid until it is freed. A token
/// bucket is reported as `rate = 1` per `period_ns` = its live emission interval.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_CORRUPT_STATE`.
///
/// Thread-safety: may be called concurrently with decisions and retunes.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `def_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_live_definition(
    limit: *const shmlimit_limit,
    def_out: *mut shmlimit_def,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_live_definition", {
        let out = arg_out("def_out", def_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let view = limit.inner.as_limit();
        let live = view.live_algorithm()?;
        let def = types::from_def(view.def(), &live, limit.name.as_ptr());
        // SAFETY: `def_out` is valid for one write (the caller's contract).
        unsafe { out.write(def) };
        Ok(())
    })
}

/// Return the limit's state to fresh (a full bucket, empty windows, log and key table, no
/// permits held), keeping its live parameters. What this grants: the whole capacity, at once,
/// to whichever processes decide next.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_IO` (the retune
/// lock could not be taken).
///
/// Thread-safety: may be called concurrently with decisions.
///
/// # Safety
///
/// `limit` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_reset(limit: *const shmlimit_limit) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_reset", {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        limit.inner.as_limit().reset()?;
        Ok(())
    })
}
