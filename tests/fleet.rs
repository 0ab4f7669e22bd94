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

// ---------------------------------------------------------------------------------------------
// Redis on loopback, and a TCP proxy that can be cut.

fn redis_binary() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/bin".into());
    dirs.push("/usr/local/bin".into());
    dirs.into_iter()
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Redis {
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
    /// More `redis-server` arguments (`--replicaof HOST PORT`).
    extra: Vec<String>,
    /// Its working directory: a replica writes the primary's snapshot there (`dump.rdb`), which
    /// a server started later in the same directory would load.
    dir: tempfile::TempDir,
}

impl Redis {
    fn start(bin: &Path, port: u16) -> Redis {
        Redis::start_with(bin, port, &[])
    }

    fn start_with(bin: &Path, port: u16, extra: &[&str]) -> Redis {
        let mut r = Redis {
            bin: bin.to_path_buf(),
            port,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir: tempfile::tempdir().unwrap(),
        };
        r.restart();
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn restart(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .args(&self.extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(c) = redis::Client::open(self.url()) {
                if let Ok(mut con) = c.get_connection_with_timeout(Duration::from_millis(200)) {
                    if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until the server's uptime, as the fleet's script reads it, covers `d`:
    /// `uptime_in_seconds` is a difference of whole seconds (the current one and the start's),
    /// so the script counts one second less.
    fn await_uptime(&self, d: Duration) {
        let c = redis::Client::open(self.url()).unwrap();
        let mut con = c
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        let deadline = Instant::now() + GIVE_UP;
        loop {
            let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
            let up: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("uptime_in_seconds:")?.trim().parse().ok())
                .expect("INFO server has uptime_in_seconds");
            if Duration::from_secs(up.saturating_sub(1)) >= d {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server up only {up} s after {GIVE_UP:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Proxy {
    port: u16,
    /// The server it forwards new connections to.
    upstream: Arc<std::sync::atomic::AtomicU16>,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let upstream = Arc::new(std::sync::atomic::AtomicU16::new(upstream));
        let (c2, s2, k2, u2) = (cut.clone(), stop.clone(), conns.clone(), upstream.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((down, _)) => {
                        if c2.load(Ordering::SeqCst) {
                            drop(down);
                            continue;
                        }
                        down.set_nonblocking(false).unwrap();
                        let Ok(up) = TcpStream::connect(("127.0.0.1", u2.load(Ordering::SeqCst)))
                        else {
                            continue;
                        };
                        let mut k = k2.lock().unwrap();
                        k.push(down.try_clone().unwrap());
                        k.push(up.try_clone().unwrap());
                        for (mut a, mut b) in [
                            (down.try_clone().unwrap(), up.try_clone().unwrap()),
                            (up, down),
                        ] {
                            std::thread::spawn(move || {
                                let mut buf = [0u8; 16 * 1024];
                                while let Ok(n) = a.read(&mut buf) {
                                    if n == 0 || b.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                let _ = a.shutdown(Shutdown::Both);
                                let _ = b.shutdown(Shutdown::Both);
                            });
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            upstream,
            cut,
            stop,
            conns,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The partition: close every proxied connection and refuse new ones.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// A failover as clients see it: every connection closed, new ones go to `port`.
    fn retarget(&self, port: u16) {
        self.upstream.store(port, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The sink and the sampler.

struct Sink {
    dates: Arc<Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sink {
    fn start(path: &Path) -> Sink {
        let sock = UnixDatagram::bind(path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let dates = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (d2, s2) = (dates.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !s2.load(Ordering::SeqCst) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let mut d = d2.lock().unwrap();
                    for c in buf[1..n].chunks_exact(8) {
                        d.push(u64::from_le_bytes(c.try_into().unwrap()));
                    }
                }
            }
        });
        Sink {
            dates,
            stop,
            thread: Some(thread),
        }
    }

    /// The admission dates received so far, sorted.
    fn snapshot(&self) -> Vec<u64> {
        let mut d = self.dates.lock().unwrap().clone();
        d.sort_unstable();
        d
    }

    fn finish(mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        let mut d = std::mem::take(&mut *self.dates.lock().unwrap());
        d.sort_unstable();
        d
    }
}

#[derive(Clone)]
struct Sample {
    at_ns: u64,
    shares: [u64; HOSTS],
}

impl Sample {
    fn sum(&self) -> u64 {
        self.shares.iter().sum()
    }
}

struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The scenario's Redis URL and directory, for [`diagnose`] when a step fails.
    scene: Mutex<Option<(String, PathBuf)>>,
}

/// The share a decision on `l` uses now: a fleet-managed bucket's share while its lease
/// deadline runs, its fence (minimum or floor) after; a plain bucket's live rate.
fn applied_share(l: &Limit) -> Option<u64> {
    match l.fleet_lease().ok()? {
        Some(lease) => share::applied_units(&lease.applied()),
        None => share::applied_units(&l.live_algorithm().ok()?),
    }
}

fn read_shares(limits: &[Limit]) -> Option<[u64; HOSTS]> {
    let mut s = [0u64; HOSTS];
    for (i, l) in limits.iter().enumerate() {
        s[i] = applied_share(l)?;
    }
    Some(s)
}

impl Sampler {
    fn start(limits: Vec<Limit>) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (d2, s2) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                // Two passes that agree: every host held its value from the end of the first
                // pass to the start of the second, so the pass is a snapshot at that instant
                // (a change and its undo within the ~20 us between would need two Redis round
                // trips, which do not fit).
                for _ in 0..100 {
                    let (Some(a), at, Some(b)) =
                        (read_shares(&limits), mono_ns(), read_shares(&limits))
                    else {
                        continue;
                    };
                    if a == b {
                        d2.lock().unwrap().push(Sample {
                            at_ns: at,
                            shares: a,
                        });
                        break;
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Sampler {
            samples,
            stop,
            thread: Some(thread),
            scene: Mutex::new(None),
        }
    }

    /// Name the scenario's Redis and directory, so that a failing step can explain itself.
    fn scene(&self, url: String, dir: &Path) {
        *self.scene.lock().unwrap() = Some((url, dir.to_path_buf()));
    }

    fn diagnose(&self) -> String {
        match &*self.scene.lock().unwrap() {
            Some((url, dir)) => diagnose(url, dir),
            None => String::new(),
        }
    }

    fn since(&self, t_ns: u64) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.at_ns >= t_ns)
            .cloned()
            .collect()
    }

    fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

/// The split among `live` as the script computes it: each host's minimum, plus the weighted
/// share (rounded down) of what the minimums of the live and of the `reserved` (dead, minimum
/// kept) hosts leave.
fn expected(live: &[usize], reserved: &[usize]) -> [u64; HOSTS] {
    let w: u64 = live.iter().map(|&i| WEIGHTS[i] as u64).sum();
    let mins: u64 = live
        .iter()
        .chain(reserved)
        .map(|&i| MINS[i] * 1_000_000)
        .sum();
    let avail = TOTAL_UNITS - mins;
    let mut e = [0u64; HOSTS];
    for &i in live {
        e[i] = MINS[i] * 1_000_000 + avail * WEIGHTS[i] as u64 / w;
    }
    e
}

/// Within 0.1% of the expected split on every host (the local rate is the share rounded down
/// to a whole emission interval in ns).
fn converged(s: &Sample, e: &[u64; HOSTS]) -> bool {
    s.shares
        .iter()
        .zip(e)
        .all(|(&a, &x)| a <= x && x - a <= TOTAL_UNITS / 1000)
}

struct Transition {
    name: String,
    converge_ms: f64,
    /// Mean of applied / total from the change to convergence.
    utilization: f64,
}

/// Print a scenario's transitions (`fleet: figure: NAME | ms | utilization`) and how long it
/// took: the lines the figures of docs/fleet.md are read from.
fn print_figures(scenario: &str, transitions: &[Transition], t0: Instant) {
    for t in transitions {
        println!(
            "fleet: figure: {} | {:.0} ms | {:.1}%",
            t.name,
            t.converge_ms,
            t.utilization * 100.0
        );
    }
    let scenario = if scenario.is_empty() {
        String::new()
    } else {
        format!("{scenario} ")
    };
    println!(
        "fleet: {scenario}scenario took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Shares in tokens per second, for messages.
fn fmt_shares(s: &[u64; HOSTS]) -> String {
    let v: Vec<String> = s.iter().map(|&u| share::fmt_units(u)).collect();
    format!("[{}]", v.join(", "))
}

/// What a failed step needs to be understood: the server's view of the fleet (each member's
/// reported demand, target, grant and applied share), what each agent logged last (its share
/// changes with their reasons), and anything a worker wrote (a worker writes only when its
/// decisions fail, and then it has stopped: its host's demand falls to nothing).
fn diagnose(url: &str, dir: &Path) -> String {
    let mut out = String::from("\n--- server's view\n");
    match fleet::status(url, FLEET) {
        Ok(st) => out.push_str(&fleet::cli::status_table(&st)),
        Err(e) => out.push_str(&format!("(unavailable: {e})\n")),
    }
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    logs.retain(|p| p.extension().is_some_and(|x| x == "log"));
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let name = log.file_name().unwrap().to_string_lossy().into_owned();
        let keep = if name.starts_with("agent") { 4 } else { 10 };
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            continue;
        }
        out.push_str(&format!("--- {name} (last {keep} lines)\n"));
        for l in &lines[lines.len().saturating_sub(keep)..] {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Every worker still running (a worker stops early only when a decision failed).
fn assert_workers_run(workers: &mut [Child], sampler: &Sampler) {
    for (i, w) in workers.iter_mut().enumerate() {
        if let Some(status) = w.try_wait().unwrap() {
            panic!("worker {i} exited early ({status}){}", sampler.diagnose());
        }
    }
}

/// How long a step waits for the split before it gives up: far beyond any stated bound, so
/// that a failure says whether the split came late (the bound is then asserted) or never.
const GIVE_UP: Duration = Duration::from_secs(30);

/// Wait (bounded) until the applied shares match `live`'s split; record the time it took.
fn await_split(
    sampler: &Sampler,
    since_ns: u64,
    (live, reserved): (&[usize], &[usize]),
    name: &str,
    out: &mut Vec<Transition>,
) {
    await_shares(
        sampler,
        since_ns,
        expected(live, reserved),
        CONVERGE_WITHIN,
        name,
        out,
    )
}

/// Wait (up to [`GIVE_UP`]) until the applied shares are `e` (within 0.1%), and report the time
/// it took against the stated bound `within`; a failure shows the shares observed and
/// [`diagnose`]'s report.
fn await_shares(
    sampler: &Sampler,
    since_ns: u64,
    e: [u64; HOSTS],
    within: Duration,
    name: &str,
    out: &mut Vec<Transition>,
) {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        let samples = sampler.since(since_ns);
        if let Some(pos) = samples.iter().position(|s| converged(s, &e)) {
            let at = samples[pos].at_ns;
            let ms = (at - since_ns) as f64 / 1e6;
            let upto = &samples[..=pos];
            let util = upto
                .iter()
                .map(|s| s.sum() as f64 / TOTAL_UNITS as f64)
                .sum::<f64>()
                / upto.len() as f64;
            let over = if Duration::from_nanos(at - since_ns) > within {
                format!(" (beyond the stated bound {within:?}: a loaded machine)")
            } else {
                String::new()
            };
            println!(
                "fleet: {name}: converged in {ms:.0} ms, mean utilization {:.1}%{over}",
                util * 100.0
            );
            out.push(Transition {
                name: name.into(),
                converge_ms: ms,
                utilization: util,
            });
            return;
        }
        if Instant::now() > deadline {
            let last = samples
                .last()
                .map_or("none".into(), |s| fmt_shares(&s.shares));
            panic!(
                "{name}: no convergence to {} within {:?} (stated bound {within:?}); last applied shares {last}{}",
                fmt_shares(&e),
                GIVE_UP,
                sampler.diagnose()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hold(d: Duration) {
    std::thread::sleep(d);
}

fn status(url: &str) -> fleet::FleetStatus {
    fleet::status(url, FLEET).unwrap()
}

/// The wall times (ms) at which an agent logged a fence.
fn fences(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("reason=fence"))
        .filter_map(|l| l.split("wall_ms=").nth(1)?.trim().parse().ok())
        .collect()
}

/// The wall times (ms) of the fences `log` holds beyond its first `before`, once there is one
/// (the watchdog logs its fence when it runs, which on a loaded machine can be well after the
/// data plane fenced at the deadline: polled, up to [`GIVE_UP`]).
fn await_fence_log(log: &Path, before: usize, who: &str, sampler: &Sampler) -> Vec<u64> {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        let f = fences(log);
        if f.len() > before {
            return f[before..].to_vec();
        }
        assert!(
            Instant::now() < deadline,
            "{who} logged no fence within {GIVE_UP:?}{}",
            sampler.diagnose()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The wall time (ms; this machine's clock, which the local server's `TIME` reads too) of a
/// fleet-managed limit's lease deadline, the instant from which its decisions use the fence
/// (a monotonic instant on the file's clock, converted through this instant's pair).
fn deadline_wall_ms(l: &Limit) -> u64 {
    let lease = l.fleet_lease().unwrap().expect("a fleet-managed limit");
    let wall_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    let wall = wall_now - (lease.now_ns as i128 - lease.deadline_ns as i128);
    (wall / 1_000_000) as u64
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

/// Poll the status until `killed` members' leases have ended; return the last lease expiry seen
/// for each (server ms) and check on every poll that the survivors never held the killed
/// members' grants before those leases ended.
fn watch_kill(url: &str, killed: &[usize]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut expiry = 0u64;
    let mut killed_grants = None;
    loop {
        let st = status(url);
        assert!(
            st.granted() <= st.total,
            "server grants {} > total",
            st.granted()
        );
        let dead: Vec<_> = st
            .members
            .iter()
            .filter(|m| killed.iter().any(|&k| m.id == member(k)) && m.live)
            .collect();
        if killed_grants.is_none() {
            killed_grants = Some(dead.iter().map(|m| m.granted).sum::<u64>());
        }
        for m in &dead {
            expiry = expiry.max(m.lease_expiry_ms);
        }
        let survivors: u64 = st
            .members
            .iter()
            .filter(|m| m.live && !killed.iter().any(|&k| m.id == member(k)))
            .map(|m| m.granted)
            .sum();
        if !dead.is_empty() {
            // While a killed member's lease runs, its grant is not handed out.
            assert!(survivors + dead.iter().map(|m| m.granted).sum::<u64>() <= st.total);
        }
        if dead.is_empty() {
            if survivors > st.total - killed_grants.unwrap() {
                assert!(
                    st.server_now_ms > expiry,
                    "a killed member's grant was reused before its lease ended"
                );
            }
            return expiry;
        }
        assert!(
            Instant::now() < deadline,
            "killed members' leases never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------

/// The `redis-server` binary; a test that needs it and runs without it fails (it is ignored by
/// default, so it only runs when asked to: `--include-ignored`, as `.ci/run` does).
fn need_redis() -> PathBuf {
    redis_binary().expect(
        "redis-server not found: install it (apt-get install redis-server) to run the fleet tests",
    )
}

/// The scenarios run one at a time (each starts a dozen processes on a 2-core machine).
static SCENARIO: Mutex<()> = Mutex::new(());

#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_budgets() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut redis = Redis::start(&bin, free_port());
    let proxy = Proxy::start(redis.port);
    let sink = Sink::start(&dir.path().join("sink.sock"));

    // Each host's file starts at the floor (what a host without a grant may spend).
    let paths: Vec<PathBuf> = (0..HOSTS)
        .map(|i| dir.path().join(format!("host{i}.shm")))
        .collect();
    let mut limiters = Vec::new();
    for p in &paths {
        let l = Limiter::builder()
            .limit(
                LIMIT,
                TokenBucket::new(
                    1,
                    shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap(),
                ),
            )
            .create_or_open(p)
            .unwrap();
        limiters.push(l.limit(LIMIT).unwrap());
    }
    let sampler = Sampler::start(limiters.clone());
    sampler.scene(redis.url(), dir.path());
    let mut workers: Vec<Child> = (0..HOSTS)
        .map(|i| {
            spawn_child(
                "worker",
                &[
                    ("FLEET_PATH", paths[i].display().to_string()),
                    (
                        "FLEET_SINK",
                        dir.path().join("sink.sock").display().to_string(),
                    ),
                    ("FLEET_HOST", i.to_string()),
                ],
                &dir.path().join(format!("worker{i}.log")),
            )
        })
        .collect();
    let logs: Vec<PathBuf> = (0..HOSTS)
        .map(|i| dir.path().join(format!("agent{i}.log")))
        .collect();
    // Host 1 talks to Redis through the proxy; the others directly.
    let url_of = |i: usize| if i == 1 { proxy.url() } else { redis.url() };
    let agent = |i: usize, url: String| {
        spawn_child(
            "agent",
            &[
                ("FLEET_REDIS", url),
                ("FLEET_PATH", paths[i].display().to_string()),
                ("FLEET_MEMBER", member(i)),
                ("FLEET_WEIGHT", WEIGHTS[i].to_string()),
                ("FLEET_TTL_MS", TTL.as_millis().to_string()),
                ("FLEET_MIN", MINS[i].to_string()),
            ],
            &logs[i],
        )
    };
    let mut agents: HashMap<usize, Child> = HashMap::new();
    let mut transitions = Vec::new();

    // 3 hosts (the first epoch starts with one lease of quarantine).
    let t = mono_ns();
    for i in 0..3 {
        agents.insert(i, agent(i, url_of(i)));
    }
    await_split(
        &sampler,
        t,
        (&[0, 1, 2], &[]),
        "start, 3 hosts (incl. first-epoch quarantine)",
        &mut transitions,
    );
    print!("{}", fleet::cli::status_table(&status(&redis.url())));
    hold(Duration::from_millis(500));

    // 6 hosts: the three others shrink first, the newcomers grow into what they release.
    let t = mono_ns();
    for i in 3..6 {
        agents.insert(i, agent(i, url_of(i)));
    }
    await_split(
        &sampler,
        t,
        (&[0, 1, 2, 3, 4, 5], &[]),
        "3 -> 6 hosts (joins)",
        &mut transitions,
    );
    print!("{}", fleet::cli::status_table(&status(&redis.url())));
    hold(Duration::from_millis(500));

    // Two clean leaves.
    let t = mono_ns();
    for i in [3, 4] {
        signal(&agents[&i], nix::sys::signal::Signal::SIGTERM);
    }
    for i in [3, 4] {
        assert!(reap(agents.remove(&i).unwrap(), Duration::from_secs(5)).success());
    }
    await_split(
        &sampler,
        t,
        (&[0, 1, 2, 5], &[]),
        "6 -> 4 hosts (clean leaves)",
        &mut transitions,
    );
    hold(Duration::from_millis(300));

    // Two agents SIGKILLed (their workers go on; the guards set the floor); their grants return
    // only when their leases end.
    let t = mono_ns();
    for i in [2, 5] {
        let a = agents.remove(&i).unwrap();
        signal(&a, nix::sys::signal::Signal::SIGKILL);
        reap(a, Duration::from_secs(5));
    }
    watch_kill(&redis.url(), &[2, 5]);
    await_split(
        &sampler,
        t,
        (&[0, 1], &[5]),
        "4 -> 2 hosts (agents SIGKILLed)",
        &mut transitions,
    );
    print!("{}", fleet::cli::status_table(&status(&redis.url())));
    hold(Duration::from_millis(300));

    // Redis stopped for longer than the fence point, then restarted empty. Writes are paused
    // first, so that the leases read are the last ones the server granted.
    {
        let c = redis::Client::open(redis.url()).unwrap();
        let mut con = c
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(60_000)
            .arg("WRITE")
            .query::<()>(&mut con)
            .unwrap();
    }
    let final_leases = status(&redis.url());
    let leases: Vec<u64> = [0, 1]
        .iter()
        .map(|&i| {
            final_leases
                .members
                .iter()
                .find(|m| m.id == member(i))
                .unwrap()
                .lease_expiry_ms
        })
        .collect();
    let fenced_before: Vec<usize> = [0, 1].iter().map(|&i| fences(&logs[i]).len()).collect();
    redis.stop();
    let stopped = mono_ns();
    // Both hosts fence: wait (bounded) until both are at the floor.
    let deadline = Instant::now() + GIVE_UP;
    while !sampler
        .since(stopped)
        .iter()
        .any(|s| s.shares == [MINS[0] * 1_000_000, 0, 0, 0, 0, 0])
    {
        assert!(
            Instant::now() < deadline,
            "hosts did not fence while Redis was down{}",
            sampler.diagnose()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What decides is the deadline in the file (every decision compares it with its clock
    // read): it must come before the lease's end on the server. The agent's watchdog logs its
    // fence too (for operators), when it runs.
    for i in [0, 1] {
        let d = deadline_wall_ms(&limiters[i]);
        assert!(
            d < leases[i],
            "host{i}'s lease deadline {d} is not before its lease's end on the server {}",
            leases[i]
        );
        let logged = *await_fence_log(&logs[i], fenced_before[i], &member(i), &sampler)
            .last()
            .unwrap();
        println!(
            "fleet: redis down: host{i} fenced {} ms before its lease ended (its agent logged the fence {} ms before)",
            leases[i] as i64 - d as i64,
            leases[i] as i64 - logged as i64
        );
    }
    hold(Duration::from_millis(500));
    let t = mono_ns();
    redis.restart();
    await_split(
        &sampler,
        t,
        (&[0, 1], &[]),
        "Redis restarted empty (new epoch, one lease of quarantine)",
        &mut transitions,
    );

    // Host 1 partitioned: it fences before its lease ends; host 0 then takes the whole total.
    let before = fences(&logs[1]).len();
    let t = mono_ns();
    proxy.cut();
    let lease1 = {
        // The lease it renewed last before the cut (no renewal can pass the proxy any more).
        std::thread::sleep(Duration::from_millis(50));
        status(&redis.url())
            .members
            .iter()
            .find(|m| m.id == member(1))
            .unwrap()
            .lease_expiry_ms
    };
    await_split(
        &sampler,
        t,
        (&[0], &[]),
        "2 -> 1 host (host1 partitioned)",
        &mut transitions,
    );
    let d = deadline_wall_ms(&limiters[1]);
    assert!(
        d < lease1,
        "host1's lease deadline {d} is not before its lease's end on the server {lease1}"
    );
    let logged = await_fence_log(&logs[1], before, "host1", &sampler)[0];
    println!(
        "fleet: partition: host1 fenced {} ms before its lease ended (its agent logged the fence {} ms before)",
        lease1 as i64 - d as i64,
        lease1 as i64 - logged as i64
    );
    hold(Duration::from_millis(300));
    let t = mono_ns();
    proxy.heal();
    await_split(
        &sampler,
        t,
        (&[0, 1], &[]),
        "1 -> 2 hosts (partition healed)",
        &mut transitions,
    );
    print!("{}", fleet::cli::status_table(&status(&redis.url())));
    hold(Duration::from_millis(300));

    // Redis restarted at once, empty (a crash and restart without persistence): the hosts keep
    // their shares until their own deadlines (the new epoch's quarantine covers them), then
    // hold the floor until the quarantine ends, then grow.
    let old_epoch = status(&redis.url()).epoch;
    let t = mono_ns();
    redis.stop();
    redis.restart();
    // Until the new epoch granted the whole total (bounded).
    let deadline = Instant::now() + GIVE_UP;
    loop {
        let st = status(&redis.url());
        if st.epoch != old_epoch && st.granted() >= TOTAL_UNITS - TOTAL_UNITS / 1000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new epoch did not grant the total within {GIVE_UP:?}{}",
            sampler.diagnose()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let granted_at = mono_ns();
    let e = expected(&[0, 1], &[]);
    // Until the hosts apply the split: a sample at it taken after the grant and after the last
    // one under 10% of the total (polled: the sampler may lag on a loaded machine).
    let give_up = Instant::now() + GIVE_UP;
    let during = loop {
        let during = sampler.since(t);
        let last_low = during
            .iter()
            .filter(|s| s.sum() < TOTAL_UNITS / 10)
            .map(|s| s.at_ns)
            .max()
            .unwrap_or(0);
        if during
            .iter()
            .any(|s| s.at_ns > last_low && s.at_ns >= granted_at && converged(s, &e))
        {
            break during;
        }
        assert!(
            Instant::now() < give_up,
            "quick restart: no convergence to {} within {GIVE_UP:?} of the new epoch's grant; last applied shares {}{}",
            fmt_shares(&e),
            during.last().map_or("none".into(), |s| fmt_shares(&s.shares)),
            sampler.diagnose()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let low: Vec<&Sample> = during
        .iter()
        .filter(|s| s.sum() < TOTAL_UNITS / 10)
        .collect();
    let (kept_ms, at_floor_ms, back_ms) = match (low.first(), low.last()) {
        (Some(a), Some(b)) => {
            let back = during
                .iter()
                .find(|s| s.at_ns > b.at_ns && converged(s, &e))
                .expect("no convergence after the quick restart");
            (
                (a.at_ns - t) as f64 / 1e6,
                (b.at_ns - a.at_ns) as f64 / 1e6,
                (back.at_ns - t) as f64 / 1e6,
            )
        }
        _ => (f64::NAN, 0.0, 0.0),
    };
    if low.is_empty() {
        println!("fleet: quick restart: the applied shares never went under 10% of the total");
    } else {
        println!(
        "fleet: quick restart: shares kept {kept_ms:.0} ms after the restart began, then under 10% of the total for {at_floor_ms:.0} ms, back at the split {back_ms:.0} ms after it{}",
        if back_ms > CONVERGE_WITHIN.as_secs_f64() * 1e3 {
            format!(" (beyond the stated bound {CONVERGE_WITHIN:?}: a loaded machine)")
        } else {
            String::new()
        }
    );
    }
    // The CLI's status subcommand on the same fleet.
    let status_cmd = fleet::cli::FleetArgs {
        command: fleet::cli::FleetCommand::Status(fleet::cli::StatusArgs {
            redis: redis.url(),
            fleet: FLEET.into(),
            json: true,
        }),
    };
    assert_eq!(fleet::cli::run_cli(status_cmd), 0);

    // Clean end: agents leave, workers stop, the sink and the sampler are read.
    for (_, a) in agents.drain() {
        signal(&a, nix::sys::signal::Signal::SIGTERM);
        assert!(reap(a, Duration::from_secs(5)).success());
    }
    assert!(
        status(&redis.url()).members.is_empty(),
        "members left behind"
    );
    hold(Duration::from_millis(50));
    assert_workers_run(&mut workers, &sampler);
    for w in workers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(w.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        reap(w, Duration::from_secs(5));
    }
    let samples = sampler.finish();
    let dates = sink.finish();
    drop(proxy);
    redis.stop();

    // 1. The applied shares never added up to more than the total.
    let max = samples.iter().map(Sample::sum).max().unwrap();
    println!(
        "fleet: {} snapshots of the applied shares; max sum {} of total {}",
        samples.len(),
        share::fmt_units(max),
        share::fmt_units(TOTAL_UNITS)
    );
    for s in &samples {
        assert!(
            s.sum() <= TOTAL_UNITS,
            "applied shares {:?} add up to more than the total",
            s.shares
        );
    }
    // 2. No interval over-admitted at the sink: with f(k) = k - total x t_k, admissions in
    // [t_i, t_j] exceed total x (t_j - t_i) by f(j) - f(i) + 1.
    let slack = (BURST + 2 * HOSTS as u64) as f64;
    let worst = worst_excess(&dates);
    let span = (dates.last().unwrap() - dates[0]) as f64 / 1e9;
    println!(
        "fleet: sink: {} admissions over {span:.1} s ({:.0}/s on average, total {TOTAL_PER_S}/s); worst interval excess over total x T: {worst:.1} (bound {slack})",
        dates.len(),
        dates.len() as f64 / span
    );
    assert!(
        worst <= slack,
        "over-admission: {worst} > {slack} above total x T"
    );
    print_figures("", &transitions, t0);
}

/// The most any interval `[t_i, t_j]` of the sorted admission dates exceeds `total x (t_j -
/// t_i)` by: with `f(k) = k - total x t_k`, admissions in `[t_i, t_j]` are `f(j) - f(i) + 1`
/// above it. Every interval is checked (every admission is a sample).
fn worst_excess(dates: &[u64]) -> f64 {
    let emission = 1e9 / TOTAL_PER_S as f64;
    let mut min_f = f64::INFINITY;
    let mut worst = f64::NEG_INFINITY;
    for (k, &t) in dates.iter().enumerate() {
        let f = k as f64 - (t - dates[0]) as f64 / emission;
        min_f = min_f.min(f);
        worst = worst.max(f - min_f + 1.0);
    }
    worst
}

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

/// Stalls and deaths that no process can fence by itself: the data plane does (each decision
/// compares its clock read with the lease deadline in the file). Three hosts (weights 2, 1, 1,
/// host 0 with a 50/s minimum), total 1000/s, lease 1.5 s, one worker per host hammering its
/// limit into the counting sink:
///
/// 1. host 1's agent SIGSTOPped for 4 s (its guard alive: nothing notices);
/// 2. host 2's agent and guard SIGSTOPped together for 4 s, then both resumed;
/// 3. host 1's agent and guard SIGKILLed together (a process-group or container kill).
///
/// On every sample the shares that decisions use add up to at most the total; at the sink,
/// every interval stays within `total x T + burst + 2 x hosts`; the stalled or dead host's
/// applied share is at its fence from its deadline on, and the others take its share once its
/// lease ended on the server.
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_stalls_are_fenced_in_the_data_plane() {
    use nix::sys::signal::Signal;
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let redis = Redis::start(&bin, free_port());
    let sink = Sink::start(&dir.path().join("sink.sock"));
    let paths: Vec<PathBuf> = (0..HOSTS)
        .map(|i| dir.path().join(format!("host{i}.shm")))
        .collect();
    let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
    let limits: Vec<Limit> = paths
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
    let sampler = Sampler::start(limits.clone());
    sampler.scene(redis.url(), dir.path());
    const N: usize = 3;
    let mut workers: Vec<Child> = (0..N)
        .map(|i| {
            spawn_child(
                "worker",
                &[
                    ("FLEET_PATH", paths[i].display().to_string()),
                    (
                        "FLEET_SINK",
                        dir.path().join("sink.sock").display().to_string(),
                    ),
                    ("FLEET_HOST", i.to_string()),
                ],
                &dir.path().join(format!("worker{i}.log")),
            )
        })
        .collect();
    let logs: Vec<PathBuf> = (0..N)
        .map(|i| dir.path().join(format!("agent{i}.log")))
        .collect();
    let agent = |i: usize| {
        spawn_child(
            "agent",
            &[
                ("FLEET_REDIS", redis.url()),
                ("FLEET_PATH", paths[i].display().to_string()),
                ("FLEET_MEMBER", member(i)),
                ("FLEET_WEIGHT", WEIGHTS[i].to_string()),
                ("FLEET_TTL_MS", TTL.as_millis().to_string()),
                ("FLEET_MIN", MINS[i].to_string()),
            ],
            &logs[i],
        )
    };
    let mut agents: Vec<Option<Child>> = (0..N).map(|i| Some(agent(i))).collect();
    let mut transitions = Vec::new();
    await_split(
        &sampler,
        mono_ns(),
        (&[0, 1, 2], &[]),
        "start",
        &mut transitions,
    );

    // The host's applied share is at its fence from the fence point after its last renewal
    // on: at most `ttl - margin` after the stall began (plus the sampler's period). Every
    // sample taken after that bound shows the fence (the file's deadline fences decisions,
    // whatever is scheduled); waited for until one such sample exists, since the sampler may
    // lag on a loaded machine.
    let fenced_within = |host: usize, since: u64, fence: u64, what: &str| {
        let bound = since + (TTL - TTL / 4).as_nanos() as u64 + 50_000_000;
        let deadline = Instant::now() + GIVE_UP;
        loop {
            let samples = sampler.since(since);
            if samples.last().is_some_and(|s| s.at_ns > bound) {
                let late: Vec<&Sample> = samples
                    .iter()
                    .filter(|s| s.at_ns > bound && s.shares[host] > fence)
                    .collect();
                assert!(
                    late.is_empty(),
                    "{what}: host{host} above its fence {} ms after the stall: {}{}",
                    (late[0].at_ns - since) / 1_000_000,
                    fmt_shares(&late[0].shares),
                    sampler.diagnose()
                );
                let s = samples.iter().find(|s| s.shares[host] <= fence).unwrap();
                let ms = (s.at_ns - since) as f64 / 1e6;
                println!("fleet: {what}: host{host} at its fence {ms:.0} ms after the stall");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no sample of host{host} {GIVE_UP:?} after the stall{}",
                sampler.diagnose()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // 1. Host 1's agent stopped past its lease: its guard sees nothing, the file fences it.
    let t = mono_ns();
    signal(agents[1].as_ref().unwrap(), Signal::SIGSTOP);
    fenced_within(1, t, 0, "agent SIGSTOPped");
    await_split(
        &sampler,
        t,
        (&[0, 2], &[]),
        "agent 1 stopped",
        &mut transitions,
    );
    hold(Duration::from_millis(4000).saturating_sub(Duration::from_nanos(mono_ns() - t)));
    let t = mono_ns();
    signal(agents[1].as_ref().unwrap(), Signal::SIGCONT);
    await_split(
        &sampler,
        t,
        (&[0, 1, 2], &[]),
        "agent 1 resumed",
        &mut transitions,
    );

    // 2. Host 2's agent and guard stopped together, then resumed.
    let g2 = guard_pid(&logs[2]);
    let t = mono_ns();
    signal(agents[2].as_ref().unwrap(), Signal::SIGSTOP);
    signal_pid(g2, Signal::SIGSTOP);
    fenced_within(2, t, 0, "agent and guard SIGSTOPped");
    await_split(
        &sampler,
        t,
        (&[0, 1], &[]),
        "agent+guard 2 stopped",
        &mut transitions,
    );
    hold(Duration::from_millis(4000).saturating_sub(Duration::from_nanos(mono_ns() - t)));
    let t = mono_ns();
    signal_pid(g2, Signal::SIGCONT);
    signal(agents[2].as_ref().unwrap(), Signal::SIGCONT);
    await_split(
        &sampler,
        t,
        (&[0, 1, 2], &[]),
        "agent+guard 2 resumed",
        &mut transitions,
    );

    // 3. Host 1's agent and guard killed together: no process is left to fence it.
    let g1 = guard_pid(&logs[1]);
    let t = mono_ns();
    let a1 = agents[1].take().unwrap();
    signal(&a1, Signal::SIGKILL);
    signal_pid(g1, Signal::SIGKILL);
    reap(a1, Duration::from_secs(5));
    fenced_within(1, t, 0, "agent and guard SIGKILLed");
    await_split(
        &sampler,
        t,
        (&[0, 2], &[]),
        "agent+guard 1 killed",
        &mut transitions,
    );
    // It stays fenced (nothing will ever renew it): check for a while, on every sample.
    let checked_from = mono_ns();
    hold(Duration::from_millis(1500));
    let lease = limits[1].fleet_lease().unwrap().unwrap();
    assert!(
        !lease.leased,
        "a dead host's share is still leased: {lease:?}"
    );
    assert!(
        sampler.since(checked_from).iter().all(|s| s.shares[1] == 0),
        "a dead host's applied share left its fence"
    );

    for a in agents.iter_mut().filter_map(Option::take) {
        signal(&a, Signal::SIGTERM);
        assert!(reap(a, Duration::from_secs(5)).success());
    }
    assert_workers_run(&mut workers, &sampler);
    for w in workers {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(w.id() as i32), Signal::SIGKILL);
        reap(w, Duration::from_secs(5));
    }
    let samples = sampler.finish();
    let dates = sink.finish();
    let max = samples.iter().map(Sample::sum).max().unwrap();
    println!(
        "fleet: stalls: {} snapshots; max sum of applied shares {} of {}",
        samples.len(),
        share::fmt_units(max),
        share::fmt_units(TOTAL_UNITS)
    );
    for s in &samples {
        assert!(
            s.sum() <= TOTAL_UNITS,
            "applied shares {:?} exceed the total",
            s.shares
        );
    }
    let slack = (BURST + 2 * N as u64) as f64;
    let worst = worst_excess(&dates);
    let span = (dates.last().unwrap() - dates[0]) as f64 / 1e9;
    println!(
        "fleet: stalls: sink: {} admissions over {span:.1} s ({:.0}/s); worst interval excess over total x T: {worst:.1} (bound {slack})",
        dates.len(),
        dates.len() as f64 / span
    );
    assert!(
        worst <= slack,
        "over-admission: {worst} > {slack} above total x T"
    );
    print_figures("stalls", &transitions, t0);
}

/// Shares follow demand within the total. Six hosts (weights 2, 1, 1, 1, 1, 3, no minimums),
/// total 1000/s, lease 1.5 s; no worker at first (every host idle: the weighted split). Then
/// workers start on hosts 1 and 2: within 3 leases their shares add up to the whole total
/// (the idle hosts keep nothing) and the sink receives at least 95% of the total over a
/// second; then a worker starts on host 0 (weight 2): within 3 leases it holds its fair share
/// of the busy hosts (500/s, and 250/s each for hosts 1 and 2). On every sample the applied
/// shares add up to at most the total; at the sink every interval stays within
/// `total x T + burst + 2 x hosts`.
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_shares_follow_demand() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let within = 3 * TTL;
    let dir = tempfile::tempdir().unwrap();
    let redis = Redis::start(&bin, free_port());
    let sink_path = dir.path().join("sink.sock");
    let sink = Sink::start(&sink_path);
    let paths: Vec<PathBuf> = (0..HOSTS)
        .map(|i| dir.path().join(format!("host{i}.shm")))
        .collect();
    let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
    let limits: Vec<Limit> = paths
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
    let sampler = Sampler::start(limits);
    sampler.scene(redis.url(), dir.path());
    // The server has been up for longer than a lease before the fleet's first renewal (as the
    // script reads it: `uptime_in_seconds`, whole seconds).
    redis.await_uptime(TTL);
    let t_agents = mono_ns();
    let mut agents: Vec<Child> = (0..HOSTS)
        .map(|i| {
            spawn_child(
                "agent",
                &[
                    ("FLEET_REDIS", redis.url()),
                    ("FLEET_PATH", paths[i].display().to_string()),
                    ("FLEET_MEMBER", member(i)),
                    ("FLEET_WEIGHT", WEIGHTS[i].to_string()),
                    ("FLEET_TTL_MS", TTL.as_millis().to_string()),
                    ("FLEET_MIN", "0".into()),
                ],
                &dir.path().join(format!("agent{i}.log")),
            )
        })
        .collect();
    let worker = |i: usize| {
        spawn_child(
            "worker",
            &[
                ("FLEET_PATH", paths[i].display().to_string()),
                ("FLEET_SINK", sink_path.display().to_string()),
                ("FLEET_HOST", i.to_string()),
            ],
            &dir.path().join(format!("worker{i}.log")),
        )
    };
    let weighted = |busy: &[usize]| {
        let w: u64 = busy.iter().map(|&i| WEIGHTS[i] as u64).sum();
        let mut e = [0u64; HOSTS];
        for &i in busy {
            e[i] = TOTAL_UNITS * WEIGHTS[i] as u64 / w;
        }
        e
    };
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..HOSTS).collect();
    // A new fleet on a server that has been a primary for longer than a lease: no quarantine
    // (the epoch's `quiet_until` is its own start), the first renewals grant (within one lease,
    // on a machine that schedules the agents).
    await_shares(
        &sampler,
        t_agents,
        weighted(&all),
        TTL,
        "6 idle hosts, new fleet (no quarantine)",
        &mut transitions,
    );
    let st = status(&redis.url());
    let (secs, micros) = st
        .epoch
        .split_once('.')
        .expect("an epoch is TIME's seconds.micros");
    let started_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    assert!(
        st.quiet_until_ms <= started_ms,
        "a new fleet on a server up for longer than a lease was quarantined until {} (epoch {})",
        st.quiet_until_ms,
        st.epoch
    );
    hold(Duration::from_millis(600));

    // Demand on hosts 1 and 2.
    let t1 = mono_ns();
    let mut workers = vec![worker(1), worker(2)];
    await_shares(
        &sampler,
        t1,
        weighted(&[1, 2]),
        within,
        "2 of 6 hosts busy",
        &mut transitions,
    );
    // The first second-long window (ending at an admission) holding 95% of the total: polled
    // until the sink has one, then read again once the batches sent meanwhile have arrived
    // (a worker sends its dates at least every 2 ms; they only add windows, never remove one).
    let need = (TOTAL_PER_S * 95 / 100) as usize;
    let first_window = || {
        let mut dates: Vec<u64> = sink
            .dates
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|&d| d >= t1)
            .collect();
        dates.sort_unstable();
        (need..dates.len())
            .find(|&k| dates[k] - dates[k - need] <= 1_000_000_000)
            .map(|k| dates[k] - t1)
    };
    let give_up = Instant::now() + GIVE_UP;
    while first_window().is_none() {
        assert!(
            Instant::now() < give_up,
            "the sink did not receive 95% of the total over a second within {GIVE_UP:?} of the demand{}",
            sampler.diagnose()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    hold(Duration::from_millis(100));
    let reached = first_window().unwrap();
    println!(
        "fleet: demand: 95% of the total reached the sink over a second ending {} ms after the demand started{}",
        reached / 1_000_000,
        if Duration::from_nanos(reached) > within {
            format!(" (beyond the stated bound {within:?}: a loaded machine)")
        } else {
            String::new()
        }
    );

    // A newly busy host: its fair share among the busy ones.
    let t2 = mono_ns();
    workers.push(worker(0));
    await_shares(
        &sampler,
        t2,
        weighted(&[0, 1, 2]),
        within,
        "host 0 becomes busy",
        &mut transitions,
    );
    hold(Duration::from_millis(300));

    // The operator's view of host 0: its share, lease and the live rate decisions use.
    let bin_out = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shmlimit"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "shmlimit {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let p0 = paths[0].display().to_string();
    let j: serde_json::Value = serde_json::from_str(&bin_out(&["inspect", &p0, "--json"])).unwrap();
    let l0 = &j["limits"][0];
    let fleet_json = &l0["fleet"];
    assert_eq!(fleet_json["fenced"], false, "{l0}");
    assert!(fleet_json["deadline_in_ms"].as_f64().unwrap() > 0.0, "{l0}");
    let live = l0["live_rate_per_s"].as_f64().unwrap();
    assert!((live - 500.0).abs() < 1.0, "live rate {live}: {l0}");
    let prom = bin_out(&["stats", &p0, "--prometheus"]);
    assert!(
        prom.lines()
            .any(|l| l.starts_with("shmlimit_fleet_fenced{") && l.ends_with(" 0")),
        "{prom}"
    );
    assert!(
        prom.lines()
            .any(|l| l.starts_with("shmlimit_live_rate_per_second{")),
        "{prom}"
    );
    let table = fleet::cli::status_table(&status(&redis.url()));
    print!("{table}");
    assert!(table.contains("applied"), "{table}");
    println!("fleet: inspect host0: fleet {fleet_json}, live_rate_per_s {live}");

    // Duplicates exit with a clear error: a second agent on host 0's file (refused before it
    // touches the file), and an agent of another file that claims host 0's member id (refused
    // by the server). Host 0 keeps its share throughout.
    let agent0_log = dir.path().join("agent0.log");
    let repairs = || {
        std::fs::read_to_string(&agent0_log)
            .unwrap_or_default()
            .matches("reason=repair")
            .count()
    };
    let repairs_before = repairs();
    let dup_path = dir.path().join("dup.shm");
    Limiter::builder()
        .limit(LIMIT, TokenBucket::new(1, floor))
        .create_or_open(&dup_path)
        .unwrap();
    for (i, path) in [(0, &paths[0]), (1, &dup_path)] {
        let log = dir.path().join(format!("dup{i}.log"));
        let dup = spawn_child(
            "agent",
            &[
                ("FLEET_REDIS", redis.url()),
                ("FLEET_PATH", path.display().to_string()),
                ("FLEET_MEMBER", member(0)),
                ("FLEET_WEIGHT", "1".into()),
                ("FLEET_TTL_MS", TTL.as_millis().to_string()),
                ("FLEET_MIN", "0".into()),
            ],
            &log,
        );
        let status = reap(dup, Duration::from_secs(5));
        let text = std::fs::read_to_string(&log).unwrap();
        let why = if i == 0 {
            "another fleet agent runs on"
        } else {
            "is held by another running agent"
        };
        assert!(
            !status.success() && text.contains(why),
            "duplicate {i}: {status:?}, log: {text}"
        );
        println!(
            "fleet: duplicate {i} exited: {}",
            text.lines().find(|l| l.contains(why)).unwrap()
        );
    }
    // Neither touched host 0's file: its agent repaired nothing (it logs a repair when its
    // next renewal finds its share retuned by someone else), and the fleet is at its split.
    await_shares(
        &sampler,
        mono_ns(),
        weighted(&[0, 1, 2]),
        TTL,
        "after the duplicates",
        &mut Vec::new(),
    );
    hold(TTL / 5);
    assert_eq!(
        repairs(),
        repairs_before,
        "a duplicate retuned host 0's file"
    );

    for a in agents.drain(..) {
        signal(&a, nix::sys::signal::Signal::SIGTERM);
        assert!(reap(a, Duration::from_secs(5)).success());
    }
    assert_workers_run(&mut workers, &sampler);
    for w in workers {
        signal(&w, nix::sys::signal::Signal::SIGKILL);
        reap(w, Duration::from_secs(5));
    }
    let samples = sampler.finish();
    let dates = sink.finish();
    for s in &samples {
        assert!(
            s.sum() <= TOTAL_UNITS,
            "applied shares {:?} exceed the total",
            s.shares
        );
    }
    let slack = (BURST + 2 * HOSTS as u64) as f64;
    let worst = worst_excess(&dates);
    println!(
        "fleet: demand: {} snapshots, max sum {}; sink: {} admissions; worst interval excess {worst:.1} (bound {slack})",
        samples.len(),
        share::fmt_units(samples.iter().map(Sample::sum).max().unwrap()),
        dates.len()
    );
    assert!(worst <= slack, "over-admission: {worst} > {slack}");
    print_figures("demand", &transitions, t0);
}

#[test]
fn rates_parse_as_the_cli_reads_them() {
    use fleet::cli::parse_rate;
    assert_eq!(parse_rate("300/s").unwrap().emission_ns(), 3_333_334);
    assert_eq!(parse_rate("2/ms").unwrap().emission_ns(), 500_000);
    assert_eq!(parse_rate("60/min").unwrap().emission_ns(), 1_000_000_000);
    assert_eq!(parse_rate("0.5/s").unwrap().emission_ns(), 2_000_000_000);
    // The grammar of `shmlimit create --rate`: a bare number is per second; N per duration.
    assert_eq!(parse_rate("300").unwrap().emission_ns(), 3_333_334);
    assert_eq!(parse_rate("5/10s").unwrap().emission_ns(), 2_000_000_000);
    assert_eq!(parse_rate("1/500ms").unwrap().emission_ns(), 500_000_000);
    assert!(parse_rate("300/").is_err());
    assert!(parse_rate("-3/s").is_err());
    assert!(parse_rate("x/s").is_err());
    assert!(parse_rate("0/s").is_err());
    assert!(parse_rate("5/week").is_err());
    assert_eq!(
        share::fmt_units(share::units_of(parse_rate("1000/s").unwrap())),
        "1000/s"
    );
}

/// The data plane of a fleet-managed bucket, without Redis: the share while the deadline
/// covers a decision's clock value, the fence after it (and for a deadline too far ahead);
/// a reset zeroes the deadline; ending management makes the share a plain rate.
#[test]
fn a_fleet_share_holds_only_until_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("share.shm");
    let fast = shmlimit::Rate::per_second(1000).unwrap();
    let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
    let limiter = Limiter::builder()
        .limit(LIMIT, TokenBucket::new(10, fast))
        .create_or_open(&path)
        .unwrap();
    let l = limiter.token_bucket(LIMIT).unwrap();
    assert!(l.fleet_lease().unwrap().is_none(), "a plain bucket");
    assert!(matches!(
        l.set_fleet_deadline(1),
        Err(shmlimit::Error::WrongKind { .. })
    ));
    // Managed: starts fenced (deadline 0) at the fence.
    l.fleet_manage(2, floor).unwrap();
    l.set_token_bucket(10, fast).unwrap();
    let lease = l.fleet_lease().unwrap().unwrap();
    assert!(!lease.leased);
    let now = mono_ns();
    let admitted = |at: u64| {
        (0..20)
            .filter(|_| l.try_acquire_at(1, at).unwrap().is_allowed())
            .count()
    };
    assert_eq!(admitted(now), 2, "fenced: the fence's burst");
    // Leased for 100 ms: the share (the tokens the fence took are used on the same state).
    l.reset().unwrap();
    let now = mono_ns();
    l.set_fleet_deadline(now + 100_000_000).unwrap();
    assert_eq!(admitted(now), 10, "leased: the share's burst");
    // Past the deadline: the fence, whatever the share's refill.
    // (Dated calls may not run ahead of the clock: wait the deadline out instead.)
    std::thread::sleep(Duration::from_millis(200));
    let later = mono_ns();
    assert!(admitted(later) <= 2, "past the deadline: at most the fence");
    assert!(l.peek(1).is_ok());
    // A cost the fence can never grant is denied (not an error) while fenced.
    assert!(l.try_acquire_at(5, later).unwrap().is_denied());
    // A deadline further ahead than 2^40 ns is damage: fenced.
    l.reset().unwrap();
    let now = mono_ns();
    l.set_fleet_deadline(now + (1 << 41)).unwrap();
    assert!(admitted(now) <= 2);
    assert!(!l.fleet_lease().unwrap().unwrap().leased);
    // A reset zeroes the deadline.
    l.set_fleet_deadline(mono_ns() + 1_000_000_000).unwrap();
    assert!(l.fleet_lease().unwrap().unwrap().leased);
    l.reset().unwrap();
    let lease = l.fleet_lease().unwrap().unwrap();
    assert!(!lease.leased && lease.deadline_ns == 0, "{lease:?}");
    // Another handle (another process would be the same) sees the same lease.
    let other = Limiter::open(&path).unwrap().limit(LIMIT).unwrap();
    assert_eq!(other.fleet_lease().unwrap().unwrap().fence, lease.fence);
    // The end of management: a plain rate again, no deadline.
    l.end_fleet_management().unwrap();
    assert!(l.fleet_lease().unwrap().is_none());
    l.reset().unwrap();
    assert_eq!(admitted(mono_ns()), 10);
}

/// The agent's lock file (`PATH.LIMIT.agent.lock`): gone after a clean exit (SIGTERM, SIGINT,
/// a dropped agent), left behind by a SIGKILLed agent but never blocking the next one, which
/// holds it (a third agent is refused) and removes it when it exits. Real agent processes,
/// against a Redis port nobody listens on (an agent rides that out at its floor).
#[test]
fn an_agent_removes_its_lock_on_a_clean_exit_and_a_stale_one_never_blocks() {
    use nix::sys::signal::Signal;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.shm");
    let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
    Limiter::builder()
        .limit(LIMIT, TokenBucket::new(1, floor))
        .create_or_open(&path)
        .unwrap();
    let lock = PathBuf::from(format!("{}.{LIMIT}.agent.lock", path.display()));
    // Port 1: nothing listens there, and no test's Redis can take it (they take free
    // ephemeral ports, which a port chosen here could become).
    let url = "redis://127.0.0.1:1/".to_string();
    let mut n = 0;
    let mut start = |log_name: &str| {
        n += 1;
        let log = dir.path().join(format!("{log_name}{n}.log"));
        let child = spawn_child(
            "agent",
            &[
                ("FLEET_REDIS", url.clone()),
                ("FLEET_PATH", path.display().to_string()),
                ("FLEET_MEMBER", format!("lock{n}")),
                ("FLEET_WEIGHT", "1".into()),
                ("FLEET_TTL_MS", TTL.as_millis().to_string()),
                ("FLEET_MIN", "0".into()),
            ],
            &log,
        );
        (child, log)
    };
    // Started: it logged its start (after taking the lock) and its guard.
    let started = |log: &Path| {
        let deadline = Instant::now() + GIVE_UP;
        while !std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("guard pid=")
        {
            assert!(
                Instant::now() < deadline,
                "the agent did not start within {GIVE_UP:?}; its log {}:\n{}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let (a, log) = start("agent");
        started(&log);
        assert!(lock.exists(), "a running agent holds {}", lock.display());
        signal(&a, sig);
        assert!(reap(a, Duration::from_secs(5)).success());
        assert!(!lock.exists(), "{} left behind after {sig}", lock.display());
    }
    // SIGKILL: the file stays (nobody removes it), the lock does not; not even while the
    // agent's guard lives on (stopped here: it holds no copy of the lock).
    let (a, log) = start("agent");
    started(&log);
    let guard = guard_pid(&log);
    signal_pid(guard, Signal::SIGSTOP);
    signal(&a, Signal::SIGKILL);
    reap(a, Duration::from_secs(5));
    assert!(lock.exists(), "a SIGKILLed agent cannot remove its file");
    let (mut b, log) = start("agent");
    started(&log);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        b.try_wait().unwrap().is_none(),
        "the agent after a SIGKILLed one exited: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    signal_pid(guard, Signal::SIGCONT);
    // It holds the lock: a third agent is refused.
    let (c, log_c) = start("third");
    let status = reap(c, Duration::from_secs(10));
    assert_eq!(status.code(), Some(3), "a second agent on the limit exits");
    assert!(std::fs::read_to_string(&log_c)
        .unwrap()
        .contains("another fleet agent runs"));
    assert!(lock.exists(), "the refused agent leaves the holder's file");
    signal(&b, Signal::SIGTERM);
    assert!(reap(b, Duration::from_secs(5)).success());
    assert!(!lock.exists(), "{} left behind", lock.display());
    // In-process: a dropped agent removes it too.
    let mut cfg = AgentConfig::new(url.clone(), FLEET, &path, LIMIT).with_ttl(TTL);
    cfg.total = Some(shmlimit::Rate::per_second(TOTAL_PER_S).unwrap());
    cfg.guard = false;
    let agent = fleet::Agent::start(cfg).unwrap();
    assert!(lock.exists());
    drop(agent);
    assert!(!lock.exists(), "a dropped agent left its lock file");
}

/// Admissions per 100 ms bin over `[from, from + 3 s)`, from sorted dates.
fn bins_100ms(dates: &[u64], from: u64) -> Vec<usize> {
    (0..30u64)
        .map(|k| {
            let (a, b) = (from + k * 100_000_000, from + (k + 1) * 100_000_000);
            dates.partition_point(|&d| d < b) - dates.partition_point(|&d| d < a)
        })
        .collect()
}

/// The most admissions in any 1 s window (each window starting at an admission).
fn worst_second(dates: &[u64]) -> usize {
    let mut worst = 0;
    let mut j = 0;
    for i in 0..dates.len() {
        while j < dates.len() && dates[j] < dates[i] + 1_000_000_000 {
            j += 1;
        }
        worst = worst.max(j - i);
    }
    worst
}

/// Busy hosts for the restart and failover scenarios: host `i` has its limiter file (at the
/// floor), a worker hammering it into the sink and an agent reaching Redis at `urls[i]`
/// (weights and minimums from [`WEIGHTS`] and [`MINS`]); a sampler reads the applied shares.
struct Busy {
    workers: Vec<Child>,
    agents: Vec<Child>,
    sampler: Sampler,
    sink: Sink,
}

impl Busy {
    fn start(dir: &Path, urls: &[String], ttl_ms: u64, scene: String) -> Busy {
        let n = urls.len();
        let sink_path = dir.join("sink.sock");
        let sink = Sink::start(&sink_path);
        let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
        let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("host{i}.shm"))).collect();
        let limits: Vec<Limit> = paths
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
        let sampler = Sampler::start(limits);
        sampler.scene(scene, dir);
        let workers = (0..n)
            .map(|i| {
                spawn_child(
                    "worker",
                    &[
                        ("FLEET_PATH", paths[i].display().to_string()),
                        ("FLEET_SINK", sink_path.display().to_string()),
                        ("FLEET_HOST", i.to_string()),
                    ],
                    &dir.join(format!("worker{i}.log")),
                )
            })
            .collect();
        let agents = (0..n)
            .map(|i| {
                spawn_child(
                    "agent",
                    &[
                        ("FLEET_REDIS", urls[i].clone()),
                        ("FLEET_PATH", paths[i].display().to_string()),
                        ("FLEET_MEMBER", member(i)),
                        ("FLEET_WEIGHT", WEIGHTS[i].to_string()),
                        ("FLEET_TTL_MS", ttl_ms.to_string()),
                        ("FLEET_MIN", MINS[i].to_string()),
                    ],
                    &dir.join(format!("agent{i}.log")),
                )
            })
            .collect();
        Busy {
            workers,
            agents,
            sampler,
            sink,
        }
    }

    /// The 3 s after a kill (or flush) at `t_kill`, once they have passed: at most one 100 ms
    /// bin below half of full use (50 admissions) and the applied shares never under 90% of the
    /// total; the figures printed.
    fn ride_out(&self, what: &str, t_kill: u64, answered_ms: f64) {
        let wait = (t_kill + 3_200_000_000).saturating_sub(mono_ns());
        hold(Duration::from_nanos(wait));
        let dates = self.sink.snapshot();
        let before = bins_100ms(&dates, t_kill - 1_000_000_000)[..10].to_vec();
        let full = before.iter().sum::<usize>() as f64 / 10.0;
        let bins = bins_100ms(&dates, t_kill);
        let low = bins.iter().filter(|&&c| c < 50).count();
        let min_sum = self
            .sampler
            .since(t_kill)
            .iter()
            .filter(|s| s.at_ns < t_kill + 3_000_000_000)
            .map(Sample::sum)
            .min()
            .unwrap_or(0);
        println!(
            "fleet: {what}: server answering after {answered_ms:.0} ms; 100 ms bins in the 3 s after: min {}, {low} below 50 (full use before: {full:.1} per bin); applied shares at least {} of {}",
            bins.iter().min().unwrap(),
            share::fmt_units(min_sum),
            share::fmt_units(TOTAL_UNITS)
        );
        assert!(
            min_sum >= TOTAL_UNITS / 10 * 9,
            "{what}: the applied shares fell to {} (bins {bins:?}){}",
            share::fmt_units(min_sum),
            self.sampler.diagnose()
        );
        assert!(
            low <= 1,
            "{what}: {low} bins of 100 ms below half of full use in the 3 s after: {bins:?}{}",
            self.sampler.diagnose()
        );
    }

    /// Agents leave, workers stop; every sample of the applied shares at most the total, the
    /// sink's worst interval within `total x T + burst + 2 x hosts`.
    fn finish(mut self, name: &str) {
        use nix::sys::signal::Signal;
        let n = self.agents.len();
        for a in self.agents.drain(..) {
            signal(&a, Signal::SIGTERM);
            assert!(reap(a, Duration::from_secs(5)).success());
        }
        assert_workers_run(&mut self.workers, &self.sampler);
        for w in self.workers.drain(..) {
            signal(&w, Signal::SIGKILL);
            reap(w, Duration::from_secs(5));
        }
        let samples = self.sampler.finish();
        let dates = self.sink.finish();
        let max = samples.iter().map(Sample::sum).max().unwrap();
        println!(
            "fleet: {name}: {} snapshots of the applied shares; max sum {} of total {}",
            samples.len(),
            share::fmt_units(max),
            share::fmt_units(TOTAL_UNITS)
        );
        for s in &samples {
            assert!(
                s.sum() <= TOTAL_UNITS,
                "{name}: applied shares {} add up to more than the total",
                fmt_shares(&s.shares)
            );
        }
        let slack = (BURST + 2 * n as u64) as f64;
        let worst = worst_excess(&dates);
        println!(
            "fleet: {name}: sink: {} admissions; worst 1 s window {} (bound {}); worst interval excess over total x T {worst:.1} (bound {slack})",
            dates.len(),
            worst_second(&dates),
            TOTAL_PER_S as f64 + slack
        );
        assert!(
            worst <= slack,
            "{name}: over-admission: {worst} > {slack} above total x T"
        );
    }
}

/// Redis restarted (SIGKILL, a new empty `redis-server` on the same port) and flushed under a
/// busy fleet: three hosts (weights 2, 1, 1, host 0 with a 50/s minimum), a worker each, total
/// 1000/s, lease 1.5 s (`FLEET_RESTART_HOSTS`, up to 6, and `FLEET_RESTART_TTL_MS` measure
/// other fleets: issue 31's had six hosts and 2 s leases).
///
/// 1. Host 2 partitioned (its agent talks through a proxy the test cuts) and Redis restarted
///    at once (down under 50 ms): the others re-assert their shares into the new epoch, which
///    grants nothing more until an agent has seen it for one lease; host 2 keeps its share
///    until its own deadline. The others grow into host 2's share only after host 2 fenced: no
///    sample of the applied shares above the total.
/// 2. Redis down 50, 100 and 300 ms, every host connected: each host re-asserts its share and
///    keeps deciding: at most one 100 ms bin of the 3 s after the kill below half of full use
///    (50 admissions), and the applied shares never under 90% of the total.
/// 3. `FLUSHALL`: a new epoch too (a flush is never taken for a fresh fleet), the same.
///
/// Throughout: every sample of the applied shares at most the total, the sink's worst interval
/// within `total x T + burst + 2 x hosts`.
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_rides_out_redis_restarts_and_flushes() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut redis = Redis::start(&bin, free_port());
    let proxy = Proxy::start(redis.port);
    let n: usize = std::env::var("FLEET_RESTART_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| (3..=HOSTS).contains(&n))
        .unwrap_or(3);
    let ttl_ms: u64 = std::env::var("FLEET_RESTART_TTL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TTL.as_millis() as u64);
    println!("fleet: restarts: {n} hosts, lease {ttl_ms} ms");
    // Host 2 through the proxy.
    let urls: Vec<String> = (0..n)
        .map(|i| if i == 2 { proxy.url() } else { redis.url() })
        .collect();
    let busy = Busy::start(dir.path(), &urls, ttl_ms, redis.url());
    let sampler = &busy.sampler;
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..n).collect();
    await_split(
        sampler,
        mono_ns(),
        (&all, &[]),
        &format!("start, {n} busy hosts"),
        &mut transitions,
    );
    hold(Duration::from_millis(500));

    // 1. Host 2 partitioned, Redis restarted at once.
    let epoch = status(&redis.url()).epoch;
    proxy.cut();
    let t_kill = mono_ns();
    redis.stop();
    let down_ns = mono_ns() - t_kill;
    redis.restart();
    let answered_ms = (mono_ns() - t_kill) as f64 / 1e6;
    println!(
        "fleet: restart with host2 partitioned: redis-server killed and started again in {:.1} ms, answering after {answered_ms:.1} ms",
        down_ns as f64 / 1e6
    );
    // The new epoch, closed until an agent has seen it for one lease (reported: a loaded
    // machine may be slow to show it).
    let deadline = Instant::now() + GIVE_UP;
    let st = loop {
        let st = status(&redis.url());
        if !st.epoch.is_empty() && st.epoch != epoch {
            break st;
        }
        assert!(Instant::now() < deadline, "no new epoch after the restart");
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "fleet: new epoch {} (open: {}), granted {}",
        st.epoch,
        st.open,
        share::fmt_units(st.granted())
    );
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != 2).collect();
    await_split(
        sampler,
        t_kill,
        (&others, &[]),
        "restart at once, host2 partitioned (the others grow once host2 fenced)",
        &mut transitions,
    );
    // Host 2 was at its fence when the others grew past their shares.
    let over: Vec<Sample> = sampler
        .since(t_kill)
        .into_iter()
        .filter(|s| s.sum() > TOTAL_UNITS)
        .collect();
    assert!(
        over.is_empty(),
        "restart with host2 partitioned: {} samples above the total, first {}{}",
        over.len(),
        fmt_shares(&over[0].shares),
        sampler.diagnose()
    );
    proxy.heal();
    await_split(
        sampler,
        mono_ns(),
        (&all, &[]),
        "host2 healed",
        &mut transitions,
    );
    hold(Duration::from_millis(500));

    // 2. Restarts with every host connected; 3. a flush.
    for down_ms in [50u64, 100, 300, 0] {
        let epoch = status(&redis.url()).epoch;
        let t_kill = mono_ns();
        let what = if down_ms == 0 {
            let c = redis::Client::open(redis.url()).unwrap();
            let mut con = c
                .get_connection_with_timeout(Duration::from_secs(2))
                .unwrap();
            redis::cmd("FLUSHALL").query::<()>(&mut con).unwrap();
            "FLUSHALL".to_string()
        } else {
            redis.stop();
            std::thread::sleep(Duration::from_millis(down_ms));
            redis.restart();
            format!("down {down_ms} ms")
        };
        let answered_ms = (mono_ns() - t_kill) as f64 / 1e6;
        busy.ride_out(&what, t_kill, answered_ms);
        assert_ne!(status(&redis.url()).epoch, epoch, "{what}: no new epoch");
    }

    busy.finish("restarts");
    drop(proxy);
    redis.stop();
    print_figures("restart", &transitions, t0);
}

/// A failover: a primary and a replica (`--replicaof`), three busy hosts (weights 2, 1, 1, host
/// 0 with a 50/s minimum) reaching the primary through a proxy. The primary is SIGKILLed while
/// the agents renew, the replica promoted (`REPLICAOF NO ONE`) and the proxy pointed at it. The
/// replica holds a copy of the fleet's keys, written by another process (the primary's
/// `run_id`), possibly without the latest grants: a new epoch begins, the agents re-assert their
/// shares. The kill comes mid-renewal: writes are paused on the primary for 350 ms first, so
/// every agent has a renewal waiting. The applied shares never add up to more than the total,
/// and the hosts keep deciding (at most one 100 ms bin of the 3 s after the kill below half of
/// full use).
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_rides_out_a_failover_to_a_replica() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Redis::start(&bin, free_port());
    let primary_port = primary.port.to_string();
    let mut replica = Redis::start_with(
        &bin,
        free_port(),
        &["--replicaof", "127.0.0.1", &primary_port],
    );
    let proxy = Proxy::start(primary.port);
    let urls = vec![proxy.url(); 3];
    let busy = Busy::start(dir.path(), &urls, TTL.as_millis() as u64, proxy.url());
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..urls.len()).collect();
    await_split(
        &busy.sampler,
        mono_ns(),
        (&all, &[]),
        "start, 3 busy hosts on the primary",
        &mut transitions,
    );
    // The replica has the fleet's keys (replicated).
    let epoch = status(&primary.url()).epoch;
    let deadline = Instant::now() + GIVE_UP;
    while status(&replica.url()).epoch != epoch {
        assert!(
            Instant::now() < deadline,
            "the replica never had the fleet's epoch"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    hold(Duration::from_millis(700));

    // Mid-renewal: writes paused on the primary (scripts that write wait), long enough for
    // every agent to have a renewal pending (one every 300 ms), then the kill.
    {
        let c = redis::Client::open(primary.url()).unwrap();
        let mut con = c
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(10_000)
            .arg("WRITE")
            .query::<()>(&mut con)
            .unwrap();
    }
    hold(Duration::from_millis(350));
    let t_kill = mono_ns();
    primary.stop();
    let c = redis::Client::open(replica.url()).unwrap();
    let mut con = c
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query::<()>(&mut con)
        .unwrap();
    proxy.retarget(replica.port);
    let promoted_ms = (mono_ns() - t_kill) as f64 / 1e6;
    busy.ride_out("failover", t_kill, promoted_ms);
    let st = status(&replica.url());
    println!(
        "fleet: failover: replica promoted {promoted_ms:.0} ms after the primary's kill; new epoch {} (open: {})",
        st.epoch, st.open
    );
    assert_ne!(st.epoch, epoch, "the promoted replica kept the old epoch");
    await_split(
        &busy.sampler,
        t_kill,
        (&all, &[]),
        "failover to the replica",
        &mut transitions,
    );
    busy.finish("failover");
    drop(proxy);
    replica.stop();
    println!(
        "fleet: failover scenario took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// A `redis-server --sentinel` process, killed when dropped.
struct Sentinel {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Monitor `primary` as `m` (quorum 1, down after 100 ms).
    fn start(bin: &Path, primary: u16) -> Sentinel {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor m 127.0.0.1 {primary} 1\nsentinel down-after-milliseconds m 100\nsentinel failover-timeout m 2000\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Sentinel {
            port,
            child,
            _dir: dir,
        }
    }

    /// The primary's port as the sentinel names it (None while it does not answer).
    fn primary(&self) -> Option<u16> {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).ok()?;
        let mut con = c
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("m")
            .query(&mut con)
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// The replicas the sentinel knows of the primary.
    fn replicas(&self) -> usize {
        let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)) else {
            return 0;
        };
        let Ok(mut con) = c.get_connection_with_timeout(Duration::from_millis(200)) else {
            return 0;
        };
        redis::cmd("SENTINEL")
            .arg("replicas")
            .arg("m")
            .query::<Vec<redis::Value>>(&mut con)
            .map_or(0, |v| v.len())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A failover decided by Sentinel: a primary, a replica and one sentinel (quorum 1, the
/// primary down after 100 ms), three busy hosts with 2 s leases reaching the primary through a
/// proxy that follows the sentinel's answer (as a Sentinel-aware client would). The primary is
/// SIGKILLed; the sentinel promotes the replica; the agents re-assert into the new epoch. The
/// applied shares never add up to more than the total; the 3 s after the kill are reported
/// (Sentinel takes about a second to promote, against a fence point 1.5 s after the last
/// renewal) and at most one 100 ms bin below half of full use is asserted.
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_rides_out_a_sentinel_failover() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Redis::start(&bin, free_port());
    let primary_port = primary.port.to_string();
    let mut replica = Redis::start_with(
        &bin,
        free_port(),
        &["--replicaof", "127.0.0.1", &primary_port],
    );
    let sentinel = Sentinel::start(&bin, primary.port);
    let deadline = Instant::now() + GIVE_UP;
    while sentinel.primary() != Some(primary.port) || sentinel.replicas() == 0 {
        assert!(
            Instant::now() < deadline,
            "the sentinel never saw the primary and its replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let proxy = Proxy::start(primary.port);
    let urls = vec![proxy.url(); 3];
    let busy = Busy::start(dir.path(), &urls, 2000, proxy.url());
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..urls.len()).collect();
    await_split(
        &busy.sampler,
        mono_ns(),
        (&all, &[]),
        "start, 3 busy hosts on the primary (2 s leases)",
        &mut transitions,
    );
    let epoch = status(&primary.url()).epoch;
    let deadline = Instant::now() + GIVE_UP;
    while status(&replica.url()).epoch != epoch {
        assert!(
            Instant::now() < deadline,
            "the replica never had the fleet's epoch"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    hold(Duration::from_millis(700));

    let t_kill = mono_ns();
    primary.stop();
    let deadline = Instant::now() + GIVE_UP;
    while sentinel.primary() != Some(replica.port) {
        assert!(
            Instant::now() < deadline,
            "the sentinel did not promote the replica"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.retarget(replica.port);
    let promoted_ms = (mono_ns() - t_kill) as f64 / 1e6;
    busy.ride_out("sentinel failover", t_kill, promoted_ms);
    let st = status(&replica.url());
    println!(
        "fleet: sentinel failover: replica promoted {promoted_ms:.0} ms after the primary's kill; new epoch {} (open: {})",
        st.epoch, st.open
    );
    assert_ne!(st.epoch, epoch, "the promoted replica kept the old epoch");
    await_split(
        &busy.sampler,
        t_kill,
        (&all, &[]),
        "sentinel failover to the replica",
        &mut transitions,
    );
    busy.finish("sentinel failover");
    drop(proxy);
    drop(sentinel);
    replica.stop();
    println!(
        "fleet: sentinel failover scenario took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
