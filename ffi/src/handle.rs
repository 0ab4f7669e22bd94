//! What a C limit handle holds: the library's typed handle of the limit's kind, resolved once
//! by `shmlimit_limiter_limit`. The dispatch and its answers to an operation of another kind are
//! shared with the other bindings (`shmlimit_bindings::handle`).

pub(crate) use shmlimit_bindings::handle::{wrong, AnyHandle};
