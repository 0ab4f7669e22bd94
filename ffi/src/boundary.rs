//! The boundary every export goes through: panics caught, arguments checked, failures recorded.
//!
//! Each exported function body is wrapped in [`ffi_boundary!`], which runs it under
//! `catch_unwind`, turns its `Err(Failure)` or a panic into a status code and records the
//! message as the thread's last error. Pointer arguments are checked by the helpers here (NULL,
//! alignment, slice sizes) before anything dereferences them, and out-parameters are written
//! only once the whole call has succeeded.

use std::any::Any;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use super::status::{set_last_error, shmlimit_status, Failure};

/// Run an export's body at the C boundary: `ffi_boundary!("shmlimit_x", { ...; Ok(()) })`
/// evaluates to a `shmlimit_status`.
macro_rules! ffi_boundary {
    ($function:expr, $body:block) => {
        $crate::boundary::run(
            $function,
            move || -> ::std::result::Result<(), $crate::status::Failure> { $body },
        )
    };
}
pub(crate) use ffi_boundary;

/// See [`ffi_boundary!`].
///
/// Always inlined into its export: called out of line, each export passed its body's captures
/// (the arguments) through memory, and a decision waited on reloading them (a stalled
/// store-to-load forwarding of the captured `commit` flag, about 7 ns of a 48 ns decision
/// through the C header).
#[inline(always)]
pub(crate) fn run(
    function: &'static str,
    body: impl FnOnce() -> Result<(), Failure>,
) -> shmlimit_status {
    // AssertUnwindSafe: after a panic the caller only sees an error code; no state that the
    // body was mutating is observed again (handles are immutable behind their pointers).
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => shmlimit_status::SHMLIMIT_OK,
        Ok(Err(failure)) => {
            set_last_error(function, &failure);
            failure.status
        }
        Err(payload) => {
            let failure = Failure::new(
                shmlimit_status::SHMLIMIT_INTERNAL,
                format!("internal error (panic): {}", panic_message(&*payload)),
            );
            set_last_error(function, &failure);
            failure.status
        }
    }
}

/// Run a body that returns nothing (the `_free` functions): a panic is swallowed, since there
/// is no code to return it through, and recorded as the last error.
pub(crate) fn run_void(function: &'static str, body: impl FnOnce()) {
    let _ = run(function, || {
        body();
        Ok(())
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

// The failures of the checks below are built out of line: inlined, their formatting sat in the
// middle of every export's hot path.

#[cold]
#[inline(never)]
fn null(argument: &str) -> Failure {
    Failure::new(
        shmlimit_status::SHMLIMIT_NULL_POINTER,
        format!("`{argument}` is NULL"),
    )
}

#[cold]
#[inline(never)]
fn misaligned(argument: &str, ptr: *const u8, align: usize) -> Failure {
    Failure::new(
        shmlimit_status::SHMLIMIT_MISALIGNED_POINTER,
        format!("`{argument}` ({ptr:p}) is not aligned to {align} bytes"),
    )
}

#[inline(always)]
fn check<T>(argument: &str, ptr: *const T) -> Result<NonNull<T>, Failure> {
    let Some(ptr) = NonNull::new(ptr.cast_mut()) else {
        return Err(null(argument));
    };
    if !ptr.as_ptr().is_aligned() {
        return Err(misaligned(
            argument,
            ptr.as_ptr().cast_const().cast(),
            std::mem::align_of::<T>(),
        ));
    }
    Ok(ptr)
}

/// Borrow the object behind an input pointer.
///
/// # Safety
///
/// If `ptr` is non-NULL and aligned it must point at a valid `T` that stays valid and unmutated
/// for `'a`.
pub(crate) unsafe fn arg_ref<'a, T>(argument: &str, ptr: *const T) -> Result<&'a T, Failure> {
    let ptr = check(argument, ptr)?;
    // SAFETY: non-NULL and aligned (checked); validity for 'a is the caller's contract.
    Ok(unsafe { ptr.as_ref() })
}

/// [`arg_ref`] with the argument's name made only when the pointer is refused: a composed
/// check names `checks[i].limit`, and formatting that name on every call cost more than the
/// decisions.
///
/// # Safety
///
/// As [`arg_ref`].
#[inline]
pub(crate) unsafe fn arg_ref_named<'a, T>(
    argument: impl FnOnce() -> String,
    ptr: *const T,
) -> Result<&'a T, Failure> {
    match NonNull::new(ptr.cast_mut()) {
        // SAFETY: non-NULL and aligned (checked); validity for 'a is the caller's contract.
        Some(p) if p.as_ptr().is_aligned() => Ok(unsafe { p.as_ref() }),
        // The failure, named (cold).
        _ => check(&argument(), ptr).map(|p| {
            // SAFETY: as above (not reached: the pointer was just refused).
            unsafe { p.as_ref() }
        }),
    }
}

/// Borrow an optional input (NULL means "use the defaults").
///
/// # Safety
///
/// As [`arg_ref`].
pub(crate) unsafe fn arg_opt<'a, T>(
    argument: &str,
    ptr: *const T,
) -> Result<Option<&'a T>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    unsafe { arg_ref(argument, ptr) }.map(Some)
}

