//! `shmlimit.Decision`: the outcome of one decision, as the caller was told it, with the grant
//! record a refund needs.
//!
//! It holds what `shmlimit_decision` holds in C (allowed, remaining, retry-after, reset, and
//! the grant's two words and origin), not a `shmlimit::Decision`: a decision made by a guarded
//! limit's policy, one built in Python (`Decision(False, retry_after_ns=5)`) and one unpickled in
//! another process are decisions too, and a refund rebuilds the grant from the record
//! (`shmlimit::c_abi::from_grant_record`), as the C ABI does.
//!
//! # Implementation details
//!
//! Every decision of the hot path ([`crate::hot`]) creates one `Decision` object and the caller
//! soon frees it, so the type is written against the C API (`pyo3::ffi`), as the C extension's
//! was, rather than as a `#[pyclass]`: a heap type made by `PyType_FromSpec` at module init, whose
//! instances are allocated by `PyObject_New` (`PyObject_Malloc`, no zeroing, no call of the base
//! type's `tp_new`) and freed by a `tp_dealloc` of three calls. Through `#[pyclass(frozen)]`,
//! creating and freeing one cost about 280 instructions (the base type's `tp_new` with an empty
//! tuple, `PyType_GenericAlloc`'s `memset`, a deallocation trampoline that counts the GIL in a
//! thread-local); here they cost about 90 (callgrind, CPython 3.11). The rest (the constructor,
//! properties, pickling, `repr`) is written the same way; none of it is on the hot path.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::IntoPyObjectExt;

use crate::errors::u64_arg;

/// The outcome of one decision; true in a boolean context when allowed.
///
/// A granted decision carries its grant record: Limit.refund(decision) gives it back.
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

    /// The decision from the bytes of `_raw`.
    fn from_raw(raw: &[u8]) -> PyResult<Self> {
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

/// The object: a Python object header followed by the decision.
///
/// # Layout
///
/// `#[repr(C)]` so that the header comes first, as CPython requires of every object; the type's
/// `tp_basicsize` is this struct's size.
#[repr(C)]
struct DecisionObject {
    ob_base: ffi::PyObject,
    value: Decision,
}

/// The type object, set once by [`register`] (a strong reference kept for the process's life).
static TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(ptr::null_mut());

fn type_ptr() -> *mut ffi::PyTypeObject {
    // Acquire: pairs with the Release store in `register`, which comes after the type is ready.
    TYPE.load(Ordering::Acquire)
}

impl Decision {
    /// A new `shmlimit.Decision` object holding `self` (a new reference), or NULL with
    /// MemoryError set.
    ///
    /// Must be called while attached to the interpreter, after the module's [`register`].
    #[inline]
    pub(crate) fn into_object(self, _py: Python<'_>) -> *mut ffi::PyObject {
        let ty = type_ptr();
        debug_assert!(
            !ty.is_null(),
            "Decision used before the module registered it"
        );
        // SAFETY: [1] `_py` proves the thread is attached; [2] `ty` is the ready type object of
        // `register`, whose tp_basicsize is size_of::<DecisionObject>(). PyObject_New allocates
        // that many bytes and initialises the header only (its type, a reference to the type, a
        // reference count of 1).
        let obj = unsafe { ffi::PyObject_New::<DecisionObject>(ty) };
        if obj.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: `obj` points to a fresh DecisionObject whose `value` is not initialised yet;
        // writing it (a Copy type: nothing to drop) initialises it.
        unsafe { ptr::addr_of_mut!((*obj).value).write(self) };
        obj.cast()
    }

    /// The decision `obj` holds, if it is a `shmlimit.Decision`.
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> Option<Decision> {
        let ptr = obj.as_ptr();
        // SAFETY: `ptr` is a live object (borrowed through `obj`); reading its type is safe.
        if unsafe { ffi::Py_TYPE(ptr) } != type_ptr() {
            return None;
        }
        // SAFETY: the object is a DecisionObject (its type is ours; the type cannot be
        // subclassed) and its value was written at creation and never changes.
        Some(unsafe { value(ptr) })
    }
}

impl<'py> IntoPyObject<'py> for Decision {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: a new reference, or NULL with an error set.
        unsafe { Bound::from_owned_ptr_or_err(py, self.into_object(py)) }
    }
}

