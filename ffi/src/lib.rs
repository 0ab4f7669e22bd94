//! The C ABI: `libshmlimit.so` / `libshmlimit.a` and the header `ffi/include/shmlimit.h`.
//!
//! # Conventions
//!
//! - Every function is prefixed `shmlimit_`. Fallible functions return a [`shmlimit_status`]
//!   (`SHMLIMIT_OK` is 0); on failure `shmlimit_last_error()` describes the cause on the calling
//!   thread, and `shmlimit_strerror(code)` names the code.
//! - Handles are opaque: [`shmlimit_limiter`] (one attached file) and [`shmlimit_limit`] (one limit
//!   in it, resolved once by name). Both are thread-safe: any number of threads may use one handle
//!   at the same time, and a handle may be passed between threads. Each is freed by its `_free`
//!   function, exactly once; `_free(NULL)` does nothing. A limit handle keeps the file mapped, so
//!   the limiter may be freed before its limits.
//! - `*_out` parameters come last and are written only when the call returns `SHMLIMIT_OK`.
//! - No panic crosses the boundary: a bug caught inside is `SHMLIMIT_INTERNAL`. NULL, misaligned
//!   and impossible-length arguments are reported as codes; only a dangling pointer (or a string
//!   without its NUL) can make the library misbehave.
//!
//! # Implementation details
//!
//! The exports are grouped by concern: this file (files, limits, decisions, refunds, waits),
//! `retune.rs` (live parameters, reset), `compose.rs` (composed checks), `headers.rs` (what an HTTP client is told), `keyed.rs` (per-key
//! decisions), `keyed_adaptive.rs` (per-key adaptive permits), `permit.rs` (concurrency
//! permits), `reserve.rs` (reservations), with the
//! structs in `types.rs` and the codes
//! in `status.rs`. A decision's grant record (`shmlimit_decision.grant`) is what lets a plain C
//! struct be refunded: the two words `Decision::grant_record` gives, turned back into a grant by
//! `Decision::from_grant_record`; peeks and denials record none.
//!
//! Each export is one `ffi_boundary!` block (see `boundary.rs`); the handles are boxed Rust
//! values ([`shmlimit::Limiter`], and for a limit the library's typed handle of its kind, plus
//! the NUL-terminated names the ABI hands out), created by `Box::into_raw` and destroyed by
//! `Box::from_raw` in their `_free`. A limit's kind is looked at once, when
//! `shmlimit_limiter_limit` resolves its name (`handle.rs`): each operation then matches the
//! handle it holds and calls the typed handle's method, and answers a limit of another kind as
//! the library's untyped handle does (`SHMLIMIT_WRONG_KIND`, with the library's text), but for
//! the kinds with calls of their own, whose answers name those calls (an adaptive limit names
//! `shmlimit_adaptive_acquire`; see `shmlimit_bindings::handle::wrong`).
//! The header is generated from these files by cbindgen (`ffi/cbindgen.toml`);
//! `tests/ffi_header.rs` fails when they drift apart.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

pub mod adaptive;
pub mod adaptive_tuning;
pub(crate) mod boundary;
pub mod compose;
pub mod counters;
#[cfg(test)]
mod every_kind;
pub mod fleet;
pub mod guarded;
mod handle;
pub mod headers;
pub mod keyed;
pub mod keyed_adaptive;
pub mod permit;
pub mod reserve;
pub mod retune;
pub mod status;
#[doc(hidden)]
pub mod status_table;
pub mod types;

