//! The membership scenario: hosts join, leave, are killed, partitioned and healed, and Redis
//! restarts empty; the shares stay within the total and converge to the weighted split.

use super::*;

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
    let (paths, limiters) = host_files(dir.path(), HOSTS);
    let sampler = Sampler::start(limiters.clone());
    sampler.scene(redis.url(), dir.path());
    let mut workers: Vec<Child> = (0..HOSTS)
        .map(|i| spawn_worker(dir.path(), i, &paths[i], &dir.path().join("sink.sock")))
        .collect();
    let logs: Vec<PathBuf> = (0..HOSTS)
        .map(|i| dir.path().join(format!("agent{i}.log")))
        .collect();
    // Host 1 talks to Redis through the proxy; the others directly.
    let url_of = |i: usize| if i == 1 { proxy.url() } else { redis.url() };
    let agent = |i: usize, url: String| spawn_host_agent(i, url, &paths[i], TTL, &logs[i]);
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
    redis.pause_writes(60_000);
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

    assert_within_the_total("budgets", &samples, &dates, HOSTS);
    print_figures("", &transitions, t0);
}
