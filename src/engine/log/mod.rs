//! The sliding-log engine: the control line's first word (the log's head and count) and one
//! timestamp word per admitted unit in the area after it (see [`crate::algo::sliding_log`]).

pub(crate) mod reboot;

use std::sync::atomic::AtomicU64;

use crate::algo::sliding_log::SlidingLog;
use crate::algo::Decision;
use crate::clock::Clock;
use crate::engine::rate::RateEngine;
use crate::engine::site::Site;
use crate::engine::Params;
use crate::error::{Error, Result};

/// A sliding log's decisions, on the limit's site.
///
/// `pub` only so that the sealed kind traits may name it; the module is private.
pub struct Log<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(Log);

impl<'a, C: Clock> RateEngine<'a, C> for Log<'a, C> {
    #[inline(always)]
    fn on(site: &'a Site<C>) -> Self {
        Log(site)
    }

    #[inline(always)]
    fn site(self) -> &'a Site<C> {
        self.0
    }

    /// None: a log decides in its general decision (a date ahead of the clock at the clock's
    /// time, see [`Site::decision_time`]).
    #[inline(always)]
    fn fast(self, _cost: u64) -> Option<Decision> {
        None
    }

    #[inline(always)]
    fn decide(self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        self.decide_log(self.log()?, cost, commit, || self.decision_time(at))
    }

    /// Entries dated no later than the grant.
    fn give_units(maker: &Site<C>, grant: &Decision, units: u64) -> Result<()> {
        let this = Log(maker);
        let log = this.log()?;
        let now = maker.clock.now_ns();
        log.refund(maker.control(0), this.entries(log), now, grant.stamp, units);
        Ok(())
    }
}

impl<C: Clock> Log<'_, C> {
    /// The log's parameters.
    fn log(&self) -> Result<SlidingLog> {
        match self.params {
            Params::SlidingLog(log) => Ok(log),
            _ => Err(self.misdirected()),
        }
    }

    /// The decision of a sliding log.
    #[inline(always)]
    pub(crate) fn decide_log(
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
