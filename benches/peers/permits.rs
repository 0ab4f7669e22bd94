//! shmlimit's concurrency limit: one `try_acquire_permit` and the permit's release (its drop)
//! per decision.

use std::path::PathBuf;

use shmlimit::{Concurrency, Limit, Limiter};
use tempfile::TempDir;

use super::{file_in, scratch_dir, Contender};

const NAME: &str = "permits";

/// A concurrency limit with more permits than workers, so every acquisition succeeds.
pub struct Permits {
    path: PathBuf,
    limit: Limit,
    _dir: TempDir,
}

impl Permits {
    /// A fresh file holding a limit of `permits` concurrent holders.
    pub fn new(permits: u64) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "permits");
        let limiter = Limiter::builder()
            .limit(NAME, Concurrency::new(permits))
            .create_or_open(&path)
            .expect("create the limiter file");
        let limit = limiter.limit(NAME).expect("the limit just defined");
        Permits {
            path,
            limit,
            _dir: dir,
        }
    }
}

impl Contender for Permits {
    type Worker = Limit;

    fn worker(&self) -> Limit {
        self.limit.clone()
    }

    /// Attach by path, as another process would (its own holder identity).
    fn attach(&self) -> Limit {
        Limiter::open(&self.path)
            .expect("attach to the limiter file")
            .limit(NAME)
            .expect("the limit is in the file")
    }

    /// Admitted when a permit was granted; it is released (dropped) at once.
    #[inline(always)]
    fn decide(worker: &mut Limit) -> bool {
        worker
            .try_acquire_permit()
            .expect("a healthy concurrency limit always decides")
            .is_some()
    }
}
