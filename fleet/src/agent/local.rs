//! The agent's local state (the share and fence applied to the limit, the lease's fence point,
//! the epoch) shared by the renewal loop and the fence watchdog, and how a share is applied.

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::config::Resolved;
use super::AgentConfig;
use crate::protocol::{Renewal, Request};
use crate::share::{self, Bucket, LocalShare};
use shmlimit::Rate;

/// The agent's local state, shared by the renewal loop and the fence watchdog.
pub(super) struct Local {
    /// The share applied to the limit (units).
    pub(super) applied: u64,
    /// The fence in the file (units): what decisions use once the lease deadline has passed.
    pub(super) fence: u64,
    /// When this agent received its first answer in `epoch` (its own monotonic clock): one lease
    /// later, every lease of an earlier state has ended on its holder, and the agent opens the
    /// epoch to new grants (see docs/fleet.md).
    pub(super) epoch_seen: Option<Instant>,
    /// Fence at this instant unless a renewal succeeds before (None: nothing to fence).
    pub(super) fence_at: Option<Instant>,
    /// The epoch of the last grant.
    pub(super) epoch: String,
    /// The last renewal's answer.
    pub(super) last: Option<Renewal>,
}

/// One snapshot of an agent, for observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSnapshot {
    /// Share applied locally (units).
    pub applied: u64,
    /// Whether a renewal is pending fence (false once fenced or before the first grant).
    pub leased: bool,
    /// The last renewal's answer.
    pub last: Option<Renewal>,
}

pub(super) struct Shared {
    pub(super) cfg: AgentConfig,
    pub(super) res: Resolved,
    pub(super) limit: Bucket,
    pub(super) instance: String,
    pub(super) local: Mutex<Local>,
    /// Why the agent cannot go on (the server refused its configuration or its member id).
    pub(super) fatal: Mutex<Option<String>>,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn local_share(&self, units: u64) -> LocalShare {
        LocalShare::of(units, self.res.total, self.res.burst)
    }

    /// Apply `units` to the limit (with the lock held) and log the change.
    ///
    /// The fence (what decisions use past the lease) follows `min(reserved minimum, share)`:
    /// the part of the minimum the server holds for this member (a record keeps
    /// `min(grant, minimum)` once its lease ends, and its grant is never below the share
    /// applied). It is lowered before the share and raised after it.
    pub(super) fn apply(&self, l: &mut Local, units: u64, reason: &str) -> bool {
        let fence = self.res.min.min(units);
        if fence < l.fence && !self.set_fence(l, fence) {
            return false;
        }
        let new = self.local_share(units);
        let live = self.limit.as_limit().live_algorithm().ok();
        let holds = live
            == Some(shmlimit::Algorithm::TokenBucket {
                capacity: new.capacity,
                emission_ns: new.emission_ns,
            });
        if l.applied == units && holds {
            return fence <= l.fence || self.set_fence(l, fence);
        }
        // Someone else retuned the limit (another agent or an operator): put the share back.
        let reason = if l.applied == units { "repair" } else { reason };
        let old = self.local_share(l.applied);
        match new.apply(&self.limit) {
            Ok(()) => {
                log_change(&self.cfg, &old, &new, reason, l.last.as_ref());
                l.applied = units;
                fence <= l.fence || self.set_fence(l, fence)
            }
            Err(e) => {
                eprintln!(
                    "fleet[{}/{}] cannot apply share {}: {e}",
                    self.cfg.fleet, self.cfg.member, new
                );
                false
            }
        }
    }

    /// Set the fence bucket to `units`.
    pub(super) fn set_fence(&self, l: &mut Local, units: u64) -> bool {
        let f = self.local_share(units);
        match Rate::from_emission_ns(f.emission_ns)
            .and_then(|r| self.limit.fleet_manage(f.capacity, r))
        {
            Ok(()) => {
                l.fence = units;
                true
            }
            Err(e) => {
                eprintln!(
                    "fleet[{}/{}] cannot set the fence to {f}: {e}",
                    self.cfg.fleet, self.cfg.member
                );
                false
            }
        }
    }

    /// Write the lease deadline (ns on the file's clock) next to the share.
    pub(super) fn set_deadline(&self, deadline_ns: u64) -> bool {
        match self.limit.set_fleet_deadline(deadline_ns) {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "fleet[{}/{}] cannot write the lease deadline: {e}",
                    self.cfg.fleet, self.cfg.member
                );
                false
            }
        }
    }

    pub(super) fn request<'a>(
        &'a self,
        held: u64,
        epoch: &'a str,
        demand: u64,
        opens: bool,
    ) -> Request<'a> {
        Request {
            fleet: &self.cfg.fleet,
            member: &self.cfg.member,
            weight: self.res.weight,
            min: self.res.min,
            held,
            ttl: self.cfg.ttl,
            total: self.res.total,
            epoch,
            instance: &self.instance,
            demand,
            opens,
        }
    }
}

/// Monotonic nanoseconds (the clock the limiter decides on).
pub(super) fn mono_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64);
    ts.unwrap_or(0)
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn log_change(
    cfg: &AgentConfig,
    old: &LocalShare,
    new: &LocalShare,
    reason: &str,
    last: Option<&Renewal>,
) {
    let (target, live) = last.map(|r| (r.target, r.live)).unwrap_or((0, 0));
    eprintln!(
        "fleet[{}/{}] share {} -> {} reason={} target={} live={} mono_ns={} wall_ms={}",
        cfg.fleet,
        cfg.member,
        old,
        new,
        reason,
        share::fmt_units(target),
        live,
        mono_ns(),
        wall_ms()
    );
}
