//! The commands that act on a file other processes use: `inspect` of worker processes'
//! decisions, `set-rate` seen by a running worker, `reset`, and `gc` of a killed holder's permits.

use super::*;

#[test]
fn inspect_shows_what_a_worker_process_did() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), "limits.toml", CONFIG);
    let path = dir.path().join("app.shm");
    ok(&["create", s(&path), "--config", s(&config)]);

    // This test process is the worker: it attaches by path and decides through the library.
    let limiter = Limiter::open(&path).unwrap();
    let api = limiter.token_bucket("api").unwrap();
    let search = limiter.sliding_log("search").unwrap();
    let signups = common::rate(&limiter, "signups").unwrap();
    let allowed = |l: &dyn shmlimit::RateLimit<shmlimit::MonotonicClock>, n: usize| {
        (0..n)
            .filter(|_| l.try_acquire(1).unwrap().is_allowed())
            .count()
    };
    // Burst 5 at one token an hour: 5 of 7 pass. A log of 3 per 10 minutes: 3 of 4 pass.
    assert_eq!(allowed(&api, 7), 5);
    assert_eq!(allowed(&search, 4), 3);
    assert_eq!(allowed(&signups, 2), 2);

    let out = ok(&["inspect", s(&path)]);
    let state = |name: &str| row_after(&out, "state (", name);
    let api_row = state("api");
    assert_eq!(api_row[1], "0", "remaining\n{out}");
    assert_ne!(api_row[2], "0", "retry after\n{out}");
    assert_eq!((api_row[3], api_row[4]), ("5", "2"), "{out}");
    assert_eq!(api_row[5], "28.6%");
    let search_row = state("search");
    assert_eq!(
        (search_row[1], search_row[3], search_row[4]),
        ("0", "3", "1")
    );
    let signups_row = state("signups");
    assert_eq!((signups_row[3], signups_row[4]), ("2", "0"));
    let exports_row = state("exports");
    assert_eq!(
        (exports_row[1], exports_row[3], exports_row[4]),
        ("1000", "0", "0")
    );

    // The JSON carries the same numbers as the table.
    let j = json(&["inspect", s(&path), "--json"]);
    let by_name: HashMap<&str, &Value> = j["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l))
        .collect();
    for name in ["api", "search", "signups", "exports"] {
        let (human, l) = (state(name), by_name[name]);
        assert!(l.get("created").is_none(), "not retuned: {l}");
        assert_eq!(l["allowed"].as_u64().unwrap(), number(human[3]), "{name}");
        assert_eq!(l["denied"].as_u64().unwrap(), number(human[4]), "{name}");
        assert_eq!(
            l["shadow_denied"].as_u64().unwrap(),
            number(human[6]),
            "{name}"
        );
        assert_eq!(
            l["near_limit"].as_u64().unwrap(),
            number(human[7]),
            "{name}"
        );
        if name != "signups" {
            // (a fixed window's remaining may change at its boundary between the two runs)
            assert_eq!(l["remaining"].as_u64().unwrap(), number(human[1]), "{name}");
        }
    }
    assert_eq!(by_name["api"]["admits_now"], false);
    // The fifth admission left the bucket of 5 empty: under the near-limit tenth.
    assert!(by_name["api"]["near_limit"].as_u64().unwrap() >= 1, "{j}");
    assert_eq!(by_name["api"]["shadow_denied"], 0);
    // Header facts.
    assert!(j["format_version"].as_u64().unwrap() >= 1, "{j}");
    assert_eq!(j["boot_id"].as_str().unwrap().len(), 32, "{j}");
    assert!(j["created_unix_ns"].as_u64().unwrap() > 1_600_000_000_000_000_000);
    assert!(j["regions"]["slots"]["length"].as_u64().unwrap() > 0, "{j}");
    assert!(
        out.contains(&format!("boot    {}", j["boot_id"].as_str().unwrap())),
        "{out}"
    );
    let retry = by_name["api"]["retry_after_ns"].as_u64().unwrap();
    // The next token is at most one emission interval (1 h) away.
    assert!(retry > 0 && retry <= 3_600_000_000_000, "{retry}");

    // `stats` agrees with `inspect`, in its table and its JSON.
    let table = ok(&["stats", s(&path)]);
    let j = json(&["stats", s(&path), "--json"]);
    for (i, name) in ["api", "search", "signups", "exports"].iter().enumerate() {
        let human = row(&table, name);
        let l = &j["limits"][i];
        assert_eq!(l["name"], *name);
        assert_eq!(l["allowed"], by_name[name]["allowed"]);
        assert_eq!(l["denied"], by_name[name]["denied"]);
        assert_eq!(l["allowed"].as_u64().unwrap(), number(human[3]));
        assert_eq!(l["denied"].as_u64().unwrap(), number(human[4]));
        assert_eq!(l["near_limit"], by_name[name]["near_limit"]);
        assert_eq!(l["near_limit"].as_u64().unwrap(), number(human[7]));
        assert_eq!(l["shadow_denied"].as_u64().unwrap(), number(human[6]));
        assert_eq!(l["refunded"].as_u64().unwrap(), number(human[8]));
    }
    let prom = ok(&["stats", s(&path), "--prometheus"]);
    assert!(
        prom.contains("# TYPE shmlimit_refunded_total counter"),
        "{prom}"
    );
    let near = by_name["api"]["near_limit"].as_u64().unwrap();
    assert!(
        prom.contains(&format!(
            "shmlimit_near_limit_total{{file=\"{}\",limit=\"api\"}} {near}",
            s(&path)
        )),
        "{prom}"
    );
}

