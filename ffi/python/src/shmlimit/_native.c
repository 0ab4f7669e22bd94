/*
 * shmlimit._native: the hot path of the Python package, a CPython extension over the C header
 * (ffi/include/shmlimit.h) linked against libshmlimit.so. It implements no algorithm: each
 * decision is one call of the C ABI. What it adds over ctypes is the cost of getting there: the
 * arguments are converted and checked in C, the decision struct lives inside the Python object
 * that reports it, and no ctypes marshalling runs.
 *
 *   Decision      the outcome of one decision (wraps a shmlimit_decision)
 *   LimitBase     base of shmlimit.Limit: try_acquire, peek, try_acquire_key, peek_key
 *   Composed      the outcome of try_acquire_all (wraps a shmlimit_composed)
 *   try_acquire_all(*checks)
 *
 * The non-waiting decisions keep the GIL: they take tens of nanoseconds, less than releasing
 * and taking it back. Everything else in the package (creating files, waiting calls...) goes
 * through ctypes on the same loaded library and releases the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "shmlimit.h"

/* Set by shmlimit/__init__.py through _configure(): builds the exception for a status code,
 * and the class raised for a closed handle. */
static PyObject *error_factory = NULL;
static PyObject *closed_error = NULL;
/* Raised for a negative integer argument (a ValueError) and one above 2**64 - 1 (an
 * OverflowError). */
static PyObject *value_error = NULL;
static PyObject *overflow_error = NULL;

/* Raise the exception of a failed call, with this thread's last-error detail. */
static PyObject *raise_status(int32_t status) {
    const char *msg = shmlimit_last_error();
    int32_t os_error = shmlimit_last_os_error();
    PyObject *text, *exc;
    if (msg == NULL || msg[0] == '\0') {
        msg = shmlimit_strerror(status);
    }
    text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (text == NULL) {
        return NULL;
    }
    if (error_factory == NULL) {
        PyErr_Format(PyExc_RuntimeError, "shmlimit status %d: %U", (int)status, text);
        Py_DECREF(text);
        return NULL;
    }
    exc = PyObject_CallFunction(error_factory, "iOi", (int)status, text, (int)os_error);
    Py_DECREF(text);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Raise the exception of `status` with this message (for refusals made here, before any
 * call: the library's last error would describe an older failure). */
static PyObject *raise_with(int32_t status, const char *msg) {
    PyObject *text, *exc;
    if (error_factory == NULL) {
        PyErr_SetString(PyExc_RuntimeError, msg);
        return NULL;
    }
    text = PyUnicode_FromString(msg);
    if (text == NULL) {
        return NULL;
    }
    exc = PyObject_CallFunction(error_factory, "iOi", (int)status, text, 0);
    Py_DECREF(text);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* An unsigned 64-bit argument: only an int (not a bool), 0 to 2**64 - 1, with errors naming
 * the caller's value. */
static int u64_arg(PyObject *v, const char *what, uint64_t *out) {
    unsigned long long x;
    if (!PyLong_CheckExact(v) && (!PyLong_Check(v) || PyBool_Check(v))) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(v)->tp_name);
        return -1;
    }
    x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        int negative;
        PyErr_Clear();
        negative = PyObject_RichCompareBool(v, Py_False, Py_LT); /* v < 0 */
        if (negative < 0) {
            return -1;
        }
        if (negative) {
            PyErr_Format(value_error ? value_error : PyExc_ValueError, "%s=%R is negative", what, v);
        } else {
            PyErr_Format(overflow_error ? overflow_error : PyExc_OverflowError,
                         "%s=%R exceeds 2**64 - 1", what, v);
        }
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

/* A key: str (its UTF-8 bytes) or a bytes-like object. The view borrows `v`. */
typedef struct {
    const uint8_t *ptr;
    Py_ssize_t len;
    Py_buffer view;
    int has_view;
} key_arg;

static int key_get(PyObject *v, key_arg *k) {
    k->has_view = 0;
    if (PyUnicode_Check(v)) {
        const char *s = PyUnicode_AsUTF8AndSize(v, &k->len);
        if (s == NULL) {
            return -1;
        }
        k->ptr = (const uint8_t *)s;
        return 0;
    }
    if (PyBytes_Check(v)) {
        k->ptr = (const uint8_t *)PyBytes_AS_STRING(v);
        k->len = PyBytes_GET_SIZE(v);
        return 0;
    }
    if (PyObject_CheckBuffer(v) && PyObject_GetBuffer(v, &k->view, PyBUF_SIMPLE) == 0) {
        k->has_view = 1;
        k->ptr = (const uint8_t *)k->view.buf;
        k->len = k->view.len;
        return 0;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "a key is str or bytes, not %.100s", Py_TYPE(v)->tp_name);
    return -1;
}

static void key_release(key_arg *k) {
    if (k->has_view) {
        PyBuffer_Release(&k->view);
        k->has_view = 0;
    }
}

/* Positional and keyword arguments of a METH_FASTCALL | METH_KEYWORDS method, by name, into
 * `out` (NULL when absent). */
static int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *fname,
                 const char *const *names, Py_ssize_t nnames, Py_ssize_t required, PyObject **out) {
    Py_ssize_t i, j;
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", fname, nnames,
                     nargs);
        return -1;
    }
    for (i = 0; i < nnames; i++) {
        out[i] = i < nargs ? args[i] : NULL;
    }
    if (kwnames != NULL) {
        for (j = 0; j < PyTuple_GET_SIZE(kwnames); j++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, j);
            int found = 0;
            for (i = 0; i < nnames; i++) {
                if (PyUnicode_CompareWithASCIIString(name, names[i]) == 0) {
                    if (out[i] != NULL) {
                        PyErr_Format(PyExc_TypeError, "%s() got multiple values for '%s'", fname,
                                     names[i]);
                        return -1;
                    }
                    out[i] = args[nargs + j];
                    found = 1;
                    break;
                }
            }
            if (!found) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                             name);
                return -1;
            }
        }
    }
    for (i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname, names[i]);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Decision */

