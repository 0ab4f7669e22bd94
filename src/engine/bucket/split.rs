//! A split bucket: one state word per sub-bucket, each with its share of the rate and
//! capacity; a process decides on its home sub-bucket first, then on the others.

use crate::algo::gcra::Gcra;
use crate::algo::{try_decide, Decision, Step};
use crate::clock::Clock;
use crate::engine;
use crate::error::{Error, Result};
use crate::file::layout;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Bucket, FENCE_REWRITE_RETRY_NS};

impl<C: Clock> Bucket<'_, C> {
    /// True for a token bucket split into sub-buckets.
    pub(crate) fn is_split(&self) -> bool {
        self.split > 1
    }

    /// The state word of sub-bucket `i` of a split bucket: word 0 of its line.
    pub(crate) fn sub_state(&self, i: usize) -> &AtomicU64 {
        if i == 0 {
            self.control(0)
        } else {
            &self.area()[(i - 1) * layout::LINE / 8]
        }
    }

    /// Sub-bucket `i`'s share of the bucket `whole`: capacity `B / k` (the remainder spread over
    /// the first sub-buckets) and rate `r / k`. The shares add up to the whole, never more.
    pub(crate) fn sub_params(&self, whole: Gcra, i: usize) -> Gcra {
        let k = self.split as u64;
        let capacity = whole.capacity / k + u64::from((i as u64) < whole.capacity % k);
        let emission_ns = whole.emission_ns.saturating_mul(k);
        Gcra {
            emission_ns,
            tolerance_ns: capacity.saturating_mul(emission_ns),
            capacity,
        }
    }

    /// The sub-bucket this process decides on first: the CPU it runs on (a vDSO call), so that
    /// processes on different CPUs write different lines.
    pub(crate) fn home_sub(&self) -> usize {
        // SAFETY: sched_getcpu has no preconditions; it returns -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        let seed = if cpu >= 0 {
            cpu as usize
        } else {
            std::process::id() as usize
        };
        seed % self.split
    }

    /// A decision on a split bucket: the home sub-bucket first, then each sibling in turn. An
    /// admission made with parameters a retune or reset replaced before its CAS landed (see
    /// `engine::bucket`) is given back and the decision made again (bounded).
    pub(crate) fn split_run(
        &self,
        cost: u64,
        commit: bool,
        now: impl Fn() -> u64,
    ) -> Result<Decision> {
        for _ in 0..64 {
            let witness = engine::bucket::witness(self.control_line());
            let (decision, sub) = self.split_once(cost, commit, &now)?;
            if !commit || !decision.is_allowed() {
                return Ok(decision);
            }
            if engine::bucket::unchanged(self.control_line(), witness) {
                return Ok(decision);
            }
            self.give_back(self.sub_state(sub), cost.saturating_mul(decision.unit()));
        }
        Err(self.fault(crate::algo::Fault::Corrupt))
    }

    /// One round of [`Bucket::split_run`]: the decision, and the sub-bucket that made it.
    fn split_once(
        &self,
        cost: u64,
        commit: bool,
        now: &impl Fn() -> u64,
    ) -> Result<(Decision, usize)> {
        // Acquire: pairs with the retune's flip of sub-bucket 0, the first one it moves.
        let tag = self.control(0).load(Ordering::Acquire) >> 63;
        let largest = self
            .sub_params(self.bucket_params(tag as usize)?, 0)
            .capacity;
        if cost > largest {
            return Err(Error::CostExceedsCapacity {
                cost,
                capacity: largest,
            });
        }
        let home = self.home_sub();
        let mut denied: Option<Decision> = None;
        for j in 0..self.split {
            let i = (home + j) % self.split;
            let d = try_decide(self.sub_state(i), now, commit, |t, w| {
                let Some(at) = self.bucket_at(engine::bucket::tag_of(w), t)? else {
                    // Fenced, and the fence is being rewritten: deny, retry shortly.
                    return Ok(Step::Deny(Decision::denied(FENCE_REWRITE_RETRY_NS, 0, 1)));
                };
                let sub = self.sub_params(at.g, i);
                if cost > sub.capacity {
                    // Only the larger sub-buckets can grant this much: deny here, try a sibling.
                    return Ok(Step::Deny(Decision::denied(u64::MAX, 0, 1)));
                }
                Ok(engine::bucket::step(&sub, t, w, cost))
            })?;
            if d.is_allowed() {
                return Ok((d.stamped(i as u64), i));
            }
            if denied.is_none_or(|best| d.retry_after_ns() < best.retry_after_ns()) {
                denied = Some(d);
            }
        }
        Ok((
            denied.unwrap_or_else(|| Decision::denied(u64::MAX, 0, 1)),
            home,
        ))
    }
}
