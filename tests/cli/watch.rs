//! The live views of a file: `stats --prometheus` and `watch`.

use super::*;

#[test]
fn stats_prometheus_is_text_exposition_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prom.shm");
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::new(3, hourly()))
        .limit("search", SlidingLog::new(10, Duration::from_secs(600)))
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    for _ in 0..4 {
        let _ = api.try_acquire(1).unwrap();
    }
    let _ = limiter
        .sliding_log("search")
        .unwrap()
        .try_acquire(2)
        .unwrap();

    let text = ok(&["stats", s(&path), "--prometheus"]);
    assert!(text.ends_with('\n'));
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut helped: Vec<String> = Vec::new();
    let mut samples: HashMap<String, f64> = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(!help.is_empty());
            helped.push(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert_eq!(
                helped.last().map(String::as_str),
                Some(name),
                "HELP before TYPE: {line}"
            );
            typed.insert(name.to_owned(), kind.to_owned());
        } else {
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let name = &series[..series.find('{').expect("labels")];
            assert!(typed.contains_key(name), "sample before its TYPE: {line}");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
            assert!(series.ends_with('}'), "{line}");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
            samples.insert(series.to_owned(), value);
        }
    }
    assert_eq!(typed["shmlimit_decisions_total"], "counter");
    assert_eq!(typed["shmlimit_remaining"], "gauge");
    let file = s(&path);
    let series = |name: &str, labels: &str| {
        let key = format!("{name}{{file=\"{file}\",{labels}}}");
        *samples
            .get(&key)
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
    };
    // Burst 3 at one an hour: 3 of 4 pass.
    assert_eq!(
        series(
            "shmlimit_decisions_total",
            "limit=\"api\",outcome=\"allowed\""
        ),
        3.0
    );
    assert_eq!(
        series(
            "shmlimit_decisions_total",
            "limit=\"api\",outcome=\"denied\""
        ),
        1.0
    );
    assert_eq!(series("shmlimit_remaining", "limit=\"api\""), 0.0);
    assert!(series("shmlimit_retry_after_seconds", "limit=\"api\"") > 0.0);
    assert_eq!(
        series(
            "shmlimit_decisions_total",
            "limit=\"search\",outcome=\"allowed\""
        ),
        1.0
    );
    assert_eq!(series("shmlimit_remaining", "limit=\"search\""), 8.0);
    assert_eq!(series("shmlimit_capacity", "limit=\"api\""), 3.0);
    assert_eq!(
        series(
            "shmlimit_limit_info",
            "limit=\"search\",algorithm=\"sliding_log\""
        ),
        1.0
    );
    assert_eq!(series("shmlimit_state_damaged", "limit=\"api\""), 0.0);
}

/// One token an hour: nothing refills while a test runs.
fn hourly() -> Rate {
    Rate::new(1, Duration::from_secs(3600)).unwrap()
}

fn watch_file(dir: &Path) -> PathBuf {
    let path = dir.join("watch.shm");
    let limiter = Limiter::builder()
        .limit("api", TokenBucket::new(10, hourly()))
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    for _ in 0..12 {
        let _ = api.try_acquire(1).unwrap();
    }
    path
}

#[test]
fn watch_refreshes_count_times_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let path = watch_file(dir.path());
    let stats = Limiter::open(&path).unwrap().limit("api").unwrap().stats();

    let out = ok(&[
        "watch",
        s(&path),
        "--count",
        "3",
        "--interval",
        "50ms",
        "--json",
    ]);
    let frames: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(frames.len(), 3);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["refresh"], i as u64 + 1);
        let api = &f["limits"][0];
        assert_eq!(api["name"], "api");
        assert_eq!(api["allowed_total"].as_u64().unwrap(), stats.allowed);
        assert_eq!(api["denied_total"].as_u64().unwrap(), stats.denied);
        // Nobody decides while it watches.
        assert_eq!(api["decisions_per_second"], 0.0);
        assert_eq!(api["capacity"], 10);
    }

    // The table form, appended (not redrawn) when stdout is not a terminal.
    let out = ok(&["watch", s(&path), "--count", "2", "--interval", "50ms"]);
    assert_eq!(out.matches("shmlimit watch").count(), 2, "{out}");
    assert!(!out.contains('\x1b'), "no terminal codes into a pipe");
    let api = row(&out, "api");
    assert_eq!(api[1], "token_bucket");
    assert_eq!(number(api[6]), stats.allowed);
    assert_eq!(number(api[7]), stats.denied);
}

#[test]
fn watch_sees_decisions_of_another_process_and_exits_cleanly_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let path = watch_file(dir.path());
    let mut child = Command::new(BIN)
        .args(["watch", s(&path), "--interval", "50ms", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let before = first["limits"][0]["allowed_total"].as_u64().unwrap()
        + first["limits"][0]["denied_total"].as_u64().unwrap();

    // Decide while it watches: the totals move by exactly what this process did.
    let api = Limiter::open(&path).unwrap().token_bucket("api").unwrap();
    for _ in 0..25 {
        let _ = api.try_acquire(1).unwrap();
    }
    let seen = loop {
        let frame: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let l = &frame["limits"][0];
        let total = l["allowed_total"].as_u64().unwrap() + l["denied_total"].as_u64().unwrap();
        if total == before + 25 {
            break frame;
        }
        assert!(total < before + 25, "{frame}");
    };
    assert_eq!(seen["limits"][0]["remaining"], 0);

    // SAFETY: `child.id()` is the pid of a child this test spawned and has not reaped, so
    // the signal reaches that process and no other.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "watch ends cleanly on SIGINT: {status:?}"
    );
}

