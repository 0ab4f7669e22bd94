//! The web middleware's per-request work in one native call: `WebPlan`, built once per
//! `shmlimit.web.Guard` whose checks read their keys from the request itself (a header, the
//! peer's address, or no key) at a fixed cost.
//!
//! Per request the plan reads each check's key from the WSGI environ (`HTTP_X_API_KEY`,
//! `REMOTE_ADDR`) or the ASGI scope (the last value of a header, decoded as latin-1; the client's
//! address), decides every check in one `try_acquire_all`, and returns the response header
//! fields the guard's options ask for: `RateLimit` rendered by the core from the decisions,
//! `RateLimit-Policy` rendered once per set of checks that took part and again after the
//! refresh interval (so that a retuned limit shows), `Retry-After` on a denial. `wsgi_call` does
//! the whole WSGI request: the decision, the 429, or the app called with a native
//! `start_response` that appends the fields; `asgi_send` gives an ASGI middleware the `send` to
//! pass to the app (a native one that appends the fields to the response's start message).
//!
//! A web server's worker runs each request's code cold (it sleeps in `accept` or the event loop
//! between requests), so what a request costs follows how much Python it runs: this module
//! replaces the middleware's Python per request (a plan walked in Python, the outcome object,
//! its rendered values copied into a list, a closure around `start_response`) with one call.

use std::sync::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use shmlimit::consts::MAX_CHECKS;
use shmlimit::{Clock, MonotonicClock, StateItem};

use crate::composed::{decisions_of, render, state_values, BAD_LENGTH};
use crate::decision::Decision;
use crate::errors::{status_error, u64_arg, OrRaise};
use crate::limit::LimitBase;
use crate::web_call::{adder, Kind};

/// Where a check's key is.
enum Source {
    /// An unkeyed check.
    Unkeyed,
    /// A request header: its WSGI environ key (`HTTP_X_API_KEY`) and its ASGI name (lower case).
    Header {
        environ: Py<PyString>,
        scope: Vec<u8>,
    },
    /// The peer's address: `REMOTE_ADDR`, or the scope's `client[0]`.
    Client,
}

/// One decided check of the guard.
struct Step {
    /// The check's bit in the mask of the checks that took part.
    bit: u64,
    limit: Py<LimitBase>,
    source: Source,
    cost: u64,
    /// The limit's item of the `RateLimit` field, its name rendered once (None for a limit
    /// outside the field).
    item: Option<StateItem>,
}

/// The rendered RateLimit-Policy fields per set of checks, and when the set was last cleared.
#[derive(Default)]
struct Policies {
    /// When (`CLOCK_MONOTONIC`, ns) the sets were last cleared; None before the first.
    at: Option<u64>,
    /// (mask, the WSGI field, the ASGI field).
    by_mask: Vec<(u64, Py<PyTuple>, Py<PyTuple>)>,
}

