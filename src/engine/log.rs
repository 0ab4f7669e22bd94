//! The sliding-log engine: the control line's first word (the log's head and count) and one
//! timestamp word per admitted unit in the area after it (see [`crate::algo::sliding_log`]).

use std::sync::atomic::AtomicU64;

use crate::algo::sliding_log::SlidingLog;
use crate::algo::Decision;
use crate::clock::Clock;
use crate::engine::site::Site;
use crate::error::{Error, Result};

/// A sliding log's decisions, on the limit's site.
pub(crate) struct Log<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(Log);

impl<C: Clock> Log<'_, C> {
    /// The decision of a sliding log.
    #[inline(always)]
    pub(crate) fn decide(
        &self,
        log: SlidingLog,
        cost: u64,
        commit: bool,
        now: impl Fn() -> u64,
    ) -> Result<Decision> {
        if cost > log.limit {
            return Err(Error::CostExceedsCapacity {
                cost,
                capacity: log.limit,
            });
        }
        let decision = log
            .acquire(self.control(0), self.entries(log), now, cost, commit)
            .map_err(|f| self.fault(f))?;
        Ok(self.finish(decision, cost, commit))
    }

    pub(crate) fn entries(&self, log: SlidingLog) -> &[AtomicU64] {
        &self.area()[..log.limit as usize]
    }
}
