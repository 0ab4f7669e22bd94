//! The `shmlimit` binary, run as a separate process on real files in temporary directories.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::words::{read_word, write_word};
use serde_json::Value;
use shmlimit::{Limiter, Rate, SlidingLog, TokenBucket};

const BIN: &str = env!("CARGO_BIN_EXE_shmlimit");

fn shmlimit(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run shmlimit")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

/// Run and require exit code `code`; returns stdout.
fn expect_code(args: &[&str], code: i32) -> String {
    let out = shmlimit(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "shmlimit {args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

fn ok(args: &[&str]) -> String {
    expect_code(args, 0)
}

fn json(args: &[&str]) -> Value {
    let text = ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{text}"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn number(cell: &str) -> u64 {
    cell.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {cell:?}"))
}

/// The cells of the first table row whose first cell is `first`.
fn row<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{text}"))
}

/// The cells of the first row starting with `first` after the line starting with `header`.
fn row_after<'a>(text: &'a str, header: &str, first: &str) -> Vec<&'a str> {
    let at = text
        .find(header)
        .unwrap_or_else(|| panic!("no {header:?} in:\n{text}"));
    row(&text[at..], first)
}

const CONFIG: &str = r#"
[[limit]]
name = "api"
algorithm = "token_bucket"
rate = "1/h"
burst = 5

[[limit]]
name = "search"
algorithm = "sliding_log"
limit = 3
window = "10min"

[[limit]]
name = "signups"
algorithm = "fixed_window"
limit = 20
window = "1min"
alignment = "monotonic"

[[limit]]
name = "exports"
algorithm = "sliding_window"
limit = 1000
window = "1h"
"#;

fn config_in(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path
}

#[test]
fn demo_small_stays_within_bounds_and_reaches_them() {
    let out = ok(&[
        "demo",
        "--workers",
        "3",
        "--seconds",
        "1",
        "--rate",
        "500/s",
        "--burst",
        "20",
        "--log-limit",
        "100",
        "--log-window",
        "250ms",
    ]);
    assert!(out.contains("within bound: yes"), "{out}");
    assert!(
        out.contains("decision counters match the workers' counts: yes"),
        "{out}"
    );
    // One row per worker, and the total row is their sum.
    let workers: Vec<Vec<u64>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| {
            c.len() >= 4
                && c[0].parse::<u32>().is_ok()
                && c[1].contains(|ch: char| ch.is_ascii_digit())
        })
        .map(|c| c[..4].iter().map(|x| number(x)).collect())
        .collect();
    assert_eq!(workers.len(), 3, "{out}");
    let total = row(&out, "total");
    for (column, name) in [(1, "decisions"), (2, "bucket"), (3, "log")] {
        let sum: u64 = workers.iter().map(|w| w[column]).sum();
        assert_eq!(number(total[column]), sum, "{name} total\n{out}");
    }
    // The bounds table: admitted <= bound, and at least what each algorithm grants at once
    // (a full bucket, a full log) under demand that never stops.
    let bucket = row_after(&out, "utilisation", "bucket");
    let (admitted, bound) = (number(bucket[1]), number(bucket[2]));
    assert!(admitted <= bound && admitted >= 20, "{out}");
    assert_eq!(bucket[3], "yes");
    let log = row_after(&out, "utilisation", "log");
    let (admitted, bound) = (number(log[1]), number(log[2]));
    assert!(admitted <= bound && admitted >= 100, "{out}");
    assert_eq!(log[3], "yes");
    // The temporary file and directory are gone.
    let file = row(&out, "file")[1];
    assert!(!Path::new(file).exists(), "{file} was left behind");
    assert!(!Path::new(file).parent().unwrap().exists());
}