/// A key read from the request: borrowed from a str or bytes object, or transcoded.
enum Key<'py> {
    Str(Bound<'py, PyString>),
    Bytes(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl Key<'_> {
    fn bytes(&self) -> PyResult<&[u8]> {
        Ok(match self {
            Key::Str(s) => s.to_str()?.as_bytes(),
            Key::Bytes(b) => b.as_bytes(),
            Key::Owned(v) => v,
        })
    }
}

/// What one request's decision came to.
struct Outcome {
    allowed: bool,
    /// The checks that took part (the keyed ones whose key the request had, and the unkeyed).
    mask: u64,
    /// The core's RateLimit and Retry-After values, when the options ask for them.
    rate_limit: String,
    retry_after: String,
}

/// WebPlan(steps, rate_limit_headers, policy_header, policy_refresh, denied, body)
///
/// A guard's per-request work. `steps`: one `(bit, limit, kind, environ_name, scope_name, cost)`
/// per decided check, `kind` 0 for an unkeyed check, 1 for a header (`environ_name` its environ
/// key, `scope_name` its lower-case name in bytes), 2 for the peer's address. `denied` and `body`
/// are a WSGI 429's own header fields and body.
#[pyclass(frozen, module = "shmlimit._native", name = "WebPlan")]
pub(crate) struct WebPlan {
    steps: Vec<Step>,
    rate_limit_headers: bool,
    policy_header: bool,
    /// The refresh interval, ns.
    refresh_ns: u64,
    policies: Mutex<Policies>,
    /// The most bytes the steps' `RateLimit` items take.
    field_capacity: usize,
    denied: Vec<Py<PyAny>>,
    body: Py<PyBytes>,
}

fn step(item: &Bound<'_, PyAny>) -> PyResult<Step> {
    let bad = || {
        PyTypeError::new_err(
            "a step is (bit, limit, kind, environ_name, scope_name, cost): kind 0, 1 or 2",
        )
    };
    let t = item.cast::<PyTuple>().map_err(|_| bad())?;
    if t.len() != 6 {
        return Err(bad());
    }
    let bit = u64_arg(&t.get_item(0)?, "bit")?;
    let limit = t.get_item(1)?.cast_into::<LimitBase>().map_err(|_| bad())?;
    let source = match u64_arg(&t.get_item(2)?, "kind")? {
        0 => Source::Unkeyed,
        1 => Source::Header {
            environ: t
                .get_item(3)?
                .cast_into::<PyString>()
                .map_err(|_| bad())?
                .unbind(),
            scope: t
                .get_item(4)?
                .cast::<PyBytes>()
                .map_err(|_| bad())?
                .as_bytes()
                .to_vec(),
        },
        2 => Source::Client,
        _ => return Err(bad()),
    };
    let item = StateItem::of(limit.get().live()?.as_limit());
    Ok(Step {
        bit,
        limit: limit.unbind(),
        source,
        cost: u64_arg(&t.get_item(5)?, "cost")?,
        item,
    })
}

/// `mapping.get(name)`: a dict's item without a call, else the mapping's `get`.
fn get<'py>(mapping: &Bound<'py, PyAny>, name: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match mapping.cast::<PyDict>() {
        Ok(d) => Ok(d
            .get_item(name)?
            .unwrap_or_else(|| mapping.py().None().into_bound(mapping.py()))),
        Err(_) => mapping.call_method1(intern!(mapping.py(), "get"), (name,)),
    }
}

/// A key as `try_acquire_all` takes it (str or bytes), or None for a falsy value (the request
/// skips the check); anything else is the TypeError `try_acquire_all` raises.
fn key_of<'py>(value: Bound<'py, PyAny>) -> PyResult<Option<Key<'py>>> {
    if let Ok(s) = value.cast::<PyString>() {
        return Ok((!s.is_empty()?).then(|| Key::Str(s.clone())));
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok((!b.as_bytes().is_empty()).then(|| Key::Bytes(b.clone())));
    }
    if !value.is_truthy()? {
        return Ok(None);
    }
    Err(PyTypeError::new_err(format!(
        "a key is str or bytes, not {}",
        value.get_type().name()?
    )))
}

/// The last value of header `name` in an ASGI scope's header list, decoded as latin-1 (as
/// `Request.headers` has it), as the UTF-8 bytes of that str.
/// `pairs` are the header list's items from the last.
fn scope_header<'py>(
    py: Python<'py>,
    pairs: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
    name: &[u8],
) -> PyResult<Option<Key<'py>>> {
    let py_name = || PyBytes::new(py, name);
    for pair in pairs {
        let pair = pair?;
        let (k, v) = match pair.cast::<PyTuple>() {
            Ok(t) if t.len() == 2 => (t.get_item(0)?, t.get_item(1)?),
            _ => {
                let mut it = pair.try_iter()?;
                let (Some(k), Some(v), None) = (it.next(), it.next(), it.next()) else {
                    return Err(PyTypeError::new_err(
                        "an ASGI header is a (name, value) pair",
                    ));
                };
                (k?, v?)
            }
        };
        let same = match k.cast::<PyBytes>() {
            Ok(b) => b.as_bytes() == name,
            Err(_) => k.eq(py_name())?,
        };
        if !same {
            continue;
        }
        let v = match v.cast_into::<PyBytes>() {
            Ok(b) => b,
            Err(e) => {
                let v = e.into_inner();
                v.py()
                    .get_type::<PyBytes>()
                    .call1((v,))?
                    .cast_into::<PyBytes>()?
            }
        };
        let raw = v.as_bytes();
        if raw.is_empty() {
            return Ok(None);
        }
        if raw.is_ascii() {
            return Ok(Some(Key::Bytes(v)));
        }
        let mut utf8 = Vec::with_capacity(raw.len() * 2);
        for &b in raw {
            if b < 0x80 {
                utf8.push(b);
            } else {
                utf8.extend_from_slice(&[0xC0 | (b >> 6), 0x80 | (b & 0x3F)]);
            }
        }
        return Ok(Some(Key::Owned(utf8)));
    }
    Ok(None)
}

