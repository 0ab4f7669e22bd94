//! `shmlimit.Decision`: the outcome of one decision, as the caller was told it, with the grant
//! record a refund needs.
//!
//! It holds what `shmlimit_decision` holds in C (allowed, remaining, retry-after, reset, and
//! the grant's two words and origin), not a `shmlimit::Decision`: a decision made by a guarded
//! limit's policy, one built in Python (`Decision(False, retry_after_ns=5)`) and one unpickled in
//! another process are decisions too, and a refund rebuilds the grant from the record
//! (`shmlimit::c_abi::from_grant_record`), as the C ABI does.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

use crate::errors::u64_arg;

/// The outcome of one decision; true in a boolean context when allowed.
///
/// A granted decision carries its grant record: Limit.refund(decision) gives it back.
#[pyclass(frozen, skip_from_py_object, module = "shmlimit", name = "Decision")]
#[derive(Clone, Copy, Default)]
pub(crate) struct Decision {
    pub(crate) allowed: bool,
    pub(crate) shadow_denied: bool,
    /// Made by a guarded limit's policy while its file was unavailable.
    pub(crate) unavailable: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_ns: u64,
    pub(crate) reset_after_ns: u64,
    /// `shmlimit::c_abi::grant_record`'s words: zero for a denial or a peek.
    pub(crate) grant: [u64; 2],
    /// The limit that made the grant (0: none, or unknown).
    pub(crate) origin: u64,
}

/// Bytes of `Decision._raw`: eight little-endian words.
const RAW_LEN: usize = 64;

impl From<shmlimit::Decision> for Decision {
    fn from(d: shmlimit::Decision) -> Self {
        let (grant, origin) = shmlimit::c_abi::grant_record(&d);
        Decision {
            allowed: d.is_allowed(),
            shadow_denied: d.is_shadow_denied(),
            unavailable: false,
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_ns(),
            reset_after_ns: d.reset_after_ns(),
            // The limit that made the grant, only where there is one.
            origin: if grant == [0; 2] { 0 } else { origin },
            grant,
        }
    }
}

impl Decision {
    /// The decision with no grant to give back (a peek, or a grant already rolled back).
    pub(crate) fn without_grant(mut self) -> Self {
        self.grant = [0; 2];
        self.origin = 0;
        self
    }

    /// What the caller was told, for rendering headers; it grants nothing.
    pub(crate) fn to_view(self) -> shmlimit::Decision {
        shmlimit::c_abi::view(
            self.allowed,
            self.remaining,
            self.retry_after_ns,
            self.reset_after_ns,
        )
    }

    /// The grant this decision records, for a refund, with the limit that made it.
    pub(crate) fn to_grant(self) -> shmlimit::Decision {
        if !self.allowed {
            return shmlimit::c_abi::from_grant_record([0; 2], 0, false);
        }
        // A shadow-denied grant took nothing (cost 0) but was admitted: its refund counts.
        shmlimit::c_abi::from_grant_record(self.grant, self.origin, self.shadow_denied)
    }

    fn raw(&self) -> [u8; RAW_LEN] {
        let flags =
            self.allowed as u64 | (self.shadow_denied as u64) << 1 | (self.unavailable as u64) << 2;
        let words = [
            flags,
            self.remaining,
            self.retry_after_ns,
            self.reset_after_ns,
            self.grant[0],
            self.grant[1],
            self.origin,
            0,
        ];
        let mut out = [0u8; RAW_LEN];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }
}

#[pymethods]
impl Decision {
    #[new]
    #[pyo3(signature = (allowed, remaining = None, retry_after_ns = None, shadow_denied = None, unavailable = None, reset_after_ns = None))]
    fn new(
        allowed: &Bound<'_, PyAny>,
        remaining: Option<&Bound<'_, PyAny>>,
        retry_after_ns: Option<&Bound<'_, PyAny>>,
        shadow_denied: Option<&Bound<'_, PyAny>>,
        unavailable: Option<&Bound<'_, PyAny>>,
        reset_after_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let word = |v: Option<&Bound<'_, PyAny>>, what| v.map_or(Ok(0), |v| u64_arg(v, what));
        Ok(Decision {
            allowed: allowed.is_truthy()?,
            shadow_denied: shadow_denied.map_or(Ok(false), |v| v.is_truthy())?,
            unavailable: unavailable.map_or(Ok(false), |v| v.is_truthy())?,
            remaining: word(remaining, "remaining")?,
            retry_after_ns: word(retry_after_ns, "retry_after_ns")?,
            reset_after_ns: word(reset_after_ns, "reset_after_ns")?,
            grant: [0; 2],
            origin: 0,
        })
    }

