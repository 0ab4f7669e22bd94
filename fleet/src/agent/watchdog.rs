//! The fence watchdog: the share lowered to the fence once the fence instant has passed (the
//! data plane fences by itself at the lease deadline; this makes it visible and final).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::local::Shared;

/// Lower the share to the minimum when the fence instant has passed.
pub(super) fn watchdog(s: &Shared, stop: &AtomicBool) {
    // Relaxed: the stop flag is only polled; the local state is under its mutex.
    while !stop.load(Ordering::Relaxed) {
        let wait = {
            let mut l = s.lock();
            match l.fence_at {
                Some(at) if Instant::now() >= at => {
                    let floor = s.res.min.min(l.applied);
                    if s.apply(&mut l, floor, "fence") {
                        l.fence_at = None;
                    }
                    Duration::from_millis(1)
                }
                Some(at) => at.saturating_duration_since(Instant::now()),
                None => Duration::from_millis(20),
            }
        };
        std::thread::sleep(wait.clamp(Duration::from_micros(200), Duration::from_millis(5)));
    }
}
