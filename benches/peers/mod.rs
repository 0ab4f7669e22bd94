//! The contenders: shmlimit and everything a user would otherwise pick, behind one trait so that
//! every group runs them through the same loop with the same parameters.
//!
//! Each contender is one module. A new one (keyed limits, composed checks, the C ABI) is one more
//! module implementing [`Contender`], then one line in the groups that should compare it.
//! (`keyed`, `composed` and `permits` are shmlimit's own keyed, composed and concurrency limits;
//! `governor` holds governor's direct and keyed limiters, `pingora` pingora-limits' `Rate`.)

pub mod bucket;
pub mod c_reference;
pub mod composed;
pub mod flock;
pub mod governor;
pub mod keyed;
pub mod mutex;
pub mod permits;
pub mod pingora;
pub mod pthread_shm;
pub mod redis_lua;
pub mod shmlimit;

use std::path::PathBuf;

use tempfile::TempDir;

pub use bucket::Workload;

/// One rate limiter under test.
///
/// `Sync` because threads ask it for their own [`Contender::Worker`].
pub trait Contender: Sync {
    /// What one thread or process holds to decide: a handle, a file descriptor, a connection.
    type Worker;

    /// A worker for one more thread of this process (a cloned handle where the contender allows).
    fn worker(&self) -> Self::Worker;

    /// A worker for a freshly forked child, obtained the way an independent process would
    /// (attach by path, open its own descriptor, connect). Defaults to [`Contender::worker`]
    /// for contenders whose state the child inherits, as nginx workers inherit their zone.
    fn attach(&self) -> Self::Worker {
        self.worker()
    }

    /// One decision of cost 1: `true` when admitted.
    fn decide(worker: &mut Self::Worker) -> bool;
}

/// A scratch directory for limiter files: in `/dev/shm` (tmpfs, what production uses) when it is
/// writable, else the system temp dir.
pub fn scratch_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("shmlimit-bench-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::Builder::new().prefix("shmlimit-bench-").tempdir())
        .expect("create a scratch directory for limiter files")
}

/// A path inside `dir` for the file of contender `name`.
pub fn file_in(dir: &TempDir, name: &str) -> PathBuf {
    dir.path().join(format!("{name}.shm"))
}

/// Prepare a fresh contender for `workload` and check that it decides as the workload says.
///
/// For [`Workload::Deny`] the first `drain` decisions empty the bucket (or fill the log); then
/// `probe` decisions must all agree with the workload. A disagreement means the parameters do not
/// produce the work the group claims to measure, so it is reported loudly.
pub fn prime<C: Contender>(name: &str, contender: &C, workload: Workload, drain: u64) {
    let mut worker = contender.worker();
    if workload == Workload::Deny {
        for _ in 0..drain {
            C::decide(&mut worker);
        }
    }
    let probe = 1_000;
    let admitted = (0..probe).filter(|_| C::decide(&mut worker)).count();
    let expected = match workload {
        Workload::Admit => probe,
        Workload::Deny => 0,
    };
    if admitted != expected {
        eprintln!(
            "warning: {name} ({}): {admitted} of {probe} probe decisions admitted, expected {expected}",
            workload.name()
        );
    }
}
