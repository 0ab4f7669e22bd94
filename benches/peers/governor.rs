//! governor's direct (in-process, unkeyed) limiter, on its default quanta clock and on a clock
//! that reads `CLOCK_MONOTONIC` exactly as shmlimit does (the same-clock comparison); and its
//! keyed limiter (`RateLimiter::keyed`: one GCRA state per key in its default store, a
//! `DashMap` hashed with std's `RandomState`, SipHash-1-3 under a random key) on the same two
//! clocks, deciding on the keyed benchmarks' keys.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::keyed::{Access, KeyCursor, Keys, KEY_LEN};
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

/// A key of the keyed benchmarks, as governor's keyed limiter holds it.
type Key = [u8; KEY_LEN];

type Keyed<C> =
    RateLimiter<Key, DefaultKeyedStateStore<Key>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A keyed limiter (the bucket of a [`Workload`] per key) shared by every thread of the
/// process, every key of `keys` already in its store.
pub struct GovernorKeyed<C: Clock> {
    limiter: Arc<Keyed<C>>,
    keys: Arc<Keys>,
}

impl<C: Clock> GovernorKeyed<C> {
    /// Decide once on every key, so that the measured decisions find their key in the store
    /// rather than insert it (as shmlimit's keyed contender does).
    fn filled(limiter: Keyed<C>, keys: usize, access: Access) -> Self {
        let keys = Keys::new(keys, access);
        for key in keys.all() {
            assert!(
                limiter.check_key(&key).is_ok(),
                "a fresh key's first decision admits"
            );
        }
        GovernorKeyed {
            limiter: Arc::new(limiter),
            keys,
        }
    }
}

impl GovernorKeyed<DefaultClock> {
    /// `RateLimiter::keyed`: the default store and the default clock (quanta).
    pub fn quanta(workload: Workload, keys: usize, access: Access) -> Self {
        GovernorKeyed::filled(RateLimiter::keyed(quota(workload)), keys, access)
    }
}

impl GovernorKeyed<MonotonicNanos> {
    /// The default store (what `RateLimiter::keyed` makes) on `CLOCK_MONOTONIC`, like shmlimit.
    pub fn monotonic(workload: Workload, keys: usize, access: Access) -> Self {
        let limiter = RateLimiter::new(
            quota(workload),
            DefaultKeyedStateStore::default(),
            MonotonicNanos,
        );
        GovernorKeyed::filled(limiter, keys, access)
    }
}

/// A limiter and where in the key sequence this worker is.
pub struct KeyedWorker<C: Clock> {
    limiter: Arc<Keyed<C>>,
    keys: KeyCursor,
}

impl<C> Contender for GovernorKeyed<C>
where
    C: Clock + Send + Sync,
    C::Instant: Send + Sync,
{
    type Worker = KeyedWorker<C>;

    fn worker(&self) -> Self::Worker {
        KeyedWorker {
            limiter: Arc::clone(&self.limiter),
            keys: KeyCursor::new(&self.keys),
        }
    }

    #[inline(always)]
    fn decide(worker: &mut Self::Worker) -> bool {
        worker.limiter.check_key(&worker.keys.next_key()).is_ok()
    }
}
