//! The calls every unkeyed rate engine has (a token bucket, a window, a sliding log), written
//! once: a decision committed, peeked or dated, the slow path of the straight decision, a
//! refund and a wait with a deadline. Each engine supplies its straight path, its general
//! decision and how a grant's units go back to its state; the typed handles and the binding
//! dispatch call these.

use std::time::Duration;

use crate::algo::{relocated, Decision};
use crate::clock::Clock;
use crate::engine::site::Site;
use crate::error::{Error, Result};
use crate::wait::retry_until;

/// An unkeyed rate engine: a view of a limit's site (see [`crate::engine`]).
///
/// `pub` only so that the sealed kind traits may name it; the module is private.
pub trait RateEngine<'a, C: Clock + 'a>: Copy {
    /// The engine's view of `site`, a limit of its kind.
    fn on(site: &'a Site<C>) -> Self;

    /// The site this view decides on.
    fn site(self) -> &'a Site<C>;

    /// The straight decision of `cost` now, or `None` when it does not decide (having written
    /// nothing): the caller then decides from scratch with [`RateEngine::run`].
    fn fast(self, cost: u64) -> Option<Decision>;

    /// The general decision of `cost` (not 0) on this site, the current one: committed or a
    /// peek, now or dated `at`.
    fn decide(self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision>;

    /// Give `units` (not 0, at most its cost) of `grant`, an admission `maker` made, back to
    /// its state.
    fn give_units(maker: &Site<C>, grant: &Decision, units: u64) -> Result<()>;

    /// Admit `cost` units now, or deny and consume nothing: the typed handle's `try_acquire`.
    #[inline(always)]
    fn try_acquire(self, cost: u64) -> Result<Decision> {
        if let Some(decision) = self.fast(cost) {
            return Ok(decision);
        }
        relocated(self.try_acquire_again(cost))
    }

    /// [`RateEngine::try_acquire`] when the straight path did not decide, from scratch.
    #[cold]
    #[inline(never)]
    fn try_acquire_again(self, cost: u64) -> Result<Decision> {
        self.run(cost, true, None)
    }

    /// A decision of `cost`, committed or a peek, now or dated `at` (the caller checked the
    /// date), on the file this handle decides on now.
    #[inline(always)]
    fn run(self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let this = Self::on(self.site().follow()?);
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        this.decide(cost, commit, at)
    }

    /// Give back `units` of what `grant` admitted (at most its cost; see
    /// [`Site::refund_grant`]).
    fn refund_units(self, grant: &Decision, units: u64) -> Result<()> {
        self.site().refund_grant(grant, units, |maker, units| {
            Self::give_units(maker, grant, units)
        })
    }

    /// Admit `cost` units, waiting up to `timeout`: sleep each exact retry-after and try again
    /// ([`retry_until`]); a token bucket books instead.
    fn acquire_timeout(self, cost: u64, timeout: Duration) -> Result<Decision> {
        let this = Self::on(self.site().current()?);
        retry_until(
            timeout,
            || this.run(cost, false, None),
            || this.try_acquire(cost),
        )
    }
}
