//! `--mixed`: C worker processes built from `ffi/examples/worker.c`, deciding on the bucket.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use shmlimit::{Clock, MonotonicClock};

use super::{WorkerReport, BUCKET};
use crate::Failure;

const WORKER_C: &str = include_str!("../../../ffi/examples/worker.c");
const HEADER: &str = include_str!("../../../ffi/include/shmlimit.h");

/// Compile the C worker into `dir`; returns its path.
pub fn compile(dir: &Path) -> Result<PathBuf, Failure> {
    let lib = crate::c_library::dir().map_err(|f| {
        Failure::file(format!(
            "demo --mixed: {}, or run the demo without --mixed",
            f.message
        ))
    })?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| {
            Failure::file(format!(
                "{}: cannot write the C worker's source: {e}",
                dir.display()
            ))
        })
    };
    write("worker.c", WORKER_C)?;
    write("shmlimit.h", HEADER)?;
    let program = dir.join("worker");
    let mut last = String::new();
    for compiler in ["cc", "gcc"] {
        let out = Command::new(compiler)
            .args(["-std=c99", "-O2", "-o"])
            .arg(&program)
            .arg(dir.join("worker.c"))
            .arg("-I")
            .arg(dir)
            .arg("-L")
            .arg(&lib)
            // DT_RPATH, not DT_RUNPATH: searched before LD_LIBRARY_PATH (which `cargo
            // test` points at a directory that may hold a stale copy of the library).
            .arg("-Wl,--disable-new-dtags")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lshmlimit")
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => return Ok(program),
            Ok(out) => {
                let err = String::from_utf8_lossy(&out.stderr);
                return Err(Failure::file(format!(
                    "demo --mixed: {compiler} could not build the C worker: {}",
                    err.lines().next().unwrap_or("(no message)")
                )));
            }
            Err(e) => last = format!("{compiler}: {e}"),
        }
    }
    Err(Failure::file(format!(
        "demo --mixed: no C compiler ({last}); install gcc, or run the demo without --mixed"
    )))
}

/// Start `n` C workers on the bucket, all at the same moment shortly from now.
pub fn spawn(
    program: &Path,
    path: &Path,
    n: u32,
    run_ns: u64,
) -> Result<Vec<(Child, u64)>, Failure> {
    // Long enough to start them all and fork the Rust workers, which start at once.
    let start_at = MonotonicClock.now_ns() + 30_000_000;
    let run_ms = run_ns.div_ceil(1_000_000).max(1);
    let mut children = Vec::new();
    for _ in 0..n {
        let child = Command::new(program)
            .args(["-d", &run_ms.to_string(), "-s", &start_at.to_string()])
            .arg(path)
            .arg(BUCKET)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match child {
            Ok(c) => children.push((c, start_at)),
            Err(e) => {
                for (mut c, _) in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(Failure::file(format!(
                    "demo --mixed: cannot start the C worker {}: {e}",
                    program.display()
                )));
            }
        }
    }
    Ok(children)
}

/// Wait for the C workers; each becomes a report whose admissions are bracketed by its
/// start moment and the moment its exit was seen (it admits nothing outside them).
pub fn collect(children: Vec<(Child, u64)>, path: &Path) -> Result<Vec<WorkerReport>, Failure> {
    let mut reports = Vec::new();
    for (child, start_at) in children {
        let pid = child.id();
        let out = child.wait_with_output().map_err(|e| {
            Failure::file(format!(
                "{}: C worker {pid}: waiting for it: {e}",
                path.display()
            ))
        })?;
        let end = MonotonicClock.now_ns();
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (Some(allowed), Some(denied), true) =
            (field("allowed="), field("denied="), out.status.success())
        else {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(Failure::file(format!(
                "{}: C worker {pid} ended with {}: {}",
                path.display(),
                out.status,
                err.lines().next().unwrap_or("(no message)")
            )));
        };
        reports.push(WorkerReport {
            c: true,
            pid,
            bucket_decisions: allowed + denied,
            bucket_admitted: allowed,
            start_ns: start_at,
            end_ns: end,
            bucket_first_ns: if allowed > 0 { start_at } else { 0 },
            bucket_last_ns: if allowed > 0 { end } else { 0 },
            ..WorkerReport::default()
        });
    }
    Ok(reports)
}
