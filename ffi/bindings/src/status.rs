//! The status codes of every binding, in one table.
//!
//! Each row names a failure once: its number (the C enum `shmlimit_status`'s value, the Python
//! exception's `code`), its C name (`SHMLIMIT_` + [`Status::name`]), the class name every
//! language raises it as ([`Status::class`]: `IoError`, `WrongKindError`, ...), the family of the
//! language's own exceptions it also belongs to ([`Family`]), and its description
//! (`shmlimit_strerror`, the Python class's docstring).
//!
//! Codes 1 to 99 are failures of a binding's boundary itself (a bad argument); codes from 100 on
//! map one to one onto the error kinds of the Rust API ([`code_of`]), in the order they were
//! introduced. A value is never reused for another meaning. The C header's enum is generated from
//! `ffi/src/status.rs`, whose test checks it against this table; the Python package builds its
//! exception classes from [`STATUSES`] at import.

use std::ffi::CStr;

use shmlimit::Error;

/// The exceptions of a language a failure also belongs to, so that a caller may catch it as
/// what it is (a bad value, an OS error, ...) without naming shmlimit's classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Only the library's own base class.
    None,
    /// A bad argument value (Python `ValueError`).
    Value,
    /// An index out of range (Python `IndexError`).
    Index,
    /// A failed operating-system call (Python `OSError`, with its `errno`).
    Os,
    /// A name that was looked up and not found (Python `LookupError`).
    Lookup,
    /// An operation on a value of the wrong kind (Python `TypeError`).
    Type,
}

/// One status code.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    /// The number: `shmlimit_status` in C, `code` of the Python exception.
    pub code: i32,
    /// The C name without its prefix: `SHMLIMIT_` + this.
    pub name: &'static str,
    /// The exception class every language raises it as (none for success).
    pub class: &'static str,
    /// The language's own exceptions it also belongs to.
    pub family: Family,
    /// A static description, also NUL-terminated for C.
    pub description: &'static CStr,
}

macro_rules! statuses {
    ($($code:literal $name:ident $class:ident $family:ident $description:literal;)*) => {
        /// Every status code, in numeric order.
        pub const STATUSES: &[Status] = &[$(Status {
            code: $code,
            name: stringify!($name),
            class: stringify!($class),
            family: Family::$family,
            description: $description,
        }),*];
    };
}

statuses! {
    0 OK Ok None c"success";
    1 NULL_POINTER NullPointerError None c"a required pointer argument was NULL";
    2 BAD_UTF8 BadUtf8Error Value c"a limit name was not valid UTF-8";
    3 INTERNAL InternalError None c"internal error (a bug in shmlimit was caught)";
    4 BAD_LENGTH BadLengthError Value c"a length argument was impossible";
    5 MISALIGNED_POINTER MisalignedPointerError None c"a pointer argument was misaligned";
    6 OUT_OF_RANGE OutOfRangeError Index c"an index argument was out of range";
    100 IO IoError Os c"an operating-system call failed";
    101 SYMLINK SymlinkError None c"the path is a symbolic link";
    102 NOT_REGULAR_FILE NotRegularFileError None c"the path is not a regular file";
    103 PERMISSION PermissionDeniedError None c"the file's owner or mode is not acceptable";
    104 FOREIGN ForeignFileError None c"not a shmlimit file";
    105 VERSION VersionError None c"incompatible file format version";
    106 SIZE SizeError None c"the file's size disagrees with its header";
    107 CORRUPT CorruptFileError None c"the file's header or definitions are corrupt";
    108 NOT_INITIALIZED NotInitializedError None c"the file was never fully initialised";
    109 CLOCK_MISMATCH ClockMismatchError None c"the file belongs to another time namespace";
    110 DEFINITION_CONFLICT DefinitionConflictError None c"the file holds other limit definitions";
    111 INVALID_PARAMETER InvalidParameterError Value c"invalid limit definition or parameter";
    112 UNKNOWN_LIMIT UnknownLimitError Lookup c"no limit of that name";
    113 ZERO_COST ZeroCostError Value c"a cost must be at least 1";
    114 COST_EXCEEDS_CAPACITY CostExceedsCapacityError Value c"the cost exceeds the limit's capacity";
    115 CORRUPT_STATE CorruptStateError None c"the limit's shared state is corrupt";
    116 CLOCK_OUT_OF_RANGE ClockOutOfRangeError None c"the clock is outside the representable range";
    117 TABLE_FULL TableFullError None c"the keyed limit's table is full";
    118 INVALID_KEY InvalidKeyError Value c"invalid key";
    119 WRONG_KIND WrongKindError Type c"the operation does not apply to this kind of limit";
}

/// `SHMLIMIT_INTERNAL`: what an error kind without a code of its own is reported as.
pub const INTERNAL: i32 = 3;

/// The row of `code`, if it is one.
pub fn status(code: i32) -> Option<&'static Status> {
    STATUSES.iter().find(|s| s.code == code)
}

/// The code of a Rust error: one code per error kind.
pub fn code_of(error: &Error) -> i32 {
    match error {
        Error::Io { .. } => 100,
        Error::Symlink(_) => 101,
        Error::NotRegularFile(_) => 102,
        Error::Permission { .. } => 103,
        Error::Foreign(_) => 104,
        Error::Version { .. } => 105,
        Error::Size { .. } => 106,
        Error::Corrupt { .. } => 107,
        Error::NotInitialized(_) => 108,
        Error::ClockMismatch { .. } => 109,
        Error::DefinitionConflict { .. } => 110,
        Error::InvalidParameter { .. } => 111,
        Error::UnknownLimit(_) => 112,
        Error::ZeroCost => 113,
        Error::CostExceedsCapacity { .. } => 114,
        Error::CorruptState { .. } => 115,
        Error::ClockOutOfRange(_) => 116,
        Error::TableFull { .. } => 117,
        Error::InvalidKey { .. } => 118,
        Error::WrongKind { .. } => 119,
        // An error kind added to the library before it has a code here: reported as internal
        // (with its message intact) until it gets the next free number above.
        #[allow(unreachable_patterns)]
        _ => INTERNAL,
    }
}

/// The `errno` of an [`Error::Io`]; 0 for every other error.
pub fn os_error_of(error: &Error) -> i32 {
    match error {
        Error::Io { source, .. } => source.raw_os_error().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_ordered_and_named() {
        for pair in STATUSES.windows(2) {
            assert!(pair[0].code < pair[1].code, "{pair:?}: not in order");
        }
        for s in STATUSES {
            assert!(s
                .name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
            assert!(s.code == 0 || s.class.ends_with("Error"), "{s:?}");
            assert!(!s.description.to_bytes().is_empty());
            assert_eq!(status(s.code).map(|r| r.name), Some(s.name));
        }
        assert_eq!(status(INTERNAL).map(|s| s.name), Some("INTERNAL"));
        assert!(status(7).is_none());
    }

    #[test]
    fn every_error_kind_has_its_own_code() {
        let io = Error::Io {
            op: "open",
            path: "/nowhere".into(),
            source: std::io::Error::from_raw_os_error(2),
        };
        assert_eq!(code_of(&io), 100);
        assert_eq!(os_error_of(&io), 2);
        assert_eq!(code_of(&Error::ZeroCost), 113);
        assert_eq!(os_error_of(&Error::ZeroCost), 0);
    }
}