#[test]
fn demo_file_kept_with_path_holds_the_demo_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.shm");
    let out = ok(&[
        "demo",
        "--workers",
        "2",
        "--seconds",
        "0.3",
        "--path",
        s(&path),
    ]);
    let inspected = json(&["inspect", s(&path), "--json"]);
    let limits = inspected["limits"].as_array().unwrap();
    assert_eq!(limits[0]["name"], "bucket");
    assert_eq!(limits[1]["name"], "log");
    assert_eq!(
        limits[0]["allowed"].as_u64().unwrap(),
        number(row_after(&out, "utilisation", "bucket")[1])
    );
    assert_eq!(
        limits[1]["allowed"].as_u64().unwrap(),
        number(row_after(&out, "utilisation", "log")[1])
    );
    let decisions = limits
        .iter()
        .map(|l| l["allowed"].as_u64().unwrap() + l["denied"].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(decisions, number(row(&out, "total")[1]));
    // The demo refuses to reuse a file: its counts would not start from zero.
    let again = shmlimit(&["demo", "--seconds", "0.1", "--path", s(&path)]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("exists"), "{}", stderr(&again));
}

#[test]
fn demo_rejects_bad_flags_with_exit_1() {
    for (args, message) in [
        (&["demo", "--rate", "0/s"][..], "--rate: must be positive"),
        (&["demo", "--burst", "0"][..], "--rate/--burst"),
        (
            &["demo", "--log-window", "10"][..],
            "--log-window: \"10\" has no unit",
        ),
        (
            &["demo", "--seconds=0"][..],
            "--seconds: must be more than 0",
        ),
        (&["demo", "--workers", "0"][..], "--workers"),
    ] {
        let out = shmlimit(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn create_from_config_then_inspect_shows_the_definitions() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), "limits.toml", CONFIG);
    let path = dir.path().join("app.shm");
    let created = ok(&["create", s(&path), "--config", s(&config)]);
    assert!(
        created.contains("created (mode 0600) with 4 limits"),
        "{created}"
    );
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );

    let out = ok(&["inspect", s(&path)]);
    for (name, algorithm, parameters) in [
        ("api", "token_bucket", "1/h, burst 5"),
        ("search", "sliding_log", "3 in any 10min (exact)"),
        (
            "signups",
            "fixed_window",
            "20 per 1min window (monotonic aligned)",
        ),
        ("exports", "sliding_window", "about 1000 in any 1h"),
    ] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert!(
            line.contains(algorithm) && line.contains(parameters),
            "{line}"
        );
    }
    assert!(
        out.contains(&format!("file    {}", path.display())),
        "{out}"
    );

    // The same facts as JSON, with the stored parameters.
    let j = json(&["inspect", s(&path), "--json"]);
    assert_eq!(j["path"], s(&path));
    assert_eq!(j["mode"], "0600");
    let limits = j["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 4);
    assert_eq!(limits[0]["burst"], 5);
    assert_eq!(limits[0]["emission_ns"], 3_600_000_000_000u64);
    assert_eq!(limits[0]["rate"], "1/h");
    assert_eq!(limits[1]["limit"], 3);
    assert_eq!(limits[1]["window_ns"], 600_000_000_000u64);
    assert_eq!(limits[2]["alignment"], "monotonic");
    assert_eq!(limits[3]["alignment"], "wall_clock");
    for l in limits {
        assert_eq!(l["allowed"], 0);
        assert_eq!(l["denied"], 0);
    }

    // The library attaches by path alone and sees the same definitions.
    let limiter = Limiter::open(&path).unwrap();
    let names: Vec<&str> = limiter
        .definitions()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["api", "search", "signups", "exports"]);

    // Creating again with the same config attaches; with another, it is a file error.
    let again = ok(&["create", s(&path), "--config", s(&config)]);
    assert!(again.contains("exists with these definitions"), "{again}");
    let conflict = shmlimit(&[
        "create",
        s(&path),
        "--name",
        "api",
        "--algorithm",
        "token_bucket",
        "--rate",
        "2/h",
        "--burst",
        "5",
    ]);
    assert_eq!(conflict.status.code(), Some(2));
    let message = stderr(&conflict);
    assert!(
        message.contains(s(&path)) && message.contains("conflicting"),
        "{message}"
    );
    assert_eq!(message.trim_end().lines().count(), 1, "{message}");
}

