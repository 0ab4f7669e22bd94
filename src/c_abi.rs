//! What the C ABI needs beyond the public API.
//!
//! The C ABI is its own package (`ffi/`, library `libshmlimit.so` / `libshmlimit.a`) built on
//! this crate's public API. A C decision is a plain struct, so the C ABI must take a
//! [`Decision`]'s grant apart into words and rebuild it for a refund, and it reports a call on the
//! wrong kind of limit with the library's own error. Those few operations are here, hidden from
//! the documentation: they are not part of the Rust API and carry no stability promise (Rust
//! code refunds a [`Decision`] it holds).

use crate::clock::Clock;
use crate::compose::{Acquire, Check};
use std::time::Duration;

use crate::{Decision, Error, Limit, Permit, Rate, Reservation, Result};

/// What a refund needs to know about a grant, as two words (the cost admitted and where it was
/// recorded), and the limit that made it (0 where there is no grant or it is unknown).
pub fn grant_record(decision: &Decision) -> ([u64; 2], u64) {
    (decision.grant_record(), decision.origin)
}

/// A grant rebuilt from [`grant_record`]'s words and origin, and whether it was shadow-denied
/// (admitted, taking nothing: its refund still counts), good for a refund only.
pub fn from_grant_record(record: [u64; 2], origin: u64, shadow_denied: bool) -> Decision {
    let mut grant = Decision::from_grant_record(record);
    grant.origin = origin;
    grant.shadow_denied = shadow_denied;
    grant
}

/// A decision as its caller was told it (allowed or not, remaining, retry-after, reset), for
/// rendering headers from a C decision; it grants nothing.
pub fn view(allowed: bool, remaining: u64, retry_after_ns: u64, reset_after_ns: u64) -> Decision {
    let view = if allowed {
        Decision::allowed(remaining, 1)
    } else {
        Decision::denied(retry_after_ns, remaining, 1)
    };
    view.resetting(reset_after_ns)
}

/// The error for an operation that does not apply to `limit`'s kind ("this limit {reason}").
pub fn wrong_kind<C: Clock>(limit: &Limit<C>, reason: &str) -> Error {
    limit.wrong_kind(reason)
}

/// Give back what `grant` admitted on `check`'s limit (and key): the roll-back of a composed
/// check whose grants a C caller holds.
pub fn give_back<C: Clock>(check: &Check<'_, C>, grant: &Decision) -> Result<()> {
    check.give_back(grant)
}

/// A check on an untyped handle: the C ABI resolves limits by name alone and reports a wrong
/// kind with its own status codes when the check runs.
pub fn check<'a, C: Clock>(limit: &'a Limit<C>, key: Option<&'a [u8]>, cost: u64) -> Check<'a, C> {
    Check::untyped(limit, key, cost)
}

/// The decisions and retunes of every kind on the untyped handle, each refusing a limit of
/// another kind at run time with [`Error::WrongKind`]: what the C ABI (which resolves limits by
/// name alone, and answers a wrong kind with a status code) calls. Rust code
/// uses the typed handles ([`crate::TokenBucketLimit`] and the others), which have exactly the
/// operations of their kind. Bring it into scope with `use shmlimit::c_abi::Untyped as _;`.
#[allow(missing_docs)]
pub trait Untyped<C: Clock> {
    fn try_acquire(&self, cost: u64) -> Result<Decision>;
    fn peek(&self, cost: u64) -> Result<Decision>;
    fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision>;
    fn refund(&self, grant: &Decision) -> Result<()>;
    fn refund_units(&self, grant: &Decision, units: u64) -> Result<()>;
    fn reserve(&self, n: u64, max_delay: Duration) -> Result<Reservation<C>>;
    fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision>;
    fn set_rate(&self, rate: Rate) -> Result<()>;
    fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()>;
    fn set_limit(&self, limit: u64) -> Result<()>;
    fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> Result<()>;
    fn set_fleet_deadline(&self, deadline_ns: u64) -> Result<()>;
    fn end_fleet_management(&self) -> Result<()>;
    fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision>;
    fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision>;
    fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision>;
    fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()>;
    fn key_tag(&self, key: &[u8]) -> Result<u64>;
    fn try_acquire_permit(&self) -> Result<Option<Permit<C>>>;
    fn acquire_permit_timeout(&self, timeout: Duration) -> Result<Option<Permit<C>>>;
    fn try_acquire_key_permit(&self, key: &[u8]) -> Result<Option<Permit<C>>>;
    fn acquire_key_permit_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<Permit<C>>>;
    fn key_permits_held(&self, key: &[u8]) -> Result<u32>;
    fn release_permit(&self, id: u64) -> Result<bool>;
}

