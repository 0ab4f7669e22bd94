//! `demo --scenario dependency`: the shared-dependency scenario, end to end, measured where the
//! calls arrive.
//!
//! A stand-in dependency (`demo-dependency`, its own process) accepts 300 calls/s, takes 40 ms
//! per call and fails 20% of them. Service instances (`demo-worker` processes, a share of them
//! Python processes through the C ABI) take requests from their generators, fan each out into
//! one call per item, retry failures with backoff, and protect the dependency with one budget
//! in one limiter file: 240 sends/s in total, of which at most 200 first attempts and 40
//! retries, checked all or nothing immediately before every attempt, plus a limit of calls in
//! flight, a reservation with a deadline on intake and a per-client limit. The run scales from
//! 10 to 40 instances under load, removes and SIGKILLs some, then makes the dependency fail 60%
//! of calls (a retry storm), and checks at the dependency that every bound held.
//!
//! # What is checked, and why it is sound
//!
//! Every call carries the caller's clock readings `t0 <= t1` taken just before and after the
//! limiter admitted it; the library dates each admission between them. The token bucket admits
//! at most `B + floor(T / e)` in any interval of length `T` (`e` the emission interval), so for
//! the admissions `i..=j` in order of `t0`, which all lie in `[t0_i, max t1]`, the count must be
//! at most `B + floor((max t1 - t0_i) / e)`: checked for every pair, on `total`, `first` and
//! `retry`. At the dependency, arrivals come later than admissions by a delay at most `D` (the
//! largest `arrival - t0` measured), so any `T` of arrivals holds at most
//! `B + floor((T + D) / e)`: checked for every pair of arrivals. The calls in flight, counted by
//! the dependency at each arrival, must never exceed the permits.

mod chart;
mod fleet;
mod report;
mod setup;

use report::*;
use setup::*;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use clap::{Args, ValueEnum};
use shmlimit::{Clock, Concurrency, Keyed, Limiter, MonotonicClock, TokenBucket};

use crate::dependency::{self, Arrival, Outcome};
use crate::render::{thousands, Table};
use crate::scenario_worker::{parse_counters, rss_kib};
use crate::scratch::Scratch;
use crate::Failure;

const SECOND_NS: u64 = 1_000_000_000;

