//! The one error type of the crate.
//!
//! Every fallible operation returns [`Error`]; each variant names one kind of failure so that callers
//! (and the C ABI, which maps each variant to its own status code) can react to it without parsing text.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong when defining, creating, opening or using a limiter file.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    Io {
        /// What the library was doing.
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The path names a symbolic link; limiter files are opened with `O_NOFOLLOW`.
    Symlink(PathBuf),
    /// The path names something other than a regular file (a directory, a FIFO, a device...).
    NotRegularFile(PathBuf),
    /// The file's owner or mode is not acceptable (owned by another user, or writable by more
    /// users than the open options allow).
    Permission {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file does not start with the shmlimit magic number: it is not a limiter file.
    Foreign(PathBuf),
    /// The file was written by an incompatible format version.
    Version {
        /// The file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The version this build reads and writes.
        expected: u32,
    },
    /// The file is smaller or larger than its header says it must be.
    Size {
        /// The file.
        path: PathBuf,
        /// The size the header implies.
        expected: u64,
        /// The size on disk.
        actual: u64,
    },
    /// The header or the limit definitions are damaged (checksum mismatch, impossible layout).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is inconsistent.
        reason: String,
    },
    /// The file's creator has not finished initialising it within the wait bound.
    NotInitialized(PathBuf),
    /// The file was created in another time namespace: its `CLOCK_MONOTONIC` is not ours.
    ClockMismatch {
        /// The file.
        path: PathBuf,
        /// The monotonic offset (ns) recorded by the creator.
        file_offset_ns: i64,
        /// The monotonic offset (ns) of this process's time namespace.
        our_offset_ns: i64,
    },
    /// The file exists with limit definitions that differ from the ones the caller asked for.
    DefinitionConflict {
        /// The file.
        path: PathBuf,
        /// Which limit, and how it differs.
        reason: String,
    },
    /// A limit parameter is zero, negative, not finite, out of range or inconsistent.
    InvalidParameter {
        /// The limit being defined (empty when not yet named).
        limit: String,
        /// What is wrong.
        reason: String,
    },
    /// No limit of that name is defined in the file.
    UnknownLimit(String),
    /// A cost of zero was requested; every call must cost at least one unit.
    ZeroCost,
    /// The cost can never be granted by this limit, whatever happens: it exceeds the capacity.
    CostExceedsCapacity {
        /// The cost asked for.
        cost: u64,
        /// The most this limit can ever grant in one decision.
        capacity: u64,
    },
    /// A state word in the file holds a value no valid sequence of decisions can produce.
    /// Decisions on this limit fail closed until it is reset.
    CorruptState {
        /// The limit whose state is damaged.
        limit: String,
    },
    /// The clock reads a value outside the range the state encoding can hold.
    ClockOutOfRange(u64),
    /// A keyed limit's table has no slot for a new key and its policy is [`crate::FullPolicy::Error`].
    TableFull {
        /// The keyed limit.
        limit: String,
    },
    /// A key is empty or longer than [`crate::MAX_KEY_LEN`].
    InvalidKey {
        /// What is wrong with it.
        reason: String,
    },
    /// The operation does not apply to this kind of limit (a key on an unkeyed limit, a rate on a
    /// concurrency limit, ...).
    WrongKind {
        /// The limit.
        limit: String,
        /// What was attempted and why it does not apply.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => write!(f, "{}: {op} failed: {source}", path.display()),
            Error::Symlink(p) => write!(
                f,
                "{}: is a symbolic link; limiter files are never opened through a link",
                p.display()
            ),
            Error::NotRegularFile(p) => write!(f, "{}: not a regular file", p.display()),
            Error::Permission { path, reason } => write!(f, "{}: refused: {reason}", path.display()),
            Error::Foreign(p) => write!(f, "{}: not a shmlimit file (bad magic)", p.display()),
            Error::Version { path, found, expected } => write!(
                f,
                "{}: format version {found}, this build reads version {expected}",
                path.display()
            ),
            Error::Size { path, expected, actual } => write!(
                f,
                "{}: file is {actual} bytes, its header requires {expected} (truncated or extended?)",
                path.display()
            ),
            Error::Corrupt { path, reason } => write!(f, "{}: corrupt: {reason}", path.display()),
            Error::NotInitialized(p) => {
                write!(f, "{}: the file was never fully initialised", p.display())
            }
            Error::ClockMismatch { path, file_offset_ns, our_offset_ns } => write!(
                f,
                "{}: created in a time namespace with monotonic offset {file_offset_ns} ns, \
                 this process has {our_offset_ns} ns: the clocks disagree",
                path.display()
            ),
            Error::DefinitionConflict { path, reason } => {
                write!(f, "{}: conflicting limit definitions: {reason}", path.display())
            }
            Error::InvalidParameter { limit, reason } if limit.is_empty() => {
                write!(f, "invalid parameter: {reason}")
            }
            Error::InvalidParameter { limit, reason } => {
                write!(f, "limit `{limit}`: invalid parameter: {reason}")
            }
            Error::UnknownLimit(name) => write!(f, "no limit named `{name}` in the file"),
            Error::ZeroCost => write!(f, "a cost must be at least 1"),
            Error::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "cost {cost} exceeds the capacity {capacity}: it can never be granted"
            ),
            Error::CorruptState { limit } => write!(
                f,
                "limit `{limit}`: the shared state holds an impossible value; failing closed \
                 until it is reset"
            ),
            Error::ClockOutOfRange(ns) => {
                write!(f, "clock value {ns} ns is outside the representable range")
            }
            Error::TableFull { limit } => {
                write!(f, "limit `{limit}`: the key table is full (raise the key capacity)")
            }
            Error::InvalidKey { reason } => write!(f, "invalid key: {reason}"),
            Error::WrongKind { limit, reason } => write!(f, "limit `{limit}`: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn invalid(limit: &str, reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        limit: limit.to_owned(),
        reason: reason.into(),
    }
}