/// The checks a request takes part in, each with its key: at most [`MAX_CHECKS`], held on the
/// stack (the unused entries copies of the plan's first step, never read).
struct Included<'s, 'py> {
    items: [(&'s Step, Option<Key<'py>>); MAX_CHECKS],
    len: usize,
}

impl<'s, 'py> Included<'s, 'py> {
    fn new(first: &'s Step) -> Self {
        Included {
            items: std::array::from_fn(|_| (first, None)),
            len: 0,
        }
    }

    fn push(&mut self, step: &'s Step, key: Option<Key<'py>>) -> PyResult<()> {
        let Some(slot) = self.items.get_mut(self.len) else {
            return Err(status_error(
                BAD_LENGTH,
                format!("try_acquire_all: at most MAX_CHECKS ({MAX_CHECKS}) checks"),
                0,
            ));
        };
        *slot = (step, key);
        self.len += 1;
        Ok(())
    }

    fn as_slice(&self) -> &[(&'s Step, Option<Key<'py>>)] {
        &self.items[..self.len]
    }
}

/// An ASGI scope's header list, read when a check first needs a header.
enum ScopeHeaders<'py> {
    Unread,
    /// No list (None).
    Absent,
    /// A list, read in place from its last item.
    List(Bound<'py, PyList>),
    /// Any other iterable, its items copied once.
    Items(Vec<Bound<'py, PyAny>>),
}

impl<'py> ScopeHeaders<'py> {
    /// The last value of header `name` (see [`scope_header`]).
    fn last(&mut self, scope: &Bound<'py, PyAny>, name: &[u8]) -> PyResult<Option<Key<'py>>> {
        let py = scope.py();
        if let ScopeHeaders::Unread = self {
            let all = get(scope, intern!(py, "headers"))?;
            *self = if all.is_none() {
                ScopeHeaders::Absent
            } else if let Ok(list) = all.cast::<PyList>() {
                ScopeHeaders::List(list.clone())
            } else {
                ScopeHeaders::Items(all.try_iter()?.collect::<PyResult<Vec<_>>>()?)
            };
        }
        match self {
            ScopeHeaders::Unread | ScopeHeaders::Absent => Ok(None),
            ScopeHeaders::List(list) => {
                scope_header(py, (0..list.len()).rev().map(|i| list.get_item(i)), name)
            }
            ScopeHeaders::Items(items) => {
                scope_header(py, items.iter().rev().map(|p| Ok(p.clone())), name)
            }
        }
    }
}

impl WebPlan {
    /// Decide for the checks that take part (at least one), each with its key.
    fn decide(&self, included: &[(&Step, Option<Key<'_>>)]) -> PyResult<Outcome> {
        // The checks in an array on the stack (no allocation per request), the unused entries
        // copies of the first.
        let Some((first, _)) = included.first() else {
            return Err(PyTypeError::new_err("a decision of no checks"));
        };
        let mut rust =
            [shmlimit::c_abi::check(first.limit.get().live()?.as_limit(), None, 0); MAX_CHECKS];
        let mut mask = 0;
        for (slot, (s, key)) in rust.iter_mut().zip(included) {
            mask |= s.bit;
            let key = key.as_ref().map(Key::bytes).transpose()?;
            *slot = shmlimit::c_abi::check(s.limit.get().live()?.as_limit(), key, s.cost);
        }
        let rust = &rust[..included.len()];
        let composed = shmlimit::try_acquire_all(rust).or_raise("shmlimit_acquire_all")?;
        let allowed = composed.is_allowed();
        let (rate_limit, retry_after) = if allowed && self.rate_limit_headers {
            // Every check granted: each item is its decision's two numbers after its name.
            let mut field = String::with_capacity(self.field_capacity);
            for (i, (s, _)) in included.iter().enumerate() {
                if let (Some(item), Some(d)) = (&s.item, composed.decision(i)) {
                    item.push(&mut field, d);
                }
            }
            (field, String::new())
        } else if !allowed {
            let decisions = decisions_of(&composed, included.len());
            let checks = included
                .iter()
                .map(|(s, key)| {
                    let key = key.as_ref().map(Key::bytes).transpose()?;
                    Ok((s.limit.get().live()?, key, s.cost))
                })
                .collect::<PyResult<Vec<_>>>()?;
            let (rate_limit, _, retry_after) = state_values(checks.into_iter(), &decisions, false)?;
            (rate_limit, retry_after)
        } else {
            Default::default()
        };
        Ok(Outcome {
            allowed,
            mask,
            rate_limit,
            retry_after,
        })
    }

    /// The response fields of an outcome as the options ask for them, WSGI `(str, str)` or ASGI
    /// `(bytes, bytes)` pairs; None for none.
    fn fields<'py>(
        &self,
        py: Python<'py>,
        o: &Outcome,
        asgi: bool,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let field = |wsgi_name: &Bound<'py, PyString>, asgi_name: &[u8], value: &str| {
            if asgi {
                PyTuple::new(
                    py,
                    [
                        PyBytes::new(py, asgi_name),
                        PyBytes::new(py, value.as_bytes()),
                    ],
                )
            } else {
                PyTuple::new(py, [wsgi_name.clone(), ascii_str(py, value)?])
            }
        };
        let retry_after = || field(intern!(py, "Retry-After"), b"retry-after", &o.retry_after);
        // At most three fields; no list when there are none.
        let mut fields: [Option<Bound<'py, PyTuple>>; 3] = [None, None, None];
        if !self.rate_limit_headers || o.rate_limit.is_empty() {
            // Concurrency limits alone render no RateLimit; a denial still says Retry-After.
            if !o.allowed && (!self.rate_limit_headers || !o.retry_after.is_empty()) {
                fields[0] = Some(retry_after()?);
            }
        } else {
            fields[0] = Some(field(
                intern!(py, "RateLimit"),
                b"ratelimit",
                &o.rate_limit,
            )?);
            if self.policy_header {
                fields[1] = Some(self.policy(py, o.mask, asgi)?);
            }
            if !o.retry_after.is_empty() {
                fields[2] = Some(retry_after()?);
            }
        }
        let n = fields.iter().flatten().count();
        if n == 0 {
            return Ok(None);
        }
        // Made at its length: no list grown by appends.
        Ok(Some(PyList::new(
            py,
            Counted(fields.into_iter().flatten(), n),
        )?))
    }

    /// The RateLimit-Policy field of the checks in `mask`, rendered once per set and again after
    /// the refresh interval.
    fn policy<'py>(&self, py: Python<'py>, mask: u64, asgi: bool) -> PyResult<Bound<'py, PyTuple>> {
        let mut policies = self.policies.lock().unwrap_or_else(|e| e.into_inner());
        // The clock the decision just read (its code and data warm), not std's Instant.
        let now = MonotonicClock.now_ns();
        if policies
            .at
            .is_some_and(|at| now.saturating_sub(at) < self.refresh_ns)
        {
            if let Some((_, wsgi, asgi_field)) = policies.by_mask.iter().find(|p| p.0 == mask) {
                return Ok(if asgi { asgi_field } else { wsgi }.bind(py).clone());
            }
        } else {
            policies.by_mask.clear();
            policies.at = Some(now);
        }
        let handles = self
            .steps
            .iter()
            .filter(|s| s.bit & mask != 0)
            .map(|s| s.limit.get().live())
            .collect::<PyResult<Vec<_>>>()?;
        let views: Vec<&shmlimit::Limit> = handles.iter().map(|h| h.as_limit()).collect();
        let admitted = Decision {
            allowed: true,
            ..Decision::default()
        };
        let (_, value, _) = render(&views, &vec![admitted; views.len()], true)?;
        let wsgi = PyTuple::new(
            py,
            [
                intern!(py, "RateLimit-Policy").clone(),
                PyString::new(py, &value),
            ],
        )?;
        let asgi_field = PyTuple::new(
            py,
            [
                PyBytes::new(py, b"ratelimit-policy"),
                PyBytes::new(py, value.as_bytes()),
            ],
        )?;
        policies
            .by_mask
            .push((mask, wsgi.clone().unbind(), asgi_field.clone().unbind()));
        Ok(if asgi { asgi_field } else { wsgi })
    }

    /// The decision and fields of a WSGI request.
    fn wsgi_verdict<'py>(
        &self,
        environ: &Bound<'py, PyAny>,
    ) -> PyResult<(bool, Option<Bound<'py, PyList>>)> {
        let py = environ.py();
        self.verdict_of(py, false, |s| {
            Ok(match &s.source {
                Source::Unkeyed => Some(None),
                Source::Header { environ: name, .. } => {
                    key_of(get(environ, name.bind(py).as_any())?)?.map(Some)
                }
                Source::Client => key_of(get(environ, intern!(py, "REMOTE_ADDR"))?)?.map(Some),
            })
        })
    }

    /// The decision and fields of an ASGI request.
    fn asgi_verdict<'py>(
        &self,
        scope: &Bound<'py, PyAny>,
    ) -> PyResult<(bool, Option<Bound<'py, PyList>>)> {
        let py = scope.py();
        let mut headers = ScopeHeaders::Unread;
        self.verdict_of(py, true, |s| {
            Ok(match &s.source {
                Source::Unkeyed => Some(None),
                Source::Header { scope: name, .. } => headers.last(scope, name)?.map(Some),
                Source::Client => {
                    let client = get(scope, intern!(py, "client"))?;
                    if !client.is_truthy()? {
                        return Ok(None);
                    }
                    key_of(client.get_item(0)?.str()?.into_any())?.map(Some)
                }
            })
        })
    }

    /// The decision and fields of a request whose keys `key` reads, check by check: `None`
    /// skips the check (the request has no key for it), `Some(None)` is an unkeyed check.
    fn verdict_of<'s, 'py, 'k>(
        &'s self,
        py: Python<'py>,
        asgi: bool,
        mut key: impl FnMut(&'s Step) -> PyResult<Option<Option<Key<'k>>>>,
    ) -> PyResult<(bool, Option<Bound<'py, PyList>>)> {
        let Some(first) = self.steps.first() else {
            return Ok((true, None));
        };
        let mut included = Included::new(first);
        for s in &self.steps {
            if let Some(k) = key(s)? {
                included.push(s, k)?;
            }
        }
        self.verdict(py, included.as_slice(), asgi)
    }

    fn verdict<'py>(
        &self,
        py: Python<'py>,
        included: &[(&Step, Option<Key<'_>>)],
        asgi: bool,
    ) -> PyResult<(bool, Option<Bound<'py, PyList>>)> {
        if included.is_empty() {
            return Ok((true, None));
        }
        let outcome = self.decide(included)?;
        Ok((outcome.allowed, self.fields(py, &outcome, asgi)?))
    }
}

