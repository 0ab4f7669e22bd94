//! Keyed limits: `keyed_token_bucket_{uniform,zipf}/<contender>/<keys>` decides on 1, 1,000,
//! 100,000 or 1,000,000 distinct keys, each contender with the same 12-byte keys from the same
//! precomputed index sequence (`peers::keyed::Keys`). Keys are drawn uniformly or Zipf-skewed
//! (s = 1.1); every key is inserted (decided on once) before measuring. The bucket is the admit
//! workload's, per key: every decision admits and writes.
//!
//! - `keyed`: shmlimit's `try_acquire_key(key, 1)` on a keyed token bucket (a table of about
//!   twice as many slots as keys).
//! - `governor_keyed`: governor's keyed limiter (`check_key`; the default `DashMap` store of
//!   `RateLimiter::keyed`) on a clock reading `CLOCK_MONOTONIC` as shmlimit does, the
//!   same-clock arrangement of `uncontended_*/governor_monotonic`; `governor_keyed_quanta`: the
//!   same on its default quanta clock, as `RateLimiter::keyed` makes it.
//! - `pingora_rate`: pingora-limits' `Rate::observe(&key, 1)` compared with a limit: an
//!   approximate count over a fixed window, a speed reference rather than a like-for-like
//!   limiter (see `peers::pingora`).
//! - `unkeyed`: shmlimit's plain `try_acquire(1)` on the same bucket; `governor_unkeyed`:
//!   governor's direct limiter on the same clock.
//!
//! For each key count the contenders run one after another, so that each key count's figures
//! come from the same minutes of the run.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};

use crate::harness::bench_single;
use crate::peers::governor::{Governor, GovernorKeyed};
use crate::peers::keyed::{Access, KeyedShmlimit};
use crate::peers::pingora::PingoraRate;
use crate::peers::shmlimit::Shmlimit;
use crate::peers::{prime, Contender, Workload};

/// The numbers of distinct keys compared.
pub const KEY_COUNTS: [usize; 4] = [1, 1_000, 100_000, 1_000_000];

/// Decide once on a fresh keyed limit in a forked child: `Err` with the child's fate unless it
/// decided and exited cleanly. A keyed decision that kills its process would end the whole
/// suite; this way it is reported and the keyed groups are skipped.
fn probe() -> Result<(), String> {
    // SAFETY: fork has no memory-safety preconditions; the child only decides and `_exit`s.
    match unsafe { libc::fork() } {
        0 => {
            let ok = std::panic::catch_unwind(|| {
                let c = KeyedShmlimit::new(Workload::Admit, 1, Access::Uniform);
                KeyedShmlimit::decide(&mut c.worker())
            });
            // SAFETY: ends the child without running the parent's destructors or atexit handlers.
            unsafe { libc::_exit(if matches!(ok, Ok(true)) { 0 } else { 101 }) }
        }
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        pid => {
            let mut status = 0;
            // SAFETY: `pid` is our child and `status` a valid out-parameter.
            let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
            if rc != pid {
                Err(format!("waitpid: {}", std::io::Error::last_os_error()))
            } else if libc::WIFSIGNALED(status) {
                Err(format!("killed by signal {}", libc::WTERMSIG(status)))
            } else if libc::WEXITSTATUS(status) != 0 {
                Err(format!("exited with status {}", libc::WEXITSTATUS(status)))
            } else {
                Ok(())
            }
        }
    }
}

/// Register `name/<keys>` in `group`: one worker deciding in a loop on `keys` keys. The
/// contender (its keys inserted, then primed) is made only if the benchmark is selected to run,
/// and dropped before the next one is made.
fn bench_keys<C: Contender>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: usize,
    workload: Workload,
    make: impl Fn() -> C,
) {
    let mut contender: Option<C> = None;
    group.bench_with_input(BenchmarkId::new(name, keys), &keys, |b, _| {
        let contender = contender.get_or_insert_with(|| {
            let c = make();
            prime(name, &c, workload, 1);
            c
        });
        let mut worker = contender.worker();
        b.iter(|| C::decide(&mut worker));
    });
}

/// Register both groups.
pub fn bench(c: &mut Criterion) {
    let workload = Workload::Admit;
    if let Err(fate) = probe() {
        eprintln!(
            "notice: keyed_token_bucket_* skipped: a first try_acquire_key on a fresh keyed \
             limit failed in a child process ({fate})"
        );
        return;
    }
    for access in [Access::Uniform, Access::Zipf] {
        let mut group = c.benchmark_group(format!("keyed_token_bucket_{}", access.name()));
        group.throughput(Throughput::Elements(1));
        let g = &mut group;
        bench_single(g, "unkeyed", workload, 1, || {
            Shmlimit::token_bucket(workload)
        });
        bench_single(g, "governor_unkeyed", workload, 1, || {
            Governor::monotonic(workload)
        });
        for keys in KEY_COUNTS {
            bench_keys(g, "keyed", keys, workload, || {
                KeyedShmlimit::new(workload, keys, access)
            });
            bench_keys(g, "governor_keyed", keys, workload, || {
                GovernorKeyed::monotonic(workload, keys, access)
            });
            bench_keys(g, "governor_keyed_quanta", keys, workload, || {
                GovernorKeyed::quanta(workload, keys, access)
            });
            bench_keys(g, "pingora_rate", keys, workload, || {
                PingoraRate::new(workload, keys, access)
            });
        }
        group.finish();
    }
}
