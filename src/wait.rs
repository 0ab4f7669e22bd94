//! Waiting for a grant with a deadline: reservations on token buckets, exact sleeps on windows
//! and logs, futex waits on concurrency limits.
//!
//! ```
//! # fn main() -> Result<(), shmlimit::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("wait.shm");
//! use std::time::Duration;
//! use shmlimit::{Limiter, TokenBucket};
//!
//! let limiter = Limiter::builder()
//!     .limit("api", TokenBucket::per_second(10).burst(1))
//!     .create_or_open(&path)?;
//! let api = limiter.token_bucket("api")?;
//! assert!(api.try_acquire(1)?.is_allowed()); // the burst is used
//! // The next token is 100 ms away: booked now, served in booking order.
//! let r = api.reserve(1, Duration::from_secs(1))?;
//! assert!(r.is_granted());
//! assert!(r.delay() <= Duration::from_millis(100));
//! // A booking that would have to wait longer than it may is refused and takes nothing.
//! let far = api.reserve(1, Duration::ZERO)?;
//! assert!(far.is_refused() && far.delay() > Duration::from_millis(100));
//! let decision = r.wait(); // sleeps the delay
//! assert!(decision.is_allowed());
//! # Ok(()) }
//! ```
//!
//! # Implementation details
//!
//! **Reservations** (token bucket only). With the GCRA state `tat`, emission interval `T` and
//! tolerance `tau = B T` (see the token bucket's module), a reservation of `n` tokens allowed to
//! wait up to `max_delay` computes, in one CAS loop on the state word (`Gcra::book`, on the tagged
//! word `engine::bucket::book`; a cancel is `engine::bucket::unbook`):
//!
//! ```text
//! new_tat = max(tat, now) + n T
//! granted iff new_tat - now <= tau + max_delay        (then store new_tat)
//! delay   =   max(0, new_tat - now - tau)             (the caller proceeds at now + delay)
//! ```
//!
//! A refusal writes nothing. Every later booking starts from a `tat` at least as late, so the
//! times at which reservations may proceed (`new_tat - tau`) increase with the order in which
//! they were booked, across all processes: callers are served first come, first served, each
//! sleeping exactly its own delay — no polling, no thundering herd, no one woken to find the
//! budget gone. The bucket's bound is kept: a reservation is an admission dated at the time it
//! proceeds, and those dates conform to the same GCRA as immediate admissions.
//!
//! **Cancel.** [`Reservation::cancel`] moves the state back by `n T` with one CAS from exactly the
//! word the reservation stored. If anything was booked or admitted after it, the word differs and
//! nothing is given back: later reservations computed their delays from the booked tokens, and
//! handing those tokens out again would let them and the new takers exceed the bound. The
//! cancelled slot then simply goes unused (the limiter is stricter, never looser).
//!
//! **Windows and the sliding log** have no future to book into: [`TokenBucketLimit::acquire_timeout`](crate::TokenBucketLimit::acquire_timeout)
//! peeks, sleeps the exact retry-after the algorithm computed, and tries again, until the grant
//! or until the next retry-after would end past the deadline (then it refuses at once instead of
//! sleeping in vain). Each round sleeps at least the computed retry-after: never a busy loop.
//!
//! **Concurrency limits** wait for a release on a futex: see
//! [`ConcurrencyLimit::acquire_permit_timeout`](crate::ConcurrencyLimit::acquire_permit_timeout).
//!
//! # Deadlines bound queueing
//!
//! A waiter states how long its work may queue (`max_delay`, `timeout`), and the limiter turns a
//! burst into one of two outcomes, decided at once: a grant after a delay that fits the deadline,
//! or a clear rejection (with the delay it would have needed) that consumed nothing. For a token
//! bucket of rate `r` and burst `B`, at most `B + r D` requests can be granted with delays of at
//! most `D`: whatever the size of the burst, no more than that are ever queued, and the rest are
//! refused immediately instead of piling up behind them. The queue is not a list anywhere — it is
//! the distance the GCRA state runs ahead of the clock, bounded by `tau + D`. For windows the
//! bound is the limit per window; for concurrency limits each waiter leaves at its deadline. A
//! server that sets the deadline to what its caller will wait (for example the time left of a
//! request's timeout) never does work nobody waits for, and never holds more than `B + r D`
//! requests parked.

use std::time::{Duration, Instant};

use crate::algo::Decision;
use crate::error::Result;

/// Wait for a grant up to `timeout` on a limit with no future to book into (a window, a
/// sliding log, a split bucket): `peek`, sleep the exact retry-after, and `take` (a committed
/// decision), until granted or until the next retry-after would end past the deadline (then
/// one committed decision refuses at once, counted once). The returned decision is allowed,
/// or denied with nothing consumed.
pub(crate) fn retry_until(
    timeout: Duration,
    peek: impl Fn() -> Result<Decision>,
    take: impl Fn() -> Result<Decision>,
) -> Result<Decision> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let seen = peek()?;
        if seen.is_allowed() {
            let d = take()?;
            if d.is_allowed() {
                return Ok(d);
            }
            // Another process took it between the peek and the try: wait as it says.
            if !sleep_within(d.retry_after(), deadline) {
                return Ok(d);
            }
            continue;
        }
        if !sleep_within(seen.retry_after(), deadline) {
            // The grant cannot come before the deadline: refuse now (counted once).
            return take();
        }
    }
}

/// Sleep `d` if that ends before `deadline`; false (without sleeping) if it would not.
fn sleep_within(d: Duration, deadline: Option<Instant>) -> bool {
    let wake = Instant::now().checked_add(d);
    match (wake, deadline) {
        (Some(w), Some(dl)) if w > dl => false,
        (None, Some(_)) => false,
        _ => {
            std::thread::sleep(d);
            true
        }
    }
}
