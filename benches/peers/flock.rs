//! The bucket in a file guarded by `flock(2)`: the lock-file design. The state word is read and
//! written through a mapping of the same file, so the cost measured is the lock's, not `read`'s.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use memmap2::MmapRaw;
use tempfile::TempDir;

use super::bucket::{self, BucketParams};
use super::{file_in, scratch_dir, Contender, Workload};

/// A state file; every worker opens it itself (a `flock` is held per open file description, so
/// a shared descriptor would not exclude anyone).
pub struct Flock {
    path: PathBuf,
    map: MmapRaw,
    params: BucketParams,
    _dir: TempDir,
}

impl Flock {
    /// A fresh file holding a full bucket of `workload`.
    pub fn new(workload: Workload) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "flock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create the lock file");
        file.set_len(4096).expect("size the lock file");
        let map = MmapRaw::map_raw(&file).expect("map the lock file");
        Flock {
            path,
            map,
            params: workload.bucket(),
            _dir: dir,
        }
    }
}

/// One worker's own descriptor and the mapped state word.
pub struct LockedFile {
    file: File,
    tat: *mut u64,
    params: BucketParams,
}

impl Contender for Flock {
    type Worker = LockedFile;

    fn worker(&self) -> LockedFile {
        LockedFile {
            file: OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.path)
                .expect("open the lock file"),
            tat: self.map.as_mut_ptr() as *mut u64,
            params: self.params,
        }
    }

    #[inline(always)]
    fn decide(w: &mut LockedFile) -> bool {
        let fd = w.file.as_raw_fd();
        // SAFETY: `fd` is an open descriptor owned by `w.file`.
        let rc = unsafe { libc::flock(fd, libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock(LOCK_EX)");
        // The clock is read under the lock (see `bucket::gcra`).
        // SAFETY: [1] `tat` points at the first, page-aligned word of a live 4096-byte mapping
        // (kept by the `Flock` that outlives every worker); [2] the exclusive lock is held, so no
        // other worker touches the word until the unlock below, and the two system calls order
        // our access with theirs.
        let admitted = unsafe { bucket::gcra(&mut *w.tat, bucket::now_ns(), &w.params) };
        // SAFETY: as above.
        let rc = unsafe { libc::flock(fd, libc::LOCK_UN) };
        assert_eq!(rc, 0, "flock(LOCK_UN)");
        admitted
    }
}
