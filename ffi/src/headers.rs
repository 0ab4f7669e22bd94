//! What an HTTP client is told, from C: a limit's policy and the IETF `RateLimit` /
//! `RateLimit-Policy` and `Retry-After` header values rendered by the core
//! ([`shmlimit::RateLimitHeaders`]), so that every binding sends the same numbers.

use std::ffi::c_char;

use super::boundary::{arg_out, arg_ref, arg_slice, ffi_boundary};
use super::shmlimit_limit;
use super::status::{shmlimit_status, shmlimit_status::*, Failure};
use super::types::{shmlimit_decision, SHMLIMIT_MAX_CHECKS};
use shmlimit::RateLimitHeaders;

/// Size of each header value buffer of `shmlimit_headers`, with its NUL: room for
/// `SHMLIMIT_MAX_CHECKS` items of the longest name and the largest numbers.
pub const SHMLIMIT_HEADER_VALUE_LEN: usize = 1024;

/// A limit's quota per window, in the terms of the IETF `RateLimit-Policy` field.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_policy {
    /// `q`: how many units the limit grants per window.
    pub quota: u64,
    /// `w`: the window in whole seconds, at least 1. A token bucket's window is the time it
    /// takes to refill from empty; its quota what the rate grants over it.
    pub window_secs: u64,
}

/// The header values for one HTTP response, NUL-terminated.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmlimit_headers {
    /// The `RateLimit` field value: `"name";r=REMAINING;t=RESET_SECONDS` per limit, joined by
    /// `", "`. Empty when every limit given is a concurrency limit.
    pub rate_limit: [c_char; SHMLIMIT_HEADER_VALUE_LEN],
    /// The `RateLimit-Policy` field value: `"name";q=QUOTA;w=WINDOW_SECONDS` per limit.
    pub rate_limit_policy: [c_char; SHMLIMIT_HEADER_VALUE_LEN],
    /// The `Retry-After` field value in whole seconds (rounded up, at least 1) when some
    /// decision was a denial; empty when all admitted.
    pub retry_after: [c_char; 24],
}

// The longest item: a quoted name (limit names never need escaping: letters, digits and
// `_ - . : /`), two 20-digit numbers, `;r=;t=` and the `, ` separator; or an adaptive limit's
// one number with `;q=` and `;qu="concurrent-requests"`.
const _: () = assert!(
    SHMLIMIT_MAX_CHECKS * (super::SHMLIMIT_MAX_NAME_LEN + 2 + 6 + 2 * 20 + 2)
        < SHMLIMIT_HEADER_VALUE_LEN
);
const _: () = assert!(
    SHMLIMIT_MAX_CHECKS * (super::SHMLIMIT_MAX_NAME_LEN + 2 + 3 + 20 + 24 + 2)
        < SHMLIMIT_HEADER_VALUE_LEN
);

/// The policy of `limit` from its live parameters (a retuned rate shows at once).
///
/// Errors: `SHMLIMIT_NULL_POINTER`; `SHMLIMIT_WRONG_KIND` for a concurrency limit (it bounds
/// work in flight, not a rate); `SHMLIMIT_CORRUPT_STATE` if the live parameters are damaged.
///
/// Thread-safety: any thread, at any time.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `policy_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_policy(
    limit: *const shmlimit_limit,
    policy_out: *mut shmlimit_policy,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_policy", {
        let out = arg_out("policy_out", policy_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let policy = limit.inner.as_limit().policy()?.ok_or_else(|| {
            Failure::new(
                SHMLIMIT_WRONG_KIND,
                format!(
                    "limit '{}' is a concurrency limit: it has no rate policy",
                    limit.inner.as_limit().name()
                ),
            )
        })?;
        // SAFETY: `policy_out` is valid for one write (the caller's contract).
        unsafe {
            out.write(shmlimit_policy {
                quota: policy.quota,
                window_secs: policy.window_secs,
            })
        };
        Ok(())
    })
}

/// Render the `RateLimit`, `RateLimit-Policy` and `Retry-After` header values for `count`
/// decisions, `decisions[i]` made on `limits[i]` (for example the checks of a composed
/// decision, or a single `shmlimit_acquire`). Each limit appears under its name with its live
/// policy; an adaptive concurrency limit as `"name";q=PERMITS;qu="concurrent-requests"` and
/// `"name";r=PERMITS-IN_FLIGHT` (its current permits, read now); fixed concurrency limits add
/// nothing to the two `RateLimit` fields but a denial of theirs sets `Retry-After`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`; `SHMLIMIT_INVALID_PARAMETER` for `count` 0 or above
/// `SHMLIMIT_MAX_CHECKS`; `SHMLIMIT_CORRUPT_STATE` if a limit's live parameters are damaged.
///
/// Thread-safety: any thread, at any time.
///
/// # Safety
///
/// `limits` must be NULL or point to `count` live limit handles, `decisions` NULL or to
/// `count` decisions; `headers_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_ratelimit_headers(
    limits: *const *const shmlimit_limit,
    decisions: *const shmlimit_decision,
    count: usize,
    headers_out: *mut shmlimit_headers,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_ratelimit_headers", {
        let out = arg_out("headers_out", headers_out)?;
        if count == 0 || count > SHMLIMIT_MAX_CHECKS {
            return Err(Failure::new(
                SHMLIMIT_INVALID_PARAMETER,
                format!("count must be 1..={SHMLIMIT_MAX_CHECKS}, got {count}"),
            ));
        }
        // SAFETY: `count` elements each (the caller's contract); lengths checked by arg_slice.
        let limits = unsafe { arg_slice("limits", limits, count) }?;
        // SAFETY: as above.
        let decisions = unsafe { arg_slice("decisions", decisions, count) }?;
        let mut headers = RateLimitHeaders::new();
        for (&limit, d) in limits.iter().zip(decisions) {
            // SAFETY: each element is a live handle (the caller's contract).
            let limit = unsafe { arg_ref("limits[i]", limit) }?;
            headers.add_limit(limit.inner.as_limit(), &d.to_view(), true)?;
        }
        let mut rendered = shmlimit_headers {
            rate_limit: [0; SHMLIMIT_HEADER_VALUE_LEN],
            rate_limit_policy: [0; SHMLIMIT_HEADER_VALUE_LEN],
            retry_after: [0; 24],
        };
        copy_c(&mut rendered.rate_limit, &headers.rate_limit)?;
        copy_c(&mut rendered.rate_limit_policy, &headers.rate_limit_policy)?;
        copy_c(
            &mut rendered.retry_after,
            headers.retry_after.as_deref().unwrap_or(""),
        )?;
        // SAFETY: `headers_out` is valid for one write (the caller's contract).
        unsafe { out.write(rendered) };
        Ok(())
    })
}

/// Copy `s` and a NUL into `buffer`; a value that does not fit is a bug (the sizes are
/// asserted above), reported rather than cut.
fn copy_c(buffer: &mut [c_char], s: &str) -> Result<(), Failure> {
    if s.len() >= buffer.len() {
        return Err(Failure::new(
            SHMLIMIT_INTERNAL,
            format!("a header value of {} bytes does not fit", s.len()),
        ));
    }
    for (slot, &b) in buffer.iter_mut().zip(s.as_bytes()) {
        *slot = b as c_char;
    }
    buffer[s.len()] = 0;
    Ok(())
}
