//! Every bound and interval of the API, in one place: the largest parameters a definition may
//! have, the bounds on keys, names, files and composed checks, and the intervals the library
//! works to (how often a handle checks for a replaced file, how often a waiter for a permit
//! looks for dead holders, how far ahead a dated decision may be).
//!
//! A definition beyond a bound is refused with [`Error::InvalidParameter`] when the limit is
//! defined; a key beyond [`MAX_KEY_LEN`] is [`Error::InvalidKey`] at the call. The C header defines the same values as `SHMLIMIT_*` constants (checked equal
//! at compile time).
//!
//! | constant | value | bounds |
//! |---|---|---|
//! | [`MAX_NAME_LEN`] | 63 bytes | a limit name |
//! | [`MAX_LIMITS`] | 4096 | limits in one file |
//! | [`MIN_WINDOW`], [`MAX_WINDOW`] | 1 ms, 2^60 ns (36 years) | a window or a lease |
//! | [`MAX_CAPACITY`] | 2^40 | a token bucket's capacity |
//! | [`MAX_LOG_LIMIT`] | 2^24 | a sliding log's limit (8 bytes per entry) |
//! | [`MAX_PERMITS`] | 2^16 | a concurrency limit's permits |
//! | [`MAX_SPLIT`] | 64 | sub-buckets of a split token bucket |
//! | [`MAX_KEYS`] | 2^26 | key slots of a keyed limit |
//! | [`MAX_KEY_PERMITS`] | 64 | permits per key of a keyed concurrency limit |
//! | [`MAX_KEY_PERMIT_ENTRIES`] | 2^26 | key slots x permits per key (16 bytes each) |
//! | [`MAX_KEY_LEN`] | 1024 bytes | a key |
//! | [`MAX_CHECKS`] | 8 | limits in one composed check |
//! | [`DEFAULT_NEAR_LIMIT`] | 6554 / 65536 | the default near-limit fraction (about 10%) |
//! | [`MAX_ECHO`] | 120 bytes | input echoed in an error message |
//! | [`DATE_TOLERANCE`] | 1 ms | how far ahead of the clock a dated decision may be |
//! | [`MAX_DATE_NS`] | 2^61 ns | the latest date a state encodes |
//! | [`MAX_FLEET_LEASE_NS`] | 2^40 ns | how far ahead a fleet lease deadline may run |
//! | [`REPLACEMENT_CHECK`] | 1 s | how often a handle checks for a replaced file |
//! | [`PERMIT_RECHECK`] | 100 ms | how often a waiter for a permit looks for dead holders |

use std::time::Duration;

use crate::algo::sliding_log;
#[cfg(doc)]
use crate::{Error, TokenBucketLimit};

pub use crate::compose::MAX_CHECKS;
pub use crate::error::MAX_ECHO;
pub use crate::file::layout::MAX_LIMITS;
pub use crate::keyed::MAX_KEY_LEN;
pub use crate::limiter::{DATE_TOLERANCE, MAX_DATE_NS, REPLACEMENT_CHECK};
pub use crate::permit::PERMIT_RECHECK;

/// The default near-limit fraction: about 10% of the capacity, in 1/65536 units.
pub const DEFAULT_NEAR_LIMIT: u16 = 6554;
/// Longest limit name, in bytes.
pub const MAX_NAME_LEN: usize = 63;
/// Shortest window any windowed algorithm accepts.
pub const MIN_WINDOW: Duration = Duration::from_millis(1);
/// Longest window: about 36 years.
pub const MAX_WINDOW: Duration = Duration::from_nanos(sliding_log::MAX_WINDOW_NS);
/// Largest token-bucket capacity.
pub const MAX_CAPACITY: u64 = 1 << 40;
/// Most entries one sliding log may hold (8 bytes each).
pub const MAX_LOG_LIMIT: u64 = 1 << 24;
/// Most permits one concurrency limit may have.
pub const MAX_PERMITS: u64 = 1 << 16;
/// Most sub-buckets a split token bucket may have.
pub const MAX_SPLIT: usize = 64;
/// Most key slots one keyed limit may have.
pub const MAX_KEYS: u64 = 1 << 26;
/// Most permits per key of a keyed concurrency limit (one bit each in the key's state word).
pub const MAX_KEY_PERMITS: u64 = 64;
/// Most permit entries (key slots times permits per key) of one keyed concurrency limit: 16
/// bytes each, so at most 1 GiB.
pub const MAX_KEY_PERMIT_ENTRIES: u64 = 1 << 26;

/// The longest a fleet lease deadline ([`TokenBucketLimit::set_fleet_deadline`]) may run ahead
/// of a decision's clock, in nanoseconds (2^40, about 18 minutes): a deadline further ahead is
/// taken as damage, and the decision fences. A fleet agent keeps its fence point under it.
pub const MAX_FLEET_LEASE_NS: u64 = crate::file::layout::bucket::MAX_LEASE_NS;
