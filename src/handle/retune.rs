//! The live retunes: a rate for buckets and windows, a bucket's capacity and fleet
//! management, a window's limit; keyed or not.

use super::kind::{BucketRetune, Retune, WindowRetune};
use super::Handle;
use crate::clock::Clock;
use crate::engine::bucket::Bucket;
use crate::engine::window::Window;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::spec::Rate;

/// The rate of a bucket or a window, keyed or not.
impl<K: Retune, C: Clock> Handle<K, C> {
    /// Change the rate, live: every process attached picks it up on its next decision, without
    /// reopening.
    ///
    /// A token bucket's refill rate changes. The tokens already used are carried over (the
    /// bucket's fill level in tokens is kept), so the transition never admits more than the
    /// larger of the old and new bounds over any interval. Retunes are serialised across
    /// processes by an exclusive `flock` on the file. A fleet-managed bucket stays
    /// fleet-managed: the new rate holds until its lease deadline, like the share it replaces.
    ///
    /// A window's limit changes to what `rate` means per window, rounded down (never looser),
    /// as by [`WindowLimit::set_limit`](crate::WindowLimit::set_limit).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] for a rate and capacity that do not fit (a bucket) or a bad
    /// limit (a window); [`Error::CorruptState`]; [`Error::Io`] if the retune lock cannot be
    /// taken.
    pub fn set_rate(&self, rate: Rate) -> Result<()> {
        self.limit.site().current()?.set_rate(rate)
    }
}

/// The live retunes of a token bucket, keyed or not, and fleet management.
impl<K: BucketRetune, C: Clock> Handle<K, C> {
    /// Change the capacity and the rate together, live (see [`Self::set_rate`]).
    ///
    /// # Errors
    ///
    /// As [`Self::set_rate`].
    pub fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()> {
        Bucket(self.limit.site().current()?).set_token_bucket(capacity, rate)
    }

    /// Make this bucket fleet-managed (see `docs/fleet.md`): its rate becomes a share that
    /// holds only until the lease deadline ([`Self::set_fleet_deadline`]); a decision
    /// past it decides with the fence bucket `fence_capacity`, `fence_rate` (the host's
    /// reserved minimum, or the floor) instead. The share is set to the fence and the
    /// deadline to 0, so the bucket starts fenced. Calling it again changes the fence
    /// (the share and deadline are then left as they are); the fence must never be
    /// above what the host may spend without a lease.
    ///
    /// The cost on each decision: one compare, one load of the deadline on the 64 bytes
    /// the decision already reads, and one compare with its `now`.
    ///
    /// # Errors
    ///
    /// As [`Self::set_rate`].
    pub fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> Result<()> {
        Bucket(self.limit.site().current()?).fleet_manage(fence_capacity, fence_rate)
    }

    /// Set a fleet-managed bucket's lease deadline, in nanoseconds on this limit's
    /// clock (its [`Clock::now_ns`]): its share holds for decisions dated before it. A
    /// deadline more than 2^40 ns (about 18 minutes) ahead of a decision is treated as
    /// damage, and fences.
    ///
    /// Keep the pair (share, deadline) safe at every instant: extend the deadline after
    /// a share is lowered, and before a share is raised.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the bucket is not fleet-managed.
    pub fn set_fleet_deadline(&self, deadline_ns: u64) -> Result<()> {
        Bucket(self.limit.site().current()?).set_fleet_deadline(deadline_ns)
    }

    /// End fleet management: the current share becomes a plain rate.
    ///
    /// # Errors
    ///
    /// As [`Self::set_rate`].
    pub fn end_fleet_management(&self) -> Result<()> {
        Bucket(self.limit.site().current()?).end_fleet_management()
    }

    /// The fleet lease at this instant, `None` if the bucket is not fleet-managed.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`] when the parameters or the fence are damaged.
    pub fn fleet_lease(&self) -> Result<Option<crate::limiter::FleetLease>> {
        Bucket(self.limit.site().current()?).fleet_lease()
    }
}

/// The live retune of a fixed or sliding window, keyed or not.
impl<K: WindowRetune, C: Clock> Handle<K, C> {
    /// Change the window's limit `L`, live: within the window in which it changes, at
    /// most the larger of the old and new limits is admitted.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] for a bad limit; [`Error::Io`] if the retune lock
    /// cannot be taken.
    pub fn set_limit(&self, limit: u64) -> Result<()> {
        Window(self.limit.site().current()?).set_limit(limit)
    }
}
