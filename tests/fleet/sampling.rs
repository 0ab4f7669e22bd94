//! What the scenarios observe and wait for: the admissions' dates gathered by a sink, the
//! applied shares sampled from every host's file, the split they converge to, the fence in the
//! agents' logs, and the figures printed against the stated bounds.

use super::*;

// ---------------------------------------------------------------------------------------------
// The sink and the sampler.

pub(crate) struct Sink {
    pub(crate) dates: Arc<Mutex<Vec<u64>>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Sink {
    pub(crate) fn start(path: &Path) -> Sink {
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
    pub(crate) fn snapshot(&self) -> Vec<u64> {
        let mut d = self.dates.lock().unwrap().clone();
        d.sort_unstable();
        d
    }

    pub(crate) fn finish(mut self) -> Vec<u64> {
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
pub(crate) struct Sample {
    pub(crate) at_ns: u64,
    pub(crate) shares: [u64; HOSTS],
}

impl Sample {
    pub(crate) fn sum(&self) -> u64 {
        self.shares.iter().sum()
    }
}

pub(crate) struct Sampler {
    pub(crate) samples: Arc<Mutex<Vec<Sample>>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
    /// The scenario's Redis URL and directory, for [`diagnose`] when a step fails.
    pub(crate) scene: Mutex<Option<(String, PathBuf)>>,
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
    pub(crate) fn start(limits: Vec<Limit>) -> Sampler {
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
    pub(crate) fn scene(&self, url: String, dir: &Path) {
        *self.scene.lock().unwrap() = Some((url, dir.to_path_buf()));
    }

    pub(crate) fn diagnose(&self) -> String {
        match &*self.scene.lock().unwrap() {
            Some((url, dir)) => diagnose(url, dir),
            None => String::new(),
        }
    }

    pub(crate) fn since(&self, t_ns: u64) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.at_ns >= t_ns)
            .cloned()
            .collect()
    }

    pub(crate) fn finish(mut self) -> Vec<Sample> {
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
pub(crate) fn expected(live: &[usize], reserved: &[usize]) -> [u64; HOSTS] {
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
pub(crate) fn converged(s: &Sample, e: &[u64; HOSTS]) -> bool {
    s.shares
        .iter()
        .zip(e)
        .all(|(&a, &x)| a <= x && x - a <= TOTAL_UNITS / 1000)
}

pub(crate) struct Transition {
    pub(crate) name: String,
    converge_ms: f64,
    /// Mean of applied / total from the change to convergence.
    utilization: f64,
}

/// Print a scenario's transitions (`fleet: figure: NAME | ms | utilization`) and how long it
/// took: the lines the figures of docs/fleet.md are read from.
pub(crate) fn print_figures(scenario: &str, transitions: &[Transition], t0: Instant) {
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
pub(crate) fn fmt_shares(s: &[u64; HOSTS]) -> String {
    let v: Vec<String> = s.iter().map(|&u| share::fmt_units(u)).collect();
    format!("[{}]", v.join(", "))
}

/// What a failed step needs to be understood: the server's view of the fleet (each member's
/// reported demand, target, grant and applied share), what each agent logged last (its share
/// changes with their reasons), and anything a worker wrote (a worker writes only when its
/// decisions fail, and then it has stopped: its host's demand falls to nothing).
pub(crate) fn diagnose(url: &str, dir: &Path) -> String {
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
pub(crate) fn assert_workers_run(workers: &mut [Child], sampler: &Sampler) {
    for (i, w) in workers.iter_mut().enumerate() {
        if let Some(status) = w.try_wait().unwrap() {
            panic!("worker {i} exited early ({status}){}", sampler.diagnose());
        }
    }
}

/// How long a step waits for the split before it gives up: far beyond any stated bound, so
/// that a failure says whether the split came late (the bound is then asserted) or never.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(30);

/// Wait (bounded) until the applied shares match `live`'s split; record the time it took.
pub(crate) fn await_split(
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
pub(crate) fn await_shares(
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

pub(crate) fn hold(d: Duration) {
    std::thread::sleep(d);
}

pub(crate) fn status(url: &str) -> fleet::FleetStatus {
    fleet::status(url, FLEET).unwrap()
}

/// The wall times (ms) at which an agent logged a fence.
pub(crate) fn fences(log: &Path) -> Vec<u64> {
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
pub(crate) fn await_fence_log(log: &Path, before: usize, who: &str, sampler: &Sampler) -> Vec<u64> {
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
pub(crate) fn deadline_wall_ms(l: &Limit) -> u64 {
    let lease = l.fleet_lease().unwrap().expect("a fleet-managed limit");
    let wall_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    let wall = wall_now - (lease.now_ns as i128 - lease.deadline_ns as i128);
    (wall / 1_000_000) as u64
}

/// Poll the status until `killed` members' leases have ended; return the last lease expiry seen
/// for each (server ms) and check on every poll that the survivors never held the killed
/// members' grants before those leases ended.
pub(crate) fn watch_kill(url: &str, killed: &[usize]) -> u64 {
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

/// The most any interval `[t_i, t_j]` of the sorted admission dates exceeds `total x (t_j -
/// t_i)` by: with `f(k) = k - total x t_k`, admissions in `[t_i, t_j]` are `f(j) - f(i) + 1`
/// above it. Every interval is checked (every admission is a sample).
pub(crate) fn worst_excess(dates: &[u64]) -> f64 {
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

/// The two bounds every scenario keeps, checked at its end (`samples` of the applied shares,
/// the sink's sorted admission `dates`, `hosts` hosts) and printed for `scene`:
///
/// 1. the applied shares never added up to more than the total;
/// 2. no interval over-admitted at the sink: admissions in any `[t_i, t_j]` exceed
///    `total x (t_j - t_i)` by at most `burst + 2 x hosts` (see [`worst_excess`]).
pub(crate) fn assert_within_the_total(
    scene: &str,
    samples: &[Sample],
    dates: &[u64],
    hosts: usize,
) {
    let max = samples.iter().map(Sample::sum).max().unwrap();
    println!(
        "fleet: {scene}: {} snapshots of the applied shares; max sum {} of total {}",
        samples.len(),
        share::fmt_units(max),
        share::fmt_units(TOTAL_UNITS)
    );
    for s in samples {
        assert!(
            s.sum() <= TOTAL_UNITS,
            "{scene}: applied shares {} add up to more than the total",
            fmt_shares(&s.shares)
        );
    }
    let slack = (BURST + 2 * hosts as u64) as f64;
    let worst = worst_excess(dates);
    let span = dates
        .last()
        .map_or(0.0, |&last| (last - dates[0]) as f64 / 1e9);
    println!(
        "fleet: {scene}: sink: {} admissions over {span:.1} s ({:.0}/s on average, total \
         {TOTAL_PER_S}/s); worst 1 s window {} (bound {}); worst interval excess over total x T: \
         {worst:.1} (bound {slack})",
        dates.len(),
        dates.len() as f64 / span,
        worst_second(dates),
        TOTAL_PER_S as f64 + slack
    );
    assert!(
        worst <= slack,
        "{scene}: over-admission: {worst} > {slack} above total x T"
    );
}

/// Admissions per 100 ms bin over `[from, from + 3 s)`, from sorted dates.
pub(crate) fn bins_100ms(dates: &[u64], from: u64) -> Vec<usize> {
    (0..30u64)
        .map(|k| {
            let (a, b) = (from + k * 100_000_000, from + (k + 1) * 100_000_000);
            dates.partition_point(|&d| d < b) - dates.partition_point(|&d| d < a)
        })
        .collect()
}

/// The most admissions in any 1 s window (each window starting at an admission).
pub(crate) fn worst_second(dates: &[u64]) -> usize {
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
