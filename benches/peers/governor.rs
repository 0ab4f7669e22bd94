//! governor's direct (in-process, unkeyed) limiter, on its default quanta clock and on a clock
//! that reads `CLOCK_MONOTONIC` exactly as shmlimit does (the same-clock comparison).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::{bucket, Contender, Workload};

/// `CLOCK_MONOTONIC` for governor, read through the same code as shmlimit's `MonotonicClock`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicNanos;

impl Clock for MonotonicNanos {
    type Instant = Nanos;

    #[inline(always)]
    fn now(&self) -> Nanos {
        Nanos::new(bucket::now_ns())
    }
}

type Direct<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A direct limiter shared by every thread of the process.
pub struct Governor<C: Clock> {
    limiter: Arc<Direct<C>>,
}

fn quota(workload: Workload) -> Quota {
    let p = workload.bucket();
    let burst = NonZeroU32::new(u32::try_from(p.capacity).expect("burst fits u32"))
        .expect("burst is at least 1");
    Quota::with_period(Duration::from_nanos(p.emission_ns))
        .expect("a non-zero period")
        .allow_burst(burst)
}

impl Governor<DefaultClock> {
    /// The default clock (quanta).
    pub fn quanta(workload: Workload) -> Self {
        Governor {
            limiter: Arc::new(RateLimiter::direct(quota(workload))),
        }
    }
}

impl Governor<MonotonicNanos> {
    /// `CLOCK_MONOTONIC`, like shmlimit.
    pub fn monotonic(workload: Workload) -> Self {
        Governor {
            limiter: Arc::new(RateLimiter::direct_with_clock(
                quota(workload),
                MonotonicNanos,
            )),
        }
    }
}

impl<C> Contender for Governor<C>
where
    C: Clock + Send + Sync,
    C::Instant: Send + Sync,
{
    type Worker = Arc<Direct<C>>;

    fn worker(&self) -> Self::Worker {
        Arc::clone(&self.limiter)
    }

    #[inline(always)]
    fn decide(worker: &mut Self::Worker) -> bool {
        worker.check().is_ok()
    }
}
