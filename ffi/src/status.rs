//! Status codes, their static descriptions, and the per-thread detail of the last failure.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};

use shmlimit::Error;

/// The result of every fallible `shmlimit_` function.
///
/// `SHMLIMIT_OK` is zero. Codes 1 to 99 are failures of the C boundary itself (a bad argument);
/// codes from 100 on map one to one onto the error kinds of the Rust API, in the order they were
/// introduced. A value is never reused for another meaning: new error kinds get new numbers, so a
/// caller may keep a `switch` over the codes it knows and treat the others as generic failures.
/// `shmlimit_strerror` names any code; `shmlimit_last_error` gives the detail of the last failure
/// on the calling thread.
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_status {
    /// Success.
    SHMLIMIT_OK = 0,
    /// A required pointer argument was NULL.
    SHMLIMIT_NULL_POINTER = 1,
    /// A limit name was not valid UTF-8.
    SHMLIMIT_BAD_UTF8 = 2,
    /// A bug in the library was caught at the boundary (a panic); the call had no effect
    /// beyond what it had done when it failed. Please report it with the message.
    SHMLIMIT_INTERNAL = 3,
    /// A length argument was impossible (an array whose size in bytes overflows).
    SHMLIMIT_BAD_LENGTH = 4,
    /// A pointer argument was not aligned for its type.
    SHMLIMIT_MISALIGNED_POINTER = 5,
    /// An index argument was past the end (for example a definition index >= the count).
    SHMLIMIT_OUT_OF_RANGE = 6,
    /// An operating-system call failed (`shmlimit_last_os_error` gives its `errno`).
    SHMLIMIT_IO = 100,
    /// The path names a symbolic link; limiter files are never opened through one.
    SHMLIMIT_SYMLINK = 101,
    /// The path names something other than a regular file.
    SHMLIMIT_NOT_REGULAR_FILE = 102,
    /// The file's owner or mode is not acceptable under the open options.
    SHMLIMIT_PERMISSION = 103,
    /// The file is not a shmlimit file (bad magic number).
    SHMLIMIT_FOREIGN = 104,
    /// The file was written by an incompatible format version.
    SHMLIMIT_VERSION = 105,
    /// The file's size disagrees with its header.
    SHMLIMIT_SIZE = 106,
    /// The file's header or definitions are damaged.
    SHMLIMIT_CORRUPT = 107,
    /// The file's creator did not finish initialising it in time.
    SHMLIMIT_NOT_INITIALIZED = 108,
    /// The file was created in another time namespace: its monotonic clock is not ours.
    SHMLIMIT_CLOCK_MISMATCH = 109,
    /// The file exists with other limit definitions than the ones given.
    SHMLIMIT_DEFINITION_CONFLICT = 110,
    /// A definition is invalid (bad name, kind, parameter, reserved field, duplicate...).
    SHMLIMIT_INVALID_PARAMETER = 111,
    /// No limit of that name is defined in the file.
    SHMLIMIT_UNKNOWN_LIMIT = 112,
    /// A cost of zero was requested.
    SHMLIMIT_ZERO_COST = 113,
    /// The cost exceeds what the limit can ever grant in one decision.
    SHMLIMIT_COST_EXCEEDS_CAPACITY = 114,
    /// The limit's shared state holds an impossible value; decisions fail closed.
    SHMLIMIT_CORRUPT_STATE = 115,
    /// The clock reads outside the range the state encoding can hold.
    SHMLIMIT_CLOCK_OUT_OF_RANGE = 116,
    /// A keyed limit's table has no slot for a new key (and its policy is to report it).
    SHMLIMIT_TABLE_FULL = 117,
    /// A key is empty or too long.
    SHMLIMIT_INVALID_KEY = 118,
    /// The operation does not apply to this kind of limit (for example a rate decision on a
    /// concurrency limit).
    SHMLIMIT_WRONG_KIND = 119,
}

use shmlimit_status::*;

impl shmlimit_status {
    /// Every code, for the tests and for `shmlimit_strerror`.
    pub(crate) const ALL: [shmlimit_status; 27] = [
        SHMLIMIT_OK,
        SHMLIMIT_NULL_POINTER,
        SHMLIMIT_BAD_UTF8,
        SHMLIMIT_INTERNAL,
        SHMLIMIT_BAD_LENGTH,
        SHMLIMIT_MISALIGNED_POINTER,
        SHMLIMIT_OUT_OF_RANGE,
        SHMLIMIT_IO,
        SHMLIMIT_SYMLINK,
        SHMLIMIT_NOT_REGULAR_FILE,
        SHMLIMIT_PERMISSION,
        SHMLIMIT_FOREIGN,
        SHMLIMIT_VERSION,
        SHMLIMIT_SIZE,
        SHMLIMIT_CORRUPT,
        SHMLIMIT_NOT_INITIALIZED,
        SHMLIMIT_CLOCK_MISMATCH,
        SHMLIMIT_DEFINITION_CONFLICT,
        SHMLIMIT_INVALID_PARAMETER,
        SHMLIMIT_UNKNOWN_LIMIT,
        SHMLIMIT_ZERO_COST,
        SHMLIMIT_COST_EXCEEDS_CAPACITY,
        SHMLIMIT_CORRUPT_STATE,
        SHMLIMIT_CLOCK_OUT_OF_RANGE,
        SHMLIMIT_TABLE_FULL,
        SHMLIMIT_INVALID_KEY,
        SHMLIMIT_WRONG_KIND,
    ];

