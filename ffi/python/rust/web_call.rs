//! The callables a web plan gives the app in place of the server's: a WSGI `start_response`
//! (`WebStartResponse`) and an ASGI `send` (`WebSend`), each adding the guard's response fields
//! (a list of name-value pairs) to the response's header fields.
//!
//! Each is a small type of its own whose instances are called through vectorcall: the app's call
//! reaches [`call_wsgi`] or [`call_asgi`] with its arguments where the caller put them, and the
//! server's callable is called the same way. A `#[pyclass]` with `__call__` is reached through
//! `tp_call` instead, where CPython packs the arguments into a tuple and PyO3's trampoline and
//! argument parser unpack them by name. In a server's worker, where each request runs cold, that
//! path was about a third of what the fields cost per request: callgrind with caches evicted
//! between requests counted 34 of the fields' 117 instruction-cache lines missed beyond L2 in
//! creating, calling and freeing the `#[pyclass]` callable.
//!
//! The instances are not tracked by the cyclic garbage collector (as the `#[pyclass]` they
//! replace was not): each lives for one request and refers only to the server's callable and to
//! pairs of strings.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

/// An instance: the vectorcall entry CPython finds at the type's `__vectorcalloffset__`, then
/// the server's callable and the fields, both strong references.
#[repr(C)]
struct Adder {
    ob_base: ffi::PyObject,
    vectorcall: ffi::vectorcallfunc,
    inner: *mut ffi::PyObject,
    fields: *mut ffi::PyObject,
}

/// Which server callable an adder stands for.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// WSGI `start_response(status, headers, exc_info=None)`.
    Wsgi = 0,
    /// ASGI `send(message)`.
    Asgi = 1,
}

/// The two type objects, set once by [`register`] (strong references kept for the process's
/// life).
static TYPES: [AtomicPtr<ffi::PyTypeObject>; 2] = [
    AtomicPtr::new(ptr::null_mut()),
    AtomicPtr::new(ptr::null_mut()),
];

/// A new callable of `kind` that calls `inner` with `fields` added.
pub(crate) fn adder<'py>(
    kind: Kind,
    inner: &Bound<'py, PyAny>,
    fields: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = inner.py();
    // Acquire: pairs with the Release store in `register`, which comes after the type is ready.
    let ty = TYPES[kind as usize].load(Ordering::Acquire);
    if ty.is_null() {
        return Err(PyTypeError::new_err("shmlimit._native is not initialised"));
    }
    // SAFETY: [1] `py` proves the thread is attached; [2] `ty` is a ready type object of
    // `register` whose tp_basicsize is size_of::<Adder>(). PyObject_New allocates that many
    // bytes and initialises the header only (its type, a reference to the heap type, a
    // reference count of 1).
    let obj = unsafe { ffi::PyObject_New::<Adder>(ty) };
    if obj.is_null() {
        return Err(PyErr::fetch(py));
    }
    let entry: ffi::vectorcallfunc = match kind {
        Kind::Wsgi => call_wsgi,
        Kind::Asgi => call_asgi,
    };
    // SAFETY: `obj` is a fresh Adder whose other fields are not initialised yet; each write
    // initialises one (the two pointers take the references `into_ptr` gives up).
    unsafe {
        ptr::addr_of_mut!((*obj).vectorcall).write(entry);
        ptr::addr_of_mut!((*obj).inner).write(inner.clone().into_ptr());
        ptr::addr_of_mut!((*obj).fields).write(fields.into_ptr());
    }
    // SAFETY: a new reference to a fully initialised object.
    Ok(unsafe { Bound::from_owned_ptr(py, obj.cast()) })
}

/// `headers` (any iterable) and then `fields`, in a new list.
pub(crate) fn with_fields<'py>(
    headers: &Bound<'py, PyAny>,
    fields: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(list) = headers.cast::<PyList>() {
        // The usual case: one concatenation, sized once.
        return Ok(list.as_sequence().concat(fields.as_sequence())?.into_any());
    }
    let all = PyList::empty(headers.py());
    for h in headers.try_iter()? {
        all.append(h?)?;
    }
    for f in fields.iter() {
        all.append(f)?;
    }
    Ok(all.into_any())
}

/// The server's `start_response` called with the fields after the app's headers.
fn start_response<'py>(
    inner: &Bound<'py, PyAny>,
    fields: &Bound<'py, PyList>,
    status: &Bound<'py, PyAny>,
    headers: &Bound<'py, PyAny>,
    exc_info: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let all = with_fields(headers, fields)?;
    match exc_info {
        None => inner.call1((status, all)),
        Some(exc_info) => inner.call1((status, all, exc_info)),
    }
}

