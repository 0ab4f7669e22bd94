//! Busy hosts riding out Redis restarts and flushes, a failover to a replica and a Sentinel
//! failover.

use super::*;

/// Busy hosts for the restart and failover scenarios: host `i` has its limiter file (at the
/// floor), a worker hammering it into the sink and an agent reaching Redis at `urls[i]`
/// (weights and minimums from [`WEIGHTS`] and [`MINS`]); a sampler reads the applied shares.
struct Busy {
    workers: Vec<Child>,
    agents: Vec<Child>,
    sampler: Sampler,
    sink: Sink,
}

impl Busy {
    fn start(dir: &Path, urls: &[String], ttl_ms: u64, scene: String) -> Busy {
        let n = urls.len();
        let sink_path = dir.join("sink.sock");
        let sink = Sink::start(&sink_path);
        let (paths, limits) = host_files(dir, n);
        let sampler = Sampler::start(limits);
        sampler.scene(scene, dir);
        let workers = (0..n)
            .map(|i| spawn_worker(dir, i, &paths[i], &sink_path))
            .collect();
        let ttl = Duration::from_millis(ttl_ms);
        let agents = (0..n)
            .map(|i| {
                let log = dir.join(format!("agent{i}.log"));
                spawn_host_agent(i, urls[i].clone(), &paths[i], ttl, &log)
            })
            .collect();
        Busy {
            workers,
            agents,
            sampler,
            sink,
        }
    }

    /// The 3 s after a kill (or flush) at `t_kill`, once they have passed: at most one 100 ms
    /// bin below half of full use (50 admissions) and the applied shares never under 90% of the
    /// total; the figures printed.
    fn ride_out(&self, what: &str, t_kill: u64, answered_ms: f64) {
        let wait = (t_kill + 3_200_000_000).saturating_sub(mono_ns());
        hold(Duration::from_nanos(wait));
        let dates = self.sink.snapshot();
        let before = bins_100ms(&dates, t_kill - 1_000_000_000)[..10].to_vec();
        let full = before.iter().sum::<usize>() as f64 / 10.0;
        let bins = bins_100ms(&dates, t_kill);
        let low = bins.iter().filter(|&&c| c < 50).count();
        let min_sum = self
            .sampler
            .since(t_kill)
            .iter()
            .filter(|s| s.at_ns < t_kill + 3_000_000_000)
            .map(Sample::sum)
            .min()
            .unwrap_or(0);
        println!(
            "fleet: {what}: server answering after {answered_ms:.0} ms; 100 ms bins in the 3 s after: min {}, {low} below 50 (full use before: {full:.1} per bin); applied shares at least {} of {}",
            bins.iter().min().unwrap(),
            share::fmt_units(min_sum),
            share::fmt_units(TOTAL_UNITS)
        );
        assert!(
            min_sum >= TOTAL_UNITS / 10 * 9,
            "{what}: the applied shares fell to {} (bins {bins:?}){}",
            share::fmt_units(min_sum),
            self.sampler.diagnose()
        );
        assert!(
            low <= 1,
            "{what}: {low} bins of 100 ms below half of full use in the 3 s after: {bins:?}{}",
            self.sampler.diagnose()
        );
    }

    /// Agents leave, workers stop; every sample of the applied shares at most the total, the
    /// sink's worst interval within `total x T + burst + 2 x hosts`.
    fn finish(mut self, name: &str) {
        use nix::sys::signal::Signal;
        let n = self.agents.len();
        for a in self.agents.drain(..) {
            signal(&a, Signal::SIGTERM);
            assert!(reap(a, Duration::from_secs(5)).success());
        }
        assert_workers_run(&mut self.workers, &self.sampler);
        for w in self.workers.drain(..) {
            signal(&w, Signal::SIGKILL);
            reap(w, Duration::from_secs(5));
        }
        let samples = self.sampler.finish();
        let dates = self.sink.finish();
        assert_within_the_total(name, &samples, &dates, n);
    }
}

