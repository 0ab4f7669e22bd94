//! [`Keyed`]: one independent state per key, and what a full table does.

#[cfg(doc)]
use crate::error::Error;

/// What a keyed limit does when its table has no slot for a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FullPolicy {
    /// Deny the request (fail closed). The default.
    #[default]
    Deny,
    /// Admit the request without limiting it (fail open).
    Allow,
    /// Return [`Error::TableFull`].
    Error,
}

/// Makes a limit keyed: one independent state per key (user, tenant, ...), in a table of
/// `capacity` slots in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyed {
    /// Key slots (rounded up to a power of two).
    pub capacity: u64,
    /// What happens when no slot is free.
    pub on_full: FullPolicy,
}

impl Keyed {
    /// A table with room for `capacity` keys (rounded up to a power of two), denying when full.
    pub fn new(capacity: u64) -> Keyed {
        Keyed {
            capacity,
            on_full: FullPolicy::Deny,
        }
    }
    /// Choose the full-table policy.
    pub fn on_full(mut self, policy: FullPolicy) -> Keyed {
        self.on_full = policy;
        self
    }
    /// The table size actually allocated.
    pub fn slots(&self) -> u64 {
        // Saturates for capacities no table can have; validation refuses those.
        self.capacity
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63)
    }
}
