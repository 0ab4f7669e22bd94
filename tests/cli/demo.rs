//! `shmlimit demo`: the counts it reaches and the bounds it keeps, the file it keeps on request,
//! its flags, and the mixed Rust and C run that leaves nothing behind.

use super::*;

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