/// An adaptive concurrency limit shows its current limit, range and permits in flight: in
/// the JSON frame, and in the table's capacity column.
#[test]
fn watch_shows_an_adaptive_limit_s_current_limit_and_permits_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("adaptive.shm");
    let limiter = Limiter::builder()
        .limit("db", shmlimit::AdaptiveConcurrency::new(3, 40).initial(5))
        .create_or_open(&path)
        .unwrap();
    let db = limiter.adaptive_concurrency("db").unwrap();
    let held = [db.try_acquire().unwrap(), db.try_acquire().unwrap()];
    assert!(held.iter().all(Option::is_some));

    let out = ok(&["watch", s(&path), "--count", "1", "--json"]);
    let frame: Value = serde_json::from_str(out.trim()).expect("one JSON frame");
    let a = &frame["limits"][0]["adaptive"];
    assert_eq!(a["min"], 3, "{frame}");
    assert_eq!(a["max"], 40);
    assert_eq!(a["permits"], 5);
    assert_eq!(a["in_flight"], 2);
    assert_eq!(a["limit"].as_f64(), Some(5.0));

    let out = ok(&["watch", s(&path), "--count", "1"]);
    let db_row = row(&out, "db");
    assert!(out.contains("5 (3..=40)"), "{out}");
    assert_eq!(db_row[1], "adaptive_concurrency");
    drop(held);
}

/// A keyed adaptive limit's keys, each by its tag with its own limit and permits in flight:
/// in `inspect` (the range over the keys, then the busiest), its JSON and the Prometheus
/// gauges of the lowest, mean and highest limit.
#[test]
fn inspect_shows_each_key_of_a_keyed_adaptive_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keyed-adaptive.shm");
    let limiter = Limiter::builder()
        .keyed_limit(
            "per_host",
            shmlimit::AdaptiveConcurrency::new(2, 16).initial(4),
            shmlimit::Keyed::new(64),
        )
        .create_or_open(&path)
        .unwrap();
    let per_host = limiter.keyed_adaptive_concurrency("per_host").unwrap();
    let held = [
        per_host.try_acquire(b"db-1").unwrap(),
        per_host.try_acquire(b"db-1").unwrap(),
        per_host.try_acquire(b"db-1").unwrap(),
        per_host.try_acquire(b"db-2").unwrap(),
    ];
    assert!(held.iter().all(Option::is_some));
    let busy = format!("{:016x}", per_host.key_tag(b"db-1").unwrap());

    let out = ok(&["inspect", s(&path)]);
    assert!(
        out.contains(
            "adaptive per_host: 2 keys, limits 4.00 to 4.00 (mean 4.00, range 2..=16), 4 in flight"
        ),
        "{out}"
    );
    let first = out
        .lines()
        .skip_while(|l| !l.starts_with("adaptive per_host"))
        .nth(2)
        .expect("a key row");
    assert!(
        first.trim_start().starts_with(&busy),
        "busiest first: {out}"
    );

    let json: Value = serde_json::from_str(&ok(&["inspect", s(&path), "--json"])).unwrap();
    let keys = json["limits"][0]["adaptive_keys"]
        .as_array()
        .expect("keys")
        .clone();
    let tag = per_host.key_tag(b"db-1").unwrap();
    let db1 = keys.iter().find(|k| k["key_tag"] == tag).expect("db-1");
    assert_eq!(
        (db1["in_flight"].as_u64(), db1["permits"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(keys.len(), 2, "{json}");

    let text = ok(&["stats", s(&path), "--prometheus"]);
    for stat in ["min", "mean", "max"] {
        assert!(
            text.contains(&format!("limit=\"per_host\",stat=\"{stat}\"}} 4\n")),
            "{stat}: {text}"
        );
    }

    // `watch`: a keyed limit's budget is per key (it read "damaged" before), the keys' limits.
    let out = ok(&["watch", s(&path), "--count", "1"]);
    assert!(out.contains("per key  4.0-4.0 per key (2..=16)"), "{out}");
    let frame: Value =
        serde_json::from_str(ok(&["watch", s(&path), "--count", "1", "--json"]).trim()).unwrap();
    let limit = &frame["limits"][0];
    assert_eq!(limit["keyed"], true, "{frame}");
    let keys = &limit["adaptive_keys"];
    assert_eq!(
        (keys["keys"].as_u64(), keys["in_flight"].as_u64()),
        (Some(2), Some(4))
    );
    assert_eq!(keys["limit_max"].as_f64(), Some(4.0));
    drop(held);
}
