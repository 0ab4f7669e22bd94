//! Reservations (`Limit.reserve`) and guarded limiters (`Limiter.open_guarded`): the handles
//! that outlive one call.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use pyo3::prelude::*;
use shmlimit::{GuardedDecision, Unavailable};
use shmlimit_bindings::handle::AnyHandle;

use crate::decision::{decision_of, Decision};
use crate::errors::{closed, status_error, OrRaise};

const INVALID_PARAMETER: i32 = 111;

/// Where a reservation stands.
enum State {
    /// Booked: not yet waited for or cancelled.
    Booked(Box<shmlimit::Reservation>),
    /// Waited for: its grant.
    Waited(Decision),
    /// Given back (or the cancel found that it could not be), or closed.
    Cancelled,
}

/// A booking of `Limit.reserve` (the compiled part of shmlimit.Reservation).
#[pyclass(frozen, module = "shmlimit._native")]
pub(crate) struct Reservation {
    state: Arc<Mutex<State>>,
    #[pyo3(get)]
    granted: bool,
    #[pyo3(get)]
    cost: u64,
    #[pyo3(get)]
    delay_ns: u64,
    #[pyo3(get)]
    ready_at_ns: u64,
}

impl Reservation {
    pub(crate) fn new(r: shmlimit::Reservation) -> Reservation {
        Reservation {
            granted: r.is_granted(),
            cost: r.cost(),
            delay_ns: r.delay_ns(),
            ready_at_ns: r.ready_at_ns(),
            state: Arc::new(Mutex::new(if r.is_granted() {
                State::Booked(Box::new(r))
            } else {
                State::Cancelled
            })),
        }
    }
}

#[pymethods]
impl Reservation {
    /// Sleep (without the GIL) until the reservation may proceed; its grant.
    fn wait(&self, py: Python<'_>) -> PyResult<Decision> {
        let state = Arc::clone(&self.state);
        py.detach(move || {
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            let d = match std::mem::replace(&mut *state, State::Cancelled) {
                State::Booked(r) => Decision::from(r.wait()),
                State::Waited(d) => d,
                State::Cancelled => return None,
            };
            *state = State::Waited(d);
            Some(d)
        })
        .ok_or_else(|| {
            status_error(
                INVALID_PARAMETER,
                "shmlimit_reservation_wait: invalid parameter: the reservation was cancelled"
                    .into(),
                0,
            )
        })
    }

    /// Give the tokens back; false when a later booking depends on them, or when already
    /// waited for or cancelled.
    fn cancel(&self) -> PyResult<bool> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, State::Cancelled) {
            State::Booked(r) => r.cancel().or_raise("shmlimit_reservation_cancel"),
            other => {
                *state = other;
                Ok(false)
            }
        }
    }

    /// Forget the reservation: tokens booked and neither waited for nor cancelled stay booked.
    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let State::Booked(_) = *state {
            *state = State::Cancelled;
        }
    }
}

/// A guarded limiter (the compiled part of shmlimit.GuardedLimiter).
#[pyclass(frozen, module = "shmlimit._native")]
pub(crate) struct GuardedLimiter {
    inner: RwLock<Option<Arc<shmlimit::GuardedLimiter>>>,
}

#[pymethods]
impl GuardedLimiter {
    /// Attach now if the file can be opened, else retry at most once per `reopen_ns`.
    #[staticmethod]
    fn open(path: &[u8], reopen_ns: u64) -> GuardedLimiter {
        let path = Path::new(OsStr::from_bytes(path));
        let inner = shmlimit::Limiter::open_guarded(path, Duration::from_nanos(reopen_ns));
        GuardedLimiter {
            inner: RwLock::new(Some(Arc::new(inner))),
        }
    }

