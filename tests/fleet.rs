//! Fleet budgets against a real Redis on loopback, one agent process and one worker process per
//! simulated host, each host with its own limiter file.
//!
//! One scenario (about 35 s): 3 hosts join, 3 more join, 2 leave cleanly, 2 agents are
//! SIGKILLed, Redis is stopped and restarted empty, one host is partitioned from Redis (its
//! agent talks through a TCP proxy that the test cuts) and healed. Throughout:
//!
//! - a sampler reads every host's live token bucket (`live_algorithm`) every ~2 ms: the sum of
//!   the applied shares never exceeds the total;
//! - after each change the applied shares converge to the weighted split of the full total
//!   (waited for up to `GIVE_UP`; the time it took is reported against the stated bound
//!   `CONVERGE_WITHIN`, which a heavily loaded machine can exceed, and is not asserted);
//! - workers hammer their host's limit and send each admission's date to a counting sink: over
//!   every interval `[a, b]` the admissions are at most `total x (b - a) + slack`, with
//!   `slack = burst + 2 x hosts` (the capacities the shares grant add up to at most
//!   `burst + hosts`, plus at most one token of GCRA rounding per host);
//! - a host's lease deadline in its file (from which its decisions use the fence) comes before
//!   its lease ends on the server (server `TIME`, same machine clock), and its agent logs the
//!   fence.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shmlimit::{Clock, Limit, Limiter, TokenBucket};
use shmlimit_fleet::{self as fleet, share, AgentConfig};

use sampling::*;
use servers::*;

#[path = "fleet/servers.rs"]
mod servers;

#[path = "fleet/sampling.rs"]
mod sampling;

#[path = "fleet/membership.rs"]
mod membership;

#[path = "fleet/stalls.rs"]
mod stalls;

#[path = "fleet/demand.rs"]
mod demand;

#[path = "fleet/without_redis.rs"]
mod without_redis;

#[path = "fleet/failover.rs"]
mod failover;

const FLEET: &str = "downstream";
const LIMIT: &str = "downstream";
/// The fleet total: 1000 sends per second.
const TOTAL_PER_S: u64 = 1000;
const TOTAL_UNITS: u64 = TOTAL_PER_S * 1_000_000;
/// The fleet burst, split in proportion to the shares.
const BURST: u64 = 20;
const TTL: Duration = Duration::from_millis(1500);
/// Stated convergence bound after any change: one lease to expire (kills) or one quarantine
/// (new epoch), then at most two renewals (`2 x ttl / 5`) and the release round trip; taken
/// as 4 leases for a loaded 2-core machine. Reported, not asserted: it assumes the agents run
/// every renewal period, which a 2-core machine at a load of 40 does not give them (a step of
/// 300 ms took 11 s there); what is asserted is convergence within [`GIVE_UP`].
const CONVERGE_WITHIN: Duration = Duration::from_millis(4 * 1500);
/// Weights of hosts 0..6.
const WEIGHTS: [u32; 6] = [2, 1, 1, 1, 1, 3];
const HOSTS: usize = WEIGHTS.len();
/// Minimum shares reserved for hosts 0..6 (tokens per second): host 0 keeps 50/s while fenced;
/// host 5's 30/s stays reserved after its agent is killed (until Redis loses its state).
const MINS: [u64; HOSTS] = [50, 0, 0, 0, 0, 30];
/// Workers stop by themselves after this long.
const WORKER_RUN: Duration = Duration::from_secs(90);

fn mono_ns() -> u64 {
    shmlimit::MonotonicClock.now_ns()
}

// ---------------------------------------------------------------------------------------------
// Child processes: the test binary re-executed with FLEET_CHILD set.

/// The entry point of the agent and worker child processes (not a test of its own).
#[test]
#[ignore = "child-process entry point of the fleet tests (run by them with FLEET_CHILD set)"]
fn fleet_child() {
    let Ok(role) = std::env::var("FLEET_CHILD") else {
        return;
    };
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    match role.as_str() {
        "agent" => {
            let mut cfg = AgentConfig::new(env("FLEET_REDIS"), FLEET, env("FLEET_PATH"), LIMIT)
                .with_ttl(Duration::from_millis(env("FLEET_TTL_MS").parse().unwrap()));
            cfg.member = env("FLEET_MEMBER");
            cfg.weight = Some(env("FLEET_WEIGHT").parse().unwrap());
            cfg.total = Some(shmlimit::Rate::per_second(TOTAL_PER_S).unwrap());
            cfg.burst = Some(BURST);
            let min: u64 = env("FLEET_MIN").parse().unwrap();
            if min > 0 {
                cfg.min_share = Some(shmlimit::Rate::per_second(min).unwrap());
            }
            let stop = fleet::cli::stop_on_signals();
            let code = match fleet::run(cfg, stop) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("agent: {e}");
                    3
                }
            };
            std::process::exit(code);
        }
        "worker" => {
            worker(
                Path::new(&env("FLEET_PATH")),
                Path::new(&env("FLEET_SINK")),
                env("FLEET_HOST").parse().unwrap(),
            );
            std::process::exit(0);
        }
        other => panic!("unknown child role {other}"),
    }
}