use std::ffi::{c_char, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use boundary::{arg_bytes, arg_opt, arg_out, arg_ref, arg_slice, arg_str, ffi_boundary, run_void};
pub use status::{shmlimit_last_error, shmlimit_last_os_error, shmlimit_status, shmlimit_strerror};
use status::{shmlimit_status::*, Failure};
pub use types::{
    shmlimit_alignment, shmlimit_check, shmlimit_composed, shmlimit_decision, shmlimit_def,
    shmlimit_full_policy, shmlimit_kind, shmlimit_options, shmlimit_permit_holder, shmlimit_stats,
};

use handle::AnyHandle;
use shmlimit::Limiter;

/// Longest limit name in bytes, not counting the NUL.
pub const SHMLIMIT_MAX_NAME_LEN: usize = 63;
/// Most limits one file may define.
pub const SHMLIMIT_MAX_LIMITS: usize = 4096;

/// How far ahead of the clock a dated call (`shmlimit_acquire_at`, `shmlimit_acquire_key_at`)
/// may be, in nanoseconds: 1 ms. Later dates are refused with `SHMLIMIT_CLOCK_OUT_OF_RANGE`.
pub const SHMLIMIT_DATE_TOLERANCE_NS: u64 = 1_000_000;
const _: () =
    assert!(SHMLIMIT_DATE_TOLERANCE_NS as u128 == shmlimit::consts::DATE_TOLERANCE.as_nanos());

const _: () = assert!(SHMLIMIT_MAX_NAME_LEN == shmlimit::consts::MAX_NAME_LEN);
const _: () = assert!(SHMLIMIT_MAX_LIMITS == shmlimit::consts::MAX_LIMITS);

/// One attached limiter file (opaque).
///
/// Created by `shmlimit_limiter_create_or_open` or `shmlimit_limiter_open`, freed by
/// `shmlimit_limiter_free`. Thread-safe.
#[allow(non_camel_case_types)]
pub struct shmlimit_limiter {
    inner: Limiter,
    /// The definitions' names, NUL-terminated, in definition order: what `shmlimit_def.name`
    /// points into for the lifetime of the handle.
    names: Vec<CString>,
}

/// One limit of a limiter file (opaque), resolved once by name.
///
/// Created by `shmlimit_limiter_limit`, freed by `shmlimit_limit_free`. Thread-safe. It keeps
/// the file mapped: it stays usable after its limiter is freed.
#[allow(non_camel_case_types)]
pub struct shmlimit_limit {
    /// The typed handle of the limit's kind, resolved once.
    inner: AnyHandle,
    name: CString,
}

// Both handles are shared across threads by C callers: they must be Send + Sync.
const _: fn() = || {
    fn thread_safe<T: Send + Sync>() {}
    thread_safe::<shmlimit_limiter>();
    thread_safe::<shmlimit_limit>();
    thread_safe::<reserve::shmlimit_reservation>();
};

impl shmlimit_limiter {
    fn new(inner: Limiter) -> Result<*mut shmlimit_limiter, Failure> {
        let names = inner
            .definitions()
            .iter()
            .map(|d| CString::new(d.name.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Failure::new(SHMLIMIT_INTERNAL, "a stored limit name holds a NUL"))?;
        Ok(Box::into_raw(Box::new(shmlimit_limiter { inner, names })))
    }
}

/// # Safety
///
/// `ptr`, if non-NULL, must be a NUL-terminated string valid for the call.
unsafe fn path_arg<'a>(argument: &str, ptr: *const c_char) -> Result<&'a Path, Failure> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { arg_bytes(argument, ptr) }?;
    Ok(Path::new(OsStr::from_bytes(bytes)))
}

/// # Safety
///
/// `options`, if non-NULL, must point at a valid `shmlimit_options` for the call.
unsafe fn builder_with(options: *const shmlimit_options) -> Result<shmlimit::Builder, Failure> {
    // SAFETY: forwarded contract.
    let options = unsafe { arg_opt("options", options) }?
        .copied()
        .unwrap_or_default();
    let (mode, allow_other_owner, on_reboot) = options.validate()?;
    let builder = Limiter::builder()
        .mode(mode)
        .allow_other_owner(allow_other_owner)
        .on_conflict(options.on_conflict()?);
    Ok(match on_reboot {
        Some(choice) => builder.on_reboot(choice),
        None => builder,
    })
}

/// The library's version, for example `"0.1.0"`: a static NUL-terminated string (never free it).
///
/// Thread-safety: may be called from any thread.
#[no_mangle]
pub extern "C" fn shmlimit_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Create the limiter file at `path` with `defs_len` limit definitions, or attach to it if it
/// already exists with exactly these definitions. Every process may call this with the same
/// definitions; exactly one creates the file.
///
/// - `path`: NUL-terminated file path (bytes, any encoding).
/// - `defs`, `defs_len`: the definitions (see `shmlimit_def`); only read during the call.
///   `defs` may be NULL when `defs_len` is 0.
/// - `options`: NULL for the defaults, else see `shmlimit_options`; only read during the call.
/// - `limiter_out`: receives a new handle, owned by the caller, freed with
///   `shmlimit_limiter_free`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_BAD_LENGTH`, `SHMLIMIT_MISALIGNED_POINTER`,
/// `SHMLIMIT_BAD_UTF8` (a name), `SHMLIMIT_INVALID_PARAMETER` (a bad definition or option),
/// `SHMLIMIT_DEFINITION_CONFLICT` (the file exists with other definitions), and every error of
/// `shmlimit_limiter_open`.
///
/// Thread-safety: may be called from any thread.
///
/// # Safety
///
/// `path` must be NULL or a NUL-terminated string; `defs` must be NULL or point at `defs_len`
/// valid `shmlimit_def`s whose `name`s are NULL or NUL-terminated strings; `options` must be
/// NULL or point at a valid `shmlimit_options`; `limiter_out` must be NULL or valid for writing
/// one pointer. All only for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_create_or_open(
    path: *const c_char,
    defs: *const shmlimit_def,
    defs_len: usize,
    options: *const shmlimit_options,
    limiter_out: *mut *mut shmlimit_limiter,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limiter_create_or_open", {
        let out = arg_out("limiter_out", limiter_out)?;
        // SAFETY: `path` is NULL or NUL-terminated (the caller's contract).
        let path = unsafe { path_arg("path", path) }?;
        // SAFETY: `options` is NULL or a valid shmlimit_options (the caller's contract).
        let mut builder = unsafe { builder_with(options) }?;
        // SAFETY: `defs` is NULL or points at `defs_len` definitions (the caller's contract).
        let defs = unsafe { arg_slice("defs", defs, defs_len) }?;
        for (i, def) in defs.iter().enumerate() {
            // SAFETY: each definition's name is NULL or NUL-terminated (the caller's contract).
            let name = unsafe { arg_str(&format!("defs[{i}].name"), def.name) }?;
            builder = builder.define(types::to_def(def, name)?);
        }
        let limiter = shmlimit_limiter::new(builder.create_or_open(path)?)?;
        // SAFETY: `limiter_out` is valid for one write (the caller's contract).
        unsafe { out.write(limiter) };
        Ok(())
    })
}

