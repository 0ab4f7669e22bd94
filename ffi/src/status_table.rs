//! The status codes as every language names them: one row per code of [`shmlimit_status`], the
//! single source of the language bindings' error classes.
//!
//! The C header's enum comes from [`shmlimit_status`] (cbindgen); the Node package's error
//! classes, their typings and its ES module's names are generated from [`status_table`] (a
//! drift test in `tests/ffi_node.rs` fails when a generated file disagrees with it). A new
//! error kind gets a code in [`shmlimit_status`] and its row (C name, class, description) in
//! the one table of the codes, `shmlimit_bindings::status`, which the Python package reads too.

use crate::status::shmlimit_status::{self, *};

/// One status code as the bindings name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRow {
    /// The code.
    pub status: shmlimit_status,
    /// Its C name, as `err.code` reports it (`"SHMLIMIT_WRONG_KIND"`).
    pub name: String,
    /// The error class a binding raises for it (`"WrongKindError"`).
    pub class: &'static str,
    /// Its static description, as `shmlimit_strerror` gives it.
    pub description: &'static str,
}

impl shmlimit_status {
    /// The error class the language bindings raise for this code (`SHMLIMIT_OK` has none:
    /// `"Ok"`), from the one table of the codes (`shmlimit_bindings::status`, which the
    /// Python package reads too; `status::tests` ties every variant to a row of it).
    pub fn class_name(self) -> &'static str {
        shmlimit_bindings::status::status(self as i32).map_or("InternalError", |s| s.class)
    }
}

/// Every failure code (all of [`shmlimit_status`] but `SHMLIMIT_OK`), in the order of their
/// values, with its names and description.
pub fn status_table() -> Vec<StatusRow> {
    shmlimit_status::ALL
        .iter()
        .filter(|s| **s != SHMLIMIT_OK)
        .map(|&status| {
            let text = status.description();
            StatusRow {
                status,
                // The variant's name is the C name (cbindgen writes it so).
                name: format!("{status:?}"),
                class: status.class_name(),
                description: text.to_str().unwrap_or(""),
            }
        })
        .collect()
}

/// The errors the bindings raise that are not failures of a C call, as rows without a code:
/// `(name, class, description)`. A binding gives each a status of its own (Node: -1 for a
/// closed handle, `'PERMIT_UNAVAILABLE'`).
pub const BINDING_ERRORS: [(&str, &str, &str); 2] = [
    ("SHMLIMIT_CLOSED", "ClosedError", "the handle is closed"),
    (
        "SHMLIMIT_PERMIT_UNAVAILABLE",
        "PermitUnavailableError",
        "no permit came within the timeout",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_a_distinct_class_and_its_c_name() {
        let rows = status_table();
        assert_eq!(rows.len(), shmlimit_status::ALL.len() - 1);
        for (i, row) in rows.iter().enumerate() {
            assert!(row.name.starts_with("SHMLIMIT_"), "{row:?}");
            assert!(row.class.ends_with("Error"), "{row:?}");
            assert!(!row.description.is_empty() && !row.description.contains('\0'));
            for other in &rows[..i] {
                assert_ne!(row.class, other.class);
                assert!(
                    other.status as i32 <= row.status as i32,
                    "in order of value"
                );
            }
        }
        assert_eq!(rows[0].name, "SHMLIMIT_NULL_POINTER");
        assert_eq!(SHMLIMIT_WRONG_KIND.class_name(), "WrongKindError");
    }
}
