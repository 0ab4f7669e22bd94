//! The tuning of adaptive concurrency limits from C, beyond the minimum, maximum and lease that
//! `shmlimit_def` carries: a struct of its own (`shmlimit_def` keeps its layout), given per
//! definition to `shmlimit_limiter_create_or_open_tuned` and read back with
//! `shmlimit_adaptive_tuning_of`.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{arg_opt, arg_out, arg_ref, arg_slice, arg_str, ffi_boundary};
use super::handle::wrong;
use super::status::Failure;
use super::types::{self, shmlimit_def, shmlimit_options};
use super::{builder_with, path_arg, shmlimit_limit, shmlimit_limiter, shmlimit_status};
use shmlimit::{AdaptiveConcurrency, Algorithm, IntoAlgorithm};

/// The tuning of an adaptive concurrency limit (see docs/adaptive.md for the formulas). Fill it
/// with `shmlimit_adaptive_tuning_default`, then change what you need; every field is checked
/// when the file is created or opened (`SHMLIMIT_INVALID_PARAMETER` naming the field: NaN,
/// out of range).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct shmlimit_adaptive_tuning {
    /// The limit of a fresh state, within [min, max]; 0: the minimum.
    pub initial: u64,
    /// The update window in nanoseconds, a whole number of milliseconds from 1 ms to
    /// 16,777,215 ms (default 20 ms): the limit changes at most once per window.
    pub window_ns: u64,
    /// Smoothing `s` of each update, in [0.0001, 0.9999] (default 0.2).
    pub smoothing: f64,
    /// Tolerance `t` of the latency gradient, in [1, 15] (default 1.0).
    pub tolerance: f64,
    /// Headroom `h`, the queue the gradient adds as a fraction of the limit, 0 or in
    /// [0, 0.9999] (default 0.1).
    pub headroom: f64,
    /// Backoff `b` after a window with errors or timeouts, in [0.0001, 0.9999] (default 0.9).
    pub backoff: f64,
    /// Must be zero (room for later fields).
    pub reserved: [u64; 4],
}

impl shmlimit_adaptive_tuning {
    fn of(spec: &AdaptiveConcurrency) -> shmlimit_adaptive_tuning {
        shmlimit_adaptive_tuning {
            initial: spec.initial.unwrap_or(0),
            window_ns: u64::try_from(spec.window.as_nanos()).unwrap_or(u64::MAX),
            smoothing: spec.smoothing,
            tolerance: spec.tolerance,
            headroom: spec.headroom,
            backoff: spec.backoff,
            reserved: [0; 4],
        }
    }

    /// `algorithm` (an adaptive limit's, from its `shmlimit_def`) with this tuning.
    fn apply(&self, algorithm: &Algorithm, name: &str) -> Result<Algorithm, Failure> {
        let Algorithm::AdaptiveConcurrency(a) = algorithm else {
            return Err(invalid(
                name,
                "a tuning is given for a limit that is not an adaptive concurrency limit",
            ));
        };
        if self.reserved != [0; 4] {
            return Err(invalid(name, "tuning.reserved must be zero"));
        }
        if self.window_ns % 1_000_000 != 0 {
            return Err(invalid(
                name,
                format!(
                    "tuning.window_ns {}: must be a whole number of milliseconds",
                    self.window_ns
                ),
            ));
        }
        let mut spec = a.spec();
        spec.initial = (self.initial != 0).then_some(self.initial);
        spec.window = Duration::from_nanos(self.window_ns);
        spec.smoothing = self.smoothing;
        spec.tolerance = self.tolerance;
        spec.headroom = self.headroom;
        spec.backoff = self.backoff;
        Ok(spec.into_algorithm(name)?)
    }
}

fn invalid(name: &str, reason: impl Into<String>) -> Failure {
    Failure::from(shmlimit::Error::InvalidParameter {
        limit: name.to_owned(),
        reason: reason.into(),
    })
}

