//! The fixed-window and sliding-window-counter engine: one state word (the window and its
//! count, see [`crate::algo::fixed_window`] and [`crate::algo::sliding_window`]) and one
//! control word holding the live limit with its check ([`layout::WINDOW_LIMIT`]). A decision
//! takes the limit from this thread's hot entry while the packed word is the one the entry
//! was filled from, steps the pure algorithm at it, and runs the one mutation loop on the
//! state word; a retune stores a new packed limit (a count means the same at any limit, so an
//! admission never needs giving back).

pub(crate) mod reboot;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algo::fixed_window::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::sliding_window::SlidingWindow;
use crate::algo::{near_threshold, try_decide, try_decide_from, Decision, Fault, Step};
use crate::clock::Clock;
use crate::engine::rate::RateEngine;
use crate::engine::site::hot::{self, Counts};
use crate::engine::site::Site;
use crate::error::{Error, Result};
use crate::file::layout::{self, pack_window_limit, unpack_window_limit};
use crate::spec::{Algorithm, Rate};

use super::{Params, StepError};

/// A fixed or sliding window's decisions and live limit, on the limit's site.
///
/// `pub` only so that the sealed kind traits may name it; the module is private.
pub struct Window<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(Window);

impl<'a, C: Clock> RateEngine<'a, C> for Window<'a, C> {
    #[inline(always)]
    fn on(site: &'a Site<C>) -> Self {
        Window(site)
    }

    #[inline(always)]
    fn site(self) -> &'a Site<C> {
        self.0
    }

    #[inline(always)]
    fn fast(self, cost: u64) -> Option<Decision> {
        match self.params {
            Params::FixedWindow(fw) => self.fast_with(
                cost,
                #[inline(always)]
                |limit, now, word| FixedWindow { limit, ..fw }.step(now, word, cost),
            ),
            Params::SlidingWindow(sw) => self.fast_with(
                cost,
                #[inline(always)]
                |limit, now, word| SlidingWindow { limit, ..sw }.step(now, word, cost),
            ),
            _ => None,
        }
    }

    /// The decision of an unkeyed fixed or sliding window, as `Bucket::bucket_run`: one loop
    /// per algorithm, its step inlined (one closure over every algorithm compiles to a call
    /// that returns the step through memory).
    #[inline(always)]
    fn decide(self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let now = || self.decision_time(at);
        let word = self.control(0);
        let mut counts = Counts::TALLY;
        let decision = match self.params {
            Params::FixedWindow(fw) => try_decide(
                word,
                now,
                commit,
                #[inline(always)]
                |t, w| self.fixed_step(fw, t, w, cost, &mut counts),
            ),
            Params::SlidingWindow(sw) => try_decide(
                word,
                now,
                commit,
                #[inline(always)]
                |t, w| self.sliding_step(sw, t, w, cost, &mut counts),
            ),
            _ => Err(StepError::NoWord),
        }
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish_counted(decision, cost, commit, counts))
    }

    /// While the grant's window is still counted.
    fn give_units(maker: &Site<C>, grant: &Decision, units: u64) -> Result<()> {
        maker.refund_in(maker.control(0), grant, units)
    }
}

