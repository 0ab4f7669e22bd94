//! Running one contender from several threads or processes at once, for `iter_custom`.
//!
//! Workers are created first (a thread asks for [`Contender::worker`], a forked child for
//! [`Contender::attach`]), then wait at a shared barrier; the clock starts when the parent releases
//! them and stops when the last one has finished (threads: joined; processes: exited and reaped).
//! Setup, `fork` and thread creation are outside the measured time. `iters` decisions are split
//! as evenly as possible over the workers, so criterion's decisions per second are the total.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};
use crossbeam_utils::CachePadded;

use crate::peers::{prime, Contender, Workload};

/// Most workers one run may have.
pub const MAX_WORKERS: usize = 64;

const WAIT: u64 = 0;
const GO: u64 = 1;
const ABORT: u64 = 2;

/// The barrier and the per-worker results, shared by every worker (across `fork` when mapped).
#[repr(C)]
struct Control {
    ready: CachePadded<AtomicU64>,
    failed: CachePadded<AtomicU64>,
    go: CachePadded<AtomicU64>,
    admitted: [CachePadded<AtomicU64>; MAX_WORKERS],
}

/// What a run measured.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// From the release to the last worker's end.
    pub elapsed: Duration,
    /// Decisions that admitted, over all workers.
    pub admitted: u64,
}

fn share(iters: u64, k: usize, i: usize) -> u64 {
    iters / k as u64 + u64::from((i as u64) < iters % k as u64)
}

/// Wait (yielding: workers may outnumber cores) until the parent says go or abort.
fn await_release(control: &Control) -> bool {
    loop {
        // Acquire: pairs with the parent's Release store of GO/ABORT.
        match control.go.load(Ordering::Acquire) {
            WAIT => std::thread::yield_now(),
            state => return state == GO,
        }
    }
}

/// The worker's whole life after it has its handle: barrier, decisions, result.
fn work<C: Contender>(control: &Control, worker: &mut C::Worker, n: u64, i: usize) {
    // Release: the worker is set up before the parent counts it ready.
    control.ready.fetch_add(1, Ordering::Release);
    if !await_release(control) {
        return;
    }
    let mut admitted = 0;
    for _ in 0..n {
        admitted += u64::from(C::decide(worker));
    }
    // Relaxed: read after join/waitpid, which orders it.
    control.admitted[i].store(admitted, Ordering::Relaxed);
}

/// Wait until every worker is ready (or one failed); true when all are ready.
fn await_workers(control: &Control, k: usize) -> bool {
    loop {
        // Acquire: pairs with the workers' Release increments.
        let ready = control.ready.load(Ordering::Acquire);
        let failed = control.failed.load(Ordering::Acquire);
        if ready + failed == k as u64 {
            return failed == 0;
        }
        std::thread::yield_now();
    }
}

fn admitted(control: &Control, k: usize) -> u64 {
    // Relaxed: every worker has been joined or reaped.
    (0..k)
        .map(|i| control.admitted[i].load(Ordering::Relaxed))
        .sum()
}

fn new_control() -> Control {
    Control {
        ready: CachePadded::new(AtomicU64::new(0)),
        failed: CachePadded::new(AtomicU64::new(0)),
        go: CachePadded::new(AtomicU64::new(WAIT)),
        admitted: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
    }
}

/// `iters` decisions over `k` threads of this process, each with its own worker.
pub fn run_threads<C: Contender>(contender: &C, k: usize, iters: u64) -> Run {
    assert!((1..=MAX_WORKERS).contains(&k));
    let control = new_control();
    let elapsed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..k)
            .map(|i| {
                let control = &control;
                s.spawn(move || {
                    let mut worker = contender.worker();
                    work::<C>(control, &mut worker, share(iters, k, i), i);
                })
            })
            .collect();
        await_workers(&control, k);
        let start = Instant::now();
        // Release: pairs with the workers' Acquire in `await_release`.
        control.go.store(GO, Ordering::Release);
        for handle in handles {
            handle.join().expect("a bench thread panicked");
        }
        start.elapsed()
    });
    Run {
        elapsed,
        admitted: admitted(&control, k),
    }
}

/// A `Control` in a shared anonymous mapping, so that forked children and the parent see it.
struct SharedControl {
    ptr: *mut Control,
}

impl SharedControl {
    fn new() -> Self {
        let len = std::mem::size_of::<Control>();
        // SAFETY: an anonymous shared mapping of `len` bytes, no file, no fixed address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap the barrier");
        let ptr = ptr as *mut Control;
        // SAFETY: the mapping is page-aligned (more than `Control` needs), `len` bytes long and
        // not yet shared with anyone.
        unsafe { ptr.write(new_control()) };
        SharedControl { ptr }
    }

    fn get(&self) -> &Control {
        // SAFETY: initialised in `new`, unmapped only in `drop`; all fields are atomics.
        unsafe { &*self.ptr }
    }
}

impl Drop for SharedControl {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; no reference into it outlives `self`.
        unsafe {
            libc::munmap(
                self.ptr as *mut libc::c_void,
                std::mem::size_of::<Control>(),
            )
        };
    }
}

