//! Reservations from C: book the next tokens of a token bucket now, proceed after a delay.

use std::sync::Mutex;
use std::time::Duration;

use super::boundary::{arg_out, arg_ref, ffi_boundary, run_void};
use super::status::{shmlimit_status::*, Failure};
use super::types::shmlimit_decision;
use super::{shmlimit_limit, shmlimit_status};
use shmlimit::Reservation;

/// A granted booking of tokens (opaque), made by `shmlimit_reserve`; freed by
/// `shmlimit_reservation_free`. Thread-safe.
#[allow(non_camel_case_types)]
pub struct shmlimit_reservation {
    state: Mutex<State>,
}

enum State {
    /// Booked: not yet waited for or cancelled.
    Booked(Box<Reservation>),
    /// Waited for: the grant.
    Waited(shmlimit_decision),
    /// Given back (or the cancel found that it could not be).
    Cancelled,
}

/// What `shmlimit_reserve` booked.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_booking {
    /// True when the tokens are booked; false when the delay would have exceeded the maximum
    /// (nothing was taken).
    pub granted: bool,
    /// The tokens booked (or asked for).
    pub cost: u64,
    /// How long after booking the caller may proceed (granted), or would have had to wait.
    pub delay_ns: u64,
    /// When the caller may proceed, in `CLOCK_MONOTONIC` nanoseconds: increases with booking
    /// order across processes.
    pub ready_at_ns: u64,
    /// Written as zero.
    pub reserved: [u64; 2],
}

const _: () = assert!(std::mem::size_of::<shmlimit_booking>() == 48);

/// Book the next `cost` tokens of a token bucket now, to be used after a delay, if that delay
/// is at most `max_delay_ns`; otherwise refuse at once and take nothing. Bookings are served
/// first come, first served across processes, each sleeping exactly its own delay, and the
/// bucket's bound holds: a booking is an admission dated when it proceeds.
///
/// - `booking_out`: what was booked (`granted`, `delay_ns`, `ready_at_ns`).
/// - `reservation_out`: a new handle when granted (wait for it with
///   `shmlimit_reservation_wait`, or give it back with `shmlimit_reservation_cancel`; free it
///   with `shmlimit_reservation_free`, which keeps the tokens booked); NULL when refused.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_ZERO_COST`,
/// `SHMLIMIT_COST_EXCEEDS_CAPACITY` (more than the burst), `SHMLIMIT_WRONG_KIND` (not an
/// unkeyed token bucket: use `shmlimit_acquire_timeout`), `SHMLIMIT_CORRUPT_STATE`.
///
/// Thread-safety: as `shmlimit_acquire`.
///
/// # Safety
///
/// `limit` must be NULL or a live handle; `booking_out` and `reservation_out` NULL or valid
/// for one write each.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_reserve(
    limit: *const shmlimit_limit,
    cost: u64,
    max_delay_ns: u64,
    booking_out: *mut shmlimit_booking,
    reservation_out: *mut *mut shmlimit_reservation,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_reserve", {
        let booking_out = arg_out("booking_out", booking_out)?;
        let reservation_out = arg_out("reservation_out", reservation_out)?;
        // SAFETY: a live handle (the caller's contract).
        let limit = unsafe { arg_ref("limit", limit) }?;
        let r = limit
            .inner
            .reserve(cost, Duration::from_nanos(max_delay_ns))?;
        let booking = shmlimit_booking {
            granted: r.is_granted(),
            cost: r.cost(),
            delay_ns: r.delay_ns(),
            ready_at_ns: r.ready_at_ns(),
            reserved: [0; 2],
        };
        let handle = if r.is_granted() {
            Box::into_raw(Box::new(shmlimit_reservation {
                state: Mutex::new(State::Booked(Box::new(r))),
            }))
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: both are valid for one write (the caller's contract).
        unsafe {
            booking_out.write(booking);
            reservation_out.write(handle);
        }
        Ok(())
    })
}

/// Sleep until the reservation may proceed and write its grant into `decision_out` (at once
/// if it was already waited for).
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_INVALID_PARAMETER`
/// (the reservation was cancelled).
///
/// Thread-safety: may be called from any thread; concurrent calls on one handle are
/// serialised.
///
/// # Safety
///
/// `reservation` must be NULL or a live handle; `decision_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_reservation_wait(
    reservation: *const shmlimit_reservation,
    decision_out: *mut shmlimit_decision,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_reservation_wait", {
        let out = arg_out("decision_out", decision_out)?;
        // SAFETY: a live handle (the caller's contract).
        let reservation = unsafe { arg_ref("reservation", reservation) }?;
        let mut state = reservation.state.lock().unwrap_or_else(|p| p.into_inner());
        let decision = match std::mem::replace(&mut *state, State::Cancelled) {
            State::Booked(r) => shmlimit_decision::from(r.wait()),
            State::Waited(d) => d,
            State::Cancelled => {
                return Err(Failure::new(
                    SHMLIMIT_INVALID_PARAMETER,
                    "invalid parameter: the reservation was cancelled",
                ))
            }
        };
        *state = State::Waited(decision);
        // SAFETY: `decision_out` is valid for one write (the caller's contract).
        unsafe { out.write(decision) };
        Ok(())
    })
}

/// Give the reservation's tokens back if nothing was booked or admitted after it (one CAS);
/// `*cancelled_out` is false when they could not be (a later booking depends on them: they
/// stay used, which is stricter, never looser), or when the reservation was already waited
/// for or cancelled. The handle still has to be freed.
///
/// Errors: `SHMLIMIT_NULL_POINTER`, `SHMLIMIT_MISALIGNED_POINTER`, `SHMLIMIT_CORRUPT_STATE`.
///
/// Thread-safety: as `shmlimit_reservation_wait`.
///
/// # Safety
///
/// `reservation` must be NULL or a live handle; `cancelled_out` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_reservation_cancel(
    reservation: *const shmlimit_reservation,
    cancelled_out: *mut bool,
) -> shmlimit_status {
    ffi_boundary!("shmlimit_reservation_cancel", {
        let out = arg_out("cancelled_out", cancelled_out)?;
        // SAFETY: a live handle (the caller's contract).
        let reservation = unsafe { arg_ref("reservation", reservation) }?;
        let mut state = reservation.state.lock().unwrap_or_else(|p| p.into_inner());
        let cancelled = match std::mem::replace(&mut *state, State::Cancelled) {
            State::Booked(r) => r.cancel()?,
            waited @ State::Waited(_) => {
                *state = waited;
                false
            }
            State::Cancelled => false,
        };
        // SAFETY: `cancelled_out` is valid for one write (the caller's contract).
        unsafe { out.write(cancelled) };
        Ok(())
    })
}

/// Free a reservation handle; a booking neither waited for nor cancelled keeps its tokens
/// (the caller may proceed at `ready_at_ns` without waiting through the library). NULL is a
/// no-op.
///
/// Thread-safety: no other thread may be using `reservation` (or use it afterwards).
///
/// # Safety
///
/// `reservation` must be NULL or a handle from `shmlimit_reserve` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn shmlimit_reservation_free(reservation: *mut shmlimit_reservation) {
    run_void("shmlimit_reservation_free", || {
        if !reservation.is_null() {
            // SAFETY: a live handle made by Box::into_raw (the caller's contract), freed once.
            drop(unsafe { Box::from_raw(reservation) });
        }
    })
}
