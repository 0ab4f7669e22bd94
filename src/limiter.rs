//! The public handles: [`Limiter`] (one attached file) and [`Limit`] (one limit in it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::algo::fixed_window::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::sliding_log::SlidingLog;
use crate::algo::sliding_window::SlidingWindow;
use crate::algo::{near_threshold, try_decide, try_decide_from, Decision, Fault, Step};
use crate::clock::{Clock, MonotonicClock};
pub(crate) use crate::engine::Params;
use crate::error::{Error, Result};
use crate::file::layout::{self, bucket, unpack_window_limit};
use crate::file::Words;
use crate::reconcile;
use crate::tally::hot::{self, Counts};
use crate::tally::Tally;

mod attach;
mod builder;
mod fleet;
mod info;
mod parts;
mod refund;
mod split;
mod token_bucket;
mod watch;
mod window;

#[cfg(test)]
mod tests;

use crate::clock::{DATE_TOLERANCE_NS, MAX_DATE_NS};
pub use crate::tally::Stats;
use attach::params_of;
pub use attach::Limiter;
pub use builder::Builder;
pub use fleet::FleetLease;
pub use info::FileInfo;
pub(crate) use parts::StepError;
pub(crate) use token_bucket::FENCE_REWRITE_RETRY_NS;
pub use watch::REPLACEMENT_CHECK;
use watch::{reattach_error, sync_files, RetuneGuard, Shared};

/// The untyped view of one limit, whatever its kind: what [`Limiter::limit`] and
/// [`Limiter::limits`] return, for listing and inspecting a file (name, definition, kind, live
/// parameters, statistics, permit holders, key occupancy) and for maintenance (reset, reclaiming
/// dead permits and idle keys).
///
/// Deciding goes through a handle of the limit's kind ([`crate::TokenBucketLimit`],
/// [`crate::WindowLimit`], ..., see [`LimitKind`](crate::LimitKind)), resolved with
/// [`Limiter::token_bucket`] and the like, or converted from this view with `try_from`: each
/// has exactly the operations of its kind, and is a newtype over this handle. Handles are
/// `Send + Sync` and cheap to clone.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("limit.shm");
/// use std::time::Duration;
/// use shmlimit::{Concurrency, FixedWindow, LimitKind, Limiter, WindowLimit};
/// let limiter = Limiter::builder()
///     .limit("per-minute", FixedWindow::new(2, Duration::from_secs(60)))
///     .limit("jobs", Concurrency::new(4))
///     .create_or_open(&path)?;
/// for limit in limiter.limits() {
///     println!("{} ({}): {:?}", limit.name(), limit.kind(), limit.stats());
/// }
/// let limit = limiter.limit("per-minute")?;
/// assert_eq!(limit.kind(), LimitKind::Window);
/// let window = WindowLimit::try_from(limit)?; // as limiter.window("per-minute")
/// assert!(window.try_acquire(2)?.is_allowed());
/// assert_eq!(limiter.limit("per-minute")?.stats().allowed, 1);
/// assert_eq!(limiter.limit("jobs")?.permit_holders().len(), 0);
/// # Ok(()) }
/// ```
pub struct Limit<C: Clock = MonotonicClock> {
    shared: Arc<Shared>,
    clock: C,
    params: Params,
    index: usize,
    /// The limit's control line.
    control: Words,
    /// Everything after the control line: log entries, permits, or the key table.
    area: Words,
    /// What happens after a decision: shadow mode, near-limit, counters.
    tally: Tally,
    keyed: bool,
    split: usize,
    /// An unkeyed, unsplit token bucket: decided by [`Limit::bucket_fast`] (or, when that gives
    /// up, [`Limit::bucket_run`]).
    plain_bucket: bool,
    /// An unkeyed fixed or sliding window: decided by [`Limit::window_fast`] (or, when that
    /// gives up, [`Limit::window_run`]).
    plain_window: bool,
    /// The file's hash seed (header words, fixed at creation), read once.
    seed: [u64; 2],
    /// A keyed limit's table slots ([`Keyed::slots`]), 0 when unkeyed.
    key_slots: usize,
    /// This handle's id in each thread's hot entries ([`hot`]): unique in the process, shared
    /// by clones.
    hot_id: u64,
    /// This limit's identity in the grants it makes: its index and the file's hash seed.
    origin: u64,
    /// Clock time at which this handle next checks that its file is still the one at the path
    /// (one compare per decision; the check itself is off the hot path). Zero once moved.
    next_check: AtomicU64,
    /// The same limit in the file that replaced this one, once noticed.
    moved: OnceLock<Box<Limit<C>>>,
}

