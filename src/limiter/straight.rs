//! The straight path of the common decision: [`Site::try_acquire`] on an unkeyed bucket or
//! window decides inline from this thread's hot entry when everything it needs is there, and
//! otherwise, having written nothing, decides again from scratch out of line
//! (`Site::run`, in [`super::run`]).

use crate::engine::bucket::Bucket;
use crate::engine::site::Site;

use crate::algo::Decision;
use crate::clock::Clock;
use crate::error::Result;

impl<C: Clock> Site<C> {
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
            return Bucket(self).try_acquire_bucket(cost);
        }
        if self.plain_window {
            return crate::engine::window::Window(self).try_acquire(cost);
        }
        self.run(cost, true, None)
    }

    /// The decision of [`Site::try_acquire_again`], copied ([`Decision::relocated`]).
    #[inline(always)]
    pub(crate) fn try_acquire_slow(&self, cost: u64) -> Result<Decision> {
        match self.try_acquire_again(cost) {
            Ok(d) => Ok(d.relocated()),
            Err(e) => Err(e),
        }
    }

    /// [`Site::try_acquire`] when `Bucket::bucket_fast` did not decide, from scratch.
    #[cold]
    #[inline(never)]
    fn try_acquire_again(&self, cost: u64) -> Result<Decision> {
        self.run(cost, true, None)
    }
}
