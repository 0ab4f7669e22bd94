//! shmlimit itself: one limit in a limiter file, decided through a [`Limit`] handle.

use std::path::PathBuf;

use shmlimit::{Algorithm, Clock, Limit, Limiter, MonotonicClock, Rate, TokenBucket};
use tempfile::TempDir;

use super::{file_in, scratch_dir, Contender, Workload};

const NAME: &str = "bench";

/// A limiter file holding one limit, and the clock its handles read.
pub struct Shmlimit<C: Clock = MonotonicClock> {
    path: PathBuf,
    clock: C,
    limit: Limit<C>,
    _dir: TempDir,
}

impl Shmlimit<MonotonicClock> {
    /// The token bucket of `workload`, on the default clock.
    pub fn token_bucket(workload: Workload) -> Self {
        Shmlimit::with_clock(token_bucket(workload), MonotonicClock)
    }
}

/// The token bucket of `workload` as a shmlimit definition.
pub fn token_bucket(workload: Workload) -> Algorithm {
    let p = workload.bucket();
    let rate = Rate::from_emission_ns(p.emission_ns).expect("valid emission interval");
    shmlimit::IntoAlgorithm::into_algorithm(TokenBucket::new(p.capacity, rate), NAME)
        .expect("valid token bucket")
}

impl<C: Clock> Shmlimit<C> {
    /// A fresh file in a scratch directory holding `algorithm`, decided on `clock`.
    pub fn with_clock(algorithm: Algorithm, clock: C) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "shmlimit");
        let limiter = Limiter::builder()
            .limit(NAME, algorithm)
            .clock(clock.clone())
            .create_or_open(&path)
            .expect("create the limiter file");
        let limit = limiter.limit(NAME).expect("the limit just defined");
        Shmlimit {
            path,
            clock,
            limit,
            _dir: dir,
        }
    }
}

impl<C: Clock> Contender for Shmlimit<C> {
    type Worker = Limit<C>;

    fn worker(&self) -> Limit<C> {
        self.limit.clone()
    }

    /// Attach by path, as another process would: its own mapping and its own statistics lane.
    fn attach(&self) -> Limit<C> {
        Limiter::builder()
            .clock(self.clock.clone())
            .open(&self.path)
            .expect("attach to the limiter file")
            .limit(NAME)
            .expect("the limit is in the file")
    }

    #[inline(always)]
    fn decide(worker: &mut Limit<C>) -> bool {
        worker
            .try_acquire(1)
            .expect("a cost of 1 on a healthy file always decides")
            .is_allowed()
    }
}