typedef struct {
    PyObject_HEAD
    shmlimit_decision d;
} DecisionObject;

static PyTypeObject DecisionType;

static PyObject *decision_new_from(const shmlimit_decision *d) {
    DecisionObject *self = PyObject_New(DecisionObject, &DecisionType);
    if (self != NULL) {
        self->d = *d;
    }
    return (PyObject *)self;
}

static PyObject *Decision_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"allowed", "remaining", "retry_after_ns", "shadow_denied",
                            "unavailable", "reset_after_ns", NULL};
    int allowed = 0, shadow = 0, unavailable = 0;
    PyObject *remaining = NULL, *retry = NULL, *reset = NULL;
    DecisionObject *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "p|OOppO:Decision", names, &allowed, &remaining,
                                     &retry, &shadow, &unavailable, &reset)) {
        return NULL;
    }
    self = (DecisionObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    memset(&self->d, 0, sizeof self->d);
    self->d.allowed = allowed != 0;
    self->d.shadow_denied = shadow != 0;
    self->d.reserved[0] = unavailable ? SHMLIMIT_DECISION_UNAVAILABLE : 0;
    if ((remaining != NULL && u64_arg(remaining, "remaining", &self->d.remaining) < 0) ||
        (retry != NULL && u64_arg(retry, "retry_after_ns", &self->d.retry_after_ns) < 0) ||
        (reset != NULL && u64_arg(reset, "reset_after_ns", &self->d.reset_after_ns) < 0)) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *Decision_from_raw(PyObject *cls, PyObject *raw) {
    Py_buffer view;
    shmlimit_decision d;
    (void)cls;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len != (Py_ssize_t)sizeof d) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "a shmlimit_decision is %zu bytes, not %zd", sizeof d,
                     view.len);
        return NULL;
    }
    memcpy(&d, view.buf, sizeof d);
    PyBuffer_Release(&view);
    return decision_new_from(&d);
}

#define SELF_D (((DecisionObject *)self)->d)

static PyObject *Decision_raw(PyObject *self, void *c) {
    (void)c;
    return PyBytes_FromStringAndSize((const char *)&SELF_D, sizeof SELF_D);
}
static PyObject *Decision_allowed(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(SELF_D.allowed);
}
static PyObject *Decision_denied(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(!SELF_D.allowed);
}
static PyObject *Decision_shadow(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(SELF_D.shadow_denied);
}
static PyObject *Decision_unavailable(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong((SELF_D.reserved[0] & SHMLIMIT_DECISION_UNAVAILABLE) != 0);
}
static PyObject *Decision_remaining(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(SELF_D.remaining);
}
static PyObject *Decision_retry_after_ns(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(SELF_D.retry_after_ns);
}
static PyObject *Decision_retry_after(PyObject *self, void *c) {
    (void)c;
    return PyFloat_FromDouble((double)SELF_D.retry_after_ns / 1e9);
}
static PyObject *Decision_reset_after_ns(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(SELF_D.reset_after_ns);
}
static PyObject *Decision_reset_after(PyObject *self, void *c) {
    (void)c;
    return PyFloat_FromDouble((double)SELF_D.reset_after_ns / 1e9);
}
static PyObject *Decision_cost(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(SELF_D.allowed ? SELF_D.grant[0] : 0);
}

