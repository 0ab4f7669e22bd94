//! `demo`: worker processes share one token bucket and one exact sliding log through one file,
//! and the totals are checked against the bound each algorithm guarantees.
//!
//! # How the bounds are measured
//!
//! Each worker reads the clock before and after every decision, so every admission it makes is
//! dated (by the library's own clock read inside the decision) between two of its readings. The
//! interval `T` of a limit runs from the earliest reading before a first admission to the latest
//! reading after a last admission, over all workers: it contains every admission's date.
//!
//! - Token bucket (capacity `B`, one token every `e` ns, starting full): at most
//!   `B + floor(T / e)` admissions in any interval of length `T`, which is `floor(B + r T)` for
//!   the configured rate `r` (the library rounds `e` up, so never more).
//! - Sliding log (`L` per window `W`): at most `L` in any `(t - W, t]`; a closed interval of
//!   length `T` is covered by `floor(T / W) + 1` such windows (that is `ceil(T / W)` unless `T`
//!   is an exact multiple), so at most `L` times that. The log dates entries in 1024 ns units,
//!   rounded up, so its interval is taken 1024 ns longer at the end.
//!
//! Workers report through a pipe, one text line each (see [`WorkerReport`]): a worker written in
//! another language can take part by writing the same line.

mod mixed;
mod report;

use report::*;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use clap::Args;
use nix::fcntl::OFlag;
use nix::sys::signal::{kill, signal, SigHandler, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, pipe2, ForkResult, Pid};
use shmlimit::{Algorithm, Clock, IntoAlgorithm, Limiter, MonotonicClock, SlidingLog, TokenBucket};

use crate::render::{self, per_second, thousands, Table};
use crate::scratch::Scratch;
use crate::{config, Failure};

/// The name of the shared token bucket in the demo file.
const BUCKET: &str = "bucket";
/// The name of the shared sliding log in the demo file.
const LOG: &str = "log";
/// The sliding log's time unit: entry dates are rounded up to it.
const LOG_TIME_UNIT_NS: u64 = 1024;

#[derive(Args)]
#[command(
    about = "Fork workers that hammer one shared token bucket and sliding log; check the bounds",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit demo\n",
        "  shmlimit demo --workers 4 --seconds 1 --rate 200/s --burst 10 --log-limit 50 --log-window 250ms\n",
        "  shmlimit demo --mixed      # half the workers are C processes (needs cc and libshmlimit.so)\n",
        "  shmlimit demo --scenario dependency   # instances, retries and a slow dependency (below)\n\n",
        "Every worker opens the limiter file by path and alternates try_acquire(1) on both limits as\n",
        "fast as it can. The table shows each process's admissions, the totals, and the most each\n",
        "algorithm may ever admit over the measured interval T:\n",
        "  token bucket  floor(B + r*T)   a full bucket plus what refills in T\n",
        "  sliding log   L * ceil(T/W)    at most L in any window W, and ceil(T/W) windows cover T\n",
        "The exit code is 3 if any total is above its bound.\n\n",
        "--scenario dependency runs the shared-dependency scenario instead: a stand-in dependency\n",
        "(300/s, 40 ms per call, 20% failures) and 10 to 40 instances (separate processes, some in\n",
        "Python) that fan requests out into calls and retry, under one budget of 240/s (200 first\n",
        "attempts + 40 retries) checked before every attempt. It prints, per phase, what arrived at\n",
        "the dependency against the bounds, checks every window, reports each process's memory and\n",
        "writes an SVG chart of arrivals per second (--budget both adds the run without a limiter;\n",
        "--hosts 3 puts the instances on 3 hosts sharing the budget through the fleet agent and Redis).\n",
        "About 5 x --phase-seconds per run; the exit code is 3 if a bound was exceeded.\n\n",
        exit_codes!()
    )
)]
pub struct DemoArgs {
    /// Worker processes to fork
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: u32,
    /// How long each worker runs, in seconds (fractions allowed)
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Create the limiter file here and keep it (default: a fresh temporary directory under
    /// /dev/shm or $TMPDIR, removed at the end)
    #[arg(long)]
    path: Option<PathBuf>,
    /// Refill rate of the shared token bucket: "1000/s", "100/min", "0.5/s"
    #[arg(long, default_value = "1000/s")]
    rate: String,
    /// Capacity of the shared token bucket
    #[arg(long, default_value_t = 100)]
    burst: u64,
    /// Admissions the shared sliding log allows in any window
    #[arg(long, default_value_t = 500)]
    log_limit: u64,
    /// The sliding log's window: "1s", "250ms"
    #[arg(long, default_value = "1s")]
    log_window: String,
    /// Make half the workers C processes (ffi/examples/worker.c, compiled now with cc against
    /// the libshmlimit.so next to this binary) that share the token bucket
    #[arg(long)]
    mixed: bool,
    #[command(flatten)]
    scenario: crate::scenario::ScenarioArgs,
}

/// What one worker did, as it reports it: `pid decisions admitted... start end` in
/// `CLOCK_MONOTONIC` ns, first/last bracket readings per limit (0 when it admitted nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct WorkerReport {
    /// Written in C (a `--mixed` worker on the bucket only), not part of the report line.
    c: bool,
    pid: u32,
    bucket_decisions: u64,
    bucket_admitted: u64,
    log_decisions: u64,
    log_admitted: u64,
    /// Clock reading before its first decision.
    start_ns: u64,
    /// Clock reading after its last decision.
    end_ns: u64,
    /// Reading before its first bucket admission, after its last one.
    bucket_first_ns: u64,
    bucket_last_ns: u64,
    /// Reading before its first log admission, after its last one.
    log_first_ns: u64,
    log_last_ns: u64,
}

