//! The hot path: `try_acquire`, `peek`, `try_acquire_key` and `peek_key` of `LimitBase`, as raw
//! `METH_FASTCALL | METH_KEYWORDS` methods.
//!
//! PyO3's `#[pymethods]` wrap every call in an argument parser and a trampoline (a GIL-count
//! thread-local, a panic guard); for a call that decides in tens of nanoseconds, they were a
//! large share of the cost. These four functions are CPython methods written against
//! `pyo3::ffi`: CPython calls them with the GIL held, they parse `(cost=1)` / `(key, cost=1)`
//! themselves, decide through the same [`AnyHandle`](shmlimit_bindings::handle::AnyHandle)
//! methods as everything else, and catch any panic into InternalError. They are attached to the
//! class at module init as method descriptors, like a C type's methods.
//!
//! # Implementation details
//!
//! Positional arguments of exact types (an int that fits in a u64; a key that is an exact str,
//! whose UTF-8 CPython caches in the object, or bytes) take the fast path, which goes from the
//! arguments to the `Decision` object with no `PyResult` in between; anything else (keywords,
//! int subclasses, bytearray keys, out-of-range values) takes the general path, which gives the
//! same answers and the errors with their messages. Each method is its own code: `keyed` and
//! `commit` are const generics of the body, so no method tests them at run time. Callgrind,
//! CPython 3.11, instructions per `try_acquire(1)` in a loop: 1,051 (the C extension this
//! replaced: 1,097; `#[pymethods]` with a `#[pyclass]` Decision: 1,400).

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::decision::Decision;
use crate::errors::{self, u64_arg, OrRaise};
use crate::limit::LimitBase;

/// One of the four decisions.
#[derive(Clone, Copy)]
struct Call {
    /// The method's name, for argument errors.
    method: &'static str,
    /// The operation's name in errors from the library.
    op: &'static str,
    keyed: bool,
    /// A decision that consumes (else a peek, which leaves no grant to refund).
    commit: bool,
}

const TRY_ACQUIRE: Call = Call {
    method: "try_acquire",
    op: "shmlimit_acquire",
    keyed: false,
    commit: true,
};
const PEEK: Call = Call {
    method: "peek",
    op: "shmlimit_peek",
    keyed: false,
    commit: false,
};
const TRY_ACQUIRE_KEY: Call = Call {
    method: "try_acquire_key",
    op: "shmlimit_acquire_key",
    keyed: true,
    commit: true,
};
const PEEK_KEY: Call = Call {
    method: "peek_key",
    op: "shmlimit_peek_key",
    keyed: true,
    commit: false,
};

/// A key: str (its UTF-8 bytes) or a bytes-like object, as the caller's bytes or a copy.
enum Key<'py> {
    Borrowed(Bound<'py, PyAny>),
    Owned(Vec<u8>),
}

impl Key<'_> {
    fn bytes(&self) -> PyResult<&[u8]> {
        match self {
            Key::Borrowed(obj) => {
                if let Ok(s) = obj.cast::<PyString>() {
                    return s.to_str().map(str::as_bytes);
                }
                Ok(obj.cast::<PyBytes>()?.as_bytes())
            }
            Key::Owned(v) => Ok(v),
        }
    }
}

fn key_of<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Key<'py>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Ok(Key::Borrowed(obj.clone()));
    }
    // bytearray, memoryview, ...: a copy of their bytes.
    match obj.extract::<Vec<u8>>() {
        Ok(v) if !obj.is_instance_of::<pyo3::types::PyList>() => Ok(Key::Owned(v)),
        _ => Err(PyTypeError::new_err(format!(
            "a key is str or bytes, not {}",
            obj.get_type().name()?
        ))),
    }
}

