//! Adaptive concurrency: crash-safe permits shared by every process, whose count moves between
//! a minimum and a maximum with the latency and outcome each release reports, pooled in the
//! file from every process.
//!
//! ```
//! # fn main() -> Result<(), shmlimit::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("db.shm");
//! use shmlimit::{AdaptiveConcurrency, Limiter, Outcome};
//!
//! let limiter = Limiter::builder()
//!     .limit("db", AdaptiveConcurrency::new(2, 64))
//!     .create_or_open(&path)?;
//! let db = limiter.adaptive_concurrency("db")?;
//! let a = db.try_acquire()?.expect("a free permit");
//! let b = db.try_acquire()?.expect("a free permit");
//! assert!(db.try_acquire()?.is_none()); // the limit starts at its minimum, 2
//! a.release(Outcome::Ok); // the time since its acquisition is a sample
//! drop(b); // released as `Outcome::Dropped`: no sample
//! let status = db.status()?;
//! assert_eq!((status.min, status.max, status.in_flight), (2, 64, 0));
//! # Ok(()) }
//! ```
//!
//! # Implementation details
//!
//! The permits are a concurrency limit's ([`crate::engine::permits`]): `max` entries of an
//! owner word and a stamp, claimed, released, taken over from dead holders and reclaimed by
//! the same single CASes, with the same futex waits. What this engine adds:
//!
//! - a grant is kept only while at most `floor(L)` entries are held ([`gate`]: claim, fence,
//!   count, give back), `L` the current limit from the limit word (`min` during the periodic
//!   re-measure of the RTT, 8 windows in every 1000, see [`crate::algo::adaptive`]);
//! - a release reports its outcome and its latency (measured by the guard, from its grant to
//!   its release, on the limit's clock) into the pooled accumulator, and the first release
//!   after a window closes it: the update of [`crate::algo::adaptive`] (Gradient2's latency
//!   gradient, AIMD on errors and timeouts), bounded per window, within `[min, max]`;
//! - a holder that dies reports nothing: its entry is reclaimed as a fixed permit's is (by the
//!   next acquirer that finds the limit full), and the limit learns nothing from it.

pub(crate) mod gate;
pub(crate) mod keyed;
#[cfg(test)]
mod keyed_loom_models;
#[cfg(test)]
mod loom_models;
pub(crate) mod per_key;

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::algo::adaptive::{Outcome, Rtt, Tuning};
use crate::clock::{Clock, MonotonicClock};
use crate::engine::permits::slot::{OwnerWord, Table};
use crate::engine::permits::{futex, Judge, Permit, Permits, Waited};
use crate::engine::site::Site;
use crate::error::Result;
use crate::file::layout::adaptive as words;
use crate::spec::{Adaptive as Spec, Algorithm};
use gate::{Admit, Words};

/// When this process last looked for dead holders at an adaptive limit (any limit), ns.
static LAST_SWEEP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// How often a process looks for dead holders at most (10 ms): the permits of a holder that
/// died come back within this (or [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK) for a
/// waiter) after the limit is reached.
const SWEEP_EVERY_NS: u64 = 10_000_000;

/// Whether this process may look for dead holders now (at most once per `SWEEP_EVERY_NS`,
/// whichever adaptive limit asks): the throttle of the slow path.
pub(super) fn sweep_due() -> bool {
    // The process's own monotonic clock, whatever clock the limit decides with.
    let now = MonotonicClock.now_ns();
    // Relaxed: a throttle; a race lets two sweeps through, which is harmless.
    let last = LAST_SWEEP.load(Ordering::Relaxed);
    now.saturating_sub(last) >= SWEEP_EVERY_NS
        && LAST_SWEEP
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// An adaptive concurrency limit's engine, on the limit's site.
pub(crate) struct Adaptive<'a, C: Clock>(pub(crate) &'a Site<C>);

site_view!(Adaptive);

/// A held permit of an adaptive concurrency limit. Release it with its outcome
/// ([`AdaptivePermit::release`]); the latency sample is the time from its grant to that call,
/// on the limit's clock. Dropped without a release, it reports [`Outcome::Dropped`]: the permit
/// comes back and the limit learns nothing.
#[must_use = "a permit is released as soon as it is dropped"]
pub struct AdaptivePermit<C: Clock = MonotonicClock> {
    permit: Option<Permit<C>>,
    granted_ns: u64,
}

impl<C: Clock> AdaptivePermit<C> {
    /// Release the permit and report how its request ended (measuring its latency now). False
    /// if the permit was no longer held (its lease expired and it was taken over, or the limit
    /// was reset): then nothing is reported.
    pub fn release(mut self, outcome: Outcome) -> bool {
        self.finish(outcome)
    }

    /// Release the permit reporting `outcome` with a latency the caller measured itself (for
    /// callers whose request started before the grant, or that time it their own way).
    pub fn release_measured(mut self, outcome: Outcome, latency: Duration) -> bool {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.finish_with(outcome, Some(ns))
    }

    /// `release(Outcome::Ok)`.
    pub fn ok(self) -> bool {
        self.release(Outcome::Ok)
    }