/// Borrow an array argument `(ptr, len)`. `(NULL, 0)` is the empty array.
///
/// # Safety
///
/// If `ptr` is non-NULL and aligned and `len` is possible, `ptr` must point at `len` valid,
/// initialised `T`s that stay valid and unmutated for `'a`.
pub(crate) unsafe fn arg_slice<'a, T>(
    argument: &str,
    ptr: *const T,
    len: usize,
) -> Result<&'a [T], Failure> {
    if ptr.is_null() && len == 0 {
        return Ok(&[]);
    }
    let ptr = check(argument, ptr)?;
    let fits = len
        .checked_mul(std::mem::size_of::<T>())
        .is_some_and(|bytes| bytes <= isize::MAX as usize);
    if !fits {
        return Err(Failure::new(
            shmlimit_status::SHMLIMIT_BAD_LENGTH,
            format!("`{argument}` length {len} is larger than any array can be"),
        ));
    }
    // SAFETY: non-NULL, aligned, total size within isize::MAX (checked); that `len` elements are
    // valid for 'a is the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) })
}

/// The bytes of a NUL-terminated string argument (not including the NUL).
///
/// # Safety
///
/// If `ptr` is non-NULL it must point at a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn arg_bytes<'a>(
    argument: &str,
    ptr: *const c_char,
) -> Result<&'a [u8], Failure> {
    let ptr = check(argument, ptr)?;
    // SAFETY: non-NULL (checked); NUL termination and validity are the caller's contract.
    Ok(unsafe { CStr::from_ptr(ptr.as_ptr()) }.to_bytes())
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
///
/// As [`arg_bytes`].
pub(crate) unsafe fn arg_str<'a>(argument: &str, ptr: *const c_char) -> Result<&'a str, Failure> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { arg_bytes(argument, ptr) }?;
    std::str::from_utf8(bytes).map_err(|e| {
        Failure::new(
            shmlimit_status::SHMLIMIT_BAD_UTF8,
            format!("`{argument}` is not valid UTF-8: {e}"),
        )
    })
}

/// An out-parameter, checked on entry and written only on success.
pub(crate) struct Out<T>(NonNull<T>);

/// Check an out-parameter pointer before doing any work.
pub(crate) fn arg_out<T>(argument: &str, ptr: *mut T) -> Result<Out<T>, Failure> {
    check(argument, ptr.cast_const()).map(Out)
}

impl<T> Out<T> {
    /// The checked (non-NULL, aligned) pointer, for an array out-parameter written element by
    /// element once the call has succeeded.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.0.as_ptr()
    }

    /// Write the result.
    ///
    /// # Safety
    ///
    /// The pointer given to [`arg_out`] must be valid for a write of `T`.
    pub(crate) unsafe fn write(self, value: T) {
        // SAFETY: non-NULL and aligned (checked in arg_out); writable is the caller's contract.
        // `write` does not drop the previous contents, which may be uninitialised.
        unsafe { self.0.as_ptr().write(value) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shmlimit_last_error;

    fn last_error() -> String {
        // SAFETY: shmlimit_last_error returns a NUL-terminated string valid until the next
        // failure on this thread.
        unsafe { CStr::from_ptr(shmlimit_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_internal_with_its_message() {
        let status = ffi_boundary!("shmlimit_test", {
            if std::hint::black_box(true) {
                panic!("boom {}", 42);
            }
            Ok(())
        });
        assert_eq!(status, shmlimit_status::SHMLIMIT_INTERNAL);
        assert_eq!(
            last_error(),
            "shmlimit_test: internal error (panic): boom 42"
        );
        run_void("shmlimit_test_free", || panic!("in free"));
        assert_eq!(
            last_error(),
            "shmlimit_test_free: internal error (panic): in free"
        );
    }

    #[test]
    fn argument_checks() {
        let value = 7u64;
        // SAFETY: a NULL pointer and a valid one.
        unsafe {
            assert_eq!(
                arg_ref::<u64>("p", std::ptr::null()).unwrap_err().status,
                shmlimit_status::SHMLIMIT_NULL_POINTER
            );
            assert_eq!(*arg_ref("p", &value).unwrap(), 7);
            assert!(arg_opt::<u64>("p", std::ptr::null()).unwrap().is_none());
        }
        let bytes = [0u64; 2];
        let misaligned = (bytes.as_ptr() as *const u8).wrapping_add(1) as *const u64;
        // SAFETY: the pointer is rejected before any dereference.
        let err = unsafe { arg_ref("p", misaligned) }.unwrap_err();
        assert_eq!(err.status, shmlimit_status::SHMLIMIT_MISALIGNED_POINTER);
        // SAFETY: (NULL, 0) is the empty slice; (NULL, 1) and an overflowing length are refused
        // before any dereference.
        unsafe {
            assert!(arg_slice::<u64>("s", std::ptr::null(), 0)
                .unwrap()
                .is_empty());
            assert_eq!(
                arg_slice::<u64>("s", std::ptr::null(), 1)
                    .unwrap_err()
                    .status,
                shmlimit_status::SHMLIMIT_NULL_POINTER
            );
            assert_eq!(
                arg_slice("s", bytes.as_ptr(), usize::MAX / 4)
                    .unwrap_err()
                    .status,
                shmlimit_status::SHMLIMIT_BAD_LENGTH
            );
            assert_eq!(
                arg_str("n", c"\xff".as_ptr()).unwrap_err().status,
                shmlimit_status::SHMLIMIT_BAD_UTF8
            );
        }
    }
}
