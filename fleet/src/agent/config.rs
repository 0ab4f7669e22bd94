//! What an agent is told and what it resolves from it: the configuration, the errors that stop
//! an agent, and the fleet total, burst, weight and minimum read from the limit's definition.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::{MAX_TOTAL_UNITS, MAX_WEIGHT};
use crate::share;
use shmlimit::{Limit, Rate};

#[cfg(doc)]
use super::{spawn_guard, status};

/// What can stop an agent.
#[derive(Debug)]
pub enum FleetError {
    /// The limiter file or the limit.
    Limiter(shmlimit::Error),
    /// Redis (only for [`status`] and for an invalid URL; the agent itself rides out outages).
    Redis(redis::RedisError),
    /// A configuration that cannot work.
    Config(String),
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::Limiter(e) => write!(f, "{e}"),
            FleetError::Redis(e) => write!(f, "redis: {e}"),
            FleetError::Config(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for FleetError {}

impl From<shmlimit::Error> for FleetError {
    fn from(e: shmlimit::Error) -> Self {
        FleetError::Limiter(e)
    }
}

impl From<redis::RedisError> for FleetError {
    fn from(e: redis::RedisError) -> Self {
        FleetError::Redis(e)
    }
}

/// The default lease.
pub const DEFAULT_TTL: Duration = Duration::from_secs(6);

/// How one host takes part in a fleet.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `redis://host:port[/db]`.
    pub redis_url: String,
    /// The fleet's name (the keys are under the hash tag `{fleet:NAME}`).
    pub fleet: String,
    /// This host's member id (unique in the fleet).
    pub member: String,
    /// The host's limiter file.
    pub path: PathBuf,
    /// The token-bucket limit in it that is this host's share.
    pub limit: String,
    /// The fleet-wide rate (`None`: the limit definition's fleet share).
    pub total: Option<Rate>,
    /// The fleet-wide burst, split among the hosts in proportion to their shares, each host at
    /// least 1 (`None`: the capacity the limit was defined with).
    pub burst: Option<u64>,
    /// This host's weight (`None`: the limit definition's fleet weight, else 1).
    pub weight: Option<u32>,
    /// A minimum share reserved for this host in the total (kept while it is fenced).
    pub min_share: Option<Rate>,
    /// The lease on the server.
    pub ttl: Duration,
    /// How often the lease is renewed (default `ttl / 5`).
    pub renew_every: Duration,
    /// The host fences this long before its lease can end on the server (default `ttl / 4`):
    /// it covers clock drift between host and server over one lease and the agent's own delay.
    pub fence_margin: Duration,
    /// Fork a guard process that sets the minimum when the agent dies (see [`spawn_guard`]).
    pub guard: bool,
}

impl AgentConfig {
    /// A configuration with the defaults: lease [`DEFAULT_TTL`], renewal every `ttl / 5`, fence
    /// margin `ttl / 4`, total, burst and weight from the limit's definition, no minimum, the
    /// member id `HOSTNAME:PATH` (unique per agent on a host: one agent per limiter file),
    /// guard on.
    pub fn new(
        redis_url: impl Into<String>,
        fleet: impl Into<String>,
        path: impl Into<PathBuf>,
        limit: impl Into<String>,
    ) -> AgentConfig {
        let path: PathBuf = path.into();
        AgentConfig {
            redis_url: redis_url.into(),
            fleet: fleet.into(),
            member: default_member(&path),
            path,
            limit: limit.into(),
            total: None,
            burst: None,
            weight: None,
            min_share: None,
            ttl: DEFAULT_TTL,
            renew_every: DEFAULT_TTL / 5,
            fence_margin: DEFAULT_TTL / 4,
            guard: true,
        }
    }

    /// Set the lease and derive the renewal period (`ttl / 5`) and fence margin (`ttl / 4`).
    pub fn with_ttl(mut self, ttl: Duration) -> AgentConfig {
        self.ttl = ttl;
        self.renew_every = ttl / 5;
        self.fence_margin = ttl / 4;
        self
    }

    /// When the host fences after sending a renewal that succeeded: `ttl - fence_margin`.
    pub fn fence_after(&self) -> Duration {
        self.ttl.saturating_sub(self.fence_margin)
    }
}

/// The default member id of the agent of the limiter file at `path`: `HOSTNAME:PATH` (the
/// absolute path when it resolves), so two agents on one host differ.
pub fn default_member(path: &std::path::Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    format!("{}:{}", host_name(), path.display())
}

/// The machine's host name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("pid-{}", std::process::id()))
}

/// What the agent resolved from its configuration and the limit definition.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    pub(super) total: u64,
    pub(super) burst: u64,
    pub(super) weight: u32,
    pub(super) min: u64,
}

pub(super) fn resolve(cfg: &AgentConfig, limit: &Limit) -> Result<Resolved, FleetError> {
    let def = limit.def();
    let conf = |s: String| FleetError::Config(format!("fleet {}: {s}", cfg.fleet));
    let total = cfg
        .total
        .or(def.fleet.map(|f| f.total))
        .ok_or_else(|| conf("no total: pass one or define the limit with a fleet share".into()))?;
    let total = share::units_of(total);
    if total == 0 || total > MAX_TOTAL_UNITS {
        return Err(conf(format!(
            "total {}: must be between 0.000001/s and {}",
            share::fmt_units(total),
            share::fmt_units(MAX_TOTAL_UNITS)
        )));
    }
    let weight = cfg.weight.or(def.fleet.map(|f| f.weight)).unwrap_or(1);
    if weight == 0 || weight > MAX_WEIGHT {
        return Err(conf(format!(
            "weight {weight}: must be in 1..={MAX_WEIGHT}"
        )));
    }
    let burst = match cfg.burst {
        Some(b) => b,
        // The capacity the file was created with (the live one is the agent's own retune).
        None => def.algorithm.capacity(),
    };
    if burst == 0 {
        return Err(conf("burst must be at least 1".into()));
    }
    let min = cfg.min_share.map(share::units_of).unwrap_or(0);
    if min > total {
        return Err(conf(format!(
            "the minimum share {} exceeds the total {}",
            share::fmt_units(min),
            share::fmt_units(total)
        )));
    }
    if cfg.ttl < Duration::from_millis(100) || cfg.ttl > Duration::from_secs(20 * 60) {
        return Err(conf(format!(
            "ttl {} ms: must be between 100 ms and 20 minutes",
            cfg.ttl.as_millis()
        )));
    }
    // The deadline written to the file must be within the longest lease a decision accepts.
    if cfg.fence_after().as_nanos() >= shmlimit::consts::MAX_FLEET_LEASE_NS as u128 {
        return Err(conf(
            "the fence point must be under 2^40 ns (18 minutes)".into(),
        ));
    }
    if cfg.renew_every.is_zero() || cfg.renew_every * 2 > cfg.fence_after() {
        return Err(conf(format!(
            "renewing every {:?} leaves fewer than two renewals before fencing at {:?}",
            cfg.renew_every,
            cfg.fence_after()
        )));
    }
    Ok(Resolved {
        total,
        burst,
        weight,
        min,
    })
}