/// The decision of a `shmlimit.Decision` object.
///
/// # Safety
///
/// `obj` is a live instance of the type of [`register`].
unsafe fn value(obj: *mut ffi::PyObject) -> Decision {
    // SAFETY: the caller's contract: `obj` is a DecisionObject, its value initialised.
    unsafe { (*obj.cast::<DecisionObject>()).value }
}

/// The Decision of `obj`, or TypeError.
pub(crate) fn decision_of(obj: &Bound<'_, PyAny>) -> PyResult<Decision> {
    match Decision::of(obj) {
        Some(d) => Ok(d),
        None => Err(PyTypeError::new_err(format!(
            "expected a Decision, not {}",
            obj.get_type().name()?
        ))),
    }
}

/// A C-API slot's result: the new reference of `Ok`, or NULL with the error of `Err` raised.
fn to_ptr<'py, T: IntoPyObject<'py>>(py: Python<'py>, result: PyResult<T>) -> *mut ffi::PyObject
where
    PyErr: From<T::Error>,
{
    match result.and_then(|v| v.into_bound_py_any(py)) {
        Ok(obj) => obj.into_ptr(),
        Err(e) => {
            e.restore(py);
            ptr::null_mut()
        }
    }
}

// The type's slots. CPython calls each with the thread attached and `obj` an instance of the
// type (a type of our own that cannot be subclassed); none of them can panic.

/// `tp_dealloc`: the memory, then the instance's reference to its (heap) type.
unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: [1] `obj` is an instance whose reference count reached zero, allocated by
    // PyObject_New (whose counterpart is PyObject_Free); [2] each instance of a heap type holds a
    // reference to it, taken by PyObject_New and given back here.
    unsafe {
        let ty = ffi::Py_TYPE(obj);
        ffi::PyObject_Free(obj.cast());
        ffi::Py_DECREF(ty.cast());
    }
}

/// `tp_new`: `Decision(allowed, remaining=None, retry_after_ns=None, shadow_denied=None,
/// unavailable=None, reset_after_ns=None)`.
unsafe extern "C" fn new(
    _subtype: *mut ffi::PyTypeObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls tp_new attached.
    let py = unsafe { Python::assume_attached() };
    let names: [*const c_char; 7] = [
        c"allowed".as_ptr(),
        c"remaining".as_ptr(),
        c"retry_after_ns".as_ptr(),
        c"shadow_denied".as_ptr(),
        c"unavailable".as_ptr(),
        c"reset_after_ns".as_ptr(),
        ptr::null(),
    ];
    let mut values: [*mut ffi::PyObject; 6] = [ptr::null_mut(); 6];
    let [a, b, c, d, e, f] = &mut values;
    // SAFETY: `args` is a tuple and `kwargs` NULL or a dict (tp_new's contract); the format
    // names six objects, stored as borrowed references into the six pointers (left NULL when not
    // given); `names` is NULL-terminated.
    let parsed = unsafe {
        ffi::PyArg_ParseTupleAndKeywords(
            args,
            kwargs,
            c"O|OOOOO:Decision".as_ptr(),
            names.as_ptr() as _,
            a as *mut *mut ffi::PyObject,
            b as *mut *mut ffi::PyObject,
            c as *mut *mut ffi::PyObject,
            d as *mut *mut ffi::PyObject,
            e as *mut *mut ffi::PyObject,
            f as *mut *mut ffi::PyObject,
        )
    };
    if parsed == 0 {
        return ptr::null_mut();
    }
    // SAFETY: each non-NULL pointer is a reference borrowed from `args` or `kwargs`, which the
    // caller keeps alive for the call.
    let arg = |i: usize| unsafe { Borrowed::from_ptr_or_opt(py, values[i]) };
    let word = |i: usize, what| arg(i).map_or(Ok(0), |v| u64_arg(&v, what));
    let truth = |i: usize| arg(i).map_or(Ok(false), |v| v.is_truthy());
    let decision = (|| {
        Ok(Decision {
            allowed: truth(0)?,
            shadow_denied: truth(3)?,
            unavailable: truth(4)?,
            remaining: word(1, "remaining")?,
            retry_after_ns: word(2, "retry_after_ns")?,
            reset_after_ns: word(5, "reset_after_ns")?,
            grant: [0; 2],
            origin: 0,
        })
    })();
    to_ptr(py, decision)
}