/// The arguments by name: `(cost)` or `(key, cost)`.
fn parse<'a, 'py>(
    call: Call,
    args: &'a [Bound<'py, PyAny>],
    nargs: usize,
    kwnames: Option<&Bound<'py, PyTuple>>,
) -> PyResult<[Option<&'a Bound<'py, PyAny>>; 2]> {
    let names: &[&str] = if call.keyed {
        &["key", "cost"]
    } else {
        &["cost"]
    };
    if nargs > names.len() {
        return Err(PyTypeError::new_err(format!(
            "{}() takes at most {} arguments ({nargs} given)",
            call.method,
            names.len()
        )));
    }
    let mut out: [Option<&Bound<'py, PyAny>>; 2] = [None, None];
    for (slot, arg) in out.iter_mut().zip(&args[..nargs]) {
        *slot = Some(arg);
    }
    if let Some(kwnames) = kwnames {
        for (j, name) in kwnames.iter().enumerate() {
            let name = name.cast_into::<PyString>()?;
            let name = name.to_str()?;
            let i = names.iter().position(|n| *n == name).ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "{}() got an unexpected keyword argument '{name}'",
                    call.method
                ))
            })?;
            if out[i].is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{}() got multiple values for '{name}'",
                    call.method
                )));
            }
            out[i] = Some(&args[nargs + j]);
        }
    }
    if call.keyed && out[0].is_none() {
        return Err(PyTypeError::new_err(format!(
            "{}() missing required argument 'key'",
            call.method
        )));
    }
    Ok(out)
}

/// The decision of `call` on `slf` with these arguments: the general path.
fn decide<'py>(
    py: Python<'py>,
    call: Call,
    limit: &LimitBase,
    args: &[Bound<'py, PyAny>],
    nargs: usize,
    kwnames: Option<&Bound<'py, PyTuple>>,
) -> PyResult<Decision> {
    let [first, second] = parse(call, args, nargs, kwnames)?;
    let (key, cost) = if call.keyed {
        (first, second)
    } else {
        (None, first)
    };
    let cost = cost.map_or(Ok(1), |c| u64_arg(c, "cost"))?;
    let handle = limit.live()?;
    let decision = match key {
        None if call.commit => handle.try_acquire(cost),
        None => handle.peek(cost),
        Some(key) => {
            let key = key_of(key)?;
            let key = key.bytes()?;
            if call.commit {
                handle.try_acquire_key(key, cost)
            } else {
                handle.peek_key(key, cost)
            }
        }
    };
    let _ = py;
    let decision = Decision::from(decision.or_raise(call.op)?);
    Ok(if call.commit {
        decision
    } else {
        decision.without_grant()
    })
}

/// The body of the four methods, inlined into each (its `call` a constant there).
///
/// # Safety
///
/// Called by CPython as a `METH_FASTCALL | METH_KEYWORDS` method: the GIL is held, `slf` is an
/// instance of `LimitBase` (or a subclass; the method descriptor checks it), `args` holds `nargs`
/// positional then `len(kwnames)` keyword arguments (borrowed), and `kwnames` is NULL or a tuple.
///
/// `KEYED` and `COMMIT` are `call`'s, as constants: the closure below is one function per
/// method only if it is generic over them (a closure is not copied where its function is inlined).
#[inline(always)]
unsafe fn method<const KEYED: bool, const COMMIT: bool>(
    call: Call,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    debug_assert!(call.keyed == KEYED && call.commit == COMMIT);
    // SAFETY: [1] CPython holds the GIL for the call (the function's contract).
    let py = unsafe { Python::assume_attached() };
    let outcome = catch_unwind(AssertUnwindSafe(|| -> *mut ffi::PyObject {
        // SAFETY: [1], and `slf` is a live instance of LimitBase (the descriptor checked it).
        let this = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<LimitBase>() };
        let limit = this.get();
        // `nargs` may carry PY_VECTORCALL_ARGUMENTS_OFFSET, set by callers that allow it.
        let nargs = (nargs as usize) & !ffi::PY_VECTORCALL_ARGUMENTS_OFFSET;
        // The fast paths: `try_acquire(cost)` and `try_acquire_key(key[, cost])` with positional
        // arguments, an exact str or bytes key and an exact int that fits. They return the object
        // itself, not a PyResult: nothing on the way to build and move.
        if !KEYED && nargs == 1 && kwnames.is_null() {
            // SAFETY: `args` holds `nargs` (1) valid references (the contract).
            if let Some(cost) = unsafe { exact_u64(*args) } {
                let handle = match limit.live() {
                    Ok(handle) => handle,
                    Err(e) => return raise(py, e),
                };
                let d = if COMMIT {
                    handle.try_acquire(cost)
                } else {
                    handle.peek(cost)
                };
                return finish::<COMMIT>(py, call, d);
            }
        } else if KEYED && (nargs == 1 || nargs == 2) && kwnames.is_null() {
            // SAFETY: `args` holds `nargs` (1 or 2) valid references (the contract), borrowed
            // for the call: the key's bytes stay valid while they are used.
            let (key, cost) = unsafe {
                (
                    exact_key(*args),
                    if nargs == 2 {
                        exact_u64(*args.add(1))
                    } else {
                        Some(1)
                    },
                )
            };
            if let (Some(key), Some(cost)) = (key, cost) {
                let handle = match limit.live() {
                    Ok(handle) => handle,
                    Err(e) => return raise(py, e),
                };
                let d = if COMMIT {
                    handle.try_acquire_key(key, cost)
                } else {
                    handle.peek_key(key, cost)
                };
                return finish::<COMMIT>(py, call, d);
            }
        }
        // SAFETY: the function's contract.
        match unsafe { general(py, call, limit, args, nargs, kwnames) } {
            Ok(d) => d.into_object(py),
            Err(e) => raise(py, e),
        }
    }));
    outcome.unwrap_or_else(|panic| raise(py, errors::caught(call.op, panic)))
}

