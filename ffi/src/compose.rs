//! Composed checks from C: one request, several limits, all or nothing.

use super::boundary::{arg_out, arg_ref, arg_ref_named, arg_slice, ffi_boundary};
use super::keyed::key_arg;
use super::shmlimit_status;
use super::status::{shmlimit_status::*, Failure};
use super::types::{shmlimit_check, shmlimit_composed, shmlimit_decision, SHMLIMIT_MAX_CHECKS};
use shmlimit::Limit;
use shmlimit::{try_acquire_all, Check};

/// The checks of a call, as the Rust API's: at most [`SHMLIMIT_MAX_CHECKS`], kept on the stack
/// (a `Vec` per call was an allocation and a free on every composed check).
struct RustChecks<'a> {
    /// `checks[..len]` are the call's; the rest repeat the first (`None`: no checks).
    checks: Option<[Check<'a>; SHMLIMIT_MAX_CHECKS]>,
    len: usize,
}

impl<'a> RustChecks<'a> {
    fn as_slice(&self) -> &[Check<'a>] {
        match &self.checks {
            Some(all) => &all[..self.len],
            None => &[],
        }
    }
}

/// The checks of `checks` as the Rust API's: each limit checked (non-NULL, aligned), with its
/// key when it has one (`Check::keyed`), else unkeyed (`Check::new`).
///
/// # Safety
///
/// Every `checks[i].limit` must be NULL or a live handle, and every `checks[i].key` NULL or
/// `checks[i].key_len` readable bytes, for as long as `checks` is borrowed.
unsafe fn rust_checks(checks: &[shmlimit_check]) -> Result<RustChecks<'_>, Failure> {
    if checks.len() > SHMLIMIT_MAX_CHECKS {
        return Err(Failure::new(
            SHMLIMIT_BAD_LENGTH,
            format!(
                "{} checks: at most SHMLIMIT_MAX_CHECKS ({SHMLIMIT_MAX_CHECKS}) in one composed check",
                checks.len()
            ),
        ));
    }
    let mut out = RustChecks {
        checks: None,
        len: checks.len(),
    };
    for (i, check) in checks.iter().enumerate() {
        // SAFETY: NULL or a live handle (the caller's contract).
        let limit: &Limit = unsafe { arg_ref_named(|| format!("checks[{i}].limit"), check.limit) }?
            .inner
            .as_limit();
        let rust = if check.key.is_null() && check.key_len == 0 {
            shmlimit::c_abi::check(limit, None, check.cost)
        } else {
            // SAFETY: `key` is NULL or points at `key_len` readable bytes (the caller's
            // contract); NULL with a length is refused there.
            let key = unsafe { key_arg(check.key, check.key_len) }.map_err(|mut f| {
                f.message = format!("checks[{i}].{}", f.message);
                f
            })?;
            shmlimit::c_abi::check(limit, Some(key), check.cost)
        };
        out.checks.get_or_insert([rust; SHMLIMIT_MAX_CHECKS])[i] = rust;
    }
    Ok(out)
}

