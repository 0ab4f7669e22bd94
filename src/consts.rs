//! Every bound and interval of the API, in one place: the largest parameters a definition may
//! have, the bounds on keys, names, files and composed checks, and the intervals the library
//! works to (how often a handle checks for a replaced file, how often a waiter for a permit
//! looks for dead holders, how far ahead a dated decision may be).
//!
//! A definition beyond a bound is refused with [`Error::InvalidParameter`] when the limit is
//! defined; a key beyond [`MAX_KEY_LEN`] is [`Error::InvalidKey`] at the call. The C header
//! defines those a C caller needs as `SHMLIMIT_*` constants (checked equal at compile time).
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
//! | [`MAX_LOG_ENTRIES`] | 2^16 | moving-window log entries per key of a counters limit |
//! | [`MAX_COUNTER_LOG_ENTRIES`] | 2^26 | key slots x log entries of a counters limit (16 bytes each) |
//! | [`MAX_KEY_LEN`] | 1024 bytes | a key |
//! | [`MAX_CHECKS`] | 8 | limits in one composed check |
//! | [`DEFAULT_NEAR_LIMIT`] | 6554 / 65536 | the default near-limit fraction (about 10%) |
//! | [`MAX_ECHO`] | 120 bytes | input echoed in an error message |
//! | [`DATE_TOLERANCE`] | 1 ms | how far ahead of the clock a dated decision may be |
//! | [`MAX_DATE_NS`] | 2^61 ns | the latest date a state encodes |
//! | [`MAX_FLEET_LEASE_NS`] | 2^40 ns | how far ahead a fleet lease deadline may run |
//! | [`REPLACEMENT_CHECK`] | 1 s | how often a handle checks for a replaced file |
//! | [`PERMIT_RECHECK`] | 100 ms | how often a waiter for a permit looks for dead holders |

// Only re-exports (and one alias): no module of the crate imports `consts`, so it is in no
// import cycle; each bound is defined beside the code that enforces it.
pub use crate::clock::{DATE_TOLERANCE, MAX_DATE_NS};
pub use crate::compose::MAX_CHECKS;
pub use crate::engine::keyed::MAX_KEY_LEN;
pub use crate::engine::permits::PERMIT_RECHECK;
pub use crate::error::MAX_ECHO;
pub use crate::file::layout::MAX_LIMITS;
pub use crate::limiter::REPLACEMENT_CHECK;
pub use crate::spec::bounds::{
    DEFAULT_NEAR_LIMIT, MAX_CAPACITY, MAX_KEYS, MAX_KEY_PERMITS, MAX_KEY_PERMIT_ENTRIES,
    MAX_LOG_LIMIT, MAX_NAME_LEN, MAX_PERMITS, MAX_SPLIT, MAX_WINDOW, MIN_WINDOW,
};
pub use crate::spec::bounds::{MAX_COUNTER_LOG_ENTRIES, MAX_LOG_ENTRIES};
#[cfg(doc)]
use crate::{Error, TokenBucketLimit};

/// The longest a fleet lease deadline ([`TokenBucketLimit::set_fleet_deadline`]) may run ahead
/// of a decision's clock, in nanoseconds (2^40, about 18 minutes): a deadline further ahead is
/// taken as damage, and the decision fences. A fleet agent keeps its fence point under it.
pub const MAX_FLEET_LEASE_NS: u64 = crate::file::layout::bucket::MAX_LEASE_NS;
