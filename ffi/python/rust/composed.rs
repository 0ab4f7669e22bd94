//! Composed checks (`try_acquire_all`, `Composed`) and the RateLimit header fields.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use shmlimit::consts::MAX_CHECKS;
use shmlimit::{Check, RateLimitHeaders};

use crate::decision::Decision;
use crate::errors::{status_error, u64_arg, OrRaise};
use crate::limit::{LimitBase, LiveHandle};

pub(crate) const BAD_LENGTH: i32 = 4;
const INVALID_PARAMETER: i32 = 111;

/// One check as given: its limit, key and cost.
struct Given {
    limit: Py<LimitBase>,
    key: Option<Vec<u8>>,
    cost: u64,
}

/// The outcome of try_acquire_all: every limit admitted (and the costs were taken), or none did
/// and nothing was taken anywhere. True when allowed.
#[pyclass(frozen, module = "shmlimit", name = "Composed")]
pub(crate) struct Composed {
    /// The checks as given, kept (and their limits alive) to refund and render with.
    checks: Vec<Given>,
    allowed: bool,
    denied_by: Option<usize>,
    retry_after_ns: u64,
    /// Each check's decision; `None` for a grant given back because a later check denied.
    decisions: Vec<Option<Decision>>,
}

/// One check: a Limit (cost 1), (limit, cost), (limit, key) or (limit, key, cost).
fn given(i: usize, item: &Bound<'_, PyAny>) -> PyResult<Given> {
    let (limit, key, cost) = if item.cast::<LimitBase>().is_ok() {
        (item.clone(), None, None)
    } else if let Some(t) = item
        .cast::<PyTuple>()
        .ok()
        .filter(|t| (2..=3).contains(&t.len()))
    {
        let second = t.get_item(1)?;
        if t.len() == 3 {
            (t.get_item(0)?, Some(second), Some(t.get_item(2)?))
        } else if second.is_instance_of::<PyString>() || second.is_instance_of::<PyBytes>() {
            (t.get_item(0)?, Some(second), None)
        } else {
            (t.get_item(0)?, None, Some(second))
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "check {i}: a Limit, (limit, cost), (limit, key) or (limit, key, cost), not {}",
            item.get_type().name()?
        )));
    };
    let limit = limit.cast_into::<LimitBase>().map_err(|e| {
        PyTypeError::new_err(format!(
            "check {i}: the limit must be a Limit, not {}",
            e.into_inner()
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let cost = cost.map_or(Ok(1), |c| u64_arg(&c, "cost"))?;
    let key = match key {
        None => None,
        Some(k) => Some(match k.cast::<PyString>() {
            Ok(s) => s.to_str()?.as_bytes().to_vec(),
            Err(_) => k.extract::<Vec<u8>>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "a key is str or bytes, not {}",
                    k.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?,
        }),
    };
    Ok(Given {
        limit: limit.unbind(),
        key,
        cost,
    })
}

/// The library's checks over live handles.
fn checks<'a>(handles: &'a [LiveHandle<'a>], given: &'a [Given]) -> Vec<Check<'a>> {
    handles
        .iter()
        .zip(given)
        .map(|(h, g)| shmlimit::c_abi::check(h.as_limit(), g.key.as_deref(), g.cost))
        .collect()
}

fn live<'a>(py: Python<'_>, given: &'a [Given]) -> PyResult<Vec<LiveHandle<'a>>> {
    given
        .iter()
        .map(|g| g.limit.get().live())
        .collect::<PyResult<Vec<_>>>()
        .inspect_err(|_| {
            let _ = py;
        })
}

/// try_acquire_all(*checks) -> Composed
///
/// Admit one request on every limit, or on none. A check is a Limit (cost 1), (limit, cost),
/// (limit, key) or (limit, key, cost); a key decides for that key of a keyed limit. The limits
/// are acquired in order; when one denies, the grants already taken are given back and the rest
/// peeked, so a denied request consumes nothing. At most MAX_CHECKS checks.
#[pyfunction]
#[pyo3(signature = (*items))]
fn try_acquire_all(py: Python<'_>, items: &Bound<'_, PyTuple>) -> PyResult<Composed> {
    if items.len() > MAX_CHECKS {
        return Err(status_error(
            BAD_LENGTH,
            format!("try_acquire_all: at most MAX_CHECKS ({MAX_CHECKS}) checks"),
            0,
        ));
    }
    let given = items
        .iter()
        .enumerate()
        .map(|(i, item)| given(i, &item))
        .collect::<PyResult<Vec<_>>>()?;
    let (allowed, denied_by, retry_after_ns, decisions) = {
        let handles = live(py, &given)?;
        let rust = checks(&handles, &given);
        let composed = shmlimit::try_acquire_all(&rust).or_raise("shmlimit_acquire_all")?;
        (
            composed.is_allowed(),
            composed.denied_by(),
            composed.retry_after_ns(),
            decisions_of(&composed, given.len()),
        )
    };
    Ok(Composed {
        checks: given,
        allowed,
        denied_by,
        retry_after_ns,
        decisions,
    })
}

/// Each check's decision as `Composed.decisions` holds it: its grant when allowed; when denied
/// the denial and the peeks, grants given back carrying no grant record.
pub(crate) fn decisions_of(composed: &shmlimit::Composed, n: usize) -> Vec<Option<Decision>> {
    (0..n)
        .map(|i| {
            composed.decision(i).map(|d| {
                let d = Decision::from(*d);
                if composed.is_allowed() {
                    d
                } else {
                    d.without_grant()
                }
            })
        })
        .collect()
}

/// The header values of checks (a live handle, the key, the cost) and their decisions: a check
/// whose slot holds no decision (a grant given back because a later check denied) is peeked
/// now, with its key and cost, so that every limit reports its state.
pub(crate) fn state_values<'a>(
    checks: impl ExactSizeIterator<Item = (LiveHandle<'a>, Option<&'a [u8]>, u64)>,
    decisions: &[Option<Decision>],
    with_policy: bool,
) -> PyResult<(String, String, String)> {
    let mut views = Vec::with_capacity(checks.len());
    let mut ds = Vec::with_capacity(decisions.len());
    for ((h, key, cost), d) in checks.zip(decisions) {
        let d = d.unwrap_or_default();
        ds.push(if !d.allowed && d.retry_after_ns == 0 {
            let peeked = match key {
                Some(key) => h.peek_key(key, cost).or_raise("shmlimit_peek_key")?,
                None => h.peek(cost).or_raise("shmlimit_peek")?,
            };
            Decision::from(peeked)
        } else {
            d
        });
        views.push(h.as_limit());
    }
    render(&views, &ds, with_policy)
}

/// The three header values the core renders for `limits` and what their callers were told
/// (`RateLimit-Policy` empty unless `with_policy`).
pub(crate) fn render(
    limits: &[&shmlimit::Limit],
    decisions: &[Decision],
    with_policy: bool,
) -> PyResult<(String, String, String)> {
    let op = "shmlimit_ratelimit_headers";
    let mut headers = RateLimitHeaders::new();
    for (view, d) in limits.iter().zip(decisions) {
        headers
            .add_limit(view, &d.to_view(), with_policy)
            .or_raise(op)?;
    }
    Ok((
        headers.rate_limit,
        headers.rate_limit_policy,
        headers.retry_after.unwrap_or_default(),
    ))
}

#[pymethods]
impl Composed {
    /// True when every limit admitted (and the costs were taken).
    #[getter]
    fn allowed(&self) -> bool {
        self.allowed
    }

    /// not allowed
    #[getter]
    fn denied(&self) -> bool {
        !self.allowed
    }

    /// The index of the first check that denied; None when allowed.
    #[getter]
    fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// The largest retry-after among the limits that would deny now (0 when allowed).
    #[getter]
    fn retry_after_ns(&self) -> u64 {
        self.retry_after_ns
    }

    /// retry_after_ns in seconds.
    #[getter]
    fn retry_after(&self) -> f64 {
        self.retry_after_ns as f64 / 1e9
    }

    /// Each check's Decision: its grant when allowed; when denied the denial at denied_by and
    /// the peeks after it; None for a grant given back because a later check denied.
    #[getter]
    fn decisions(&self) -> Vec<Option<Decision>> {
        self.decisions
            .iter()
            .map(|d| d.filter(|d| d.allowed || d.retry_after_ns != 0))
            .collect()
    }

    /// Give back every grant of an allowed composed request whose work was never done (nothing
    /// for a denied one).
    fn refund(&self, py: Python<'_>) -> PyResult<()> {
        let handles = live(py, &self.checks)?;
        if !self.allowed {
            return Ok(());
        }
        let rust = checks(&handles, &self.checks);
        let mut first = Ok(());
        for (check, d) in rust.iter().zip(&self.decisions) {
            let grant = d.unwrap_or_default().to_grant();
            if let Err(e) = shmlimit::c_abi::give_back(check, &grant) {
                first = first.and(Err(e));
            }
        }
        first.or_raise("shmlimit_refund_all")
    }

    /// (RateLimit, RateLimit-Policy, Retry-After) values of this outcome, as the core renders
    /// them. A check whose slot holds no decision (a grant given back because a later check
    /// denied) is peeked now, with its key and cost, so that every limit reports its state.
    fn _header_values(&self, py: Python<'_>) -> PyResult<(String, String, String)> {
        self.values(py, true)
    }

    /// (RateLimit, Retry-After) values of this outcome, as `_header_values` renders them, for
    /// a caller that renders RateLimit-Policy once per set of limits.
    fn _state_values(&self, py: Python<'_>) -> PyResult<(String, String)> {
        let (rate_limit, _, retry_after) = self.values(py, false)?;
        Ok((rate_limit, retry_after))
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        let by = self.denied_by.map_or("None".to_owned(), |i| i.to_string());
        format!(
            "Composed(allowed={}, denied_by={by}, retry_after_ns={})",
            if self.allowed { "True" } else { "False" },
            self.retry_after_ns
        )
    }
}

impl Composed {
    fn values(&self, py: Python<'_>, with_policy: bool) -> PyResult<(String, String, String)> {
        if self.checks.is_empty() {
            return Ok(Default::default());
        }
        let handles = live(py, &self.checks)?;
        let checks = handles
            .iter()
            .zip(&self.checks)
            .map(|(h, g)| (*h, g.key.as_deref(), g.cost));
        state_values(checks, &self.decisions, with_policy)
    }
}

/// header_values(*pairs) -> (rate_limit, rate_limit_policy, retry_after)
///
/// The RateLimit, RateLimit-Policy and Retry-After values the core renders for (Limit,
/// Decision) pairs (empty strings for fields it leaves out).
#[pyfunction]
#[pyo3(signature = (*pairs))]
fn header_values(pairs: &Bound<'_, PyTuple>) -> PyResult<(String, String, String)> {
    if pairs.is_empty() || pairs.len() > MAX_CHECKS {
        return Err(status_error(
            INVALID_PARAMETER,
            format!("header_values: 1 to MAX_CHECKS ({MAX_CHECKS}) (limit, decision) pairs"),
            0,
        ));
    }
    let mut limits = Vec::with_capacity(pairs.len());
    let mut ds = Vec::with_capacity(pairs.len());
    for (i, pair) in pairs.iter().enumerate() {
        let Some(t) = pair.cast::<PyTuple>().ok().filter(|t| t.len() == 2) else {
            return Err(PyTypeError::new_err(format!(
                "pair {i}: a (limit, decision) tuple, not {}",
                pair.get_type().name()?
            )));
        };
        let (limit, d) = (t.get_item(0)?, t.get_item(1)?);
        match (limit.cast_into::<LimitBase>(), Decision::of(&d)) {
            (Ok(limit), Some(d)) => {
                limits.push(limit);
                ds.push(d);
            }
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "pair {i}: a (Limit, Decision) tuple"
                )))
            }
        }
    }
    let handles = limits
        .iter()
        .map(|l| l.get().live())
        .collect::<PyResult<Vec<_>>>()?;
    let views: Vec<&shmlimit::Limit> = handles.iter().map(|h| h.as_limit()).collect();
    render(&views, &ds, true)
}

