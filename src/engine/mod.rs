//! The engines: each state machine's words in the file, and the code that reads and writes
//! them, written against [`AtomicWord`](crate::sync::AtomicWord) so that the loom models run it
//! unchanged.
//!
//! # Implementation details
//!
//! The pure decisions live in [`crate::algo`] (`step(now, word, cost)`), and every change of
//! one state word goes through its one mutation loop, [`crate::algo::mutate`]. What is here is
//! the protocol around them: [`bucket`] owns the token bucket's two parameter slots, their check
//! words, the `ACTIVE` word with the generation of the slots (which a decision checks after
//! its CAS, giving back an admission decided with replaced parameters), the fence slot and the
//! bit-63 tag of its state words (a live retune, the rescale of a state to the new slot, and
//! the reservations' bookings and cancels on a tagged word); [`keys`] owns a keyed limit's table of
//! 16-byte key slots (lookup, claims, reclaim, retune), over any word algorithm. The handle
//! ([`crate::limiter::Limit`]) calls these functions on the words of its control line and
//! state area.
//!
//! [`Params`] is what a handle keeps in process memory per limit: which engine decides, with the
//! parameters that never change live.

pub(crate) mod bucket;
pub(crate) mod keys;

#[cfg(test)]
mod loom_models;

use crate::algo::fixed_window::FixedWindow;
use crate::algo::sliding_log::SlidingLog;
use crate::algo::sliding_window::SlidingWindow;

/// The per-limit parameters a decision needs, in process memory. Live-tunable parameters (the
/// bucket's rate and capacity, a window's limit) are read from the control line instead.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Params {
    TokenBucket,
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    SlidingLog(SlidingLog),
    Concurrency { permits: u64, lease_ns: u64 },
}

impl Params {
    /// Whether the state counts admissions per window of time (fixed window, sliding window
    /// counter, sliding log): such a state must never be dated ahead of the clock.
    #[inline(always)]
    pub(crate) fn counts_windows(&self) -> bool {
        matches!(
            self,
            Params::FixedWindow(_) | Params::SlidingWindow(_) | Params::SlidingLog(_)
        )
    }
}