/// The budget: 240 sends/s with a burst of 24, split into 200 first attempts (burst 20) and 40
/// retries (burst 4).
pub const TOTAL: (u64, u64) = (240, 24);
pub const FIRST: (u64, u64) = (200, 20);
pub const RETRY: (u64, u64) = (40, 4);
/// Calls in flight, across every instance.
pub const PERMITS: u64 = 12;
/// Requests per second per client (burst as many), shared by every instance.
pub const CLIENT_RATE: u64 = 10;
/// What the dependency accepts per second.
pub const DEPENDENCY_CAPACITY: u64 = 300;
pub const SERVICE_MS: u64 = 40;
pub const FAIL_PERCENT: u32 = 20;
pub const STORM_FAIL_PERCENT: u32 = 60;
/// Incoming requests per second per instance. A request holds 7 items on average (19 in 20 hold
/// 1 to 13; the rest are oversized and rejected), so each instance asks for about 20 calls/s:
/// 10 instances ask for the 200/s of first attempts the budget allows, 40 for four times that.
pub const REQUESTS_PER_SECOND: f64 = 3.0;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// 10 to 40 instances sharing one budget in front of a 300/s dependency (see below)
    Dependency,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Budget {
    /// Every attempt passes the budget, the in-flight limit, the intake deadline and the
    /// per-client limit
    On,
    /// No limiter at all: what the same instances send without one
    Off,
    /// Both runs, one after the other, on one chart
    Both,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Scenario (with --scenario dependency)")]
pub struct ScenarioArgs {
    /// Run a scenario instead of the bucket and log demo. `dependency`: instances (separate
    /// processes, some in Python) call a slow, failing stand-in dependency that accepts 300/s,
    /// through a budget of 240/s (200 first attempts + 40 retries) checked before every
    /// attempt; the run scales 10 -> 20 -> 40 instances, removes 5 and SIGKILLs 5, then makes the
    /// dependency fail 60% (a retry storm). Prints a table per phase of what arrived at the
    /// dependency against the bounds, every process's memory, and writes a chart (SVG)
    #[arg(long, value_enum, value_name = "NAME")]
    pub scenario: Option<Scenario>,
    /// How long each of the five phases lasts, in seconds
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub phase_seconds: f64,
    /// With the limiter (on), without it (off) or both runs
    #[arg(long, value_enum, default_value = "on")]
    pub budget: Budget,
    /// Where to write the chart of arrivals per second at the dependency
    #[arg(long, default_value = "shmlimit-scenario.svg", value_name = "PATH")]
    pub chart: PathBuf,
    /// Keep the limiter file, the dependency's record of every arrival (arrivals-on.txt,
    /// arrivals-off.txt) and the phase times (phases-on.txt, ...) in this new directory
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Simulated hosts, each with its own limiter file: the budget is shared through the fleet
    /// agent (one per host and limit) and Redis; the permits and the intake are split evenly.
    /// Starts a private redis-server unless --redis is given
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub hosts: u32,
    /// The Redis for --hosts 2..4 (default: a private redis-server on a free loopback port)
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// How many instances in every ten are Python processes (ffi/python, through the C ABI);
    /// 0 for Rust only. Needs python3 and the libshmlimit.so built with this binary
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub python: u32,
}

impl ScenarioArgs {
    /// The first scenario flag given a value other than its default, if any (they mean
    /// nothing without --scenario).
    pub fn set_flag(&self) -> Option<&'static str> {
        [
            (self.phase_seconds != 5.0, "--phase-seconds"),
            (self.budget != Budget::On, "--budget"),
            (self.chart != Path::new("shmlimit-scenario.svg"), "--chart"),
            (self.keep.is_some(), "--keep"),
            (self.hosts != 1, "--hosts"),
            (self.redis.is_some(), "--redis"),
            (self.python != 2, "--python"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// What happens at the start of a phase.
#[derive(Debug, Clone, Copy)]
enum Action {
    Start(usize),
    Grow(usize),
    Shrink { remove: usize, kill: usize },
    Fail(u32),
}

const PHASES: [(&str, Action); 5] = [
    ("start: 10 instances", Action::Start(10)),
    ("scale up to 20", Action::Grow(20)),
    ("scale up to 40", Action::Grow(40)),
    ("remove 5, SIGKILL 5", Action::Shrink { remove: 5, kill: 5 }),
    ("retry storm: 60% fail", Action::Fail(STORM_FAIL_PERCENT)),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rust,
    Python,
}

/// One instance process.
struct Instance {
    number: u32,
    kind: Kind,
    child: Child,
    stdin: Option<ChildStdin>,
    peak_rss_kib: u64,
    ended: Option<&'static str>,
    counters: Vec<(String, u64)>,
}

/// One phase as it ran.
#[derive(Debug, Clone)]
pub struct Phase {
    pub label: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub instances: usize,
    pub deadline_rejected: u64,
    pub client_limited: u64,
}

/// One run (budget on or off).
struct Run {
    budget_on: bool,
    /// Hosts sharing the budget through the fleet agent (1: one limiter file, no agent).
    hosts: u32,
    /// The shares the agents applied at the start and at the end.
    shares: Option<String>,
    redis_url: Option<String>,
    /// Instances that ended with an error (their messages went to standard error).
    failed: Vec<String>,
    /// The fleet agents' and the private redis-server's resident memory at the end (KiB).
    fleet_rss_kib: Option<(Vec<u64>, Option<u64>)>,
    phases: Vec<Phase>,
    arrivals: Vec<Arrival>,
    instances: Vec<Instance>,
    dependency_rss_kib: u64,
    dependency_summary: String,
}

pub fn run(args: ScenarioArgs) -> Result<(), Failure> {
    if !(args.phase_seconds >= 0.5 && args.phase_seconds <= 600.0) {
        return Err(Failure::config(format!(
            "--phase-seconds: must be at least 0.5 and at most 600 (got {})",
            args.phase_seconds
        )));
    }
    let dir = match &args.keep {
        Some(path) => {
            std::fs::create_dir(path).map_err(|e| {
                Failure::file(format!(
                    "{}: cannot create the directory for --keep: {e} (it must not exist yet)",
                    path.display()
                ))
            })?;
            Scratch::kept(path.clone())
        }
        None => Scratch::fresh("shmlimit-scenario")
            .map_err(|why| Failure::file(format!("{why}; set TMPDIR or pass --keep")))?,
    };
    let python = if args.python > 0 {
        match python_setup(dir.path()) {
            Ok(p) => Some(p),
            Err(why) => {
                println!("note: Rust instances only ({why})\n");
                None
            }
        }
    } else {
        None
    };
    let phase_ns = (args.phase_seconds * 1e9) as u64;
    let mut runs = Vec::new();
    let plan: &[bool] = match args.budget {
        Budget::On => &[true],
        Budget::Off => &[false],
        Budget::Both => &[true, false],
    };
    // Ctrl-C reaches the children (same process group); this process notices it, stops what
    // is left of the run and removes its temporary directory.
    let stop = shmlimit_fleet::cli::stop_on_signals();
    for &on in plan {
        let python = python.as_ref().map(|p| (p, args.python));
        runs.push(run_once(
            dir.path(),
            on,
            phase_ns,
            python,
            args.hosts,
            args.redis.as_deref(),
            stop,
        )?);
    }

    let mut out = String::new();
    let mut within = true;
    for run in &runs {
        let (text, ok) = report(run, args.phase_seconds);
        out.push_str(&text);
        within &= ok;
    }
    if runs.len() == 2 {
        out.push_str(&comparison(&runs[0], &runs[1]));
    }
    let chart = chart::draw(
        &args.chart,
        &runs
            .iter()
            .map(|r| chart::Series {
                budget_on: r.budget_on,
                hosts: r.hosts,
                phases: &r.phases,
                arrivals: &r.arrivals,
            })
            .collect::<Vec<_>>(),
    );
    match chart {
        Ok(()) => {
            let shown = std::fs::canonicalize(&args.chart).unwrap_or(args.chart.clone());
            let _ = writeln!(
                out,
                "chart: {} (arrivals per second at the dependency against the budget; open it in a browser)",
                shown.display()
            );
        }
        Err(e) => {
            let _ = writeln!(out, "chart: not written: {e}");
        }
    }
    if !dir.removed() {
        let _ = writeln!(out, "kept: {}", dir.path().display());
    }
    print!("{out}");
    let failed: Vec<&String> = runs.iter().flat_map(|r| &r.failed).collect();
    if let Some(first) = failed.first() {
        return Err(Failure::file(format!(
            "{first}{}: the run is not the scenario it describes (see the messages above)",
            if failed.len() > 1 {
                format!(" (and {} more)", failed.len() - 1)
            } else {
                String::new()
            }
        )));
    }
    if !within {
        return Err(Failure::bound(
            "a bound was exceeded at the dependency: this is a bug in shmlimit; please report it with this output",
        ));
    }
    Ok(())
}

fn run_once(
    dir: &Path,
    on: bool,
    phase_ns: u64,
    python: Option<(&PythonSetup, u32)>,
    hosts: u32,
    redis: Option<&str>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Run, Failure> {
    let tag = if on { "on" } else { "off" };
    let hosts = if on { hosts.max(1) } else { 1 };
    let files: Vec<PathBuf> = if hosts == 1 {
        vec![dir.join(format!("limits-{tag}.shm"))]
    } else {
        (0..hosts)
            .map(|h| dir.join(format!("limits-{tag}-host{h}.shm")))
            .collect()
    };
    let limiters: Vec<Limiter> = if on {
        files
            .iter()
            .map(|f| create_limiter(f, u64::from(hosts)))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let exe = std::env::current_exe()
        .map_err(|e| Failure::file(format!("cannot find this binary: {e}")))?;
    let fleet = if on && hosts > 1 {
        Some(fleet::start(&exe, dir, &files, &limiters, redis, tag)?)
    } else {
        None
    };
    let shares_at_start = fleet.as_ref().map(|_| fleet::shares(&limiters));
    let socket = dir.join(format!("dependency-{tag}.sock"));
    let record = dir.join(format!("arrivals-{tag}.txt"));
    let mut dep = Command::new(&exe)
        .arg("demo-dependency")
        .arg("--socket")
        .arg(&socket)
        .arg("--record")
        .arg(&record)
        .args(["--service-ms", &SERVICE_MS.to_string()])
        .args(["--fail-percent", &FAIL_PERCENT.to_string()])
        .args(["--capacity", &DEPENDENCY_CAPACITY.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::file(format!("cannot start the dependency: {e}")))?;
    let mut dep_out = BufReader::new(dep.stdout.take().expect("piped"));
    let mut first = String::new();
    let _ = dep_out.read_line(&mut first);
    if !first.starts_with("listening") {
        let _ = dep.kill();
        let _ = dep.wait();
        return Err(Failure::file(format!(
            "the dependency did not start: {}",
            first.trim()
        )));
    }
    let mut dep_in = dep.stdin.take();

    let mut instances: Vec<Instance> = Vec::new();
    let mut phases: Vec<Phase> = Vec::new();
    let mut dependency_rss_kib = 0;
    let stats = |name: &str| -> u64 {
        limiters
            .iter()
            .filter_map(|l| l.limit(name).ok())
            .map(|l| l.stats().denied)
            .sum()
    };
    let spawn = |number: u32| -> Result<Instance, Failure> {
        let python_one = python.filter(|(_, share)| number % 10 < *share);
        let mut cmd = match python_one {
            Some((p, _)) => {
                let mut c = Command::new("python3");
                // The package sits next to the script (sys.path[0]).
                c.arg(&p.script);
                c
            }
            None => {
                let mut c = Command::new(&exe);
                c.arg("demo-worker");
                c
            }
        };
        if on {
            cmd.arg("--file").arg(&files[number as usize % files.len()]);
        }
        let mut child = cmd
            .arg("--socket")
            .arg(&socket)
            .args(["--instance", &number.to_string()])
            .args(["--requests-per-second", &REQUESTS_PER_SECOND.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::file(format!("cannot start instance {number}: {e}")))?;
        Ok(Instance {
            number,
            kind: if python_one.is_some() {
                Kind::Python
            } else {
                Kind::Rust
            },
            stdin: child.stdin.take(),
            child,
            peak_rss_kib: 0,
            ended: None,
            counters: Vec::new(),
        })
    };
    let mut next_number = 0u32;
    let run_start = MonotonicClock.now_ns();
    for (i, (label, action)) in PHASES.iter().enumerate() {
        let start_ns = run_start + i as u64 * phase_ns;
        let now = MonotonicClock.now_ns();
        if start_ns > now {
            std::thread::sleep(Duration::from_nanos(start_ns - now));
        }
        let rejected_before = (stats("intake"), stats("clients"));
        match *action {
            Action::Start(n) | Action::Grow(n) => {
                let live = instances.iter().filter(|i| i.ended.is_none()).count();
                for _ in live..n {
                    instances.push(spawn(next_number)?);
                    next_number += 1;
                }
            }
            Action::Shrink { remove, kill } => {
                let live: Vec<usize> = (0..instances.len())
                    .filter(|&i| instances[i].ended.is_none())
                    .collect();
                // Kill the most recent ones, remove the ones before them.
                for &i in live.iter().rev().take(kill) {
                    let inst = &mut instances[i];
                    if let Some(rss) = rss_kib(inst.child.id()) {
                        inst.peak_rss_kib = inst.peak_rss_kib.max(rss);
                    }
                    let _ = inst.child.kill();
                    let _ = inst.child.wait();
                    inst.ended = Some("SIGKILLed");
                }
                for &i in live.iter().rev().skip(kill).take(remove) {
                    let inst = &mut instances[i];
                    inst.stdin = None;
                    inst.ended = Some("removed");
                }
            }
            Action::Fail(pct) => {
                if let Some(d) = dep_in.as_mut() {
                    let _ = writeln!(d, "fail {pct}");
                    let _ = d.flush();
                }
            }
        }
        // Sample memory until the phase ends.
        let end_ns = start_ns + phase_ns;
        loop {
            for inst in instances.iter_mut().filter(|i| i.ended.is_none()) {
                if let Some(rss) = rss_kib(inst.child.id()) {
                    inst.peak_rss_kib = inst.peak_rss_kib.max(rss);
                }
            }
            if let Some(rss) = rss_kib(dep.id()) {
                dependency_rss_kib = dependency_rss_kib.max(rss);
            }
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                for inst in instances.iter_mut() {
                    let _ = inst.child.kill();
                    let _ = inst.child.wait();
                }
                let _ = dep.kill();
                let _ = dep.wait();
                return Err(Failure::file(
                    "interrupted (Ctrl-C or SIGTERM): every process of the run was stopped; run it again to see the tables",
                ));
            }
            let now = MonotonicClock.now_ns();
            if now >= end_ns {
                break;
            }
            std::thread::sleep(Duration::from_nanos((end_ns - now).min(200_000_000)));
        }
        phases.push(Phase {
            label,
            start_ns,
            end_ns: MonotonicClock.now_ns(),
            instances: instances.iter().filter(|i| i.ended.is_none()).count(),
            deadline_rejected: stats("intake") - rejected_before.0,
            client_limited: stats("clients") - rejected_before.1,
        });
    }
    // The end: every instance still running is removed; then the dependency stops.
    for inst in instances.iter_mut() {
        if inst.ended.is_none() {
            inst.ended = Some("ran to the end");
        }
        inst.stdin = None;
    }
    let mut failed = Vec::new();
    for inst in instances.iter_mut() {
        let mut text = String::new();
        if let Some(out) = inst.child.stdout.as_mut() {
            let _ = std::io::Read::read_to_string(out, &mut text);
        }
        let status = inst.child.wait();
        if inst.ended != Some("SIGKILLed") && !matches!(&status, Ok(s) if s.success()) {
            failed.push(format!(
                "instance {} ({:?}) ended with {status:?}",
                inst.number, inst.kind
            ));
        }
        if let Some(line) = text.lines().rev().find(|l| l.starts_with("counters")) {
            if let Some(c) = parse_counters(line) {
                if let Some(rss) = c.iter().find(|(k, _)| k == "rss_kib").map(|(_, v)| *v) {
                    inst.peak_rss_kib = inst.peak_rss_kib.max(rss);
                }
                inst.counters = c;
            }
        }
    }
    drop(dep_in);
    let mut summary = String::new();
    let _ = std::io::Read::read_to_string(&mut dep_out, &mut summary);
    let status = dep.wait();
    if !matches!(&status, Ok(s) if s.success()) {
        return Err(Failure::file(format!(
            "the dependency ended with {status:?}"
        )));
    }
    let arrivals = dependency::read_record(&record).map_err(Failure::file)?;
    let mut phase_text = String::new();
    for p in &phases {
        let _ = writeln!(
            phase_text,
            "{} {} {} {}",
            p.start_ns, p.end_ns, p.instances, p.label
        );
    }
    let _ = std::fs::write(dir.join(format!("phases-{tag}.txt")), phase_text);
    let shares = shares_at_start
        .map(|start| format!("{}\n    at the end:   {}", start, fleet::shares(&limiters)));
    let redis_url = fleet.as_ref().map(|f| f.url.clone());
    let fleet_rss_kib = fleet.as_ref().map(|f| f.rss_kib());
    drop(fleet);
    drop(limiters);
    Ok(Run {
        budget_on: on,
        hosts,
        shares,
        redis_url,
        failed,
        fleet_rss_kib,
        phases,
        arrivals,
        instances,
        dependency_rss_kib,
        dependency_summary: summary,
    })
}

/// The tightest window of a token bucket's admissions against its bound, over every pair of
/// admissions: (count, bound) of the window with the largest excess, and whether every window
/// is within. `dates` are `(t0, t1)` brackets; `allowance_ns` widens every span (the arrival
/// delay), 0 for send dates.
pub fn fullest_window(
    dates: &mut [(u64, u64)],
    rate: u64,
    burst: u64,
    allowance_ns: u64,
    slack: u64,
) -> (u64, u64, bool) {
    dates.sort_unstable();
    // The library rounds the emission interval up: never more than the rate. Across a fleet
    // the hosts' rates add up to at most the total: `B + slack + floor(r T)`.
    let emission = SECOND_NS.div_ceil(rate);
    let bound_of = |span: u64| {
        if slack == 0 {
            burst + span / emission
        } else {
            burst + slack + (u128::from(span) * u128::from(rate) / u128::from(SECOND_NS)) as u64
        }
    };
    let mut worst: (u64, u64) = (0, burst + slack);
    let mut worst_excess = i128::MIN;
    for i in 0..dates.len() {
        let mut top = 0;
        for (j, d) in dates.iter().enumerate().skip(i) {
            top = top.max(d.1);
            let count = (j - i + 1) as u64;
            let bound = bound_of(top - dates[i].0 + allowance_ns);
            let excess = count as i128 - bound as i128;
            if excess > worst_excess {
                worst_excess = excess;
                worst = (count, bound);
            }
        }
    }
    (worst.0, worst.1, worst_excess <= 0)
}

impl Run {
    /// What the fleet adds to every bound: the hosts' capacities add up to at most `B + hosts`,
    /// plus one token of rounding per host (0 on one host).
    fn slack(&self) -> u64 {
        if self.hosts > 1 {
            2 * u64::from(self.hosts)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fullest_window_finds_a_window_over_the_bound() {
        // 10/s burst 2 (emission 100 ms): three sends at once fill it past its burst.
        let ms = 1_000_000;
        let mut ok = vec![
            (0, 10),
            (1, 11),
            (100 * ms, 100 * ms + 5),
            (200 * ms, 200 * ms),
        ];
        // Two at once, then one every 100 ms: the bound is reached, not passed.
        let (count, bound, within) = fullest_window(&mut ok, 10, 2, 0, 0);
        assert!(within && count == bound, "{count} of {bound}");
        let mut over = vec![(0, 10), (1, 11), (2, 12)];
        let (count, bound, within) = fullest_window(&mut over, 10, 2, 0, 0);
        assert_eq!((count, bound, within), (3, 2, false));
        // A fleet's slack admits it; an allowance of 100 ms too.
        assert!(fullest_window(&mut over, 10, 2, 0, 2).2);
        assert!(fullest_window(&mut over, 10, 2, 100 * ms, 0).2);
    }

    #[test]
    fn a_late_admission_widens_only_its_own_windows() {
        // The bracket of the second send ends late: its window is measured to that end.
        let ms = 1_000_000;
        let mut dates = vec![(0, 1), (2, 150 * ms), (3, 4)];
        let (_, _, within) = fullest_window(&mut dates, 10, 2, 0, 0);
        assert!(within, "3 sends within [0, 150 ms] are allowed 2 + 1");
    }
}
