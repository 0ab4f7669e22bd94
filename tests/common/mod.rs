//! Shared by the integration tests: forking worker processes that report back through pipes,
//! and a few small helpers.
//!
//! Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

pub mod adaptive;
pub mod cbuild;
pub mod words;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use shmlimit::{Clock, MonotonicClock};

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000_000_000;

/// `CLOCK_MONOTONIC` now, in nanoseconds: the timeline every limiter file uses.
pub fn now_ns() -> u64 {
    MonotonicClock.now_ns()
}

/// The repository root: the manifest directory of the test's package (the top level for the
/// library's tests, cli/ for the binary's), or the first directory above it holding the header.
pub fn root() -> PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("ffi/include/shmlimit.h").is_file())
        .unwrap_or(manifest)
        .to_owned()
}

/// A fresh temporary directory and a limiter path inside it.
pub fn temp_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join(name);
    (dir, path)
}

/// Serialises the tests of one binary that fork: workers of two tests competing for two cores
/// would only blur each other's measurements, and forking while another test forks is pointless.
pub fn fork_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Exit status of a child whose work closure panicked.
pub const EXIT_PANIC: i32 = 101;
/// Exit status of a child that could not write its report.
pub const EXIT_WRITE: i32 = 102;

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill; O_CLOEXEC only affects exec.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else yet.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Write all of `bytes` to `fd`, retrying short writes and EINTR; false on any other error.
fn write_all(fd: libc::c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable buffer of `bytes.len()` bytes for the whole call.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Block until the write end of the start pipe is closed everywhere (the barrier opens).
fn wait_at_barrier(fd: libc::c_int) {
    let mut byte = 0u8;
    loop {
        // SAFETY: `byte` is a valid one-byte buffer; read returns 0 at EOF, when every write end
        // is closed.
        let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
        if n == 0 {
            return;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Fork `n` worker processes that all start `work(index)` at the same moment, and collect
/// what each returns (a vector of words, sent back through its own pipe).
///
/// Every child first waits at a barrier (a pipe whose write end the parent closes once all
/// children exist), then runs `work`, writes the words and leaves with `_exit(0)`: a child
/// never returns into the test harness, never runs its destructors or `atexit` handlers. A
/// panic in `work` is caught and becomes `_exit(101)`. The parent reads every pipe to its end,
/// reaps every child and panics if any child did not exit with status 0.
///
/// Anything `work` needs must be prepared before the call (the child shares nothing with the
/// parent after the fork but the file system and memory-mapped files).
pub fn fork_workers<F>(n: usize, work: F) -> Vec<Vec<u64>>
where
    F: Fn(usize) -> Vec<u64>,
{
    let (start_r, start_w) = pipe();
    let mut children = Vec::with_capacity(n);
    for index in 0..n {
        let (result_r, result_w) = pipe();
        // SAFETY: fork has no memory preconditions. The child below calls only the limiter,
        // async-signal-safe libc functions and allocation (glibc's allocator re-initialises its
        // locks in the child), and leaves through `_exit`, so the state of the threads the
        // parent had (test harness threads) is never relied upon.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // The child: drop our copies of the write end of the barrier so that only the parent
            // holds it, and of the read end of the result pipe.
            drop(start_w);
            drop(result_r);
            wait_at_barrier(start_r.as_raw_fd());
            run_child(result_w, || work(index));
        }
        // The parent: close our write end now, so that later children do not inherit it and the
        // reader sees EOF as soon as this child exits.
        drop(result_w);
        children.push((pid, result_r));
    }
    // Open the barrier: every child has closed its own copy, this is the last write end.
    drop(start_w);
    drop(start_r);
    let mut results = Vec::with_capacity(n);
    let mut failures = Vec::new();
    for (index, (pid, result_r)) in children.into_iter().enumerate() {
        let mut bytes = Vec::new();
        std::fs::File::from(result_r)
            .read_to_end(&mut bytes)
            .expect("reading a worker's report");
        let mut status = 0;
        // SAFETY: `pid` is our own child, not yet reaped; `status` is a valid int to fill.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(rc, pid, "waitpid: {}", std::io::Error::last_os_error());
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failures.push(format!(
                "worker {index} (pid {pid}): {}",
                if libc::WIFEXITED(status) {
                    format!("exit status {}", libc::WEXITSTATUS(status))
                } else {
                    format!("killed by signal {}", libc::WTERMSIG(status))
                }
            ));
        }
        results.push(
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        );
    }
    assert!(
        failures.is_empty(),
        "workers failed (101 = panicked): {failures:?}"
    );
    results
}

/// The body of a forked child: run `work`, write its words to `result_w`, `_exit`.
fn run_child(result_w: OwnedFd, work: impl FnOnce() -> Vec<u64>) -> ! {
    let outcome = catch_unwind(AssertUnwindSafe(work));
    let status = match outcome {
        Ok(words) => {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
            if write_all(result_w.as_raw_fd(), &bytes) {
                0
            } else {
                EXIT_WRITE
            }
        }
        Err(_) => EXIT_PANIC,
    };
    // SAFETY: _exit ends the child at once without unwinding or running the parent's exit
    // handlers; it is async-signal-safe and always valid to call.
    unsafe { libc::_exit(status) }
}

/// One forked child that runs `work` at once (no barrier), for tests that stop it with a
/// signal. Reap it with [`Child::wait`]; dropping it unreaped kills and reaps it.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    result: Option<OwnedFd>,
}

/// Fork a [`Child`] running `work`; what it returns is sent back as for [`fork_workers`].
pub fn spawn<F: FnOnce() -> Vec<u64>>(work: F) -> Child {
    let (result_r, result_w) = pipe();
    // SAFETY: as in `fork_workers`: the child only runs `work` and leaves through `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(result_r);
        run_child(result_w, work);
    }
    drop(result_w);
    Child {
        pid,
        result: Some(result_r),
    }
}