/// Attach to an existing limiter file by path alone; its definitions are read from the file
/// (list them with `shmlimit_limiter_limit_count` and `shmlimit_limiter_definition`).
///
/// - `path`: NUL-terminated file path.
/// - `options`: NULL for the defaults, else see `shmlimit_options`.
/// - `limiter_out`: receives a new handle, owned by the caller, freed with
///   `shmlimit_limiter_free`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_PARAMETER`
/// (options), `SHMLIMIT_IO` (missing file, no permission: see `shmlimit_last_os_error`),
/// `SHMLIMIT_SYMLINK`, `SHMLIMIT_NOT_REGULAR_FILE`, `SHMLIMIT_PERMISSION`, `SHMLIMIT_FOREIGN`,
/// `SHMLIMIT_VERSION`, `SHMLIMIT_SIZE`, `SHMLIMIT_CORRUPT`, `SHMLIMIT_NOT_INITIALIZED`,
/// `SHMLIMIT_CLOCK_MISMATCH`.
///
/// Thread-safety: may be called from any thread.
///
/// # Safety
///
/// `path` must be NULL or a NUL-terminated string; `options` NULL or a valid
/// `shmlimit_options`; `limiter_out` NULL or valid for writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_open(
    path: *const c_char,
    options: *const shmlimit_options,
    limiter_out: *mut *mut shmlimit_limiter,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limiter_open", {
        let out = arg_out("limiter_out", limiter_out)?;
        // SAFETY: `path` is NULL or NUL-terminated (the caller's contract).
        let path = unsafe { path_arg("path", path) }?;
        // SAFETY: `options` is NULL or a valid shmlimit_options (the caller's contract).
        let builder = unsafe { builder_with(options) }?;
        let limiter = shmlimit_limiter::new(builder.open(path)?)?;
        // SAFETY: `limiter_out` is valid for one write (the caller's contract).
        unsafe { out.write(limiter) };
        Ok(())
    })
}

