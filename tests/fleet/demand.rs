//! Shares that follow demand: idle hosts give their budget to busy ones and take it back.

use super::*;

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
    let (paths, limits) = host_files(dir.path(), HOSTS);
    let sampler = Sampler::start(limits);
    sampler.scene(redis.url(), dir.path());
    // The server has been up for longer than a lease before the fleet's first renewal (as the
    // script reads it: `uptime_in_seconds`, whole seconds).
    redis.await_uptime(TTL);
    let t_agents = mono_ns();
    let mut agents: Vec<Child> = (0..HOSTS)
        .map(|i| {
            let log = dir.path().join(format!("agent{i}.log"));
            spawn_agent(redis.url(), &paths[i], member(i), WEIGHTS[i], TTL, 0, &log)
        })
        .collect();
    let worker = |i: usize| spawn_worker(dir.path(), i, &paths[i], &sink_path);
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
    let floor = shmlimit::Rate::from_emission_ns(share::FLOOR_EMISSION_NS).unwrap();
    Limiter::builder()
        .limit(LIMIT, TokenBucket::new(1, floor))
        .create_or_open(&dup_path)
        .unwrap();
    for (i, path) in [(0, &paths[0]), (1, &dup_path)] {
        let log = dir.path().join(format!("dup{i}.log"));
        let dup = spawn_agent(redis.url(), path, member(0), 1, TTL, 0, &log);
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
    assert_within_the_total("demand", &samples, &dates, HOSTS);
    print_figures("demand", &transitions, t0);
}
