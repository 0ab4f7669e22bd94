//! Building and running the C and Python sides of the C ABI tests: where the library of this
//! build is, compiling a C program strictly against it, and forking Rust workers that decide
//! beside the C or Python processes.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use shmlimit::{Clock, MonotonicClock};

use super::root;

/// The directory holding the `libshmlimit.so` (and `libshmlimit.a`) that cargo built for this
/// test run: `target/<profile>/deps/`, next to the test executable. (Cargo copies them up to
/// `target/<profile>/` only when the library itself is a build target, as in `cargo build`, so
/// that copy may be missing or stale under `cargo test`.)
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("target/<profile>/deps/<test>");
    let profile = deps.parent().expect("target/<profile>/");
    for dir in [deps, profile] {
        if ["libshmlimit.so", "libshmlimit.a"]
            .iter()
            .all(|lib| dir.join(lib).is_file())
        {
            return dir.to_owned();
        }
    }
    panic!(
        "libshmlimit.so and libshmlimit.a not found in {} or {} (the crate builds them as \
         its cdylib and staticlib before the integration tests)",
        deps.display(),
        profile.display()
    );
}

/// The `libshmlimit.so` of this build.
pub fn library() -> PathBuf {
    lib_dir().join("libshmlimit.so")
}

/// Warnings are errors, and the code must be pedantic C (or C++).
pub const STRICT: &[&str] = &["-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g"];

/// How a C program is linked to the library.
#[derive(Clone, Copy)]
pub enum Link {
    Shared,
    Static,
}

/// Compile `source` into `out` with `compiler` and the language flags `lang`, strictly, linked
/// against this build's libshmlimit.
pub fn compile(compiler: &str, lang: &[&str], source: &Path, out: &Path, link: Link) {
    let lib = lib_dir();
    let mut cmd = Command::new(compiler);
    cmd.args(lang)
        .args(STRICT)
        .arg("-I")
        .arg(root().join("ffi/include"))
        .arg(source)
        .arg("-o")
        .arg(out);
    match link {
        Link::Shared => {
            cmd.arg("-L")
                .arg(&lib)
                .arg("-lshmlimit")
                .arg(format!("-Wl,-rpath,{}", lib.display()));
        }
        Link::Static => {
            cmd.arg(lib.join("libshmlimit.a"))
                .args(["-lpthread", "-ldl", "-lm"]);
        }
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A command running a C program built here. `cargo test` puts `target/<profile>/` on
/// `LD_LIBRARY_PATH`, which the loader searches before the program's run path; point it at the
/// library of this build instead, so a stale copy there is never loaded.
pub fn c_program(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", lib_dir());
    cmd
}

/// A forked Rust worker deciding on a limit beside C or Python processes.
pub struct RustWorker {
    pid: libc::pid_t,
    report: OwnedFd,
}

/// What a [`RustWorker`] reports: its admissions, denials, and the clock read after its last
/// decision.
#[derive(Debug, Clone, Copy)]
pub struct WorkerReport {
    pub allowed: u64,
    pub denied: u64,
    pub last_ns: u64,
}

impl RustWorker {
    /// Fork a worker deciding cost 1 on `limit` (resolved before the fork: the child shares the
    /// parent's MAP_SHARED mapping, as an attached process would) from `start_ns` until
    /// `until_ns`, and at least `min_attempts` times.
    pub fn fork(
        limit: &shmlimit::TokenBucketLimit,
        start_ns: u64,
        until_ns: u64,
        min_attempts: u64,
    ) -> Self {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: pipe2 succeeded, so both are open descriptors owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child runs only code that neither allocates nor takes locks (clock reads,
        // atomic decisions, write(2), _exit(2)), so forking a multi-threaded test process is
        // sound.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let clock = MonotonicClock;
            // Sleep, not spin, while waiting: the other processes need the CPUs to start.
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 200_000,
            };
            while clock.now_ns() < start_ns {
                // SAFETY: `pause` is a valid timespec; the remainder pointer may be NULL.
                unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
            // allowed, denied, and the clock read after the last decision.
            let mut report = [0u64; 3];
            let mut i = 0u64;
            loop {
                match limit.try_acquire(1) {
                    Ok(d) => report[d.is_denied() as usize] += 1,
                    // SAFETY: _exit is async-signal-safe and ends the child at once.
                    Err(_) => unsafe { libc::_exit(3) },
                }
                i += 1;
                if i % 64 == 0 {
                    report[2] = clock.now_ns();
                    if i >= min_attempts && report[2] >= until_ns {
                        break;
                    }
                }
            }
            // SAFETY: `write` is an open pipe; `report` is 24 readable bytes.
            let n = unsafe { libc::write(write.as_raw_fd(), report.as_ptr().cast(), 24) };
            // SAFETY: as above.
            unsafe { libc::_exit(if n == 24 { 0 } else { 4 }) };
        }
        drop(write);
        RustWorker { pid, report: read }
    }

    /// Wait for the worker and read its report; it must have exited cleanly.
    pub fn reap(self) -> WorkerReport {
        let mut file = std::fs::File::from(self.report);
        let mut bytes = [0u8; 24];
        file.read_exact(&mut bytes)
            .expect("worker reports its counts");
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid int.
        assert_eq!(unsafe { libc::waitpid(self.pid, &mut status, 0) }, self.pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status}"
        );
        let word = |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        WorkerReport {
            allowed: word(0),
            denied: word(1),
            last_ns: word(2),
        }
    }
}

/// Checks a run of Rust workers beside C or Python processes on one token bucket of the file:
/// the file's statistics count every decision the processes report (`allowed`, `denied`), and
/// the total is within the bucket's bounds. `"fixed"` (`fixed_capacity` tokens refilled at one per
/// hour, drained by the run) admits exactly its capacity; the others (`burst`, `per_second`)
/// admit at most `floor(B + r T)` over the `elapsed_ns` every decision is dated in, and, having
/// denied (the bucket was drained), at least `B`.
pub fn check_shared_bucket(
    name: &str,
    stats: &shmlimit::Stats,
    (allowed, denied): (u64, u64),
    elapsed_ns: u64,
    fixed_capacity: u64,
    (burst, per_second): (u64, u64),
) {
    assert_eq!(
        stats.allowed, allowed,
        "{name}: every admission was counted"
    );
    assert_eq!(stats.denied, denied, "{name}: every denial was counted");
    match name {
        "fixed" => assert_eq!(allowed, fixed_capacity, "exactly the capacity"),
        _ => {
            let bound = burst + (per_second as u128 * elapsed_ns as u128 / 1_000_000_000) as u64;
            println!("paced: {allowed} allowed in {elapsed_ns} ns, bound {bound}");
            assert!(allowed <= bound, "{allowed} > {bound}");
            assert!(allowed >= burst && denied > 0, "the bound was reached");
        }
    }
}