/// Hammer the host's limit; send each admission's date (the clock read it was decided at) to
/// the sink, in batches of at most 64 dates, at least every 2 ms.
fn worker(path: &Path, sink: &Path, host: u8) {
    let limiter = Limiter::open(path).unwrap();
    let limit = limiter.token_bucket(LIMIT).unwrap();
    let out = UnixDatagram::unbound().unwrap();
    let end = Instant::now() + WORKER_RUN;
    let mut batch: Vec<u8> = vec![host];
    let mut flushed = Instant::now();
    while Instant::now() < end {
        let now = limit.clock().now_ns();
        // A failed decision ends the worker (and with it its host's demand): say why, in the
        // worker's log, which a failing step of the test prints.
        let d = limit
            .try_acquire_at(1, now)
            .unwrap_or_else(|e| panic!("worker of host{host}: decision failed: {e}"));
        if d.is_allowed() {
            batch.extend_from_slice(&now.to_le_bytes());
        } else {
            std::thread::sleep(Duration::from_nanos(
                d.retry_after_ns().clamp(50_000, 500_000),
            ));
        }
        if batch.len() > 64 * 8 || (batch.len() > 1 && flushed.elapsed().as_millis() >= 2) {
            if out.send_to(&batch, sink).is_err() {
                return; // the sink is gone: the test ended
            }
            batch.truncate(1);
            flushed = Instant::now();
        }
    }
}

fn spawn_child(role: &str, vars: &[(&str, String)], log: &Path) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "fleet_child",
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("FLEET_CHILD", role)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(log).unwrap());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    // A child dies with the test's thread: a failing scenario (a panic) leaves no agent renewing
    // and no worker hammering behind it (an agent's guard then sets its host's floor and exits).
    // SAFETY: runs in the child between fork and exec, and only makes the prctl system call
    // (async-signal-safe; no allocation, no lock).
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn().unwrap()
}

/// `n` hosts' limiter files in `dir` (`host{i}.shm`), each host's limit at the floor (what a host
/// without a grant may spend): their paths, and their limits.
fn host_files(dir: &Path, n: usize) -> (Vec<PathBuf>, Vec<Limit>) {
    let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("host{i}.shm"))).collect();
    let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
    let limits = paths
        .iter()
        .map(|p| {
            Limiter::builder()
                .limit(LIMIT, TokenBucket::new(1, floor))
                .create_or_open(p)
                .unwrap()
                .limit(LIMIT)
                .unwrap()
        })
        .collect();
    (paths, limits)
}

/// Host `i`'s worker process on its file `path`, sending its admissions' dates to the sink at
/// `sink`; it logs to `dir/worker{i}.log`.
fn spawn_worker(dir: &Path, i: usize, path: &Path, sink: &Path) -> Child {
    spawn_child(
        "worker",
        &[
            ("FLEET_PATH", path.display().to_string()),
            ("FLEET_SINK", sink.display().to_string()),
            ("FLEET_HOST", i.to_string()),
        ],
        &dir.join(format!("worker{i}.log")),
    )
}

/// An agent process for the file at `path`, reaching Redis at `url` as `member` (see
/// [`fleet_child`]); it logs to `log`.
fn spawn_agent(
    url: String,
    path: &Path,
    member: String,
    weight: u32,
    ttl: Duration,
    min: u64,
    log: &Path,
) -> Child {
    spawn_child(
        "agent",
        &[
            ("FLEET_REDIS", url),
            ("FLEET_PATH", path.display().to_string()),
            ("FLEET_MEMBER", member),
            ("FLEET_WEIGHT", weight.to_string()),
            ("FLEET_TTL_MS", ttl.as_millis().to_string()),
            ("FLEET_MIN", min.to_string()),
        ],
        log,
    )
}

/// Host `i`'s agent, with its weight and minimum from [`WEIGHTS`] and [`MINS`].
fn spawn_host_agent(i: usize, url: String, path: &Path, ttl: Duration, log: &Path) -> Child {
    spawn_agent(url, path, member(i), WEIGHTS[i], ttl, MINS[i], log)
}

fn member(i: usize) -> String {
    format!("host{i}")
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

fn reap(mut child: Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The scenarios run one at a time (each starts a dozen processes on a 2-core machine).
static SCENARIO: Mutex<()> = Mutex::new(());

/// The guard's pid, from the agent's log.
fn guard_pid(log: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(pid) = text.lines().find_map(|l| {
            l.split("guard pid=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        }) {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no guard pid in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal_pid(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
}
