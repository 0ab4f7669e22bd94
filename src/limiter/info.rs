//! Plain facts read from a file: its header ([`FileInfo`]) and a limit's counters ([`Stats`]).

use crate::clock::Clock;

use super::Limit;

/// The header facts of a limiter file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// The format version.
    pub format_version: u32,
    /// The file's size in bytes.
    pub file_size: u64,
    /// How many limits it defines.
    pub limits: usize,
    /// Offset and length of the definitions region.
    pub definitions: (u64, u64),
    /// Offset and length of the state region.
    pub slots: (u64, u64),
    /// Offset and length of the counters region.
    pub counters: (u64, u64),
    /// The boot id the stored times belong to.
    pub boot_id: [u8; 16],
    /// When the file was created, Unix nanoseconds.
    pub created_unix_ns: u64,
    /// How many times a reboot reset the state.
    pub reset_count: u64,
    /// The random id written at creation: a file copied over another in place has another id.
    pub file_id: u64,
}

/// Decision counters of one limit, summed over every process.
///
/// Counts are exact and never go backwards: every committed decision adds one to a counter
/// word of its thread's lane in the file (see the layout), which a reader in any process sees
/// as soon as the store is visible; a lane outlives the thread or process that wrote it. What
/// passed is `allowed - refunded`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Decisions that admitted (including shadow-denied ones, which are admitted).
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
    /// Decisions a shadow limit would have denied.
    pub shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    pub near_limit: u64,
    /// Grants given back whole: explicit refunds
    /// ([`refund`](crate::TokenBucketLimit::refund),
    /// [`refund_key`](crate::KeyedTokenBucketLimit::refund_key), a composed refund) and the
    /// roll-backs of composed checks that denied ([`crate::try_acquire_all`]).
    /// `allowed - refunded` is what passed.
    pub refunded: u64,
}

impl<C: Clock> Limit<C> {
    /// Decisions of this limit so far, summed over all processes (see [`Stats`] for how
    /// current they are).
    pub fn stats(&self) -> Stats {
        if let Ok(Some(next)) = self.moved_handle() {
            return next.stats();
        }
        self.tally.read()
    }
}