/// The int `arg` as a u64, if it is an exact int that fits (else None, no error set): the
/// general path says what is wrong with any other.
///
/// # Safety
///
/// Attached, and `arg` is a valid object.
#[inline(always)]
unsafe fn exact_u64(arg: *mut ffi::PyObject) -> Option<u64> {
    // SAFETY: `arg` is a valid object; PyLong_CheckExact reads its type only.
    if unsafe { ffi::PyLong_CheckExact(arg) } == 0 {
        return None;
    }
    // SAFETY: `arg` is an int; the call sets an error on overflow (and on a negative value),
    // cleared below.
    let v = unsafe { ffi::PyLong_AsUnsignedLongLong(arg) };
    // SAFETY: attached (the contract).
    if v == u64::MAX && !unsafe { ffi::PyErr_Occurred() }.is_null() {
        // SAFETY: attached.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    Some(v)
}

/// The bytes of `arg` if it is an exact str (its UTF-8, cached in the object) or bytes, else
/// None (no error set).
///
/// # Safety
///
/// Attached, and `arg` is a valid object that outlives `'a`.
#[inline(always)]
unsafe fn exact_key<'a>(arg: *mut ffi::PyObject) -> Option<&'a [u8]> {
    let mut len: ffi::Py_ssize_t = 0;
    // SAFETY: [1] `arg` is a valid object, and the type checks read its type only; [2] the UTF-8
    // of a str, and the contents of a bytes object, live as long as the object, which does not
    // change (both are immutable) and outlives 'a (the contract).
    unsafe {
        let data = if ffi::PyUnicode_CheckExact(arg) != 0 {
            let data = ffi::PyUnicode_AsUTF8AndSize(arg, &mut len);
            if data.is_null() {
                // A str that is not valid UTF-8 (lone surrogates): the general path raises.
                ffi::PyErr_Clear();
                return None;
            }
            data.cast::<u8>()
        } else if ffi::PyBytes_CheckExact(arg) != 0 {
            len = ffi::PyBytes_Size(arg);
            ffi::PyBytes_AsString(arg).cast::<u8>()
        } else {
            return None;
        };
        Some(std::slice::from_raw_parts(data, len as usize))
    }
}

/// The object of a decision of the fast path, or NULL with its error raised.
#[inline(always)]
fn finish<const COMMIT: bool>(
    py: Python<'_>,
    call: Call,
    d: shmlimit::Result<shmlimit::Decision>,
) -> *mut ffi::PyObject {
    match d {
        Ok(d) if COMMIT => Decision::from(d).into_object(py),
        Ok(d) => Decision::from(d).without_grant().into_object(py),
        Err(e) => raise(py, errors::raise(call.op, e)),
    }
}

/// Any call but the fast path's: keywords, a key, an int that is not exact or does not fit.
///
/// # Safety
///
/// As [`method`], with `nargs` without PY_VECTORCALL_ARGUMENTS_OFFSET.
#[inline(never)]
unsafe fn general(
    py: Python<'_>,
    call: Call,
    limit: &LimitBase,
    args: *const *mut ffi::PyObject,
    nargs: usize,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Decision> {
    let kwnames = if kwnames.is_null() {
        None
    } else {
        // SAFETY: a tuple of str (the contract), borrowed for the call.
        Some(unsafe { Bound::from_borrowed_ptr(py, kwnames).cast_into_unchecked::<PyTuple>() })
    };
    let count = nargs + kwnames.as_ref().map_or(0, |k| k.len());
    let args: Vec<Bound<'_, PyAny>> = (0..count)
        // SAFETY: `args` holds `nargs + len(kwnames)` valid references (the contract).
        .map(|i| unsafe { Bound::from_borrowed_ptr(py, *args.add(i)) })
        .collect();
    decide(py, call, limit, &args, nargs, kwnames.as_ref())
}

/// Raise `error`: a method's NULL.
#[cold]
fn raise(py: Python<'_>, error: PyErr) -> *mut ffi::PyObject {
    error.restore(py);
    std::ptr::null_mut()
}

macro_rules! hot_methods {
    ($($fn:ident $call:ident $doc:literal;)*) => {
        $(
            /// # Safety
            ///
            /// As [`method`]: CPython's call of a fast-call method.
            unsafe extern "C" fn $fn(
                slf: *mut ffi::PyObject,
                args: *const *mut ffi::PyObject,
                nargs: ffi::Py_ssize_t,
                kwnames: *mut ffi::PyObject,
            ) -> *mut ffi::PyObject {
                // SAFETY: forwarded contract.
                unsafe { method::<{ $call.keyed }, { $call.commit }>($call, slf, args, nargs, kwnames) }
            }
        )*

        /// `(name, function, docstring)` of each method.
        const METHODS: &[(&CStr, ffi::PyCFunctionFastWithKeywords, &CStr)] = &[
            $(($call.method_c(), $fn, $doc),)*
        ];
    };
}

impl Call {
    const fn method_c(self) -> &'static CStr {
        match self.method.as_bytes() {
            b"try_acquire" => c"try_acquire",
            b"peek" => c"peek",
            b"try_acquire_key" => c"try_acquire_key",
            _ => c"peek_key",
        }
    }
}

hot_methods! {
    try_acquire TRY_ACQUIRE c"try_acquire(cost=1) -> Decision\n\nAdmit `cost` units now, or deny and consume nothing.";
    peek PEEK c"peek(cost=1) -> Decision\n\nThe decision try_acquire(cost) would make now, consuming nothing.";
    try_acquire_key TRY_ACQUIRE_KEY c"try_acquire_key(key, cost=1) -> Decision\n\nAdmit `cost` units for `key` (str or bytes, 1 to MAX_KEY_LEN bytes) on a keyed limit, or deny and consume nothing.";
    peek_key PEEK_KEY c"peek_key(key, cost=1) -> Decision\n\nThe decision try_acquire_key would make now, consuming and inserting nothing.";
}

/// Attach the four methods to `LimitBase`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let class = py.get_type::<LimitBase>();
    for &(name, function, doc) in METHODS {
        // A method table entry lives as long as the descriptor that points at it: for ever.
        let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
            ml_name: name.as_ptr() as *const c_char,
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: function,
            },
            ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: doc.as_ptr() as *const c_char,
        }));
        // SAFETY: `class` is a type object and `def` a method table entry that outlives it; the
        // new reference (or NULL with an error set) is taken over by `from_owned_ptr_or_err`.
        let descriptor = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(class.as_type_ptr(), def))
        }?;
        class.setattr(name.to_str().unwrap_or_default(), descriptor)?;
    }
    Ok(())
}