impl WorkerReport {
    const FIELDS: usize = 11;

    fn line(&self) -> String {
        format!(
            "report {} {} {} {} {} {} {} {} {} {} {}\n",
            self.pid,
            self.bucket_decisions,
            self.bucket_admitted,
            self.log_decisions,
            self.log_admitted,
            self.start_ns,
            self.end_ns,
            self.bucket_first_ns,
            self.bucket_last_ns,
            self.log_first_ns,
            self.log_last_ns
        )
    }

    fn parse(line: &str) -> Result<WorkerReport, String> {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("report") => {}
            Some("error") => return Err(words.collect::<Vec<_>>().join(" ")),
            _ => return Err(format!("unreadable report {line:?}")),
        }
        let n: Vec<u64> = words
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("unreadable report {line:?}"))?;
        if n.len() != Self::FIELDS {
            return Err(format!("unreadable report {line:?}"));
        }
        Ok(WorkerReport {
            c: false,
            pid: u32::try_from(n[0]).map_err(|_| format!("bad pid in {line:?}"))?,
            bucket_decisions: n[1],
            bucket_admitted: n[2],
            log_decisions: n[3],
            log_admitted: n[4],
            start_ns: n[5],
            end_ns: n[6],
            bucket_first_ns: n[7],
            bucket_last_ns: n[8],
            log_first_ns: n[9],
            log_last_ns: n[10],
        })
    }

    fn decisions(&self) -> u64 {
        self.bucket_decisions + self.log_decisions
    }
}

/// The demo's two limits, validated from the flags.
#[derive(Debug, Clone, Copy)]
struct Limits {
    burst: u64,
    emission_ns: u64,
    log_limit: u64,
    window_ns: u64,
}

impl Limits {
    fn from_args(args: &DemoArgs) -> Result<Limits, Failure> {
        let rate =
            config::parse_rate(&args.rate).map_err(|p| Failure::config(format!("--rate: {p}")))?;
        TokenBucket::new(args.burst, rate)
            .into_algorithm(BUCKET)
            .map_err(|e| Failure::config(format!("--rate/--burst: {}", reason(e))))?;
        let window = config::parse_duration(&args.log_window)
            .map_err(|p| Failure::config(format!("--log-window: {p}")))?;
        SlidingLog::new(args.log_limit, window)
            .into_algorithm(LOG)
            .map_err(|e| Failure::config(format!("--log-limit/--log-window: {}", reason(e))))?;
        Ok(Limits {
            burst: args.burst,
            emission_ns: rate.emission_ns(),
            log_limit: args.log_limit,
            // Validated above: at most 2^60 ns.
            window_ns: window.as_nanos() as u64,
        })
    }

