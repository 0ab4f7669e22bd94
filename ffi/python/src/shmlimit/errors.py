"""The exception classes: one per status code of the library, and the few this package raises
itself before any call.

The codes, the descriptions and the list of classes come from the table in Rust
(``shmlimit_bindings::status``, exported as ``_native.STATUSES``): each class below gets its
``code`` and docstring from its row at import, and the import fails if a row has no class here or
a class derives from another built-in exception than its row says (a drift between the table and
this file). The C header's enum is checked against the same table (``ffi/src/status.rs``).
"""

from __future__ import annotations

import errno as _errno
from typing import Dict, Optional, Type

from . import _native

class ShmlimitError(Exception):
    """A failed shmlimit call. ``code`` is the status code, ``message`` the library's detail."""

    code: int = -1

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ClosedError(ShmlimitError, ValueError):
    """The handle was closed (raised by the package; no call is made)."""


class NullPointerError(ShmlimitError):
    ...


class BadUtf8Error(ShmlimitError, ValueError):
    ...


class InternalError(ShmlimitError):
    ...


class BadLengthError(ShmlimitError, ValueError):
    ...


class MisalignedPointerError(ShmlimitError):
    ...


class OutOfRangeError(ShmlimitError, IndexError):
    ...


class IoError(ShmlimitError, OSError):
    """An operating-system call failed; ``errno`` is its error number."""



class SymlinkError(ShmlimitError):
    ...


class NotRegularFileError(ShmlimitError):
    ...


class PermissionDeniedError(ShmlimitError):
    """The file's owner or mode is not acceptable under the open options."""



class ForeignFileError(ShmlimitError):
    ...


class VersionError(ShmlimitError):
    ...


class SizeError(ShmlimitError):
    ...


class CorruptFileError(ShmlimitError):
    ...


class NotInitializedError(ShmlimitError):
    ...


class ClockMismatchError(ShmlimitError):
    ...


class DefinitionConflictError(ShmlimitError):
    ...


class InvalidParameterError(ShmlimitError, ValueError):
    ...


class UnknownLimitError(ShmlimitError, LookupError):
    ...


class ZeroCostError(ShmlimitError, ValueError):
    ...


class CostExceedsCapacityError(ShmlimitError, ValueError):
    ...


class CorruptStateError(ShmlimitError):
    ...


class ClockOutOfRangeError(ShmlimitError):
    ...


class TableFullError(ShmlimitError):
    ...


class InvalidKeyError(ShmlimitError, ValueError):
    ...


class ParameterOverflowError(InvalidParameterError, OverflowError):
    """An integer argument above what its C parameter holds (raised by this module before any
    call; an InvalidParameterError and an OverflowError)."""


class WrongKindError(ShmlimitError, TypeError):
    """The operation does not apply to this kind of limit."""


class PermitUnavailableError(ShmlimitError, TimeoutError):
    """No permit became free in time (raised by ``Limit.permit()``; not a status code)."""

    code = -2


_FAMILIES: Dict[str, Type[BaseException]] = {
    "": Exception, "ValueError": ValueError, "IndexError": IndexError, "OSError": OSError,
    "LookupError": LookupError, "TypeError": TypeError,
}


def _from_table() -> Dict[int, Type[ShmlimitError]]:
    """Every status class by code, given its code and docstring from the native table."""
    classes: Dict[int, Type[ShmlimitError]] = {}
    for code, name, class_name, family, description in _native.STATUSES:
        cls = globals().get(class_name)
        if not (isinstance(cls, type) and issubclass(cls, ShmlimitError)):
            raise ImportError(f"shmlimit: status {code} ({name}) has no class {class_name} in "
                              "shmlimit/errors.py: the package and its compiled module disagree")
        base = _FAMILIES[family]
        if base is not Exception and base not in cls.__bases__:
            raise ImportError(f"shmlimit: {class_name} must derive from {base.__name__} "
                              f"(status {code} in the compiled module's table)")
        cls.code = code
        if cls.__doc__ is None:
            cls.__doc__ = description[:1].upper() + description[1:] + "."
        classes[code] = cls
    return classes


_ERRORS: Dict[int, Type[ShmlimitError]] = _from_table()

_IO_ERRORS: Dict[Type[OSError], Type[IoError]] = {}


def _io_error_class(os_errno: int) -> Type[IoError]:
    """IoError, or for an errno Python maps to an OSError subclass (ENOENT: FileNotFoundError,
    EACCES/EPERM: PermissionError, ...) a class deriving from both IoError and that subclass."""
    sub = type(OSError(os_errno, "")) if os_errno else OSError
    if sub is OSError:
        return IoError
    cls = _IO_ERRORS.get(sub)
    if cls is None:
        cls = type(f"IoError_{sub.__name__}", (IoError, sub), {
            "__doc__": f"IoError for errno {_errno.errorcode.get(os_errno, os_errno)}: also a "
                       f"{sub.__name__}.",
            "__module__": "shmlimit",
        })
        _IO_ERRORS[sub] = cls
    return cls


def _error(status: int, message: str, os_errno: int = 0) -> ShmlimitError:
    """The exception for a failed call's status code (the compiled module raises these)."""
    cls = _ERRORS.get(status, ShmlimitError)
    if cls is IoError:
        cls = _io_error_class(os_errno)
    error = cls(message, status)
    if isinstance(error, IoError):
        error.errno = os_errno or None
        error.strerror = message
    return error


_native._configure(_error, ClosedError, InvalidParameterError, ParameterOverflowError)
