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
