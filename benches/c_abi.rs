//! The uncontended token-bucket decision through the C ABI:
//! `c_abi_token_bucket_{admit,deny}/shmlimit` is the Rust `try_acquire(1)`, `c_header` the C
//! program `ffi/bench/decide.c` calling `shmlimit_acquire` in a loop through `shmlimit.h`
//! (`gcc -O2`, linked against the `libshmlimit.so` built with this bench), and `python`
//! `ffi/bench/decide.py`, a loop of `Limit.try_acquire(1)` of the Python package (its compiled
//! module `shmlimit._native`, PyO3 over the library, built here by `cargo build --release -p
//! shmlimit-python` into the bench's target directory and laid out as pip would lay the package
//! out); `python_ctypes_raw` the same script calling `shmlimit_acquire` of the same
//! `libshmlimit.so` through ctypes directly (a ctypes binding's boundary).
//!
//! Each sample (`iter_custom`) spawns the program with the iteration count (at least
//! [`MIN_DECISIONS`], scaled back to the count asked for); it attaches to the limiter file by
//! path, makes 1,000 untimed decisions, times its loop of decisions itself and prints the
//! nanoseconds, which are the sample's time (process start, attach, resolve and the first
//! calls are outside it). Without `gcc`, `python3`, the built library or a build of the Python
//! module the affected benchmarks are skipped with a printed notice.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use tempfile::TempDir;

use crate::harness::bench_single;
use crate::peers::shmlimit::{Shmlimit, NAME};
use crate::peers::{prime, scratch_dir, Workload};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding the `libshmlimit.so` cargo built with this bench: `deps/` next to the
/// bench executable, or the profile directory above it.
fn lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    let found = [Some(deps), deps.parent()]
        .into_iter()
        .flatten()
        .find(|dir| dir.join("libshmlimit.so").is_file())
        .map(Path::to_owned);
    found
}

/// The programs of this group, built once.
struct Programs {
    lib: PathBuf,
    c: Option<PathBuf>,
    python: Option<PathBuf>,
    /// The directory holding the assembled `shmlimit` package (for `PYTHONPATH`).
    python_path: PathBuf,
    _dir: TempDir,
}

/// Lay out the Python package in `top/shmlimit/` (its sources and the compiled module) as
/// `pip install ffi/python` would. The module is built as maturin builds it (an extension
/// module: the interpreter's symbols left unresolved), in release, in the target directory that
/// holds `lib` (`<target>/release/deps` or `<target>/release`).
fn python_package(lib: &Path, top: &Path) -> Result<(), String> {
    let suffix = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))",
        ])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let suffix = String::from_utf8_lossy(&suffix.stdout).trim().to_owned();
    if suffix.is_empty() {
        return Err("python3 has no EXT_SUFFIX".into());
    }
    let target = lib
        .ancestors()
        .find(|d| d.file_name().is_some_and(|n| n == "release"))
        .and_then(Path::parent)
        .ok_or_else(|| format!("no release directory above {}", lib.display()))?;
    let out = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--release", "-p", "shmlimit-python"])
        .env("PYO3_BUILD_EXTENSION_MODULE", "1")
        .env("CARGO_TARGET_DIR", target)
        .current_dir(root())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building shmlimit._native failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let pkg = top.join("shmlimit");
    std::fs::create_dir_all(&pkg).map_err(|e| e.to_string())?;
    let source = root().join("ffi/python/src/shmlimit");
    for entry in std::fs::read_dir(&source).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&path, pkg.join(path.file_name().unwrap_or_default()))
                .map_err(|e| e.to_string())?;
        }
    }
    std::fs::copy(
        target.join("release/lib_native.so"),
        pkg.join(format!("_native{suffix}")),
    )
    .map_err(|e| format!("copy the compiled module: {e}"))?;
    Ok(())
}

