//! `LimitBase`, the compiled half of `shmlimit.Limit`: the library's typed handle of one limit,
//! resolved once by name, and every operation on it.
//!
//! The Python subclass checks the arguments (types, ranges, keys as bytes, seconds as
//! nanoseconds) and gives its methods their documented names; the methods here take the checked
//! values. The non-waiting decisions are in [`crate::hot`]. Each error names the operation as the
//! C ABI does (`shmlimit_acquire_timeout: ...`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use shmlimit::{Permit, Rate};
use shmlimit_bindings::handle::{wrong, AnyHandle};

use crate::adaptive::AdaptivePermit;
use crate::decision::{decision_of, Decision};
use crate::errors::{closed, raise, status_error, OrRaise};
use crate::guarded::Reservation;
use crate::limiter::{def_tuple, DefTuple, Limiter};

/// `(id, pid, reclaimable, since_ns, lease_expiry_ns, key_tag)` of one held permit.
type HolderTuple = (u64, u32, bool, u64, u64, u64);

/// What `permit_acquire` returns for a permit that holds nothing (a shadow limit, or a full key
/// table whose policy allows): admitted, and releasing it does nothing. The C ABI's
/// `SHMLIMIT_PERMIT_SHADOW`.
const PERMIT_SHADOW: u64 = 1;

/// The compiled part of shmlimit.Limit: its handle and every call on it.
#[pyclass(frozen, subclass, module = "shmlimit._native")]
pub(crate) struct LimitBase {
    /// The handle, valid for as long as this object: `close()` only sets `closed`, and the
    /// handle (its share of the mapping) is dropped with the object. A decision thus reads one
    /// flag rather than taking a lock, and a call that releases the GIL takes its own `Arc`.
    handle: Arc<AnyHandle>,
    /// Set once by `close()`, never cleared.
    closed: AtomicBool,
}

impl LimitBase {
    /// The handle, or ClosedError.
    #[inline]
    pub(crate) fn live(&self) -> PyResult<LiveHandle<'_>> {
        // Relaxed: the flag guards no other memory (the handle stays valid until the object is
        // dropped); a call racing `close()` in another thread may see either value.
        if self.closed.load(Ordering::Relaxed) {
            return Err(closed("Limit"));
        }
        Ok(&self.handle)
    }

    /// The handle for a call that releases the GIL, or for another object that keeps it.
    pub(crate) fn shared(&self) -> PyResult<Arc<AnyHandle>> {
        Ok(Arc::clone(self.live()?))
    }
}

/// A live handle, borrowed for one call.
pub(crate) type LiveHandle<'a> = &'a Arc<AnyHandle>;

/// A permit's id for Python: 0 for none, [`PERMIT_SHADOW`] for one that holds nothing.
fn permit_id(permit: Option<Permit>) -> u64 {
    match permit {
        None => 0,
        // Kept held past the handle: Python releases it by id.
        Some(p) => match p.into_id() {
            0 => PERMIT_SHADOW,
            id => id,
        },
    }
}

fn rate(handle: &AnyHandle, tokens: u64, period_ns: u64) -> shmlimit::Result<Rate> {
    Rate::new(tokens, Duration::from_nanos(period_ns)).map_err(|e| match e {
        shmlimit::Error::InvalidParameter { reason, .. } => shmlimit::Error::InvalidParameter {
            limit: handle.as_limit().name().to_owned(),
            reason,
        },
        other => other,
    })
}

#[pymethods]
impl LimitBase {
    /// Resolve `name` in `limiter`'s file as the kind it has (UnknownLimitError).
    #[new]
    #[pyo3(signature = (limiter, name, *_args, **_kwargs))]
    fn new(
        limiter: &Limiter,
        name: &str,
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        let limit = limiter.resolve(name)?;
        let handle = AnyHandle::of(limit).or_raise("shmlimit_limiter_limit")?;
        Ok(LimitBase {
            handle: Arc::new(handle),
            closed: AtomicBool::new(false),
        })
    }

    /// Close the handle (idempotent): using it afterwards raises ClosedError. Its memory is
    /// released when the object is collected.
    fn close(&self) {
        // Relaxed: as in `live`.
        self.closed.store(true, Ordering::Relaxed);
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        // Relaxed: as in `live`.
        self.closed.load(Ordering::Relaxed)
    }

    fn _try_acquire_at(&self, cost: u64, now_ns: u64) -> PyResult<Decision> {
        let d = self.live()?.try_acquire_at(cost, now_ns);
        Ok(d.or_raise("shmlimit_acquire_at")?.into())
    }

    fn _acquire_timeout(&self, py: Python<'_>, cost: u64, timeout_ns: u64) -> PyResult<Decision> {
        let handle = self.shared()?;
        let d = py.detach(|| handle.acquire_timeout(cost, Duration::from_nanos(timeout_ns)));
        Ok(d.or_raise("shmlimit_acquire_timeout")?.into())
    }