#[test]
fn a_fresh_file_shows_every_limit_full() {
    // Windows longer than any host's uptime: a fresh state must not read as admissions made
    // at boot (CLOCK_MONOTONIC zero).
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(
        dir.path(),
        "long.toml",
        r#"
[[limit]]
name = "yearly-log"
algorithm = "sliding_log"
limit = 4
window = "365d"

[[limit]]
name = "yearly-window"
algorithm = "fixed_window"
limit = 4
window = "365d"

[[limit]]
name = "yearly-weighted"
algorithm = "sliding_window"
limit = 4
window = "365d"

[[limit]]
name = "bucket"
algorithm = "token_bucket"
rate = "1/d"
burst = 4
"#,
    );
    let path = dir.path().join("fresh.shm");
    ok(&["create", s(&path), "--config", s(&config)]);
    let j = json(&["inspect", s(&path), "--json"]);
    let not_full: Vec<&Value> = j["limits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["remaining"] != 4 || l["admits_now"] != true || l["retry_after_ns"] != 0)
        .collect();
    assert!(
        not_full.is_empty(),
        "fresh limits that are not full: {not_full:#?}"
    );
}

#[test]
fn create_from_inline_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.shm");
    let j = json(&[
        "create",
        s(&path),
        "--name",
        "search",
        "--algorithm",
        "sliding_log",
        "--limit",
        "100",
        "--window",
        "60s",
        "--mode",
        "640",
        "--json",
    ]);
    assert_eq!(j["created"], true);
    assert_eq!(j["limits"][0]["name"], "search");
    assert_eq!(j["limits"][0]["window_ns"], 60_000_000_000u64);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o640
    );
    // A bad inline field names the flag, exit 1, and creates nothing.
    let bad = dir.path().join("bad.shm");
    let out = shmlimit(&[
        "create",
        s(&bad),
        "--name",
        "api",
        "--algorithm",
        "token_bucket",
        "--rate",
        "0/s",
        "--burst",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("command line: limit \"api\": --rate: must be positive"),
        "{}",
        stderr(&out)
    );
    assert!(!bad.exists());
    // Neither a config nor a limit: a usage error.
    let out = shmlimit(&["create", s(&bad)]);
    assert_eq!(out.status.code(), Some(1));
}

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