// Handles are `Send` and `Sync` with no unsafe impl of their own: their words are `file::Words`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Limit>();
};

impl<C: Clock> Clone for Limit<C> {
    fn clone(&self) -> Self {
        Limit {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
            params: self.params,
            index: self.index,
            control: self.control,
            area: self.area,
            tally: self.tally,
            keyed: self.keyed,
            split: self.split,
            plain_bucket: self.plain_bucket,
            plain_window: self.plain_window,
            seed: self.seed,
            key_slots: self.key_slots,
            hot_id: self.hot_id,
            origin: self.origin,
            // Relaxed: a time; a stale copy only makes the clone check sooner.
            next_check: AtomicU64::new(self.next_check.load(Ordering::Relaxed)),
            moved: self.moved.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Limit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limit")
            .field("name", &self.name())
            .field("algorithm", self.algorithm())
            .finish()
    }
}

impl<C: Clock> Limit<C> {
    /// The hash seed of the file's keyed tables (16 bytes, chosen at creation).
    #[inline(always)]
    pub(crate) fn hash_seed(&self) -> [u64; 2] {
        self.seed
    }

    /// A keyed limit's table of key slots: `None` for an unkeyed limit, or on a target without
    /// a 16-byte CAS.
    #[inline]
    pub(crate) fn key_table(&self) -> Option<&[crate::engine::keys::Slot]> {
        crate::engine::keys::table_in(self.area(), self.key_slots)
    }

    /// The pure decision for one single-word state (token bucket, fixed or sliding window) at
    /// `now`: shared by unkeyed limits and key slots.
    #[inline(always)]
    pub(crate) fn step_word(&self, now: u64, word: u64, cost: u64) -> Result<Step> {
        self.step_fast(now, word, cost)
            .map_err(|e| self.step_error(e, cost))
    }

    /// [`Limit::step_word`] with a small, `Copy` error, so the hot path passes it in registers;
    /// [`Limit::step_error`] makes the [`Error`] out of line.
    #[inline(always)]
    pub(crate) fn step_fast(&self, now: u64, word: u64, cost: u64) -> Result<Step, StepError> {
        match self.params {
            Params::TokenBucket => self.bucket_step(now, word, cost, &mut { Counts::TALLY }),
            Params::FixedWindow(fw) => self.fixed_step(fw, now, word, cost, &mut { Counts::TALLY }),
            Params::SlidingWindow(sw) => {
                self.sliding_step(sw, now, word, cost, &mut { Counts::TALLY })
            }
            Params::SlidingLog(_) | Params::Concurrency { .. } => Err(StepError::NoWord),
        }
    }

