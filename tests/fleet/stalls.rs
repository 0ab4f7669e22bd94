//! Stalled agents: a host whose agent stops renewing falls to its fence in the data plane before
//! its lease ends on the server.

use super::*;

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
    let (paths, limits) = host_files(dir.path(), HOSTS);
    let sampler = Sampler::start(limits.clone());
    sampler.scene(redis.url(), dir.path());
    const N: usize = 3;
    let mut workers: Vec<Child> = (0..N)
        .map(|i| spawn_worker(dir.path(), i, &paths[i], &dir.path().join("sink.sock")))
        .collect();
    let logs: Vec<PathBuf> = (0..N)
        .map(|i| dir.path().join(format!("agent{i}.log")))
        .collect();
    let agent = |i: usize| spawn_host_agent(i, redis.url(), &paths[i], TTL, &logs[i]);
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
    assert_within_the_total("stalls", &samples, &dates, N);
    print_figures("stalls", &transitions, t0);
}
