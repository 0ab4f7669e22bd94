//! The bucket behind a `std::sync::Mutex`, in process memory: the obvious in-process design.

use std::sync::{Arc, Mutex};

use super::bucket::{self, BucketParams};
use super::{Contender, Workload};

/// A `Mutex<u64>` holding the theoretical arrival time.
pub struct InProcessMutex {
    tat: Arc<Mutex<u64>>,
    params: BucketParams,
}

impl InProcessMutex {
    /// A full bucket of `workload`.
    pub fn new(workload: Workload) -> Self {
        InProcessMutex {
            tat: Arc::new(Mutex::new(0)),
            params: workload.bucket(),
        }
    }
}

impl Contender for InProcessMutex {
    type Worker = (Arc<Mutex<u64>>, BucketParams);

    fn worker(&self) -> Self::Worker {
        (Arc::clone(&self.tat), self.params)
    }

    #[inline(always)]
    fn decide((tat, params): &mut Self::Worker) -> bool {
        let mut tat = tat.lock().expect("no holder panics");
        // The clock is read under the lock (see `bucket::gcra`).
        bucket::gcra(&mut tat, bucket::now_ns(), params)
    }
}
