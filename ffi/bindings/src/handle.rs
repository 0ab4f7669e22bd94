//! What a binding's limit handle holds: the library's typed handle of the limit's kind, resolved
//! once.
//!
//! [`AnyHandle`] is one enum over the typed handles ([`TokenBucketLimit`], [`WindowLimit`],
//! ...), built by [`AnyHandle::of`] when a binding resolves a name (`shmlimit_limiter_limit` in
//! C, `Limiter.limit` in Python): the one dispatch on the limit's kind. Each operation is a
//! method here that matches the variant and calls the typed handle's method of the same name, so
//! a decision runs exactly the code a Rust caller's typed handle runs, with no test of the kind
//! at run time.
//!
//! A C or Python caller may call any operation on any limit; on a limit of another kind, the operation
//! fails as the untyped handle's did: the same [`Error`] (mostly [`Error::WrongKind`]) with the
//! same text, after the same checks of the arguments that came before the kind (a zero cost, a
//! date ahead of the clock, an invalid key). Those answers are the functions of [`wrong`],
//! out of line.
//!
//! # Implementation details
//!
//! A typed handle follows a file replaced at its path (see `shmlimit::Handle`) but never decides
//! on a limit of another kind: once the file that replaced its own holds a limit of that name
//! of another kind, its decisions fail with `Error::Io` (`SHMLIMIT_IO`), and the limit must be resolved again.

use std::time::Duration;

use shmlimit::{
    c_abi, AdaptiveConcurrencyLimit, ConcurrencyLimit, CountersLimit, Decision, Error,
    KeyedAdaptiveConcurrencyLimit, KeyedConcurrencyLimit, KeyedTokenBucketLimit, KeyedWindowLimit,
    Limit, LimitKind, Permit, PermitHolder, Rate, Reservation, Result, SlidingLogLimit,
    TokenBucketLimit, WindowLimit,
};

/// A limit resolved as its kind: the library's typed handle of that kind.
#[derive(Debug)]
pub enum AnyHandle {
    /// An unkeyed token bucket, split or not.
    TokenBucket(TokenBucketLimit),
    /// An unkeyed fixed or sliding window.
    Window(WindowLimit),
    /// A sliding log.
    SlidingLog(SlidingLogLimit),
    /// An unkeyed concurrency limit.
    Concurrency(ConcurrencyLimit),
    /// A keyed token bucket.
    KeyedTokenBucket(KeyedTokenBucketLimit),
    /// A keyed fixed or sliding window.
    KeyedWindow(KeyedWindowLimit),
    /// A keyed concurrency limit.
    KeyedConcurrency(KeyedConcurrencyLimit),
    /// An adaptive concurrency limit.
    AdaptiveConcurrency(AdaptiveConcurrencyLimit),
    /// A keyed adaptive concurrency limit.
    KeyedAdaptiveConcurrency(KeyedAdaptiveConcurrencyLimit),
    /// Keyed counters whose window comes with each call.
    Counters(CountersLimit),
}

use AnyHandle::*;

impl AnyHandle {
    /// The typed handle of `limit`, of the kind it has.
    ///
    /// # Errors
    ///
    /// None in practice: the kind asked for is the limit's own.
    pub fn of(limit: Limit) -> Result<AnyHandle> {
        Ok(match limit.kind() {
            LimitKind::TokenBucket => TokenBucket(limit.try_into()?),
            LimitKind::Window => Window(limit.try_into()?),
            LimitKind::SlidingLog => SlidingLog(limit.try_into()?),
            LimitKind::Concurrency => Concurrency(limit.try_into()?),
            LimitKind::KeyedTokenBucket => KeyedTokenBucket(limit.try_into()?),
            LimitKind::KeyedWindow => KeyedWindow(limit.try_into()?),
            LimitKind::KeyedConcurrency => KeyedConcurrency(limit.try_into()?),
            LimitKind::AdaptiveConcurrency => AdaptiveConcurrency(limit.try_into()?),
            LimitKind::KeyedAdaptiveConcurrency => KeyedAdaptiveConcurrency(limit.try_into()?),
            LimitKind::Counters => Counters(limit.try_into()?),
        })
    }

    /// The untyped inspection view (name, definition, statistics, policy, reset).
    pub fn as_limit(&self) -> &Limit {
        match self {
            TokenBucket(h) => h.as_limit(),
            Window(h) => h.as_limit(),
            SlidingLog(h) => h.as_limit(),
            Concurrency(h) => h.as_limit(),
            KeyedTokenBucket(h) => h.as_limit(),
            KeyedWindow(h) => h.as_limit(),
            KeyedConcurrency(h) => h.as_limit(),
            AdaptiveConcurrency(h) => h.as_limit(),
            KeyedAdaptiveConcurrency(h) => h.as_limit(),
            Counters(h) => h.as_limit(),
        }
    }