    /// A Decision from the bytes of `_raw`.
    #[classmethod]
    fn _from_raw(_cls: &Bound<'_, PyType>, raw: &[u8]) -> PyResult<Self> {
        if raw.len() != RAW_LEN {
            return Err(PyValueError::new_err(format!(
                "a raw Decision is {RAW_LEN} bytes, not {}",
                raw.len()
            )));
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[8 * i..8 * i + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Decision {
            allowed: word(0) & 1 != 0,
            shadow_denied: word(0) & 2 != 0,
            unavailable: word(0) & 4 != 0,
            remaining: word(1),
            retry_after_ns: word(2),
            reset_after_ns: word(3),
            grant: [word(4), word(5)],
            origin: word(6),
        })
    }

    /// The decision's bytes (what pickling carries).
    #[getter]
    fn _raw<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.raw())
    }

    /// Pickling (multiprocessing returns decisions across processes): the bytes of `_raw`.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let from_raw = slf.get_type().getattr("_from_raw")?;
        Ok((from_raw, (PyBytes::new(slf.py(), &slf.get().raw()),)))
    }

    /// True when admitted (the cost consumed, except for peeks).
    #[getter]
    fn allowed(&self) -> bool {
        self.allowed
    }

    /// not allowed
    #[getter]
    fn denied(&self) -> bool {
        !self.allowed
    }

    /// True when a shadow (dry-run) limit would have denied (allowed anyway, nothing consumed).
    #[getter]
    fn shadow_denied(&self) -> bool {
        self.shadow_denied
    }

    /// True for a guarded decision its fail-open / fail-closed policy made (it took nothing).
    #[getter]
    fn unavailable(&self) -> bool {
        self.unavailable
    }

    /// Units that could still be admitted right now after this decision.
    #[getter]
    fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Nanoseconds until the same request could be admitted (0 when allowed).
    #[getter]
    fn retry_after_ns(&self) -> u64 {
        self.retry_after_ns
    }

    /// retry_after_ns in seconds (a float).
    #[getter]
    fn retry_after(&self) -> f64 {
        self.retry_after_ns as f64 / 1e9
    }

    /// Nanoseconds until the limit is back to its whole budget if nothing else is admitted (the
    /// core's value: the t of the RateLimit header); 0 for permits.
    #[getter]
    fn reset_after_ns(&self) -> u64 {
        self.reset_after_ns
    }

    /// reset_after_ns in seconds (a float).
    #[getter]
    fn reset_after(&self) -> f64 {
        self.reset_after_ns as f64 / 1e9
    }

    /// The units this decision took (0 for denials and peeks).
    #[getter]
    fn cost(&self) -> u64 {
        if self.allowed {
            self.grant[0]
        } else {
            0
        }
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        format!(
            "Decision(allowed={}, remaining={}, retry_after_ns={}{}{})",
            if self.allowed { "True" } else { "False" },
            self.remaining,
            self.retry_after_ns,
            if self.shadow_denied {
                ", shadow_denied=True"
            } else {
                ""
            },
            if self.unavailable {
                ", unavailable=True"
            } else {
                ""
            },
        )
    }
}

/// The Decision of `obj`, or TypeError.
pub(crate) fn decision_of(obj: &Bound<'_, PyAny>) -> PyResult<Decision> {
    match obj.cast::<Decision>() {
        Ok(d) => Ok(*d.get()),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected a Decision, not {}",
            obj.get_type().name()?
        ))),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Decision>()
}
