//! The host agent: one per host, beside the workers. It renews the host's lease, applies the
//! granted share to the local limit, and fences the limit to the minimum when it cannot renew.

//!
//! The lifecycle (start, run, leave) is here; the local state and how a share is applied in
//! `local`, the renewals in `renew`, the fence watchdog in `watchdog`, the demand meter in
//! `meter`, the one-agent-per-limit lock in `lock`.

mod config;
mod guard;
mod local;
mod lock;
mod meter;
mod renew;
mod watchdog;

use config::resolve;
pub use config::{default_member, host_name, AgentConfig, FleetError, DEFAULT_TTL};
use guard::spawn_guard_closing;
pub use guard::{spawn_guard, Guard};
pub use local::AgentSnapshot;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use local::{mono_ns, Local, Shared};
use lock::{agent_lock, AgentLock};
use renew::{connect, renew_loop};
use watchdog::watchdog;

use super::protocol;
use super::share::{self, Bucket, LocalShare};
use shmlimit::{Limiter, Rate};

/// A running agent (threads in this process). Dropping it leaves the fleet cleanly.
pub struct Agent {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    _guard: Option<Guard>,
    /// Removed on a clean exit (dropped after the threads joined and the fleet was left).
    _lock: Option<AgentLock>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("fleet", &self.shared.cfg.fleet)
            .field("member", &self.shared.cfg.member)
            .finish()
    }
}

impl Agent {
    /// Open the limit, set it to the minimum (nothing is granted yet), and start the renewal
    /// loop and the fence watchdog.
    ///
    /// # Errors
    ///
    /// [`FleetError::Limiter`] when the file or limit cannot be opened or is not a token bucket;
    /// [`FleetError::Config`] for an unusable configuration; [`FleetError::Redis`] for a bad URL
    /// (an unreachable server is not an error: the agent keeps trying, at the minimum).
    pub fn start(cfg: AgentConfig) -> Result<Agent, FleetError> {
        let limiter = Limiter::open(&cfg.path)?;
        // One agent per limit of a file: a second one would knock the first one's share down
        // before the server refuses it.
        let lock = agent_lock(&cfg)?;
        let Some(limit) = Bucket::resolve(&limiter, &cfg.limit)? else {
            return Err(FleetError::Config(format!(
                "limit `{}` is not a token bucket",
                cfg.limit
            )));
        };
        let res = resolve(&cfg, limit.as_limit())?;
        let client = redis::Client::open(cfg.redis_url.as_str())?;
        // Nothing is granted yet: the floor first, whatever the file was configured with. The
        // bucket becomes fleet-managed: every decision compares its clock read with the lease
        // deadline written below, and past it decides with the fence (the reserved minimum, or
        // the floor), however long this process or its guard stall or whether they live.
        // The fence starts at the floor too: the reserved minimum is not held for this member
        // before the server recorded a grant of it.
        let floor = LocalShare::of(0, res.total, res.burst);
        limit.fleet_manage(floor.capacity, Rate::from_emission_ns(floor.emission_ns)?)?;
        limit.set_fleet_deadline(0)?;
        floor.apply(&limit)?;
        eprintln!(
            "fleet[{}/{}] start: total={} weight={} min={} burst={} ttl={:?} renew={:?} fence_after={:?}; share {}",
            cfg.fleet,
            cfg.member,
            share::fmt_units(res.total),
            res.weight,
            share::fmt_units(res.min),
            res.burst,
            cfg.ttl,
            cfg.renew_every,
            cfg.fence_after(),
            floor
        );
        let guard = if cfg.guard {
            let g = spawn_guard_closing(&limit, floor, &cfg, lock.as_ref().map(AgentLock::fd))?;
            eprintln!(
                "fleet[{}/{}] guard pid={} agent pid={}",
                cfg.fleet,
                cfg.member,
                g.pid(),
                std::process::id()
            );
            Some(g)
        } else {
            None
        };
        let instance = format!("{:x}{:x}", std::process::id(), mono_ns());
        let shared = Arc::new(Shared {
            cfg,
            res,
            limit,
            instance,
            local: Mutex::new(Local {
                applied: 0,
                fence: 0,
                epoch_seen: None,
                fence_at: None,
                epoch: String::new(),
                last: None,
            }),
            fatal: Mutex::new(None),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        {
            let (s, st) = (shared.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("fleet-watchdog".into())
                    .spawn(move || watchdog(&s, &st))
                    .map_err(|e| FleetError::Config(format!("spawning the watchdog: {e}")))?,
            );
        }
        {
            let (s, st) = (shared.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("fleet-renew".into())
                    .spawn(move || renew_loop(&s, &client, &st))
                    .map_err(|e| FleetError::Config(format!("spawning the renewal loop: {e}")))?,
            );
        }
        Ok(Agent {
            shared,
            stop,
            threads,
            _guard: guard,
            _lock: lock,
        })
    }

    /// The agent's local view.
    pub fn snapshot(&self) -> AgentSnapshot {
        let l = self.shared.lock();
        AgentSnapshot {
            applied: l.applied,
            leased: l.fence_at.is_some(),
            last: l.last.clone(),
        }
    }

    /// Why the agent stopped renewing, if the server refused it for good: another running
    /// agent holds its member id (`FLEETDUP`), the fleet runs with another total or lease
    /// (`FLEETCONFIG`), or the reserved minimums exceed the total (`FLEETMIN`). The host is at
    /// its floor by then.
    pub fn failure(&self) -> Option<String> {
        self.shared
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Leave cleanly: the minimum locally first, then the grant released on the server.
    pub fn leave(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Run an agent until `stop` is set, then leave cleanly.
///
/// # Errors
///
/// As [`Agent::start`].
pub fn run(cfg: AgentConfig, stop: &AtomicBool) -> Result<(), FleetError> {
    let agent = Agent::start(cfg)?;
    // Relaxed: a flag polled in a loop; nothing else is published through it.
    while !stop.load(Ordering::Relaxed) {
        if let Some(why) = agent.failure() {
            agent.leave();
            return Err(FleetError::Config(why));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    agent.leave();
    Ok(())
}

/// The fleet as the server records it (see [`protocol::status`]).
///
/// # Errors
///
/// [`FleetError::Redis`] if the server cannot be reached.
pub fn status(redis_url: &str, fleet: &str) -> Result<protocol::FleetStatus, FleetError> {
    let client = redis::Client::open(redis_url)?;
    let mut con = connect(&client, Duration::from_secs(2))?;
    Ok(protocol::status(&mut con, fleet)?)
}
