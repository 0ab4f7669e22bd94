//! Every algorithm, single process, cost 1: `algorithm_admit/*` where decisions admit and
//! `algorithm_deny/*` where the limit is spent and decisions deny.
//!
//! The sliding log runs at L = 10, 100, 1,000 and 10,000 entries to show whether a decision is
//! O(1) in L. Its admit variant cannot use the real clock: at tens of millions of decisions per
//! second any log of L <= 10,000 entries over the shortest window (1 ms) fills at once. It reads
//! [`FastForwardClock`] instead: the real `CLOCK_MONOTONIC` read, run 10,000 times faster, so the
//! entry a decision reuses has always expired. Its cost is the real clock read plus a multiply.

use std::time::Duration;

use criterion::{Criterion, Throughput};
use shmlimit::{
    Algorithm, Alignment, Clock, FixedWindow, IntoAlgorithm, MonotonicClock, SlidingLog,
    SlidingLogLimit, SlidingWindow, TokenBucketLimit, WindowLimit,
};

use crate::harness::bench_single;
use crate::peers::shmlimit::{token_bucket, Shmlimit};
use crate::peers::Workload;

/// The sliding-log sizes compared.
pub const LOG_SIZES: [u64; 4] = [10, 100, 1_000, 10_000];

const HOUR: Duration = Duration::from_secs(3_600);

/// `CLOCK_MONOTONIC`, sped up [`FastForwardClock::SPEEDUP`] times from the moment it was made.
#[derive(Debug, Clone, Copy)]
pub struct FastForwardClock {
    origin_ns: u64,
}

impl FastForwardClock {
    /// How many times faster than real time it runs.
    pub const SPEEDUP: u64 = 10_000;

    /// A clock that reads the real time now and runs fast from there.
    pub fn new() -> Self {
        FastForwardClock {
            origin_ns: MonotonicClock.now_ns(),
        }
    }
}

impl Clock for FastForwardClock {
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        let real = MonotonicClock.now_ns();
        self.origin_ns + (real - self.origin_ns) * Self::SPEEDUP
    }
}

fn algorithm(a: impl IntoAlgorithm) -> Algorithm {
    a.into_algorithm("bench").expect("valid definition")
}

/// Register both groups.
pub fn bench(c: &mut Criterion) {
    for workload in Workload::ALL {
        let mut group = c.benchmark_group(format!("algorithm_{}", workload.name()));
        group.throughput(Throughput::Elements(1));
        let g = &mut group;
        let admit = workload == Workload::Admit;
        bench_single(g, "token_bucket", workload, 1, || {
            Shmlimit::<_, TokenBucketLimit>::with_clock(token_bucket(workload), MonotonicClock)
        });
        // Admit: 2^32 - 1 per minute is more than this machine can ask for.
        let fixed = if admit {
            FixedWindow::new(u32::MAX as u64, Duration::from_secs(60))
        } else {
            FixedWindow::new(1, HOUR)
        };
        bench_single(g, "fixed_window", workload, 1, || {
            Shmlimit::<_, WindowLimit>::with_clock(
                algorithm(fixed.aligned(Alignment::Monotonic)),
                MonotonicClock,
            )
        });
        // Admit: about a million per millisecond, likewise out of reach.
        let sliding = SlidingWindow {
            limit: if admit { (1 << 20) - 1 } else { 1 },
            window: if admit {
                Duration::from_millis(1)
            } else {
                HOUR
            },
            alignment: Alignment::Monotonic,
        };
        bench_single(g, "sliding_window", workload, 1, || {
            Shmlimit::<_, WindowLimit>::with_clock(algorithm(sliding), MonotonicClock)
        });
        for size in LOG_SIZES {
            let name = format!("sliding_log_{size}");
            if admit {
                let log = SlidingLog::new(size, Duration::from_millis(1));
                bench_single(g, &name, workload, 0, || {
                    Shmlimit::<_, SlidingLogLimit<_>>::with_clock(
                        algorithm(log),
                        FastForwardClock::new(),
                    )
                });
            } else {
                let log = SlidingLog::new(size, HOUR);
                bench_single(g, &name, workload, size, || {
                    Shmlimit::<_, SlidingLogLimit>::with_clock(algorithm(log), MonotonicClock)
                });
            }
        }
        group.finish();
    }
}
