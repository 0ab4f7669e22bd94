//! One run of the scenario, budget on or off: its limiter files (and fleet agents), the
//! dependency, and the instances through the five phases, sampled for memory, until every
//! process has ended and the dependency's record of arrivals is read.

use super::*;

/// What happens at the start of a phase.
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
    Start(usize),
    Grow(usize),
    Shrink { remove: usize, kill: usize },
    Fail(u32),
}

pub(super) const PHASES: [(&str, Action); 5] = [
    ("start: 10 instances", Action::Start(10)),
    ("scale up to 20", Action::Grow(20)),
    ("scale up to 40", Action::Grow(40)),
    ("remove 5, SIGKILL 5", Action::Shrink { remove: 5, kill: 5 }),
    ("retry storm: 60% fail", Action::Fail(STORM_FAIL_PERCENT)),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Rust,
    Python,
}

/// One instance process.
pub(super) struct Instance {
    pub(super) number: u32,
    pub(super) kind: Kind,
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) peak_rss_kib: u64,
    pub(super) ended: Option<&'static str>,
    pub(super) counters: Vec<(String, u64)>,
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
pub(super) struct Run {
    pub(super) budget_on: bool,
    /// Hosts sharing the budget through the fleet agent (1: one limiter file, no agent).
    pub(super) hosts: u32,
    /// The shares the agents applied at the start and at the end.
    pub(super) shares: Option<String>,
    pub(super) redis_url: Option<String>,
    /// Instances that ended with an error (their messages went to standard error).
    pub(super) failed: Vec<String>,
    /// The fleet agents' and the private redis-server's resident memory at the end (KiB).
    pub(super) fleet_rss_kib: Option<(Vec<u64>, Option<u64>)>,
    pub(super) phases: Vec<Phase>,
    pub(super) arrivals: Vec<Arrival>,
    pub(super) instances: Vec<Instance>,
    pub(super) dependency_rss_kib: u64,
    pub(super) dependency_summary: String,
}

pub(super) fn run_once(
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
    let (mut dep, mut dep_out, mut dep_in) = start_dependency(&exe, &socket, &record)?;

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
            Action::Shrink { remove, kill } => shrink(&mut instances, remove, kill),
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
            sample_memory(&mut instances, &dep, &mut dependency_rss_kib);
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
    let failed = finish_instances(&mut instances);
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

/// The instances leaving in a phase: the `kill` most recent live ones are SIGKILLed (their peak
/// memory read first), the `remove` before them removed (their input closed).
fn shrink(instances: &mut [Instance], remove: usize, kill: usize) {
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

/// Raise every live instance's and the dependency's peak resident memory to what it is now.
fn sample_memory(instances: &mut [Instance], dep: &Child, dependency_rss_kib: &mut u64) {
    for inst in instances.iter_mut().filter(|i| i.ended.is_none()) {
        if let Some(rss) = rss_kib(inst.child.id()) {
            inst.peak_rss_kib = inst.peak_rss_kib.max(rss);
        }
    }
    if let Some(rss) = rss_kib(dep.id()) {
        *dependency_rss_kib = (*dependency_rss_kib).max(rss);
    }
}

/// Start the dependency (`demo-dependency`) on `socket`, recording every arrival in `record`,
/// and wait until it listens: the process, its output (a summary at the end) and its input
/// (where `fail N` changes its failure rate; closing it stops the dependency).
fn start_dependency(
    exe: &Path,
    socket: &Path,
    record: &Path,
) -> Result<(Child, BufReader<ChildStdout>, Option<ChildStdin>), Failure> {
    start_dependency_with(
        exe,
        socket,
        record,
        &[
            format!("--service-ms={SERVICE_MS}"),
            format!("--fail-percent={FAIL_PERCENT}"),
            format!("--capacity={DEPENDENCY_CAPACITY}"),
        ],
    )
}

/// Start `demo-dependency` on `socket` with these flags, and wait until it listens.
pub(super) fn start_dependency_with(
    exe: &Path,
    socket: &Path,
    record: &Path,
    flags: &[String],
) -> Result<(Child, BufReader<ChildStdout>, Option<ChildStdin>), Failure> {
    let mut dep = Command::new(exe)
        .arg("demo-dependency")
        .arg("--socket")
        .arg(socket)
        .arg("--record")
        .arg(record)
        .args(flags)
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
    let dep_in = dep.stdin.take();
    Ok((dep, dep_out, dep_in))
}

/// Remove every instance still running (close its input) and wait for all of them; read each
/// one's last counters and peak memory. Returns the instances that ended with an error
/// (SIGKILLed ones are expected to).
fn finish_instances(instances: &mut [Instance]) -> Vec<String> {
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
    failed
}

impl Run {
    /// What the fleet adds to every bound: the hosts' capacities add up to at most `B + hosts`,
    /// plus one token of rounding per host (0 on one host).
    pub(super) fn slack(&self) -> u64 {
        if self.hosts > 1 {
            2 * u64::from(self.hosts)
        } else {
            0
        }
    }
}