/// The server's `send`: a response's start message copied with the fields after its headers,
/// any other message as it is.
fn send<'py>(
    inner: &Bound<'py, PyAny>,
    fields: &Bound<'py, PyList>,
    message: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = message.py();
    let kind = message.get_item(intern!(py, "type"))?;
    if !kind.eq(intern!(py, "http.response.start"))? {
        return inner.call1((message,));
    }
    let copy = match message.cast::<PyDict>() {
        Ok(d) => d.copy()?,
        Err(_) => PyDict::from_sequence(&message.call_method0(intern!(py, "items"))?)?,
    };
    let headers = match message.cast::<PyDict>() {
        Ok(d) => d.get_item(intern!(py, "headers"))?,
        Err(_) => Some(message.call_method1(intern!(py, "get"), (intern!(py, "headers"),))?),
    };
    let headers = match headers {
        Some(h) if !h.is_none() => h,
        _ => PyTuple::empty(py).into_any(),
    };
    copy.set_item(intern!(py, "headers"), with_fields(&headers, fields)?)?;
    inner.call1((copy,))
}

/// The arguments of a vectorcall, positional then by keyword: `names` gives each parameter's
/// name in order; a parameter not given is None.
///
/// # Safety
///
/// `args` holds `nargs` positional references followed by one per name in `kwnames` (NULL or a
/// tuple of str), all valid for the call.
unsafe fn arguments<'a, 'py, const N: usize>(
    py: Python<'py>,
    what: &str,
    names: [&str; N],
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; N]> {
    // `nargsf` may carry PY_VECTORCALL_ARGUMENTS_OFFSET, set by callers that allow it.
    let nargs = nargsf & !ffi::PY_VECTORCALL_ARGUMENTS_OFFSET;
    if nargs > N {
        return Err(PyTypeError::new_err(format!(
            "{what} takes at most {N} arguments ({nargs} given)"
        )));
    }
    let mut out: [Option<Borrowed<'a, 'py, PyAny>>; N] = [None; N];
    for (i, slot) in out.iter_mut().enumerate().take(nargs) {
        // SAFETY: `args` holds at least `nargs` valid references (the contract).
        *slot = Some(unsafe { Borrowed::from_ptr(py, *args.add(i)) });
    }
    if !kwnames.is_null() {
        // SAFETY: `kwnames` is a tuple of str valid for the call (the contract).
        let kwnames = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
        for (j, name) in kwnames.iter().enumerate() {
            let name = name.cast::<PyString>()?.to_cow()?;
            let Some(i) = names.iter().position(|n| *n == name) else {
                return Err(PyTypeError::new_err(format!(
                    "{what} got an unexpected keyword argument '{name}'"
                )));
            };
            if out[i].is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{what} got multiple values for argument '{name}'"
                )));
            }
            // SAFETY: the keyword values follow the `nargs` positional ones (the contract).
            out[i] = Some(unsafe { Borrowed::from_ptr(py, *args.add(nargs + j)) });
        }
    }
    Ok(out)
}

/// Run a slot's body: its new reference, or NULL with its error (or its panic, as
/// InternalError) raised.
fn run<'py>(
    py: Python<'py>,
    what: &str,
    body: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
) -> *mut ffi::PyObject {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(obj)) => return obj.into_ptr(),
        Ok(Err(e)) => e,
        Err(panic) => crate::errors::caught(what, panic),
    };
    error.restore(py);
    ptr::null_mut()
}

/// The server's callable and the fields of an instance.
///
/// # Safety
///
/// `callable` is a live instance of one of the types of [`register`].
unsafe fn parts<'a, 'py>(
    py: Python<'py>,
    callable: *mut ffi::PyObject,
) -> (Borrowed<'a, 'py, PyAny>, Borrowed<'a, 'py, PyList>) {
    let this = callable.cast::<Adder>();
    // SAFETY: the instance holds both references until it is freed, which cannot happen during
    // a call of it (the caller holds a reference); `fields` is the list `adder` was given.
    unsafe {
        (
            Borrowed::from_ptr(py, (*this).inner),
            Borrowed::from_ptr(py, (*this).fields).cast_unchecked::<PyList>(),
        )
    }
}

/// The vectorcall of a `WebStartResponse`: `(status, headers, exc_info=None)`.
unsafe extern "C" fn call_wsgi(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a vectorcall entry attached.
    let py = unsafe { Python::assume_attached() };
    let what = "start_response";
    run(py, what, || {
        // SAFETY: the vectorcall contract (arguments) and `callable` is an instance of the
        // WebStartResponse type, whose vectorcall this is (parts).
        let [status, headers, exc_info] = unsafe {
            arguments(
                py,
                what,
                ["status", "headers", "exc_info"],
                args,
                nargsf,
                kwnames,
            )
        }?;
        let (Some(status), Some(headers)) = (status, headers) else {
            return Err(PyTypeError::new_err(
                "start_response takes (status, headers, exc_info=None)",
            ));
        };
        // SAFETY: as above.
        let (inner, fields) = unsafe { parts(py, callable) };
        start_response(&inner, &fields, &status, &headers, exc_info.as_deref())
    })
}

