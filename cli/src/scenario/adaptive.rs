//! `demo --scenario adaptive`: one adaptive concurrency limit shared by every worker process,
//! against the same algorithm in each process alone and a fixed limit, in front of a dependency
//! whose concurrency knee moves.
//!
//! A stand-in dependency (`demo-dependency --knee K`, its own process) serves 20 ms calls, at
//! most `K` at once: its latency is flat up to `K` calls in flight and grows with the queue
//! past it. Eight worker processes (`demo-adaptive-worker`, 24 callers each; with `--python N`,
//! workers 0 to N-1 are Python processes, cli/src/adaptive_worker.py over the package
//! ffi/python) call it as fast as their limit permits. The knee moves 32 -> 12 -> 48, one phase each; three arms run one after
//! the other, each with its own dependency and file:
//!
//! - `shared`: one [`AdaptiveConcurrency`] limit in the file, every worker's samples pooled;
//! - `per_process`: the same algorithm, one limit per worker (each learning alone, from an
//!   eighth of the samples, as in-process libraries do);
//! - `fixed`: a fixed [`Concurrency`] limit of 32 (right for the first knee only).
//!
//! Measured from every call the workers made (`start`, `end`, at the caller): per phase and arm,
//! the mean calls in flight at the dependency (time-weighted) against the knee, p50 and p99
//! latency, goodput (ok calls per second) and the seconds until the in-flight count, in 250 ms
//! bins, stays within 25% of the knee to the end of the phase. The shared arm must keep its
//! mean within 25% of the knee in every phase, converge within 5 s and keep the p99 of the calls
//! started once converged within twice the unloaded latency: otherwise the exit code is 3. (The
//! calls admitted in the moments after the knee falls, before their own slow answers reach the
//! limit, queue whatever the limit does: the whole phase's p99 is printed too.)
//!
//! The adaptive limits use smoothing 0.5 (the default is 0.2): windows of 20 ms with calls of
//! 20 ms, and a faster answer to a falling knee.

mod measure;

use super::*;
use measure::{Arm, Call, PhaseResult};
use shmlimit::AdaptiveConcurrency;

/// The phases: their names and knees.
pub(super) const KNEES: [(&str, u32); 3] = [("knee 32", 32), ("knee 12", 12), ("knee 48", 48)];
const WORKERS: u32 = 8;
const CALLERS: u32 = 24;
const SERVICE_MS: u64 = 20;
const FIXED: u64 = 32;

/// The shared limit, and each worker's own in the per-process arm.
fn shared_limit() -> AdaptiveConcurrency {
    AdaptiveConcurrency::new(4, 128).initial(8).smoothing(0.5)
}

fn own_limit() -> AdaptiveConcurrency {
    AdaptiveConcurrency::new(1, CALLERS as u64).smoothing(0.5)
}

pub(super) fn run(args: &ScenarioArgs) -> Result<(), Failure> {
    let dir = scratch(args.keep.as_ref(), "shmlimit-adaptive")?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::file(format!("cannot find this binary: {e}")))?;
    let phase_ns = (args.phase_seconds * 1e9) as u64;
    let stop = shmlimit_fleet::cli::stop_on_signals();
    let mut unloaded_ms = None;
    let mut results: Vec<(Arm, Vec<PhaseResult>)> = Vec::new();
    let python = match args.python {
        0 => None,
        _ => match python_setup(dir.path()) {
            Ok(p) => Some(p),
            Err(why) => {
                println!("note: Rust workers only ({why})\n");
                None
            }
        },
    };
    let python_workers = python.as_ref().map_or(0, |_| args.python.min(WORKERS));
    match &python {
        Some(p) => println!(
            "workers: {WORKERS} processes, {python_workers} of them Python ({}), {CALLERS} callers each\n",
            p.package
        ),
        None => println!("workers: {WORKERS} Rust processes, {CALLERS} callers each\n"),
    }
    let python = python.as_ref().map(|p| (p, python_workers));
    for arm in [Arm::Shared, Arm::PerProcess, Arm::Fixed] {
        let (phases, calls, unloaded, by_python) =
            run_arm(&exe, dir.path(), arm, phase_ns, python, stop)?;
        if python_workers > 0 {
            println!(
                "{} arm: {} calls, {by_python} of them by the Python workers",
                arm.key(),
                calls.len()
            );
        }
        unloaded_ms.get_or_insert(unloaded);
        // The adaptive arms' re-measures of the RTT (the same schedule for every limit here).
        let probe = match arm {
            Arm::Fixed => None,
            _ => Some(
                Limiter::open(dir.path().join(format!("adaptive-{}.shm", arm.key())))
                    .and_then(|l| {
                        let name = l.definitions()[0].name.clone();
                        l.adaptive_concurrency(&name)
                    })
                    .map_err(|e| Failure::library(e, dir.path()))?,
            ),
        };
        let remeasure = |a: u64, b: u64| {
            probe.as_ref().is_some_and(|p| {
                (a..b)
                    .step_by(5_000_000)
                    .any(|t| p.remeasuring_at(t).unwrap_or(false))
            })
        };
        results.push((arm, measure::phases(&phases, &calls, &remeasure)));
    }
    if python_workers > 0 {
        println!();
    }
    let unloaded_ms = unloaded_ms.unwrap_or(SERVICE_MS as f64);
    let (text, missed) = measure::report(&results, unloaded_ms, args.phase_seconds);
    print!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, measure::json(&results, unloaded_ms))
            .map_err(|e| Failure::file(format!("{}: cannot write --json: {e}", path.display())))?;
        println!("json: {}", path.display());
    }
    match measure::chart(&args.chart, &results) {
        Ok(()) => println!(
            "chart: {} (calls in flight at the dependency per 250 ms)",
            args.chart.display()
        ),
        Err(e) => println!("chart: not written: {e}"),
    }
    if !dir.removed() {
        println!("kept: {}", dir.path().display());
    }
    match missed.first() {
        Some(first) => Err(Failure::bound(format!(
            "the shared adaptive limit missed its targets: {first}{}",
            if missed.len() > 1 {
                format!(" (and {} more)", missed.len() - 1)
            } else {
                String::new()
            }
        ))),
        None => Ok(()),
    }
}