    /// The code of a Rust error: one code per error kind (`shmlimit_bindings::status`).
    pub(crate) fn of(error: &Error) -> shmlimit_status {
        let code = shmlimit_bindings::status::code_of(error);
        Self::ALL
            .into_iter()
            .find(|s| *s as i32 == code)
            .unwrap_or(SHMLIMIT_INTERNAL)
    }

    /// A static, NUL-terminated description (`shmlimit_bindings::status`).
    pub(crate) fn description(self) -> &'static CStr {
        shmlimit_bindings::status::status(self as i32)
            .map_or(c"unknown status code", |s| s.description)
    }
}

/// The detail of one failed call: its code and a message naming the function.
#[derive(Debug)]
pub(crate) struct Failure {
    pub status: shmlimit_status,
    pub message: String,
    pub os_error: i32,
}

impl Failure {
    pub(crate) fn new(status: shmlimit_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
            os_error: 0,
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let os_error = shmlimit_bindings::status::os_error_of(&error);
        Failure {
            status: shmlimit_status::of(&error),
            message: error.to_string(),
            os_error,
        }
    }
}

struct LastError {
    message: CString,
    os_error: i32,
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = RefCell::new(LastError {
        message: CString::default(),
        os_error: 0,
    });
}

/// Record `failure`, raised by the function `function`, as this thread's last error.
pub(crate) fn set_last_error(function: &str, failure: &Failure) {
    let mut text = format!("{function}: {}", failure.message);
    // Messages echo input cut to a bounded length already (`shmlimit::consts::MAX_ECHO`); this bounds
    // any message the boundary composes itself as well.
    const MAX_MESSAGE: usize = 16 * shmlimit::consts::MAX_ECHO;
    if text.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    // A message never holds a NUL in practice; if one does, cut it there rather than lose it.
    let text = match CString::new(text) {
        Ok(c) => c,
        Err(e) => {
            let cut = e.nul_position();
            let mut bytes = e.into_vec();
            bytes.truncate(cut);
            CString::new(bytes).unwrap_or_default()
        }
    };
    // `try_with`: during thread teardown the slot may be gone; the code still reaches the caller.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            slot.message = text;
            slot.os_error = failure.os_error;
        }
    });
}

/// A static description of a status code.
///
/// Returns a NUL-terminated string with static lifetime: never free it. An unknown code gives
/// `"unknown status code"`.
///
/// Thread-safety: may be called from any thread at any time.
#[no_mangle]
pub extern "C" fn shmlimit_strerror(code: i32) -> *const c_char {
    let text = shmlimit_status::ALL
        .iter()
        .find(|s| **s as i32 == code)
        .map_or(c"unknown status code", |s| s.description());
    text.as_ptr()
}

/// The message of the most recent failed `shmlimit_` call on the calling thread, naming the
/// function and the cause (for example the file path and the OS error).
///
/// Returns a NUL-terminated string owned by the library, or `""` if no call has failed on this
/// thread. Successful calls do not change it. It stays valid until the next failing `shmlimit_`
/// call on the same thread; copy it to keep it. Never free it.
///
/// Thread-safety: each thread has its own message.
#[no_mangle]
pub extern "C" fn shmlimit_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow() {
            // The CString lives in the thread-local slot until the next failure replaces it.
            Ok(slot) => slot.message.as_ptr(),
            Err(_) => c"".as_ptr(),
        })
        .unwrap_or(c"".as_ptr())
}

/// The `errno` of the most recent failed `shmlimit_` call on the calling thread when that failure
/// was `SHMLIMIT_IO`; 0 otherwise (or if no call has failed on this thread).
///
/// Thread-safety: each thread has its own value.
#[no_mangle]
pub extern "C" fn shmlimit_last_os_error() -> i32 {
    LAST_ERROR
        .try_with(|slot| slot.try_borrow().map_or(0, |s| s.os_error))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn codes_are_distinct_and_described() {
        for (i, a) in shmlimit_status::ALL.iter().enumerate() {
            for b in &shmlimit_status::ALL[..i] {
                assert_ne!(*a as i32, *b as i32, "{a:?} and {b:?} share a value");
            }
            // SAFETY: shmlimit_strerror returns a static NUL-terminated string.
            let text = unsafe { CStr::from_ptr(shmlimit_strerror(*a as i32)) };
            assert!(!text.to_bytes().is_empty());
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(shmlimit_strerror(-7)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown status code");
    }

    /// The C enum (which cbindgen writes into the header) and the bindings' table agree: the
    /// same codes, in the same order, under the same names.
    #[test]
    fn the_enum_is_the_bindings_table() {
        let table = shmlimit_bindings::status::STATUSES;
        assert_eq!(shmlimit_status::ALL.len(), table.len());
        for (variant, row) in shmlimit_status::ALL.iter().zip(table) {
            assert_eq!(*variant as i32, row.code, "{variant:?}");
            assert_eq!(format!("{variant:?}"), format!("SHMLIMIT_{}", row.name));
        }
    }
}
