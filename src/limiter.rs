//! The public handles: [`Limiter`] (one attached file) and [`Limit`] (one limit in it).

use crate::clock::{Clock, MonotonicClock};
use crate::engine::bucket::Bucket;
use crate::engine::counters::Counters;
use crate::engine::keyed::Keyed;
use crate::engine::permits::{PermitHolder, Permits};
use crate::engine::site::Site;
pub(crate) use crate::engine::Params;
use crate::error::Result;
use crate::spec::{Algorithm, LimitDef};

mod attach;
mod builder;

mod info;

mod refund;
mod run;

mod step;
mod token_bucket;

#[cfg(test)]
mod tests;

pub use crate::engine::bucket::FleetLease;
pub use crate::engine::site::watch::REPLACEMENT_CHECK;
use crate::engine::site::watch::{sync_files, RetuneGuard, Shared};
pub(crate) use crate::engine::StepError;
pub use crate::tally::Stats;
pub use attach::Limiter;
pub use builder::Builder;
pub use info::FileInfo;

/// The untyped view of one limit, whatever its kind: what [`Limiter::limit`] and
/// [`Limiter::limits`] return, for listing and inspecting a file (name, definition, kind, live
/// parameters, statistics, permit holders, key occupancy) and for maintenance (reset, reclaiming
/// dead permits and idle keys).
///
/// Deciding goes through a handle of the limit's kind ([`crate::TokenBucketLimit`],
/// [`crate::WindowLimit`], ..., see [`LimitKind`](crate::LimitKind)), resolved with
/// [`Limiter::token_bucket`] and the like, or converted from this view with `try_from`: each
/// has exactly the operations of its kind, and holds this view. This view decides nothing. Handles are
/// `Send + Sync` and cheap to clone.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("limit.shm");
/// use std::time::Duration;
/// use shmlimit::{Concurrency, FixedWindow, LimitKind, Limiter, WindowLimit};
/// let limiter = Limiter::builder()
///     .limit("per-minute", FixedWindow::new(2, Duration::from_secs(60)))
///     .limit("jobs", Concurrency::new(4))
///     .create_or_open(&path)?;
/// for limit in limiter.limits() {
///     println!("{} ({}): {:?}", limit.name(), limit.kind(), limit.stats());
/// }
/// let limit = limiter.limit("per-minute")?;
/// assert_eq!(limit.kind(), LimitKind::Window);
/// let window = WindowLimit::try_from(limit)?; // as limiter.window("per-minute")
/// assert!(window.try_acquire(2)?.is_allowed());
/// assert_eq!(limiter.limit("per-minute")?.stats().allowed, 1);
/// assert_eq!(limiter.limit("jobs")?.permit_holders().len(), 0);
/// # Ok(()) }
/// ```
pub struct Limit<C: Clock = MonotonicClock> {
    site: Site<C>,
}

impl<C: Clock> Clone for Limit<C> {
    fn clone(&self) -> Self {
        Limit {
            site: self.site.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Limit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limit")
            .field("name", &self.name())
            .field("algorithm", self.algorithm())
            .finish()
    }
}

impl<C: Clock> Limit<C> {
    /// The view of the limit at `site`.
    pub(crate) fn of(site: Site<C>) -> Self {
        Limit { site }
    }

    /// Where the limit's words are: what the engines decide on.
    #[inline(always)]
    pub(crate) fn site(&self) -> &Site<C> {
        &self.site
    }

    pub(crate) fn into_site(self) -> Site<C> {
        self.site
    }

    /// The limit in the file at the path now: this file, or, once the replacement check
    /// (see [`REPLACEMENT_CHECK`]) noticed that another file replaced it, the same limit in
    /// that one. Every inspection and management call follows a replaced file through here
    /// (and the typed handles' management calls through [`Site::current`] too); a replacement
    /// that cannot be attached reads this file.
    fn here(&self) -> &Site<C> {
        self.site.current().unwrap_or(&self.site)
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        self.site.name()
    }

    /// Its definition as stored in the file.
    pub fn def(&self) -> &LimitDef {
        self.site.def()
    }

    /// Its algorithm and parameters as defined at creation.
    pub fn algorithm(&self) -> &Algorithm {
        self.site.algorithm()
    }

    /// The clock this handle decides with.
    pub fn clock(&self) -> &C {
        self.site.clock()
    }

    /// The most one decision can grant under the current (possibly retuned) parameters: the
    /// bucket's capacity, the window's limit, the log's length, the number of permits.
    pub fn capacity(&self) -> u64 {
        self.here().capacity()
    }

    /// The algorithm with its live parameters (after any retune).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`](crate::Error::CorruptState) when the live parameters are damaged.
    pub fn live_algorithm(&self) -> Result<Algorithm> {
        self.site.current()?.live_algorithm()
    }

    /// Decisions of this limit so far, summed over all processes (see [`Stats`] for how
    /// current they are).
    pub fn stats(&self) -> Stats {
        self.here().stats()
    }

    /// Return the limit's state to fresh (full bucket, empty windows, log and table, no
    /// permits), keeping its live parameters. What this grants: the whole capacity, at once.
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) if the retune lock cannot be taken.
    pub fn reset(&self) -> Result<()> {
        self.site.current()?.reset()
    }

    /// A fleet-managed token bucket's lease: its share, deadline and fence; `None` for a limit
    /// the fleet does not manage.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`](crate::Error::CorruptState) when the lease words are damaged.
    pub fn fleet_lease(&self) -> Result<Option<FleetLease>> {
        Bucket(self.site.current()?).fleet_lease()
    }

    /// The processes holding a permit of this concurrency limit (keyed or not), with their
    /// pids and whether each is alive; empty for other kinds.
    pub fn permit_holders(&self) -> Vec<PermitHolder> {
        Permits(self.here()).permit_holders()
    }

    /// Free the permits of processes that died holding them; how many were freed.
    pub fn reclaim_dead_permits(&self) -> usize {
        Permits(self.here()).reclaim_dead_permits()
    }

    /// A keyed limit's table occupancy: (keys in use, key slots); `(0, 0)` when unkeyed.
    ///
    /// A counters limit has two tables of its key capacity (one for fixed and sliding
    /// windows, one for moving-window logs): both are counted, a key used with both strategies
    /// twice.
    pub fn key_occupancy(&self) -> (usize, usize) {
        match self.here().params() {
            Params::Counters { .. } => Counters(self.here()).key_occupancy(),
            _ => Keyed(self.here()).key_occupancy(),
        }
    }

    /// Free the slots of keys idle long enough to be back at their fresh state; how many were
    /// freed (0 when unkeyed).
    /// A counters limit's keys are retired from both its tables (see
    /// [`CountersLimit::reclaim_idle_keys`](crate::CountersLimit::reclaim_idle_keys)).
    pub fn reclaim_idle_keys(&self) -> usize {
        match self.here().params() {
            Params::Counters { .. } => Counters(self.here()).reclaim_idle_keys(),
            _ => Keyed(self.here()).reclaim_idle_keys(),
        }
    }
}