    #[pyo3(signature = (decision, units = None))]
    fn _refund(&self, decision: &Bound<'_, PyAny>, units: Option<u64>) -> PyResult<()> {
        let grant = decision_of(decision)?.to_grant();
        let op = if units.is_some() {
            "shmlimit_refund_units"
        } else {
            "shmlimit_refund"
        };
        self.live()?.refund(&grant, units).or_raise(op)
    }

    fn _set_rate(&self, tokens: u64, period_ns: u64) -> PyResult<()> {
        let handle = self.live()?;
        let op = "shmlimit_limit_set_rate";
        handle
            .set_rate(rate(handle, tokens, period_ns).or_raise(op)?)
            .or_raise(op)
    }

    fn _set_token_bucket(&self, burst: u64, tokens: u64, period_ns: u64) -> PyResult<()> {
        let handle = self.live()?;
        let op = "shmlimit_limit_set_token_bucket";
        let rate = rate(handle, tokens, period_ns).or_raise(op)?;
        handle.set_token_bucket(burst, rate).or_raise(op)
    }

    fn _set_limit(&self, limit: u64) -> PyResult<()> {
        self.live()?
            .set_limit(limit)
            .or_raise("shmlimit_limit_set_limit")
    }

    fn _reset(&self) -> PyResult<()> {
        self.live()?
            .as_limit()
            .reset()
            .or_raise("shmlimit_limit_reset")
    }

    /// The definition as stored in the file (as created).
    fn _definition(&self) -> PyResult<DefTuple> {
        let handle = self.live()?;
        let view = handle.as_limit();
        Ok(def_tuple(view.def(), view.algorithm()))
    }

    /// The definition with its live parameters (after any retune by any process).
    fn _live_definition(&self) -> PyResult<DefTuple> {
        let handle = self.live()?;
        let view = handle.as_limit();
        let live = view
            .live_algorithm()
            .or_raise("shmlimit_limit_live_definition")?;
        Ok(def_tuple(view.def(), &live))
    }

    fn _reserve(&self, cost: u64, max_delay_ns: u64) -> PyResult<Reservation> {
        let r = self
            .live()?
            .reserve(cost, Duration::from_nanos(max_delay_ns))
            .or_raise("shmlimit_reserve")?;
        Ok(Reservation::new(r))
    }

    fn _try_acquire_key_at(&self, key: &[u8], cost: u64, now_ns: u64) -> PyResult<Decision> {
        let d = self.live()?.try_acquire_key_at(key, cost, now_ns);
        Ok(d.or_raise("shmlimit_acquire_key_at")?.into())
    }

    fn _refund_key(&self, key: &[u8], decision: &Bound<'_, PyAny>) -> PyResult<()> {
        let grant = decision_of(decision)?.to_grant();
        self.live()?
            .refund_key(key, &grant)
            .or_raise("shmlimit_refund_key")
    }

    fn _key_occupancy(&self) -> PyResult<(usize, usize)> {
        let handle = self.live()?;
        handle
            .key_occupancy()
            .ok_or_else(|| not_keyed(handle, "shmlimit_limit_key_occupancy"))
    }

    fn _reclaim_idle_keys(&self) -> PyResult<usize> {
        let handle = self.live()?;
        handle
            .reclaim_idle_keys()
            .ok_or_else(|| not_keyed(handle, "shmlimit_limit_reclaim_idle_keys"))
    }

    /// A permit's id (0: none free), waiting up to `timeout_ns` (None: not at all).
    #[pyo3(signature = (timeout_ns = None))]
    fn _permit(&self, py: Python<'_>, timeout_ns: Option<u64>) -> PyResult<u64> {
        let handle = self.shared()?;
        let permit = match timeout_ns {
            None => handle
                .try_acquire_permit()
                .or_raise("shmlimit_permit_acquire")?,
            Some(ns) => py
                .detach(|| handle.acquire_permit_timeout(Duration::from_nanos(ns)))
                .or_raise("shmlimit_permit_acquire_timeout")?,
        };
        Ok(permit_id(permit))
    }

    /// An adaptive permit (None: none within the limit), waiting up to `timeout_ns` (None: not
    /// at all); with a `key`, a permit of that key of a keyed adaptive limit.
    #[pyo3(signature = (timeout_ns = None, key = None))]
    fn _adaptive(
        &self,
        py: Python<'_>,
        timeout_ns: Option<u64>,
        key: Option<Vec<u8>>,
    ) -> PyResult<Option<AdaptivePermit>> {
        let handle = self.shared()?;
        let permit = match key {
            None => {
                let adaptive = handle.adaptive().or_raise("shmlimit_adaptive_acquire")?;
                match timeout_ns {
                    None => adaptive.try_acquire(),
                    Some(ns) => py.detach(|| adaptive.acquire_timeout(Duration::from_nanos(ns))),
                }
                .or_raise("shmlimit_adaptive_acquire")?
            }
            Some(key) => {
                let keyed = handle
                    .keyed_adaptive()
                    .or_raise("shmlimit_keyed_adaptive_acquire")?;
                match timeout_ns {
                    None => keyed.try_acquire(&key),
                    Some(ns) => py.detach(|| keyed.acquire_timeout(&key, Duration::from_nanos(ns))),
                }
                .or_raise("shmlimit_keyed_adaptive_acquire")?
            }
        };
        Ok(permit.map(AdaptivePermit::new))
    }