static int Decision_bool(PyObject *self) { return SELF_D.allowed; }

static PyObject *Decision_repr(PyObject *self) {
    return PyUnicode_FromFormat("Decision(allowed=%s, remaining=%llu, retry_after_ns=%llu%s%s)",
                                SELF_D.allowed ? "True" : "False",
                                (unsigned long long)SELF_D.remaining,
                                (unsigned long long)SELF_D.retry_after_ns,
                                SELF_D.shadow_denied ? ", shadow_denied=True" : "",
                                (SELF_D.reserved[0] & SHMLIMIT_DECISION_UNAVAILABLE)
                                    ? ", unavailable=True"
                                    : "");
}

static PyGetSetDef Decision_getset[] = {
    {"allowed", Decision_allowed, NULL, "True when admitted (the cost consumed, except for peeks).",
     NULL},
    {"denied", Decision_denied, NULL, "not allowed", NULL},
    {"shadow_denied", Decision_shadow, NULL,
     "True when a shadow (dry-run) limit would have denied (allowed anyway, nothing consumed).",
     NULL},
    {"unavailable", Decision_unavailable, NULL,
     "True for a guarded decision its fail-open / fail-closed policy made (it took nothing).",
     NULL},
    {"remaining", Decision_remaining, NULL,
     "Units that could still be admitted right now after this decision.", NULL},
    {"retry_after_ns", Decision_retry_after_ns, NULL,
     "Nanoseconds until the same request could be admitted (0 when allowed).", NULL},
    {"retry_after", Decision_retry_after, NULL, "retry_after_ns in seconds (a float).", NULL},
    {"reset_after_ns", Decision_reset_after_ns, NULL,
     "Nanoseconds until the limit is back to its whole budget if nothing else is admitted "
     "(the core's value: the t of the RateLimit header); 0 for permits.",
     NULL},
    {"reset_after", Decision_reset_after, NULL, "reset_after_ns in seconds (a float).", NULL},
    {"cost", Decision_cost, NULL, "The units this decision took (0 for denials and peeks).", NULL},
    {"_raw", Decision_raw, NULL, "The shmlimit_decision struct's bytes.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Pickling (multiprocessing returns decisions across processes): the struct's bytes. */
static PyObject *Decision_reduce(PyObject *self, PyObject *unused) {
    PyObject *from_raw, *raw, *result;
    (void)unused;
    from_raw = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "_from_raw");
    if (from_raw == NULL) {
        return NULL;
    }
    raw = PyBytes_FromStringAndSize((const char *)&SELF_D, sizeof SELF_D);
    if (raw == NULL) {
        Py_DECREF(from_raw);
        return NULL;
    }
    result = Py_BuildValue("(N(N))", from_raw, raw);
    return result;
}

static PyMethodDef Decision_methods[] = {
    {"_from_raw", Decision_from_raw, METH_O | METH_CLASS,
     "A Decision from a shmlimit_decision struct's bytes."},
    {"__reduce__", Decision_reduce, METH_NOARGS, "Pickle support."},
    {NULL, NULL, 0, NULL},
};

static PyNumberMethods Decision_as_number = {.nb_bool = Decision_bool};

static PyTypeObject DecisionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmlimit.Decision",
    .tp_basicsize = sizeof(DecisionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The outcome of one decision; true in a boolean context when allowed.\n\n"
              "A granted decision carries its grant record: Limit.refund(decision) gives it back.",
    .tp_new = Decision_new,
    .tp_repr = Decision_repr,
    .tp_as_number = &Decision_as_number,
    .tp_getset = Decision_getset,
    .tp_methods = Decision_methods,
};

/* ------------------------------------------------------------------------------------------ */
/* LimitBase */

typedef struct {
    PyObject_HEAD
    shmlimit_limit *ptr;
    PyObject *weakrefs;
    PyObject *dict;
} LimitObject;

static PyTypeObject LimitType;

static shmlimit_limit *live(PyObject *self) {
    shmlimit_limit *ptr = ((LimitObject *)self)->ptr;
    if (ptr == NULL) {
        PyErr_SetString(closed_error ? closed_error : PyExc_ValueError, "Limit is closed");
    }
    return ptr;
}

static void Limit_dealloc(PyObject *self) {
    LimitObject *l = (LimitObject *)self;
    PyObject_GC_UnTrack(self);
    if (l->weakrefs != NULL) {
        PyObject_ClearWeakRefs(self);
    }
    if (l->ptr != NULL) {
        shmlimit_limit_free(l->ptr);
        l->ptr = NULL;
    }
    Py_CLEAR(l->dict);
    Py_TYPE(self)->tp_free(self);
}

/* A static type: its instances need not visit their type; a Python subclass's instances are
 * visited by subtype_traverse, which visits the (heap) type itself before calling this. */
static int Limit_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((LimitObject *)self)->dict);
    return 0;
}

