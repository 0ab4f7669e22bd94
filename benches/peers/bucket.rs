//! The bucket every contender runs: the same parameters, and for the lock-based peers the same
//! GCRA arithmetic as shmlimit and the C reference, so that only the synchronisation differs.

use shmlimit::{Clock, MonotonicClock};

/// A token bucket: `capacity` tokens, one more every `emission_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketParams {
    /// Burst size `B`.
    pub capacity: u64,
    /// Nanoseconds per token `T`.
    pub emission_ns: u64,
}

impl BucketParams {
    /// `B * T`: how far the theoretical arrival time may run ahead of now.
    pub fn tolerance_ns(&self) -> u64 {
        self.capacity * self.emission_ns
    }
}

/// What most decisions of a run conclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// A huge rate: one token per nanosecond, a million of burst. Every decision admits (no
    /// contender here decides faster than one per nanosecond), so every decision writes.
    Admit,
    /// A tiny rate: one token per hour, a burst of one, spent before measuring. Every decision
    /// denies, so a lock-free decision only reads.
    Deny,
}

impl Workload {
    /// Both, in report order.
    pub const ALL: [Workload; 2] = [Workload::Admit, Workload::Deny];

    /// The bucket parameters of this workload.
    pub fn bucket(self) -> BucketParams {
        match self {
            Workload::Admit => BucketParams {
                capacity: 1_000_000,
                emission_ns: 1,
            },
            Workload::Deny => BucketParams {
                capacity: 1,
                emission_ns: 3_600_000_000_000,
            },
        }
    }

    /// `admit` or `deny`, as used in group names.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Admit => "admit",
            Workload::Deny => "deny",
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds, read exactly as shmlimit's default clock reads it.
#[inline(always)]
pub fn now_ns() -> u64 {
    MonotonicClock.now_ns()
}

/// One GCRA decision of cost 1 on a plain word the caller holds exclusively (under its lock).
///
/// Lock-based callers read `now` while holding the lock: read before it, the time goes stale
/// while the caller waits for the lock (a holder descheduled for a tick is milliseconds), and
/// the decision denies a bucket that is not empty. This suite saw exactly that at 2+ processes.
#[inline(always)]
pub fn gcra(tat: &mut u64, now: u64, params: &BucketParams) -> bool {
    let new_tat = (*tat).max(now) + params.emission_ns;
    if new_tat - now <= params.tolerance_ns() {
        *tat = new_tat;
        true
    } else {
        false
    }
}
