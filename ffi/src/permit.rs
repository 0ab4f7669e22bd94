//! Permits of concurrency limits from C: at most `limit` held at once across every process
//! (per key, for a keyed limit), each named by a 64-bit id, taken over when its holder dies or
//! its lease expires.

use std::time::Duration;

use super::boundary::{arg_out, arg_ref, ffi_boundary};
use super::handle::AnyHandle;
use super::keyed::key_arg;
use super::status::{shmlimit_status::*, Failure};
use super::types::shmlimit_permit_holder;
use super::{shmlimit_limit, shmlimit_status};
use shmlimit::Permit;

/// What `shmlimit_permit_acquire` returns for a permit that holds nothing: granted by a shadow
/// (dry-run) limit that would have refused, or by a full key table whose policy is
/// `SHMLIMIT_FULL_ALLOW`. Admitted, but releasing it does nothing. Never the id of a real
/// permit, and not 0.
pub const SHMLIMIT_PERMIT_SHADOW: u64 = 1;

/// A permit listing asked of a limit that is not a concurrency limit.
#[cold]
fn not_concurrency(limit: &AnyHandle) -> shmlimit::Error {
    super::handle::wrong::concurrency(limit.as_limit())
}

/// The id C callers get for an acquisition: 0 for none.
fn permit_id(permit: Option<Permit>) -> u64 {
    match permit {
        None => 0,
        // Kept held past the handle: the caller releases it by id.
        Some(p) => match p.into_id() {
            0 => SHMLIMIT_PERMIT_SHADOW,
            id => id,
        },
    }
}

/// Take a permit of a concurrency limit if one is free (or held by a process that died, or
/// past its lease), without waiting. `*permit_out` receives its id (never 0), or 0 when all
/// are held: like a denial, that is not an error. Release it with `shmlimit_permit_release`;
/// a process that exits or is killed holding permits loses them to the next acquirers.
///
/// A permit belongs to the process that acquired it: a forked child cannot release its
/// parent's permits. A shadow limit that would have refused returns `SHMLIMIT_PERMIT_SHADOW`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (not
/// a concurrency limit), `SHMLIMIT_IO` (this process's `/proc/self/stat` could not be read).
///
/// Thread-safety: any number of threads and processes may acquire and release at once.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `permit_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_acquire(
    limit: *const shmlimit_limit,
    permit_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_acquire", {
        let out = arg_out("permit_out", permit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let id = permit_id(limit.inner.try_acquire_permit()?);
        // SAFETY: `permit_out` is valid for one write (the caller's contract).
        unsafe { out.write(id) };
        Ok(())
    })
}

/// `shmlimit_permit_acquire`, waiting up to `timeout_ns` for a permit to be released (or for a
/// holder to die or its lease to expire): the thread sleeps on a futex in the shared file,
/// woken by the first release, and looks for dead holders at least every 100 ms.
/// `*permit_out` is 0 when the timeout passed with every permit held. `UINT64_MAX` waits as
/// long as it takes. A shadow limit never waits.
///
/// Errors: as `shmlimit_permit_acquire`.
///
/// Thread-safety: as `shmlimit_permit_acquire`.
///
/// # Safety
///
/// As `shmlimit_permit_acquire`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_acquire_timeout(
    limit: *const shmlimit_limit,
    timeout_ns: u64,
    permit_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_acquire_timeout", {
        let out = arg_out("permit_out", permit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let permit = limit
            .inner
            .acquire_permit_timeout(Duration::from_nanos(timeout_ns))?;
        // SAFETY: `permit_out` is valid for one write (the caller's contract).
        unsafe { out.write(permit_id(permit)) };
        Ok(())
    })
}

/// Take a permit of a keyed concurrency limit for `key` (at most `limit` per key are held at
/// once, across every process), without waiting. `*permit_out` receives its id (never 0), or 0
/// when all of the key's permits are held, or when the key table has no slot for a new key and
/// its policy is `SHMLIMIT_FULL_DENY` (`SHMLIMIT_FULL_ALLOW` grants `SHMLIMIT_PERMIT_SHADOW`).
/// Release it with `shmlimit_permit_release`, as any permit.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_KEY`,
/// `SHMLIMIT_TABLE_FULL` (policy `SHMLIMIT_FULL_ERROR`), `SHMLIMIT_WRONG_KIND` (not a keyed
/// concurrency limit), `SHMLIMIT_IO`.
///
/// Thread-safety: as `shmlimit_permit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes;
/// `permit_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_acquire_key(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    permit_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_acquire_key", {
        let out = arg_out("permit_out", permit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let id = permit_id(limit.inner.try_acquire_key_permit(key)?);
        // SAFETY: `permit_out` is valid for one write (the caller's contract).
        unsafe { out.write(id) };
        Ok(())
    })
}

/// `shmlimit_permit_acquire_key`, waiting up to `timeout_ns` for one of the key's permits to
/// be released (or for a holder to die or its lease to expire), asleep on a futex in the shared
/// file, woken by releases, looking again at least every 100 ms. `*permit_out` is 0 when the
/// timeout passed with every permit of the key held. `UINT64_MAX` waits as long as it takes.
///
/// Errors: as `shmlimit_permit_acquire_key`.
///
/// Thread-safety: as `shmlimit_permit_acquire`.
///
/// # Safety
///
/// As `shmlimit_permit_acquire_key`.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_acquire_key_timeout(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    timeout_ns: u64,
    permit_out: *mut u64,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_acquire_key_timeout", {
        let out = arg_out("permit_out", permit_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let permit = limit
            .inner
            .acquire_key_permit_timeout(key, Duration::from_nanos(timeout_ns))?;
        // SAFETY: `permit_out` is valid for one write (the caller's contract).
        unsafe { out.write(permit_id(permit)) };
        Ok(())
    })
}