/// One arm as it ran: each phase's start and end (ns), every call, the unloaded latency (ms),
/// the calls the Python workers made.
type ArmRun = (Vec<(u64, u64)>, Vec<Call>, f64, usize);

/// One arm through the three phases.
fn run_arm(
    exe: &Path,
    dir: &Path,
    arm: Arm,
    phase_ns: u64,
    python: Option<(&setup::PythonSetup, u32)>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<ArmRun, Failure> {
    let tag = arm.key();
    let file = dir.join(format!("adaptive-{tag}.shm"));
    let mut builder = Limiter::builder();
    builder = match arm {
        Arm::Shared => builder.limit("dep", shared_limit()),
        Arm::PerProcess => {
            (0..WORKERS).fold(builder, |b, w| b.limit(&format!("dep-{w}"), own_limit()))
        }
        Arm::Fixed => builder.limit("dep", Concurrency::new(FIXED)),
    };
    builder
        .create_or_open(&file)
        .map_err(|e| Failure::library(e, &file))?;
    let socket = dir.join(format!("dependency-{tag}.sock"));
    let record = dir.join(format!("arrivals-{tag}.txt"));
    let flags = [
        format!("--service-ms={SERVICE_MS}"),
        "--fail-percent=0".to_owned(),
        "--capacity=1000000000".to_owned(),
        format!("--knee={}", KNEES[0].1),
    ];
    let (mut dep, _dep_out, mut dep_in) =
        phases::start_dependency_with(exe, &socket, &record, &flags)?;
    let unloaded = unloaded_latency_ms(&socket);
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let limit = match arm {
            Arm::PerProcess => format!("dep-{w}"),
            _ => "dep".to_owned(),
        };
        let mut command = match python {
            Some((p, n)) if w < n => {
                let mut c = Command::new("python3");
                // The package sits next to the script (sys.path[0]), unless installed.
                c.arg(&p.adaptive_script);
                c
            }
            _ => {
                let mut c = Command::new(exe);
                c.arg("demo-adaptive-worker");
                c
            }
        };
        let child = command
            .arg("--file")
            .arg(&file)
            .args(["--limit", &limit])
            .arg("--socket")
            .arg(&socket)
            .args([
                "--instance",
                &w.to_string(),
                "--threads",
                &CALLERS.to_string(),
            ])
            .arg("--record")
            .arg(dir.join(format!("calls-{tag}-{w}.txt")))
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::file(format!("cannot start worker {w}: {e}")))?;
        workers.push(child);
    }
    let mut phases = Vec::new();
    for (i, &(_, knee)) in KNEES.iter().enumerate() {
        if i > 0 {
            if let Some(input) = dep_in.as_mut() {
                let _ = writeln!(input, "knee {knee}");
                let _ = input.flush();
            }
        }
        let start = MonotonicClock.now_ns();
        while MonotonicClock.now_ns() < start + phase_ns
            && !stop.load(std::sync::atomic::Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        phases.push((start, MonotonicClock.now_ns()));
    }
    let mut calls = Vec::new();
    let mut by_python = 0;
    for (w, mut child) in workers.into_iter().enumerate() {
        drop(child.stdin.take());
        let _ = child.wait();
        let path = dir.join(format!("calls-{tag}-{w}.txt"));
        let these = measure::read_calls(&path).map_err(Failure::file)?;
        if python.is_some_and(|(_, n)| (w as u32) < n) {
            by_python += these.len();
        }
        calls.extend(these);
    }
    drop(dep_in.take());
    let _ = dep.wait();
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Failure::file("interrupted"));
    }
    Ok((phases, calls, unloaded, by_python))
}

/// The median of 20 calls made one at a time, ms: the dependency's latency with nothing queued.
fn unloaded_latency_ms(socket: &Path) -> f64 {
    let Ok(stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return SERVICE_MS as f64;
    };
    let Ok(mut writer) = stream.try_clone() else {
        return SERVICE_MS as f64;
    };
    let mut reader = BufReader::new(stream);
    let mut times = Vec::new();
    for _ in 0..20 {
        let start = MonotonicClock.now_ns();
        let mut answer = String::new();
        if writeln!(writer, "call f 999 {start} {start}").is_err()
            || reader.read_line(&mut answer).is_err()
        {
            break;
        }
        times.push((MonotonicClock.now_ns() - start) as f64 / 1e6);
    }
    times.sort_by(f64::total_cmp);
    times
        .get(times.len() / 2)
        .copied()
        .unwrap_or(SERVICE_MS as f64)
}