fn build() -> Option<Programs> {
    let Some(lib) = lib_dir() else {
        eprintln!("notice: c_abi benchmarks skipped: libshmlimit.so not found next to the bench");
        return None;
    };
    let dir = scratch_dir();
    let exe = dir.path().join("decide");
    let status = Command::new("gcc")
        .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("ffi/include"))
        .arg(root().join("ffi/bench/decide.c"))
        .arg("-L")
        .arg(&lib)
        .arg("-lshmlimit")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .status();
    let c = match status {
        Ok(s) if s.success() => Some(exe),
        other => {
            eprintln!("notice: c_abi_*/c_header skipped: gcc failed ({other:?})");
            None
        }
    };
    let python_path = dir.path().join("python");
    let python = match python_package(&lib, &python_path) {
        Ok(()) => Some(root().join("ffi/bench/decide.py")),
        Err(e) => {
            eprintln!("notice: c_abi_*/python* skipped: {e}");
            None
        }
    };
    Some(Programs {
        lib,
        c,
        python,
        python_path,
        _dir: dir,
    })
}

/// Fewest decisions one spawned program times: criterion asks for very few iterations per
/// sample of a slow routine, and a loop of one or two decisions would measure their first-call
/// costs rather than the steady state. Longer loops are timed and scaled down to `iters`.
const MIN_DECISIONS: u64 = 100_000;

/// Run `command PATH LIMIT iters`; the time it printed and how many decisions admitted.
fn spawn(mut command: Command, file: &Path, iters: u64, raw: bool) -> (Duration, u64) {
    command.arg(file).arg(NAME).arg(iters.to_string());
    if raw {
        command.arg("raw");
    }
    let out = command.output().expect("spawn the decision program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "decision program failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |key: &str| -> u64 {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in the program's output: {stdout}"))
    };
    (Duration::from_nanos(field("ns=")), field("allowed="))
}

/// Register `name`: every sample spawns the program `command()` makes on a file of `workload`
/// (with the argument `raw` when `raw`).
fn bench_spawned(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    workload: Workload,
    raw: bool,
    command: impl Fn() -> Command,
) {
    let mut contender: Option<Shmlimit> = None;
    let mut warned = false;
    group.bench_function(name, |b| {
        let contender = contender.get_or_insert_with(|| {
            let c = Shmlimit::token_bucket(workload);
            prime(name, &c, workload, 1);
            c
        });
        b.iter_custom(|iters| {
            let n = iters.max(MIN_DECISIONS);
            let (elapsed, admitted) = spawn(command(), contender.path(), n, raw);
            let expected = if workload == Workload::Admit { n } else { 0 };
            if admitted != expected && !warned {
                warned = true;
                eprintln!(
                    "warning: {name} ({}): {admitted} of {n} decisions admitted, expected {expected}",
                    workload.name()
                );
            }
            // The time of `iters` decisions at the loop's rate.
            Duration::from_nanos((elapsed.as_nanos() * u128::from(iters) / u128::from(n)) as u64)
        });
    });
}

/// Register both groups.
pub fn bench(c: &mut Criterion) {
    let programs = build();
    for workload in Workload::ALL {
        let mut group = c.benchmark_group(format!("c_abi_token_bucket_{}", workload.name()));
        group.throughput(Throughput::Elements(1));
        // Every sample of the spawned programs starts a process: few, equally long samples.
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        bench_single(&mut group, "shmlimit", workload, 1, || {
            Shmlimit::token_bucket(workload)
        });
        if let Some(p) = &programs {
            if let Some(exe) = &p.c {
                bench_spawned(&mut group, "c_header", workload, false, || {
                    let mut cmd = Command::new(exe);
                    cmd.env("LD_LIBRARY_PATH", &p.lib);
                    cmd
                });
            }
            if let Some(script) = &p.python {
                for (name, raw) in [("python", false), ("python_ctypes_raw", true)] {
                    bench_spawned(&mut group, name, workload, raw, || {
                        let mut cmd = Command::new("python3");
                        cmd.arg(script)
                            .env("PYTHONPATH", &p.python_path)
                            .env("SHMLIMIT_LIBRARY", p.lib.join("libshmlimit.so"));
                        cmd
                    });
                }
            }
        }
        group.finish();
    }
}
