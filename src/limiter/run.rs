//! The general decision paths: every algorithm and case the straight path leaves, dated
//! decisions and peeks, the two halves a composed check decides with, and what follows every
//! decision (stamping it, counting it, counting refunds).

use crate::engine::bucket::Bucket;
use crate::engine::log::Log;
use crate::engine::site::Site;
use crate::engine::window::Window;
use std::sync::atomic::Ordering;

use crate::algo::{try_decide, try_decide_from, Decision};
use crate::clock::{Clock, DATE_TOLERANCE_NS, MAX_DATE_NS};
use crate::engine::Params;
use crate::error::{Error, Result};
use crate::tally::hot::Counts;

impl<C: Clock> Site<C> {
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
    /// A window (fixed, sliding, or a sliding log) decides a date ahead of the clock at the
    /// clock's time: a window's state names the window it counts, and moving it into a window
    /// the clock has not reached would count every other caller's decisions against the next
    /// window. A bucket decides at the date.
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
    pub(super) fn run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let this = self.follow()?;
        if this.plain_bucket && cost != 0 {
            return Bucket(this).bucket_run(cost, commit, at);
        }
        if this.plain_window && cost != 0 {
            return Window(this).decide(cost, commit, at);
        }
        if let (Params::SlidingLog(log), false) = (this.params, this.keyed || cost == 0) {
            return Log(this).decide(log, cost, commit, || this.decision_time(at));
        }
        this.run_on(cost, commit, || this.decision_time(at))
    }

    /// The first half of a decision dated by a clock read that the caller makes after it (a
    /// composed check reads the clock once for all its limits): the handle to decide on
    /// (following a replacement) and its state word, loaded now. `None` for a limit whose
    /// state is not one word (keyed, split, sliding log, concurrency).
    #[inline(always)]
    pub(crate) fn load_word(&self) -> Result<Option<(&Site<C>, u64)>> {
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

    /// The second half: admit `cost` on the handle [`Site::load_word`] returned, from the word
    /// it loaded, dated `t` (a clock read after that load); a retry reads the clock again.
    /// The replacement check runs at `t` when it is due, as in [`Site::decision_time`].
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
                Bucket(self).bucket_step(t, w, cost, &mut counts)
            })
            .map_err(|e| self.step_error(e, cost))?;
            if !Bucket(self).stands(decision.is_allowed(), decision.unit(), cost, counts.witness) {
                // Given back: decide again from the live word.
                return Bucket(self).bucket_run(cost, true, None);
            }
            return Ok(self.finish_counted(decision, cost, true, counts));
        }
        let decision = try_decide_from(self.control(0), word, now, true, |t, w| {
            self.step_fast(t, w, cost)
        })
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish(decision, cost, true))
    }

    /// What `Bucket::bucket_run`, `Window::decide` and [`Site::log_run`] do not decide:
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
            Params::SlidingLog(log) => return Log(self).decide(log, cost, commit, now),
            Params::Concurrency { .. } => {
                return Err(self.wrong_kind("is a concurrency limit: use try_acquire_permit"))
            }
            Params::TokenBucket if self.split > 1 => Bucket(self).split_run(cost, commit, now)?,
            _ => try_decide(self.control(0), now, commit, |t, w| {
                self.step_fast(t, w, cost)
            })
            .map_err(|e| self.step_error(e, cost))?,
        };
        let decision = self.finish(decision, cost, commit);
        Ok(decision)
    }
}
