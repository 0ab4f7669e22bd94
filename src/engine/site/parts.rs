//! What a site is made of: its limit's definition, its words in the mapping (the control line and
//! the area after it, as the engines take them), the errors it reports in its own name, and
//! the bounds of a caller's date.

use std::sync::atomic::AtomicU64;

use crate::algo::Fault;
use crate::clock::Clock;
use crate::error::Error;
use crate::file::Mapped;
use crate::spec::{Algorithm, LimitDef};

use crate::engine::Params;

use super::Site;

impl<C: Clock> Site<C> {
    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.def().name
    }

    /// Its definition as stored in the file.
    pub fn def(&self) -> &LimitDef {
        &self.shared.mapped.defs[self.index]
    }

    /// Its algorithm and parameters as defined at creation.
    pub fn algorithm(&self) -> &Algorithm {
        &self.def().algorithm
    }

    /// The clock this handle decides with.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Word `i` of the limit's control line.
    #[inline(always)]
    pub(crate) fn control(&self, i: usize) -> &AtomicU64 {
        self.control.word(i)
    }

    /// The limit's control line, as the engines take it.
    #[inline(always)]
    pub(crate) fn control_line(&self) -> &[AtomicU64] {
        self.control.slice()
    }

    /// The words after the control line: log entries, permits, or the key table.
    #[inline(always)]
    pub(crate) fn area(&self) -> &[AtomicU64] {
        self.area.slice()
    }

    /// The shared file this limit lives in.
    pub(crate) fn mapped(&self) -> &Mapped {
        &self.shared.mapped
    }

    /// In-process parameters.
    pub(crate) fn params(&self) -> Params {
        self.params
    }

    #[cold]
    pub(crate) fn fault(&self, fault: Fault) -> Error {
        match fault {
            Fault::Corrupt => Error::CorruptState {
                limit: self.name().to_owned(),
            },
            Fault::ClockRange(ns) => Error::ClockOutOfRange(ns),
        }
    }

    /// A call this limit's kind has, refused by how the limit is made or where it runs (a
    /// split bucket's reservation, a deadline for a bucket the fleet does not manage, a live
    /// retune of a kind that has none, a keyed table on a target without a 16-byte CAS): the
    /// kind's own answer, in [`Error::WrongKind`]'s terms.
    #[cold]
    pub(crate) fn refused(&self, reason: &str) -> Error {
        Error::WrongKind {
            limit: self.name().to_owned(),
            reason: format!("this limit {reason}"),
        }
    }

    /// An engine given a limit of another kind: unreachable through the typed handles (whose
    /// kind is their type, checked at resolution and at every replacement) and the binding
    /// dispatch (`handle::dispatch`, which checks it once per call); an error, never a
    /// panic, should a caller inside the crate get it wrong.
    #[cold]
    pub(crate) fn misdirected(&self) -> Error {
        Error::WrongKind {
            limit: self.name().to_owned(),
            reason: format!(
                "this limit is {} {}: the call is another kind's",
                self.kind().article(),
                self.kind()
            ),
        }
    }

    /// A call the limit's kind does not have: made by resolution and the binding dispatch
    /// only (`handle::dispatch`), which check the kind once.
    #[cold]
    pub(crate) fn wrong_kind(&self, reason: &str) -> Error {
        Error::WrongKind {
            limit: self.name().to_owned(),
            reason: format!("this limit {reason}"),
        }
    }
}
