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
use crate::engine::keyed::Keyed;

use crate::{Decision, Error, Limit, Result};

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
    limit.site().wrong_kind(reason)
}

/// Give back what `grant` admitted on `check`'s limit (and key): the roll-back of a composed
/// check whose grants a C caller holds.
pub fn give_back<C: Clock>(check: &Check<'_, C>, grant: &Decision) -> Result<()> {
    check.give_back(grant)
}

/// Refuse a caller's date as a dated decision does (ahead of `limit`'s clock by more than
/// [`DATE_TOLERANCE`](crate::consts::DATE_TOLERANCE), or beyond
/// [`MAX_DATE_NS`](crate::consts::MAX_DATE_NS)): what a dated call on a limit of another kind
/// answers before its kind, as the untyped handle did.
pub fn check_date<C: Clock>(limit: &Limit<C>, now_ns: u64) -> Result<()> {
    limit.site().check_date(now_ns)
}

/// The tag the file's key tables know `key` by (the keyed hash of its bytes under the file's
/// seed, the same for every limit of the file, whatever its kind), or
/// [`Error::InvalidKey`](crate::Error::InvalidKey).
pub fn key_tag<C: Clock>(limit: &Limit<C>, key: &[u8]) -> Result<u64> {
    Keyed(limit.site()).key_tag(key)
}

/// A check on an untyped handle: the C ABI resolves limits by name alone and reports a wrong
/// kind with its own status codes when the check runs.
pub fn check<'a, C: Clock>(limit: &'a Limit<C>, key: Option<&'a [u8]>, cost: u64) -> Check<'a, C> {
    Check::untyped(limit, key, cost)
}
