//! `demo --scenario dependency`: the shared-dependency scenario, end to end, measured where the
//! calls arrive.
//!
//! A stand-in dependency (`demo-dependency`, its own process) accepts 300 calls/s, takes 40 ms
//! per call and fails 20% of them. Service instances (`demo-worker` processes, a share of them
//! Python processes of the package ffi/python) take requests from their generators, fan each
//! out into one call per item, retry failures with backoff, and protect the dependency with one
//! budget in one limiter file: 240 sends/s in total, of which at most 200 first attempts and
//! 40 retries, checked all or nothing immediately before every attempt, plus a limit of calls in
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

mod adaptive;
mod chart;
mod fleet;
mod phases;
mod report;
mod setup;
mod window;

use phases::*;
use report::*;
use setup::*;
use window::*;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
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
    /// 8 workers under one shared adaptive concurrency limit, against the same algorithm per
    /// process and a fixed limit, while the dependency's knee moves 32 -> 12 -> 48
    Adaptive,
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
    /// Write the adaptive scenario's figures here as JSON (`--scenario adaptive`)
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// How many instances in every ten are Python processes (the package ffi/python); 0 for
    /// Rust only. Needs python3 and the package's compiled module built with this binary
    /// (PYO3_BUILD_EXTENSION_MODULE=1 cargo build -p shmlimit-python), or the package installed
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
            (self.json.is_some(), "--json"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// The run's directory: `--keep`'s new directory, or a fresh temporary one.
fn scratch(keep: Option<&PathBuf>, prefix: &str) -> Result<Scratch, Failure> {
    match keep {
        Some(path) => {
            std::fs::create_dir(path).map_err(|e| {
                Failure::file(format!(
                    "{}: cannot create the directory for --keep: {e} (it must not exist yet)",
                    path.display()
                ))
            })?;
            Ok(Scratch::kept(path.clone()))
        }
        None => Scratch::fresh(prefix)
            .map_err(|why| Failure::file(format!("{why}; set TMPDIR or pass --keep"))),
    }
}

pub fn run(args: ScenarioArgs) -> Result<(), Failure> {
    if !(args.phase_seconds >= 0.5 && args.phase_seconds <= 600.0) {
        return Err(Failure::config(format!(
            "--phase-seconds: must be at least 0.5 and at most 600 (got {})",
            args.phase_seconds
        )));
    }
    if args.scenario == Some(Scenario::Adaptive) {
        return adaptive::run(&args);
    }
    if args.json.is_some() {
        return Err(Failure::config("--json is for --scenario adaptive"));
    }
    let dir = scratch(args.keep.as_ref(), "shmlimit-scenario")?;
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
