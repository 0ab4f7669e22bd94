//! How much a power loss can forget: the longest time a limiter file's pages stay dirty in the
//! page cache (admissions not yet on the disk) while a worker decides, without and with a sync.
//!
//! ```text
//! cargo run --release --example loss_window -- [DIR] [SECONDS] [SYNC_MS]
//! ```
//!
//! A worker thread admits one request every 20 ms into a file in `DIR` (default `/var/tmp`,
//! which must be disk-backed). A sampler asks the kernel every millisecond how many of the
//! file's pages are dirty (`cachestat(2)`, Linux 6.5+), and measures each *dirty run*: from the
//! first sample that saw a dirty page to the first that saw none. A power loss during a run
//! forgets every admission made since the run began, so the longest run is the measured loss
//! window. First without any sync (the kernel's writeback alone), then with a helper thread
//! syncing every `SYNC_MS` ms (`Builder::sync_every`). Prints both, and the mean time of one
//! `Limiter::sync` call.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmlimit::{FixedWindow, Limiter};

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Dirty (or under writeback) pages of the whole file, or `None` without `cachestat`.
fn unwritten_pages(fd: i32) -> Option<u64> {
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = CachestatRange { off: 0, len: 0 };
    let mut st = Cachestat::default();
    // SAFETY: both pointers are valid for the call; the kernel reads `range` and writes `st`.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CachestatRange,
            &mut st as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(st.nr_dirty + st.nr_writeback)
}

struct Runs {
    longest: Duration,
    count: usize,
}

fn measure(path: &PathBuf, seconds: u64, sync: Option<Duration>) -> Runs {
    let mut builder = Limiter::builder().limit(
        "daily",
        FixedWindow::new(1_000_000, Duration::from_secs(86_400)),
    );
    if let Some(period) = sync {
        builder = builder.sync_every(period);
    }
    let limiter = builder.create_or_open(path).expect("limiter file");
    let file = std::fs::File::open(path).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let limit = limiter.limit("daily").unwrap();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = limit.try_acquire(1).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut run_start: Option<Instant> = None;
    let mut runs = Runs {
        longest: Duration::ZERO,
        count: 0,
    };
    while Instant::now() < end {
        let dirty = unwritten_pages(fd).expect("cachestat(2) needs Linux 6.5 or later") > 0;
        let now = Instant::now();
        match (dirty, run_start) {
            (true, None) => run_start = Some(now),
            (false, Some(start)) => {
                runs.longest = runs.longest.max(now - start);
                runs.count += 1;
                run_start = None;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some(start) = run_start {
        // Still dirty at the end: a run at least this long.
        runs.longest = runs.longest.max(Instant::now() - start);
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    runs
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/var/tmp".into()));
    let seconds: u64 = args.next().map_or(45, |s| s.parse().expect("SECONDS"));
    let sync_ms: u64 = args.next().map_or(1_000, |s| s.parse().expect("SYNC_MS"));
    let tmp = tempfile::tempdir_in(&dir).expect("a directory in DIR");
    println!(
        "vm.dirty_expire_centisecs = {}, vm.dirty_writeback_centisecs = {}",
        std::fs::read_to_string("/proc/sys/vm/dirty_expire_centisecs")
            .unwrap_or_default()
            .trim(),
        std::fs::read_to_string("/proc/sys/vm/dirty_writeback_centisecs")
            .unwrap_or_default()
            .trim()
    );
    let plain = measure(&tmp.path().join("plain.shm"), seconds, None);
    println!(
        "no sync:            longest dirty run {:>8.3} s ({} runs ended in {seconds} s)",
        plain.longest.as_secs_f64(),
        plain.count
    );
    let period = Duration::from_millis(sync_ms);
    let synced = measure(&tmp.path().join("synced.shm"), seconds, Some(period));
    println!(
        "sync every {sync_ms:>5} ms: longest dirty run {:>8.3} s ({} runs ended in {seconds} s)",
        synced.longest.as_secs_f64(),
        synced.count
    );
    let limiter = Limiter::open(tmp.path().join("synced.shm")).unwrap();
    let limit = limiter.limit("daily").unwrap();
    let n = 200;
    let mut total = Duration::ZERO;
    for _ in 0..n {
        let _ = limit.try_acquire(1).unwrap();
        let t = Instant::now();
        limiter.sync().unwrap();
        total += t.elapsed();
    }
    println!(
        "one sync of a dirty file: {:.3} ms on average over {n}",
        total.as_secs_f64() * 1e3 / n as f64
    );
}
