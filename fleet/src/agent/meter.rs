//! The host's demand on the limit, reported at each renewal.

use std::time::Instant;

use super::local::Shared;
use crate::protocol::{self, MAX_TOTAL_UNITS};

/// The host's demand on the limit: decisions per second (admitted or denied, from the file's
/// counters, all processes), in units, over the time since the previous renewal; smoothed so
/// that it rises at once and decays by half per renewal.
#[derive(Debug, Default)]
pub(super) struct Meter {
    last: Option<(Instant, u64)>,
    smoothed: Option<u64>,
}

impl Meter {
    pub(super) fn demand(&mut self, s: &Shared) -> u64 {
        let st = s.limit.as_limit().stats();
        let count = st.allowed.saturating_add(st.denied);
        let now = Instant::now();
        let latest = match self.last {
            Some((at, before)) if now > at => {
                let ns = (now - at).as_nanos().max(1);
                let per_s = count.saturating_sub(before) as u128
                    * protocol::UNITS_PER_TOKEN as u128
                    * 1_000_000_000
                    / ns;
                Some(per_s.min(MAX_TOTAL_UNITS as u128) as u64)
            }
            _ => None,
        };
        self.last = Some((now, count));
        self.smoothed = match (latest, self.smoothed) {
            (Some(l), Some(p)) => Some(l.max(p / 2 + l / 2)),
            (l, p) => l.or(p),
        };
        // Not known yet (the first renewal): as busy as it can be.
        self.smoothed.unwrap_or(s.res.total)
    }
}
