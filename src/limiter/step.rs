//! The pure decision on one single-word state with its live parameters: the token bucket's
//! parameters from this thread's hot entry (the slot the word's tag names, filled out of line),
//! a window's live limit, the fleet share's lease and fence, and the small errors of the hot
//! path ([`StepError`]), turned into [`Error`]s out of line.

use crate::engine::bucket::Bucket;
use crate::engine::site::Site;
use crate::engine::window::Window;

use super::StepError;
use crate::algo::{Fault, Step};
use crate::clock::Clock;
use crate::engine::site::hot::Counts;
use crate::engine::Params;
use crate::error::{Error, Result};

impl<C: Clock> Site<C> {
    /// The pure decision for one single-word state (token bucket, fixed or sliding window) at
    /// `now`: shared by unkeyed limits and key slots.
    #[inline(always)]
    pub(crate) fn step_word(&self, now: u64, word: u64, cost: u64) -> Result<Step> {
        self.step_fast(now, word, cost)
            .map_err(|e| self.step_error(e, cost))
    }

    /// [`Site::step_word`] with a small, `Copy` error, so the hot path passes it in registers;
    /// [`Site::step_error`] makes the [`Error`] out of line.
    #[inline(always)]
    pub(crate) fn step_fast(&self, now: u64, word: u64, cost: u64) -> Result<Step, StepError> {
        match self.params {
            Params::TokenBucket => {
                Bucket(self).bucket_step(now, word, cost, &mut { Counts::TALLY })
            }
            Params::FixedWindow(fw) => {
                Window(self).fixed_step(fw, now, word, cost, &mut { Counts::TALLY })
            }
            Params::SlidingWindow(sw) => {
                Window(self).sliding_step(sw, now, word, cost, &mut { Counts::TALLY })
            }
            Params::SlidingLog(_) | Params::Concurrency { .. } | Params::Counters { .. } => {
                Err(StepError::NoWord)
            }
        }
    }

    /// The [`Error`] for a [`StepError`], made out of line.
    #[cold]
    #[inline(never)]
    pub(crate) fn step_error(&self, e: StepError, cost: u64) -> Error {
        match e {
            StepError::Corrupt => self.fault(Fault::Corrupt),
            StepError::Cost(capacity) => Error::CostExceedsCapacity { cost, capacity },
            StepError::NoWord => self.misdirected(),
            // `step_fast` turns them into denials; they never get here.
            StepError::Fenced | StepError::FenceRewrite => self.fault(Fault::Corrupt),
            // Decided again from the live word by an unkeyed bucket's own loop, and by a keyed
            // decision while the retune words move (`decide_key_again`); a composed check's
            // loaded word reports the slot as it looked: unreadable (each way of deciding it
            // again measured 40-160 instructions more on every composed check).
            StepError::Stale => self.fault(Fault::Corrupt),
        }
    }
}
