//! Giving back what a grant admitted: the origin check, and the refund of each kind of state
//! (through [`crate::algo::mutate`] for the single-word ones); with the freshness of a
//! single-word state, the other word-level question keyed tables ask.

use crate::engine::bucket::Bucket;
use crate::engine::log::Log;
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
                return Err(self.wrong_kind("has no single-word state"))
            }
        })
    }

    /// Give back what `grant` admitted, for work that was admitted but never done.
    ///
    /// A refund can never create more budget than the grant took: a bucket never fills past
    /// full, a window refund only applies while the grant's window is still counted, and a log
    /// refund frees entries dated no later than the grant. Refunding a denied (or shadow-denied)
    /// decision is a no-op. Refund each grant at most once: a second refund of the same grant
    /// gives its cost back again, which is budget no request returned.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`]; [`Error::WrongKind`] on a keyed or concurrency limit.
    pub(crate) fn refund(&self, grant: &Decision) -> Result<()> {
        self.refund_units(grant, grant.cost)
    }

    /// Give back `units` of what `grant` admitted (at most its cost).
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::refund`](crate::TokenBucketLimit::refund).
    pub(crate) fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
        let maker = self.maker_of(grant);
        if !std::ptr::eq(maker, self) {
            return maker.refund_units(grant, units);
        }
        if self.keyed {
            return Err(self.wrong_kind("is keyed: use refund_key"));
        }
        self.check_origin(grant)?;
        let units = units.min(grant.cost);
        if !grant.is_allowed() || units == 0 {
            // A shadow-denied grant took nothing, but it was admitted: giving it back counts.
            self.count_refund(grant, units);
            return Ok(());
        }
        self.refund_state(grant, units)?;
        self.count_refund(grant, units);
        Ok(())
    }

    /// Give `units` of `grant` back to the state.
    pub(super) fn refund_state(&self, grant: &Decision, units: u64) -> Result<()> {
        match self.params {
            Params::SlidingLog(log) => {
                let now = self.clock.now_ns();
                log.refund(
                    self.control(0),
                    Log(self).entries(log),
                    now,
                    grant.stamp,
                    units,
                );
                Ok(())
            }
            Params::Concurrency { .. } => {
                Err(self.wrong_kind("is a concurrency limit: drop the permit"))
            }
            Params::TokenBucket if self.split > 1 => {
                let i = grant.stamp as usize % self.split;
                mutate(
                    Bucket(self).sub_state(i),
                    || self.clock.now_ns(),
                    |now, current| {
                        let g = Bucket(self).bucket_params(engine::bucket::tag_of(current))?;
                        let sub = Bucket(self).sub_params(g, i);
                        let new = engine::bucket::refund(&sub, now, current, units);
                        Ok(Change::unless_same(current, new))
                    },
                )
            }
            _ => self.refund_in(self.control(0), grant, units),
        }
    }

    /// Refuse a grant made by another limit (or another file): refunding it here would give
    /// this limit budget it never granted.
    pub(crate) fn check_origin(&self, grant: &Decision) -> Result<()> {
        if grant.origin != 0 && grant.origin != self.origin {
            return Err(self.wrong_kind("did not make this grant: refund it on the limit that did"));
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
