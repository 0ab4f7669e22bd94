//! Owner words: who holds a word of the file (a permit, a counter lane), named so that any
//! process can tell whether that holder still lives.
//!
//! A holder is a process or a thread, named by its pid (a tid is a pid on Linux) and the low
//! bits of its start time, in the low 46 bits of an owner word; the high 18 bits are a
//! generation that every transition of the word moves on by one, so a CAS never mistakes a word
//! for an older one with the same owner. [`liveness`] answers whether a named owner is gone.
//! Used by the permit table ([`crate::engine::permits`]) and the counter lanes ([`crate::tally`]).

pub(crate) mod liveness;

/// Bits of the owner pid (Linux `PID_MAX_LIMIT` is 2^22).
pub(crate) const PID_BITS: u32 = 22;
/// Bits of the owner's start time kept in the word.
pub(crate) const START_BITS: u32 = 24;
/// Bits of the generation.
pub(crate) const GEN_BITS: u32 = 18;
const _: () = assert!(PID_BITS + START_BITS + GEN_BITS == 64);

pub(crate) const PID_MASK: u64 = (1 << PID_BITS) - 1;
pub(crate) const START_SHIFT: u32 = PID_BITS;
pub(crate) const START_MASK: u64 = (1 << START_BITS) - 1;
/// Pid and start time: the owner identity.
pub(crate) const OWNER_MASK: u64 = (1 << (PID_BITS + START_BITS)) - 1;
pub(crate) const GEN_SHIFT: u32 = PID_BITS + START_BITS;
pub(crate) const GEN_MASK: u64 = (1 << GEN_BITS) - 1;

/// An owner identity: pid in bits 0-21, start-time low bits in 22-45. Never 0 (pids are > 0).
pub(crate) fn owner(pid: u32, start_ticks: u64) -> u64 {
    (pid as u64 & PID_MASK) | ((start_ticks & START_MASK) << START_SHIFT)
}

/// A view of one owner word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnerWord(pub u64);

impl OwnerWord {
    /// A held word of generation `gen` owned by `owner`.
    pub fn held(gen: u64, owner: u64) -> OwnerWord {
        debug_assert!(owner & PID_MASK != 0 && owner & !OWNER_MASK == 0);
        OwnerWord(((gen & GEN_MASK) << GEN_SHIFT) | owner)
    }

    /// A free word of generation `gen`.
    pub fn free(gen: u64) -> OwnerWord {
        OwnerWord((gen & GEN_MASK) << GEN_SHIFT)
    }

    pub fn is_free(self) -> bool {
        self.pid() == 0
    }

    pub fn pid(self) -> u32 {
        (self.0 & PID_MASK) as u32
    }

    pub fn start_low(self) -> u64 {
        (self.0 >> START_SHIFT) & START_MASK
    }

    pub fn owner(self) -> u64 {
        self.0 & OWNER_MASK
    }

    pub fn gen(self) -> u64 {
        self.0 >> GEN_SHIFT
    }

    /// The generation the next transition writes.
    pub fn next_gen(self) -> u64 {
        (self.gen() + 1) & GEN_MASK
    }
}
