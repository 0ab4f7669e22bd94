//! pingora-limits' `Rate` (Cloudflare): per-key event counts in a lock-free count-min sketch
//! (4 rows of 1,024 counters, `ahash` under random keys), in two windows of a fixed interval
//! that swap when it ends. A decision is `observe(&key, 1)` (the key's estimated count in the
//! current window, this event included) compared with the limit.
//!
//! This is a speed reference, not a like-for-like limiter: the count is approximate (keys that
//! share counters in every row are counted together, so it only over-counts, and more so the
//! more keys there are), the window is fixed rather than a token bucket, and it lives in one
//! process. It reads the clock (`Instant::now`, `CLOCK_MONOTONIC`) on every decision, as
//! shmlimit does.

use std::sync::Arc;
use std::time::Duration;

use pingora_limits::rate::Rate;

use super::keyed::{Access, KeyCursor, Keys};
use super::{Contender, Workload};

/// The window of the estimator.
const INTERVAL: Duration = Duration::from_secs(1);

/// A `Rate` (its default sketch) whose limit per key and window is what the bucket of a
/// [`Workload`] admits in one window from full: its burst plus one window's refill.
pub struct PingoraRate {
    rate: Arc<Rate>,
    limit: isize,
    keys: Arc<Keys>,
}

impl PingoraRate {
    /// A fresh estimator that has seen every key of `keys` once.
    pub fn new(workload: Workload, keys: usize, access: Access) -> Self {
        let p = workload.bucket();
        let per_window = p.capacity + INTERVAL.as_nanos() as u64 / p.emission_ns;
        let limit = isize::try_from(per_window).expect("the limit fits isize");
        let rate = Rate::new(INTERVAL);
        let keys = Keys::new(keys, access);
        for key in keys.all() {
            rate.observe(&key, 1);
        }
        PingoraRate {
            rate: Arc::new(rate),
            limit,
            keys,
        }
    }
}

/// The estimator, the limit and where in the key sequence this worker is.
pub struct PingoraWorker {
    rate: Arc<Rate>,
    limit: isize,
    keys: KeyCursor,
}

impl Contender for PingoraRate {
    type Worker = PingoraWorker;

    fn worker(&self) -> PingoraWorker {
        PingoraWorker {
            rate: Arc::clone(&self.rate),
            limit: self.limit,
            keys: KeyCursor::new(&self.keys),
        }
    }

    #[inline(always)]
    fn decide(worker: &mut PingoraWorker) -> bool {
        worker.rate.observe(&worker.keys.next_key(), 1) <= worker.limit
    }
}