/// Redis restarted (SIGKILL, a new empty `redis-server` on the same port) and flushed under a
/// busy fleet: three hosts (weights 2, 1, 1, host 0 with a 50/s minimum), a worker each, total
/// 1000/s, lease 1.5 s (`FLEET_RESTART_HOSTS`, up to 6, and `FLEET_RESTART_TTL_MS` measure
/// other fleets: issue 31's had six hosts and 2 s leases).
///
/// 1. Host 2 partitioned (its agent talks through a proxy the test cuts) and Redis restarted
///    at once (down under 50 ms): the others re-assert their shares into the new epoch, which
///    grants nothing more until an agent has seen it for one lease; host 2 keeps its share
///    until its own deadline. The others grow into host 2's share only after host 2 fenced: no
///    sample of the applied shares above the total.
/// 2. Redis down 50, 100 and 300 ms, every host connected: each host re-asserts its share and
///    keeps deciding: at most one 100 ms bin of the 3 s after the kill below half of full use
///    (50 admissions), and the applied shares never under 90% of the total.
/// 3. `FLUSHALL`: a new epoch too (a flush is never taken for a fresh fleet), the same.
///
/// Throughout: every sample of the applied shares at most the total, the sink's worst interval
/// within `total x T + burst + 2 x hosts`.
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_rides_out_redis_restarts_and_flushes() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut redis = Redis::start(&bin, free_port());
    let proxy = Proxy::start(redis.port);
    let n: usize = std::env::var("FLEET_RESTART_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| (3..=HOSTS).contains(&n))
        .unwrap_or(3);
    let ttl_ms: u64 = std::env::var("FLEET_RESTART_TTL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TTL.as_millis() as u64);
    println!("fleet: restarts: {n} hosts, lease {ttl_ms} ms");
    // Host 2 through the proxy.
    let urls: Vec<String> = (0..n)
        .map(|i| if i == 2 { proxy.url() } else { redis.url() })
        .collect();
    let busy = Busy::start(dir.path(), &urls, ttl_ms, redis.url());
    let sampler = &busy.sampler;
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..n).collect();
    await_split(
        sampler,
        mono_ns(),
        (&all, &[]),
        &format!("start, {n} busy hosts"),
        &mut transitions,
    );
    hold(Duration::from_millis(500));

    // 1. Host 2 partitioned, Redis restarted at once.
    let epoch = status(&redis.url()).epoch;
    proxy.cut();
    let t_kill = mono_ns();
    redis.stop();
    let down_ns = mono_ns() - t_kill;
    redis.restart();
    let answered_ms = (mono_ns() - t_kill) as f64 / 1e6;
    println!(
        "fleet: restart with host2 partitioned: redis-server killed and started again in {:.1} ms, answering after {answered_ms:.1} ms",
        down_ns as f64 / 1e6
    );
    // The new epoch, closed until an agent has seen it for one lease (reported: a loaded
    // machine may be slow to show it).
    let deadline = Instant::now() + GIVE_UP;
    let st = loop {
        let st = status(&redis.url());
        if !st.epoch.is_empty() && st.epoch != epoch {
            break st;
        }
        assert!(Instant::now() < deadline, "no new epoch after the restart");
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "fleet: new epoch {} (open: {}), granted {}",
        st.epoch,
        st.open,
        share::fmt_units(st.granted())
    );
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != 2).collect();
    await_split(
        sampler,
        t_kill,
        (&others, &[]),
        "restart at once, host2 partitioned (the others grow once host2 fenced)",
        &mut transitions,
    );
    // Host 2 was at its fence when the others grew past their shares.
    let over: Vec<Sample> = sampler
        .since(t_kill)
        .into_iter()
        .filter(|s| s.sum() > TOTAL_UNITS)
        .collect();
    assert!(
        over.is_empty(),
        "restart with host2 partitioned: {} samples above the total, first {}{}",
        over.len(),
        fmt_shares(&over[0].shares),
        sampler.diagnose()
    );
    proxy.heal();
    await_split(
        sampler,
        mono_ns(),
        (&all, &[]),
        "host2 healed",
        &mut transitions,
    );
    hold(Duration::from_millis(500));

    // 2. Restarts with every host connected; 3. a flush.
    for down_ms in [50u64, 100, 300, 0] {
        let epoch = status(&redis.url()).epoch;
        let t_kill = mono_ns();
        let what = if down_ms == 0 {
            let c = redis::Client::open(redis.url()).unwrap();
            let mut con = c
                .get_connection_with_timeout(Duration::from_secs(2))
                .unwrap();
            redis::cmd("FLUSHALL").query::<()>(&mut con).unwrap();
            "FLUSHALL".to_string()
        } else {
            redis.stop();
            std::thread::sleep(Duration::from_millis(down_ms));
            redis.restart();
            format!("down {down_ms} ms")
        };
        let answered_ms = (mono_ns() - t_kill) as f64 / 1e6;
        busy.ride_out(&what, t_kill, answered_ms);
        assert_ne!(status(&redis.url()).epoch, epoch, "{what}: no new epoch");
    }

    busy.finish("restarts");
    drop(proxy);
    redis.stop();
    print_figures("restart", &transitions, t0);
}

