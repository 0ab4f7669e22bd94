//! shmlimit's concurrency limit: one `try_acquire_permit` (or, keyed, one
//! `try_acquire_key_permit` of one key) and the permit's release (its drop) per decision.

use std::path::PathBuf;

use shmlimit::{Concurrency, ConcurrencyLimit, Keyed, KeyedConcurrencyLimit, Limiter};
use tempfile::TempDir;

use super::{file_in, scratch_dir, Contender};

const NAME: &str = "permits";
/// The one key every keyed acquisition is for.
const KEY: &[u8] = b"tenant:42";

/// A concurrency limit with more permits than workers, so every acquisition succeeds.
pub struct Permits {
    path: PathBuf,
    limit: PermitWorker,
    _dir: TempDir,
}

/// One worker's handle: unkeyed, or keyed (taking the key's permits).
#[derive(Clone)]
pub enum PermitWorker {
    Flat(ConcurrencyLimit),
    Keyed(KeyedConcurrencyLimit),
}

impl PermitWorker {
    fn resolve(limiter: &Limiter, keyed: bool) -> PermitWorker {
        if keyed {
            PermitWorker::Keyed(limiter.keyed_concurrency(NAME).expect("the keyed limit"))
        } else {
            PermitWorker::Flat(limiter.concurrency(NAME).expect("the limit"))
        }
    }
}

impl Permits {
    /// A fresh file holding a limit of `permits` concurrent holders.
    pub fn new(permits: u64) -> Self {
        Self::create(permits, false)
    }

    /// A fresh file holding a keyed limit of `permits` concurrent holders per key (all
    /// acquisitions are for one key, so they share its slot and its permits).
    pub fn keyed(permits: u64) -> Self {
        Self::create(permits, true)
    }

    fn create(permits: u64, keyed: bool) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "permits");
        let builder = Limiter::builder();
        let builder = if keyed {
            builder.keyed_limit(NAME, Concurrency::new(permits), Keyed::new(1024))
        } else {
            builder.limit(NAME, Concurrency::new(permits))
        };
        let limiter = builder
            .create_or_open(&path)
            .expect("create the limiter file");
        Permits {
            path,
            limit: PermitWorker::resolve(&limiter, keyed),
            _dir: dir,
        }
    }
}

impl Contender for Permits {
    type Worker = PermitWorker;

    fn worker(&self) -> PermitWorker {
        self.limit.clone()
    }

    /// Attach by path, as another process would (its own holder identity).
    fn attach(&self) -> PermitWorker {
        let limiter = Limiter::open(&self.path).expect("attach to the limiter file");
        PermitWorker::resolve(&limiter, matches!(self.limit, PermitWorker::Keyed(_)))
    }

    /// Admitted when a permit was granted; it is released (dropped) at once.
    #[inline(always)]
    fn decide(worker: &mut PermitWorker) -> bool {
        let permit = match worker {
            PermitWorker::Keyed(limit) => limit.try_acquire_key_permit(KEY),
            PermitWorker::Flat(limit) => limit.try_acquire_permit(),
        };
        permit
            .expect("a healthy concurrency limit always decides")
            .is_some()
    }
}