impl<C: Clock> Window<'_, C> {
    /// `Bucket::bucket_fast` for an unkeyed fixed or sliding window: its live limit from this
    /// thread's hot entry while the packed limit word is the one the entry holds, then `step`
    /// (the window's pure step at that limit).
    #[inline(always)]
    fn fast_with(self, cost: u64, step: impl Fn(u64, u64, u64) -> Step) -> Option<Decision> {
        // Copies: as in `bucket_fast`.
        let (control, hot_id) = (self.control, self.hot_id);
        self.decide_fast(
            cost,
            #[inline(always)]
            |now, current, counts| {
                // Relaxed: the packed word carries its own check; it orders nothing else.
                let packed = control.word(layout::WINDOW_LIMIT).load(Ordering::Relaxed);
                let limit = hot::with(hot_id, |e| {
                    if e.id.get() != hot_id || e.check.get() != packed {
                        return Err(());
                    }
                    counts.counters = e.counters.get();
                    counts.near_slack = e.near_slack.get();
                    Ok(e.limit())
                })?;
                // A cost of 0 or over the limit: an error, from `RateEngine::run`.
                if cost.wrapping_sub(1) >= limit {
                    return Err(());
                }
                Ok(step(limit, now, current))
            },
            // A window's count means the same at any limit: its admission stands.
            |_| true,
        )
    }

    /// A composed check's decision of `cost` from the state word it loaded before its clock
    /// read `t` (see `handle::dispatch::load_word`).
    #[inline(always)]
    pub(crate) fn acquire_loaded(self, word: u64, t: u64, cost: u64) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        let decision = try_decide_from(self.control(0), word, self.loaded_time(t), true, |t, w| {
            self.step_fast(t, w, cost)
        })
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish(decision, cost, true))
    }

    /// A fixed window's pure decision at its live limit.
    #[inline(always)]
    pub(crate) fn fixed_step(
        &self,
        fw: FixedWindow,
        now: u64,
        word: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Step, StepError> {
        let limit = self.live_limit(cost, counts)?;
        Ok(FixedWindow { limit, ..fw }.step(now, word, cost))
    }

    /// A sliding window's pure decision at its live limit.
    #[inline(always)]
    pub(crate) fn sliding_step(
        &self,
        sw: SlidingWindow,
        now: u64,
        word: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Step, StepError> {
        let limit = self.live_limit(cost, counts)?;
        Ok(SlidingWindow { limit, ..sw }.step(now, word, cost))
    }

    /// A window's live limit, if it can ever grant `cost`: from this thread's hot entry for
    /// this handle while the packed limit word is the one it was filled from (no unpacking),
    /// with the near-limit threshold and counters for the decision (`counts`).
    #[inline(always)]
    fn live_limit(&self, cost: u64, counts: &mut Counts) -> Result<u64, StepError> {
        // Relaxed: the packed word carries its own check; it orders nothing else.
        let packed = self.control(layout::WINDOW_LIMIT).load(Ordering::Relaxed);
        // The packed word is the limit itself (with its check): equal words, equal limits.
        let limit = self.hot_entry(
            |e| e.id.get() == self.hot_id && e.check.get() == packed,
            counts,
            |e| self.fill(packed, e),
            hot::Entry::limit,
        )?;
        if cost > limit {
            return Err(StepError::Cost(limit));
        }
        Ok(limit)
    }

    /// Fill this thread's entry `e` for this handle from the packed window limit word `packed`.
    #[cold]
    #[inline(never)]
    fn fill(self, packed: u64, e: &hot::Entry) -> Result<(), StepError> {
        let limit = unpack_window_limit(packed).ok_or(StepError::Corrupt)?;
        e.fill_window(
            self.hot_id,
            packed,
            limit,
            near_threshold(limit, self.tally.near()),
            self.tally.owned_counters(),
        );
        Ok(())
    }

    /// A window's live limit.
    #[inline(always)]
    pub(crate) fn limit(&self) -> Result<u64> {
        self.limit_fast().map_err(|_| self.fault(Fault::Corrupt))
    }

    /// A window's live limit, with the small error of the hot path.
    #[inline(always)]
    pub(crate) fn limit_fast(&self) -> Result<u64, StepError> {
        // Relaxed: the packed word carries its own check; it orders nothing else.
        unpack_window_limit(self.control(layout::WINDOW_LIMIT).load(Ordering::Relaxed))
            .ok_or(StepError::Corrupt)
    }

    pub(crate) fn set_rate(&self, rate: Rate) -> Result<()> {
        let window_ns = match self.params {
            Params::FixedWindow(fw) if fw.window_ns == crate::algo::fixed_window::MONTHS => {
                Rate::MONTH_NS
            }
            Params::FixedWindow(fw) => fw.window_ns,
            Params::SlidingWindow(sw) => sw.window_ns,
            _ => return Err(self.misdirected()),
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
            _ => return Err(self.misdirected()),
        }
        algo.validate(self.name())?;
        let _guard = self.retune_lock()?;
        self.store_limit(limit);
        Ok(())
    }

    pub(crate) fn store_limit(&self, limit: u64) {
        // Release: one word holds the limit and its check; decisions read it whole.
        self.control(layout::WINDOW_LIMIT)
            .store(pack_window_limit(limit), Ordering::Release);
    }
}

/// What a window keeps in a thread's hot entry: its live limit, under the packed limit word it
/// was unpacked from (the entry's check).
impl hot::Entry {
    /// Fill the entry for window handle `id` with the live `limit` of packed word `packed`.
    pub(crate) fn fill_window(
        &self,
        id: u64,
        packed: u64,
        limit: u64,
        near_slack: u64,
        counters: *const AtomicU64,
    ) {
        let g = Gcra {
            emission_ns: 1,
            tolerance_ns: 0,
            capacity: limit,
        };
        self.set(id, packed, g, limit, near_slack, counters);
    }

    /// A window's live limit (kept as the capacity).
    #[inline(always)]
    pub(crate) fn limit(&self) -> u64 {
        self.capacity.get()
    }
}
