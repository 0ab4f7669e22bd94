//! `Counters`, the compiled half of `shmlimit.CounterStore` and of the `limits` storage
//! (`shmlimit.limits`): a counters limit's handle (keyed counters whose window and limit come
//! with each call) and its calls. Keys are `str` (their UTF-8 bytes, read in place) or
//! `bytes`; windows are nanoseconds. Each call keeps the GIL: it takes about as long as
//! releasing and taking it back would. Errors are raised as the C ABI's of the same name
//! (`shmlimit_counters_incr: ...`).

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use shmlimit::CountersLimit;
use shmlimit_bindings::handle::AnyHandle;

use crate::errors::OrRaise;
use crate::limit::LimitBase;

/// A counters limit's handle: the library's `CountersLimit`.
#[pyclass(frozen, module = "shmlimit._native")]
pub(crate) struct Counters {
    handle: Arc<AnyHandle>,
}

impl Counters {
    fn limit(&self) -> &CountersLimit {
        match &*self.handle {
            AnyHandle::Counters(c) => c,
            _ => unreachable!("checked when made"),
        }
    }
}

/// The bytes of a key: a `str`'s UTF-8 (cached by CPython, not copied) or a `bytes`.
fn with_key<R>(key: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
    if let Ok(s) = key.cast::<PyString>() {
        return f(s.to_str()?.as_bytes());
    }
    if let Ok(b) = key.cast::<PyBytes>() {
        return f(b.as_bytes());
    }
    Err(PyTypeError::new_err(format!(
        "a key is str or bytes, not {}",
        key.get_type().name()?
    )))
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

#[pymethods]
impl Counters {
    /// The counters handle of `limit` (a Limit of a counters limit), or WrongKindError.
    #[new]
    fn new(limit: &LimitBase) -> PyResult<Counters> {
        let handle = limit.shared()?;
        handle.counters().or_raise("shmlimit_counters")?;
        Ok(Counters { handle })
    }

    /// Add `amount` to the key's fixed-window counter; its count after.
    fn incr(&self, key: &Bound<'_, PyAny>, window_ns: u64, amount: u64) -> PyResult<u64> {
        with_key(key, |k| {
            self.limit()
                .incr(k, Duration::from_nanos(window_ns), amount)
                .or_raise("shmlimit_counters_incr")
        })
    }

    /// Take `amount` from the key's fixed-window counter (never below zero; the window keeps
    /// its end); its count after.
    fn decr(&self, key: &Bound<'_, PyAny>, amount: u64) -> PyResult<u64> {
        with_key(key, |k| {
            self.limit()
                .decr(k, amount)
                .or_raise("shmlimit_counters_decr")
        })
    }

    /// Set the key's fixed-window counter to `count` in a window of `window_ns` starting now;
    /// `count`.
    fn set(&self, key: &Bound<'_, PyAny>, window_ns: u64, count: u64) -> PyResult<u64> {
        with_key(key, |k| {
            self.limit()
                .set(k, Duration::from_nanos(window_ns), count)
                .or_raise("shmlimit_counters_set")
        })
    }

    /// `(count, ns until the window ends)` of the key's fixed window.
    fn count(&self, key: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        with_key(key, |k| {
            let (n, left) = self.limit().count(k).or_raise("shmlimit_counters_count")?;
            Ok((n, ns(left)))
        })
    }

    /// Admit `cost` of `max` in the key's fixed window of `window_ns`.
    fn acquire_fixed(
        &self,
        key: &Bound<'_, PyAny>,
        max: u64,
        window_ns: u64,
        cost: u64,
    ) -> PyResult<bool> {
        with_key(key, |k| {
            Ok(self
                .limit()
                .acquire_fixed(k, max, Duration::from_nanos(window_ns), cost)
                .or_raise("shmlimit_counters_acquire_fixed")?
                .is_allowed())
        })
    }

    /// Admit `cost` of `max` by the key's sliding window counter over windows of `window_ns`.
    fn acquire_sliding(
        &self,
        key: &Bound<'_, PyAny>,
        max: u64,
        window_ns: u64,
        cost: u64,
    ) -> PyResult<bool> {
        with_key(key, |k| {
            Ok(self
                .limit()
                .acquire_sliding(k, max, Duration::from_nanos(window_ns), cost)
                .or_raise("shmlimit_counters_acquire_sliding")?
                .is_allowed())
        })
    }

    /// Admit `cost` of `max` in the key's moving window of `window_ns`.
    fn acquire_moving(
        &self,
        key: &Bound<'_, PyAny>,
        max: u64,
        window_ns: u64,
        cost: u64,
    ) -> PyResult<bool> {
        with_key(key, |k| {
            Ok(self
                .limit()
                .acquire_moving(k, max, Duration::from_nanos(window_ns), cost)
                .or_raise("shmlimit_counters_acquire_moving")?
                .is_allowed())
        })
    }

    /// `(previous, ns it still weighs, current, ns until it expires)` of the key's sliding
    /// window counter.
    fn sliding(&self, key: &Bound<'_, PyAny>, window_ns: u64) -> PyResult<(u64, u64, u64, u64)> {
        with_key(key, |k| {
            let c = self
                .limit()
                .sliding_counts(k, Duration::from_nanos(window_ns))
                .or_raise("shmlimit_counters_sliding")?;
            Ok((
                c.previous,
                ns(c.previous_weighs_for),
                c.current,
                ns(c.current_expires_in),
            ))
        })
    }

    /// `(admissions, ns since the oldest of them)` in the key's moving window.
    fn moving(&self, key: &Bound<'_, PyAny>, max: u64, window_ns: u64) -> PyResult<(u64, u64)> {
        with_key(key, |k| {
            let (n, age) = self
                .limit()
                .moving_window(k, max, Duration::from_nanos(window_ns))
                .or_raise("shmlimit_counters_moving")?;
            Ok((n, ns(age)))
        })
    }

    /// Forget the key in every strategy.
    fn clear_key(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        with_key(key, |k| {
            self.limit()
                .clear_key(k)
                .or_raise("shmlimit_counters_clear_key")
        })
    }

    /// Forget every key; how many held something.
    fn clear_all(&self) -> PyResult<usize> {
        self.limit()
            .clear_all()
            .or_raise("shmlimit_counters_clear_all")
    }

    /// `(used, slots)` of both key tables (counters and moving-window logs).
    fn key_occupancy(&self) -> (usize, usize) {
        self.limit().key_occupancy()
    }

    /// Retire the keys of both tables that count nothing any more; how many were.
    fn reclaim_idle_keys(&self) -> usize {
        self.limit().reclaim_idle_keys()
    }

    /// The largest moving-window limit of the file (its log entries per key).
    #[getter]
    fn max_moving_limit(&self) -> u64 {
        self.limit().max_moving_limit()
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Counters>()
}