    fn bucket(&self) -> Algorithm {
        Algorithm::TokenBucket {
            capacity: self.burst,
            emission_ns: self.emission_ns,
        }
    }

    fn log(&self) -> Algorithm {
        Algorithm::SlidingLog {
            limit: self.log_limit,
            window_ns: self.window_ns,
        }
    }
}

fn reason(e: shmlimit::Error) -> String {
    match e {
        shmlimit::Error::InvalidParameter { reason, .. } => reason,
        other => other.to_string(),
    }
}

pub fn run(args: DemoArgs) -> Result<(), Failure> {
    if args.scenario.scenario.is_some() {
        if args.mixed {
            return Err(Failure::config(
                "--mixed is for the bucket and log demo; the scenario's Python share is --python",
            ));
        }
        return crate::scenario::run(args.scenario);
    }
    if let Some(flag) = args.scenario.set_flag() {
        return Err(Failure::config(format!(
            "{flag} is a scenario flag: add --scenario dependency"
        )));
    }
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        return Err(Failure::config(format!(
            "--seconds: must be more than 0 and at most 3600 (got {})",
            args.seconds
        )));
    }
    let run_ns = (args.seconds * 1e9).round() as u64;
    let limits = Limits::from_args(&args)?;

    let (path, scratch) = match &args.path {
        Some(path) => {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(Failure::file(format!(
                    "{}: exists; remove it or choose another path (the demo needs a fresh file)",
                    path.display()
                )));
            }
            (path.clone(), None)
        }
        None => {
            let s = Scratch::fresh("shmlimit-demo").map_err(|why| {
                Failure::file(format!(
                    "{why}; pass --path or set TMPDIR to a writable directory"
                ))
            })?;
            (s.path().join("demo.shm"), Some(s))
        }
    };
    let limiter = Limiter::builder()
        .limit(BUCKET, limits.bucket())
        .limit(LOG, limits.log())
        .create_or_open(&path)
        .map_err(|e| Failure::library(e, &path))?;

    let c_workers = if args.mixed { args.workers / 2 } else { 0 };
    // The C worker is built in the scratch directory, or with --path in a scratch directory of
    // its own: nothing is left beside the user's file.
    let c_build =
        match (&scratch, c_workers > 0) {
            (None, true) => Some(Scratch::fresh("shmlimit-demo-worker").map_err(|why| {
                Failure::file(format!("{why}; set TMPDIR to a writable directory"))
            })?),
            _ => None,
        };
    let c_program = match scratch.as_ref().or(c_build.as_ref()) {
        Some(dir) if c_workers > 0 => Some(mixed::compile(dir.path())?),
        _ => None,
    };
    let c_children = match &c_program {
        Some(program) => mixed::spawn(program, &path, c_workers, run_ns)?,
        None => Vec::new(),
    };
    let mut reports = run_workers(&path, args.workers - c_workers, run_ns)?;
    reports.extend(mixed::collect(c_children, &path)?);
    let summary = Summary::new(&reports, limits);
    let counters = (
        limiter
            .limit(BUCKET)
            .map_err(|e| Failure::library(e, &path))?
            .stats(),
        limiter
            .limit(LOG)
            .map_err(|e| Failure::library(e, &path))?
            .stats(),
    );
    let agree = counters.0.allowed == summary.bucket_admitted
        && counters.0.allowed + counters.0.denied == summary.bucket_decisions
        && counters.1.allowed == summary.log_admitted
        && counters.1.allowed + counters.1.denied == summary.log_decisions;

    print!(
        "{}",
        report(&args, &path, scratch.is_some(), &reports, &summary, agree)
    );
    drop(limiter);
    drop(scratch);
    if !summary.bucket_within() || !summary.log_within() {
        return Err(Failure::bound(
            "a limit admitted more than its guaranteed bound: this is a bug in shmlimit; please report it with this output",
        ));
    }
    if !agree {
        return Err(Failure::bound(
            "the file's decision counters disagree with the workers' own counts: this is a bug in shmlimit; please report it with this output",
        ));
    }
    Ok(())
}

