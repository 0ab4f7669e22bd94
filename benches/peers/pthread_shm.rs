//! The bucket behind a process-shared, robust pthread mutex inside a mapped file: the design of
//! nginx's shared-memory zones (one mutex per zone, taken for every decision).

use std::fs::OpenOptions;
use std::ptr::addr_of_mut;

use memmap2::MmapRaw;
use tempfile::TempDir;

use super::bucket::{self, BucketParams};
use super::{file_in, scratch_dir, Contender, Workload};

/// The mapped zone: the mutex and the state word it guards.
#[repr(C)]
struct Zone {
    mutex: libc::pthread_mutex_t,
    tat: u64,
}

/// A zone in a mapped file; forked children inherit the mapping, as nginx workers do.
pub struct PthreadShm {
    map: MmapRaw,
    params: BucketParams,
    _dir: TempDir,
}

impl PthreadShm {
    /// A fresh zone holding a full bucket of `workload`.
    pub fn new(workload: Workload) -> Self {
        let dir = scratch_dir();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(file_in(&dir, "pthread"))
            .expect("create the zone file");
        file.set_len(4096).expect("size the zone file");
        let map = MmapRaw::map_raw(&file).expect("map the zone file");
        let zone = map.as_mut_ptr() as *mut Zone;
        // SAFETY: [1] the mapping is 4096 bytes, page-aligned, larger and more aligned than
        // `Zone`; [2] no other thread or process can see it yet, so initialising the mutex in
        // place is exclusive; [3] each attr call gets a valid, initialised attr object.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_mutexattr_init(&mut attr), 0);
            assert_eq!(
                libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED),
                0
            );
            assert_eq!(
                libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST),
                0
            );
            assert_eq!(
                libc::pthread_mutex_init(addr_of_mut!((*zone).mutex), &attr),
                0
            );
            libc::pthread_mutexattr_destroy(&mut attr);
            addr_of_mut!((*zone).tat).write(0);
        }
        PthreadShm {
            map,
            params: workload.bucket(),
            _dir: dir,
        }
    }
}

/// A pointer to the zone, valid while the [`PthreadShm`] that made it is alive.
pub struct ZoneRef {
    zone: *mut Zone,
    params: BucketParams,
}

impl Contender for PthreadShm {
    type Worker = ZoneRef;

    fn worker(&self) -> ZoneRef {
        ZoneRef {
            zone: self.map.as_mut_ptr() as *mut Zone,
            params: self.params,
        }
    }

    #[inline(always)]
    fn decide(w: &mut ZoneRef) -> bool {
        // SAFETY: `zone` points at the initialised zone in a mapping that outlives every worker
        // (workers live in scoped threads or in children of the process holding it).
        let mutex = unsafe { addr_of_mut!((*w.zone).mutex) };
        // SAFETY: `mutex` is an initialised process-shared mutex (see `new`).
        match unsafe { libc::pthread_mutex_lock(mutex) } {
            0 => {}
            libc::EOWNERDEAD => {
                // A holder died: its update either happened or not, the word is whole.
                // SAFETY: we hold the mutex in the owner-dead state, which is what this requires.
                unsafe { libc::pthread_mutex_consistent(mutex) };
            }
            rc => panic!("pthread_mutex_lock: {rc}"),
        }
        // The clock is read under the lock (see `bucket::gcra`).
        // SAFETY: the mutex is held, so this is the only access to `tat` anywhere; the lock and
        // unlock order it with every other holder's access.
        let admitted = unsafe {
            bucket::gcra(
                &mut *addr_of_mut!((*w.zone).tat),
                bucket::now_ns(),
                &w.params,
            )
        };
        // SAFETY: we hold `mutex`.
        unsafe { libc::pthread_mutex_unlock(mutex) };
        admitted
    }
}