#[test]
fn bad_config_fields_each_give_their_message_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let bucket =
        |extra: &str| format!("[[limit]]\nname = \"api\"\nalgorithm = \"token_bucket\"\n{extra}\n");
    let window = |algorithm: &str, extra: &str| {
        format!("[[limit]]\nname = \"w\"\nalgorithm = \"{algorithm}\"\n{extra}\n")
    };
    let cases: Vec<(String, &str)> = vec![
        (bucket("rate = \"0/s\"\nburst = 20"), "limit \"api\": rate: must be positive"),
        (bucket("rate = \"-5/s\"\nburst = 20"), "limit \"api\": rate: must be positive"),
        (bucket("rate = \"fast\"\nburst = 20"), "limit \"api\": rate: \"fast\" is not a rate"),
        (bucket("rate = \"1/fortnight\"\nburst = 20"), "limit \"api\": rate: unknown unit \"fortnight\""),
        (bucket("rate = \"2000000000/s\"\nburst = 20"), "limit \"api\": rate: \"2000000000/s\" is faster than one token per nanosecond"),
        (bucket("rate = true\nburst = 20"), "limit \"api\": rate: must be a string like \"100/s\", not a boolean"),
        (bucket("rate = \"10/s\""), "limit \"api\": burst: missing"),
        (bucket("burst = 20"), "limit \"api\": rate: missing"),
        (bucket("rate = \"10/s\"\nburst = 0"), "limit \"api\": burst: must be at least 1"),
        (bucket("rate = \"10/s\"\nburst = 1.5"), "limit \"api\": burst: must be a whole number"),
        (bucket("rate = \"10/s\"\nburst = 2199023255553"), "limit \"api\": burst: 2199023255553 is above the maximum 2^40"),
        (bucket("rate = \"1/d\"\nburst = 1000000000"), "limit \"api\": capacity x emission interval exceeds 2^62 ns"),
        (bucket("rate = \"10/s\"\nburst = 5\nwindow = \"1s\""), "limit \"api\": window: not a field of token_bucket (it takes rate, burst)"),
        (bucket("rate = \"10/s\"\nburst = 5\nkeyd = 100"), "limit \"api\": keyd: not a field of token_bucket"),
        (window("sliding_log", "limit = 10"), "limit \"w\": window: missing"),
        (window("sliding_log", "limit = 10\nwindow = 60"), "limit \"w\": window: 60 has no unit"),
        (window("sliding_log", "limit = 10\nwindow = \"500us\""), "limit \"w\": window: \"500us\" is below the minimum of 1ms"),
        (window("sliding_log", "limit = 10\nwindow = \"0s\""), "limit \"w\": window: must be positive"),
        (window("fixed_window", "limit = 10\nwindow = \"1d\"\nalignment = \"calendar\"\nutc_offset = \"+19:00\""), "limit \"w\": utc_offset: \"+19:00\""),
        (window("fixed_window", "limit = 10\nwindow = \"1d\"\nutc_offset = \"+01:00\""), "limit \"w\": utc_offset: only with alignment = \"calendar\""),
        (window("sliding_log", "limit = 10\nwindow = \"3 fortnights\""), "limit \"w\": window: unknown unit \"fortnights\""),
        (window("sliding_window", "limit = 10\nwindow = \"1month\""), "limit \"w\": window: \"1month\": months and years have no fixed length"),
        (window("fixed_window", "limit = 10\nwindow = \"1month\"\nalignment = \"monotonic\""), "limit \"w\": alignment: a window of \"1month\" is a calendar month"),
        (window("sliding_log", "limit = -1\nwindow = \"1s\""), "limit \"w\": limit: must be at least 1"),
        (window("sliding_log", "limit = 20000000\nwindow = \"1s\""), "limit \"w\": limit: 20000000 is above the maximum 2^24"),
        (window("sliding_log", "limit = 10\nwindow = \"1s\"\nalignment = \"monotonic\""), "limit \"w\": alignment: not a field of sliding_log"),
        (window("sliding_window", "limit = 2000000\nwindow = \"1s\""), "limit \"w\": limit: 2000000 is above the maximum 2^20-1"),
        (window("fixed_window", "limit = 10\nwindow = \"1s\"\nalignment = \"utc\""), "limit \"w\": alignment: \"utc\": use \"wall_clock\", \"monotonic\" or \"calendar\""),
        (window("leaky_bucket", "limit = 10"), "limit \"w\": algorithm: unknown \"leaky_bucket\" (one of token_bucket, fixed_window, sliding_window, sliding_log, concurrency, counters)"),
        ("[[limit]]\nname = \"w\"\nlimit = 5\n".into(), "limit \"w\": algorithm: missing"),
        ("[[limit]]\nalgorithm = \"sliding_log\"\n".into(), "limit #1: name: missing"),
        ("[[limit]]\nname = 7\n".into(), "limit #1: name: must be a string, not an integer"),
        ("[[limit]]\nname = \"has space\"\nalgorithm = \"sliding_log\"\n".into(), "limit \"has space\": name: ' ' is not allowed"),
        (format!("[[limit]]\nname = \"{}\"\n", "x".repeat(64)), "name: must be 1 to 63 bytes, got 64"),
        (
            format!("{}{}", window("sliding_log", "limit = 1\nwindow = \"1s\""), window("fixed_window", "limit = 1\nwindow = \"1s\"")),
            "limit \"w\": name: defined twice (limits #1 and #2)",
        ),
        ("[[limits]]\nname = \"a\"\n".into(), "unknown key \"limits\""),
        ("# nothing here\n".into(), "no [[limit]] tables"),
        ("limit = 5\n".into(), "\"limit\" must be an array of tables"),
        ("[[limit]]\nname = \"a\"\nrate = \n".into(), ":3:8: not valid TOML"),
    ];
    let target = dir.path().join("never.shm");
    for (i, (text, message)) in cases.iter().enumerate() {
        let config = config_in(dir.path(), &format!("case{i}.toml"), text);
        for command in ["check", "create"] {
            let out = if command == "check" {
                shmlimit(&["check", s(&config)])
            } else {
                shmlimit(&["create", s(&target), "--config", s(&config)])
            };
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{command} case {i}: {text}\n{err}"
            );
            let expected = format!("shmlimit: {}", config.display());
            assert!(err.starts_with(&expected), "{command} case {i}: {err}");
            assert!(
                err.contains(message),
                "{command} case {i}: want {message:?}, got {err}"
            );
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
            assert!(out.stdout.is_empty());
        }
        assert!(!target.exists(), "case {i} created the file");
    }
}