    /// The adaptive concurrency handle; another kind answers as [`wrong`] says.
    pub fn adaptive(&self) -> Result<&AdaptiveConcurrencyLimit> {
        match self {
            AdaptiveConcurrency(h) => Ok(h),
            _ => Err(wrong::adaptive(self.as_limit())),
        }
    }

    /// The keyed adaptive concurrency handle; another kind answers as [`wrong`] says.
    pub fn keyed_adaptive(&self) -> Result<&KeyedAdaptiveConcurrencyLimit> {
        match self {
            KeyedAdaptiveConcurrency(h) => Ok(h),
            _ => Err(wrong::keyed_adaptive(self.as_limit())),
        }
    }

    /// The counters handle (the `shmlimit_counters_*` calls, Python's `Counters`); another
    /// kind answers as [`wrong`] says.
    pub fn counters(&self) -> Result<&CountersLimit> {
        match self {
            Counters(h) => Ok(h),
            _ => Err(wrong::counters(self.as_limit())),
        }
    }

    // Unkeyed rate decisions: token bucket, window, sliding log.

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    #[inline(always)]
    pub fn try_acquire(&self, cost: u64) -> Result<Decision> {
        match self {
            TokenBucket(h) => h.try_acquire(cost),
            Window(h) => h.try_acquire(cost),
            SlidingLog(h) => h.try_acquire(cost),
            _ => Err(wrong::rate(self.as_limit(), cost)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    #[inline(always)]
    pub fn peek(&self, cost: u64) -> Result<Decision> {
        match self {
            TokenBucket(h) => h.peek(cost),
            Window(h) => h.peek(cost),
            SlidingLog(h) => h.peek(cost),
            _ => Err(wrong::rate(self.as_limit(), cost)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        match self {
            TokenBucket(h) => h.try_acquire_at(cost, now_ns),
            Window(h) => h.try_acquire_at(cost, now_ns),
            SlidingLog(h) => h.try_acquire_at(cost, now_ns),
            _ => {
                c_abi::check_date(self.as_limit(), now_ns)?;
                Err(wrong::rate(self.as_limit(), cost))
            }
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        match self {
            TokenBucket(h) => h.acquire_timeout(cost, timeout),
            Window(h) => h.acquire_timeout(cost, timeout),
            SlidingLog(h) => h.acquire_timeout(cost, timeout),
            _ => Err(wrong::acquire_timeout(self.as_limit(), cost)),
        }
    }

    /// Give back `units` of what `grant` admitted (`None`: all of it).
    pub fn refund(&self, grant: &Decision, units: Option<u64>) -> Result<()> {
        match (self, units) {
            (TokenBucket(h), None) => h.refund(grant),
            (TokenBucket(h), Some(units)) => h.refund_units(grant, units),
            (Window(h), None) => h.refund(grant),
            (Window(h), Some(units)) => h.refund_units(grant, units),
            (SlidingLog(h), None) => h.refund(grant),
            (SlidingLog(h), Some(units)) => h.refund_units(grant, units),
            _ => wrong::refund(self.as_limit(), grant, units),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn reserve(&self, cost: u64, max_delay: Duration) -> Result<Reservation> {
        match self {
            TokenBucket(h) => h.reserve(cost, max_delay),
            _ => Err(wrong::reserve(self.as_limit(), cost)),
        }
    }

    // Keyed rate decisions: keyed token bucket, keyed window.

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    #[inline(always)]
    pub fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        match self {
            KeyedTokenBucket(h) => h.try_acquire_key(key, cost),
            KeyedWindow(h) => h.try_acquire_key(key, cost),
            _ => Err(wrong::keyed_rate(self.as_limit(), cost)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    #[inline(always)]
    pub fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        match self {
            KeyedTokenBucket(h) => h.peek_key(key, cost),
            KeyedWindow(h) => h.peek_key(key, cost),
            _ => Err(wrong::keyed_rate(self.as_limit(), cost)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision> {
        match self {
            KeyedTokenBucket(h) => h.try_acquire_key_at(key, cost, now_ns),
            KeyedWindow(h) => h.try_acquire_key_at(key, cost, now_ns),
            _ => {
                c_abi::check_date(self.as_limit(), now_ns)?;
                Err(wrong::keyed_rate(self.as_limit(), cost))
            }
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
        match self {
            KeyedTokenBucket(h) => h.refund_key(key, grant),
            KeyedWindow(h) => h.refund_key(key, grant),
            _ => Err(wrong::keyed(self.as_limit())),
        }
    }

    // The key table of a keyed limit, of any kind.

    /// How many of the table's slots hold a key, and how many it has; `None` if not keyed.
    pub fn key_occupancy(&self) -> Option<(usize, usize)> {
        match self {
            KeyedTokenBucket(h) => Some(h.key_occupancy()),
            KeyedWindow(h) => Some(h.key_occupancy()),
            KeyedConcurrency(h) => Some(h.key_occupancy()),
            KeyedAdaptiveConcurrency(h) => Some(h.key_occupancy()),
            Counters(h) => Some(h.key_occupancy()),
            _ => None,
        }
    }

    /// How many idle keys were retired; `None` if not keyed.
    pub fn reclaim_idle_keys(&self) -> Option<usize> {
        match self {
            KeyedTokenBucket(h) => Some(h.reclaim_idle_keys()),
            KeyedWindow(h) => Some(h.reclaim_idle_keys()),
            KeyedConcurrency(h) => Some(h.reclaim_idle_keys()),
            KeyedAdaptiveConcurrency(h) => Some(h.reclaim_idle_keys()),
            Counters(h) => Some(h.reclaim_idle_keys()),
            _ => None,
        }
    }

    // Permits: concurrency, unkeyed or keyed.

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn try_acquire_permit(&self) -> Result<Option<Permit>> {
        match self {
            Concurrency(h) => h.try_acquire_permit(),
            _ => Err(wrong::permit(self.as_limit())),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn acquire_permit_timeout(&self, timeout: Duration) -> Result<Option<Permit>> {
        match self {
            Concurrency(h) => h.acquire_permit_timeout(timeout),
            _ => Err(wrong::permit(self.as_limit())),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn try_acquire_key_permit(&self, key: &[u8]) -> Result<Option<Permit>> {
        match self {
            KeyedConcurrency(h) => h.try_acquire_key_permit(key),
            _ => Err(wrong::key_permit(self.as_limit(), key)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn acquire_key_permit_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<Permit>> {
        match self {
            KeyedConcurrency(h) => h.acquire_key_permit_timeout(key, timeout),
            _ => Err(wrong::key_permit(self.as_limit(), key)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn key_permits_held(&self, key: &[u8]) -> Result<u32> {
        match self {
            KeyedConcurrency(h) => h.key_permits_held(key),
            _ => Err(wrong::key_permit(self.as_limit(), key)),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn release_permit(&self, id: u64) -> Result<bool> {
        match self {
            Concurrency(h) => h.release_permit(id),
            KeyedConcurrency(h) => h.release_permit(id),
            AdaptiveConcurrency(h) => h.release_permit(id),
            KeyedAdaptiveConcurrency(h) => h.release_permit(id),
            _ => Err(wrong::concurrency(self.as_limit())),
        }
    }

    /// Who holds the permits; `None` if not a concurrency limit (adaptive or not).
    pub fn permit_holders(&self) -> Option<Vec<PermitHolder>> {
        match self {
            Concurrency(h) => Some(h.permit_holders()),
            KeyedConcurrency(h) => Some(h.permit_holders()),
            AdaptiveConcurrency(h) => Some(h.permit_holders()),
            KeyedAdaptiveConcurrency(h) => Some(h.permit_holders()),
            _ => None,
        }
    }

    /// How many dead permits were freed; `None` if not a concurrency limit (adaptive or not).
    pub fn reclaim_dead_permits(&self) -> Option<usize> {
        match self {
            Concurrency(h) => Some(h.reclaim_dead_permits()),
            KeyedConcurrency(h) => Some(h.reclaim_dead_permits()),
            AdaptiveConcurrency(h) => Some(h.reclaim_dead_permits()),
            KeyedAdaptiveConcurrency(h) => Some(h.reclaim_dead_permits()),
            _ => None,
        }
    }

    // Live retunes.

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn set_rate(&self, rate: Rate) -> Result<()> {
        match self {
            TokenBucket(h) => h.set_rate(rate),
            Window(h) => h.set_rate(rate),
            KeyedTokenBucket(h) => h.set_rate(rate),
            KeyedWindow(h) => h.set_rate(rate),
            _ => Err(wrong::set_rate(self.as_limit())?),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()> {
        match self {
            TokenBucket(h) => h.set_token_bucket(capacity, rate),
            KeyedTokenBucket(h) => h.set_token_bucket(capacity, rate),
            _ => Err(c_abi::wrong_kind(self.as_limit(), "is not a token bucket")),
        }
    }

    /// The typed handle's method of the same name; another kind answers as [`wrong`] says.
    pub fn set_limit(&self, limit: u64) -> Result<()> {
        match self {
            Window(h) => h.set_limit(limit),
            KeyedWindow(h) => h.set_limit(limit),
            _ => Err(c_abi::wrong_kind(
                self.as_limit(),
                "is not a fixed or sliding window",
            )),
        }
    }
}

/// What an operation on a limit of another kind fails with: what the untyped handle's
/// operation answered, checking first what it checked first. The texts are the library's
/// [`Error::WrongKind`] reasons, kept byte for byte (C, Python and Node callers read them), but
/// for the kinds with calls of their own ([`own_calls`](wrong::own_calls)).
pub mod wrong {
    use super::{c_abi, Decision, Error, Limit, LimitKind, Result};

    /// What a limit of a kind with calls of its own answers to an operation it does not have:
    /// its kind, and the calls to use instead, as every binding names them (C, Python and Node
    /// callers read the text after the name of the C function that refused; the C function
    /// to use is in parentheses, Python's and Node's methods are named after the same word:
    /// `adaptive`, `counters`). `None` for the other kinds, whose answers name the call of
    /// their own that does what was asked (`try_acquire_key`, `try_acquire_permit`, ...).
    ///
    /// An unkeyed adaptive limit answers a refund as a concurrency limit does (drop the
    /// permit), and the keyed ones a reservation as keyed limits do: those answers hold for
    /// them too.
    pub fn own_calls(kind: LimitKind) -> Option<&'static str> {
        Some(match kind {
            LimitKind::AdaptiveConcurrency => {
                "is an adaptive concurrency limit: use its adaptive calls, without a key \
                 (shmlimit_adaptive_acquire)"
            }
            LimitKind::KeyedAdaptiveConcurrency => {
                "is a keyed adaptive concurrency limit: use its adaptive calls, with a key \
                 (shmlimit_keyed_adaptive_acquire)"
            }
            LimitKind::Counters => "is a counters limit: use its counters calls",
            LimitKind::TokenBucket
            | LimitKind::Window
            | LimitKind::SlidingLog
            | LimitKind::Concurrency
            | LimitKind::KeyedTokenBucket
            | LimitKind::KeyedWindow
            | LimitKind::KeyedConcurrency => return None,
        })
    }

    /// `limit`'s answer if its kind has calls of its own ([`own_calls`]).
    fn own(limit: &Limit) -> Option<Error> {
        own_calls(limit.kind()).map(|reason| c_abi::wrong_kind(limit, reason))
    }

    /// An unkeyed rate decision (`shmlimit_acquire`, `_peek`, `_acquire_at` after its date
    /// check) on a keyed or concurrency limit.
    #[cold]
    #[inline(never)]
    pub fn rate(limit: &Limit, cost: u64) -> Error {
        if cost == 0 {
            return Error::ZeroCost;
        }
        if let Some(own) = own(limit) {
            own
        } else if limit.kind().is_keyed() {
            c_abi::wrong_kind(limit, "is keyed: use try_acquire_key")
        } else {
            c_abi::wrong_kind(limit, "is a concurrency limit: use try_acquire_permit")
        }
    }

    /// A keyed rate decision (`shmlimit_acquire_key`, `_peek_key`, `_acquire_key_at` after its
    /// date check) on an unkeyed or keyed concurrency limit.
    #[cold]
    #[inline(never)]
    pub fn keyed_rate(limit: &Limit, cost: u64) -> Error {
        if cost == 0 {
            return Error::ZeroCost;
        }
        keyed(limit)
    }

    /// An adaptive concurrency operation on a limit of another kind.
    #[cold]
    #[inline(never)]
    pub fn adaptive(limit: &Limit) -> Error {
        own(limit)
            .unwrap_or_else(|| c_abi::wrong_kind(limit, "is not an adaptive concurrency limit"))
    }

    /// A keyed adaptive concurrency operation on a limit of another kind.
    #[cold]
    #[inline(never)]
    pub fn keyed_adaptive(limit: &Limit) -> Error {
        own(limit).unwrap_or_else(|| {
            c_abi::wrong_kind(limit, "is not a keyed adaptive concurrency limit")
        })
    }

    /// A counters operation on a limit of another kind.
    #[cold]
    #[inline(never)]
    pub fn counters(limit: &Limit) -> Error {
        own(limit).unwrap_or_else(|| {
            c_abi::wrong_kind(
                limit,
                "is not a counters limit: the counters calls need a limit defined as counters",
            )
        })
    }

    /// A keyed rate operation on an unkeyed or keyed concurrency limit.
    #[cold]
    #[inline(never)]
    pub fn keyed(limit: &Limit) -> Error {
        if let Some(own) = own(limit) {
            own
        } else if limit.kind() == LimitKind::KeyedConcurrency {
            c_abi::wrong_kind(
                limit,
                "is a keyed concurrency limit: use try_acquire_key_permit",
            )
        } else {
            c_abi::wrong_kind(limit, "is not keyed: use try_acquire")
        }
    }

    /// A refund (`shmlimit_refund`, `_refund_units`) on a keyed or concurrency limit. An
    /// unkeyed concurrency limit makes no grants: a grant another limit made is refused as
    /// such, and one that took nothing (denied, or no units) is given back as nothing.
    #[cold]
    #[inline(never)]
    pub fn refund(limit: &Limit, grant: &Decision, units: Option<u64>) -> Result<()> {
        if limit.kind().is_keyed() {
            return Err(
                own(limit).unwrap_or_else(|| c_abi::wrong_kind(limit, "is keyed: use refund_key"))
            );
        }
        let (_, origin) = c_abi::grant_record(grant);
        if origin != 0 {
            return Err(c_abi::wrong_kind(
                limit,
                "did not make this grant: refund it on the limit that did",
            ));
        }
        if !grant.is_allowed() || units.unwrap_or(grant.cost()).min(grant.cost()) == 0 {
            return Ok(());
        }
        Err(c_abi::wrong_kind(
            limit,
            "is a concurrency limit: drop the permit",
        ))
    }

    /// `shmlimit_acquire_timeout` on a keyed or concurrency limit.
    #[cold]
    #[inline(never)]
    pub fn acquire_timeout(limit: &Limit, cost: u64) -> Error {
        match limit.kind() {
            // A keyed bucket books (`reserve`), a keyed window peeks first (`shmlimit_peek`).
            LimitKind::KeyedTokenBucket => reserve(limit, cost),
            LimitKind::KeyedWindow => rate(limit, cost),
            _ => own(limit).unwrap_or_else(|| {
                c_abi::wrong_kind(limit, "is a concurrency limit: use acquire_permit_timeout")
            }),
        }
    }

    /// `shmlimit_reserve` on a limit that is not an unkeyed token bucket.
    #[cold]
    #[inline(never)]
    pub fn reserve(limit: &Limit, cost: u64) -> Error {
        if cost == 0 {
            return Error::ZeroCost;
        }
        if limit.kind().is_keyed() {
            return c_abi::wrong_kind(
                limit,
                "is keyed: reservations are for unkeyed token buckets",
            );
        }
        own(limit).unwrap_or_else(|| {
            c_abi::wrong_kind(limit, "is not a token bucket: use acquire_timeout")
        })
    }

    /// A permit of an unkeyed concurrency limit asked of another kind.
    #[cold]
    #[inline(never)]
    pub fn permit(limit: &Limit) -> Error {
        if limit.kind() == LimitKind::KeyedConcurrency {
            c_abi::wrong_kind(limit, "is keyed: use try_acquire_key_permit")
        } else {
            concurrency(limit)
        }
    }

    /// A key's permits asked of a limit that is not a keyed concurrency limit (the key is
    /// checked first).
    #[cold]
    #[inline(never)]
    pub fn key_permit(limit: &Limit, key: &[u8]) -> Error {
        if let Err(e) = c_abi::key_tag(limit, key) {
            return e;
        }
        if limit.kind() == LimitKind::Concurrency {
            c_abi::wrong_kind(limit, "is not keyed: use try_acquire_permit")
        } else {
            concurrency(limit)
        }
    }

    /// A permit operation on a limit that is not a concurrency limit.
    #[cold]
    #[inline(never)]
    pub fn concurrency(limit: &Limit) -> Error {
        own(limit).unwrap_or_else(|| c_abi::wrong_kind(limit, "is not a concurrency limit"))
    }

    /// `shmlimit_limit_set_rate` on a sliding log or a concurrency limit (its live parameters
    /// are read first, and may be damaged).
    #[cold]
    #[inline(never)]
    pub fn set_rate(limit: &Limit) -> Result<Error> {
        limit.live_algorithm()?;
        Ok(c_abi::wrong_kind(limit, "has no rate to change"))
    }
}