    /// `(limit, permits, min, max, in_flight, rtt_long_us, rtt_recent_us)`; with a `key`, of
    /// that key of a keyed adaptive limit.
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (key = None))]
    fn _adaptive_status(
        &self,
        key: Option<Vec<u8>>,
    ) -> PyResult<(f64, u64, u64, u64, u64, Option<f64>, Option<f64>)> {
        let handle = self.live()?;
        let s = match key {
            None => handle
                .adaptive()
                .and_then(|a| a.status())
                .or_raise("shmlimit_adaptive_status")?,
            Some(key) => handle
                .keyed_adaptive()
                .and_then(|a| a.status(&key))
                .or_raise("shmlimit_keyed_adaptive_status")?,
        };
        Ok((
            s.limit,
            s.permits,
            s.min,
            s.max,
            s.in_flight,
            s.rtt_long_us,
            s.rtt_recent_us,
        ))
    }

    /// A permit of `key` (0: none free), waiting up to `timeout_ns` (None: not at all).
    #[pyo3(signature = (key, timeout_ns = None))]
    fn _key_permit(&self, py: Python<'_>, key: Vec<u8>, timeout_ns: Option<u64>) -> PyResult<u64> {
        let handle = self.shared()?;
        let permit = match timeout_ns {
            None => handle
                .try_acquire_key_permit(&key)
                .or_raise("shmlimit_permit_acquire_key")?,
            Some(ns) => py
                .detach(|| handle.acquire_key_permit_timeout(&key, Duration::from_nanos(ns)))
                .or_raise("shmlimit_permit_acquire_key_timeout")?,
        };
        Ok(permit_id(permit))
    }

    fn _key_permits_held(&self, key: &[u8]) -> PyResult<u32> {
        self.live()?
            .key_permits_held(key)
            .or_raise("shmlimit_permit_key_held")
    }

    fn _key_tag(&self, key: &[u8]) -> PyResult<u64> {
        shmlimit::c_abi::key_tag(self.live()?.as_limit(), key).or_raise("shmlimit_key_tag")
    }

    fn _release_permit(&self, permit_id: u64) -> PyResult<bool> {
        if permit_id == PERMIT_SHADOW {
            return Ok(false);
        }
        self.live()?
            .release_permit(permit_id)
            .or_raise("shmlimit_permit_release")
    }

    /// `(id, pid, reclaimable, since_ns, lease_expiry_ns, key_tag)` of every held permit (0 for
    /// what is not known).
    fn _permit_holders(&self) -> PyResult<Vec<HolderTuple>> {
        let handle = self.live()?;
        let holders = handle.permit_holders().ok_or_else(|| {
            raise(
                "shmlimit_permit_holders",
                wrong::concurrency(handle.as_limit()),
            )
        })?;
        Ok(holders
            .into_iter()
            .map(|h| {
                (
                    h.id,
                    h.pid,
                    h.reclaimable,
                    h.since_ns.unwrap_or(0),
                    h.lease_expiry_ns.unwrap_or(0),
                    h.key_tag.unwrap_or(0),
                )
            })
            .collect())
    }

    fn _reclaim_dead_permits(&self) -> PyResult<usize> {
        let handle = self.live()?;
        handle.reclaim_dead_permits().ok_or_else(|| {
            raise(
                "shmlimit_permit_reclaim_dead",
                wrong::concurrency(handle.as_limit()),
            )
        })
    }

    /// `(allowed, denied, shadow_denied, near_limit, refunded)`.
    fn _stats(&self) -> PyResult<(u64, u64, u64, u64, u64)> {
        let s = self.live()?.as_limit().stats();
        Ok((
            s.allowed,
            s.denied,
            s.shadow_denied,
            s.near_limit,
            s.refunded,
        ))
    }

    /// `(quota, window_secs)` of the RateLimit-Policy field.
    fn _policy(&self) -> PyResult<(u64, u64)> {
        let handle = self.live()?;
        let view = handle.as_limit();
        match view.policy().or_raise("shmlimit_limit_policy")? {
            Some(p) => Ok((p.quota, p.window_secs)),
            None => Err(status_error(
                shmlimit_bindings::status::code_of(&shmlimit::c_abi::wrong_kind(view, "")),
                format!(
                    "shmlimit_limit_policy: limit '{}' is a concurrency limit: it has no rate \
                     policy",
                    view.name()
                ),
                0,
            )),
        }
    }
}

#[cold]
fn not_keyed(handle: &AnyHandle, op: &str) -> PyErr {
    raise(
        op,
        shmlimit::c_abi::wrong_kind(handle.as_limit(), "is not keyed"),
    )
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LimitBase>()
}
