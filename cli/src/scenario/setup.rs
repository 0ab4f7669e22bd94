//! What a run needs before it starts: the Python instances' worker and package, and the limiter
//! file.

use super::*;

/// Python instances: the worker script and, next to it, the `shmlimit` package laid out as
/// `pip install ffi/python` would install it (its Python module, its C extension compiled here
/// against the library of this build, and that library).
pub(super) struct PythonSetup {
    pub(super) script: PathBuf,
}

pub(super) fn python_setup(dir: &Path) -> Result<PythonSetup, String> {
    let info = Command::new("python3")
        .arg("-c")
        .arg(
            "import sysconfig; print(sysconfig.get_paths()['include']); \
             print(sysconfig.get_config_var('EXT_SUFFIX'))",
        )
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .ok_or("python3 not found")?;
    let info = String::from_utf8_lossy(&info.stdout).into_owned();
    let (include, suffix) = info
        .trim()
        .split_once('\n')
        .ok_or("python3 did not report its include directory")?;
    if !Path::new(include).join("Python.h").is_file() {
        return Err(format!(
            "{include}/Python.h not found: the Python package's extension needs the Python \
             headers (Debian: python3-dev)"
        ));
    }
    let library = crate::c_library::dir()
        .map_err(|f| f.message)?
        .join("libshmlimit.so");
    let package = dir.join("shmlimit");
    std::fs::create_dir_all(&package).map_err(|e| format!("{}: {e}", package.display()))?;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write(
        package.join("__init__.py"),
        include_str!("../../../ffi/python/src/shmlimit/__init__.py"),
    )?;
    write(
        dir.join("_native.c"),
        include_str!("../../../ffi/python/src/shmlimit/_native.c"),
    )?;
    write(
        dir.join("shmlimit.h"),
        include_str!("../../../ffi/include/shmlimit.h"),
    )?;
    std::fs::copy(&library, package.join("libshmlimit.so"))
        .map_err(|e| format!("{}: {e}", library.display()))?;
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2"])
        .arg(format!("-I{include}"))
        .arg(format!("-I{}", dir.display()))
        .arg(dir.join("_native.c"))
        .arg(format!("-L{}", package.display()))
        .args([
            "-lshmlimit",
            "-Wl,-rpath,$ORIGIN",
            "-Wl,--disable-new-dtags",
            "-o",
        ])
        .arg(package.join(format!("_native{}", suffix.trim())))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "compiling the Python package's extension failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    write(
        dir.join("scenario_worker.py"),
        include_str!("../scenario_worker.py"),
    )?;
    Ok(PythonSetup {
        script: dir.join("scenario_worker.py"),
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
