//! The one error type of the crate.
//!
//! Every fallible operation returns [`Error`]; each variant names one kind of failure so that callers
//! (and the C ABI, which maps each variant to its own status code) can react to it without parsing text.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::clock::{DATE_TOLERANCE, MAX_DATE_NS};

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
    /// The clock reads a value outside the range the state encoding can hold, or a dated call
    /// ([`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at)) names a time beyond [`crate::consts::MAX_DATE_NS`] or ahead
    /// of the limit's clock by more than [`crate::consts::DATE_TOLERANCE`]. Nothing was consumed.
    ClockOutOfRange(u64),
    /// A keyed limit's table has no slot for a new key and its policy is [`crate::FullPolicy::Error`].
    TableFull {
        /// The keyed limit.
        limit: String,
    },
    /// A key is empty or longer than [`crate::consts::MAX_KEY_LEN`].
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
            Error::Io { op, path, source } => write!(f, "{}: {op} failed: {source}", Clip::path(path)),
            Error::Symlink(p) => write!(
                f,
                "{}: is a symbolic link; limiter files are never opened through a link",
                Clip::path(p)
            ),
            Error::NotRegularFile(p) => write!(f, "{}: not a regular file", Clip::path(p)),
            Error::Permission { path, reason } => {
                write!(f, "{}: refused: {}", Clip::path(path), Clip::reason(reason))
            }
            Error::Foreign(p) => write!(f, "{}: not a shmlimit file (bad magic)", Clip::path(p)),
            Error::Version { path, found, expected } => write!(
                f,
                "{}: format version {found}, this build reads version {expected}",
                Clip::path(path)
            ),
            Error::Size { path, actual: 0, .. } => {
                write!(f, "{}: empty file: not a limiter file", Clip::path(path))
            }
            Error::Size { path, expected, actual } => write!(
                f,
                "{}: file is {actual} bytes, its header requires {expected} (truncated or extended?)",
                Clip::path(path)
            ),
            Error::Corrupt { path, reason } => {
                write!(f, "{}: corrupt: {}", Clip::path(path), Clip::reason(reason))
            }
            Error::NotInitialized(p) => {
                write!(f, "{}: the file was never fully initialised", Clip::path(p))
            }
            Error::ClockMismatch { path, file_offset_ns, our_offset_ns } => write!(
                f,
                "{}: created in a time namespace with monotonic offset {file_offset_ns} ns, \
                 this process has {our_offset_ns} ns: the clocks disagree",
                Clip::path(path)
            ),
            Error::DefinitionConflict { path, reason } => {
                write!(
                    f,
                    "{}: conflicting limit definitions: {}",
                    Clip::path(path),
                    Clip::reason(reason)
                )
            }
            Error::InvalidParameter { limit, reason } if limit.is_empty() => {
                write!(f, "invalid parameter: {}", Clip::reason(reason))
            }
            Error::InvalidParameter { limit, reason } => {
                write!(
                    f,
                    "limit `{}`: invalid parameter: {}",
                    Clip::name(limit),
                    Clip::reason(reason)
                )
            }
            Error::UnknownLimit(name) => {
                write!(f, "no limit named `{}` in the file", Clip::name(name))
            }
            Error::ZeroCost => write!(f, "a cost must be at least 1"),
            Error::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "cost {cost} exceeds the capacity {capacity}: it can never be granted"
            ),
            Error::CorruptState { limit } => write!(
                f,
                "limit `{}`: the shared state holds an impossible value; failing closed \
                 until it is reset",
                Clip::name(limit)
            ),
            Error::ClockOutOfRange(ns) => write!(
                f,
                "time {ns} ns is beyond what the state can encode ({MAX_DATE_NS} ns) or ahead \
                 of the limit's clock by more than {} ms",
                DATE_TOLERANCE.as_millis()
            ),
            Error::TableFull { limit } => {
                write!(
                    f,
                    "limit `{}`: the key table is full (raise the key capacity)",
                    Clip::name(limit)
                )
            }
            Error::InvalidKey { reason } => write!(f, "invalid key: {}", Clip::reason(reason)),
            Error::WrongKind { limit, reason } => {
                write!(f, "limit `{}`: {}", Clip::name(limit), Clip::reason(reason))
            }
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

/// The most bytes of a name or path (and, with room for the text around them, of a reason) a
/// message echoes: a longer input is cut at a character boundary and marked with an ellipsis and
/// its length, so that a message stays readable and bounded whatever the caller passed.
pub const MAX_ECHO: usize = 120;

/// A string echoed in a message, cut to a bounded length.
pub(crate) struct Clip<'a> {
    text: std::borrow::Cow<'a, str>,
    max: usize,
}

impl<'a> Clip<'a> {
    /// A limit name or other short input: at most [`MAX_ECHO`] bytes.
    pub(crate) fn name(text: &'a str) -> Clip<'a> {
        Clip {
            text: text.into(),
            max: MAX_ECHO,
        }
    }

    /// A path, shown lossily as UTF-8: at most twice [`MAX_ECHO`] bytes (paths run long).
    pub(crate) fn path(path: &'a std::path::Path) -> Clip<'a> {
        Clip {
            text: path.to_string_lossy(),
            max: 2 * MAX_ECHO,
        }
    }

    /// A composed reason that may itself echo input: at most four times [`MAX_ECHO`].
    pub(crate) fn reason(text: &'a str) -> Clip<'a> {
        Clip {
            text: text.into(),
            max: 4 * MAX_ECHO,
        }
    }
}

impl fmt::Display for Clip<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: &str = &self.text;
        if text.len() <= self.max {
            return f.write_str(text);
        }
        let mut cut = self.max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        write!(f, "{}… ({} bytes)", &text[..cut], text.len())
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