/// Free a limiter handle. NULL is a no-op. Limit handles resolved from it stay valid.
///
/// Thread-safety: no other thread may be using `limiter` (or use it afterwards).
///
/// # Safety
///
/// `limiter` must be NULL or a handle returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_free(limiter: *mut shmlimit_limiter) {
    run_void("shmlimit_limiter_free", || {
        if !limiter.is_null() {
            // SAFETY: a live handle made by Box::into_raw (the caller's contract), freed once.
            drop(unsafe { Box::from_raw(limiter) });
        }
    })
}

/// The number of limits the file defines, into `count_out`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`.
///
/// Thread-safety: may be called concurrently on one handle.
///
/// # Safety
///
/// `limiter` must be NULL or a live handle; `count_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_limit_count(
    limiter: *const shmlimit_limiter,
    count_out: *mut usize,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limiter_limit_count", {
        let out = arg_out("count_out", count_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limiter = unsafe { arg_ref("limiter", limiter) }?;
        // SAFETY: `count_out` is valid for one write (the caller's contract).
        unsafe { out.write(limiter.names.len()) };
        Ok(())
    })
}

/// The definition of limit number `index` (0-based, in definition order) into `def_out`.
/// `def_out->name` points into the limiter handle: valid until it is freed.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_OUT_OF_RANGE`.
///
/// Thread-safety: may be called concurrently on one handle.
///
/// # Safety
///
/// `limiter` must be NULL or a live handle; `def_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_definition(
    limiter: *const shmlimit_limiter,
    index: usize,
    def_out: *mut shmlimit_def,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limiter_definition", {
        let out = arg_out("def_out", def_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limiter = unsafe { arg_ref("limiter", limiter) }?;
        let defs = limiter.inner.definitions();
        let def = defs.get(index).ok_or_else(|| {
            Failure::new(
                SHMLIMIT_OUT_OF_RANGE,
                format!("index {index}: the file defines {} limits", defs.len()),
            )
        })?;
        let def = types::from_def(def, &def.algorithm, limiter.names[index].as_ptr());
        // SAFETY: `def_out` is valid for one write (the caller's contract).
        unsafe { out.write(def) };
        Ok(())
    })
}

/// Resolve the limit named `name` once; the returned handle is what decisions use.
///
/// - `name`: NUL-terminated UTF-8.
/// - `limit_out`: receives a new handle owned by the caller, freed with `shmlimit_limit_free`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_BAD_UTF8`,
/// `SHMLIMIT_UNKNOWN_LIMIT`.
///
/// Thread-safety: may be called concurrently on one limiter handle.
///
/// # Safety
///
/// `limiter` must be NULL or a live handle; `name` NULL or a NUL-terminated string;
/// `limit_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limiter_limit(
    limiter: *const shmlimit_limiter,
    name: *const c_char,
    limit_out: *mut *mut shmlimit_limit,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limiter_limit", {
        let out = arg_out("limit_out", limit_out)?;
        // SAFETY: `limiter` is NULL or a live handle (the caller's contract).
        let limiter = unsafe { arg_ref("limiter", limiter) }?;
        // SAFETY: `name` is NULL or NUL-terminated (the caller's contract).
        let name = unsafe { arg_str("name", name) }?;
        let inner = AnyHandle::of(limiter.inner.limit(name)?)?;
        let name =
            CString::new(name).map_err(|_| Failure::new(SHMLIMIT_INTERNAL, "NUL in name"))?;
        let limit = Box::into_raw(Box::new(shmlimit_limit { inner, name }));
        // SAFETY: `limit_out` is valid for one write (the caller's contract).
        unsafe { out.write(limit) };
        Ok(())
    })
}

