//! The adaptive concurrency handle: permits within a limit that adapts.

use std::time::Duration;

use super::kind;
use super::Handle;
use crate::algo::adaptive::Outcome;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::adaptive::{Adaptive, AdaptivePermit, AdaptiveStatus};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// An adaptive concurrency limit: at most `L` permits held at once across every process, where
/// `L` moves within `[min, max]` from the latency and outcome every release reports, pooled
/// from every process; resolved with
/// [`Limiter::adaptive_concurrency`](crate::Limiter::adaptive_concurrency). A permit is
/// reclaimed when its holder dies (or its lease expires), as a
/// [`ConcurrencyLimit`](crate::ConcurrencyLimit)'s.
///
/// # The algorithm
///
/// Every release with an outcome adds itself to a pooled window; the first release after the
/// window (`W`, default 20 ms) closes it and moves the limit once, from `L` (the window's mean
/// ok RTT `r`, the long RTT `R`):
///
/// - errors or timeouts in the window (AIMD): `L' = b x L` (backoff `b`, default 0.9);
/// - else, with ok samples (Gradient2): `gradient = max(0.5, min(1, t x R / r))`,
///   `L' = (1 - s) x L + s x (L x gradient + max(1, h x L))` (smoothing `s` 0.2, tolerance `t`
///   1.0, headroom `h` 0.1; no growth while fewer than `L / 2` are in flight);
/// - `L'` is clamped to `[min, max]`; the long RTT follows the window means, down by half the
///   gap, up by 1/8192 of it per window (by 1/16 at the minimum limit);
/// - the long RTT is re-measured on a schedule every process reads from the clock: in each run
///   of 1000 windows the last 8 grant at most `min` permits and keep the limit, and the windows
///   closing in the last 4 set the long RTT from their mean (the first of them alone, then the
///   smaller): a dependency that became slower for good has its new latency learnt within
///   1000 windows (20 s), and the limit grows back.
///
/// One window moves the limit by at most `-(1 - min(b, 1 - s/2))` and `+s x max(1, h x L)`:
/// -10% and +2% (+0.2 under 10 permits) with the defaults, whatever any process reports. A
/// dependency whose latency is flat up to a knee `K` and queues past it settles at
/// `t x K / (1 - h)`, 1.11 K with the defaults. When the limit falls below the permits held,
/// no permit is granted until fewer than the new limit are held (none is revoked).
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("llm.shm");
/// use std::time::Duration;
/// use shmlimit::{AdaptiveConcurrency, Limiter, Outcome};
/// let limiter = Limiter::builder()
///     .limit("llm", AdaptiveConcurrency::new(4, 256).initial(32))
///     .create_or_open(&path)?;
/// let llm = limiter.adaptive_concurrency("llm")?;
/// if let Some(permit) = llm.acquire_timeout(Duration::from_millis(100))? {
///     // ... call the dependency ...
///     permit.release(Outcome::Ok);
/// }
/// assert_eq!(llm.status()?.permits, 32);
/// # Ok(()) }
/// ```
pub type AdaptiveConcurrencyLimit<C = MonotonicClock> = Handle<kind::AdaptiveConcurrency, C>;

impl<C: Clock> Handle<kind::AdaptiveConcurrency, C> {
    /// Take a permit if fewer than the current limit are held now (`None` otherwise); the
    /// permits of dead holders are taken over when the count is at the limit.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if this process's own `/proc/self/stat` cannot be read.
    #[inline]
    pub fn try_acquire(&self) -> Result<Option<AdaptivePermit<C>>> {
        Adaptive(self.limit.site()).try_acquire()
    }

    /// [`Self::try_acquire`], waiting up to `timeout` on a futex in the file that every
    /// release and every raise of the limit wakes (re-checking for dead holders at least every
    /// [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK)).
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    #[inline]
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<AdaptivePermit<C>>> {
        Adaptive(self.limit.site()).acquire_timeout(timeout)
    }

    /// The current limit, its range, the long and recent RTT, and the permits held now.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the file was replaced by one where this name is another kind.
    pub fn status(&self) -> Result<AdaptiveStatus> {
        Adaptive(self.limit.site().current()?).status()
    }

    /// Whether `now_ns` (on the limit's clock) falls in a re-measure of the RTT, when at most
    /// `min` permits are granted: the last 8 windows of every 1000 (160 ms every 20 s with the
    /// default window; see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the file was replaced by one where this name is another kind.
    pub fn remeasuring_at(&self, now_ns: u64) -> Result<bool> {
        Adaptive(self.limit.site().current()?).remeasuring_at(now_ns)
    }

    /// Release the permit `id` ([`AdaptivePermit::id`] of a permit kept with
    /// [`std::mem::forget`]-free code paths such as the C ABI) reporting `outcome` and the
    /// latency the caller measured. `Ok(false)` if this process does not hold it.
    ///
    /// # Errors
    ///
    /// As [`Self::try_acquire`].
    pub fn release_with(&self, id: u64, outcome: Outcome, latency: Duration) -> Result<bool> {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        Adaptive(self.limit.site()).release_id(id, outcome, ns)
    }
}