#[test]
fn check_accepts_the_example_config() {
    // This test belongs to the command line's package (cli/): the repository root is its parent.
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .join("examples/limits.toml");
    let out = ok(&["check", s(&example)]);
    assert!(out.contains("8 limits OK"), "{out}");
    let j = json(&["check", s(&example), "--json"]);
    let limits = j["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 8);
    assert_eq!(limits[0]["name"], "downstream");
    assert_eq!(limits[4]["on_full"], "allow");
    assert_eq!(limits[7]["permits"], 5);
    assert_eq!(limits[0]["rate"], "300/s");
    // 300 per second, rounded up to a whole nanosecond between tokens.
    assert_eq!(limits[0]["emission_ns"], 3_333_334);
    for l in limits {
        assert!(row(&out, l["name"].as_str().unwrap()).contains(&l["algorithm"].as_str().unwrap()));
    }
}

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

#[test]
fn file_errors_exit_2_with_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.shm");
    let foreign = dir.path().join("foreign.shm");
    std::fs::write(&foreign, vec![7u8; 8192]).unwrap();
    let link = dir.path().join("link.shm");
    std::os::unix::fs::symlink(&foreign, &link).unwrap();
    let cases: [(&Path, &str); 4] = [
        (&missing, "shmlimit create"),
        (&foreign, "not a shmlimit file"),
        (&link, "symbolic link"),
        (dir.path(), "not a regular file"),
    ];
    for (path, message) in cases {
        for args in [
            vec!["inspect", s(path)],
            vec!["stats", s(path), "--prometheus"],
            vec!["watch", s(path), "--count", "1"],
        ] {
            let command = args[0];
            let out = shmlimit(&args);
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {}: {err}",
                path.display()
            );
            assert!(
                err.starts_with(&format!("shmlimit: {}", path.display())),
                "{err}"
            );
            assert!(err.contains(message), "{command}: want {message:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
    // Group-writable files are refused unless the mode says that is intended.
    let shared = dir.path().join("group.shm");
    ok(&[
        "create",
        s(&shared),
        "--name",
        "a",
        "--algorithm",
        "fixed_window",
        "--limit",
        "5",
        "--window",
        "1s",
        "--mode",
        "660",
    ]);
    let out = shmlimit(&["inspect", s(&shared)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--mode"), "{}", stderr(&out));
    ok(&["inspect", s(&shared), "--mode", "660"]);
}

#[test]
fn every_command_has_help_with_an_example_and_the_exit_codes() {
    let top = ok(&["--help"]);
    assert!(
        top.contains("shmlimit demo") && top.contains("Exit codes:"),
        "{top}"
    );
    for command in [
        "demo", "create", "check", "inspect", "stats", "watch", "set-rate", "reset", "gc",
    ] {
        let help = ok(&[command, "--help"]);
        assert!(help.contains("Example"), "{command}:\n{help}");
        assert!(
            help.contains(&format!("shmlimit {command} "))
                || help.contains(&format!("shmlimit {command}\n")),
            "{command}:\n{help}"
        );
        for code in ["0  success", "1  usage", "2  file error", "3  demo"] {
            assert!(help.contains(code), "{command} --help lacks {code:?}");
        }
    }
    // Usage errors exit 1.
    assert_eq!(shmlimit(&["frobnicate"]).status.code(), Some(1));
    assert_eq!(shmlimit(&["inspect"]).status.code(), Some(1));
    assert_eq!(
        shmlimit(&["stats", "x", "--json", "--prometheus"])
            .status
            .code(),
        Some(1)
    );
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

const OPTIONS_CONFIG: &str = r#"
[[limit]]
name = "per-user"
algorithm = "token_bucket"
rate = "1/h"
burst = 2
keyed = 1000
on_full = "allow"

[[limit]]
name = "dry"
algorithm = "sliding_log"
limit = 3
window = "1h"
shadow = true

[[limit]]
name = "hot"
algorithm = "token_bucket"
rate = "1000/s"
burst = 100
split = 4
fleet_total = "3000/s"
fleet_weight = 2

[[limit]]
name = "slots"
algorithm = "concurrency"
permits = 5
lease = "30s"
"#;

#[test]
fn config_options_keyed_shadow_split_concurrency_and_fleet_share() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), "options.toml", OPTIONS_CONFIG);
    let v = json(&["check", s(&config), "--json"]);
    let l = &v["limits"];
    assert_eq!(
        (l[0]["keyed"].clone(), l[0]["on_full"].clone()),
        (1000.into(), "allow".into())
    );
    assert_eq!(l[1]["shadow"], true);
    assert_eq!(
        (l[2]["split"].clone(), l[2]["fleet_weight"].clone()),
        (4.into(), 2.into())
    );
    assert_eq!(l[2]["fleet_total"], "3000/s");
    assert_eq!(
        (l[3]["permits"].clone(), l[3]["lease_ns"].clone()),
        (5.into(), 30_000_000_000u64.into())
    );
    let out = ok(&["check", s(&config)]);
    assert!(
        out.contains("per-user: keyed, 1024 slots (when full: allow)"),
        "{out}"
    );

    let path = dir.path().join("options.shm");
    ok(&["create", s(&path), "--config", s(&config)]);
    let limiter = Limiter::open(&path).unwrap();
    let defs = limiter.definitions();
    assert_eq!(defs[0].keyed.unwrap().on_full, shmlimit::FullPolicy::Allow);
    assert!(defs[1].shadow);
    assert_eq!(defs[2].split, 4);
    assert_eq!(defs[2].fleet.unwrap().weight, 2);
    // A shadow log of 3: 5 decisions all admitted, 2 counted as shadow-denied.
    let dry = limiter.sliding_log("dry").unwrap();
    assert_eq!(
        (0..5)
            .filter(|_| dry.try_acquire(1).unwrap().is_allowed())
            .count(),
        5
    );
    let per_user = limiter.keyed_token_bucket("per-user").unwrap();
    for key in [&b"alice"[..], b"bob", b"carol"] {
        assert!(per_user.try_acquire_key(key, 1).unwrap().is_allowed());
    }
    let j = json(&["inspect", s(&path), "--json"]);
    let out = ok(&["inspect", s(&path)]);
    let dry_json = &j["limits"][1];
    assert_eq!(dry_json["shadow_denied"], 2, "{dry_json}");
    assert_eq!(dry_json["allowed"], 5, "{dry_json}");
    let dry_row = row_after(&out, "state (", "dry");
    assert_eq!((number(dry_row[3]), number(dry_row[6])), (5, 2), "{out}");
    assert_eq!(j["limits"][0]["keys"]["used"], 3, "{j}");
    assert_eq!(j["limits"][0]["keys"]["slots"], 1024, "{j}");
    assert!(
        out.contains("keys per-user: 3 of 1024 slots in use"),
        "{out}"
    );
    let prom = ok(&["stats", s(&path), "--prometheus"]);
    assert!(prom.contains("limit=\"dry\"} 2"), "{prom}");
}

#[test]
fn bad_option_fields_each_give_their_message() {
    let dir = tempfile::tempdir().unwrap();
    let base =
        "[[limit]]\nname = \"x\"\nalgorithm = \"token_bucket\"\nrate = \"10/s\"\nburst = 5\n";
    let cases: &[(&str, &str)] = &[
        (
            "keyed = 100\non_full = \"maybe\"",
            "limit \"x\": on_full: \"maybe\": use \"deny\", \"allow\" or \"error\"",
        ),
        (
            "on_full = \"deny\"",
            "on_full: only keyed limits have a full table",
        ),
        ("keyed = 0", "keyed: must be at least 1 (got 0)"),
        (
            "shadow = \"yes\"",
            "shadow: must be true or false, not a string",
        ),
        ("split = 0", "split: must be at least 1 (got 0)"),
        ("split = 65", "split: 65 is above the maximum 64"),
        ("fleet_weight = 2", "fleet_weight: needs fleet_total"),
        ("fleet_total = \"0/s\"", "fleet_total: must be positive"),
        (
            "fleet_total = \"10/s\"\nfleet_weight = 0",
            "fleet_weight: must be at least 1 (got 0)",
        ),
    ];
    for (i, (extra, message)) in cases.iter().enumerate() {
        let config = config_in(
            dir.path(),
            &format!("bad{i}.toml"),
            &format!("{base}{extra}\n"),
        );
        let out = shmlimit(&["check", s(&config)]);
        assert_eq!(out.status.code(), Some(1), "{extra}");
        let err = stderr(&out);
        assert!(err.contains(message), "{extra}: {err}");
        assert!(err.contains(s(&config)), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let concurrency = "[[limit]]\nname = \"c\"\nalgorithm = \"concurrency\"\n";
    let cases: &[(&str, &str)] = &[
        ("", "permits: missing (for example permits = 5)"),
        ("permits = 0", "permits: must be at least 1 (got 0)"),
        ("permits = 5\nlease = 30", "lease: 30 has no unit"),
        (
            "permits = 5\nrate = \"1/s\"",
            "rate: not a field of concurrency",
        ),
    ];
    for (i, (extra, message)) in cases.iter().enumerate() {
        let config = config_in(
            dir.path(),
            &format!("c{i}.toml"),
            &format!("{concurrency}{extra}\n"),
        );
        let out = shmlimit(&["check", s(&config)]);
        assert_eq!(out.status.code(), Some(1), "{extra}");
        assert!(stderr(&out).contains(message), "{extra}: {}", stderr(&out));
    }
    // A rule only the library knows: a split limit cannot also be keyed.
    let config = config_in(
        dir.path(),
        "split-keyed.toml",
        &format!("{base}split = 2\nkeyed = 10\n"),
    );
    let out = shmlimit(&["check", s(&config)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("limit \"x\": "), "{}", stderr(&out));
}

#[test]
fn demo_mixed_shares_the_bucket_between_rust_and_c_workers() {
    let out = ok(&[
        "demo",
        "--mixed",
        "--workers",
        "4",
        "--seconds",
        "1",
        "--rate",
        "500/s",
        "--burst",
        "20",
        "--log-limit",
        "100",
        "--log-window",
        "250ms",
    ]);
    assert!(out.contains("within bound: yes"), "{out}");
    assert!(
        out.contains("decision counters match the workers' counts: yes"),
        "{out}"
    );
    assert!(out.contains("2 of them are C processes"), "{out}");
    // One row per worker, marked Rust or C; C workers decide on the bucket only.
    let workers: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| {
            c.len() >= 6 && c[0].parse::<u32>().is_ok() && ["C", "Rust"].contains(&c[c.len() - 1])
        })
        .collect();
    assert_eq!(workers.len(), 4, "{out}");
    let c_rows: Vec<_> = workers.iter().filter(|c| c[c.len() - 1] == "C").collect();
    assert_eq!(c_rows.len(), 2, "{out}");
    assert_eq!(
        workers.iter().filter(|c| c[c.len() - 1] == "Rust").count(),
        2,
        "{out}"
    );
    for c in &c_rows {
        assert!(number(c[1]) > 0, "a C worker decided nothing:\n{out}");
        assert_eq!(number(c[3]), 0, "C workers use the bucket only:\n{out}");
    }
    let total = row(&out, "total");
    let sum: u64 = workers.iter().map(|w| number(w[2])).sum();
    assert_eq!(number(total[2]), sum, "{out}");
    let bucket = row_after(&out, "utilisation", "bucket");
    let (admitted, bound) = (number(bucket[1]), number(bucket[2]));
    // At most the bound; at least the full bucket, under demand that never stops.
    assert!(admitted <= bound && admitted >= 20, "{out}");
    assert_eq!(bucket[3], "yes");
}

#[test]
fn create_takes_the_reboot_choice_and_inspect_reports_reboots() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let reset = dir.path().join("reset.shm");
    let args = [
        "create",
        s(&reset),
        "--name",
        "daily",
        "--algorithm",
        "fixed_window",
        "--limit",
        "10",
        "--window",
        "1d",
    ];
    ok(&[&args[..], &["--on-reboot", "reset"]].concat());
    assert!(ok(&["inspect", s(&reset)]).contains("reboot  reset: 0 state resets"));
    assert_eq!(
        json(&["inspect", s(&reset), "--json"])["on_reboot"],
        "reset"
    );
    let out = shmlimit(&[&args[..], &["--on-reboot", "translate"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("created to reset its state at a reboot, not to translate"),
        "{}",
        stderr(&out)
    );
    expect_code(&[&args[..], &["--on-reboot", "sometimes"]].concat(), 1);

    // A translated file whose wall clock went 100 days backwards across a (simulated) reboot:
    // its 1 s sliding window cannot hold the translated state, which fails closed, and says so.
    let path = dir.path().join("translate.shm");
    ok(&[
        "create",
        s(&path),
        "--name",
        "sw",
        "--algorithm",
        "sliding_window",
        "--limit",
        "5",
        "--window",
        "1s",
    ]);
    {
        let l = Limiter::open(&path).unwrap();
        assert!(l.window("sw").unwrap().try_acquire(5).unwrap().is_allowed());
    }
    let hundred_days = 100 * 86_400 * 1_000_000_000u64;
    // The old boot's wall clock read 100 days later than this one does: its offset and its
    // last Unix time.
    write_word(&path, 21, read_word(&path, 21) + hundred_days);
    write_word(&path, 22, read_word(&path, 22) + hundred_days);
    write_word(&path, 12, !read_word(&path, 12));
    let out = ok(&["inspect", s(&path)]);
    assert!(
        out.contains("reboot  translate: 1 reboot translated"),
        "{out}"
    );
    assert!(out.contains("wall clock went backwards"), "{out}");
    assert!(
        out.contains("FAILED CLOSED  limit \"sw\""),
        "inspect names the limit that fails closed\n{out}"
    );
    let j = json(&["inspect", s(&path), "--json"]);
    assert_eq!(j["failed_closed"][0], "sw", "{j}");
    assert_eq!(j["translations"], 1);
    ok(&["reset", s(&path), "sw"]);
    assert!(!ok(&["inspect", s(&path)]).contains("FAILED CLOSED"));
}

#[test]
fn demo_mixed_leaves_nothing_in_the_scratch_directory() {
    // The demo makes its scratch directory under $TMPDIR when it is set: a fresh one here, so
    // that whatever the run leaves behind is seen, and nothing another test makes is.
    let parent = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["demo", "--mixed", "--workers", "2", "--seconds", "0.2"])
        .env("TMPDIR", parent.path())
        .stdin(Stdio::null())
        .output()
        .expect("run shmlimit");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let file = row(&stdout(&out), "file")[1].to_owned();
    assert!(
        Path::new(&file).starts_with(parent.path()),
        "the demo's file {file} is not under $TMPDIR"
    );
    let left: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "the demo left {left:?} behind");

    // With --path the file is kept, and nothing else is left beside it or under $TMPDIR.
    let mine = tempfile::tempdir().unwrap();
    let file = mine.path().join("demo.shm");
    let out = Command::new(BIN)
        .args(["demo", "--mixed", "--workers", "2", "--seconds", "0.2"])
        .arg("--path")
        .arg(&file)
        .env("TMPDIR", parent.path())
        .stdin(Stdio::null())
        .output()
        .expect("run shmlimit");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let beside: Vec<_> = std::fs::read_dir(mine.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(beside, [file], "the demo left files beside its --path file");
    let left: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "the demo left {left:?} behind");
}