/// Fill `*tuning_out` with the default tuning (initial 0, the minimum; window 20 ms; smoothing
/// 0.2; tolerance 1.0; headroom 0.1; backoff 0.9).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`.
///
/// Thread-safety: any thread.
///
/// # Safety
///
/// `tuning_out` must be NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_adaptive_tuning_default(
    tuning_out: *mut shmlimit_adaptive_tuning,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_adaptive_tuning_default", {
        let out = arg_out("tuning_out", tuning_out)?;
        let mut t = shmlimit_adaptive_tuning::of(&AdaptiveConcurrency::new(1, 1));
        t.initial = 0;
        // SAFETY: `tuning_out` is valid for one write (the caller's contract).
        unsafe { out.write(t) };
        Ok(())
    })
}

/// `shmlimit_limiter_create_or_open` with a tuning per definition: `tunings` is NULL (every
/// limit with the default tuning) or points at `defs_len` pointers, `tunings[i]` the tuning of
/// `defs[i]` (an adaptive concurrency limit) or NULL (the default tuning, and the only value a
/// definition of another kind may have). A file that exists must hold exactly these tunings
/// (else `SHMLIMIT_DEFINITION_CONFLICT`, or a retune with `SHMLIMIT_ON_CONFLICT_ADOPT`).
///
/// Errors: those of `shmlimit_limiter_create_or_open`; `SHMLIMIT_INVALID_PARAMETER` for a bad
/// tuning (naming the limit and the field) or a tuning given to another kind of limit.
///
/// Thread-safety: may be called from any thread.
///
/// # Safety
///
/// As `shmlimit_limiter_create_or_open`; `tunings` NULL or `defs_len` pointers, each NULL or
/// a valid `shmlimit_adaptive_tuning`, all only for the call.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_create_or_open_tuned(
    path: *const c_char,
    defs: *const shmlimit_def,
    defs_len: usize,
    tunings: *const *const shmlimit_adaptive_tuning,
    options: *const shmlimit_options,
    limiter_out: *mut *mut shmlimit_limiter,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limiter_create_or_open_tuned", {
        let out = arg_out("limiter_out", limiter_out)?;
        // SAFETY: `path` is NULL or NUL-terminated (the caller's contract).
        let path = unsafe { path_arg("path", path) }?;
        // SAFETY: `options` is NULL or a valid shmlimit_options (the caller's contract).
        let mut builder = unsafe { builder_with(options) }?;
        // SAFETY: `defs` is NULL or points at `defs_len` definitions (the caller's contract).
        let defs = unsafe { arg_slice("defs", defs, defs_len) }?;
        let tunings = if tunings.is_null() {
            &[][..]
        } else {
            // SAFETY: `defs_len` pointers (the caller's contract); checked for alignment.
            unsafe { arg_slice("tunings", tunings, defs_len) }?
        };
        for (i, def) in defs.iter().enumerate() {
            // SAFETY: each definition's name is NULL or NUL-terminated (the caller's contract).
            let name = unsafe { arg_str(&format!("defs[{i}].name"), def.name) }?;
            let mut limit = types::to_def(def, name)?;
            if let Some(&tuning) = tunings.get(i) {
                // SAFETY: NULL or a valid tuning (the caller's contract).
                if let Some(t) = unsafe { arg_opt(&format!("tunings[{i}]"), tuning) }? {
                    limit.algorithm = t.apply(&limit.algorithm, name)?;
                }
            }
            builder = builder.define(limit);
        }
        let limiter = shmlimit_limiter::new(builder.create_or_open(path)?)?;
        // SAFETY: `limiter_out` is valid for one write (the caller's contract).
        unsafe { out.write(limiter) };
        Ok(())
    })
}

/// The tuning `limit` was created with (its live definition), into `*tuning_out`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (not
/// an adaptive concurrency limit, keyed or not).
///
/// Thread-safety: any thread.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `tuning_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_adaptive_tuning_of(
    limit: *const shmlimit_limit,
    tuning_out: *mut shmlimit_adaptive_tuning,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_adaptive_tuning_of", {
        let out = arg_out("tuning_out", tuning_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let view = limit.inner.as_limit();
        let Algorithm::AdaptiveConcurrency(a) = view.def().algorithm else {
            return Err(wrong::adaptive(view).into());
        };
        // SAFETY: `tuning_out` is valid for one write (the caller's contract).
        unsafe { out.write(shmlimit_adaptive_tuning::of(&a.spec())) };
        Ok(())
    })
}