/// Free a limit handle. NULL is a no-op.
///
/// Thread-safety: no other thread may be using `limit` (or use it afterwards).
///
/// # Safety
///
/// `limit` must be NULL or a handle returned by `shmlimit_limiter_limit` and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_free(limit: *mut shmlimit_limit) {
    run_void("shmlimit_limit_free", || {
        if !limit.is_null() {
            // SAFETY: a live handle made by Box::into_raw (the caller's contract), freed once.
            drop(unsafe { Box::from_raw(limit) });
        }
    })
}

/// The definition of this limit into `def_out`; `def_out->name` points into the limit handle
/// and is valid until it is freed.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`.
///
/// Thread-safety: may be called concurrently on one handle.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `def_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_definition(
    limit: *const shmlimit_limit,
    def_out: *mut shmlimit_def,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_definition", {
        let out = arg_out("def_out", def_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let view = limit.inner.as_limit();
        let def = types::from_def(view.def(), view.algorithm(), limit.name.as_ptr());
        // SAFETY: `def_out` is valid for one write (the caller's contract).
        unsafe { out.write(def) };
        Ok(())
    })
}

/// With `commit == false` (a peek) the decision's grant record is cleared: a peek took nothing
/// that a refund could give back.
///
/// # Safety
///
/// As for `shmlimit_acquire`.
unsafe fn decide(
    function: &'static str,
    limit: *const shmlimit_limit,
    commit: bool,
    decision_out: *mut shmlimit_decision,
    decide: impl FnOnce(&AnyHandle) -> shmlimit::Result<shmlimit::Decision>,
) -> shmlimit_status {
    ffi_boundary!(function, {
        let out = arg_out("decision_out", decision_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let decision = shmlimit_decision::from(decide(&limit.inner)?);
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

/// Admit `cost` units now, or deny and consume nothing. The hot path: one clock read and one
/// compare-and-swap on shared memory, no allocation, no lock, no system call.
///
/// A denial is not an error: it returns `SHMLIMIT_OK` with `decision_out->allowed == false`
/// and `retry_after_ns` set.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_ZERO_COST`,
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY` (the cost can never be granted), `SHMLIMIT_CORRUPT_STATE`
/// (damaged shared state: fail closed), `SHMLIMIT_CLOCK_OUT_OF_RANGE`.
///
/// Thread-safety: any number of threads and processes may decide on one limit at once.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `decision_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_acquire(
    limit: *const shmlimit_limit,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide("shmlimit_acquire", limit, true, decision_out, |l| {
            l.try_acquire(cost)
        })
    }
}

/// The decision `shmlimit_acquire` would make now, consuming nothing.
///
/// Errors: as `shmlimit_acquire`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_acquire`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_peek(
    limit: *const shmlimit_limit,
    cost: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide("shmlimit_peek", limit, false, decision_out, |l| {
            l.peek(cost)
        })
    }
}

/// `shmlimit_acquire` dated at `now_ns` on the host's `CLOCK_MONOTONIC` timeline instead of
/// reading the clock (for replaying traces and for tests). A `now_ns` older than the shared
/// state is clamped, as any stale clock read is: time never moves backwards.
///
/// The date is checked against the clock (read once, on this dated call only): a `now_ns`
/// ahead of it by more than 1 ms (`SHMLIMIT_DATE_TOLERANCE_NS`), or beyond 2^61 ns (what the
/// state encodes), is refused with `SHMLIMIT_CLOCK_OUT_OF_RANGE`, consuming nothing: no date
/// can lock other processes out, open the limit to them, or damage the shared state.
///
/// Errors: as `shmlimit_acquire`, and `SHMLIMIT_CLOCK_OUT_OF_RANGE` for a date refused as above.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_acquire`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_acquire_at(
    limit: *const shmlimit_limit,
    cost: u64,
    now_ns: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide("shmlimit_acquire_at", limit, true, decision_out, |l| {
            l.try_acquire_at(cost, now_ns)
        })
    }
}

