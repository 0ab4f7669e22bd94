//! Keyed limits: `keyed_token_bucket_{uniform,zipf}/keyed/<keys>` decides with
//! `try_acquire_key(key, 1)` on a keyed token bucket holding 1, 1,000, 100,000 or 1,000,000
//! distinct keys (a table of about twice as many slots), beside `unkeyed`, the plain
//! `try_acquire(1)` on the same bucket. Keys are drawn uniformly or Zipf-skewed (s = 1.1) from a
//! sequence of indices computed before measuring; every key is inserted before measuring. The
//! bucket is the admit workload's, per key: every decision admits and writes.

use criterion::{BenchmarkId, Criterion, Throughput};

use crate::harness::bench_single;
use crate::peers::keyed::{Access, KeyedShmlimit};
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
        bench_single(&mut group, "unkeyed", workload, 1, || {
            Shmlimit::token_bucket(workload)
        });
        for keys in KEY_COUNTS {
            let mut contender: Option<KeyedShmlimit> = None;
            group.bench_with_input(BenchmarkId::new("keyed", keys), &keys, |b, &keys| {
                let contender = contender.get_or_insert_with(|| {
                    let c = KeyedShmlimit::new(workload, keys, access);
                    prime("keyed", &c, workload, 1);
                    c
                });
                let mut worker = contender.worker();
                b.iter(|| KeyedShmlimit::decide(&mut worker));
            });
        }
        group.finish();
    }
}