    /// A fixed window's pure decision at its live limit.
    #[inline(always)]
    fn fixed_step(
        &self,
        fw: FixedWindow,
        now: u64,
        word: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Step, StepError> {
        let limit = self.live_window_limit(cost, counts)?;
        Ok(FixedWindow { limit, ..fw }.step(now, word, cost))
    }

    /// A sliding window's pure decision at its live limit.
    #[inline(always)]
    fn sliding_step(
        &self,
        sw: SlidingWindow,
        now: u64,
        word: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Step, StepError> {
        let limit = self.live_window_limit(cost, counts)?;
        Ok(SlidingWindow { limit, ..sw }.step(now, word, cost))
    }

    /// A window's live limit, if it can ever grant `cost`: from this thread's hot entry for
    /// this handle while the packed limit word is the one it was filled from (no unpacking),
    /// with the near-limit threshold and counters for the decision (`counts`).
    #[inline(always)]
    fn live_window_limit(&self, cost: u64, counts: &mut Counts) -> Result<u64, StepError> {
        // Relaxed: the packed word carries its own check; it orders nothing else.
        let packed = self.control(layout::WINDOW_LIMIT).load(Ordering::Relaxed);
        let limit = self.hot_entry(
            packed,
            counts,
            |e| self.window_fill(packed, e),
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
    fn window_fill(&self, packed: u64, e: &hot::Entry) -> Result<(), StepError> {
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

    /// The [`Error`] for a [`StepError`], made out of line.
    #[cold]
    #[inline(never)]
    pub(crate) fn step_error(&self, e: StepError, cost: u64) -> Error {
        match e {
            StepError::Corrupt => self.fault(Fault::Corrupt),
            StepError::Cost(capacity) => Error::CostExceedsCapacity { cost, capacity },
            StepError::NoWord => self.wrong_kind("has no single-word state"),
            // `step_fast` turns them into denials; they never get here.
            StepError::Fenced | StepError::FenceRewrite => self.fault(Fault::Corrupt),
            // Decided again from the live word by an unkeyed bucket's own loop, and by a keyed
            // decision while the retune words move (`decide_key_again`); a composed check's
            // loaded word reports the slot as it looked: unreadable (each way of deciding it
            // again measured 40-160 instructions more on every composed check).
            StepError::Stale => self.fault(Fault::Corrupt),
        }
    }

    /// The bucket's parameters in slot `tag`, from this thread's hot entry for this handle
    /// while the slot's check word is the one the entry was filled under: one load of the
    /// (already fetched) control line and two compares, instead of reading and re-validating
    /// three words on every decision. `counts` gets what the decision counts itself with.
    ///
    /// A fleet share's slot costs one more test, one load of the deadline word on the same 64
    /// bytes and one compare with `now`; once the deadline has passed the decision uses the
    /// fence slot instead (cold path).
    #[inline(always)]
    fn bucket_cached(
        &self,
        tag: usize,
        now: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Gcra, StepError> {
        let tag = tag & 1;
        // Acquire: pairs with the Release store that ends a retune of this slot.
        let check = self
            .control(bucket::PARAMS[tag] + 2)
            .load(Ordering::Acquire);
        // Filled from the slot read whole: its own check names its values, even if a retune
        // has changed the slot since the load above (then the word this decision loaded is no
        // longer live, and its CAS fails).
        let (g, fleet) = self.hot_entry(
            check,
            counts,
            |e| self.hot_fill(tag, e),
            |e| (e.gcra(), e.fleet()),
        )?;
        if fleet {
            return self.fleet_gate(g, now, cost);
        }
        Ok(g)
    }

    /// What `read` takes from this thread's hot entry for this handle, the entry filled by
    /// `fill` first unless it is this handle's for check word `check`; `counts` gets the
    /// entry's counters and near-limit threshold. Shared by the bucket and window decisions.
    #[inline(always)]
    fn hot_entry<R>(
        &self,
        check: u64,
        counts: &mut Counts,
        fill: impl FnOnce(&hot::Entry) -> Result<(), StepError>,
        read: impl FnOnce(&hot::Entry) -> R,
    ) -> Result<R, StepError> {
        hot::with(self.hot_id, |e| {
            if e.id.get() != self.hot_id || e.check.get() != check {
                fill(e)?;
            }
            *counts = Counts {
                counters: e.counters.get(),
                near_slack: e.near_slack.get(),
            };
            Ok(read(e))
        })
    }

    /// A fleet share `g` at `now`: `g` while the lease deadline covers `now`, else the fence.
    #[inline(always)]
    fn fleet_gate(&self, g: Gcra, now: u64, cost: u64) -> Result<Gcra, StepError> {
        // Acquire: pairs with the agent's Release store of the deadline, after the check load.
        if bucket::leased(self.control(bucket::DEADLINE).load(Ordering::Acquire), now) {
            Ok(g)
        } else {
            self.fenced(cost)
        }
    }

    #[cold]
    #[inline(never)]
    fn fenced(&self, cost: u64) -> Result<Gcra, StepError> {
        let g = match self.fence_params() {
            Ok(Some(g)) => g,
            Ok(None) => return Err(StepError::FenceRewrite),
            Err(_) => return Err(StepError::Corrupt),
        };
        if cost > g.capacity {
            return Err(StepError::Fenced);
        }
        Ok(g)
    }

    /// Fill this thread's entry `e` for this handle from slot `tag`, read whole.
    #[cold]
    #[inline(never)]
    fn hot_fill(&self, tag: usize, e: &hot::Entry) -> Result<(), StepError> {
        let (g, fleet) = self.slot_params(bucket::PARAMS[tag & 1]).map_err(|_| {
            // The slot did not read whole for 64 rounds. If a retune has since made the other
            // slot the active one, this one is being rewritten by the next retune and the word
            // that named it is stale. Otherwise the slot the live parameters are in is damaged.
            // Both must say so: the active slot is the other one, and so is the live word's
            // (a damaged file whose word and `ACTIVE` disagree is corrupt, not stale).
            let live = (self.control(0).load(Ordering::Acquire) >> 63) as usize;
            if crate::engine::bucket::active(self.control_line()) != tag & 1 && live != tag & 1 {
                StepError::Stale
            } else {
                StepError::Corrupt
            }
        })?;
        e.fill(
            self.hot_id,
            bucket::check(g.emission_ns, g.capacity) ^ if fleet { bucket::FLEET } else { 0 },
            g,
            fleet,
            near_threshold(g.tolerance_ns, self.tally.near()),
            self.tally.owned_counters(),
        );
        Ok(())
    }

    /// A window's live limit, with the small error of the hot path.
    #[inline(always)]
    fn window_limit_fast(&self) -> Result<u64, StepError> {
        // Relaxed: the packed word carries its own check; it orders nothing else.
        unpack_window_limit(self.control(layout::WINDOW_LIMIT).load(Ordering::Relaxed))
            .ok_or(StepError::Corrupt)
    }

    /// Admit `cost` units now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `cost` can never be granted;
    /// [`Error::CorruptState`] when the shared state is damaged (fail closed);
    /// [`Error::WrongKind`] on a keyed or concurrency limit.
    #[inline(always)]
    pub(crate) fn try_acquire(&self, cost: u64) -> Result<Decision> {
        if self.plain_bucket {
            return self.try_acquire_bucket(cost);
        }
        if self.plain_window {
            return self.try_acquire_window(cost);
        }
        self.run(cost, true, None)
    }

    /// [`Limit::try_acquire`] on a token bucket (the typed handle's call: no test of the kind).
    #[inline(always)]
    pub(crate) fn try_acquire_bucket(&self, cost: u64) -> Result<Decision> {
        if self.plain_bucket {
            if let Some(decision) = self.bucket_fast(cost) {
                return Ok(decision);
            }
        }
        self.try_acquire_slow(cost)
    }

    /// [`Limit::try_acquire`] on a fixed or sliding window (the typed handle's call).
    #[inline(always)]
    pub(crate) fn try_acquire_window(&self, cost: u64) -> Result<Decision> {
        let fast = match self.params {
            Params::FixedWindow(fw) => self.window_fast(
                cost,
                #[inline(always)]
                |limit, now, word| FixedWindow { limit, ..fw }.step(now, word, cost),
            ),
            Params::SlidingWindow(sw) => self.window_fast(
                cost,
                #[inline(always)]
                |limit, now, word| SlidingWindow { limit, ..sw }.step(now, word, cost),
            ),
            _ => None,
        };
        if let Some(decision) = fast {
            return Ok(decision);
        }
        self.try_acquire_slow(cost)
    }

    /// The decision of [`Limit::try_acquire_again`], copied ([`Decision::relocated`]).
    #[inline(always)]
    fn try_acquire_slow(&self, cost: u64) -> Result<Decision> {
        match self.try_acquire_again(cost) {
            Ok(d) => Ok(d.relocated()),
            Err(e) => Err(e),
        }
    }

    /// [`Limit::try_acquire`] when [`Limit::bucket_fast`] did not decide, from scratch.
    #[cold]
    #[inline(never)]
    fn try_acquire_again(&self, cost: u64) -> Result<Decision> {
        self.run(cost, true, None)
    }

    /// The common token-bucket decision, straight-line: the handle is not due for its
    /// replacement check, this thread's hot entry holds the parameters of the slot the word
    /// names, the cost fits (a fleet share: and its lease covers now), and a denial is counted
    /// in this thread's own lane. `None` when any of that does not hold, having written
    /// nothing: the caller then decides from scratch through [`Limit::run`], which handles
    /// every case (one more clock read, off the common path). The loop is the one mutation
    /// loop ([`try_decide`], loom-modelled): a failed CAS retries from the word that beat it.
    ///
    /// Everything else [`Limit::bucket_run`] does (the stale-word retry, the fence, filling
    /// the entry, the errors) stays out of this function: their state kept the whole decision
    /// in memory and cost about 20 instructions on every call.
    #[inline(always)]
    fn bucket_fast(&self, cost: u64) -> Option<Decision> {
        // Copies: the clock call may write any memory, so fields are loaded again after it.
        let (control, hot_id) = (self.control, self.hot_id);
        self.decide_fast(
            cost,
            #[inline(always)]
            |now, current, counts| {
                let tag = current & bucket::PARAM_TAG;
                // Acquire: pairs with the Release store that ends a retune of this slot.
                let check = control
                    .word(bucket::check_word(tag))
                    .load(Ordering::Acquire);
                let (g, gate) = hot::with(hot_id, |e| {
                    if e.id.get() != hot_id || e.check.get() != check {
                        return Err(());
                    }
                    *counts = Counts {
                        counters: e.counters.get(),
                        near_slack: e.near_slack.get(),
                    };
                    Ok((e.gcra(), e.gate.get()))
                })?;
                // A cost of 0 or over the gate (one compare for both): a fleet share (then the
                // cost must fit and the lease cover `now`), or a cost that is an error (from
                // `Limit::run`).
                if cost.wrapping_sub(1) >= gate
                    && (gate != 0
                    || cost == 0
                    || cost > g.capacity
                    // Acquire: as in `fleet_gate`.
                    || !bucket::leased(
                        control.word(bucket::DEADLINE).load(Ordering::Acquire),
                        now,
                    ))
                {
                    return Err(());
                }
                Ok(crate::engine::bucket::step(&g, now, current, cost))
            },
        )
    }

    /// [`Limit::bucket_fast`] for an unkeyed fixed or sliding window: its live limit from this
    /// thread's hot entry while the packed limit word is the one the entry holds, then `step`
    /// (the window's pure step at that limit).
    #[inline(always)]
    fn window_fast(&self, cost: u64, step: impl Fn(u64, u64, u64) -> Step) -> Option<Decision> {
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
                    *counts = Counts {
                        counters: e.counters.get(),
                        near_slack: e.near_slack.get(),
                    };
                    Ok(e.limit())
                })?;
                // A cost of 0 or over the limit: an error, from `Limit::run`.
                if cost.wrapping_sub(1) >= limit {
                    return Err(());
                }
                Ok(step(limit, now, current))
            },
        )
    }

    /// The loop and the counting shared by [`Limit::bucket_fast`] and [`Limit::window_fast`]:
    /// `step` decides at `now` on the word, with the hot entry's counters (`counts`), or gives
    /// up (`Err`) having written nothing.
    #[inline(always)]
    fn decide_fast(
        &self,
        cost: u64,
        mut step: impl FnMut(u64, u64, &mut Counts) -> Result<Step, ()>,
    ) -> Option<Decision> {
        let mut counts = Counts::TALLY;
        // The one mutation loop: a failed CAS retries from the word that beat it.
        let decision = try_decide(
            self.control.word(0),
            #[inline(always)]
            || self.clock.now_ns(),
            true,
            #[inline(always)]
            |now, current| {
                // Relaxed: as in `current_at`; 0 (a replaced file) is always due.
                if now >= self.next_check.load(Ordering::Relaxed) {
                    return Err(());
                }
                match step(now, current, &mut counts)? {
                    // A shadow limit's denial is reported allowed: `Limit::run` decides it (a
                    // denial wrote nothing), as it does the denials of a process on the shared
                    // lane.
                    Step::Deny(_) if counts.counters.is_null() => Err(()),
                    s => Ok(s),
                }
            },
        )
        .ok()?;
        if counts.counters.is_null() {
            // An admission of a shadow limit or on the shared lane.
            self.tally
                .admitted_on_tally(decision.slack_under(counts.near_slack));
            let mut decision = decision;
            decision.cost = cost;
            decision.origin = self.origin;
            return Some(decision);
        }
        Some(self.finish_counted(decision, cost, true, counts))
    }

    /// The decision [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire) would make now, consuming nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire).
    #[inline(always)]
    pub(crate) fn peek(&self, cost: u64) -> Result<Decision> {
        self.run(cost, false, None)
    }

    /// [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire) dated at `now_ns` on the monotonic timeline instead of the clock
    /// (for replaying traces and for tests). A `now_ns` older than the stored state is clamped
    /// as any stale read is.
    ///
    /// A date is checked against the limit's clock (one clock read, on this dated path only): a
    /// date ahead of it by more than [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE), or beyond what the state can encode
    /// ([`MAX_DATE_NS`](crate::consts::MAX_DATE_NS)), is refused, so that no date can leave a state that locks other
    /// processes out, opens the limit to them, or fails their decisions.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire); [`Error::ClockOutOfRange`] for a date ahead of the clock by
    /// more than [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE) or beyond [`MAX_DATE_NS`](crate::consts::MAX_DATE_NS), consuming nothing.
    pub(crate) fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        self.check_date(now_ns)?;
        self.run(cost, true, Some(now_ns))
    }

    /// Refuse a caller's date that the state cannot encode or that runs ahead of the clock.
    #[inline]
    pub(crate) fn check_date(&self, now_ns: u64) -> Result<()> {
        if now_ns > MAX_DATE_NS || now_ns > self.clock.now_ns().saturating_add(DATE_TOLERANCE_NS) {
            return Err(Error::ClockOutOfRange(now_ns));
        }
        Ok(())
    }

    #[inline(always)]
    fn run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let this = self.follow()?;
        if this.plain_bucket && cost != 0 {
            return this.bucket_run(cost, commit, at);
        }
        if this.plain_window && cost != 0 {
            return this.window_run(cost, commit, at);
        }
        if let (Params::SlidingLog(log), false) = (this.params, this.keyed || cost == 0) {
            return this.log_run(log, cost, commit, || this.decision_time(at));
        }
        this.run_on(cost, commit, || this.decision_time(at))
    }

