//! What needs no Redis server: the rates as the command line reads them, a share's deadline in
//! the data plane, and the agent's lock file.

use super::*;

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
        let child = spawn_agent(url.clone(), &path, format!("lock{n}"), 1, TTL, 0, &log);
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
