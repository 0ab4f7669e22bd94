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
    limit.wrong_kind(reason)
}

/// Give back what `grant` admitted on `check`'s limit (and key): the roll-back of a composed
/// check whose grants a C caller holds.
pub fn give_back<C: Clock>(check: &Check<'_, C>, grant: &Decision) -> Result<()> {
    check.give_back(grant)
}
