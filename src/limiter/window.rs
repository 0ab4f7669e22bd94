//! A fixed or sliding window's live limit: one control word holding the limit and its check.

use crate::site::Site;
use std::sync::atomic::Ordering;

use crate::algo::Fault;
use crate::clock::Clock;
use crate::error::Result;
use crate::file::layout::{self, pack_window_limit};
use crate::spec::{Algorithm, Rate};

use super::Params;

impl<C: Clock> Site<C> {
    /// A window's live limit.
    #[inline(always)]
    pub(super) fn window_limit(&self) -> Result<u64> {
        self.window_limit_fast()
            .map_err(|_| self.fault(Fault::Corrupt))
    }

    pub(super) fn set_window_rate(&self, rate: Rate) -> Result<()> {
        let window_ns = match self.params {
            Params::FixedWindow(fw) if fw.window_ns == crate::algo::fixed_window::MONTHS => {
                Rate::MONTH_NS
            }
            Params::FixedWindow(fw) => fw.window_ns,
            Params::SlidingWindow(sw) => sw.window_ns,
            _ => return Err(self.wrong_kind("has no rate to change")),
        };
        // The limit per window that `rate` means, rounded down (never looser).
        let limit = (window_ns as u128 / rate.emission_ns() as u128) as u64;
        self.set_limit(limit)
    }

    /// Change a fixed or sliding window's limit `L`, live. Within the window in which it changes,
    /// at most the larger of the old and new limits is admitted.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] for other algorithms; [`Error::InvalidParameter`] for a bad limit.
    pub(crate) fn set_limit(&self, limit: u64) -> Result<()> {
        let mut algo = *self.algorithm();
        match &mut algo {
            Algorithm::FixedWindow { limit: l, .. } | Algorithm::SlidingWindow { limit: l, .. } => {
                *l = limit
            }
            _ => return Err(self.wrong_kind("is not a fixed or sliding window")),
        }
        algo.validate(self.name())?;
        let _guard = self.retune_lock()?;
        self.store_window_limit(limit);
        Ok(())
    }

    pub(super) fn store_window_limit(&self, limit: u64) {
        // Release: one word holds the limit and its check; decisions read it whole.
        self.control(layout::WINDOW_LIMIT)
            .store(pack_window_limit(limit), Ordering::Release);
    }
}