/// The vectorcall of a `WebSend`: `(message)`.
unsafe extern "C" fn call_asgi(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a vectorcall entry attached.
    let py = unsafe { Python::assume_attached() };
    let what = "send";
    run(py, what, || {
        // SAFETY: the vectorcall contract (arguments) and `callable` is an instance of the
        // WebSend type, whose vectorcall this is (parts).
        let [message] = unsafe { arguments(py, what, ["message"], args, nargsf, kwnames) }?;
        let Some(message) = message else {
            return Err(PyTypeError::new_err("send takes (message)"));
        };
        // SAFETY: as above.
        let (inner, fields) = unsafe { parts(py, callable) };
        send(&inner, &fields, &message)
    })
}

/// `tp_dealloc`: the two references, the memory, then the instance's reference to its heap
/// type.
unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: [1] `obj` is an instance whose reference count reached zero, its fields
    // initialised by `adder` (each a strong reference given back here); [2] it was allocated by
    // PyObject_New (whose counterpart is PyObject_Free); [3] each instance of a heap type holds a
    // reference to it, taken by PyObject_New and given back here.
    unsafe {
        let this = obj.cast::<Adder>();
        ffi::Py_DECREF((*this).inner);
        ffi::Py_DECREF((*this).fields);
        let ty = ffi::Py_TYPE(obj);
        ffi::PyObject_Free(obj.cast());
        ffi::Py_DECREF(ty.cast());
    }
}

/// `tp_new`: refused (an instance is made only by [`adder`], with its fields set).
unsafe extern "C" fn refuse_new(
    subtype: *mut ffi::PyTypeObject,
    _args: *mut ffi::PyObject,
    _kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls tp_new attached, with `subtype` a live type object.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: as above.
    let name = unsafe { Borrowed::from_ptr(py, subtype.cast()) }
        .getattr(intern!(py, "__name__"))
        .map_or_else(|_| String::from("this type"), |n| n.to_string());
    PyTypeError::new_err(format!(
        "{name} instances are made by the web middleware only"
    ))
    .restore(py);
    ptr::null_mut()
}

/// Create the two types (once per process) and add them to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let specs = [
        (
            Kind::Wsgi,
            "WebStartResponse",
            c"shmlimit._native.WebStartResponse",
            c"A WSGI start_response that adds the guard's fields after the app's headers.",
        ),
        (
            Kind::Asgi,
            "WebSend",
            c"shmlimit._native.WebSend",
            c"An ASGI send that adds the guard's fields to the response's start message.",
        ),
    ];
    for (kind, name, qualified, doc) in specs {
        let existing = TYPES[kind as usize].load(Ordering::Acquire);
        if !existing.is_null() {
            // Initialised once per process (a second import of the module reuses the type).
            // SAFETY: the type object lives for the process (a reference kept in TYPES).
            let ty = unsafe { Borrowed::from_ptr(py, existing.cast()) };
            m.add(name, ty)?;
            continue;
        }
        // The tables live as long as the type, which lives for the process: leaked once.
        let members = Box::leak(Box::new([
            ffi::PyMemberDef {
                name: c"__vectorcalloffset__".as_ptr(),
                type_code: ffi::Py_T_PYSSIZET,
                offset: std::mem::offset_of!(Adder, vectorcall) as ffi::Py_ssize_t,
                flags: ffi::Py_READONLY,
                doc: ptr::null(),
            },
            ffi::PyMemberDef::default(),
        ]));
        let slot = |slot, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
        let slots = Box::leak(Box::new([
            slot(ffi::Py_tp_new, refuse_new as *mut c_void),
            slot(ffi::Py_tp_dealloc, dealloc as *mut c_void),
            slot(ffi::Py_tp_call, ffi::PyVectorcall_Call as *mut c_void),
            slot(ffi::Py_tp_members, members.as_mut_ptr().cast()),
            slot(ffi::Py_tp_doc, doc.as_ptr() as *mut c_void),
            slot(0, ptr::null_mut()),
        ]));
        let spec = Box::leak(Box::new(ffi::PyType_Spec {
            name: qualified.as_ptr(),
            basicsize: std::mem::size_of::<Adder>() as c_int,
            itemsize: 0,
            // Not a base type, and no `tp_new`: instances are made only by `adder`, with the
            // layout the vectorcall entries rely on.
            flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_HAVE_VECTORCALL) as _,
            slots: slots.as_mut_ptr(),
        }));
        // SAFETY: `spec` and the tables it points to are valid for the process; the result is a
        // new reference to the type or NULL with an error set.
        let ty = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec)) }?;
        m.add(name, &ty)?;
        // Release: pairs with the Acquire loads; the reference is kept for ever.
        TYPES[kind as usize].store(ty.into_ptr().cast(), Ordering::Release);
    }
    Ok(())
}
