//! Failures, raised as the package's exception classes.
//!
//! The classes live in `shmlimit/errors.py`, one per row of `shmlimit_bindings::status::STATUSES`
//! (exported here as `STATUSES`, which the package checks its classes against at import);
//! `_configure` hands this module the factory that builds the exception of a status code, and the
//! classes of the refusals made before any call (a closed handle, a negative integer, one above
//! 2**64 - 1). A library error is raised as its code's class with the library's message, prefixed
//! by the operation's name in the C ABI's terms (`shmlimit_limiter_open: ...`), so that a message
//! reads the same from every language.

use std::sync::OnceLock;

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple};
use shmlimit_bindings::status::{code_of, os_error_of, Family, STATUSES};

/// What `_configure` was given.
struct Classes {
    factory: Py<PyAny>,
    closed: Py<PyAny>,
    value: Py<PyAny>,
    overflow: Py<PyAny>,
}

static CLASSES: OnceLock<Classes> = OnceLock::new();

/// `_configure(error_factory, closed_error, value_error, overflow_error)`: how errors are raised.
/// `error_factory(code, message, errno)` returns the exception of a status code.
#[pyfunction]
#[pyo3(name = "_configure")]
fn configure(
    error_factory: Py<PyAny>,
    closed_error: Py<PyAny>,
    value_error: Py<PyAny>,
    overflow_error: Py<PyAny>,
) -> PyResult<()> {
    CLASSES
        .set(Classes {
            factory: error_factory,
            closed: closed_error,
            value: value_error,
            overflow: overflow_error,
        })
        .map_err(|_| PyRuntimeError::new_err("shmlimit._native is configured once, at import"))
}

/// The exception of status `code` with `message` (and `errno` for an OS error).
pub(crate) fn status_error(code: i32, message: String, errno: i32) -> PyErr {
    Python::attach(|py| {
        let Some(classes) = CLASSES.get() else {
            return PyRuntimeError::new_err(format!("shmlimit status {code}: {message}"));
        };
        match classes.factory.call1(py, (code, &message, errno)) {
            Ok(exc) => PyErr::from_value(exc.into_bound(py)),
            Err(e) => e,
        }
    })
}

/// A library error raised by operation `op`.
pub(crate) fn raise(op: &str, error: shmlimit::Error) -> PyErr {
    status_error(
        code_of(&error),
        format!("{op}: {error}"),
        os_error_of(&error),
    )
}

/// `Result` of the library into `PyResult`, naming the operation.
pub(crate) trait OrRaise<T> {
    /// The value, or the error raised as `op`'s.
    fn or_raise(self, op: &str) -> PyResult<T>;
}

impl<T> OrRaise<T> for shmlimit::Result<T> {
    fn or_raise(self, op: &str) -> PyResult<T> {
        self.map_err(|e| raise(op, e))
    }
}

/// ClosedError: `what` (`"Limit"`, `"Limiter"`, ...) was closed.
pub(crate) fn closed(what: &str) -> PyErr {
    let message = format!("{what} is closed");
    Python::attach(|py| match CLASSES.get() {
        Some(c) => PyErr::from_type(
            c.closed
                .bind(py)
                .cast::<pyo3::types::PyType>()
                .map_or_else(|_| py.get_type::<PyValueError>(), |t| t.clone()),
            message,
        ),
        None => PyValueError::new_err(message),
    })
}

/// An unsigned 64-bit argument: an int (not a bool), 0 to 2**64 - 1, with the caller's value in
/// the message (InvalidParameterError when negative, ParameterOverflowError above).
pub(crate) fn u64_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            value.get_type().name()?
        )));
    }
    if let Ok(v) = value.extract::<u64>() {
        return Ok(v);
    }
    let py = value.py();
    let negative = value.lt(0)?;
    let (class, message) = match CLASSES.get() {
        Some(c) if negative => (
            Some(c.value.bind(py)),
            format!("{what}={value} is negative"),
        ),
        Some(c) => (
            Some(c.overflow.bind(py)),
            format!("{what}={value} exceeds 2**64 - 1"),
        ),
        None => (None, format!("{what}={value} is out of range")),
    };
    Err(
        match class.and_then(|c| c.cast::<pyo3::types::PyType>().ok()) {
            Some(class) => PyErr::from_type(class.clone(), message),
            None if negative => PyValueError::new_err(message),
            None => PyOverflowError::new_err(message),
        },
    )
}

/// The table as Python sees it: `(code, name, class, family, description)` rows, where `family`
/// names the built-in exception the class also derives from (`""` for none).
fn statuses(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    let rows = STATUSES.iter().filter(|s| s.code != 0).map(|s| {
        let family = match s.family {
            Family::None => "",
            Family::Value => "ValueError",
            Family::Index => "IndexError",
            Family::Os => "OSError",
            Family::Lookup => "LookupError",
            Family::Type => "TypeError",
        };
        (
            s.code,
            s.name,
            s.class,
            family,
            s.description.to_string_lossy().into_owned(),
        )
    });
    PyTuple::new(py, rows.collect::<Vec<_>>())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("STATUSES", statuses(m.py())?)?;
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    Ok(())
}

/// InternalError for a panic caught in a call of `op` (the slots and methods written against
/// `pyo3::ffi` catch their own panics).
#[cold]
pub(crate) fn caught(op: &str, panic: Box<dyn std::any::Any + Send>) -> PyErr {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    status_error(
        shmlimit_bindings::status::INTERNAL,
        format!("{op}: internal error (a bug in shmlimit was caught): {text}"),
        0,
    )
}