/// An iterator of a known number of items, for a list made at its length.
struct Counted<I>(I, usize);

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let item = self.0.next()?;
        self.1 = self.1.saturating_sub(1);
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.1, Some(self.1))
    }
}

impl<I: Iterator> ExactSizeIterator for Counted<I> {}

/// `value` as a str, made in place when it is ASCII (every value the plan renders is): no UTF-8
/// decoding, one copy.
fn ascii_str<'py>(py: Python<'py>, value: &str) -> PyResult<Bound<'py, PyString>> {
    if !value.is_ascii() {
        return Ok(PyString::new(py, value));
    }
    // SAFETY: [1] `py` proves the thread is attached; [2] PyUnicode_New(len, 127) returns a new
    // compact ASCII str of `len` characters (or NULL with an error set), whose `len` data bytes
    // (followed by its NUL) are ours to fill before the object is shared; [3] the bytes copied
    // are ASCII (checked above), as its maximum character of 127 says.
    unsafe {
        let obj = ffi::PyUnicode_New(value.len() as ffi::Py_ssize_t, 127);
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        std::ptr::copy_nonoverlapping(value.as_ptr(), ffi::PyUnicode_1BYTE_DATA(obj), value.len());
        Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked())
    }
}

fn or_empty<'py>(py: Python<'py>, fields: Option<Bound<'py, PyList>>) -> Bound<'py, PyList> {
    fields.unwrap_or_else(|| PyList::empty(py))
}

