//! shmlimit itself: one limit in a limiter file, decided through its typed handle (a
//! [`TokenBucketLimit`] unless the type says otherwise).

use std::path::PathBuf;

use shmlimit::{
    Algorithm, Clock, Limit, LimitDef, Limiter, MonotonicClock, Rate, RateLimit, TokenBucket,
    TokenBucketLimit,
};
use tempfile::TempDir;

use super::{file_in, scratch_dir, Contender, Workload};

pub const NAME: &str = "bench";

/// What a handle of one unkeyed rate kind needs to be benchmarked.
pub trait Handle<C: Clock>:
    RateLimit<C> + Clone + Send + Sync + TryFrom<Limit<C>, Error = shmlimit::Error>
{
}

impl<C: Clock, H> Handle<C> for H where
    H: RateLimit<C> + Clone + Send + Sync + TryFrom<Limit<C>, Error = shmlimit::Error>
{
}

/// A limiter file holding one limit, and the clock its handles read.
pub struct Shmlimit<C: Clock = MonotonicClock, H: Handle<C> = TokenBucketLimit<C>> {
    path: PathBuf,
    clock: C,
    limit: H,
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

impl Shmlimit<MonotonicClock> {
    /// The token bucket of `workload` managed by a fleet agent: its rate is a share whose lease
    /// deadline every decision compares with its clock read. The lease runs for the longest
    /// allowed (2^40 ns, about 18 minutes, far beyond a measurement); the fence is the floor.
    pub fn fleet_token_bucket(workload: Workload) -> Self {
        let s = Shmlimit::token_bucket(workload);
        let p = workload.bucket();
        let floor = Rate::from_emission_ns(1 << 42).expect("the floor's rate");
        s.limit
            .fleet_manage(1, floor)
            .expect("fleet-manage the bucket");
        let rate = Rate::from_emission_ns(p.emission_ns).expect("valid emission interval");
        s.limit
            .set_token_bucket(p.capacity, rate)
            .expect("the share");
        let deadline = s.clock.now_ns() + (1 << 40) - 1;
        s.limit.set_fleet_deadline(deadline).expect("the lease");
        s
    }

    /// The token bucket of `workload` split into `k` sub-buckets (`k = 1`: not split).
    pub fn split(workload: Workload, k: u16) -> Self {
        Shmlimit::with_options(token_bucket(workload), MonotonicClock, |d| d.split(k))
    }
}

impl<C: Clock, H: Handle<C>> Shmlimit<C, H> {
    /// A fresh file in a scratch directory holding `algorithm`, decided on `clock`.
    pub fn with_clock(algorithm: Algorithm, clock: C) -> Self {
        Shmlimit::with_options(algorithm, clock, |d| d)
    }

    /// As [`Shmlimit::with_clock`], with the definition's options set by `options`.
    pub fn with_options(
        algorithm: Algorithm,
        clock: C,
        options: impl FnOnce(LimitDef) -> LimitDef,
    ) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "shmlimit");
        let limiter = Limiter::builder()
            .limit_with(NAME, algorithm, options)
            .clock(clock.clone())
            .create_or_open(&path)
            .expect("create the limiter file");
        let limit = limiter
            .limit(NAME)
            .and_then(H::try_from)
            .expect("the limit just defined, of the handle's kind");
        Shmlimit {
            path,
            clock,
            limit,
            _dir: dir,
        }
    }
}

impl<C: Clock, H: Handle<C>> Shmlimit<C, H> {
    /// The limiter file, for programs that attach to it by path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl<C: Clock, H: Handle<C>> Contender for Shmlimit<C, H> {
    type Worker = H;

    fn worker(&self) -> H {
        self.limit.clone()
    }

    /// Attach by path, as another process would: its own mapping and its own statistics lane.
    fn attach(&self) -> H {
        Limiter::builder()
            .clock(self.clock.clone())
            .open(&self.path)
            .expect("attach to the limiter file")
            .limit(NAME)
            .and_then(H::try_from)
            .expect("the limit is in the file")
    }

    #[inline(always)]
    fn decide(worker: &mut H) -> bool {
        worker
            .try_acquire(1)
            .expect("a cost of 1 on a healthy file always decides")
            .is_allowed()
    }
}
