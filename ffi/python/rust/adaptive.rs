//! Adaptive concurrency permits for Python: `AdaptivePermit`, the library's permit (which
//! measures its own latency from its grant), released once with an outcome code.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use shmlimit::Outcome;

use crate::errors::raise;

/// A held adaptive permit; `release(outcome)` releases it (once) and reports the outcome with
/// the time since the grant (or `release_measured` with the caller's latency). Dropped without
/// a release, it reports `Dropped`.
#[pyclass(frozen, module = "shmlimit._native")]
pub(crate) struct AdaptivePermit {
    inner: Mutex<Option<shmlimit::AdaptivePermit>>,
}

impl AdaptivePermit {
    pub(crate) fn new(permit: shmlimit::AdaptivePermit) -> Self {
        AdaptivePermit {
            inner: Mutex::new(Some(permit)),
        }
    }
}

fn invalid(reason: String) -> PyErr {
    raise(
        "shmlimit_adaptive_release",
        shmlimit::Error::InvalidParameter {
            limit: "adaptive permit".to_owned(),
            reason,
        },
    )
}

fn outcome(code: u32) -> PyResult<Outcome> {
    Outcome::from_code(code)
        .ok_or_else(|| invalid(format!("outcome {code}: not an outcome (0 to 3)")))
}

#[pymethods]
impl AdaptivePermit {
    /// Release with `outcome` (0 ok, 1 error, 2 timeout, 3 dropped); False if already released
    /// or no longer held. An unknown outcome raises InvalidParameterError and changes nothing.
    fn release(&self, code: u32) -> PyResult<bool> {
        let outcome = outcome(code)?;
        let permit = self.inner.lock().ok().and_then(|mut p| p.take());
        Ok(permit.is_some_and(|p| p.release(outcome)))
    }

    /// `release` with the caller's latency in seconds; a NaN, negative or infinite latency
    /// raises InvalidParameterError and changes nothing.
    fn release_measured(&self, code: u32, latency_s: f64) -> PyResult<bool> {
        let outcome = outcome(code)?;
        if !(0.0..1e9).contains(&latency_s) {
            return Err(invalid(format!(
                "latency {latency_s} s: must be a finite number of seconds >= 0"
            )));
        }
        let permit = self.inner.lock().ok().and_then(|mut p| p.take());
        Ok(permit.is_some_and(|p| p.release_measured(outcome, Duration::from_secs_f64(latency_s))))
    }

    /// Whether this permit still holds its entry.
    #[getter]
    fn held(&self) -> bool {
        self.inner
            .lock()
            .ok()
            .is_some_and(|p| p.as_ref().is_some_and(|p| p.is_held()))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AdaptivePermit>()
}
