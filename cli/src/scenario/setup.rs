//! What a run needs before it starts: the Python instances' worker and package, and the limiter
//! file.

use super::*;

/// Python instances: the worker script and, next to it, the `shmlimit` package laid out as
/// `pip install ffi/python` would install it (its Python modules, embedded in this binary, and
/// its compiled module `shmlimit._native` built with this binary), or the installed package
/// when this build has no compiled module.
pub(super) struct PythonSetup {
    pub(super) script: PathBuf,
    /// The adaptive scenario's worker.
    pub(super) adaptive_script: PathBuf,
    /// Where the package comes from: laid out next to the scripts, or installed.
    pub(super) package: &'static str,
}

/// The Python modules of the package (ffi/python/src/shmlimit).
const PACKAGE: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../ffi/python/src/shmlimit/__init__.py"),
    ),
    (
        "aio.py",
        include_str!("../../../ffi/python/src/shmlimit/aio.py"),
    ),
    (
        "counters.py",
        include_str!("../../../ffi/python/src/shmlimit/counters.py"),
    ),
    (
        "definitions.py",
        include_str!("../../../ffi/python/src/shmlimit/definitions.py"),
    ),
    (
        "errors.py",
        include_str!("../../../ffi/python/src/shmlimit/errors.py"),
    ),
    (
        "limit.py",
        include_str!("../../../ffi/python/src/shmlimit/limit.py"),
    ),
    (
        "limiter.py",
        include_str!("../../../ffi/python/src/shmlimit/limiter.py"),
    ),
    (
        "permits.py",
        include_str!("../../../ffi/python/src/shmlimit/permits.py"),
    ),
    (
        "web.py",
        include_str!("../../../ffi/python/src/shmlimit/web.py"),
    ),
    (
        "_webhold.py",
        include_str!("../../../ffi/python/src/shmlimit/_webhold.py"),
    ),
];

/// The compiled module built with this binary: `lib_native.so` (`cargo build -p
/// shmlimit-python`, which maturin and tests/ffi_python.rs also run) in the directory of
/// `libshmlimit.so` or, for a binary of `deps/`, the one above it.
fn compiled_module() -> Option<PathBuf> {
    let dir = crate::c_library::dir().ok()?;
    [dir.join("lib_native.so"), dir.join("../lib_native.so")]
        .into_iter()
        .find(|p| p.is_file())
}

pub(super) fn python_setup(dir: &Path) -> Result<PythonSetup, String> {
    let python = |code: &str| {
        Command::new("python3")
            .args(["-c", code])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let suffix = python("import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
        .ok_or("python3 not found")?;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let package = match compiled_module() {
        Some(module) => {
            let package = dir.join("shmlimit");
            std::fs::create_dir_all(&package).map_err(|e| format!("{}: {e}", package.display()))?;
            for (name, text) in PACKAGE {
                write(package.join(name), text)?;
            }
            let to = package.join(format!("_native{suffix}"));
            std::fs::copy(&module, &to).map_err(|e| format!("{}: {e}", module.display()))?;
            "the package's modules with the compiled module built with this binary"
        }
        None if python("import shmlimit._native").is_some() => "the installed shmlimit package",
        None => {
            return Err(
                "the Python package's compiled module was not found next to libshmlimit.so \
                 (build it with PYO3_BUILD_EXTENSION_MODULE=1 cargo build -p shmlimit-python) \
                 and no shmlimit package is installed (pip install ./ffi/python)"
                    .into(),
            )
        }
    };
    write(
        dir.join("scenario_worker.py"),
        include_str!("../scenario_worker.py"),
    )?;
    write(
        dir.join("adaptive_worker.py"),
        include_str!("../adaptive_worker.py"),
    )?;
    Ok(PythonSetup {
        script: dir.join("scenario_worker.py"),
        adaptive_script: dir.join("adaptive_worker.py"),
        package,
    })
}

/// One host's limiter file; with several hosts the agents set the shares of `total`, `first`
/// and `retry`, and the intake and the permits are split evenly.
pub(super) fn create_limiter(path: &Path, hosts: u64) -> Result<Limiter, Failure> {
    let share = |(rate, burst): (u64, u64)| {
        shmlimit::Rate::new(rate, Duration::from_secs(hosts))
            .map(|r| TokenBucket::new(burst, r))
            .map_err(|e| Failure::config(format!("--hosts {hosts}: {e}")))
    };
    Limiter::builder()
        .limit("total", share(TOTAL)?)
        .limit("first", share(FIRST)?)
        .limit("retry", share(RETRY)?)
        // The queue of first attempts: booked at their rate, at most --queue-ms ahead.
        .limit("intake", share(FIRST)?)
        .limit("inflight", Concurrency::new(PERMITS / hosts))
        .keyed_limit(
            "clients",
            TokenBucket::per_second(CLIENT_RATE).burst(CLIENT_RATE),
            Keyed::new(256),
        )
        .create_or_open(path)
        .map_err(|e| Failure::library(e, path))
}
