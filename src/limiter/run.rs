//! The check of a caller's date, shared by every dated decision (the typed handles' and the C
//! ABI's).

use crate::clock::{Clock, DATE_TOLERANCE_NS, MAX_DATE_NS};
use crate::engine::site::Site;
use crate::error::{Error, Result};

impl<C: Clock> Site<C> {
    /// Refuse a caller's date that the state cannot encode or that runs ahead of the clock.
    #[inline]
    pub(crate) fn check_date(&self, now_ns: u64) -> Result<()> {
        if now_ns > MAX_DATE_NS || now_ns > self.clock.now_ns().saturating_add(DATE_TOLERANCE_NS) {
            return Err(Error::ClockOutOfRange(now_ns));
        }
        Ok(())
    }
}