impl Child {
    /// Send SIGKILL: the child stops at whatever instruction it is executing.
    pub fn kill(&self) {
        // SAFETY: `pid` is our own child and not yet reaped (reaping consumes `self`), so the
        // signal cannot reach an unrelated process that reused the id.
        let rc = unsafe { libc::kill(self.pid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Wait for the child to end: its raw wait status and the words it wrote (none if killed).
    pub fn wait(mut self) -> (libc::c_int, Vec<u64>) {
        let mut bytes = Vec::new();
        if let Some(fd) = self.result.take() {
            std::fs::File::from(fd)
                .read_to_end(&mut bytes)
                .expect("reading a child's report");
        }
        let status = self.reap();
        let words = bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect();
        (status, words)
    }

    fn reap(&mut self) -> libc::c_int {
        let mut status = 0;
        // SAFETY: `pid` is our own child, not yet reaped; `status` is a valid int to fill.
        let rc = unsafe { libc::waitpid(self.pid, &mut status, 0) };
        assert_eq!(rc, self.pid, "waitpid: {}", std::io::Error::last_os_error());
        self.pid = 0;
        status
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.pid > 0 {
            // SAFETY: as in `kill`: our own, unreaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let mut status = 0;
            // SAFETY: as in `reap`.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }
}

/// A small deterministic pseudo-random generator (xorshift64*), for reproducible loads.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponentially distributed gap of mean `mean_ns` (a Poisson process's inter-arrival).
    pub fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean_ns).round() as u64
    }
}

/// Words in a `MAP_SHARED` anonymous mapping: shared with every child forked after it.
pub struct SharedWords {
    ptr: *mut AtomicU64,
    len: usize,
}

impl SharedWords {
    pub fn new(len: usize) -> SharedWords {
        // SAFETY: an anonymous shared mapping of `len * 8` bytes with no address hint; mmap has
        // no memory preconditions and the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        SharedWords {
            ptr: ptr.cast(),
            len,
        }
    }

    pub fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len);
        // SAFETY: the mapping is page-aligned, zero-filled, `len` words long and lives as long as
        // `self`; it is only ever accessed atomically, by this process and its children.
        unsafe { &*self.ptr.add(i) }
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: `ptr` and the length are exactly what mmap returned; nothing refers to it now.
        unsafe { libc::munmap(self.ptr.cast(), self.len * 8) };
    }
}