/// Fork `workers` processes, start them together, and collect their reports.
fn run_workers(path: &Path, workers: u32, run_ns: u64) -> Result<Vec<WorkerReport>, Failure> {
    let os = |what: &str, e: nix::Error| Failure::file(format!("demo: {what} failed: {e}"));
    // Workers block reading this pipe; closing the write end starts them all at once.
    let (start_read, start_write) = pipe2(OFlag::O_CLOEXEC).map_err(|e| os("pipe", e))?;
    let mut children: Vec<(Pid, File)> = Vec::new();
    for _ in 0..workers {
        let (report_read, report_write) = match pipe2(OFlag::O_CLOEXEC) {
            Ok(pair) => pair,
            Err(e) => {
                stop(&children);
                return Err(os("pipe", e));
            }
        };
        // SAFETY: this process is single-threaded (the demo starts no threads), so the child
        // starts with a consistent copy of every lock and allocator state and may run ordinary
        // code; it never returns into the caller's code: `worker` ends in `_exit`.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                drop(start_write);
                drop(report_read);
                worker(path, start_read, report_write, run_ns)
            }
            Ok(ForkResult::Parent { child }) => {
                drop(report_write);
                children.push((child, File::from(report_read)));
            }
            Err(e) => {
                stop(&children);
                return Err(os("fork", e));
            }
        }
    }
    drop(start_read);
    // Ctrl-C now stops the workers (they keep the default action) but not this process, which
    // reaps them, reports the interruption and removes its temporary directory.
    // SAFETY: ignoring a signal installs no handler code, so nothing can run in signal context.
    if let Err(e) = unsafe { signal(Signal::SIGINT, SigHandler::SigIgn) } {
        stop(&children);
        return Err(os("ignoring SIGINT", e));
    }
    drop(start_write);

    let mut reports = Vec::with_capacity(children.len());
    let mut problems = Vec::new();
    let mut interrupted = false;
    for (pid, mut pipe) in children {
        let mut text = String::new();
        let read = pipe.read_to_string(&mut text);
        let status = waitpid(pid, None);
        match (read, WorkerReport::parse(text.trim())) {
            (Ok(_), Ok(report)) => reports.push(report),
            (Ok(_), Err(why)) => problems.push(format!("worker {pid}: {why} ({status:?})")),
            (Err(e), _) => problems.push(format!("worker {pid}: reading its report: {e}")),
        }
        match status {
            Ok(WaitStatus::Exited(_, 0)) => {}
            Ok(WaitStatus::Signaled(_, Signal::SIGINT, _)) => interrupted = true,
            Ok(status) => problems.push(format!("worker {pid} ended with {status:?}")),
            Err(e) => problems.push(format!("worker {pid}: waiting for it: {e}")),
        }
    }
    if interrupted {
        return Err(Failure::file(format!(
            "{}: the demo was interrupted (Ctrl-C); run it again to see the totals",
            path.display()
        )));
    }
    if let Some(first) = problems.first() {
        return Err(Failure::file(format!(
            "{}: {first}{}",
            path.display(),
            if problems.len() > 1 {
                format!(" (and {} more)", problems.len() - 1)
            } else {
                String::new()
            }
        )));
    }
    Ok(reports)
}

/// Kill and reap workers already forked when a later fork fails.
fn stop(children: &[(Pid, File)]) {
    for (pid, _) in children {
        let _ = kill(*pid, Signal::SIGKILL);
        let _ = waitpid(*pid, None);
    }
}

