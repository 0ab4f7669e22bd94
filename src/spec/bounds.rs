//! The bounds a definition is validated against, public as `shmlimit::consts::*`.

use std::time::Duration;

use crate::algo::sliding_log;

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
/// Most moving-window log entries per key of a counters limit (16 bytes each).
pub const MAX_LOG_ENTRIES: u64 = 1 << 16;
/// Most moving-window log entries of one counters limit (key slots times entries per key): 16
/// bytes each, so at most 1 GiB.
pub const MAX_COUNTER_LOG_ENTRIES: u64 = 1 << 26;
