//! Adaptive concurrency limits from C: permits within a limit that moves with the outcome and
//! latency every release reports, pooled from every process (see `SHMLIMIT_ADAPTIVE_CONCURRENCY`).

use std::time::Duration;

use super::boundary::{arg_out, arg_ref, ffi_boundary};
use super::status::Failure;
use super::{shmlimit_limit, shmlimit_status};
use shmlimit::{AdaptivePermit, AdaptiveStatus, Outcome};

/// A held permit of an adaptive concurrency limit (opaque), made by `shmlimit_adaptive_acquire`
/// (or, for a key, `shmlimit_keyed_adaptive_acquire`);
/// released and freed by `shmlimit_adaptive_release` (or `_release_measured`). It measures its
/// own latency, from its grant to its release.
#[allow(non_camel_case_types)]
pub struct shmlimit_adaptive_permit {
    inner: AdaptivePermit,
}

/// How a request under an adaptive permit ended (the `outcome` of `shmlimit_adaptive_release`).
/// Values are never reused.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_outcome {
    /// Completed normally: its latency is a sample of the dependency's round trip.
    SHMLIMIT_OUTCOME_OK = 0,
    /// Failed from overload (a 503, a refused connection): the limit backs off.
    SHMLIMIT_OUTCOME_ERROR = 1,
    /// Timed out: the limit backs off.
    SHMLIMIT_OUTCOME_TIMEOUT = 2,
    /// Abandoned or not measured: the permit comes back, the limit learns nothing.
    SHMLIMIT_OUTCOME_DROPPED = 3,
}

/// What an adaptive limit is doing now (`shmlimit_adaptive_status`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmlimit_adaptive_info {
    /// The current limit (fractional; `permits` is its floor).
    pub limit: f64,
    /// Permits granted at once now.
    pub permits: u64,
    /// The smallest and the largest the limit may become.
    pub min: u64,
    /// See `min`.
    pub max: u64,
    /// Permits held now.
    pub in_flight: u64,
    /// The long (baseline) round trip, microseconds; 0 before the first sample.
    pub rtt_long_us: f64,
    /// The mean round trip of the last closed window, microseconds; 0 before the first sample.
    pub rtt_recent_us: f64,
}

/// A permit as C holds it: boxed, NULL for none.
pub(crate) fn boxed(permit: Option<AdaptivePermit>) -> *mut shmlimit_adaptive_permit {
    permit.map_or(std::ptr::null_mut(), |inner| {
        Box::into_raw(Box::new(shmlimit_adaptive_permit { inner }))
    })
}

/// A status as C reads it (no sample yet: RTTs of 0).
pub(crate) fn info(s: AdaptiveStatus) -> shmlimit_adaptive_info {
    shmlimit_adaptive_info {
        limit: s.limit,
        permits: s.permits,
        min: s.min,
        max: s.max,
        in_flight: s.in_flight,
        rtt_long_us: s.rtt_long_us.unwrap_or(0.0),
        rtt_recent_us: s.rtt_recent_us.unwrap_or(0.0),
    }
}

fn outcome_arg(limit: &str, code: u32) -> Result<Outcome, Failure> {
    Outcome::from_code(code).ok_or_else(|| {
        Failure::from(shmlimit::Error::InvalidParameter {
            limit: limit.to_owned(),
            reason: format!("outcome {code}: not a shmlimit_outcome (0 to 3)"),
        })
    })
}

/// Take a permit of an adaptive concurrency limit, waiting up to `timeout_ns` (0: not at all;
/// `UINT64_MAX`: as long as it takes) for fewer than the current limit to be held.
/// `*permit_out` receives the permit, or NULL when the time ran out: like a denial, that is not
/// an error. Release it with `shmlimit_adaptive_release`; a process that exits or is killed
/// holding permits loses them to the next acquirers, and reports nothing.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (not
/// an adaptive concurrency limit), `SHMLIMIT_IO`.
///
/// Thread-safety: any number of threads and processes may acquire and release at once.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `permit_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_adaptive_acquire(
    limit: *const shmlimit_limit,
    timeout_ns: u64,
    permit_out: *mut *mut shmlimit_adaptive_permit,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_adaptive_acquire", {
        let out = arg_out("permit_out", permit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let adaptive = limit.inner.adaptive()?;
        let permit = if timeout_ns == 0 {
            adaptive.try_acquire()?
        } else {
            adaptive.acquire_timeout(Duration::from_nanos(timeout_ns))?
        };
        let ptr = boxed(permit);
        // SAFETY: `permit_out` is valid for one write (the caller's contract).
        unsafe { out.write(ptr) };
        Ok(())
    })
}

