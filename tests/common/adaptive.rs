//! Adaptive concurrency limits, unkeyed and keyed, as their tests make and check them: the
//! limit `dep` of a file (created with the given definition if absent) on the monotonic clock
//! or on a manual one, requests from several processes until stopped, and holders killed
//! mid-request whose permits must come back.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmlimit::{
    AdaptiveConcurrency, AdaptiveConcurrencyLimit, AdaptivePermit, Builder, Clock, Keyed,
    KeyedAdaptiveConcurrencyLimit, Limiter, ManualClock,
};

use super::{fork_workers, spawn, Child, SharedWords, XorShift, SEC};

/// A builder defining `dep` as `spec`, keyed with the table `keys` if given.
fn dep(spec: AdaptiveConcurrency, keys: Option<Keyed>) -> Builder {
    match keys {
        Some(keys) => Limiter::builder().keyed_limit("dep", spec, keys),
        None => Limiter::builder().limit("dep", spec),
    }
}

/// The limit `dep` of the file at `path` (created with `spec` if absent), on the monotonic
/// clock.
pub fn open(path: &Path, spec: AdaptiveConcurrency) -> AdaptiveConcurrencyLimit {
    dep(spec, None)
        .create_or_open(path)
        .unwrap()
        .adaptive_concurrency("dep")
        .unwrap()
}

/// The keyed limit `dep` of the file at `path` (created with `spec` and a table of 64 keys if
/// absent), on the monotonic clock.
pub fn open_keyed(path: &Path, spec: AdaptiveConcurrency) -> KeyedAdaptiveConcurrencyLimit {
    dep(spec, Some(Keyed::new(64)))
        .create_or_open(path)
        .unwrap()
        .keyed_adaptive_concurrency("dep")
        .unwrap()
}

/// The file at `path` (created with `dep` defined as `spec` if absent) on a manual clock that
/// starts at 1000 s.
pub fn manual(path: &Path, spec: AdaptiveConcurrency) -> Limiter<ManualClock> {
    on_manual_clock(dep(spec, None), path)
}

/// As [`manual`], `dep` keyed with the table `keys`.
pub fn manual_keyed(path: &Path, spec: AdaptiveConcurrency, keys: Keyed) -> Limiter<ManualClock> {
    on_manual_clock(dep(spec, Some(keys)), path)
}

fn on_manual_clock(builder: Builder, path: &Path) -> Limiter<ManualClock> {
    builder
        .clock(ManualClock::new(1_000 * SEC))
        .create_or_open(path)
        .unwrap()
}

/// Requests from `workers` processes forked by one child process, until [`Load::stop`]: the
/// child opens its handle with `open`, then worker `i` calls `request(&handle, i)` (true when a
/// permit was granted) over and over.
pub struct Load {
    stop: SharedWords,
    child: Child,
}

impl Load {
    pub fn start<H>(
        workers: usize,
        open: impl FnOnce() -> H,
        request: impl Fn(&H, usize) -> bool,
    ) -> Load {
        let stop = SharedWords::new(1);
        let child = spawn(|| {
            let handle = open();
            let grants = fork_workers(workers, |i| {
                let mut granted = 0;
                while stop.at(0).load(Ordering::SeqCst) == 0 {
                    if request(&handle, i) {
                        granted += 1;
                    }
                }
                vec![granted]
            });
            vec![grants.iter().map(|g| g[0]).sum()]
        });
        Load { stop, child }
    }

    /// Stop the workers, and check that the child exited 0 and that permits were granted.
    pub fn stop(self) {
        self.stop.at(0).store(1, Ordering::SeqCst);
        let (status, words) = self.child.wait();
        assert_eq!(status, 0);
        assert!(words[0] > 0, "no permit granted");
    }
}

/// Let `children` (holders in a loop of acquire, hold, release) run for 5 to 24 ms, drawn from
/// `rng`, then SIGKILL every one of them and check that each died by the signal.
pub fn kill_mid_request(children: Vec<Child>, rng: &mut XorShift, round: u32) {
    std::thread::sleep(Duration::from_millis(5 + rng.next_u64() % 20));
    for c in &children {
        c.kill();
    }
    for c in children {
        let (status, _) = c.wait();
        assert!(libc::WIFSIGNALED(status), "round {round}");
    }
}

/// Every one of `permits` (a limit's or a key's current permits) can be taken at once by this
/// process within 2 s, then none more: dead holders' permits are taken over (an acquirer at
/// the limit looks for dead holders at most every 10 ms per process). `what` names the limit
/// in a failure. The permits are released at the end.
pub fn every_permit_comes_back<C: Clock>(
    permits: u64,
    what: &str,
    try_acquire: impl Fn() -> Option<AdaptivePermit<C>>,
) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut all = Vec::new();
    while (all.len() as u64) < permits {
        match try_acquire() {
            Some(p) => all.push(p),
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            None => panic!("{what}: {} of {permits} back", all.len()),
        }
    }
    assert!(try_acquire().is_none(), "{what}: more than {permits}");
    drop(all);
}
