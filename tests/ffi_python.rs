//! The Python package `ffi/python` (`shmlimit`: Python sources over one compiled module,
//! `shmlimit._native`, PyO3 over the Rust library): its test suite, Python processes sharing one
//! budget with Rust processes on one file, and permits of a SIGKILLed Python holder taken over by
//! Rust.
//!
//! `cargo test` cannot pip-install, so this assembles the package as pip would lay it out
//! (`target/python/<profile>/shmlimit/`: the Python sources and the compiled module, built here
//! by `cargo build -p shmlimit-python` in this test's profile) and runs the suite with
//! `python3 -m unittest`. CI (`.ci/run`, step "python package") also builds the real wheel with
//! maturin and runs the same suite with pytest against the installed wheel.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::cbuild::{check_shared_bucket, lib_dir, RustWorker};
use common::root;
use shmlimit::{Clock, Limiter, MonotonicClock, Rate, TokenBucket};

/// `python3 -c CODE`'s standard output, trimmed.
fn python_says(code: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", code])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The target directory this test was built in (`target/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let lib = lib_dir();
    let profile = lib
        .ancestors()
        .find(|d| d.file_name().is_some_and(|n| n != "deps"))
        .expect("target/<profile>");
    profile.parent().expect("target/").to_owned()
}

/// The package, assembled once per test binary: the directory to put on `PYTHONPATH`.
fn package() -> &'static Path {
    static PACKAGE: OnceLock<PathBuf> = OnceLock::new();
    PACKAGE.get_or_init(|| {
        let source = root().join("ffi/python/src/shmlimit");
        let profile = lib_dir()
            .ancestors()
            .find(|d| d.file_name().is_some_and(|n| n != "deps"))
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "debug".into());
        let top = root().join("target/python").join(&profile);
        let pkg = top.join("shmlimit");
        let _ = std::fs::remove_dir_all(&pkg);
        std::fs::create_dir_all(&pkg).expect("create the package directory");
        for entry in std::fs::read_dir(&source).expect("read ffi/python/src/shmlimit") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            if name.ends_with(".py") || name.ends_with(".pyi") || name == "py.typed" {
                std::fs::copy(&path, pkg.join(&name)).expect("copy a source");
            }
        }
        // The compiled module, built as maturin builds it (an extension module: the interpreter's
        // symbols left unresolved), in this test's profile and target directory.
        let release = profile != "debug";
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "-p", "shmlimit-python"])
            .env("PYO3_BUILD_EXTENSION_MODULE", "1")
            .env("CARGO_TARGET_DIR", target_dir())
            .current_dir(root());
        if release {
            cargo.arg("--release");
        }
        let out = cargo.output().expect("cargo runs");
        assert!(
            out.status.success(),
            "building shmlimit._native failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let suffix = python_says("import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))");
        std::fs::copy(
            lib_dir().join("lib_native.so"),
            pkg.join(format!("_native{}", suffix.trim())),
        )
        .expect("copy the compiled module");
        top
    })
}

fn python() -> Command {
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", package())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(root().join("ffi/python"));
    cmd
}

/// The package's test suite (ffi/python/tests) with unittest: tests that need what this
/// machine lacks (gunicorn, uvicorn, limits, redis...) report themselves skipped, never passed;
/// CI runs the same suite with pytest against the installed wheel with all of them.
#[test]
fn python_package_tests_pass() {
    let out = python()
        .args(["-m", "unittest", "discover", "-v", "-s", "tests", "-t", "."])
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "python tests failed:\n{stderr}");
    let ran: u32 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split(' ').next()?.parse().ok())
        .expect("unittest reports how many ran");
    assert!(ran >= 50, "only {ran} Python tests ran:\n{stderr}");
    assert!(stderr.contains("\nOK"), "{stderr}");
}

