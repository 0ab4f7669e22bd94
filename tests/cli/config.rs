//! `shmlimit create` and `check`: files made from a config or from inline flags, the options a
//! config may give, and what `inspect` then shows of a fresh file.

use super::*;

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

/// A keyed adaptive concurrency limit from a config: `algorithm = "adaptive_concurrency"` with
/// `keyed`; workers resolve it as keyed adaptive, and `inspect` shows its keys and holders, `gc`
/// frees what a dead holder left.
#[test]
fn config_defines_a_keyed_adaptive_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(
        dir.path(),
        "keyed_adaptive.toml",
        "[[limit]]\nname = \"per_host\"\nalgorithm = \"adaptive_concurrency\"\nmin = 2\n\
         max = 16\nkeyed = 100\non_full = \"error\"\n",
    );
    let path = dir.path().join("app.shm");
    ok(&["create", s(&path), "--config", s(&config)]);
    let limiter = Limiter::open(&path).unwrap();
    let def = &limiter.definitions()[0];
    assert_eq!(def.keyed.unwrap().on_full, shmlimit::FullPolicy::Error);
    let per_host = limiter.keyed_adaptive_concurrency("per_host").unwrap();
    let held: Vec<_> = [&b"db-1"[..], b"db-1", b"db-2"]
        .iter()
        .map(|k| per_host.try_acquire(k).unwrap().unwrap())
        .collect();
    assert!(per_host.try_acquire(b"db-1").unwrap().is_none());
    let j = json(&["inspect", s(&path), "--json"]);
    assert_eq!(j["limits"][0]["keys"]["used"], 2, "{j}");
    assert_eq!(j["limits"][0]["keys"]["slots"], 128, "{j}");
    let out = ok(&["inspect", s(&path)]);
    assert!(
        out.contains("keys per_host: 2 of 128 slots in use"),
        "{out}"
    );
    assert!(out.contains("permits per_host: 3 held"), "{out}");
    drop(held);
    let out = ok(&["inspect", s(&path)]);
    assert!(out.contains("permits per_host: 0 held"), "{out}");
    // Too many permits per key: refused by `check` with the library's reason.
    let bad = config_in(
        dir.path(),
        "bad.toml",
        "[[limit]]\nname = \"per_host\"\nalgorithm = \"adaptive_concurrency\"\nmin = 2\n\
         max = 65\nkeyed = 100\n",
    );
    let out = shmlimit(&["check", s(&bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("at most 64"), "{}", stderr(&out));
}
