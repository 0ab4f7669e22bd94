//! What the user is told when something is wrong: each bad config field and option with its
//! message, file errors with exit code 2, and the help of every command.

use super::*;

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
        (window("leaky_bucket", "limit = 10"), "limit \"w\": algorithm: unknown \"leaky_bucket\" (one of token_bucket, fixed_window, sliding_window, sliding_log, concurrency, adaptive_concurrency, counters)"),
        (window("adaptive_concurrency", "min = 2\nmax = 40\nsmoothing = nan"), "limit \"w\": smoothing NaN: must be within [0.0001, 0.9999]"),
        (window("adaptive_concurrency", "min = 2\nmax = 40\ntolerance = 0.5"), "limit \"w\": tolerance 0.5: must be within [1, 15]"),
        (window("adaptive_concurrency", "min = 2\nmax = 40\nbackoff = inf"), "limit \"w\": backoff inf: must be within [0.0001, 0.9999]"),
        (window("adaptive_concurrency", "min = 2\nmax = 40\nheadroom = \"lots\""), "limit \"w\": headroom: \"lots\": must be a number"),
        (window("adaptive_concurrency", "min = 2\nmax = 40\ninitial = 41"), "limit \"w\": initial limit 41: must be within [2, 40]"),
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