/// Fork a worker that attaches to `path` by path alone and makes `tries` decisions on `limit`;
/// its exit code is how many were admitted.
fn fork_worker(path: &Path, limit: &str, tries: u32) -> libc::pid_t {
    // SAFETY: the child only attaches through the library (file system calls, mmap and
    // allocations, which glibc keeps usable in a forked child) and leaves through `_exit`,
    // never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let admitted = Limiter::open(path)
            .ok()
            .and_then(|l| common::rate(&l, limit).ok())
            .map(|l| {
                (0..tries)
                    .filter(|_| l.try_acquire(1).is_ok_and(|d| d.is_allowed()))
                    .count() as i32
            });
        // SAFETY: `_exit` has no preconditions; it ends the child without running the
        // harness's exit handlers.
        unsafe { libc::_exit(admitted.unwrap_or(255)) }
    }
    pid
}

fn reap(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is a child of this process that has not been reaped; `status` is a valid
    // place for the kernel to write.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid);
    assert!(libc::WIFEXITED(status), "worker {pid} was killed: {status}");
    libc::WEXITSTATUS(status)
}

#[test]
fn inspect_counts_the_decisions_of_several_worker_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.shm");
    ok(&[
        "create",
        s(&path),
        "--name",
        "log",
        "--algorithm",
        "sliding_log",
        "--limit",
        "50",
        "--window",
        "10min",
    ]);
    // Three processes, 30 decisions each, on a log of 50 per 10 minutes: exactly 50 pass.
    let workers: Vec<libc::pid_t> = (0..3).map(|_| fork_worker(&path, "log", 30)).collect();
    let admitted: i32 = workers.into_iter().map(reap).sum();
    assert_eq!(admitted, 50);
    let j = json(&["inspect", s(&path), "--json"]);
    assert_eq!(j["limits"][0]["allowed"], 50);
    assert_eq!(j["limits"][0]["denied"], 40);
    assert_eq!(j["limits"][0]["remaining"], 0);
    assert_eq!(j["limits"][0]["admits_now"], false);
    let out = ok(&["inspect", s(&path)]);
    let log = row_after(&out, "state (", "log");
    assert_eq!((log[1], log[3], log[4], log[5]), ("0", "50", "40", "44.4%"));
}

/// A pipe: (read end, write end).
fn pipe() -> (libc::c_int, libc::c_int) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid place for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe failed");
    (fds[0], fds[1])
}

fn write_u32(fd: libc::c_int, value: u32) {
    let bytes = value.to_ne_bytes();
    // SAFETY: `bytes` is valid for 4 bytes; `fd` is an open pipe end.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), 4) };
    assert_eq!(n, 4);
}