    /// The permit's id ([`crate::Permit::id`]); 0 for a permit that holds nothing.
    pub fn id(&self) -> u64 {
        self.permit.as_ref().map_or(0, Permit::id)
    }

    /// Whether the permit still holds its entry (see [`crate::Permit::is_held`]).
    pub fn is_held(&self) -> bool {
        self.permit.as_ref().is_some_and(Permit::is_held)
    }

    /// How long the permit has been held, ns (what a release now would report).
    pub fn held_ns(&self) -> u64 {
        self.permit.as_ref().map_or(0, |p| {
            p.site().clock().now_ns().saturating_sub(self.granted_ns)
        })
    }

    fn finish(&mut self, outcome: Outcome) -> bool {
        self.finish_with(outcome, None)
    }

    fn finish_with(&mut self, outcome: Outcome, measured_ns: Option<u64>) -> bool {
        let Some(permit) = self.permit.take() else {
            return false;
        };
        let site = permit.site().clone();
        let rtt_ns =
            measured_ns.unwrap_or_else(|| site.clock().now_ns().saturating_sub(self.granted_ns));
        if site.def().keyed.is_some() {
            // Reported into the key's words before the permit's bit is cleared (see `keyed`).
            return permit.release_sampled(Some((outcome, rtt_ns)));
        }
        let held = permit.release();
        if held {
            Adaptive(&site).report(outcome, rtt_ns);
        }
        held
    }
}

impl<C: Clock> Drop for AdaptivePermit<C> {
    fn drop(&mut self) {
        self.finish(Outcome::Dropped);
    }
}

impl<C: Clock> std::fmt::Debug for AdaptivePermit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptivePermit")
            .field("id", &self.id())
            .field("granted_ns", &self.granted_ns)
            .finish()
    }
}

/// What an adaptive limit is doing now ([`AdaptiveConcurrencyLimit::status`](crate::AdaptiveConcurrencyLimit::status)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveStatus {
    /// The current limit, fractional (the permits granted at once are its floor).
    pub limit: f64,
    /// Permits granted at once now: `floor(limit)` (at most `min` are granted during a
    /// re-measure of the RTT, see `remeasuring_at`).
    pub permits: u64,
    /// The smallest the limit may become.
    pub min: u64,
    /// The largest the limit may become.
    pub max: u64,
    /// The long (baseline) RTT the gradient compares with, µs; None before the first sample.
    pub rtt_long_us: Option<f64>,
    /// The mean RTT of the last closed window, µs; None before the first sample.
    pub rtt_recent_us: Option<f64>,
    /// Permits held now (dead holders not yet reclaimed included).
    pub in_flight: u64,
}

/// The update's parameters from the stored integers.
pub(crate) fn tuning(a: &Spec) -> Tuning {
    Tuning {
        min: a.min as f64,
        max: a.max as f64,
        initial: a.initial as f64,
        window_ms: a.window_ms,
        smoothing: a.smoothing as f64 / 65536.0,
        tolerance: a.tolerance as f64 / 4096.0,
        headroom: a.headroom as f64 / 65536.0,
        backoff: a.backoff as f64 / 65536.0,
    }
}

