//! `demo --scenario dependency --hosts N`: the same scenario on N simulated hosts, each with its
//! own limiter file, sharing the budget through the fleet agent and a real Redis.
//!
//! Each host's `total`, `first` and `retry` buckets are its shares of three fleets (240/s
//! burst 24, 200/s burst 20, 40/s burst 4), each kept by one `shmlimit fleet run` agent per
//! host; the in-flight permits and the intake are split statically (12 / N permits, 200 / N
//! per second each). Redis is a private `redis-server` on a free loopback port unless `--redis`
//! names one. The fleet guarantees that the shares applied on the hosts never add up to more
//! than the total and that their capacities add up to at most `B + N`; with one token of GCRA
//! rounding per host, any interval `T` holds at most `B + 2 N + r T` sends over all hosts
//! (the bound `tests/fleet.rs` measures).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shmlimit::{Algorithm, Limiter};

use super::{FIRST, RETRY, TOTAL};
use crate::Failure;

/// The fleet-managed limits: (name, rate per second, burst).
pub const MANAGED: [(&str, (u64, u64)); 3] = [("total", TOTAL), ("first", FIRST), ("retry", RETRY)];
/// Lease of the agents: renewal every 300 ms, so shares converge within about a second.
const TTL_MS: u64 = 1500;

/// The running fleet: Redis (when started here) and the agents.
pub struct Fleet {
    pub url: String,
    redis: Option<Child>,
    /// Each agent and its log.
    agents: Vec<(Child, PathBuf)>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (a, _) in &self.agents {
            // SIGTERM: each agent releases its grant and exits.
            // SAFETY: kill(2) with a pid of our own child has no memory-safety preconditions.
            unsafe {
                libc::kill(a.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        for (a, _) in &mut self.agents {
            let _ = a.wait();
        }
        if let Some(r) = &mut self.redis {
            let _ = r.kill();
            let _ = r.wait();
        }
    }
}

fn ping(url: &str) -> bool {
    redis::Client::open(url)
        .ok()
        .and_then(|c| {
            c.get_connection_with_timeout(Duration::from_millis(200))
                .ok()
        })
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con).ok())
        .is_some()
}

impl Fleet {
    /// The resident memory (KiB) of each agent, and of the redis-server started here, now.
    pub fn rss_kib(&self) -> (Vec<u64>, Option<u64>) {
        let agents = self
            .agents
            .iter()
            .filter_map(|(a, _)| crate::scenario_worker::rss_kib(a.id()))
            .collect();
        let redis = self
            .redis
            .as_ref()
            .and_then(|r| crate::scenario_worker::rss_kib(r.id()));
        (agents, redis)
    }
}

/// Start a private `redis-server` on a free loopback port.
pub fn start_redis(dir: &Path) -> Result<(Child, String), Failure> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Failure::file(format!("no free loopback port for redis-server: {e}")))?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            Failure::file(format!(
                "--hosts needs Redis: cannot start redis-server ({e}); install it (Debian: redis-server) or pass --redis URL"
            ))
        })?;
    let url = format!("redis://127.0.0.1:{port}/");
    let mut child = child;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ping(&url) {
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure::file(format!(
                "redis-server on {url} did not answer"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child, url))
}

/// Start one agent per host and managed limit, and wait until the shares applied on the hosts
/// add up to their totals (or 15 s).
pub fn start(
    exe: &Path,
    dir: &Path,
    files: &[PathBuf],
    limiters: &[Limiter],
    redis: Option<&str>,
    tag: &str,
) -> Result<Fleet, Failure> {
    let (redis, url) = match redis {
        Some(url) => {
            if !ping(url) {
                return Err(Failure::file(format!("--redis {url}: no answer to PING")));
            }
            (None, url.to_owned())
        }
        None => {
            let (child, url) = start_redis(dir)?;
            (Some(child), url)
        }
    };
    let mut fleet = Fleet {
        url,
        redis,
        agents: Vec::new(),
    };
    let run_id = format!("shmlimit-scenario-{}-{tag}", std::process::id());
    for (host, file) in files.iter().enumerate() {
        for (limit, (rate, burst)) in MANAGED {
            let log = dir.join(format!("agent-{tag}-host{host}-{limit}.log"));
            let stderr = std::fs::File::create(&log)
                .map_err(|e| Failure::file(format!("{}: {e}", log.display())))?;
            let agent = Command::new(exe)
                .args(["fleet", "run", "--redis", &fleet.url])
                .args(["--fleet", &format!("{run_id}-{limit}")])
                .args(["--limit", limit])
                .args(["--total", &format!("{rate}/s")])
                .args(["--burst", &burst.to_string()])
                .args(["--member", &format!("host-{host}")])
                .args(["--ttl-ms", &TTL_MS.to_string()])
                .arg(file)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .map_err(|e| Failure::file(format!("cannot start a fleet agent: {e}")))?;
            fleet.agents.push((agent, log));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let converged = MANAGED.iter().all(|(limit, (rate, _))| {
            let sum: f64 = limiters
                .iter()
                .filter_map(|l| l.limit(limit).ok()?.live_algorithm().ok())
                .map(|a| match a {
                    Algorithm::TokenBucket { emission_ns, .. } => 1e9 / emission_ns as f64,
                    _ => 0.0,
                })
                .sum();
            sum >= *rate as f64 * 0.98
        });
        if converged {
            return Ok(fleet);
        }
        for (a, log) in &mut fleet.agents {
            if let Ok(Some(status)) = a.try_wait() {
                let err = std::fs::read_to_string(&*log).unwrap_or_default();
                return Err(Failure::file(format!(
                    "a fleet agent ended with {status}: {} (log: {})",
                    err.lines().last().unwrap_or(""),
                    log.display()
                )));
            }
        }
        if Instant::now() > deadline {
            return Err(Failure::file(
                "the fleet agents did not allocate the shares within 15 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The shares applied now on each host, per managed limit: "total 80+80+80/s".
pub fn shares(limiters: &[Limiter]) -> String {
    MANAGED
        .iter()
        .map(|(limit, _)| {
            let parts: Vec<String> = limiters
                .iter()
                .filter_map(|l| l.limit(limit).ok()?.live_algorithm().ok())
                .map(|a| match a {
                    Algorithm::TokenBucket { emission_ns, .. } => {
                        format!("{:.0}", 1e9 / emission_ns as f64)
                    }
                    _ => "?".to_owned(),
                })
                .collect();
            format!("{limit} {}/s", parts.join("+"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
