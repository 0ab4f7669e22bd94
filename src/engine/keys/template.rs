//! What the key table needs from the template algorithm, for one key's state word.
//!
//! # Implementation details
//!
//! Besides the template's own step and refund, the table needs three facts about a state word,
//! defined here once per algorithm as pure functions:
//!
//! * **fresh**: the word counts nothing at `now` (bucket full: `tat <= now`; fixed window: its
//!   window is over or its count zero; sliding window: both of its windows are over or empty). A
//!   window stored *ahead* of `now` (written by a process whose clock read was newer) is never
//!   fresh, and freshness only ever goes from false to true as the clock advances: whoever
//!   re-reads the clock after seeing a word fresh sees it fresh too.
//! * **fresh in**: how long until the word becomes fresh, for the retry-after of a full table.
//! * **blank**: the fresh word a retired slot keeps (for a bucket, with the word's parameter-slot
//!   tag, so that the table's words all follow a live retune).
//!
//! The windows' freshness is defined in their own modules (`FixedWindow::fresh_in`,
//! `SlidingWindow::fresh_in`), beside the reading of a stale or wrapped window index it mirrors;
//! a unit test checks that a fresh word decides exactly as a zero word does.

#[cfg(test)]
use crate::algo::fixed_window::{self, FixedWindow};
#[cfg(test)]
use crate::algo::gcra::Gcra;
#[cfg(test)]
use crate::algo::sliding_window::{self, SlidingWindow};
use crate::algo::{Decision, Step};
use crate::error::Result;

/// The template algorithm of a keyed limit, applied to one key's state word.
pub(crate) trait Template {
    /// The decision for `cost` at `now` on `state` (the template's step function).
    fn step(&self, now: u64, state: u64, cost: u64) -> Result<Step>;
    /// `state` after refunding `units` of `grant`.
    fn refund(&self, now: u64, state: u64, grant: &Decision, units: u64) -> Result<u64>;
    /// `state` counts nothing at `now`.
    fn is_fresh(&self, now: u64, state: u64) -> bool;
    /// Nanoseconds from `now` until `state` is fresh (0 if it is).
    fn fresh_in(&self, now: u64, state: u64) -> u64;
    /// The fresh word that replaces `state` when its slot is retired.
    fn blank(&self, state: u64) -> u64;
}

// --- token bucket (on the TAT without its parameter-slot tag) ---

pub(crate) fn bucket_fresh_in(now: u64, tat: u64) -> u64 {
    tat.saturating_sub(now)
}

/// A template with fixed parameters (no live retuning, no parameter-slot tag): what the loom
/// models and the unit tests decide with.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pure {
    Bucket(Gcra),
    Fixed(FixedWindow),
    Sliding(SlidingWindow),
    /// A keyed concurrency limit's bitmap of held permits (see `crate::engine::permits::keyed`).
    Permits,
}

#[cfg(test)]
impl Template for Pure {
    fn step(&self, now: u64, state: u64, cost: u64) -> Result<Step> {
        Ok(match self {
            Pure::Bucket(g) => g.step(now, state, cost),
            Pure::Fixed(fw) => fw.step(now, state, cost),
            Pure::Sliding(sw) => sw.step(now, state, cost),
            Pure::Permits => unreachable!("permits are taken, not stepped"),
        })
    }
    fn refund(&self, now: u64, state: u64, grant: &Decision, units: u64) -> Result<u64> {
        Ok(match self {
            Pure::Bucket(g) => g.refund(now, state, units),
            Pure::Fixed(fw) => fw.refund(state, grant.stamp, units),
            Pure::Sliding(sw) => sw.refund(state, grant.stamp, units),
            Pure::Permits => unreachable!("permits are released, not refunded"),
        })
    }
    fn is_fresh(&self, now: u64, state: u64) -> bool {
        self.fresh_in(now, state) == 0
    }
    fn fresh_in(&self, now: u64, state: u64) -> u64 {
        match self {
            Pure::Bucket(_) => bucket_fresh_in(now, state),
            Pure::Fixed(fw) => fw.fresh_in(now, state),
            Pure::Sliding(sw) => sw.fresh_in(now, state),
            Pure::Permits if state == 0 => 0,
            Pure::Permits => u64::MAX,
        }
    }
    fn blank(&self, _state: u64) -> u64 {
        0
    }
}

/// Remaining tokens/units a decision on `state` reports for cost 1 (for the tests).
#[cfg(test)]
pub(crate) fn remaining(t: &impl Template, now: u64, state: u64) -> u64 {
    match t.step(now, state, 1).expect("valid parameters") {
        Step::Admit { decision, .. } => decision.remaining() + 1,
        Step::Deny(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 1_000;

    fn templates() -> [Pure; 3] {
        [
            Pure::Bucket(Gcra {
                emission_ns: 100,
                tolerance_ns: 500,
                capacity: 5,
            }),
            Pure::Fixed(FixedWindow {
                limit: 5,
                window_ns: W,
                phase_ns: 300,
            }),
            Pure::Sliding(SlidingWindow {
                limit: 5,
                window_ns: W,
                phase_ns: 300,
            }),
        ]
    }

    /// Drive two words through a pseudo-random history; at every step, a fresh word must decide
    /// exactly as the zero word, and `fresh_in` must be the exact time it becomes fresh.
    #[test]
    fn freshness_agrees_with_the_step_functions() {
        for t in templates() {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let (mut a, mut b) = (0u64, 0u64);
            let mut now = 50_000;
            for _ in 0..20_000 {
                now += next() % 400;
                // Occasionally read a clock that lags behind the state (a stale reader).
                let at = if next() % 8 == 0 { now - 300 } else { now };
                let n = 1 + next() % 3;
                let word = if next() % 2 == 0 { &mut a } else { &mut b };
                if let Step::Admit { new, .. } = t.step(at, *word, n).unwrap() {
                    *word = new;
                }
                for &w in &[a, b] {
                    let probe = now + next() % 2_500;
                    let fresh = t.is_fresh(probe, w);
                    if fresh {
                        for cost in 1..=5 {
                            let with = t.step(probe, w, cost).unwrap();
                            let zero = t.step(probe, 0, cost).unwrap();
                            let allowed = |s: &Step| matches!(s, Step::Admit { .. });
                            assert_eq!(allowed(&with), allowed(&zero), "{t:?} {w:#x} at {probe}");
                            assert_eq!(remaining(&t, probe, w), remaining(&t, probe, 0));
                        }
                    }
                    let wait = t.fresh_in(probe, w);
                    assert_eq!(wait == 0, fresh);
                    if wait > 0 {
                        assert!(t.is_fresh(probe + wait, w), "{t:?} {w:#x} {probe} {wait}");
                        assert!(!t.is_fresh(probe + wait - 1, w), "{t:?} {w:#x} {probe}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_window_ahead_of_now_is_not_fresh() {
        let [_, fixed, sliding] = templates();
        // Written by a process whose clock was in the window after ours.
        let fw_word = fixed_window::pack(11, 2);
        assert!(!fixed.is_fresh(10 * W, fw_word));
        let sw_word = sliding_window::pack(11, 0, 2);
        assert!(!sliding.is_fresh(10 * W, sw_word));
        assert!(sliding.is_fresh(13 * W, sw_word));
    }
}