static int Limit_clear(PyObject *self) {
    Py_CLEAR(((LimitObject *)self)->dict);
    return 0;
}

/* _attach(address): take ownership of a shmlimit_limit handle (freed by _close or dealloc). */
static PyObject *Limit_attach(PyObject *self, PyObject *address) {
    void *ptr = PyLong_AsVoidPtr(address);
    if (ptr == NULL && PyErr_Occurred()) {
        return NULL;
    }
    if (((LimitObject *)self)->ptr != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this Limit already holds a handle");
        return NULL;
    }
    ((LimitObject *)self)->ptr = (shmlimit_limit *)ptr;
    Py_RETURN_NONE;
}

/* close(): free the handle (idempotent). */
static PyObject *Limit_close(PyObject *self, PyObject *unused) {
    LimitObject *l = (LimitObject *)self;
    shmlimit_limit *ptr = l->ptr;
    (void)unused;
    l->ptr = NULL;
    if (ptr != NULL) {
        shmlimit_limit_free(ptr);
    }
    Py_RETURN_NONE;
}

static PyObject *Limit_ptr(PyObject *self, void *c) {
    (void)c;
    if (live(self) == NULL) {
        return NULL;
    }
    return PyLong_FromVoidPtr(((LimitObject *)self)->ptr);
}

static PyObject *Limit_closed(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(((LimitObject *)self)->ptr == NULL);
}

static const char *const cost_names[] = {"cost"};
static const char *const key_cost_names[] = {"key", "cost"};

typedef shmlimit_status (*decide_fn)(const shmlimit_limit *, uint64_t, shmlimit_decision *);
typedef shmlimit_status (*decide_key_fn)(const shmlimit_limit *, const uint8_t *, size_t, uint64_t,
                                         shmlimit_decision *);

static PyObject *decide(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames, const char *fname, decide_fn fn) {
    PyObject *cost_obj;
    uint64_t cost = 1;
    shmlimit_decision d;
    shmlimit_limit *ptr;
    shmlimit_status status;
    if (nargs == 1 && kwnames == NULL) {
        cost_obj = args[0];
    } else if (parse(args, nargs, kwnames, fname, cost_names, 1, 0, &cost_obj) < 0) {
        return NULL;
    }
    if (cost_obj != NULL && u64_arg(cost_obj, "cost", &cost) < 0) {
        return NULL;
    }
    if ((ptr = live(self)) == NULL) {
        return NULL;
    }
    status = fn(ptr, cost, &d);
    if (status != SHMLIMIT_OK) {
        return raise_status(status);
    }
    return decision_new_from(&d);
}

static PyObject *decide_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames, const char *fname, decide_key_fn fn) {
    PyObject *a[2];
    uint64_t cost = 1;
    shmlimit_decision d;
    shmlimit_limit *ptr;
    shmlimit_status status;
    key_arg key;
    if (parse(args, nargs, kwnames, fname, key_cost_names, 2, 1, a) < 0) {
        return NULL;
    }
    if (a[1] != NULL && u64_arg(a[1], "cost", &cost) < 0) {
        return NULL;
    }
    if ((ptr = live(self)) == NULL || key_get(a[0], &key) < 0) {
        return NULL;
    }
    status = fn(ptr, key.ptr, (size_t)key.len, cost, &d);
    key_release(&key);
    if (status != SHMLIMIT_OK) {
        return raise_status(status);
    }
    return decision_new_from(&d);
}

static PyObject *Limit_try_acquire(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    return decide(self, args, nargs, kwnames, "try_acquire", shmlimit_acquire);
}
static PyObject *Limit_peek(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    return decide(self, args, nargs, kwnames, "peek", shmlimit_peek);
}
static PyObject *Limit_try_acquire_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames) {
    return decide_key(self, args, nargs, kwnames, "try_acquire_key", shmlimit_acquire_key);
}
static PyObject *Limit_peek_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    return decide_key(self, args, nargs, kwnames, "peek_key", shmlimit_peek_key);
}