    /// The decision of a sliding log.
    #[inline(always)]
    fn log_run(
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
            .acquire(self.control(0), self.area_log(log), now, cost, commit)
            .map_err(|f| self.fault(f))?;
        Ok(self.finish(decision, cost, commit))
    }

    /// The decision of an unkeyed fixed or sliding window, as [`Limit::bucket_run`]: one loop
    /// per algorithm, its step inlined (one closure over every algorithm compiles to a call
    /// that returns the step through memory).
    #[inline(always)]
    fn window_run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
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

    /// The decision of an unkeyed, unsplit token bucket: the one CAS loop with the bucket's
    /// step and nothing else, so that it compiles to straight-line code (no dispatch on the
    /// algorithm, no call, the decision in registers). Every other limit goes through
    /// [`Limit::run_on`].
    ///
    /// A loaded word that went stale under two retunes in a row ([`StepError::Stale`]: the
    /// live word names the other slot, so each round starts from a word that moved) is decided
    /// again from the live word, here in the loop: a separate function for it returned the
    /// decision through memory, and the whole `Decision` was stored on every call.
    #[inline(always)]
    fn bucket_run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let mut counts = Counts::TALLY;
        // Bounded: a process flipping the word's tag without end gets `CorruptState`.
        let mut rounds = 0;
        loop {
            match self.bucket_loop(cost, commit, at, &mut counts) {
                Ok(decision) => return Ok(self.finish_counted(decision, cost, commit, counts)),
                Err(StepError::Stale) if rounds < 64 => rounds += 1,
                Err(e) => return Err(self.step_error(e, cost)),
            }
        }
    }