/// An active-holder counter in three words of a [`SharedWords`] from `base`: active now, the
/// most ever seen, violations of the bound. A worker enters right after it gets a permit and
/// leaves right before it lets the permit go, so the count at any instant is at least the
/// number of live processes inside that window.
pub struct Active<'a>(pub &'a SharedWords, pub usize);

impl Active<'_> {
    /// Count ourselves in (right after acquiring) and check against `c`.
    pub fn enter(&self, c: u64) {
        // SeqCst: one total order of all entries and exits, the instant the count is taken.
        let now = self.0.at(self.1).fetch_add(1, Ordering::SeqCst) + 1;
        self.0.at(self.1 + 1).fetch_max(now, Ordering::SeqCst);
        if now > c {
            self.0.at(self.1 + 2).fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Count ourselves out (right before releasing).
    pub fn leave(&self) {
        // SeqCst: see `enter`.
        self.0.at(self.1).fetch_sub(1, Ordering::SeqCst);
    }

    pub fn max(&self) -> u64 {
        self.0.at(self.1 + 1).load(Ordering::SeqCst)
    }

    pub fn violations(&self) -> u64 {
        self.0.at(self.1 + 2).load(Ordering::SeqCst)
    }
}

/// Fork a child that runs `f` and leaves with `_exit(f())` (101 if it panicked).
pub fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork has no memory preconditions; the child runs only `f` (limiter calls, libc,
    // allocation) and leaves through `_exit`, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = catch_unwind(AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: _exit ends the child at once; always valid.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Reap `pid`; its exit status (or 128 + signal).
pub fn reap(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our own unreaped child; `status` is a valid int to fill.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid, "waitpid");
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

pub fn sigkill(pid: libc::pid_t) {
    // SAFETY: `pid` is our own child, not yet reaped, so the pid cannot name another process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// Block until one byte arrives on `fd` (a child saying it holds its permit); false at EOF.
pub fn read_byte(fd: &OwnedFd) -> bool {
    let mut f = std::fs::File::from(fd.try_clone().unwrap());
    let mut b = [0u8; 1];
    matches!(f.read(&mut b), Ok(1))
}

pub fn write_byte(fd: &OwnedFd) {
    let b = 1u8;
    // SAFETY: writes one byte from a valid buffer to an open descriptor.
    let n = unsafe { libc::write(fd.as_raw_fd(), (&b as *const u8).cast(), 1) };
    assert_eq!(n, 1);
}

/// Fork a child that takes a permit with `acquire`, counts itself in `active` (bound `c`) and
/// holds the permit until it is killed; returns its pid once it holds. The child never counts
/// itself out: the caller does (`active.leave()`) before it kills the child, so the counter
/// stays an upper bound of the live holders at every instant.
pub fn permit_victim<P>(
    active: &Active,
    c: u64,
    acquire: impl FnOnce() -> Option<P>,
) -> libc::pid_t {
    let (r, w) = pipe();
    let victim = fork_child(|| {
        let held = acquire().expect("a permit");
        active.enter(c);
        write_byte(&w);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            std::hint::black_box(&held);
        }
    });
    drop(w);
    assert!(read_byte(&r), "victim {victim} never got a permit");
    victim
}

/// Fork `n` churners on a concurrency limit: churner `i` waits up to 20 s for a permit of the
/// handle `open()` gives it (`acquire`), counts itself in `active` (bound `c`) for
/// `300 + 200 i` microseconds and releases the permit, over and over until `stop()` holds and
/// it has had at least one permit (a loaded machine may first run it once the killing is
/// over). A churner that waits 20 s in vain panics (exit 101), else it exits 0: with holders
/// killed while they hold, the churners go on only if the killed holders' permits come back.
pub fn fork_churners<H, C: shmlimit::Clock>(
    n: u64,
    active: &Active,
    c: u64,
    stop: impl Fn() -> bool,
    open: impl Fn() -> H,
    acquire: impl Fn(&H) -> Option<shmlimit::Permit<C>>,
) -> Vec<libc::pid_t> {
    (0..n)
        .map(|i| {
            fork_child(|| {
                let handle = open();
                let mut done = 0u64;
                while done == 0 || !stop() {
                    let p =
                        acquire(&handle).expect("killed holders' permits come back within 20 s");
                    active.enter(c);
                    std::thread::sleep(std::time::Duration::from_micros(300 + 200 * i));
                    active.leave();
                    p.release();
                    done += 1;
                }
                // At least one round each: the churner was never starved for good (it would
                // have panicked waiting).
                i32::from(done == 0)
            })
        })
        .collect()
}

/// All `c` permits of a concurrency limit (or of one key) come back to this process, then no
/// more: `try_acquire` gets `c` of them, then none. They are released at the end.
pub fn all_permits_come_back<C: shmlimit::Clock>(
    c: u64,
    try_acquire: impl Fn() -> Option<shmlimit::Permit<C>>,
) {
    let held: Vec<_> = (0..c)
        .map(|_| try_acquire().expect("all permits came back"))
        .collect();
    assert!(try_acquire().is_none());
    drop(held);
}

/// The unkeyed rate limit `name` (token bucket, window or sliding log) as its typed handle,
/// for tests that run the same checks over every rate kind.
pub fn rate<C: shmlimit::Clock>(
    limiter: &shmlimit::Limiter<C>,
    name: &str,
) -> shmlimit::Result<Box<dyn shmlimit::RateLimit<C>>> {
    use shmlimit::LimitKind;
    Ok(match limiter.limit(name)?.kind() {
        LimitKind::TokenBucket => Box::new(limiter.token_bucket(name)?),
        LimitKind::Window => Box::new(limiter.window(name)?),
        _ => Box::new(limiter.sliding_log(name)?),
    })
}

/// The keyed rate limit `name` (keyed token bucket or window) as its typed handle.
pub fn keyed_rate<C: shmlimit::Clock>(
    limiter: &shmlimit::Limiter<C>,
    name: &str,
) -> shmlimit::Result<Box<dyn shmlimit::KeyedRateLimit<C>>> {
    use shmlimit::LimitKind;
    Ok(match limiter.limit(name)?.kind() {
        LimitKind::KeyedTokenBucket => Box::new(limiter.keyed_token_bucket(name)?),
        _ => Box::new(limiter.keyed_window(name)?),
    })
}

/// Every unkeyed rate limit of `limiter` (token buckets, windows, sliding logs), in definition
/// order, as its typed handle.
pub fn rates<C: shmlimit::Clock>(
    limiter: &shmlimit::Limiter<C>,
) -> Vec<Box<dyn shmlimit::RateLimit<C>>> {
    use shmlimit::LimitKind;
    limiter
        .limits()
        .iter()
        .filter(|l| {
            matches!(
                l.kind(),
                LimitKind::TokenBucket | LimitKind::Window | LimitKind::SlidingLog
            )
        })
        .map(|l| rate(limiter, l.name()).expect("a rate limit"))
        .collect()
}

/// Try `tries` units, one at a time, of every limit of `limiter` (keyed ones for `key`); how many
/// each admitted, by name, in definition order. A concurrency limit's permits are forgotten: held
/// by this process for as long as it lives. Keyed concurrency limits are not tried.
pub fn use_up<C: shmlimit::Clock>(
    limiter: &shmlimit::Limiter<C>,
    tries: u64,
    key: &[u8],
) -> Vec<(String, u64)> {
    use shmlimit::LimitKind;
    limiter
        .limits()
        .iter()
        .map(|l| {
            let name = l.name();
            let admitted = (0..tries)
                .filter(|_| match l.kind() {
                    LimitKind::Concurrency => limiter
                        .concurrency(name)
                        .unwrap()
                        .try_acquire_permit()
                        .unwrap()
                        .map(std::mem::forget)
                        .is_some(),
                    LimitKind::KeyedTokenBucket | LimitKind::KeyedWindow => {
                        keyed_rate(limiter, name)
                            .unwrap()
                            .try_acquire_key(key, 1)
                            .unwrap()
                            .is_allowed()
                    }
                    LimitKind::KeyedConcurrency => false,
                    _ => rate(limiter, name)
                        .unwrap()
                        .try_acquire(1)
                        .unwrap()
                        .is_allowed(),
                })
                .count() as u64;
            (name.to_owned(), admitted)
        })
        .collect()
}