static PyMethodDef Limit_methods[] = {
    {"try_acquire", (PyCFunction)(void (*)(void))Limit_try_acquire, METH_FASTCALL | METH_KEYWORDS,
     "try_acquire(cost=1) -> Decision\n\nAdmit `cost` units now, or deny and consume nothing."},
    {"peek", (PyCFunction)(void (*)(void))Limit_peek, METH_FASTCALL | METH_KEYWORDS,
     "peek(cost=1) -> Decision\n\nThe decision try_acquire(cost) would make now, consuming "
     "nothing."},
    {"try_acquire_key", (PyCFunction)(void (*)(void))Limit_try_acquire_key,
     METH_FASTCALL | METH_KEYWORDS,
     "try_acquire_key(key, cost=1) -> Decision\n\nAdmit `cost` units for `key` (str or bytes, 1 "
     "to MAX_KEY_LEN bytes) on a keyed limit, or deny and consume nothing."},
    {"peek_key", (PyCFunction)(void (*)(void))Limit_peek_key, METH_FASTCALL | METH_KEYWORDS,
     "peek_key(key, cost=1) -> Decision\n\nThe decision try_acquire_key would make now, "
     "consuming and inserting nothing."},
    {"_attach", Limit_attach, METH_O, "Take ownership of a shmlimit_limit handle."},
    {"close", Limit_close, METH_NOARGS,
     "Free the handle (idempotent). Using it afterwards raises ClosedError."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Limit_getset[] = {
    {"_ptr", Limit_ptr, NULL, "The handle's address (ClosedError when closed).", NULL},
    {"closed", Limit_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LimitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmlimit._native.LimitBase",
    .tp_basicsize = sizeof(LimitObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C part of shmlimit.Limit: its handle and its non-waiting decisions.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = Limit_dealloc,
    .tp_traverse = Limit_traverse,
    .tp_clear = Limit_clear,
    .tp_weaklistoffset = offsetof(LimitObject, weakrefs),
    .tp_dictoffset = offsetof(LimitObject, dict),
    .tp_methods = Limit_methods,
    .tp_getset = Limit_getset,
};

/* The RateLimit, RateLimit-Policy and Retry-After values the core renders for `n` decisions
 * made on `limits`: a tuple of three str (empty when the core leaves a field out). */
static PyObject *headers_of(const shmlimit_limit *const *limits, const shmlimit_decision *ds,
                            size_t n) {
    shmlimit_headers h;
    shmlimit_status status = shmlimit_ratelimit_headers(limits, ds, n, &h);
    if (status != SHMLIMIT_OK) {
        return raise_status(status);
    }
    return Py_BuildValue("(sss)", h.rate_limit, h.rate_limit_policy, h.retry_after);
}

/* ------------------------------------------------------------------------------------------ */
/* Composed */

typedef struct {
    PyObject_HEAD
    shmlimit_composed out;
    /* The checks as given: `limits[i]` (a LimitBase, kept alive) and `keys[i]` (a bytes object
     * or None), to refund with the same checks. */
    PyObject *limits[SHMLIMIT_MAX_CHECKS];
    PyObject *keys[SHMLIMIT_MAX_CHECKS];
    uint64_t costs[SHMLIMIT_MAX_CHECKS];
} ComposedObject;

static PyTypeObject ComposedType;

static void Composed_dealloc(PyObject *self) {
    ComposedObject *c = (ComposedObject *)self;
    uint32_t i;
    for (i = 0; i < SHMLIMIT_MAX_CHECKS; i++) {
        Py_CLEAR(c->limits[i]);
        Py_CLEAR(c->keys[i]);
    }
    PyObject_Free(self);
}

#define SELF_C ((ComposedObject *)self)

static PyObject *Composed_allowed(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(SELF_C->out.allowed);
}
static PyObject *Composed_denied(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(!SELF_C->out.allowed);
}
static PyObject *Composed_denied_by(PyObject *self, void *c) {
    (void)c;
    if (SELF_C->out.denied_by < 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(SELF_C->out.denied_by);
}
static PyObject *Composed_retry_after_ns(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(SELF_C->out.retry_after_ns);
}
static PyObject *Composed_retry_after(PyObject *self, void *c) {
    (void)c;
    return PyFloat_FromDouble((double)SELF_C->out.retry_after_ns / 1e9);
}
static PyObject *Composed_decisions(PyObject *self, void *c) {
    uint32_t i, n = SELF_C->out.count;
    PyObject *list = PyList_New(n);
    (void)c;
    if (list == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        const shmlimit_decision *d = &SELF_C->out.decisions[i];
        PyObject *item;
        if (!d->allowed && d->retry_after_ns == 0) {
            item = Py_None;
            Py_INCREF(item);
        } else {
            item = decision_new_from(d);
            if (item == NULL) {
                Py_DECREF(list);
                return NULL;
            }
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static int Composed_bool(PyObject *self) { return SELF_C->out.allowed; }

static PyObject *Composed_repr(PyObject *self) {
    if (SELF_C->out.denied_by < 0) {
        return PyUnicode_FromFormat("Composed(allowed=%s, denied_by=None, retry_after_ns=%llu)",
                                    SELF_C->out.allowed ? "True" : "False",
                                    (unsigned long long)SELF_C->out.retry_after_ns);
    }
    return PyUnicode_FromFormat("Composed(allowed=%s, denied_by=%d, retry_after_ns=%llu)",
                                SELF_C->out.allowed ? "True" : "False",
                                (int)SELF_C->out.denied_by,
                                (unsigned long long)SELF_C->out.retry_after_ns);
}

static PyObject *Composed_refund(PyObject *self, PyObject *unused) {
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    uint32_t i, n = SELF_C->out.count;
    shmlimit_status status;
    (void)unused;
    memset(checks, 0, sizeof checks);
    for (i = 0; i < n; i++) {
        shmlimit_limit *ptr = live(SELF_C->limits[i]);
        if (ptr == NULL) {
            return NULL;
        }
        checks[i].limit = ptr;
        checks[i].cost = SELF_C->costs[i];
        if (SELF_C->keys[i] != Py_None) {
            checks[i].key = (const uint8_t *)PyBytes_AS_STRING(SELF_C->keys[i]);
            checks[i].key_len = (size_t)PyBytes_GET_SIZE(SELF_C->keys[i]);
        }
    }
    status = shmlimit_refund_all(checks, n, &SELF_C->out);
    if (status != SHMLIMIT_OK) {
        return raise_status(status);
    }
    Py_RETURN_NONE;
}

/* _header_values(): the header values of this outcome. A check whose slot holds no decision (a
 * grant given back because a later check denied, or a failed peek) is peeked now, with its key
 * and cost, so that every limit reports its real state. */
static PyObject *Composed_header_values(PyObject *self, PyObject *unused) {
    const shmlimit_limit *limits[SHMLIMIT_MAX_CHECKS];
    shmlimit_decision ds[SHMLIMIT_MAX_CHECKS];
    uint32_t i, n = SELF_C->out.count;
    (void)unused;
    if (n == 0) {
        return Py_BuildValue("(sss)", "", "", "");
    }
    for (i = 0; i < n; i++) {
        shmlimit_limit *ptr = live(SELF_C->limits[i]);
        if (ptr == NULL) {
            return NULL;
        }
        limits[i] = ptr;
        ds[i] = SELF_C->out.decisions[i];
        if (!ds[i].allowed && ds[i].retry_after_ns == 0) {
            shmlimit_status status;
            if (SELF_C->keys[i] != Py_None) {
                status = shmlimit_peek_key(ptr, (const uint8_t *)PyBytes_AS_STRING(SELF_C->keys[i]),
                                           (size_t)PyBytes_GET_SIZE(SELF_C->keys[i]),
                                           SELF_C->costs[i], &ds[i]);
            } else {
                status = shmlimit_peek(ptr, SELF_C->costs[i], &ds[i]);
            }
            if (status != SHMLIMIT_OK) {
                return raise_status(status);
            }
        }
    }
    return headers_of(limits, ds, n);
}

static PyGetSetDef Composed_getset[] = {
    {"allowed", Composed_allowed, NULL, "True when every limit admitted (and the costs were taken).",
     NULL},
    {"denied", Composed_denied, NULL, "not allowed", NULL},
    {"denied_by", Composed_denied_by, NULL,
     "The index of the first check that denied; None when allowed.", NULL},
    {"retry_after_ns", Composed_retry_after_ns, NULL,
     "The largest retry-after among the limits that would deny now (0 when allowed).", NULL},
    {"retry_after", Composed_retry_after, NULL, "retry_after_ns in seconds.", NULL},
    {"decisions", Composed_decisions, NULL,
     "Each check's Decision: its grant when allowed; when denied the denial at denied_by and the "
     "peeks after it; None for a grant given back because a later check denied.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Composed_methods[] = {
    {"_header_values", Composed_header_values, METH_NOARGS,
     "(RateLimit, RateLimit-Policy, Retry-After) values of this outcome, as the core renders "
     "them."},
    {"refund", Composed_refund, METH_NOARGS,
     "Give back every grant of an allowed composed request whose work was never done (nothing "
     "for a denied one)."},
    {NULL, NULL, 0, NULL},
};

static PyNumberMethods Composed_as_number = {.nb_bool = Composed_bool};

static PyTypeObject ComposedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shmlimit.Composed",
    .tp_basicsize = sizeof(ComposedObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The outcome of try_acquire_all: every limit admitted (and the costs were taken), "
              "or none did and nothing was taken anywhere. True when allowed.",
    .tp_dealloc = Composed_dealloc,
    .tp_repr = Composed_repr,
    .tp_as_number = &Composed_as_number,
    .tp_getset = Composed_getset,
    .tp_methods = Composed_methods,
};

/* One check: a Limit (cost 1), (limit, cost), (limit, key) or (limit, key, cost). */
static int check_of(PyObject *item, Py_ssize_t i, PyObject **limit, PyObject **key, uint64_t *cost) {
    PyObject *cost_obj = NULL;
    *key = NULL;
    *cost = 1;
    if (PyObject_TypeCheck(item, &LimitType)) {
        *limit = item;
    } else if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) >= 2 && PyTuple_GET_SIZE(item) <= 3) {
        PyObject *second = PyTuple_GET_ITEM(item, 1);
        *limit = PyTuple_GET_ITEM(item, 0);
        if (PyTuple_GET_SIZE(item) == 3) {
            *key = second;
            cost_obj = PyTuple_GET_ITEM(item, 2);
        } else if (PyUnicode_Check(second) || PyBytes_Check(second)) {
            *key = second;
        } else {
            cost_obj = second;
        }
    } else {
        PyErr_Format(PyExc_TypeError,
                     "check %zd: a Limit, (limit, cost), (limit, key) or (limit, key, cost), "
                     "not %.100s",
                     i, Py_TYPE(item)->tp_name);
        return -1;
    }
    if (!PyObject_TypeCheck(*limit, &LimitType)) {
        PyErr_Format(PyExc_TypeError, "check %zd: the limit must be a Limit, not %.100s", i,
                     Py_TYPE(*limit)->tp_name);
        return -1;
    }
    if (cost_obj != NULL && u64_arg(cost_obj, "cost", cost) < 0) {
        return -1;
    }
    return 0;
}

static PyObject *try_acquire_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    key_arg keys[SHMLIMIT_MAX_CHECKS];
    PyObject *key_objs[SHMLIMIT_MAX_CHECKS];
    PyObject *limit_objs[SHMLIMIT_MAX_CHECKS];
    ComposedObject *result = NULL;
    Py_ssize_t i, nkeys = 0;
    shmlimit_status status;
    (void)module;
    if (nargs > SHMLIMIT_MAX_CHECKS) {
        return raise_with(SHMLIMIT_BAD_LENGTH, "try_acquire_all: at most MAX_CHECKS (8) checks");
    }
    memset(checks, 0, sizeof checks);
    for (i = 0; i < nargs; i++) {
        PyObject *key;
        if (check_of(args[i], i, &limit_objs[i], &key, &checks[i].cost) < 0) {
            goto done;
        }
        key_objs[i] = key;
        if ((checks[i].limit = live(limit_objs[i])) == NULL) {
            goto done;
        }
        if (key != NULL) {
            if (key_get(key, &keys[nkeys]) < 0) {
                goto done;
            }
            checks[i].key = keys[nkeys].ptr;
            checks[i].key_len = (size_t)keys[nkeys].len;
            nkeys++;
        }
    }
    result = PyObject_New(ComposedObject, &ComposedType);
    if (result == NULL) {
        goto done;
    }
    memset(result->limits, 0, sizeof result->limits);
    memset(result->keys, 0, sizeof result->keys);
    status = shmlimit_acquire_all(checks, (size_t)nargs, &result->out);
    if (status != SHMLIMIT_OK) {
        Py_CLEAR(result);
        raise_status(status);
        goto done;
    }
    for (i = 0; i < nargs; i++) {
        result->limits[i] = limit_objs[i];
        Py_INCREF(limit_objs[i]);
        result->costs[i] = checks[i].cost;
        if (key_objs[i] == NULL) {
            result->keys[i] = Py_None;
            Py_INCREF(Py_None);
        } else if (PyBytes_CheckExact(key_objs[i])) {
            result->keys[i] = key_objs[i];
            Py_INCREF(key_objs[i]);
        } else {
            result->keys[i] =
                PyBytes_FromStringAndSize((const char *)checks[i].key, (Py_ssize_t)checks[i].key_len);
            if (result->keys[i] == NULL) {
                Py_CLEAR(result);
                goto done;
            }
        }
    }
done:
    for (i = 0; i < nkeys; i++) {
        key_release(&keys[i]);
    }
    return (PyObject *)result;
}

/* header_values(*pairs): pairs of (LimitBase, Decision). */
static PyObject *header_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    const shmlimit_limit *limits[SHMLIMIT_MAX_CHECKS];
    shmlimit_decision ds[SHMLIMIT_MAX_CHECKS];
    Py_ssize_t i;
    (void)module;
    if (nargs < 1 || nargs > SHMLIMIT_MAX_CHECKS) {
        return raise_with(SHMLIMIT_INVALID_PARAMETER,
                          "header_values: 1 to MAX_CHECKS (8) (limit, decision) pairs");
    }
    for (i = 0; i < nargs; i++) {
        PyObject *pair = args[i], *limit, *decision;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "pair %zd: a (limit, decision) tuple, not %.100s", i,
                         Py_TYPE(pair)->tp_name);
            return NULL;
        }
        limit = PyTuple_GET_ITEM(pair, 0);
        decision = PyTuple_GET_ITEM(pair, 1);
        if (!PyObject_TypeCheck(limit, &LimitType) ||
            !PyObject_TypeCheck(decision, &DecisionType)) {
            PyErr_Format(PyExc_TypeError, "pair %zd: a (Limit, Decision) tuple", i);
            return NULL;
        }
        if ((limits[i] = live(limit)) == NULL) {
            return NULL;
        }
        ds[i] = ((DecisionObject *)decision)->d;
    }
    return headers_of(limits, ds, (size_t)nargs);
}

/* ------------------------------------------------------------------------------------------ */
/* Module */

static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *factory, *closed, *value, *overflow;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOOO:_configure", &factory, &closed, &value, &overflow)) {
        return NULL;
    }
    Py_INCREF(value);
    Py_XSETREF(value_error, value);
    Py_INCREF(overflow);
    Py_XSETREF(overflow_error, overflow);
    Py_INCREF(factory);
    Py_XSETREF(error_factory, factory);
    Py_INCREF(closed);
    Py_XSETREF(closed_error, closed);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"try_acquire_all", (PyCFunction)(void (*)(void))try_acquire_all, METH_FASTCALL,
     "try_acquire_all(*checks) -> Composed\n\n"
     "Admit one request on every limit, or on none. A check is a Limit (cost 1), (limit, "
     "cost), (limit, key) or (limit, key, cost); a key decides for that key of a keyed limit. "
     "The limits are acquired in order; when one denies, the grants already taken are given "
     "back and the rest peeked, so a denied request consumes nothing. At most MAX_CHECKS "
     "checks."},
    {"header_values", (PyCFunction)(void (*)(void))header_values, METH_FASTCALL,
     "header_values(*pairs) -> (rate_limit, rate_limit_policy, retry_after)\n\n"
     "The RateLimit, RateLimit-Policy and Retry-After values the core renders for "
     "(Limit, Decision) pairs (empty strings for fields it leaves out)."},
    {"_configure", configure, METH_VARARGS,
     "_configure(error_factory, closed_error, value_error, overflow_error): how errors are "
     "raised."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "shmlimit._native",
    "The hot path of shmlimit: decisions through the C header, without ctypes.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m;
    if (PyType_Ready(&DecisionType) < 0 || PyType_Ready(&LimitType) < 0 ||
        PyType_Ready(&ComposedType) < 0) {
        return NULL;
    }
    m = PyModule_Create(&module_def);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&DecisionType);
    Py_INCREF(&LimitType);
    Py_INCREF(&ComposedType);
    if (PyModule_AddObject(m, "Decision", (PyObject *)&DecisionType) < 0 ||
        PyModule_AddObject(m, "LimitBase", (PyObject *)&LimitType) < 0 ||
        PyModule_AddObject(m, "Composed", (PyObject *)&ComposedType) < 0 ||
        PyModule_AddIntConstant(m, "DECISION_SIZE", (long)sizeof(shmlimit_decision)) < 0 ||
        PyModule_AddIntConstant(m, "MAX_CHECKS", SHMLIMIT_MAX_CHECKS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_KEY_LEN", SHMLIMIT_MAX_KEY_LEN) < 0 ||
        PyModule_AddObject(m, "_acquire_address", PyLong_FromVoidPtr((void *)&shmlimit_acquire)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