/// A failover: a primary and a replica (`--replicaof`), three busy hosts (weights 2, 1, 1, host
/// 0 with a 50/s minimum) reaching the primary through a proxy. The primary is SIGKILLed while
/// the agents renew, the replica promoted (`REPLICAOF NO ONE`) and the proxy pointed at it. The
/// replica holds a copy of the fleet's keys, written by another process (the primary's
/// `run_id`), possibly without the latest grants: a new epoch begins, the agents re-assert their
/// shares. The kill comes mid-renewal: writes are paused on the primary for 350 ms first, so
/// every agent has a renewal waiting. The applied shares never add up to more than the total,
/// and the hosts keep deciding (at most one 100 ms bin of the 3 s after the kill below half of
/// full use).
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_rides_out_a_failover_to_a_replica() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Redis::start(&bin, free_port());
    let primary_port = primary.port.to_string();
    let mut replica = Redis::start_with(
        &bin,
        free_port(),
        &["--replicaof", "127.0.0.1", &primary_port],
    );
    let proxy = Proxy::start(primary.port);
    let urls = vec![proxy.url(); 3];
    let busy = Busy::start(dir.path(), &urls, TTL.as_millis() as u64, proxy.url());
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..urls.len()).collect();
    await_split(
        &busy.sampler,
        mono_ns(),
        (&all, &[]),
        "start, 3 busy hosts on the primary",
        &mut transitions,
    );
    // The replica has the fleet's keys (replicated).
    let epoch = status(&primary.url()).epoch;
    let deadline = Instant::now() + GIVE_UP;
    while status(&replica.url()).epoch != epoch {
        assert!(
            Instant::now() < deadline,
            "the replica never had the fleet's epoch"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    hold(Duration::from_millis(700));

    // Mid-renewal: writes paused on the primary (scripts that write wait), long enough for
    // every agent to have a renewal pending (one every 300 ms), then the kill.
    primary.pause_writes(10_000);
    hold(Duration::from_millis(350));
    let t_kill = mono_ns();
    primary.stop();
    let c = redis::Client::open(replica.url()).unwrap();
    let mut con = c
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query::<()>(&mut con)
        .unwrap();
    proxy.retarget(replica.port);
    let promoted_ms = (mono_ns() - t_kill) as f64 / 1e6;
    busy.ride_out("failover", t_kill, promoted_ms);
    let st = status(&replica.url());
    println!(
        "fleet: failover: replica promoted {promoted_ms:.0} ms after the primary's kill; new epoch {} (open: {})",
        st.epoch, st.open
    );
    assert_ne!(st.epoch, epoch, "the promoted replica kept the old epoch");
    await_split(
        &busy.sampler,
        t_kill,
        (&all, &[]),
        "failover to the replica",
        &mut transitions,
    );
    busy.finish("failover");
    drop(proxy);
    replica.stop();
    println!(
        "fleet: failover scenario took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// A failover decided by Sentinel: a primary, a replica and one sentinel (quorum 1, the
/// primary down after 100 ms), three busy hosts with 2 s leases reaching the primary through a
/// proxy that follows the sentinel's answer (as a Sentinel-aware client would). The primary is
/// SIGKILLed; the sentinel promotes the replica; the agents re-assert into the new epoch. The
/// applied shares never add up to more than the total; the 3 s after the kill are reported
/// (Sentinel takes about a second to promote, against a fence point 1.5 s after the last
/// renewal) and at most one 100 ms bin below half of full use is asserted.
#[test]
#[ignore = "needs redis-server; run: cargo test --test fleet -- --include-ignored"]
fn fleet_rides_out_a_sentinel_failover() {
    let bin = need_redis();
    let _one = SCENARIO.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Redis::start(&bin, free_port());
    let primary_port = primary.port.to_string();
    let mut replica = Redis::start_with(
        &bin,
        free_port(),
        &["--replicaof", "127.0.0.1", &primary_port],
    );
    let sentinel = Sentinel::start(&bin, primary.port);
    let deadline = Instant::now() + GIVE_UP;
    while sentinel.primary() != Some(primary.port) || sentinel.replicas() == 0 {
        assert!(
            Instant::now() < deadline,
            "the sentinel never saw the primary and its replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let proxy = Proxy::start(primary.port);
    let urls = vec![proxy.url(); 3];
    let busy = Busy::start(dir.path(), &urls, 2000, proxy.url());
    let mut transitions = Vec::new();
    let all: Vec<usize> = (0..urls.len()).collect();
    await_split(
        &busy.sampler,
        mono_ns(),
        (&all, &[]),
        "start, 3 busy hosts on the primary (2 s leases)",
        &mut transitions,
    );
    let epoch = status(&primary.url()).epoch;
    let deadline = Instant::now() + GIVE_UP;
    while status(&replica.url()).epoch != epoch {
        assert!(
            Instant::now() < deadline,
            "the replica never had the fleet's epoch"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    hold(Duration::from_millis(700));

    let t_kill = mono_ns();
    primary.stop();
    let deadline = Instant::now() + GIVE_UP;
    while sentinel.primary() != Some(replica.port) {
        assert!(
            Instant::now() < deadline,
            "the sentinel did not promote the replica"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.retarget(replica.port);
    let promoted_ms = (mono_ns() - t_kill) as f64 / 1e6;
    busy.ride_out("sentinel failover", t_kill, promoted_ms);
    let st = status(&replica.url());
    println!(
        "fleet: sentinel failover: replica promoted {promoted_ms:.0} ms after the primary's kill; new epoch {} (open: {})",
        st.epoch, st.open
    );
    assert_ne!(st.epoch, epoch, "the promoted replica kept the old epoch");
    await_split(
        &busy.sampler,
        t_kill,
        (&all, &[]),
        "sentinel failover to the replica",
        &mut transitions,
    );
    busy.finish("sentinel failover");
    drop(proxy);
    drop(sentinel);
    replica.stop();
    println!(
        "fleet: sentinel failover scenario took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