/// Admit `cost` units, waiting up to `timeout_ns` for them. A token bucket books the tokens
/// at once (first come, first served across processes) and sleeps the delay, or refuses at
/// once, consuming nothing, when the delay would exceed `timeout_ns`; fixed and sliding windows
/// and the sliding log sleep the exact retry-after and try again until the grant or the
/// deadline. `decision_out` is allowed, or denied with nothing consumed.
///
/// This call blocks the calling thread (at most about `timeout_ns`); `UINT64_MAX` waits as
/// long as it takes.
///
/// Errors: as `shmlimit_acquire`; `SHMLIMIT_WRONG_KIND` on a concurrency limit (use
/// `shmlimit_permit_acquire_timeout`), an adaptive one (the message names the call to use), a
/// counters limit or a keyed limit.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_acquire`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_acquire_timeout(
    limit: *const shmlimit_limit,
    cost: u64,
    timeout_ns: u64,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe {
        decide("shmlimit_acquire_timeout", limit, true, decision_out, |l| {
            l.acquire_timeout(cost, std::time::Duration::from_nanos(timeout_ns))
        })
    }
}

/// Give back what `grant` (a decision of this limit, passed back unchanged) admitted, for work
/// that was admitted but never done. A refund never creates more budget than the grant took:
/// a bucket never fills past full, a window refund applies only while the grant's window is
/// still counted, a log refund frees entries dated no later than the grant. Refunding a
/// denial, a shadow denial or a peek does nothing; refunding a grant twice is the caller's
/// mistake (bounded by the same rules).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (a
/// keyed limit: use `shmlimit_refund_key`; a concurrency limit: release the permit),
/// `SHMLIMIT_CORRUPT_STATE`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `grant` NULL or a valid `shmlimit_decision`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_refund(
    limit: *const shmlimit_limit,
    grant: *const shmlimit_decision,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe { refund("shmlimit_refund", limit, grant, None) }
}

/// Give back `units` of what `grant` admitted (at most its cost; see `shmlimit_refund`).
///
/// Errors: as `shmlimit_refund`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// As `shmlimit_refund`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_refund_units(
    limit: *const shmlimit_limit,
    grant: *const shmlimit_decision,
    units: u64,
) -> shmlimit_status {
    // SAFETY: forwarded contract.
    unsafe { refund("shmlimit_refund_units", limit, grant, Some(units)) }
}

/// # Safety
///
/// As `shmlimit_refund`.
unsafe fn refund(
    function: &'static str,
    limit: *const shmlimit_limit,
    grant: *const shmlimit_decision,
    units: Option<u64>,
) -> shmlimit_status {
    ffi_boundary!(function, {
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: a valid decision (the caller's contract).
        let grant = unsafe { arg_ref("grant", grant) }?.to_grant();
        limit.inner.refund(&grant, units)?;
        Ok(())
    })
}

/// This limit's decision counters, summed over every process attached to the file, into
/// `stats_out`. Counters of concurrent decisions may or may not be included.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`.
///
/// Thread-safety: may be called concurrently with decisions.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `stats_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_limit_stats(
    limit: *const shmlimit_limit,
    stats_out: *mut shmlimit_stats,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_limit_stats", {
        let out = arg_out("stats_out", stats_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `stats_out` is valid for one write (the caller's contract).
        unsafe { out.write(limit.inner.as_limit().stats().into()) };
        Ok(())
    })
}