/// concurrent_values(*items) -> (rate_limit, rate_limit_policy, retry_after)
///
/// The RateLimit, RateLimit-Policy and Retry-After values the core renders for adaptive
/// concurrency permits given as (name, permits, in_flight, Decision): a keyed adaptive
/// limit's key's, whose quota no limit handle alone can say.
#[pyfunction]
#[pyo3(signature = (*items))]
fn concurrent_values(items: &Bound<'_, PyTuple>) -> PyResult<(String, String, String)> {
    let mut headers = RateLimitHeaders::new();
    for (i, item) in items.iter().enumerate() {
        let parsed = item
            .extract::<(String, u64, u64, Bound<'_, PyAny>)>()
            .ok()
            .and_then(|(name, permits, in_flight, d)| {
                Some((name, permits, in_flight, Decision::of(&d)?))
            });
        let Some((name, permits, in_flight, d)) = parsed else {
            return Err(PyTypeError::new_err(format!(
                "item {i}: a (name, permits, in_flight, Decision) tuple"
            )));
        };
        let quota = shmlimit::ConcurrentQuota { permits, in_flight };
        headers.add_concurrent(&name, quota, &d.to_view(), true);
    }
    Ok((
        headers.rate_limit,
        headers.rate_limit_policy,
        headers.retry_after.unwrap_or_default(),
    ))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Composed>()?;
    m.add_function(wrap_pyfunction!(try_acquire_all, m)?)?;
    m.add_function(wrap_pyfunction!(header_values, m)?)?;
    m.add_function(wrap_pyfunction!(concurrent_values, m)?)?;
    Ok(())
}