fn read_u32(fd: libc::c_int) -> u32 {
    let mut bytes = [0u8; 4];
    // SAFETY: `bytes` is valid for 4 bytes of writes; `fd` is an open pipe end. A pipe write
    // of 4 bytes is atomic, so one read returns it whole.
    let n = unsafe { libc::read(fd, bytes.as_mut_ptr().cast(), 4) };
    assert_eq!(n, 4, "the worker process ended early");
    u32::from_ne_bytes(bytes)
}

/// Fork a worker that stays attached to `path` across a retune: it makes `tries` decisions
/// on `limit`, reports how many were admitted on `report`, waits for a word on `go`, then
/// makes `tries` more and reports again (through its exit code too).
fn fork_retuned_worker(path: &Path, limit: &str, tries: u32) -> (libc::pid_t, i32, i32) {
    let (report_r, report_w) = pipe();
    let (go_r, go_w) = pipe();
    // SAFETY: as in `fork_worker`: the child uses the library, pipes and `_exit` only.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = (|| {
            let l = common::rate(&Limiter::open(path).ok()?, limit).ok()?;
            let count = || {
                (0..tries)
                    .filter(|_| l.try_acquire(1).is_ok_and(|d| d.is_allowed()))
                    .count()
            };
            write_u32(report_w, count() as u32);
            read_u32(go_r);
            let second = count() as u32;
            write_u32(report_w, second);
            Some(0)
        })();
        // SAFETY: `_exit` has no preconditions.
        unsafe { libc::_exit(code.unwrap_or(255)) }
    }
    // SAFETY: closing this process's copies of the child's ends; both are open descriptors.
    unsafe {
        libc::close(report_w);
        libc::close(go_r);
    }
    (pid, report_r, go_w)
}