/// Admit a request on every limit of `checks`, or on none: the limits are acquired in order,
/// and when one denies, the grants already taken are refunded and the later limits peeked, so
/// a denied request consumes nothing anywhere and `retry_after_ns` is the largest of all the
/// limits that would deny. A denial is `SHMLIMIT_OK` with `composed_out->allowed == false`.
///
/// Between a grant and its refund the earlier limits are transiently charged (other requests
/// see them slightly fuller: stricter, never looser). A process killed in between leaves that
/// grant consumed.
///
/// - `checks`, `checks_len`: 0 to `SHMLIMIT_MAX_CHECKS` limits, costs and keys, only read
///   during the call. A check with a key (`key`, `key_len`) decides for that key of a keyed
///   limit, as `shmlimit_acquire_key` does; one without (`key` NULL, `key_len` 0) as
///   `shmlimit_acquire`. A limit may appear more than once (with the same or other keys), so a
///   per-client limit and a global one are one call: `{per_client, 1, "alice", 5}, {global,
///   1, NULL, 0}`.
///
/// Errors: `SHMLIMIT_NULL_POINTER` (`checks`, a `checks[i].limit`, a `checks[i].key` NULL with
/// a length, `composed_out`), `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_BAD_LENGTH` (more than
/// `SHMLIMIT_MAX_CHECKS`), `SHMLIMIT_INVALID_KEY` (an empty or too long key), and any error of
/// `shmlimit_acquire` (or `shmlimit_acquire_key`) on one of the limits (`SHMLIMIT_ZERO_COST`,
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY`, `SHMLIMIT_WRONG_KIND` for a keyed limit without a key or
/// an unkeyed one with a key...): then every grant already taken was refunded first.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `checks` must be NULL or point at `checks_len` valid `shmlimit_check`s whose `limit`s are
/// NULL or live handles and whose `key`s are NULL or `key_len` readable bytes; `composed_out`
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_acquire_all(
    checks: *const shmlimit_check,
    checks_len: usize,
    composed_out: *mut shmlimit_composed,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_acquire_all", {
        let out = arg_out("composed_out", composed_out)?;
        // SAFETY: `checks` is NULL or points at `checks_len` checks (the caller's contract).
        let checks = unsafe { arg_slice("checks", checks, checks_len) }?;
        // SAFETY: their limits are NULL or live handles, their keys NULL or readable (the
        // caller's contract).
        let rust = unsafe { rust_checks(checks) }?;
        let composed = try_acquire_all(rust.as_slice())?;
        let out = out.as_ptr();
        // SAFETY: `composed_out` is valid for one write (the caller's contract). Written in
        // place, field by field after zeroing (the decisions past `count` stay zero): built
        // aside, the 552-byte outcome was copied into it whole on every call.
        unsafe {
            out.write_bytes(0, 1);
            (*out).allowed = composed.is_allowed();
            (*out).denied_by = composed.denied_by().map_or(-1, |i| i as i32);
            (*out).count = checks.len() as u32;
            (*out).retry_after_ns = composed.retry_after_ns();
        }
        for i in 0..checks.len() {
            if let Some(d) = composed.decision(i) {
                let d = shmlimit_decision::from(*d);
                // Only the grants of an allowed request can be refunded; peeks took nothing.
                let d = if composed.is_allowed() {
                    d
                } else {
                    d.without_grant()
                };
                // SAFETY: as above; `i` < `checks.len()` <= SHMLIMIT_MAX_CHECKS (checked by
                // `rust_checks`).
                unsafe { (*out).decisions[i] = d };
            }
        }
        Ok(())
    })
}

/// Give back every grant of an allowed composed request whose work was never done, given the
/// same checks (the same limits and keys in the same order) it was acquired with. A denied composed
/// request consumed nothing: refunding it does nothing.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_BAD_LENGTH`,
/// `SHMLIMIT_INVALID_KEY`, `SHMLIMIT_INVALID_PARAMETER` (`checks_len` differs from
/// `composed->count`); the first refund error otherwise (the other refunds are still made).
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_acquire_all`; `composed` must be NULL or point at a `shmlimit_composed`
/// written by `shmlimit_acquire_all`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_refund_all(
    checks: *const shmlimit_check,
    checks_len: usize,
    composed: *const shmlimit_composed,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_refund_all", {
        // SAFETY: a valid composed outcome (the caller's contract).
        let composed = unsafe { arg_ref("composed", composed) }?;
        // SAFETY: `checks` is NULL or points at `checks_len` checks (the caller's contract).
        let checks = unsafe { arg_slice("checks", checks, checks_len) }?;
        // SAFETY: their limits are NULL or live handles, their keys NULL or readable (the
        // caller's contract).
        let rust = unsafe { rust_checks(checks) }?;
        if composed.count as usize != checks.len() {
            return Err(Failure::new(
                SHMLIMIT_INVALID_PARAMETER,
                format!(
                    "invalid parameter: {} checks given for a composed check of {}",
                    checks.len(),
                    composed.count
                ),
            ));
        }
        if !composed.allowed {
            return Ok(());
        }
        let mut first = Ok(());
        for (check, decision) in rust.as_slice().iter().zip(&composed.decisions) {
            if let Err(e) = shmlimit::c_abi::give_back(check, &decision.to_grant()) {
                first = first.and(Err(Failure::from(e)));
            }
        }
        first
    })
}