#[pymethods]
impl WebPlan {
    #[new]
    fn new(
        steps: &Bound<'_, PyAny>,
        rate_limit_headers: bool,
        policy_header: bool,
        policy_refresh: f64,
        denied: &Bound<'_, PyAny>,
        body: Bound<'_, PyBytes>,
    ) -> PyResult<WebPlan> {
        let steps = steps
            .try_iter()?
            .map(|s| step(&s?))
            .collect::<PyResult<Vec<_>>>()?;
        if !(policy_refresh.is_finite() && policy_refresh >= 0.0) {
            return Err(PyTypeError::new_err(
                "policy_refresh: a finite number of seconds, at least 0",
            ));
        }
        let field_capacity = steps
            .iter()
            .filter_map(|s| s.item.as_ref())
            .map(StateItem::max_len)
            .sum();
        Ok(WebPlan {
            field_capacity,
            steps,
            rate_limit_headers,
            policy_header: policy_header && rate_limit_headers,
            // Saturating: a refresh beyond u64 nanoseconds (585 years) is never.
            refresh_ns: (policy_refresh * 1e9) as u64,
            policies: Mutex::default(),
            denied: denied
                .try_iter()?
                .map(|f| f.map(Bound::unbind))
                .collect::<PyResult<Vec<_>>>()?,
            body: body.unbind(),
        })
    }

