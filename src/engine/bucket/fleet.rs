//! A fleet share: a bucket whose live rate is leased by the fleet agent until a deadline, and
//! its fence, the rate that applies after the deadline.

use crate::algo::gcra::Gcra;
use crate::clock::Clock;
use crate::engine;
use crate::engine::Params;
use crate::error::Result;
use crate::file::layout::bucket;
use crate::spec::{Algorithm, Rate};
use std::sync::atomic::Ordering;

use super::Bucket;

/// The lease of a fleet-managed token bucket (see [`Limit::fleet_lease`](crate::Limit::fleet_lease) and `docs/fleet.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetLease {
    /// The share: the bucket decisions use while the lease runs.
    pub share: Algorithm,
    /// The fence: the bucket decisions use once it has passed (the reserved minimum or the
    /// floor).
    pub fence: Algorithm,
    /// The lease deadline, ns on the limit's clock (0: never leased, or reset).
    pub deadline_ns: u64,
    /// When this was read, ns on the limit's clock.
    pub now_ns: u64,
    /// Whether the deadline covered `now_ns`: the share applies; else the fence does.
    pub leased: bool,
}

impl FleetLease {
    /// The bucket a decision at `now_ns` used: the share or the fence.
    pub fn applied(&self) -> Algorithm {
        if self.leased {
            self.share
        } else {
            self.fence
        }
    }
}

impl<C: Clock> Bucket<'_, C> {
    /// Make this token bucket fleet-managed (see `docs/fleet.md`): its rate becomes a share that
    /// holds only until the lease deadline ([`TokenBucketLimit::set_fleet_deadline`](crate::TokenBucketLimit::set_fleet_deadline)); a decision past it
    /// decides with the fence bucket `fence_capacity`, `fence_rate` (the host's reserved
    /// minimum, or the floor) instead. The share is set to the fence and the deadline to 0, so
    /// the bucket starts fenced. Calling it again changes the fence (the share and deadline are
    /// then left as they are); the fence must never be above what the host may spend without a
    /// lease.
    ///
    /// The cost on each decision: one compare, one load of the deadline on the 64 bytes the
    /// decision already reads, and one compare with its `now`. Plain buckets pay nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_token_bucket`](crate::TokenBucketLimit::set_token_bucket).
    pub(crate) fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> Result<()> {
        debug_assert!(matches!(self.params, Params::TokenBucket));
        Algorithm::TokenBucket {
            capacity: fence_capacity,
            emission_ns: fence_rate.emission_ns(),
        }
        .validate(self.name())?;
        let managed = {
            let _guard = self.retune_lock()?;
            let active = engine::bucket::active(self.control_line());
            let managed = self.slot_params(bucket::PARAMS[active])?.1;
            if !managed {
                // Release: a decision that reads the deadline sees 0 (fenced) or a later one.
                self.control(bucket::DEADLINE).store(0, Ordering::Release);
            }
            engine::bucket::write_slot(
                self.control_line(),
                bucket::FENCE,
                fence_rate.emission_ns(),
                fence_capacity,
                0,
            );
            managed
        };
        if managed {
            return Ok(());
        }
        self.retune_bucket(fence_capacity, fence_rate, Some(true))
    }

    /// Set a fleet-managed bucket's lease deadline, in nanoseconds on this limit's clock (its
    /// [`Clock::now_ns`]): its share holds for decisions dated before it. A deadline more than
    /// 2^40 ns (about 18 minutes) ahead of a decision is treated as damage, and fences.
    ///
    /// Keep the pair (share, deadline) safe at every instant: extend the deadline after a share
    /// is lowered, and before a share is raised.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the bucket is not fleet-managed.
    pub(crate) fn set_fleet_deadline(&self, deadline_ns: u64) -> Result<()> {
        if !self.fleet_mark()? {
            return Err(self.refused("is not fleet-managed (see fleet_manage)"));
        }
        // Release: pairs with the decisions' Acquire load of the deadline; a share published
        // after it (a raise) is only seen with this deadline or a later one.
        self.control(bucket::DEADLINE)
            .store(deadline_ns, Ordering::Release);
        Ok(())
    }

    /// End fleet management: the current share becomes a plain rate, with no deadline.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_token_bucket`](crate::TokenBucketLimit::set_token_bucket).
    pub(crate) fn end_fleet_management(&self) -> Result<()> {
        match self.live_algorithm()? {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => self.retune_bucket(capacity, Rate::from_emission_ns(emission_ns)?, Some(false)),
            _ => Err(self.misdirected()),
        }
    }

    /// Whether this is a token bucket whose live rate is a fleet agent's share.
    pub(crate) fn is_fleet_managed(&self) -> bool {
        matches!(self.fleet_mark(), Ok(true))
    }

    /// Whether this is a token bucket whose active parameter slot carries the fleet mark (the
    /// share's slot only: the fence is not read, so a rewrite of it does not matter here).
    fn fleet_mark(&self) -> Result<bool> {
        if !matches!(self.params, Params::TokenBucket) {
            return Ok(false);
        }
        let active = engine::bucket::active(self.control_line());
        Ok(self.slot_params(bucket::PARAMS[active])?.1)
    }

    /// The fleet lease of a fleet-managed token bucket at this instant (`None` for any other
    /// limit).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`](crate::Error::CorruptState) when the parameters or the fence are
    /// damaged; [`Error::Io`](crate::Error::Io) if the fence is being rewritten and the retune
    /// lock cannot be taken (its holder stalled for 10 s).
    pub fn fleet_lease(&self) -> Result<Option<FleetLease>> {
        if !matches!(self.params, Params::TokenBucket) {
            return Ok(None);
        }
        let active = engine::bucket::active(self.control_line());
        let (g, fleet) = self.slot_params(bucket::PARAMS[active])?;
        if !fleet {
            return Ok(None);
        }
        let now = self.clock.now_ns();
        // Acquire: as a decision reads it.
        let deadline_ns = self.control(bucket::DEADLINE).load(Ordering::Acquire);
        let fence = match self.fence_params()? {
            Some(fence) => fence,
            // Being rewritten (its writer descheduled between its stores): an inspection may
            // wait for the retune lock, as management calls do, and read it whole.
            None => {
                let _locked = self.retune_lock()?;
                self.fence_locked()?
            }
        };
        let algo = |g: Gcra| Algorithm::TokenBucket {
            capacity: g.capacity,
            emission_ns: g.emission_ns,
        };
        Ok(Some(FleetLease {
            share: algo(g),
            fence: algo(fence),
            deadline_ns,
            now_ns: now,
            leased: bucket::leased(deadline_ns, now),
        }))
    }
}