    /// The guarded limit `name`, deciding by `unavailable` (1: fail open, 2: fail closed) while
    /// the file cannot be used.
    fn limit(&self, name: &str, unavailable: u32) -> PyResult<GuardedLimit> {
        let policy = match unavailable {
            1 => Unavailable::FailOpen,
            2 => Unavailable::FailClosed,
            other => {
                return Err(status_error(
                    INVALID_PARAMETER,
                    format!(
                        "shmlimit_guarded_limiter_limit: `unavailable` is {other}: it must be \
                         FAIL_OPEN (1) or FAIL_CLOSED (2); there is no default"
                    ),
                    0,
                ))
            }
        };
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let inner = guard.as_ref().ok_or_else(|| closed("GuardedLimiter"))?;
        Ok(GuardedLimit {
            inner: RwLock::new(Some(inner.limit(name, policy))),
            typed: OnceLock::new(),
        })
    }

    /// Whether the file is attached (attempting to open it if the interval has passed).
    #[getter]
    fn attached(&self) -> PyResult<bool> {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let inner = guard.as_ref().ok_or_else(|| closed("GuardedLimiter"))?;
        Ok(inner.attached().is_some())
    }

    fn close(&self) {
        let inner = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        drop(inner);
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}

/// One limit of a guarded limiter (the compiled part of shmlimit.GuardedLimit).
#[pyclass(frozen, module = "shmlimit._native")]
pub(crate) struct GuardedLimit {
    inner: RwLock<Option<shmlimit::GuardedLimit>>,
    /// The typed handle, for refunds, once the file is attached.
    typed: OnceLock<AnyHandle>,
}

/// What a guarded decision tells its caller (a peek's grant record cleared).
fn guarded(decision: GuardedDecision, commit: bool) -> Decision {
    match decision {
        GuardedDecision::Decided(d) => {
            let d = Decision::from(d);
            if commit {
                d
            } else {
                d.without_grant()
            }
        }
        GuardedDecision::Unavailable {
            allowed,
            retry_after_ns,
        } => Decision {
            allowed,
            unavailable: true,
            retry_after_ns: if allowed { 0 } else { retry_after_ns.max(1) },
            ..Decision::default()
        },
    }
}

impl GuardedLimit {
    fn with<T>(&self, f: impl FnOnce(&shmlimit::GuardedLimit) -> PyResult<T>) -> PyResult<T> {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        f(guard.as_ref().ok_or_else(|| closed("GuardedLimit"))?)
    }
}

#[pymethods]
impl GuardedLimit {
    fn try_acquire(&self, cost: u64) -> PyResult<Decision> {
        self.with(|l| {
            Ok(guarded(
                l.try_acquire(cost).or_raise("shmlimit_guarded_acquire")?,
                true,
            ))
        })
    }

    fn peek(&self, cost: u64) -> PyResult<Decision> {
        self.with(|l| {
            Ok(guarded(
                l.peek(cost).or_raise("shmlimit_guarded_peek")?,
                false,
            ))
        })
    }

    fn try_acquire_key(&self, key: &[u8], cost: u64) -> PyResult<Decision> {
        self.with(|l| {
            Ok(guarded(
                l.try_acquire_key(key, cost)
                    .or_raise("shmlimit_guarded_acquire_key")?,
                true,
            ))
        })
    }

    /// Give back what a grant of this limit took; a decision the policy made took nothing.
    fn refund(&self, decision: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = decision_of(decision)?;
        if d.unavailable {
            return Ok(());
        }
        let op = "shmlimit_guarded_refund";
        self.with(|l| {
            if let Some(attached) = l.limit().or_raise(op)? {
                let typed = match self.typed.get() {
                    Some(typed) => typed,
                    None => {
                        let typed = AnyHandle::of(attached.clone()).or_raise(op)?;
                        self.typed.get_or_init(|| typed)
                    }
                };
                typed.refund(&d.to_grant(), None).or_raise(op)?;
            }
            Ok(())
        })
    }

    fn close(&self) {
        let inner = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        drop(inner);
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Reservation>()?;
    m.add_class::<GuardedLimiter>()?;
    m.add_class::<GuardedLimit>()?;
    Ok(())
}
