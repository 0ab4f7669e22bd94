//! The host agent: one per host, beside the workers. It renews the host's lease, applies the
//! granted share to the local limit, and fences the limit to the minimum when it cannot renew.

mod config;
mod guard;

pub use config::{default_member, host_name, AgentConfig, FleetError, DEFAULT_TTL};
use config::{resolve, Resolved};
pub use guard::{spawn_guard, Guard};

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::protocol::{self, Renewal, Request, MAX_TOTAL_UNITS};
use super::share::{self, Bucket, LocalShare};
use shmlimit::{Clock, Limiter, Rate};

/// The agent's local state, shared by the renewal loop and the fence watchdog.
struct Local {
    /// The share applied to the limit (units).
    applied: u64,
    /// The fence in the file (units): what decisions use once the lease deadline has passed.
    fence: u64,
    /// After a new epoch: the share of the lost state is kept until this instant (its own
    /// fence point), without a new deadline.
    carry_until: Option<Instant>,
    /// Fence at this instant unless a renewal succeeds before (None: nothing to fence).
    fence_at: Option<Instant>,
    /// The epoch of the last grant.
    epoch: String,
    /// The last renewal's answer.
    last: Option<Renewal>,
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

struct Shared {
    cfg: AgentConfig,
    res: Resolved,
    limit: Bucket,
    instance: String,
    local: Mutex<Local>,
    /// Why the agent cannot go on (the server refused its configuration or its member id).
    fatal: Mutex<Option<String>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn local_share(&self, units: u64) -> LocalShare {
        LocalShare::of(units, self.res.total, self.res.burst)
    }

    /// Apply `units` to the limit (with the lock held) and log the change.
    ///
    /// The fence (what decisions use past the lease) follows `min(reserved minimum, share)`:
    /// the part of the minimum the server holds for this member (a record keeps
    /// `min(grant, minimum)` once its lease ends, and its grant is never below the share
    /// applied). It is lowered before the share and raised after it.
    fn apply(&self, l: &mut Local, units: u64, reason: &str) -> bool {
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
    fn set_fence(&self, l: &mut Local, units: u64) -> bool {
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
    fn set_deadline(&self, deadline_ns: u64) -> bool {
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

    fn request<'a>(&'a self, held: u64, epoch: &'a str, demand: u64) -> Request<'a> {
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
        }
    }
}

/// Monotonic nanoseconds (the clock the limiter decides on).
fn mono_ns() -> u64 {
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

fn log_change(
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

/// A running agent (threads in this process). Dropping it leaves the fleet cleanly.
pub struct Agent {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    _guard: Option<Guard>,
    _lock: Option<std::fs::File>,
}

/// Hold `PATH.LIMIT.agent.lock` (an exclusive `flock`; the limit's name with every character
/// but ASCII letters, digits, `-` and `_` as `_`) for the agent's life: one agent per limit of a
/// file. `None` when the lock file cannot be created (a read-only directory: no protection
/// against a second agent then).
fn agent_lock(cfg: &AgentConfig) -> Result<Option<std::fs::File>, FleetError> {
    use std::os::fd::AsRawFd;
    let limit: String = cfg
        .limit
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = PathBuf::from(format!("{}.{limit}.agent.lock", cfg.path.display()));
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "fleet[{}/{}] no agent lock ({}: {e}); make sure one agent runs per file",
                cfg.fleet,
                cfg.member,
                path.display()
            );
            return Ok(None);
        }
    };
    // SAFETY: `file` is an open descriptor we own; flock has no memory preconditions.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(FleetError::Config(format!(
            "another fleet agent runs on limit `{}` of {} (it holds {})",
            cfg.limit,
            cfg.path.display(),
            path.display()
        )));
    }
    Ok(Some(file))
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
            let g = spawn_guard(&limit, floor, &cfg)?;
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
                carry_until: None,
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