impl<C: Clock> Untyped<C> for Limit<C> {
    #[inline(always)]
    fn try_acquire(&self, cost: u64) -> Result<Decision> {
        Limit::try_acquire(self, cost)
    }
    #[inline(always)]
    fn peek(&self, cost: u64) -> Result<Decision> {
        Limit::peek(self, cost)
    }
    fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        Limit::try_acquire_at(self, cost, now_ns)
    }
    fn refund(&self, grant: &Decision) -> Result<()> {
        Limit::refund(self, grant)
    }
    fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
        Limit::refund_units(self, grant, units)
    }
    fn reserve(&self, n: u64, max_delay: Duration) -> Result<Reservation<C>> {
        Limit::reserve(self, n, max_delay)
    }
    fn acquire_timeout(&self, cost: u64, timeout: Duration) -> Result<Decision> {
        Limit::acquire_timeout(self, cost, timeout)
    }
    fn set_rate(&self, rate: Rate) -> Result<()> {
        Limit::set_rate(self, rate)
    }
    fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()> {
        Limit::set_token_bucket(self, capacity, rate)
    }
    fn set_limit(&self, limit: u64) -> Result<()> {
        Limit::set_limit(self, limit)
    }
    fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> Result<()> {
        Limit::fleet_manage(self, fence_capacity, fence_rate)
    }
    fn set_fleet_deadline(&self, deadline_ns: u64) -> Result<()> {
        Limit::set_fleet_deadline(self, deadline_ns)
    }
    fn end_fleet_management(&self) -> Result<()> {
        Limit::end_fleet_management(self)
    }
    #[inline(always)]
    fn try_acquire_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        Limit::try_acquire_key(self, key, cost)
    }
    #[inline(always)]
    fn peek_key(&self, key: &[u8], cost: u64) -> Result<Decision> {
        Limit::peek_key(self, key, cost)
    }
    fn try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Result<Decision> {
        Limit::try_acquire_key_at(self, key, cost, now_ns)
    }
    fn refund_key(&self, key: &[u8], grant: &Decision) -> Result<()> {
        Limit::refund_key(self, key, grant)
    }
    fn key_tag(&self, key: &[u8]) -> Result<u64> {
        Limit::key_tag(self, key)
    }
    fn try_acquire_permit(&self) -> Result<Option<Permit<C>>> {
        Limit::try_acquire_permit(self)
    }
    fn acquire_permit_timeout(&self, timeout: Duration) -> Result<Option<Permit<C>>> {
        Limit::acquire_permit_timeout(self, timeout)
    }
    fn try_acquire_key_permit(&self, key: &[u8]) -> Result<Option<Permit<C>>> {
        Limit::try_acquire_key_permit(self, key)
    }
    fn acquire_key_permit_timeout(
        &self,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<Permit<C>>> {
        Limit::acquire_key_permit_timeout(self, key, timeout)
    }
    fn key_permits_held(&self, key: &[u8]) -> Result<u32> {
        Limit::key_permits_held(self, key)
    }
    fn release_permit(&self, id: u64) -> Result<bool> {
        Limit::release_permit(self, id)
    }
}
