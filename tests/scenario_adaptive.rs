//! The adaptive scenario through the real binary, shortened: `shmlimit demo --scenario adaptive
//! --phase-seconds 1 --json PATH` runs its three arms through the three knees and writes every
//! figure of every phase and arm. Whether the shared arm meets its targets in phases this short
//! is not asserted (exit code 0, or 3 when it misses them): the figures of full runs are in
//! docs/scenario.md.

mod common;

use std::process::Command;

use common::temp_path;

#[test]
fn adaptive_scenario_writes_every_phase_and_arm() {
    let (dir, json) = temp_path("adaptive.json");
    let chart = dir.path().join("adaptive.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_shmlimit"))
        .args(["demo", "--scenario", "adaptive", "--phase-seconds", "1"])
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .output()
        .expect("run the scenario");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0) | Some(3)),
        "exit {code:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("shared arm targets"), "{stdout}");
    // Two of the eight workers are Python processes (the package's compiled module built with
    // this binary, or the installed package), each making calls in every arm; a machine
    // without them says so.
    if stdout.contains("Rust workers only (") {
        eprintln!("no Python workers here: {stdout}");
    } else {
        assert!(stdout.contains("2 of them Python"), "{stdout}");
        for arm in ["shared", "per_process", "fixed"] {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{arm} arm: ")))
                .unwrap_or_else(|| panic!("no {arm} line: {stdout}"));
            let by_python: u64 = line
                .split(" of them by the Python workers")
                .next()
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            assert!(by_python > 0, "{line}");
        }
    }
    let text = std::fs::read_to_string(&json).expect("--json written");
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let phases = value["phases"].as_array().expect("phases");
    let knees: Vec<u64> = phases.iter().map(|p| p["knee"].as_u64().unwrap()).collect();
    assert_eq!(knees, [32, 12, 48]);
    for phase in phases {
        assert!(phase["name"].is_string());
        for arm in ["shared", "per_process", "fixed"] {
            let a = &phase["arms"][arm];
            for field in ["in_flight_mean", "latency_p99_ms", "goodput_per_s"] {
                assert!(a[field].as_f64().is_some(), "{arm}.{field}: {text}");
            }
            assert!(a.get("converged_after_s").is_some(), "{arm}: {text}");
        }
        // The fixed arm holds 32 in flight whatever the knee (192 callers want more).
        let fixed = phase["arms"]["fixed"]["in_flight_mean"].as_f64().unwrap();
        assert!(fixed <= 32.0 + 1e-6, "{fixed}");
    }
    assert!(std::fs::read_to_string(&chart).unwrap().starts_with("<svg"));
}

/// `algorithm = "adaptive_concurrency"` in a config: `create` makes it, `inspect` and `stats
/// --prometheus` show its current limit; min above max is a config error (exit 1) that creates
/// nothing.
#[test]
fn a_config_defines_an_adaptive_limit_and_inspect_shows_it() {
    let (dir, file) = temp_path("adaptive.shm");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_shmlimit"))
            .args(args)
            .output()
            .expect("run shmlimit")
    };
    let config = dir.path().join("limits.toml");
    let write = |text: &str| std::fs::write(&config, text).unwrap();
    let (f, c) = (file.to_str().unwrap(), config.to_str().unwrap());
    write("[[limit]]\nname = \"llm\"\nalgorithm = \"adaptive_concurrency\"\nmin = 9\nmax = 8\n");
    let out = run(&["create", f, "--config", c]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("above maximum"),
        "{out:?}"
    );
    assert!(!file.exists());
    write(
        "[[limit]]\nname = \"llm\"\nalgorithm = \"adaptive_concurrency\"\nmin = 4\nmax = 128\n\
         initial = 16\nwindow = \"50ms\"\nsmoothing = 0.5\n",
    );
    let out = run(&["create", f, "--config", c]);
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&run(&["inspect", f]).stdout).into_owned();
    assert!(
        shown.contains("4 to 128 permits held at once, adapting every 50 ms"),
        "{shown}"
    );
    assert!(
        shown.contains("adaptive llm: limit 16.00 (16 permits, range 4..=128)"),
        "{shown}"
    );
    let prom = String::from_utf8_lossy(&run(&["stats", f, "--prometheus"]).stdout).into_owned();
    assert!(prom.contains("shmlimit_adaptive_limit{"), "{prom}");
}
