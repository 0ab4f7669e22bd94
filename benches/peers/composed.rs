//! Three shmlimit token buckets in one file, decided together: either as one composed check
//! (`try_acquire_all`, which refunds the grants already made when a later limit denies) or as
//! three separate `try_acquire` calls.

use shmlimit::{try_acquire_all, Check, Limiter, TokenBucketLimit};
use tempfile::TempDir;

use super::shmlimit::token_bucket;
use super::{file_in, scratch_dir, Contender, Workload};

const NAMES: [&str; 3] = ["a", "b", "c"];

/// The three limits; `ALL` chooses one composed check (`true`) or three separate ones.
pub struct ThreeLimits<const ALL: bool> {
    limits: [TokenBucketLimit; 3],
    _dir: TempDir,
}

impl<const ALL: bool> ThreeLimits<ALL> {
    /// Three buckets of `workload` in a fresh file.
    pub fn new(workload: Workload) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "composed");
        let limiter = NAMES
            .iter()
            .fold(Limiter::builder(), |b, name| {
                b.limit(name, token_bucket(workload))
            })
            .create_or_open(&path)
            .expect("create the limiter file");
        let limits = NAMES.map(|name| limiter.token_bucket(name).expect("the limit just defined"));
        ThreeLimits { limits, _dir: dir }
    }
}

impl<const ALL: bool> Contender for ThreeLimits<ALL> {
    type Worker = [TokenBucketLimit; 3];

    fn worker(&self) -> [TokenBucketLimit; 3] {
        self.limits.clone()
    }

    /// Admitted when all three admit.
    #[inline(always)]
    fn decide(worker: &mut [TokenBucketLimit; 3]) -> bool {
        let [a, b, c] = &*worker;
        if ALL {
            try_acquire_all(&[Check::new(a, 1), Check::new(b, 1), Check::new(c, 1)])
                .expect("a cost of 1 on healthy limits always decides")
                .is_allowed()
        } else {
            let one = |l: &TokenBucketLimit| {
                l.try_acquire(1)
                    .expect("a cost of 1 on a healthy file always decides")
                    .is_allowed()
            };
            // Non-short-circuiting: the three calls are made whatever the first ones decide.
            one(a) & one(b) & one(c)
        }
    }
}