/// The body of a forked child: never returns.
fn child<C: Contender>(contender: &C, control: &Control, n: u64, i: usize) -> ! {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut worker = match std::panic::catch_unwind(AssertUnwindSafe(|| contender.attach())) {
            Ok(worker) => worker,
            Err(_) => {
                // Release: pairs with the parent's Acquire in `await_workers`.
                control.failed.fetch_add(1, Ordering::Release);
                return false;
            }
        };
        work::<C>(control, &mut worker, n, i);
        true
    }));
    let code = if matches!(outcome, Ok(true)) { 0 } else { 101 };
    // SAFETY: `_exit` ends the child at once, without running the parent's atexit handlers or
    // destructors a second time (the files and servers they clean up belong to the parent).
    unsafe { libc::_exit(code) }
}

/// `iters` decisions over `k` forked processes, each attached as an independent process would.
///
/// Fork happens while this process runs no other thread, so the child may allocate.
pub fn run_processes<C: Contender>(contender: &C, k: usize, iters: u64) -> Run {
    assert!((1..=MAX_WORKERS).contains(&k));
    let shared = SharedControl::new();
    let control = shared.get();
    let mut children = Vec::with_capacity(k);
    for i in 0..k {
        // SAFETY: fork has no memory-safety preconditions; the child only runs `child`, which
        // ends in `_exit`.
        match unsafe { libc::fork() } {
            0 => child(contender, control, share(iters, k, i), i),
            -1 => {
                // Release: the children already forked see ABORT and exit.
                control.go.store(ABORT, Ordering::Release);
                reap(&children);
                panic!("fork: {}", std::io::Error::last_os_error());
            }
            pid => children.push(pid),
        }
    }
    if !await_workers(control, k) {
        control.go.store(ABORT, Ordering::Release);
        reap(&children);
        panic!("a bench child failed to attach");
    }
    let start = Instant::now();
    // Release: pairs with the children's Acquire in `await_release`.
    control.go.store(GO, Ordering::Release);
    let clean = reap(&children);
    let elapsed = start.elapsed();
    assert!(clean, "a bench child failed");
    Run {
        elapsed,
        admitted: admitted(control, k),
    }
}

/// Wait for every child; true when all exited with status 0.
fn reap(children: &[libc::pid_t]) -> bool {
    let mut clean = true;
    for &pid in children {
        let mut status = 0;
        // SAFETY: `pid` is our child and `status` a valid out-parameter.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        clean &= rc == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    }
    clean
}

/// Warn (once per benchmark) when a run did not decide as its workload says.
pub fn check(name: &str, workload: Workload, iters: u64, run: &Run, warned: &mut bool) {
    let expected = match workload {
        Workload::Admit => iters,
        Workload::Deny => 0,
    };
    if run.admitted != expected && !*warned {
        *warned = true;
        eprintln!(
            "warning: {name} ({}): {} of {iters} decisions admitted, expected {expected}",
            workload.name(),
            run.admitted
        );
    }
}

/// Register `name` in `group`: one worker deciding in a loop. The contender is made (and primed
/// for `workload`, spending `drain` decisions first when it should deny) only if the benchmark is
/// selected to run.
pub fn bench_single<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    workload: Workload,
    drain: u64,
    make: impl Fn() -> C,
) {
    let mut contender: Option<C> = None;
    group.bench_function(name, |b| {
        let contender = contender.get_or_insert_with(|| {
            let c = make();
            prime(name, &c, workload, drain);
            c
        });
        let mut worker = contender.worker();
        b.iter(|| C::decide(&mut worker));
    });
}

/// How the workers of a contention benchmark run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Threads of this process.
    Threads,
    /// Forked processes.
    Processes,
}

/// Register `name/k` in `group` for each `k` of [`WORKER_COUNTS`]: `k` workers hammering one
/// limit.
pub fn bench_parallel<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    workers: Workers,
    workload: Workload,
    make: impl Fn() -> C,
) {
    bench_parallel_on(group, name, &WORKER_COUNTS, workers, workload, make);
}

/// As [`bench_parallel`], for the worker counts `counts`.
pub fn bench_parallel_on<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    counts: &[usize],
    workers: Workers,
    workload: Workload,
    make: impl Fn() -> C,
) {
    for &k in counts {
        let mut contender: Option<C> = None;
        let mut warned = false;
        group.bench_with_input(BenchmarkId::new(name, k), &k, |b, &k| {
            let contender = contender.get_or_insert_with(|| {
                let c = make();
                prime(name, &c, workload, 1);
                c
            });
            b.iter_custom(|iters| {
                let run = match workers {
                    Workers::Threads => run_threads(contender, k, iters),
                    Workers::Processes => run_processes(contender, k, iters),
                };
                check(name, workload, iters, &run, &mut warned);
                run.elapsed
            });
        });
    }
}

/// The worker counts of every contention group.
pub const WORKER_COUNTS: [usize; 4] = [1, 2, 4, 8];
