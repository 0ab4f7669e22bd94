//! Plain facts read from a file: its header ([`FileInfo`]) and a limit's counters
//! ([`Stats`], defined with the counters in `tally`).

use crate::clock::Clock;
use crate::engine::site::Site;

use crate::tally::Stats;

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

impl<C: Clock> Site<C> {
    /// Decisions of this limit so far, summed over all processes (see [`Stats`] for how
    /// current they are).
    pub fn stats(&self) -> Stats {
        self.tally.read()
    }
}