/// Lower the share to the minimum when the fence instant has passed.
fn watchdog(s: &Shared, stop: &AtomicBool) {
    // Relaxed: the stop flag is only polled; the local state is under its mutex.
    while !stop.load(Ordering::Relaxed) {
        let wait = {
            let mut l = s.lock();
            match l.fence_at {
                Some(at) if Instant::now() >= at => {
                    let floor = s.res.min.min(l.applied);
                    if s.apply(&mut l, floor, "fence") {
                        l.fence_at = None;
                    }
                    Duration::from_millis(1)
                }
                Some(at) => at.saturating_duration_since(Instant::now()),
                None => Duration::from_millis(20),
            }
        };
        std::thread::sleep(wait.clamp(Duration::from_micros(200), Duration::from_millis(5)));
    }
}

fn connect(client: &redis::Client, io: Duration) -> redis::RedisResult<redis::Connection> {
    let con = client.get_connection_with_timeout(io)?;
    con.set_read_timeout(Some(io))?;
    con.set_write_timeout(Some(io))?;
    Ok(con)
}

fn renew_loop(s: &Shared, client: &redis::Client, stop: &AtomicBool) {
    let io = s.cfg.renew_every;
    let mut con: Option<redis::Connection> = None;
    let mut failing = false;
    let mut meter = Meter::default();
    // Relaxed: polled flag.
    while !stop.load(Ordering::Relaxed) {
        let tick = Instant::now();
        let again = renew_once(s, client, io, &mut con, &mut failing, &mut meter);
        if s.fatal.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            break;
        }
        if again {
            continue;
        }
        let next = tick + s.cfg.renew_every;
        // Relaxed: polled flag.
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(10)));
        }
    }
    // Leave: the minimum first, then release on the server (best effort: if the server is
    // unreachable, the grant returns when the lease expires).
    let epoch = {
        let mut l = s.lock();
        // The reserved minimum returns to the fleet with the record: share and fence at the
        // floor first (the fence before the share), and no lease.
        s.apply(&mut l, 0, "leave");
        s.set_deadline(0);
        l.fence_at = None;
        l.epoch.clone()
    };
    let con = match con.take() {
        Some(c) => Ok(c),
        None => connect(client, io),
    };
    let done = con.and_then(|mut c| protocol::leave(&mut c, &s.request(0, &epoch, 0)));
    match done {
        Ok(()) => eprintln!("fleet[{}/{}] left", s.cfg.fleet, s.cfg.member),
        Err(e) => eprintln!(
            "fleet[{}/{}] leaving: {e}; the grant returns when the lease expires",
            s.cfg.fleet, s.cfg.member
        ),
    }
}

/// One renewal. Returns true to renew again at once (a share to release, or a new epoch).
/// The host's demand on the limit: decisions per second (admitted or denied, from the file's
/// counters, all processes), in units, over the time since the previous renewal; smoothed so
/// that it rises at once and decays by half per renewal.
#[derive(Debug, Default)]
struct Meter {
    last: Option<(Instant, u64)>,
    smoothed: Option<u64>,
}

impl Meter {
    fn demand(&mut self, s: &Shared) -> u64 {
        let st = s.limit.as_limit().stats();
        let count = st.allowed.saturating_add(st.denied);
        let now = Instant::now();
        let latest = match self.last {
            Some((at, before)) if now > at => {
                let ns = (now - at).as_nanos().max(1);
                let per_s = count.saturating_sub(before) as u128
                    * protocol::UNITS_PER_TOKEN as u128
                    * 1_000_000_000
                    / ns;
                Some(per_s.min(MAX_TOTAL_UNITS as u128) as u64)
            }
            _ => None,
        };
        self.last = Some((now, count));
        self.smoothed = match (latest, self.smoothed) {
            (Some(l), Some(p)) => Some(l.max(p / 2 + l / 2)),
            (l, p) => l.or(p),
        };
        // Not known yet (the first renewal): as busy as it can be.
        self.smoothed.unwrap_or(s.res.total)
    }
}