/// `nb_bool`: allowed.
unsafe extern "C" fn bool_(obj: *mut ffi::PyObject) -> c_int {
    // SAFETY: `obj` is an instance (the slot's contract).
    c_int::from(unsafe { value(obj) }.allowed)
}

/// `tp_repr`.
unsafe extern "C" fn repr(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: attached, and `obj` is an instance (the slot's contract).
    let (py, d) = unsafe { (Python::assume_attached(), value(obj)) };
    let text = format!(
        "Decision(allowed={}, remaining={}, retry_after_ns={}{}{})",
        if d.allowed { "True" } else { "False" },
        d.remaining,
        d.retry_after_ns,
        if d.shadow_denied {
            ", shadow_denied=True"
        } else {
            ""
        },
        if d.unavailable {
            ", unavailable=True"
        } else {
            ""
        },
    );
    to_ptr(py, Ok(text))
}

/// The properties, in the order of [`PROPERTIES`]; the getter's closure is the index.
#[derive(Clone, Copy)]
enum Property {
    Allowed,
    Denied,
    ShadowDenied,
    Unavailable,
    Remaining,
    RetryAfterNs,
    RetryAfter,
    ResetAfterNs,
    ResetAfter,
    Cost,
    Raw,
}

/// `(name, property, docstring)` of each property.
const PROPERTIES: &[(&CStr, Property, &CStr)] = &[
    (c"allowed", Property::Allowed, c"True when admitted (the cost consumed, except for peeks)."),
    (c"denied", Property::Denied, c"not allowed"),
    (
        c"shadow_denied",
        Property::ShadowDenied,
        c"True when a shadow (dry-run) limit would have denied (allowed anyway, nothing consumed).",
    ),
    (
        c"unavailable",
        Property::Unavailable,
        c"True for a guarded decision its fail-open / fail-closed policy made (it took nothing).",
    ),
    (
        c"remaining",
        Property::Remaining,
        c"Units that could still be admitted right now after this decision.",
    ),
    (
        c"retry_after_ns",
        Property::RetryAfterNs,
        c"Nanoseconds until the same request could be admitted (0 when allowed).",
    ),
    (c"retry_after", Property::RetryAfter, c"retry_after_ns in seconds (a float)."),
    (
        c"reset_after_ns",
        Property::ResetAfterNs,
        c"Nanoseconds until the limit is back to its whole budget if nothing else is admitted (the \
          core's value: the t of the RateLimit header); 0 for permits.",
    ),
    (c"reset_after", Property::ResetAfter, c"reset_after_ns in seconds (a float)."),
    (c"cost", Property::Cost, c"The units this decision took (0 for denials and peeks)."),
    (c"_raw", Property::Raw, c"The decision's bytes (what pickling carries)."),
];

/// The getter of every property: `closure` is its index in [`PROPERTIES`].
unsafe extern "C" fn get(obj: *mut ffi::PyObject, closure: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: attached, and `obj` is an instance (the slot's contract).
    let (py, d) = unsafe { (Python::assume_attached(), value(obj)) };
    let Some(&(_, property, _)) = PROPERTIES.get(closure as usize) else {
        return to_ptr(
            py,
            Err::<bool, _>(PyValueError::new_err("no such property")),
        );
    };
    let secs = |ns: u64| ns as f64 / 1e9;
    match property {
        Property::Allowed => to_ptr(py, Ok(d.allowed)),
        Property::Denied => to_ptr(py, Ok(!d.allowed)),
        Property::ShadowDenied => to_ptr(py, Ok(d.shadow_denied)),
        Property::Unavailable => to_ptr(py, Ok(d.unavailable)),
        Property::Remaining => to_ptr(py, Ok(d.remaining)),
        Property::RetryAfterNs => to_ptr(py, Ok(d.retry_after_ns)),
        Property::RetryAfter => to_ptr(py, Ok(secs(d.retry_after_ns))),
        Property::ResetAfterNs => to_ptr(py, Ok(d.reset_after_ns)),
        Property::ResetAfter => to_ptr(py, Ok(secs(d.reset_after_ns))),
        Property::Cost => to_ptr(py, Ok(if d.allowed { d.grant[0] } else { 0 })),
        Property::Raw => to_ptr(py, Ok(PyBytes::new(py, &d.raw()))),
    }
}

/// `Decision._from_raw(raw)` (a class method): the Decision of `_raw`'s bytes.
unsafe extern "C" fn from_raw(
    _cls: *mut ffi::PyObject,
    raw: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: attached (a method call).
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `raw` is a reference borrowed for the call.
    let raw = unsafe { Borrowed::from_ptr(py, raw) };
    let decision = match raw.cast::<PyBytes>() {
        Ok(bytes) => Decision::from_raw(bytes.as_bytes()),
        Err(e) => Err(e.into()),
    };
    to_ptr(py, decision)
}

/// `Decision.__reduce__()`: pickling (multiprocessing returns decisions across processes) as
/// `Decision._from_raw(bytes)`.
unsafe extern "C" fn reduce(obj: *mut ffi::PyObject, _: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: attached, and `obj` is an instance (the method descriptor checked it).
    let (py, d) = unsafe { (Python::assume_attached(), value(obj)) };
    // SAFETY: `obj` is a live object borrowed for the call.
    let this = unsafe { Borrowed::from_ptr(py, obj) };
    let result = this
        .get_type()
        .getattr("_from_raw")
        .map(|from_raw| (from_raw, (PyBytes::new(py, &d.raw()),)));
    to_ptr(py, result)
}

const DOC: &CStr = c"The outcome of one decision; true in a boolean context when allowed.\n\n\
A granted decision carries its grant record: Limit.refund(decision) gives it back.";

/// Make the type and add it to the module as `Decision` (its name: `shmlimit.Decision`).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    if !type_ptr().is_null() {
        // Initialised once per process (a second import of the module reuses the type).
        // SAFETY: the type object lives for the process (a reference kept in TYPE).
        let ty = unsafe { Borrowed::from_ptr(py, type_ptr().cast()) };
        return m.add("Decision", ty);
    }
    // The tables live as long as the type, which lives for the process: leaked once.
    let mut getset: Vec<ffi::PyGetSetDef> = PROPERTIES
        .iter()
        .enumerate()
        .map(|(i, &(name, _, doc))| ffi::PyGetSetDef {
            name: name.as_ptr(),
            get: Some(get),
            set: None,
            doc: doc.as_ptr(),
            closure: i as *mut c_void,
        })
        .collect();
    getset.push(ffi::PyGetSetDef::default());
    let methods: Vec<ffi::PyMethodDef> = vec![
        ffi::PyMethodDef {
            ml_name: c"_from_raw".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunction: from_raw,
            },
            ml_flags: ffi::METH_O | ffi::METH_CLASS,
            ml_doc: c"A Decision from the bytes of `_raw`.".as_ptr(),
        },
        ffi::PyMethodDef {
            ml_name: c"__reduce__".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunction: reduce,
            },
            ml_flags: ffi::METH_NOARGS,
            ml_doc: c"Pickling: the bytes of `_raw`.".as_ptr(),
        },
        ffi::PyMethodDef::zeroed(),
    ];
    let getset = Box::leak(getset.into_boxed_slice());
    let methods = Box::leak(methods.into_boxed_slice());
    let slot = |slot, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
    let slots = Box::leak(Box::new([
        slot(ffi::Py_tp_dealloc, dealloc as *mut c_void),
        slot(ffi::Py_tp_new, new as *mut c_void),
        slot(ffi::Py_tp_repr, repr as *mut c_void),
        slot(ffi::Py_nb_bool, bool_ as *mut c_void),
        slot(ffi::Py_tp_getset, getset.as_mut_ptr().cast()),
        slot(ffi::Py_tp_methods, methods.as_mut_ptr().cast()),
        slot(ffi::Py_tp_doc, DOC.as_ptr() as *mut c_void),
        slot(0, ptr::null_mut()),
    ]));
    let spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: c"shmlimit.Decision".as_ptr(),
        basicsize: std::mem::size_of::<DecisionObject>() as c_int,
        itemsize: 0,
        // Not a base type: every instance's layout is DecisionObject, which `of` relies on.
        flags: ffi::Py_TPFLAGS_DEFAULT as _,
        slots: slots.as_mut_ptr(),
    }));
    // SAFETY: `spec` and the tables it points to are valid for the process; the result is a
    // new reference to the type or NULL with an error set.
    let ty = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec)) }?;
    m.add("Decision", &ty)?;
    // Release: pairs with the Acquire load of `type_ptr`; the reference is kept for ever.
    TYPE.store(ty.into_ptr().cast(), Ordering::Release);
    Ok(())
}