impl<C: Clock> Adaptive<'_, C> {
    fn spec(&self) -> Result<Spec> {
        match self.def().algorithm {
            Algorithm::AdaptiveConcurrency(a) if self.def().keyed.is_none() => Ok(a),
            _ => Err(self.misdirected()),
        }
    }

    fn words(&self) -> Words<'_, std::sync::atomic::AtomicU64> {
        Words {
            acc: self.control(words::ACC),
            limit: self.control(words::LIMIT),
            rtt: self.control(words::RTT),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock().now_ns() / 1_000_000
    }

    /// Take a permit if fewer than the current limit are held (taking over the entries of dead
    /// holders when the count says none is free), without waiting.
    pub(crate) fn try_acquire(&self) -> Result<Option<AdaptivePermit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self.0) {
            return Adaptive(this).try_acquire();
        }
        let t = tuning(&self.spec()?);
        let permits = Permits(self.0);
        let (table, lease_ns) = permits.flat_entries()?;
        let me = permits.own_identity()?;
        let entry = self.grab(&table, lease_ns, me, &t);
        Ok(self.guard(permits.permit_outcome(entry.is_some(), entry)))
    }

    /// [`Adaptive::try_acquire`], waiting up to `timeout` on the permits' futex (woken by every
    /// release and every window that raises the limit; at least every
    /// [`PERMIT_RECHECK`](crate::consts::PERMIT_RECHECK)).
    pub(crate) fn acquire_timeout(&self, timeout: Duration) -> Result<Option<AdaptivePermit<C>>> {
        let this = self.current()?;
        if !std::ptr::eq(this, self.0) {
            return Adaptive(this).acquire_timeout(timeout);
        }
        let t = tuning(&self.spec()?);
        let permits = Permits(self.0);
        let (table, lease_ns) = permits.flat_entries()?;
        let me = permits.own_identity()?;
        match permits.wait_for_permit(0, timeout, || {
            Ok(self.grab(&table, lease_ns, me, &t).map(Some))
        })? {
            Waited::Done(permit) => Ok(self.guard(permit)),
            Waited::Moved(next, left) => Adaptive(next).acquire_timeout(left),
        }
    }

    pub(super) fn guard(&self, permit: Option<Permit<C>>) -> Option<AdaptivePermit<C>> {
        permit.map(|p| AdaptivePermit {
            permit: Some(p),
            granted_ns: self.clock().now_ns(),
        })
    }

    /// One attempt: an entry within the current limit; when the count is at the limit, the
    /// entries of dead holders (or past their lease) are reclaimed and the grant tried once more.
    fn grab(
        &self,
        table: &Table<'_, std::sync::atomic::AtomicU64>,
        lease_ns: u64,
        me: u64,
        t: &Tuning,
    ) -> Option<(usize, OwnerWord)> {
        let start = Permits::<C>::scan_start(me, table.permits());
        let attempt = || {
            // Acquire: pairs with the AcqRel CAS of the window that set the limit. In a
            // re-measure of the RTT, `min` (see `algo::adaptive`).
            let word = self.control(words::LIMIT).load(Ordering::Acquire);
            // One clock read for the schedule and the claim's stamp (a read per grant is
            // most of a grant's cost).
            let now_ns = self.clock().now_ns();
            let allowed = t.allowed(word, now_ns / 1_000_000);
            // A given-back claim wakes nobody: a waiter it refused retries at the next
            // release, or within `PERMIT_RECHECK`.
            gate::admit(table, start, me, allowed as usize, || now_ns)
        };
        if let Admit::Granted(index, word) = attempt() {
            return Some((index, word));
        }
        // The slow path, as a fixed permit's: free what dead holders (or expired leases) hold;
        // at most once per `SWEEP_EVERY_NS` in this process, since at a limit below `max` every
        // refused attempt would otherwise read every holder's `/proc` entry.
        if !sweep_due() {
            return None;
        }
        let mut judge = Judge::new(me, lease_ns);
        let freed = table.sweep(
            0,
            None,
            true,
            |w, since| judge.reclaimable(w, since, self.clock()),
            || self.clock().now_ns(),
        );
        if freed.is_empty() {
            return None;
        }
        self.wake(freed.len() as i32);
        match attempt() {
            Admit::Granted(index, word) => Some((index, word)),
            _ => None,
        }
    }

    fn wake(&self, n: i32) {
        // An unkeyed limit's futex words (see `Permits::futex_words`).
        futex::announce_release(self.control(futex::SEQ), self.control(futex::WAITERS), n);
    }

    /// Pool one released request's outcome and latency, and close the window if it is over
    /// (a dropped request reports nothing, and closes nothing).
    pub(crate) fn report(&self, outcome: Outcome, rtt_ns: u64) {
        let Ok(spec) = self.spec() else {
            return;
        };
        if outcome == Outcome::Dropped {
            return;
        }
        let t = tuning(&spec);
        let words = self.words();
        gate::record(words.acc, outcome, rtt_ns.saturating_add(500) / 1000);
        // The request being released was in flight through the window: it counts.
        let closed = gate::close_window(&words, &t, || self.now_ms(), || self.in_flight() + 1);
        if let Some(closed) = closed {
            let more = closed.new.floor() as i64 - closed.old.floor() as i64;
            if more > 0 {
                self.wake(more.min(i32::MAX as i64) as i32);
            }
        }
    }

    /// Whether `now_ns` falls in a re-measure of the RTT.
    pub(crate) fn remeasuring_at(&self, now_ns: u64) -> Result<bool> {
        Ok(tuning(&self.spec()?).remeasuring(now_ns / 1_000_000))
    }

    /// Permits held now.
    pub(crate) fn in_flight(&self) -> u64 {
        match Permits(self.0).flat_entries() {
            Ok((table, _)) => gate::count_held(&table, usize::MAX) as u64,
            Err(_) => 0,
        }
    }

    /// The current limit, its range, the RTTs and the permits held.
    pub(crate) fn status(&self) -> Result<AdaptiveStatus> {
        let spec = self.spec()?;
        let t = tuning(&spec);
        let words = self.words();
        // Acquire: pairs with the AcqRel CASes of the window updates.
        let limit_word = words.limit.load(Ordering::Acquire);
        let rtt = Rtt::of(words.rtt.load(Ordering::Acquire));
        Ok(AdaptiveStatus {
            limit: t.limit_of(limit_word),
            permits: t.permits_of(limit_word),
            min: spec.min,
            max: spec.max,
            rtt_long_us: rtt.long_us,
            rtt_recent_us: rtt.short_us,
            in_flight: self.in_flight(),
        })
    }

    /// Report `outcome` for the permit `id` released by id (the C ABI's path, where the caller
    /// measured the latency): releases it, then pools the sample. False if this process did not
    /// hold it.
    pub(crate) fn release_id(&self, id: u64, outcome: Outcome, rtt_ns: u64) -> Result<bool> {
        self.spec()?;
        let released = Permits(self.0).release_permit(id)?;
        if released {
            self.report(outcome, rtt_ns);
        }
        Ok(released)
    }
}