/// How many of `key`'s permits are held now, across every process (0 for a key without a
/// slot).
///
/// Errors: as `shmlimit_permit_acquire_key`.
///
/// Thread-safety: as `shmlimit_permit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `key` NULL or `key_len` readable bytes; `held_out`
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_key_held(
    limit: *const shmlimit_limit,
    key: *const u8,
    key_len: usize,
    held_out: *mut u32,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_key_held", {
        let out = arg_out("held_out", held_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        // SAFETY: `key` is NULL or `key_len` readable bytes (the caller's contract).
        let key = unsafe { key_arg(key, key_len) }?;
        let held = limit.inner.key_permits_held(key)?;
        // SAFETY: `held_out` is valid for one write (the caller's contract).
        unsafe { out.write(held) };
        Ok(())
    })
}

/// Release the permit `permit` (an id from `shmlimit_permit_acquire`), if this process holds
/// it, and wake a waiter. `*released_out` is false when it was not held: already released,
/// taken over after its lease expired, freed by `shmlimit_limit_reset`, another process's
/// permit, `SHMLIMIT_PERMIT_SHADOW`, 0, or an id that names nothing. Not an error.
///
/// On an adaptive concurrency limit, keyed or not, `permit` is the `id` that
/// `shmlimit_permit_holders` lists for one of this process's `shmlimit_adaptive_permit`s: it
/// is released as `SHMLIMIT_OUTCOME_DROPPED` (the limit learns nothing from it), and the
/// `shmlimit_adaptive_permit` reports nothing when it is released later (it still must be, to
/// free it).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (not a
/// concurrency limit, adaptive or not), `SHMLIMIT_IO`.
///
/// Thread-safety: as `shmlimit_permit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `released_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_release(
    limit: *const shmlimit_limit,
    permit: u64,
    released_out: *mut bool,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_release", {
        let out = arg_out("released_out", released_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let released = limit.inner.release_permit(permit)?;
        // SAFETY: `released_out` is valid for one write (the caller's contract).
        unsafe { out.write(released) };
        Ok(())
    })
}

/// The held permits of a concurrency limit (adaptive or not, keyed or not), for inspection: who
/// holds each, since when, until when, and whether it is reclaimable (this checks each
/// holder's liveness: system calls).
///
/// - `holders_out`, `holders_len`: an array that receives the first `holders_len` held permits
///   (NULL with `holders_len` 0 just counts them).
/// - `count_out`: receives the number of held permits, which may exceed `holders_len`.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_BAD_LENGTH`,
/// `SHMLIMIT_WRONG_KIND` (not a concurrency limit, adaptive or not).
///
/// Thread-safety: may be called concurrently with acquisitions (the listing is a snapshot).
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `holders_out` NULL or valid for writing
/// `holders_len` elements; `count_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_holders(
    limit: *const shmlimit_limit,
    holders_out: *mut shmlimit_permit_holder,
    holders_len: usize,
    count_out: *mut usize,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_holders", {
        let count = arg_out("count_out", count_out)?;
        let holders = if holders_len == 0 {
            None
        } else {
            let fits = holders_len
                .checked_mul(std::mem::size_of::<shmlimit_permit_holder>())
                .is_some_and(|bytes| bytes <= isize::MAX as usize);
            if !fits {
                return Err(Failure::new(
                    SHMLIMIT_BAD_LENGTH,
                    format!("`holders_out` length {holders_len} is larger than any array can be"),
                ));
            }
            Some(arg_out("holders_out", holders_out)?)
        };
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let list = limit
            .inner
            .permit_holders()
            .ok_or_else(|| not_concurrency(&limit.inner))?;
        if let Some(holders) = holders {
            let base = holders.as_ptr();
            for (i, h) in list.iter().take(holders_len).enumerate() {
                // SAFETY: `holders_out` is valid for `holders_len` writes (the caller's
                // contract), non-NULL and aligned (checked), and `i < holders_len`.
                unsafe { base.add(i).write(shmlimit_permit_holder::from(*h)) };
            }
        }
        // SAFETY: `count_out` is valid for one write (the caller's contract).
        unsafe { count.write(list.len()) };
        Ok(())
    })
}

/// Free every permit whose holder is gone or whose lease expired, and wake waiters for them;
/// `*reclaimed_out` receives how many. Acquirers do the same when they find no free permit,
/// so this is never needed for correctness (it is what a periodic cleanup or the CLI's `gc`
/// runs). A concurrency limit's, adaptive or not (an adaptive limit learns nothing from a
/// permit reclaimed).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_WRONG_KIND` (not a
/// concurrency limit, adaptive or not).
///
/// Thread-safety: as `shmlimit_permit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `reclaimed_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_permit_reclaim_dead(
    limit: *const shmlimit_limit,
    reclaimed_out: *mut usize,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_permit_reclaim_dead", {
        let out = arg_out("reclaimed_out", reclaimed_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let reclaimed = limit
            .inner
            .reclaim_dead_permits()
            .ok_or_else(|| not_concurrency(&limit.inner))?;
        // SAFETY: `reclaimed_out` is valid for one write (the caller's contract).
        unsafe { out.write(reclaimed) };
        Ok(())
    })
}
