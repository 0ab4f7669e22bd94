//! The token bucket's operations on a [`Limit`]: reading its parameter slots (validated, a fleet
//! share's deadline applied), a live retune (slot, rescale of every state word, `ACTIVE`),
//! reset and the live parameters. The words and the protocol are [`crate::engine::bucket`]'s;
//! the decision's hot path (a thread's hot entry for a slot) stays in `limiter.rs`.

use crate::engine::bucket::Bucket;
use crate::engine::site::Site;
use crate::engine::window::Window;

use crate::clock::Clock;
use crate::engine;
use crate::error::Result;
use crate::spec::{Algorithm, Rate};

use super::RetuneGuard;

impl<C: Clock> Site<C> {
    /// The most one decision can grant under the current (possibly retuned) parameters.
    pub fn capacity(&self) -> u64 {
        match self.live_algorithm() {
            // A split bucket grants at most one sub-bucket's capacity at once.
            Ok(a) if self.split > 1 => a.capacity().div_ceil(self.split as u64),
            Ok(a) => a.capacity(),
            Err(_) => 0,
        }
    }

    /// Change the refill rate of a token bucket, live: every process attached picks it up on its
    /// next decision, without reopening.
    ///
    /// The tokens already used are carried over (the bucket's fill level in tokens is kept), so
    /// the transition never admits more than the larger of the old and new bounds over any
    /// interval. Retunes are serialised across processes by an exclusive `flock` on the file.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the limit is not a token bucket; [`Error::InvalidParameter`] for a
    /// rate and capacity that do not fit; [`Error::CorruptState`]; [`Error::Io`] if the lock
    /// cannot be taken.
    pub(crate) fn set_rate(&self, rate: Rate) -> Result<()> {
        let capacity = match self.live_algorithm()? {
            Algorithm::TokenBucket { capacity, .. } => capacity,
            _ => return Window(self).set_rate(rate),
        };
        Bucket(self).set_token_bucket(capacity, rate)
    }

    /// Return the limit's state to fresh (full bucket, empty windows, log and table, no permits),
    /// keeping its live parameters. What this grants: the whole capacity, at once.
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) if the retune lock cannot be taken.
    pub fn reset(&self) -> Result<()> {
        let _guard = self.retune_lock()?;
        crate::engine::reset::reset_limit(&self.shared.mapped, self.index);
        Ok(())
    }

    /// Hold this process's tuning mutex and an exclusive `flock` on the file.
    pub(crate) fn retune_lock(&self) -> Result<RetuneGuard<'_>> {
        self.shared.lock()
    }

    /// Retune to `algorithm` (same kind; what a live retune can change) under a held lock.
    pub(super) fn retune_to(&self, algorithm: &Algorithm, _locked: &RetuneGuard<'_>) -> Result<()> {
        match *algorithm {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => Bucket(self).retune_bucket_locked(
                capacity,
                Rate::from_emission_ns(emission_ns)?,
                None,
            ),
            Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => {
                Window(self).store_limit(limit);
                Ok(())
            }
            _ => Err(self.refused("cannot be retuned live")),
        }
    }

    /// The algorithm with its live parameters (after any [`TokenBucketLimit::set_rate`](crate::TokenBucketLimit::set_rate)).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`](crate::Error::CorruptState) when the live parameters are damaged.
    pub fn live_algorithm(&self) -> Result<Algorithm> {
        let mut a = *self.algorithm();
        match &mut a {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => {
                let g = Bucket(self).bucket_params(engine::bucket::active(self.control_line()))?;
                *capacity = g.capacity;
                *emission_ns = g.emission_ns;
            }
            Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => {
                *limit = Window(self).limit()?;
            }
            Algorithm::SlidingLog { .. }
            | Algorithm::Concurrency { .. }
            | Algorithm::AdaptiveConcurrency(_)
            | Algorithm::Counters { .. } => {}
        }
        Ok(a)
    }
}