    /// The bucket's CAS loop on its state word, the step inlined.
    #[inline(always)]
    fn bucket_loop(
        &self,
        cost: u64,
        commit: bool,
        at: Option<u64>,
        counts: &mut Counts,
    ) -> Result<Decision, StepError> {
        try_decide(
            self.control(0),
            || self.decision_time(at),
            commit,
            |t, w| self.bucket_step(t, w, cost, counts),
        )
    }

    /// The first half of a decision dated by a clock read that the caller makes after it (a
    /// composed check reads the clock once for all its limits): the handle to decide on
    /// (following a replacement) and its state word, loaded now. `None` for a limit whose
    /// state is not one word (keyed, split, sliding log, concurrency).
    #[inline(always)]
    pub(crate) fn load_word(&self) -> Result<Option<(&Limit<C>, u64)>> {
        let this = self.follow()?;
        let single = matches!(
            this.params,
            Params::TokenBucket | Params::FixedWindow(_) | Params::SlidingWindow(_)
        );
        if this.keyed || this.split > 1 || !single {
            return Ok(None);
        }
        // Acquire: as in `try_decide`.
        Ok(Some((this, this.control(0).load(Ordering::Acquire))))
    }

    /// The second half: admit `cost` on the handle [`Limit::load_word`] returned, from the word
    /// it loaded, dated `t` (a clock read after that load); a retry reads the clock again.
    /// The replacement check runs at `t` when it is due, as in [`Limit::decision_time`].
    #[inline(always)]
    pub(crate) fn acquire_loaded(&self, word: u64, t: u64, cost: u64) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        let mut first = Some(t);
        let now = || match first.take() {
            Some(t) => {
                // Relaxed: as in `current_at`.
                if t >= self.next_check.load(Ordering::Relaxed) {
                    self.check_due(t);
                }
                t
            }
            None => self.decision_time(None),
        };
        if self.plain_bucket {
            let mut counts = Counts::TALLY;
            let decision = try_decide_from(self.control(0), word, now, true, |t, w| {
                self.bucket_step(t, w, cost, &mut counts)
            })
            .map_err(|e| self.step_error(e, cost))?;
            return Ok(self.finish_counted(decision, cost, true, counts));
        }
        let decision = try_decide_from(self.control(0), word, now, true, |t, w| {
            self.step_fast(t, w, cost)
        })
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish(decision, cost, true))
    }

    /// The token bucket's pure decision on state word `word` at `now`: the bucket's parameters
    /// from the slot the word's tag names (through this thread's hot entry), then GCRA.
    #[inline(always)]
    pub(crate) fn bucket_step(
        &self,
        now: u64,
        word: u64,
        cost: u64,
        counts: &mut Counts,
    ) -> Result<Step, StepError> {
        let tag = word & bucket::PARAM_TAG;
        let g = match self.bucket_cached((tag >> 63) as usize, now, cost, counts) {
            Ok(g) => g,
            // Fenced, and the fence's bucket can never grant this much: deny.
            Err(StepError::Fenced) => return Ok(Step::Deny(Decision::denied(u64::MAX, 0, 1))),
            // Fenced, and the fence is being rewritten: deny, consuming nothing (fail closed).
            Err(StepError::FenceRewrite) => {
                return Ok(Step::Deny(Decision::denied(FENCE_REWRITE_RETRY_NS, 0, 1)))
            }
            Err(e) => return Err(e),
        };
        if cost > g.capacity {
            return Err(StepError::Cost(g.capacity));
        }
        Ok(crate::engine::bucket::step(&g, now, word, cost))
    }

    /// What [`Limit::bucket_run`], [`Limit::window_run`] and [`Limit::log_run`] do not decide:
    /// split buckets, and the errors (out of line: inlined, its code makes the hot loops above
    /// allocate registers worse).
    #[inline(never)]
    fn run_on(&self, cost: u64, commit: bool, now: impl Fn() -> u64) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        if self.keyed {
            return Err(self.wrong_kind("is keyed: use try_acquire_key"));
        }
        let decision = match self.params {
            Params::SlidingLog(log) => return self.log_run(log, cost, commit, now),
            Params::Concurrency { .. } => {
                return Err(self.wrong_kind("is a concurrency limit: use try_acquire_permit"))
            }
            Params::TokenBucket if self.split > 1 => self.split_run(cost, commit, now)?,
            _ => try_decide(self.control(0), now, commit, |t, w| {
                self.step_fast(t, w, cost)
            })
            .map_err(|e| self.step_error(e, cost))?,
        };
        let decision = self.finish(decision, cost, commit);
        Ok(decision)
    }

    /// Stamp a decision with its cost and origin; a committed one then goes through the
    /// [`Tally`] (shadow mode, counters, near-limit). Shared with the keyed, permit and wait
    /// paths.
    #[inline(always)]
    pub(crate) fn finish(&self, mut decision: Decision, cost: u64, commit: bool) -> Decision {
        decision.cost = cost;
        decision.origin = self.origin;
        if !commit {
            return decision;
        }
        self.tally.after(decision)
    }

    /// [`Limit::finish`] for a decision counted through this thread's hot entry when it has
    /// the counters (`counts`, from [`Limit::bucket_cached`] or [`Limit::live_window_limit`]).
    #[inline(always)]
    pub(crate) fn finish_counted(
        &self,
        mut decision: Decision,
        cost: u64,
        commit: bool,
        counts: Counts,
    ) -> Decision {
        if !commit || counts.counters.is_null() {
            return self.finish(decision, cost, commit);
        }
        decision.cost = cost;
        decision.origin = self.origin;
        Tally::after_owned(counts.counters, &decision, counts.near_slack);
        decision
    }

    /// Count a grant given back: called once per refund of a whole grant, by every refund path
    /// (so composed checks count their roll-backs).
    ///
    /// A grant of cost 0 counts only when it is shadow-denied (admitted, taking nothing): a
    /// denial, a peek or a grant record without its grant (from C) gives nothing back.
    pub(crate) fn count_refund(&self, grant: &Decision, units: u64) {
        let whole = if grant.cost == 0 {
            grant.shadow_denied
        } else {
            units >= grant.cost
        };
        if grant.is_allowed() && whole {
            self.tally.refunded();
        }
    }

    fn area_log(&self, log: SlidingLog) -> &[AtomicU64] {
        &self.area()[..log.limit as usize]
    }

    /// The handle to decide with at clock time `t`: this one, or (after its file was
    /// replaced) the same limit in the new file. One compare unless a check is due.
    #[inline(always)]
    pub(crate) fn current_at(&self, t: u64) -> Result<&Limit<C>> {
        // Relaxed: a time; a stale value only moves the check by one decision.
        if t < self.next_check.load(Ordering::Relaxed) {
            return Ok(self);
        }
        self.recheck(t)
    }

    /// The handle a decision runs on: this one, or, once a replacement was noticed (the next
    /// check time is then 0), the handle of the file that replaced it. One load on the hot path.
    #[inline(always)]
    pub(crate) fn follow(&self) -> Result<&Limit<C>> {
        // Relaxed: a time; 0 sends every later decision to the slow path.
        if self.next_check.load(Ordering::Relaxed) != 0 {
            return Ok(self);
        }
        self.recheck(self.clock.now_ns())
    }

    /// The time of one attempt of a decision, read after the attempt loaded the state word (so
    /// that it is never older than the time of the decision that wrote the word), or the
    /// caller's date `at`. The clock read doubles as the time of the replacement check: once it
    /// is due, the check runs here, off the hot path; the decision under way still completes on
    /// this file (so a replaced file serves at most one more decision per handle), and the next
    /// one starts on the file that replaced it. A failed check is reported by the next call,
    /// through [`Limit::follow`].
    #[inline(always)]
    pub(crate) fn decision_time(&self, at: Option<u64>) -> u64 {
        let t = self.clock.now_ns();
        // Relaxed: as in `current_at`.
        if t >= self.next_check.load(Ordering::Relaxed) {
            self.check_due(t);
        }
        at.unwrap_or(t)
    }

    #[cold]
    #[inline(never)]
    fn check_due(&self, t: u64) {
        if t != 0 && self.recheck(t).is_err() {
            // Relaxed: as in `current_at`.
            self.next_check.store(0, Ordering::Relaxed);
        }
    }

    /// [`Limit::current_at`] at the clock's time now.
    #[inline(always)]
    pub(crate) fn current(&self) -> Result<&Limit<C>> {
        self.current_at(self.clock.now_ns())
    }

    /// Check, off the hot path, that the file is still the one at the path; move to its
    /// replacement once it is not.
    #[cold]
    #[inline(never)]
    fn recheck(&self, t: u64) -> Result<&Limit<C>> {
        if let Some(next) = self.moved.get() {
            return next.current_at(t);
        }
        match self.shared.check(t)? {
            None => {
                // Relaxed: times; see `current_at`.
                let next = self.shared.watch.next_check.load(Ordering::Relaxed);
                self.next_check.store(next, Ordering::Relaxed);
                Ok(self)
            }
            Some(mut shared) => {
                // The file that replaced this one may have been replaced in turn (a deploy that
                // removed this limit, then one that restored it): follow the chain to the file
                // at the path now. Each link checks its own path at most once per interval.
                for _ in 0..16 {
                    match shared.check(t)? {
                        Some(next) => shared = next,
                        None => break,
                    }
                }
                let limiter = Limiter {
                    shared,
                    clock: self.clock.clone(),
                };
                let limit = limiter.limit(self.name()).map_err(|_| {
                    reattach_error(
                        &self.shared.mapped.path,
                        format!(
                            "the file now at the path has no limit {}",
                            reconcile::quote(self.name())
                        ),
                    )
                })?;
                let next = self.moved.get_or_init(|| Box::new(limit));
                // Relaxed: every later decision takes the slow path to the new file.
                self.next_check.store(0, Ordering::Relaxed);
                next.current_at(t)
            }
        }
    }
}