/// Three Python processes (multiprocessing, each attaching by path) and three Rust processes
/// decide on the same limits at the same time; the combined admissions respect each bound.
#[test]
fn python_and_rust_processes_share_one_budget() {
    const RUST: usize = 3;
    const PYTHON: usize = 3;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shared.shm");
    let clock = MonotonicClock;
    let (burst, per_second) = (100u64, 2_000u64);
    let limiter = Limiter::builder()
        // 600 tokens refilled at one per hour: exactly 600 admissions in this test.
        .limit(
            "fixed",
            TokenBucket::new(600, Rate::new(1, Duration::from_secs(3600)).unwrap()),
        )
        .limit("paced", TokenBucket::per_second(per_second).burst(burst))
        .create_or_open(&path)
        .expect("create");

    // "fixed": every worker makes at least 700 attempts, so together they always drain it.
    for (name, run_ms, min_attempts) in [("fixed", 300u64, 700u64), ("paced", 500, 0)] {
        let limit = limiter.token_bucket(name).expect("limit");
        let mut script = python()
            .arg("share_budget.py")
            .arg(&path)
            .arg(name)
            .arg(PYTHON.to_string())
            .arg(run_ms.to_string())
            .arg(min_attempts.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 share_budget.py");
        // Wait until every Python process has attached, then start everyone together.
        let mut stdout = BufReader::new(script.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("read from share_budget.py");
        if line.trim() != "ready" {
            let out = script.wait_with_output().expect("wait for python");
            panic!(
                "share_budget.py did not get ready ({line:?}):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let start_ns = clock.now_ns() + 100_000_000;
        let until_ns = start_ns + run_ms * 1_000_000;
        let forked: Vec<_> = (0..RUST)
            .map(|_| RustWorker::fork(&limit, start_ns, until_ns, min_attempts))
            .collect();
        writeln!(script.stdin.take().expect("stdin"), "{start_ns}").expect("send the start time");
        let rust: Vec<_> = forked.into_iter().map(RustWorker::reap).collect();
        let mut report = String::new();
        stdout.read_to_string(&mut report).expect("read the report");
        let out = script.wait_with_output().expect("wait for python");
        assert!(
            out.status.success(),
            "share_budget.py failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(&report).expect("share_budget.py prints JSON");
        let py = (
            report["allowed"].as_u64().expect("allowed"),
            report["denied"].as_u64().expect("denied"),
        );
        let rust_end = rust.iter().map(|r| r.last_ns).max().unwrap_or(0);
        let end_ns = rust_end.max(report["end_ns"].as_u64().expect("end_ns"));
        let rust = rust
            .iter()
            .fold((0, 0), |a, r| (a.0 + r.allowed, a.1 + r.denied));
        // Every decision is dated after `start_ns` (every worker waits for it) and before the
        // clock read its worker took after its last decision.
        let elapsed_ns = end_ns - start_ns;
        let (allowed, denied) = (rust.0 + py.0, rust.1 + py.1);
        let stats = limit.stats();
        println!(
            "{name}: Rust allowed {} denied {}, Python allowed {} denied {} ({}), stats {stats:?}",
            rust.0, rust.1, py.0, py.1, report["processes"]
        );
        assert_eq!(
            report["processes"].as_array().map(Vec::len),
            Some(PYTHON),
            "every Python process reported"
        );
        assert!(py.0 + py.1 > 0 && rust.0 + rust.1 > 0);
        check_shared_bucket(
            name,
            &stats,
            (allowed, denied),
            elapsed_ns,
            600,
            (burst, per_second),
        );
    }
}

/// A Python process holding both permits of a concurrency limit (through `Limit.permit()`) is
/// SIGKILLed: this Rust process takes both over, while a live Python holder's are never taken;
/// a Python `with` block releases its permit when it ends.
#[test]
fn permits_of_a_killed_python_holder_are_taken_over() {
    const SCRIPT: &str = r#"
import sys, time, shmlimit
pool = shmlimit.Limiter.open(sys.argv[1]).limit("pool")
if sys.argv[2] == "hold":
    p, q = pool.permit(), pool.permit()
    print(p.id, q.id, flush=True)
    time.sleep(600)
else:
    with pool.permit() as p:
        print("in", p.id, flush=True)
        sys.stdin.readline()
    print("out", flush=True)
    sys.stdin.readline()
"#;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("permits.shm");
    let limiter = Limiter::builder()
        .limit("pool", shmlimit::Concurrency::new(2))
        .create_or_open(&path)
        .expect("create");
    let pool = limiter.concurrency("pool").expect("pool");
    let spawn = |mode: &str| {
        python()
            .args(["-c", SCRIPT])
            .arg(&path)
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 -c")
    };
    let line = |child: &mut std::process::Child| {
        let mut out = BufReader::new(child.stdout.as_mut().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("a line from python");
        line
    };

    // A `with` block holds its permit until it ends.
    let mut with = spawn("with");
    let first = line(&mut with);
    assert!(first.starts_with("in "), "{first:?}");
    let holders = pool.permit_holders();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].pid, with.id());
    assert_eq!(
        first.trim_start_matches("in ").trim(),
        holders[0].id.to_string()
    );
    writeln!(with.stdin.as_mut().expect("stdin")).expect("end the block");
    assert_eq!(line(&mut with).trim(), "out");
    assert!(
        pool.permit_holders().is_empty(),
        "released at the end of the block"
    );
    drop(with.stdin.take());
    assert!(with.wait().expect("wait").success());

    // A live holder keeps both permits; once it is killed, both are taken over.
    let mut holder = spawn("hold");
    let ids: Vec<u64> = line(&mut holder)
        .split_whitespace()
        .map(|w| w.parse().expect("an id"))
        .collect();
    assert_eq!(ids.len(), 2);
    let holders = pool.permit_holders();
    assert_eq!(holders.len(), 2);
    assert!(holders
        .iter()
        .all(|h| h.pid == holder.id() && !h.reclaimable && ids.contains(&h.id)));
    assert!(pool.try_acquire_permit().expect("acquire").is_none());
    holder.kill().expect("SIGKILL");
    let status = holder.wait().expect("reap");
    assert!(!status.success());
    let a = pool.try_acquire_permit().expect("acquire");
    let b = pool.try_acquire_permit().expect("acquire");
    assert!(a.is_some() && b.is_some(), "both permits taken over");
    assert!(pool.try_acquire_permit().expect("acquire").is_none());
    assert!(pool
        .permit_holders()
        .iter()
        .all(|h| h.pid == std::process::id()));
}