    /// (admitted, the `(str, str)` fields to add) for a WSGI environ.
    fn wsgi<'py>(&self, environ: &Bound<'py, PyAny>) -> PyResult<(bool, Bound<'py, PyList>)> {
        let (allowed, fields) = self.wsgi_verdict(environ)?;
        Ok((allowed, or_empty(environ.py(), fields)))
    }

    /// (admitted, the `(bytes, bytes)` fields to add) for an ASGI scope.
    fn asgi<'py>(&self, scope: &Bound<'py, PyAny>) -> PyResult<(bool, Bound<'py, PyList>)> {
        let (allowed, fields) = self.asgi_verdict(scope)?;
        Ok((allowed, or_empty(scope.py(), fields)))
    }

    /// The whole WSGI request: decided; a denial answered 429 (its fields and body); else the
    /// app called, with a `start_response` that appends the fields when there are any.
    fn wsgi_call<'py>(
        &self,
        app: &Bound<'py, PyAny>,
        environ: &Bound<'py, PyAny>,
        start_response: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = app.py();
        let (allowed, fields) = self.wsgi_verdict(environ)?;
        if !allowed {
            let headers = PyList::new(py, self.denied.iter().map(|f| f.bind(py)))?;
            if let Some(fields) = fields {
                for f in fields.iter() {
                    headers.append(f)?;
                }
            }
            start_response.call1((intern!(py, "429 Too Many Requests"), headers))?;
            return Ok(PyList::new(py, [self.body.bind(py)])?.into_any());
        }
        match fields {
            None => app.call1((environ, start_response)),
            Some(fields) => app.call1((environ, adder(Kind::Wsgi, start_response, fields)?)),
        }
    }

    /// For an ASGI request: `(send, [])` when admitted, `send` wrapped to add the fields when
    /// there are any; `(None, the fields)` when denied.
    fn asgi_send<'py>(
        &self,
        scope: &Bound<'py, PyAny>,
        send: &Bound<'py, PyAny>,
    ) -> PyResult<(Option<Bound<'py, PyAny>>, Bound<'py, PyList>)> {
        let py = scope.py();
        let (allowed, fields) = self.asgi_verdict(scope)?;
        if !allowed {
            return Ok((None, or_empty(py, fields)));
        }
        let send = match fields {
            None => send.clone(),
            Some(fields) => adder(Kind::Asgi, send, fields)?,
        };
        Ok((Some(send), PyList::empty(py)))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<WebPlan>()?;
    crate::web_call::register(m)
}