#[test]
fn set_rate_is_seen_by_a_running_worker_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("retune.shm");
    // A monotonic-aligned day-long window: no boundary passes during the test (bar one chance
    // in tens of thousands), so every count below is exact.
    ok(&[
        "create",
        s(&path),
        "--name",
        "fw",
        "--algorithm",
        "fixed_window",
        "--limit",
        "5",
        "--window",
        "1d",
        "--alignment",
        "monotonic",
    ]);
    let (pid, report, go) = fork_retuned_worker(&path, "fw", 40);
    assert_eq!(
        read_u32(report),
        5,
        "before the retune the window admits its limit"
    );
    let out = ok(&["set-rate", s(&path), "fw", "20"]);
    assert!(out.contains("old  5 per 1d"), "{out}");
    assert!(out.contains("new  20 per 1d"), "{out}");
    write_u32(go, 1);
    // Within the window the new limit holds: 20 in all, 15 more for the same process.
    assert_eq!(
        read_u32(report),
        15,
        "after the retune the worker gets the new limit"
    );
    assert_eq!(reap(pid), 0);
    // Another process sees the live parameters; the definition is unchanged.
    let limiter = Limiter::open(&path).unwrap();
    let fw = limiter.limit("fw").unwrap();
    assert_eq!(fw.live_algorithm().unwrap().capacity(), 20);
    assert_eq!(fw.algorithm().capacity(), 5);
    assert_eq!(fw.stats().allowed, 20);

    // A token bucket: rate and burst, from another process, with JSON old and new.
    let tb = dir.path().join("tb.shm");
    ok(&[
        "create",
        s(&tb),
        "--name",
        "api",
        "--algorithm",
        "token_bucket",
        "--rate",
        "1/h",
        "--burst",
        "3",
    ]);
    let (pid, report, go) = fork_retuned_worker(&tb, "api", 100);
    assert_eq!(read_u32(report), 3, "a full bucket of 3 at 1/h admits 3");
    let v = json(&["set-rate", s(&tb), "api", "1/h", "--burst", "50", "--json"]);
    assert_eq!(v["old"]["burst"], 3, "{v}");
    assert_eq!(v["new"]["burst"], 50, "{v}");
    write_u32(go, 1);
    let second = read_u32(report);
    // The used tokens carry over: at most 47 more (50 - 3), at least one more than before.
    assert!((1..=47).contains(&second), "after the retune: {second}");
    assert_eq!(reap(pid), 0);
    let api = Limiter::open(&tb).unwrap().limit("api").unwrap();
    assert_eq!(api.live_algorithm().unwrap().capacity(), 50);
    // `inspect --json` puts the live definition at the top level and the created one under
    // `created`; the table lists the live parameters, then live and created side by side.
    let v = json(&["inspect", s(&tb), "--json"]);
    let l = &v["limits"][0];
    assert_eq!(l["burst"], 50, "{l}");
    assert_eq!(l["capacity"], 50, "{l}");
    assert_eq!(l["created"]["burst"], 3, "{l}");
    assert!(l.get("live").is_none(), "{l}");
    let out = ok(&["inspect", s(&tb)]);
    let defs = out.split("state (").next().unwrap();
    assert!(defs.contains("burst 50"), "{out}");
    assert!(!defs.contains("burst 3 "), "{out}");
    let retuned = out.split("live parameters (").nth(1).expect(&out);
    let row = retuned
        .lines()
        .find(|l| l.trim_start().starts_with("api"))
        .expect(&out);
    let (live, created) = (row.find("burst 50").unwrap(), row.find("burst 3 ").unwrap());
    assert!(live < created, "live first: {row}");
    let v = json(&["inspect", s(&path), "--json"]);
    assert_eq!(v["limits"][0]["limit"], 20, "{v}");
    assert_eq!(v["limits"][0]["created"]["limit"], 5, "{v}");

    // Bad values: exit 1, one line naming the file and the limit.
    let out = shmlimit(&["set-rate", s(&tb), "api", "0/s"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("limit \"api\": RATE: must be positive"),
        "{}",
        stderr(&out)
    );
    let out = shmlimit(&["set-rate", s(&path), "fw", "10/s", "--burst", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("only token buckets have a burst"),
        "{}",
        stderr(&out)
    );
    let out = shmlimit(&["set-rate", s(&path), "nope", "10"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
}

#[test]
fn reset_returns_a_limit_to_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reset.shm");
    let limiter = Limiter::builder()
        .limit("a", SlidingLog::new(4, Duration::from_secs(3600)))
        .limit("b", SlidingLog::new(2, Duration::from_secs(3600)))
        .create_or_open(&path)
        .unwrap();
    let (a, b) = (
        limiter.sliding_log("a").unwrap(),
        limiter.sliding_log("b").unwrap(),
    );
    assert_eq!(
        (0..10)
            .filter(|_| a.try_acquire(1).unwrap().is_allowed())
            .count(),
        4
    );
    assert_eq!(
        (0..10)
            .filter(|_| b.try_acquire(1).unwrap().is_allowed())
            .count(),
        2
    );
    let out = ok(&["reset", s(&path), "a"]);
    assert!(out.contains("limit \"a\" reset"), "{out}");
    assert_eq!(
        (0..10)
            .filter(|_| a.try_acquire(1).unwrap().is_allowed())
            .count(),
        4
    );
    assert!(b.try_acquire(1).unwrap().is_denied(), "b was not named");
    let v = json(&["reset", s(&path), "--json"]);
    assert_eq!(v["reset"], serde_json::json!(["a", "b"]));
    assert_eq!(
        (0..10)
            .filter(|_| b.try_acquire(1).unwrap().is_allowed())
            .count(),
        2
    );
    let out = shmlimit(&["reset", s(&path), "nope"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn gc_reclaims_the_permits_of_a_killed_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gc.shm");
    Limiter::builder()
        .limit("slots", shmlimit::Concurrency::new(3))
        .limit("api", TokenBucket::per_second(10).burst(5))
        .keyed_limit(
            "per_user",
            shmlimit::Concurrency::new(2),
            shmlimit::Keyed::new(16),
        )
        .create_or_open(&path)
        .unwrap();
    let (ready_r, ready_w) = pipe();
    // SAFETY: as in `fork_worker`; the child takes permits, reports, and waits to be killed.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let limiter = Limiter::open(&path).ok();
        let held = limiter
            .as_ref()
            .and_then(|l| l.concurrency("slots").ok())
            .map(|l| {
                (0..2)
                    .filter_map(|_| l.try_acquire_permit().ok().flatten().map(|p| p.into_id()))
                    .count()
            });
        let keyed = limiter
            .as_ref()
            .and_then(|l| l.keyed_concurrency("per_user").ok())
            .map(|l| {
                [&b"u1"[..], b"u1", b"u2"]
                    .iter()
                    .filter_map(|k| {
                        l.try_acquire_key_permit(k)
                            .ok()
                            .flatten()
                            .map(|p| p.into_id())
                    })
                    .count()
            });
        write_u32(
            ready_w,
            (held.unwrap_or(0) + 10 * keyed.unwrap_or(0)) as u32,
        );
        loop {
            // SAFETY: `pause` has no preconditions; the parent kills this process.
            unsafe { libc::pause() };
        }
    }
    assert_eq!(
        read_u32(ready_r),
        32,
        "the holder took two permits and three keyed ones"
    );
    let v = json(&["inspect", s(&path), "--json"]);
    let limit = |name: &str| {
        v["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap()
            .clone()
    };
    let slots = limit("slots");
    assert_eq!(slots["remaining"], 1, "{slots}");
    // Keyed: no single remaining budget; each holder names its key by tag.
    let per_user = limit("per_user");
    assert!(per_user.get("remaining").is_none(), "{per_user}");
    let keyed = Limiter::open(&path)
        .unwrap()
        .keyed_concurrency("per_user")
        .unwrap();
    let mut tags: Vec<u64> = per_user["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["key_tag"].as_u64().unwrap())
        .collect();
    tags.sort_unstable();
    let (u1, u2) = (keyed.key_tag(b"u1").unwrap(), keyed.key_tag(b"u2").unwrap());
    let mut expected = vec![u1, u1, u2];
    expected.sort_unstable();
    assert_eq!(tags, expected, "{per_user}");
    // SAFETY: `pid` is our child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: as in `reap`.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let v = json(&["gc", s(&path), "--json"]);
    let rows = v["limits"].as_array().unwrap();
    assert_eq!(rows[0]["name"], "slots");
    assert_eq!(rows[0]["reclaims"], "permits");
    assert_eq!(rows[0]["reclaimed"], 2, "{v}");
    assert_eq!(rows[1]["reclaims"], "none");
    // The dead holder's three keyed permits, then its two keys, idle once those are free.
    assert_eq!(rows[2]["reclaims"], "permits and keys");
    assert_eq!(
        (&rows[2]["permits"], &rows[2]["keys"]),
        (&3.into(), &2.into()),
        "{v}"
    );
    assert_eq!(keyed.key_occupancy().0, 0);
    let out = ok(&["gc", s(&path)]);
    assert_eq!(
        row(&out, "slots")[1],
        "0",
        "nothing left to reclaim:\n{out}"
    );
    let slots = Limiter::open(&path).unwrap().concurrency("slots").unwrap();
    assert!(slots.permit_holders().is_empty());
    assert_eq!(
        (0..5)
            .filter_map(|_| slots.try_acquire_permit().unwrap().map(|p| p.into_id()))
            .count(),
        3
    );
}

#[test]
fn inspect_and_gc_see_both_tables_of_a_counters_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.shm");
    // This process is the worker (as a flask-limiter app's storage would be): keys of fixed
    // windows in the counter table, of moving windows in the log table.
    let limiter = Limiter::builder()
        .keyed_limit(
            "limits",
            shmlimit::Counters::new().moving_window(8),
            shmlimit::Keyed::new(64),
        )
        .create_or_open(&path)
        .unwrap();
    let store = limiter.counters("limits").unwrap();
    let short = Duration::from_millis(50);
    for i in 0..5 {
        store
            .incr(format!("fixed/{i}").as_bytes(), short, 1)
            .unwrap();
    }
    for i in 0..3 {
        assert!(store
            .acquire_moving(format!("moving/{i}").as_bytes(), 8, short, 2)
            .unwrap()
            .is_allowed());
    }
    let keys = |v: &Value| (v["keys"]["used"].clone(), v["keys"]["slots"].clone());
    let j = json(&["inspect", s(&path), "--json"]);
    assert_eq!(keys(&j["limits"][0]), (8.into(), 128.into()), "{j}");
    std::thread::sleep(short * 2);
    let v = json(&["gc", s(&path), "--json"]);
    assert_eq!(v["limits"][0]["reclaims"], "keys", "{v}");
    assert_eq!(v["limits"][0]["keys"], 8, "{v}");
    let j = json(&["inspect", s(&path), "--json"]);
    assert_eq!(keys(&j["limits"][0]), (0.into(), 128.into()), "{j}");
    assert_eq!(store.key_occupancy(), (0, 128));
}