/// The body of one forked worker: never returns.
fn worker(path: &Path, start: OwnedFd, report: OwnedFd, run_ns: u64) -> ! {
    let outcome = std::panic::catch_unwind(|| hammer(path, start, run_ns));
    let (line, code) = match outcome {
        Ok(Ok(r)) => (r.line(), 0),
        Ok(Err(e)) => (format!("error {e}\n"), 1),
        Err(_) => ("error the worker panicked\n".to_owned(), 101),
    };
    let mut pipe = File::from(report);
    let _ = pipe.write_all(line.as_bytes());
    drop(pipe);
    // SAFETY: `_exit` has no preconditions. It ends the forked worker without running the
    // parent's exit handlers or destructors (such as the scratch directory's removal), which
    // belong to the parent alone.
    unsafe { libc::_exit(code) }
}

/// Open the file by path, wait for the start, then decide on both limits until the time is up.
fn hammer(path: &Path, start: OwnedFd, run_ns: u64) -> Result<WorkerReport, String> {
    let limiter = Limiter::open(path).map_err(|e| e.to_string())?;
    let bucket = limiter.token_bucket(BUCKET).map_err(|e| e.to_string())?;
    let log = limiter.sliding_log(LOG).map_err(|e| e.to_string())?;
    let mut start = File::from(start);
    let mut byte = [0u8; 1];
    // Returns 0 (end of file) once the parent closes its end: the start signal.
    let _ = start.read(&mut byte);
    drop(start);

    let clock = MonotonicClock;
    let mut r = WorkerReport {
        pid: std::process::id(),
        ..WorkerReport::default()
    };
    let mut t = clock.now_ns();
    r.start_ns = t;
    let deadline = t + run_ns;
    while t < deadline {
        let admitted = bucket
            .try_acquire(1)
            .map_err(|e| e.to_string())?
            .is_allowed();
        let after = clock.now_ns();
        r.bucket_decisions += 1;
        if admitted {
            if r.bucket_admitted == 0 {
                r.bucket_first_ns = t;
            }
            r.bucket_admitted += 1;
            r.bucket_last_ns = after;
        }
        t = after;
        let admitted = log.try_acquire(1).map_err(|e| e.to_string())?.is_allowed();
        let after = clock.now_ns();
        r.log_decisions += 1;
        if admitted {
            if r.log_admitted == 0 {
                r.log_first_ns = t;
            }
            r.log_admitted += 1;
            r.log_last_ns = after;
        }
        t = after;
    }
    r.end_ns = t;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_round_trip() {
        let r = WorkerReport {
            c: false,
            pid: 42,
            bucket_decisions: 10,
            bucket_admitted: 3,
            log_decisions: 10,
            log_admitted: 2,
            start_ns: 100,
            end_ns: 900,
            bucket_first_ns: 110,
            bucket_last_ns: 800,
            log_first_ns: 120,
            log_last_ns: 850,
        };
        assert_eq!(WorkerReport::parse(r.line().trim()), Ok(r));
        assert_eq!(
            WorkerReport::parse("error no such file"),
            Err("no such file".to_owned())
        );
        assert!(WorkerReport::parse("report 1 2").is_err());
    }

    #[test]
    fn bounds() {
        let limits = Limits {
            burst: 100,
            emission_ns: 1_000_000,
            log_limit: 500,
            window_ns: 1_000_000_000,
        };
        let r = WorkerReport {
            pid: 1,
            bucket_admitted: 3_100,
            log_admitted: 1_500,
            bucket_first_ns: 1_000_000_000,
            bucket_last_ns: 4_000_000_000,
            log_first_ns: 1_000_000_000,
            log_last_ns: 3_000_000_000,
            ..WorkerReport::default()
        };
        let s = Summary::new(&[r], limits);
        assert_eq!(s.bucket_bound, 3_100);
        // 2 s plus the log's rounding unit: three 1 s windows cover it.
        assert_eq!(s.log_windows, 3);
        assert_eq!(s.log_bound, 1_500);
        assert!(s.bucket_within() && s.log_within());
    }
}
