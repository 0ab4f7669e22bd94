//! Giving back what a grant admitted, word by word: the origin check, and the refund of one
//! single-word state (a token bucket, a window, a key's word) through [`crate::algo::mutate`]; with
//! the freshness of a single-word state, the other word-level question keyed tables ask.

use crate::engine::bucket::Bucket;
use crate::engine::site::Site;
use std::sync::atomic::AtomicU64;

use crate::algo::{mutate, Change, Decision};
use crate::clock::Clock;
use crate::engine;
use crate::error::Result;
use crate::file::layout::bucket;

use super::Params;

impl<C: Clock> Site<C> {
    /// Whether a single-word state is equivalent to a fresh one at `now` (full bucket, windows
    /// expired): such a state can be dropped or reused without losing anything.
    pub(crate) fn is_fresh_word(&self, now: u64, word: u64) -> bool {
        match self.params {
            Params::TokenBucket => word & !bucket::PARAM_TAG <= now,
            Params::FixedWindow(fw) => fw.is_fresh(now, word),
            Params::SlidingWindow(sw) => sw.is_fresh(now, word),
            Params::SlidingLog(_) | Params::Concurrency { .. } | Params::Counters { .. } => false,
        }
    }

    /// The word after refunding `decision` (admitted earlier) from a single-word state.
    pub(crate) fn refund_word(
        &self,
        now: u64,
        word: u64,
        decision: &Decision,
        units: u64,
    ) -> Result<u64> {
        Ok(match self.params {
            Params::TokenBucket => {
                let g = Bucket(self).bucket_params(engine::bucket::tag_of(word))?;
                engine::bucket::refund(&g, now, word, units)
            }
            Params::FixedWindow(fw) => fw.refund(word, decision.stamp, units),
            Params::SlidingWindow(sw) => sw.refund(word, decision.stamp, units),
            Params::SlidingLog(_) | Params::Concurrency { .. } | Params::Counters { .. } => {
                return Err(self.misdirected())
            }
        })
    }

    /// Refuse a grant made by another limit (or another file): refunding it here would give
    /// this limit budget it never granted.
    pub(crate) fn check_origin(&self, grant: &Decision) -> Result<()> {
        if grant.origin != 0 && grant.origin != self.origin {
            return Err(self.refused("did not make this grant: refund it on the limit that did"));
        }
        Ok(())
    }

    /// The refund CAS loop on one single-word state (unkeyed state or a key's state word).
    pub(crate) fn refund_in(&self, state: &AtomicU64, grant: &Decision, units: u64) -> Result<()> {
        mutate(
            state,
            || self.clock.now_ns(),
            |now, current| {
                let new = self.refund_word(now, current, grant, units)?;
                Ok(Change::unless_same(current, new))
            },
        )
    }
}