/// Release an adaptive permit reporting how its request ended (a `shmlimit_outcome`); its
/// latency is the time since its grant. The permit is freed. An unknown `outcome` is
/// `SHMLIMIT_INVALID_PARAMETER` and changes nothing: the permit stays held and valid.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_INVALID_PARAMETER`.
///
/// Thread-safety: no other thread may be using `permit` (or use it afterwards).
///
/// # Safety
///
/// `permit` must be NULL or a permit from `shmlimit_adaptive_acquire` not yet released.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_adaptive_release(
    permit: *mut shmlimit_adaptive_permit,
    outcome: u32,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_adaptive_release", {
        // SAFETY: as in `release_with` (the caller's contract).
        unsafe { release_with(permit, outcome, None) }
    })
}

/// `shmlimit_adaptive_release` with a latency the caller measured, in seconds. A NaN,
/// negative or infinite `latency_s` (or an unknown `outcome`) is `SHMLIMIT_INVALID_PARAMETER`
/// and changes nothing: the permit stays held and valid.
///
/// Errors: as `shmlimit_adaptive_release`.
///
/// Thread-safety: as `shmlimit_adaptive_release`.
///
/// # Safety
///
/// As `shmlimit_adaptive_release`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_adaptive_release_measured(
    permit: *mut shmlimit_adaptive_permit,
    outcome: u32,
    latency_s: f64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_adaptive_release_measured", {
        // SAFETY: as in `release_with` (the caller's contract).
        unsafe { release_with(permit, outcome, Some(latency_s)) }
    })
}

/// # Safety
///
/// `permit` must be NULL or a live permit from `shmlimit_adaptive_acquire`; it is freed on
/// success only.
unsafe fn release_with(
    permit: *mut shmlimit_adaptive_permit,
    outcome: u32,
    latency_s: Option<f64>,
) -> Result<(), Failure> {
    // SAFETY: a live permit (the caller's contract); only checked (NULL, alignment) here.
    unsafe { arg_ref("permit", permit as *const shmlimit_adaptive_permit) }?;
    let name = "adaptive permit";
    let outcome = outcome_arg(name, outcome)?;
    let latency = match latency_s {
        None => None,
        Some(s) if s.is_finite() && s >= 0.0 && s < u64::MAX as f64 / 1e9 => {
            Some(Duration::from_secs_f64(s))
        }
        Some(s) => {
            return Err(Failure::from(shmlimit::Error::InvalidParameter {
                limit: name.to_owned(),
                reason: format!("latency {s} s: must be a finite number of seconds >= 0"),
            }))
        }
    };
    // SAFETY: made by Box::into_raw in `shmlimit_adaptive_acquire`, freed once, here (the
    // caller's contract: no other use of it after this call).
    let permit = unsafe { Box::from_raw(permit) };
    match latency {
        None => permit.inner.release(outcome),
        Some(d) => permit.inner.release_measured(outcome, d),
    };
    Ok(())
}

/// The current limit, its range, the round trips and the permits held now.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND`.
///
/// Thread-safety: any thread, any time.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `status_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_adaptive_status(
    limit: *const shmlimit_limit,
    status_out: *mut shmlimit_adaptive_info,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_adaptive_status", {
        let out = arg_out("status_out", status_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let status = info(limit.inner.adaptive()?.status()?);
        // SAFETY: `status_out` is valid for one write (the caller's contract).
        unsafe { out.write(status) };
        Ok(())
    })
}