fn renew_once(
    s: &Shared,
    client: &redis::Client,
    io: Duration,
    con: &mut Option<redis::Connection>,
    failing: &mut bool,
    meter: &mut Meter,
) -> bool {
    let (held, epoch) = {
        let l = s.lock();
        (l.applied, l.epoch.clone())
    };
    let demand = meter.demand(s);
    // The lease runs on the server from the script's execution, which comes after this instant:
    // fencing at `sent + ttl - margin` on this host's monotonic clock is before it can expire.
    let sent = Instant::now();
    // The same instant on the file's clock (the clock its decisions compare the deadline with).
    let sent_file_ns = s.limit.as_limit().clock().now_ns();
    let result = match con.as_mut() {
        Some(c) => protocol::renew(c, &s.request(held, &epoch, demand)),
        None => connect(client, io).and_then(|mut c| {
            let r = protocol::renew(&mut c, &s.request(held, &epoch, demand));
            *con = Some(c);
            r
        }),
    };
    let r = match result {
        Ok(r) => r,
        Err(e) if matches!(e.code(), Some("FLEETDUP" | "FLEETCONFIG" | "FLEETMIN")) => {
            // Refused for good: renewing again cannot help. The floor, and stop.
            let why = format!("fleet {}: {}", s.cfg.fleet, e.detail().unwrap_or("refused"));
            eprintln!("fleet[{}/{}] {why}", s.cfg.fleet, s.cfg.member);
            let mut l = s.lock();
            s.apply(&mut l, 0, "refused");
            s.set_deadline(0);
            l.fence_at = None;
            *s.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            return false;
        }
        Err(e) => {
            *con = None;
            if !*failing {
                eprintln!(
                    "fleet[{}/{}] renewal failed: {e}; keeping the share until the fence point",
                    s.cfg.fleet, s.cfg.member
                );
                *failing = true;
            }
            return false;
        }
    };
    if *failing {
        eprintln!(
            "fleet[{}/{}] renewal works again",
            s.cfg.fleet, s.cfg.member
        );
        *failing = false;
    }
    let fence_at = sent + s.cfg.fence_after();
    let mut l = s.lock();
    let new_epoch = r.epoch != l.epoch;
    l.last = Some(r.clone());
    if Instant::now() >= fence_at {
        // The answer came too late to trust the lease: at most the minimum.
        let floor = s.res.min.min(l.applied);
        s.apply(&mut l, floor, "fence");
        l.fence_at = None;
        return false;
    }
    if new_epoch && !l.epoch.is_empty() {
        eprintln!(
            "fleet[{}/{}] new epoch {} (the server lost the fleet's state); keeping share {} until its lease deadline",
            s.cfg.fleet,
            s.cfg.member,
            r.epoch,
            s.local_share(l.applied)
        );
        // The share of the lost state is kept until its own deadline, never extended: the
        // new epoch grants nothing during its quarantine (one lease from its start), and every
        // lease of the lost state ended on the server before that, so the kept share and the
        // new epoch's grants never overlap.
        l.carry_until = l.fence_at;
    }
    l.epoch = r.epoch.clone();
    // The fence never above what the server holds for this member once its lease ends.
    let held_on_server = s.res.min.min(r.granted);
    if l.fence > held_on_server && !s.set_fence(&mut l, held_on_server) {
        return false;
    }
    // Raising is covered by the grant just recorded; lowering is always safe.
    let desired = r.granted.min(r.target);
    if desired < l.applied && l.carry_until.is_some_and(|until| Instant::now() < until) {
        // Carrying the lost epoch's share: no new deadline for it; the old one fences it.
        return false;
    }
    l.carry_until = None;
    let reason = if desired > l.applied {
        "grant"
    } else if new_epoch {
        "epoch"
    } else {
        "shrink"
    };
    // The pair (share, deadline) in the file is safe at every instant: the deadline of this
    // renewal covers a share at most `granted`, so it is written after a lowering and before
    // a raise (a decision sees the old share with the new deadline only when the old share is
    // the smaller one; see FLEET.md).
    let deadline = sent_file_ns.saturating_add(s.cfg.fence_after().as_nanos() as u64);
    let applied = if desired < l.applied {
        let ok = s.apply(&mut l, desired, reason);
        ok && s.set_deadline(deadline)
    } else {
        s.set_deadline(deadline) && s.apply(&mut l, desired, reason)
    };
    l.fence_at = Some(fence_at);
    // Release a grant above the target (after lowering locally) right away.
    applied && (r.granted > desired || new_epoch)
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
