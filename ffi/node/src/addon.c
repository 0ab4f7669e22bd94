/*
 * The Node-API addon of the `shmlimit` package: a thin C layer over ffi/include/shmlimit.h.
 *
 * Only Node-API (no V8 or libuv headers), so one build works on every Node version with
 * Node-API 8. The JavaScript side (lib/index.js) owns the API; this file converts arguments,
 * calls the C ABI and hands back its status codes (0 or a shmlimit_status; CLOSED for a handle
 * closed from JavaScript). Nothing here decides anything: every number comes from the library.
 *
 * The hot path (acquire, acquire_key, peek) writes the C decision into one 64-byte buffer per
 * Node environment that JavaScript reads through typed arrays, and returns only the status:
 * no object is built in C.
 *
 * Permit waits run on a thread of their own (not the libuv pool, which a few long waits would
 * starve of its 4 threads), blocked on the library's futex wait in slices of at most 100 ms,
 * and deliver their result to the event loop through a thread-safe function.
 */
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <node_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmlimit.h"

/* The layout lib/index.js reads the decision buffer with. */
_Static_assert(sizeof(shmlimit_decision) == 64, "shmlimit_decision is 64 bytes");
_Static_assert(offsetof(shmlimit_decision, allowed) == 0, "allowed at 0");
_Static_assert(offsetof(shmlimit_decision, shadow_denied) == 1, "shadow_denied at 1");
_Static_assert(offsetof(shmlimit_decision, remaining) == 8, "remaining at 8");
_Static_assert(offsetof(shmlimit_decision, retry_after_ns) == 16, "retry_after_ns at 16");
_Static_assert(offsetof(shmlimit_decision, grant) == 24, "grant at 24");
_Static_assert(offsetof(shmlimit_decision, reserved) == 40, "reserved at 40");
_Static_assert(offsetof(shmlimit_decision, reset_after_ns) == 56, "reset_after_ns at 56");

/* Status of a call on a handle closed from JavaScript (not a shmlimit_status). */
#define CLOSED (-1)
/* Status of an argument JavaScript should have rejected (a bug of lib/index.js). */
#define BAD_ARG (-2)
/* Longest slice of one blocking permit wait, so that a cancelled wait ends promptly. */
#define WAIT_SLICE_NS 100000000ULL

/* ---------------------------------------------------------------------------------------- */
/* Handles: reference counted so that a permit wait thread keeps its limit alive.            */

/* The memory of a box lives while its JavaScript external or a wait holds it (`refs`); the C
 * handle in it lives while its JavaScript owner has not closed it or a wait uses it (`users`). */
typedef struct {
    atomic_int refs;
    atomic_int users;
    atomic_bool closed;
    int is_limiter; /* a box_kind */
    void *ptr;
} box_t;

enum box_kind { BOX_LIMIT = 0, BOX_LIMITER = 1, BOX_GUARDED_LIMITER = 2, BOX_GUARDED_LIMIT = 3 };

static void box_unref(box_t *b) {
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        free(b);
    }
}

static void box_unuse(box_t *b) {
    if (atomic_fetch_sub(&b->users, 1) == 1) {
        switch (b->is_limiter) {
        case BOX_LIMITER: shmlimit_limiter_free((shmlimit_limiter *)b->ptr); break;
        case BOX_GUARDED_LIMITER:
            shmlimit_guarded_limiter_free((shmlimit_guarded_limiter *)b->ptr);
            break;
        case BOX_GUARDED_LIMIT: shmlimit_guarded_limit_free((shmlimit_guarded_limit *)b->ptr); break;
        default: shmlimit_limit_free((shmlimit_limit *)b->ptr);
        }
        b->ptr = NULL;
    }
}

/* Drop the JavaScript owner's use of the handle once (close(), else the finalizer). */
static void box_close(box_t *b) {
    bool expected = false;
    if (atomic_compare_exchange_strong(&b->closed, &expected, true)) {
        box_unuse(b);
    }
}

static void box_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    box_t *b = (box_t *)data;
    box_close(b);
    box_unref(b);
}

/* ---------------------------------------------------------------------------------------- */
/* Per-environment state (each worker_threads environment loads the addon anew).            */

typedef struct {
    shmlimit_decision *decision; /* the shared decision buffer's memory */
    napi_ref decision_ref;
} inst_t;

static void inst_finalize(napi_env env, void *data, void *hint) {
    (void)hint;
    inst_t *in = (inst_t *)data;
    napi_delete_reference(env, in->decision_ref);
    free(in);
}

/* ---------------------------------------------------------------------------------------- */
/* Small helpers. Failures of Node-API itself throw a JavaScript error and return NULL.      */

#define NAPI(call)                                                                          \
    do {                                                                                    \
        if ((call) != napi_ok) {                                                            \
            throw_napi(env, #call);                                                         \
            return NULL;                                                                    \
        }                                                                                   \
    } while (0)

static void throw_napi(napi_env env, const char *what) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) {
        return;
    }
    const napi_extended_error_info *info = NULL;
    napi_get_last_error_info(env, &info);
    char msg[256];
    snprintf(msg, sizeof msg, "shmlimit addon: %s failed: %s", what,
             info && info->error_message ? info->error_message : "unknown Node-API error");
    napi_throw_error(env, NULL, msg);
}

static napi_value int32_value(napi_env env, int32_t v) {
    napi_value out;
    NAPI(napi_create_int32(env, v, &out));
    return out;
}

static napi_value u64_number(napi_env env, uint64_t v) {
    napi_value out;
    NAPI(napi_create_double(env, (double)v, &out));
    return out;
}

/* A non-negative integer argument (a JavaScript number, or a BigInt). */
static int get_u64(napi_env env, napi_value v, uint64_t *out) {
    double d;
    if (napi_get_value_double(env, v, &d) != napi_ok) {
        bool lossless = false;
        return napi_get_value_bigint_uint64(env, v, out, &lossless) == napi_ok && lossless;
    }
    if (!(d >= 0) || d > 18446744073709549568.0 || d != (double)(uint64_t)d) {
        return 0;
    }
    *out = (uint64_t)d;
    return 1;
}

static box_t *get_box(napi_env env, napi_value v) {
    void *p = NULL;
    if (napi_get_value_external(env, v, &p) != napi_ok) {
        return NULL;
    }
    return (box_t *)p;
}

/* The live limit of a handle argument, or NULL (closed or not a handle). */
static const shmlimit_limit *get_limit(napi_env env, napi_value v) {
    box_t *b = get_box(env, v);
    if (b == NULL || b->is_limiter != BOX_LIMIT ||
        atomic_load_explicit(&b->closed, memory_order_relaxed)) {
        return NULL;
    }
    return (const shmlimit_limit *)b->ptr;
}

static const shmlimit_limiter *get_limiter(napi_env env, napi_value v) {
    box_t *b = get_box(env, v);
    if (b == NULL || b->is_limiter != BOX_LIMITER ||
        atomic_load_explicit(&b->closed, memory_order_relaxed)) {
        return NULL;
    }
    return (const shmlimit_limiter *)b->ptr;
}

/* The live guarded limiter (kind BOX_GUARDED_LIMITER) or guarded limit of a handle argument. */
static const void *get_kind(napi_env env, napi_value v, int kind) {
    box_t *b = get_box(env, v);
    if (b == NULL || b->is_limiter != kind ||
        atomic_load_explicit(&b->closed, memory_order_relaxed)) {
        return NULL;
    }
    return b->ptr;
}

static napi_value wrap_box(napi_env env, void *ptr, int is_limiter) {
    box_t *b = (box_t *)calloc(1, sizeof *b);
    if (b == NULL) {
        box_t tmp = {0};
        atomic_init(&tmp.users, 1);
        tmp.is_limiter = is_limiter;
        tmp.ptr = ptr;
        box_unuse(&tmp);
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    atomic_init(&b->refs, 1);
    atomic_init(&b->users, 1);
    atomic_init(&b->closed, false);
    b->is_limiter = is_limiter;
    b->ptr = ptr;
    napi_value out;
    if (napi_create_external(env, b, box_finalize, NULL, &out) != napi_ok) {
        box_close(b);
        box_unref(b);
        throw_napi(env, "napi_create_external");
        return NULL;
    }
    return out;
}

/* A key argument: a string (its UTF-8 bytes) or a Buffer / Uint8Array (its bytes). */
typedef struct {
    const uint8_t *ptr;
    size_t len;
    char *heap;
    char stack[1100];
} keybuf_t;

static int get_key(napi_env env, napi_value v, keybuf_t *k) {
    k->heap = NULL;
    napi_valuetype t;
    if (napi_typeof(env, v, &t) != napi_ok) {
        return 0;
    }
    if (t == napi_string) {
        /* One copy into the stack buffer; a string that fills it is measured and copied to
         * the heap (keys are at most 1024 bytes, so that is always a key too long). */
        size_t copied = 0;
        if (napi_get_value_string_utf8(env, v, k->stack, sizeof k->stack, &copied) != napi_ok) {
            return 0;
        }
        if (copied + 1 < sizeof k->stack) {
            k->ptr = (const uint8_t *)k->stack;
            k->len = copied;
            return 1;
        }
        size_t len = 0;
        if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
            return 0;
        }
        k->heap = (char *)malloc(len + 1);
        if (k->heap == NULL ||
            napi_get_value_string_utf8(env, v, k->heap, len + 1, &copied) != napi_ok) {
            free(k->heap);
            k->heap = NULL;
            return 0;
        }
        k->ptr = (const uint8_t *)k->heap;
        k->len = copied;
        return 1;
    }
    bool is_typed = false;
    if (napi_is_typedarray(env, v, &is_typed) == napi_ok && is_typed) {
        napi_typedarray_type tt;
        size_t len;
        void *data;
        if (napi_get_typedarray_info(env, v, &tt, &len, &data, NULL, NULL) != napi_ok ||
            (tt != napi_uint8_array && tt != napi_int8_array && tt != napi_uint8_clamped_array)) {
            return 0;
        }
        /* An empty array may have a NULL data pointer: the library refuses it by length. */
        static const uint8_t empty = 0;
        k->ptr = data ? (const uint8_t *)data : &empty;
        k->len = len;
        return 1;
    }
    return 0;
}

static void key_free(keybuf_t *k) { free(k->heap); }

static napi_value args(napi_env env, napi_callback_info info, size_t want, napi_value *argv,
                       void **data) {
    size_t argc = want;
    if (napi_get_cb_info(env, info, &argc, argv, NULL, data) != napi_ok) {
        throw_napi(env, "napi_get_cb_info");
        return NULL;
    }
    for (size_t i = argc; i < want; i++) {
        napi_get_undefined(env, &argv[i]);
    }
    return argv[0];
}

#define ARGS(n)                                                                             \
    napi_value argv[(n) > 0 ? (n) : 1];                                                     \
    void *data_ = NULL;                                                                     \
    if ((n) > 0 && args(env, info, (n), argv, &data_) == NULL) {                            \
        return NULL;                                                                        \
    }                                                                                       \
    inst_t *in = (inst_t *)data_;                                                           \
    (void)in

/* ---------------------------------------------------------------------------------------- */
/* Library information and errors.                                                          */

static napi_value js_version(napi_env env, napi_callback_info info) {
    (void)info;
    napi_value out;
    NAPI(napi_create_string_utf8(env, shmlimit_version(), NAPI_AUTO_LENGTH, &out));
    return out;
}

static napi_value js_strerror(napi_env env, napi_callback_info info) {
    ARGS(1);
    int32_t code = 0;
    NAPI(napi_get_value_int32(env, argv[0], &code));
    napi_value out;
    NAPI(napi_create_string_utf8(env, shmlimit_strerror(code), NAPI_AUTO_LENGTH, &out));
    return out;
}

static napi_value js_last_error(napi_env env, napi_callback_info info) {
    (void)info;
    napi_value msg, os, out;
    NAPI(napi_create_string_utf8(env, shmlimit_last_error(), NAPI_AUTO_LENGTH, &msg));
    NAPI(napi_create_int32(env, shmlimit_last_os_error(), &os));
    NAPI(napi_create_array_with_length(env, 2, &out));
    NAPI(napi_set_element(env, out, 0, msg));
    NAPI(napi_set_element(env, out, 1, os));
    return out;
}

/* ---------------------------------------------------------------------------------------- */
/* Limiters and definitions.                                                                */

/* The raw definition object lib/index.js builds: every field a number (or BigInt). */
static const char *const DEF_FIELDS[] = {"kind",   "alignment",   "limit",         "periodNs",
                                         "rate",   "keyCapacity", "onFull",        "flags",
                                         "nearLimit", "split",    "fleetWeight",   "fleetEmissionNs"};
#define DEF_FIELD_COUNT (sizeof DEF_FIELDS / sizeof DEF_FIELDS[0])

static int read_def(napi_env env, napi_value obj, shmlimit_def *d, char *name, size_t name_cap) {
    memset(d, 0, sizeof *d);
    napi_value v;
    size_t len = 0;
    if (napi_get_named_property(env, obj, "name", &v) != napi_ok ||
        napi_get_value_string_utf8(env, v, name, name_cap, &len) != napi_ok) {
        return 0;
    }
    d->name = name;
    uint64_t f[DEF_FIELD_COUNT];
    for (size_t i = 0; i < DEF_FIELD_COUNT; i++) {
        if (napi_get_named_property(env, obj, DEF_FIELDS[i], &v) != napi_ok ||
            !get_u64(env, v, &f[i])) {
            return 0;
        }
    }
    if (f[0] > UINT32_MAX || f[1] > UINT32_MAX || f[6] > UINT32_MAX || f[7] > UINT32_MAX ||
        f[8] > UINT16_MAX || f[9] > UINT16_MAX || f[10] > UINT32_MAX) {
        return 0;
    }
    d->kind = (uint32_t)f[0];
    d->alignment = (uint32_t)f[1];
    d->limit = f[2];
    d->period_ns = f[3];
    d->rate = f[4];
    d->key_capacity = f[5];
    d->on_full = (uint32_t)f[6];
    d->flags = (uint32_t)f[7];
    d->near_limit = (uint16_t)f[8];
    d->split = (uint16_t)f[9];
    d->fleet_weight = (uint32_t)f[10];
    d->fleet_emission_ns = f[11];
    return 1;
}

static napi_value def_object(napi_env env, const shmlimit_def *d) {
    napi_value out, v;
    NAPI(napi_create_object(env, &out));
    NAPI(napi_create_string_utf8(env, d->name ? d->name : "", NAPI_AUTO_LENGTH, &v));
    NAPI(napi_set_named_property(env, out, "name", v));
    const uint64_t f[DEF_FIELD_COUNT] = {d->kind,     d->alignment,    d->limit,     d->period_ns,
                                         d->rate,     d->key_capacity, d->on_full,   d->flags,
                                         d->near_limit, d->split,      d->fleet_weight,
                                         d->fleet_emission_ns};
    for (size_t i = 0; i < DEF_FIELD_COUNT; i++) {
        if ((v = u64_number(env, f[i])) == NULL) {
            return NULL;
        }
        NAPI(napi_set_named_property(env, out, DEF_FIELDS[i], v));
    }
    return out;
}

/* open(path, defs | null, mode, allowOtherOwner, onConflict, onReboot) -> limiter handle, or a
 * status number. onConflict and onReboot are the C option values (checked by the library). */
static napi_value js_open(napi_env env, napi_callback_info info) {
    ARGS(6);
    size_t path_len = 0;
    NAPI(napi_get_value_string_utf8(env, argv[0], NULL, 0, &path_len));
    char *path = (char *)malloc(path_len + 1);
    if (path == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    if (napi_get_value_string_utf8(env, argv[0], path, path_len + 1, &path_len) != napi_ok ||
        strlen(path) != path_len) {
        free(path);
        napi_throw_type_error(env, NULL, "path must be a string without NUL characters");
        return NULL;
    }
    shmlimit_options opts;
    memset(&opts, 0, sizeof opts);
    uint64_t mode = 0, on_conflict = 0, on_reboot = 0;
    bool other = false;
    if (!get_u64(env, argv[2], &mode) || mode > UINT32_MAX ||
        napi_get_value_bool(env, argv[3], &other) != napi_ok ||
        !get_u64(env, argv[4], &on_conflict) || on_conflict > UINT32_MAX ||
        !get_u64(env, argv[5], &on_reboot) || on_reboot > UINT32_MAX) {
        free(path);
        return int32_value(env, BAD_ARG);
    }
    opts.mode = (uint32_t)mode;
    opts.allow_other_owner = other ? 1 : 0;
    opts.on_conflict = (uint32_t)on_conflict;
    opts.on_reboot = (uint32_t)on_reboot;

    napi_valuetype t;
    NAPI(napi_typeof(env, argv[1], &t));
    shmlimit_limiter *lim = NULL;
    int32_t st;
    if (t == napi_null || t == napi_undefined) {
        st = shmlimit_limiter_open(path, &opts, &lim);
    } else {
        uint32_t n = 0;
        if (napi_get_array_length(env, argv[1], &n) != napi_ok || n == 0 || n > SHMLIMIT_MAX_LIMITS) {
            free(path);
            return int32_value(env, BAD_ARG);
        }
        shmlimit_def *defs = (shmlimit_def *)calloc(n, sizeof *defs);
        char(*names)[SHMLIMIT_MAX_NAME_LEN + 2] = calloc(n, sizeof *names);
        if (defs == NULL || names == NULL) {
            free(defs);
            free(names);
            free(path);
            napi_throw_error(env, NULL, "shmlimit addon: out of memory");
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++) {
            napi_value e;
            if (napi_get_element(env, argv[1], i, &e) != napi_ok ||
                !read_def(env, e, &defs[i], names[i], sizeof names[i])) {
                free(defs);
                free(names);
                free(path);
                return int32_value(env, BAD_ARG);
            }
        }
        st = shmlimit_limiter_create_or_open(path, defs, n, &opts, &lim);
        free(defs);
        free(names);
    }
    free(path);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    return wrap_box(env, lim, BOX_LIMITER);
}

/* close(handle): drop the JavaScript owner's reference now rather than at collection. */
static napi_value js_close(napi_env env, napi_callback_info info) {
    ARGS(1);
    box_t *b = get_box(env, argv[0]);
    if (b != NULL) {
        box_close(b);
    }
    return NULL;
}

/* definitions(limiter) -> [raw def...] or a status number. */
static napi_value js_definitions(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limiter *lim = get_limiter(env, argv[0]);
    if (lim == NULL) {
        return int32_value(env, CLOSED);
    }
    size_t n = 0;
    int32_t st = shmlimit_limiter_limit_count(lim, &n);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out;
    NAPI(napi_create_array_with_length(env, n, &out));
    for (size_t i = 0; i < n; i++) {
        shmlimit_def d;
        st = shmlimit_limiter_definition(lim, i, &d);
        if (st != SHMLIMIT_OK) {
            return int32_value(env, st);
        }
        napi_value o = def_object(env, &d);
        if (o == NULL) {
            return NULL;
        }
        NAPI(napi_set_element(env, out, (uint32_t)i, o));
    }
    return out;
}

/* limit(limiter, name) -> limit handle, or a status number. */
static napi_value js_limit(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limiter *lim = get_limiter(env, argv[0]);
    if (lim == NULL) {
        return int32_value(env, CLOSED);
    }
    size_t len = 0;
    NAPI(napi_get_value_string_utf8(env, argv[1], NULL, 0, &len));
    char *name = (char *)malloc(len + 1);
    if (name == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    if (napi_get_value_string_utf8(env, argv[1], name, len + 1, &len) != napi_ok ||
        strlen(name) != len) {
        free(name);
        return int32_value(env, BAD_ARG);
    }
    shmlimit_limit *l = NULL;
    int32_t st = shmlimit_limiter_limit(lim, name, &l);
    free(name);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    return wrap_box(env, l, BOX_LIMIT);
}

/* definition(limit, live) -> raw def, or a status number. */
static napi_value js_definition(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    bool live = false;
    NAPI(napi_get_value_bool(env, argv[1], &live));
    shmlimit_def d;
    int32_t st = live ? shmlimit_limit_live_definition(l, &d) : shmlimit_limit_definition(l, &d);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    return def_object(env, &d);
}

/* ---------------------------------------------------------------------------------------- */
/* Decisions: the hot path.                                                                 */

/* acquire(limit, cost) -> status; the decision is in the shared buffer. */
static napi_value js_acquire(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    uint64_t cost;
    int32_t st;
    if (l == NULL) {
        st = CLOSED;
    } else if (!get_u64(env, argv[1], &cost)) {
        st = BAD_ARG;
    } else {
        st = shmlimit_acquire(l, cost, in->decision);
    }
    return int32_value(env, st);
}

static napi_value js_peek(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    uint64_t cost;
    int32_t st;
    if (l == NULL) {
        st = CLOSED;
    } else if (!get_u64(env, argv[1], &cost)) {
        st = BAD_ARG;
    } else {
        st = shmlimit_peek(l, cost, in->decision);
    }
    return int32_value(env, st);
}

/* acquireKey(limit, key, cost, peek) -> status; the decision is in the shared buffer. */
static napi_value js_acquire_key(napi_env env, napi_callback_info info) {
    ARGS(4);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    uint64_t cost;
    bool peek = false;
    keybuf_t k;
    if (!get_u64(env, argv[2], &cost) || napi_get_value_bool(env, argv[3], &peek) != napi_ok ||
        !get_key(env, argv[1], &k)) {
        return int32_value(env, BAD_ARG);
    }
    int32_t st = peek ? shmlimit_peek_key(l, k.ptr, k.len, cost, in->decision)
                      : shmlimit_acquire_key(l, k.ptr, k.len, cost, in->decision);
    key_free(&k);
    return int32_value(env, st);
}

/* refund(limit, key | undefined, units | -1) -> status; the grant is in the shared buffer. */
static napi_value js_refund(napi_env env, napi_callback_info info) {
    ARGS(3);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    shmlimit_decision grant = *in->decision;
    napi_valuetype kt;
    NAPI(napi_typeof(env, argv[1], &kt));
    double units_d = -1;
    NAPI(napi_get_value_double(env, argv[2], &units_d));
    int32_t st;
    if (kt != napi_undefined) {
        keybuf_t k;
        if (!get_key(env, argv[1], &k)) {
            return int32_value(env, BAD_ARG);
        }
        st = shmlimit_refund_key(l, k.ptr, k.len, &grant);
        key_free(&k);
    } else if (units_d < 0) {
        st = shmlimit_refund(l, &grant);
    } else {
        uint64_t units;
        if (!get_u64(env, argv[2], &units)) {
            return int32_value(env, BAD_ARG);
        }
        st = shmlimit_refund_units(l, &grant, units);
    }
    return int32_value(env, st);
}

/* stats(limit) -> [allowed, denied, shadowDenied, nearLimit, refunded], or a status number. */
static napi_value js_stats(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    shmlimit_stats s;
    int32_t st = shmlimit_limit_stats(l, &s);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out;
    const uint64_t v[5] = {s.allowed, s.denied, s.shadow_denied, s.near_limit, s.refunded};
    NAPI(napi_create_array_with_length(env, 5, &out));
    for (uint32_t i = 0; i < 5; i++) {
        napi_value n = u64_number(env, v[i]);
        if (n == NULL) {
            return NULL;
        }
        NAPI(napi_set_element(env, out, i, n));
    }
    return out;
}

/* Read an array of limit handles and costs into checks (at most SHMLIMIT_MAX_CHECKS). */
static int32_t read_checks(napi_env env, napi_value handles, napi_value costs,
                           shmlimit_check *checks, uint32_t *n_out) {
    uint32_t n = 0, nc = 0;
    if (napi_get_array_length(env, handles, &n) != napi_ok ||
        napi_get_array_length(env, costs, &nc) != napi_ok || n != nc || n > SHMLIMIT_MAX_CHECKS) {
        return BAD_ARG;
    }
    memset(checks, 0, sizeof(shmlimit_check) * SHMLIMIT_MAX_CHECKS);
    for (uint32_t i = 0; i < n; i++) {
        napi_value h, c;
        if (napi_get_element(env, handles, i, &h) != napi_ok ||
            napi_get_element(env, costs, i, &c) != napi_ok) {
            return BAD_ARG;
        }
        checks[i].limit = get_limit(env, h);
        if (checks[i].limit == NULL) {
            return CLOSED;
        }
        if (!get_u64(env, c, &checks[i].cost)) {
            return BAD_ARG;
        }
    }
    *n_out = n;
    return SHMLIMIT_OK;
}

static int get_bytes(napi_env env, napi_value v, size_t want, void **data) {
    bool is_typed = false;
    napi_typedarray_type tt;
    size_t len = 0;
    if (napi_is_typedarray(env, v, &is_typed) != napi_ok || !is_typed ||
        napi_get_typedarray_info(env, v, &tt, &len, data, NULL, NULL) != napi_ok ||
        tt != napi_uint8_array || len < want) {
        return 0;
    }
    return 1;
}

/* acquireAll(handles, costs, out Uint8Array(sizeof shmlimit_composed)) -> status. */
static napi_value js_acquire_all(napi_env env, napi_callback_info info) {
    ARGS(3);
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    uint32_t n = 0;
    void *out = NULL;
    int32_t st = read_checks(env, argv[0], argv[1], checks, &n);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    if (!get_bytes(env, argv[2], sizeof(shmlimit_composed), &out)) {
        return int32_value(env, BAD_ARG);
    }
    shmlimit_composed c;
    st = shmlimit_acquire_all(checks, n, &c);
    if (st == SHMLIMIT_OK) {
        memcpy(out, &c, sizeof c);
    }
    return int32_value(env, st);
}

/* refundAll(handles, costs, composed Uint8Array) -> status. */
static napi_value js_refund_all(napi_env env, napi_callback_info info) {
    ARGS(3);
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    uint32_t n = 0;
    void *raw = NULL;
    int32_t st = read_checks(env, argv[0], argv[1], checks, &n);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    if (!get_bytes(env, argv[2], sizeof(shmlimit_composed), &raw)) {
        return int32_value(env, BAD_ARG);
    }
    shmlimit_composed c;
    memcpy(&c, raw, sizeof c);
    return int32_value(env, shmlimit_refund_all(checks, n, &c));
}

/* headers(handles, decisions Uint8Array(64 * n)) -> [RateLimit, RateLimit-Policy, Retry-After]. */
static napi_value js_headers(napi_env env, napi_callback_info info) {
    ARGS(2);
    uint32_t n = 0;
    NAPI(napi_get_array_length(env, argv[0], &n));
    if (n == 0 || n > SHMLIMIT_MAX_CHECKS) {
        return int32_value(env, BAD_ARG);
    }
    const shmlimit_limit *limits[SHMLIMIT_MAX_CHECKS];
    for (uint32_t i = 0; i < n; i++) {
        napi_value h;
        NAPI(napi_get_element(env, argv[0], i, &h));
        if ((limits[i] = get_limit(env, h)) == NULL) {
            return int32_value(env, CLOSED);
        }
    }
    void *raw = NULL;
    if (!get_bytes(env, argv[1], (size_t)n * sizeof(shmlimit_decision), &raw)) {
        return int32_value(env, BAD_ARG);
    }
    shmlimit_decision decisions[SHMLIMIT_MAX_CHECKS];
    memcpy(decisions, raw, (size_t)n * sizeof(shmlimit_decision));
    shmlimit_headers *h = (shmlimit_headers *)malloc(sizeof *h);
    if (h == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    int32_t st = shmlimit_ratelimit_headers(limits, decisions, n, h);
    if (st != SHMLIMIT_OK) {
        free(h);
        return int32_value(env, st);
    }
    napi_value out, a, b, c;
    napi_status ns = napi_create_array_with_length(env, 3, &out);
    if (ns == napi_ok) ns = napi_create_string_utf8(env, h->rate_limit, NAPI_AUTO_LENGTH, &a);
    if (ns == napi_ok)
        ns = napi_create_string_utf8(env, h->rate_limit_policy, NAPI_AUTO_LENGTH, &b);
    if (ns == napi_ok) ns = napi_create_string_utf8(env, h->retry_after, NAPI_AUTO_LENGTH, &c);
    free(h);
    NAPI(ns);
    NAPI(napi_set_element(env, out, 0, a));
    NAPI(napi_set_element(env, out, 1, b));
    NAPI(napi_set_element(env, out, 2, c));
    return out;
}

/* policy(limit) -> [quota, windowSecs], or a status number. */
static napi_value js_policy(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    shmlimit_policy p;
    int32_t st = shmlimit_limit_policy(l, &p);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out, q, w;
    if ((q = u64_number(env, p.quota)) == NULL || (w = u64_number(env, p.window_secs)) == NULL) {
        return NULL;
    }
    NAPI(napi_create_array_with_length(env, 2, &out));
    NAPI(napi_set_element(env, out, 0, q));
    NAPI(napi_set_element(env, out, 1, w));
    return out;
}

/* ---------------------------------------------------------------------------------------- */
/* Retuning and maintenance.                                                                */

/* retune(limit, op, a, b, c) -> status. op: 0 setRate(a per b ns), 1 setTokenBucket(a, b per
 * c ns), 2 setLimit(a), 3 reset. */
static napi_value js_retune(napi_env env, napi_callback_info info) {
    ARGS(5);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    int32_t op = 0;
    uint64_t a = 0, b = 0, c = 0;
    NAPI(napi_get_value_int32(env, argv[1], &op));
    if ((op <= 2 && !get_u64(env, argv[2], &a)) || (op <= 1 && !get_u64(env, argv[3], &b)) ||
        (op == 1 && !get_u64(env, argv[4], &c))) {
        return int32_value(env, BAD_ARG);
    }
    int32_t st;
    switch (op) {
    case 0: st = shmlimit_limit_set_rate(l, a, b); break;
    case 1: st = shmlimit_limit_set_token_bucket(l, a, b, c); break;
    case 2: st = shmlimit_limit_set_limit(l, a); break;
    case 3: st = shmlimit_limit_reset(l); break;
    default: st = BAD_ARG;
    }
    return int32_value(env, st);
}

/* count(limit, op, key) -> number, or [status] on failure. op: 0 key occupancy used,
 * 1 key slots, 2 reclaim idle keys, 3 reclaim dead permits, 4 permits held for key. */
static napi_value js_count(napi_env env, napi_callback_info info) {
    ARGS(3);
    napi_value fail;
    NAPI(napi_create_array_with_length(env, 1, &fail));
    const shmlimit_limit *l = get_limit(env, argv[0]);
    int32_t op = 0;
    NAPI(napi_get_value_int32(env, argv[1], &op));
    int32_t st;
    uint64_t result = 0;
    if (l == NULL) {
        st = CLOSED;
    } else if (op <= 1) {
        size_t used = 0, slots = 0;
        st = shmlimit_limit_key_occupancy(l, &used, &slots);
        result = op == 0 ? used : slots;
    } else if (op == 2 || op == 3) {
        size_t n = 0;
        st = op == 2 ? shmlimit_limit_reclaim_idle_keys(l, &n) : shmlimit_permit_reclaim_dead(l, &n);
        result = n;
    } else {
        keybuf_t k;
        uint32_t held = 0;
        if (!get_key(env, argv[2], &k)) {
            st = BAD_ARG;
        } else {
            st = shmlimit_permit_key_held(l, k.ptr, k.len, &held);
            key_free(&k);
        }
        result = held;
    }
    if (st != SHMLIMIT_OK) {
        napi_value s = int32_value(env, st);
        if (s == NULL) {
            return NULL;
        }
        NAPI(napi_set_element(env, fail, 0, s));
        return fail;
    }
    return u64_number(env, result);
}

/* ---------------------------------------------------------------------------------------- */
/* Permits.                                                                                 */

static napi_value permit_result(napi_env env, int32_t st, uint64_t permit) {
    napi_value out, a, b;
    NAPI(napi_create_array_with_length(env, 2, &out));
    NAPI(napi_create_int32(env, st, &a));
    NAPI(napi_create_bigint_uint64(env, permit, &b));
    NAPI(napi_set_element(env, out, 0, a));
    NAPI(napi_set_element(env, out, 1, b));
    return out;
}

/* permitTry(limit, key | undefined) -> [status, permit BigInt (0n: none free)]. */
static napi_value js_permit_try(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return permit_result(env, CLOSED, 0);
    }
    napi_valuetype kt;
    NAPI(napi_typeof(env, argv[1], &kt));
    uint64_t permit = 0;
    int32_t st;
    if (kt == napi_undefined) {
        st = shmlimit_permit_acquire(l, &permit);
    } else {
        keybuf_t k;
        if (!get_key(env, argv[1], &k)) {
            return permit_result(env, BAD_ARG, 0);
        }
        st = shmlimit_permit_acquire_key(l, k.ptr, k.len, &permit);
        key_free(&k);
    }
    return permit_result(env, st, permit);
}

/* permitRelease(limit, permit BigInt) -> status (0: released, 1... errors), or -3 when the
 * permit was not held (not an error of the library). */
#define NOT_HELD (-3)
static napi_value js_permit_release(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    uint64_t permit = 0;
    if (!get_u64(env, argv[1], &permit)) {
        return int32_value(env, BAD_ARG);
    }
    bool released = false;
    int32_t st = shmlimit_permit_release(l, permit, &released);
    if (st == SHMLIMIT_OK && !released) {
        st = NOT_HELD;
    }
    return int32_value(env, st);
}

/* permitHolders(limit) -> [{id, pid, reclaimable, sinceNs, leaseExpiryNs, keyTag}], or a
 * status number. */
static napi_value js_permit_holders(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    size_t count = 0;
    shmlimit_permit_holder *hs = NULL;
    int32_t st;
    for (;;) {
        size_t cap = count + 8;
        free(hs);
        hs = (shmlimit_permit_holder *)calloc(cap, sizeof *hs);
        if (hs == NULL) {
            napi_throw_error(env, NULL, "shmlimit addon: out of memory");
            return NULL;
        }
        st = shmlimit_permit_holders(l, hs, cap, &count);
        if (st != SHMLIMIT_OK || count <= cap) {
            break;
        }
    }
    if (st != SHMLIMIT_OK) {
        free(hs);
        return int32_value(env, st);
    }
    napi_value out;
    if (napi_create_array_with_length(env, count, &out) != napi_ok) {
        free(hs);
        throw_napi(env, "napi_create_array_with_length");
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        napi_value o, id, pid, rec, since, lease, tag;
        napi_status s = napi_create_object(env, &o);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].id, &id);
        if (s == napi_ok) s = napi_create_uint32(env, hs[i].pid, &pid);
        if (s == napi_ok) s = napi_get_boolean(env, hs[i].reclaimable, &rec);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].since_ns, &since);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].lease_expiry_ns, &lease);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].key_tag, &tag);
        if (s == napi_ok) s = napi_set_named_property(env, o, "id", id);
        if (s == napi_ok) s = napi_set_named_property(env, o, "pid", pid);
        if (s == napi_ok) s = napi_set_named_property(env, o, "reclaimable", rec);
        if (s == napi_ok) s = napi_set_named_property(env, o, "sinceNs", since);
        if (s == napi_ok) s = napi_set_named_property(env, o, "leaseExpiryNs", lease);
        if (s == napi_ok) s = napi_set_named_property(env, o, "keyTag", tag);
        if (s == napi_ok) s = napi_set_element(env, out, (uint32_t)i, o);
        if (s != napi_ok) {
            free(hs);
            throw_napi(env, "building the permit holders");
            return NULL;
        }
    }
    free(hs);
    return out;
}

/* keyTag(limit, key) -> BigInt, or a status number. */
static napi_value js_key_tag(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    keybuf_t k;
    if (!get_key(env, argv[1], &k)) {
        return int32_value(env, BAD_ARG);
    }
    uint64_t tag = 0;
    int32_t st = shmlimit_key_tag(l, k.ptr, k.len, &tag);
    key_free(&k);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out;
    NAPI(napi_create_bigint_uint64(env, tag, &out));
    return out;
}

/* ---- Permit waits on threads of their own. ----
 *
 * Lifetime of a wait: js_permit_wait creates the job, its thread-safe function (tsfn) and a
 * joinable thread. The thread waits, queues its result on the tsfn and releases the tsfn.
 * wait_deliver runs the JavaScript callback on the event loop (or, when the environment is
 * being torn down, only gives the permit back). The tsfn's finalizer, which Node runs once the
 * thread has released it or when the environment is torn down, whichever comes first, cancels
 * and joins the thread (at most one wait slice, 100 ms) and only then frees the job: a thread
 * never calls into a tsfn Node has destroyed. */

typedef struct wait_job {
    struct wait_job *next;
    uint32_t id;
    napi_env env;
    atomic_bool cancel;
    box_t *box;           /* a reference and a use held for the wait */
    uint8_t *key;         /* NULL: unkeyed */
    size_t key_len;
    uint64_t timeout_ns;  /* UINT64_MAX: no timeout */
    napi_threadsafe_function tsfn;
    pthread_t thread;
    bool started;
    /* Written by the thread before it queues the result, read by wait_deliver. */
    int32_t status;
    uint64_t permit;      /* 0 once delivered or given back */
    char message[512];
    int os_error;
} wait_job;

/* Every wait not yet finalized, so that an environment's teardown (or an AbortSignal) can
 * cancel it. */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static wait_job *jobs = NULL;
static uint32_t next_job_id = 1;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void give_back(wait_job *job) {
    if (job->permit != 0) {
        bool released;
        shmlimit_permit_release((const shmlimit_limit *)job->box->ptr, job->permit, &released);
        job->permit = 0;
    }
}

static void *wait_thread(void *arg) {
    wait_job *job = (wait_job *)arg;
    const shmlimit_limit *l = (const shmlimit_limit *)job->box->ptr;
    uint64_t start = now_ns();
    int32_t st = SHMLIMIT_OK;
    uint64_t permit = 0;
    for (;;) {
        if (atomic_load(&job->cancel)) {
            st = CLOSED;
            break;
        }
        uint64_t slice = WAIT_SLICE_NS;
        if (job->timeout_ns != UINT64_MAX) {
            uint64_t spent = now_ns() - start;
            uint64_t left = spent >= job->timeout_ns ? 0 : job->timeout_ns - spent;
            slice = left < slice ? left : slice;
        }
        st = job->key ? shmlimit_permit_acquire_key_timeout(l, job->key, job->key_len, slice, &permit)
                      : shmlimit_permit_acquire_timeout(l, slice, &permit);
        if (st != SHMLIMIT_OK || permit != 0) {
            break;
        }
        if (job->timeout_ns != UINT64_MAX && now_ns() - start >= job->timeout_ns) {
            break; /* timed out: permit 0 */
        }
    }
    if (st != SHMLIMIT_OK && st != CLOSED) {
        snprintf(job->message, sizeof job->message, "%s", shmlimit_last_error());
        job->os_error = shmlimit_last_os_error();
    }
    job->status = st;
    job->permit = permit;
    if (napi_call_threadsafe_function(job->tsfn, job, napi_tsfn_blocking) != napi_ok) {
        /* The environment is going away: nobody will take this permit. */
        give_back(job);
    }
    napi_release_threadsafe_function(job->tsfn, napi_tsfn_release);
    return NULL;
}

/* On the event loop: callback(status, permit, message, osError). */
static void wait_deliver(napi_env env, napi_value callback, void *context, void *data) {
    (void)context;
    wait_job *job = (wait_job *)data;
    if (env == NULL || callback == NULL) {
        give_back(job);
        return;
    }
    napi_value argv[4], undefined;
    napi_get_undefined(env, &undefined);
    napi_create_int32(env, job->status, &argv[0]);
    napi_create_bigint_uint64(env, job->permit, &argv[1]);
    napi_create_string_utf8(env, job->message, NAPI_AUTO_LENGTH, &argv[2]);
    napi_create_int32(env, job->os_error, &argv[3]);
    if (napi_call_function(env, undefined, callback, 4, argv, NULL) != napi_ok) {
        /* The callback could not take it (an exception is pending): give it back. */
        give_back(job);
    }
    job->permit = 0; /* delivered: the JavaScript Permit owns it */
}

static void wait_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    wait_job *job = (wait_job *)data;
    atomic_store(&job->cancel, true);
    if (job->started) {
        pthread_join(job->thread, NULL);
    }
    pthread_mutex_lock(&jobs_lock);
    for (wait_job **p = &jobs; *p; p = &(*p)->next) {
        if (*p == job) {
            *p = job->next;
            break;
        }
    }
    pthread_mutex_unlock(&jobs_lock);
    box_unuse(job->box);
    box_unref(job->box);
    free(job->key);
    free(job);
}

/* permitWait(limit, key | undefined, timeoutNs | -1, callback) -> a wait id (> 0), or a status
 * (< 0) when the wait could not start. */
static napi_value js_permit_wait(napi_env env, napi_callback_info info) {
    ARGS(4);
    box_t *b = get_box(env, argv[0]);
    if (b == NULL || b->is_limiter != BOX_LIMIT || atomic_load(&b->closed)) {
        return int32_value(env, CLOSED);
    }
    double t = -1;
    NAPI(napi_get_value_double(env, argv[2], &t));
    napi_valuetype kt;
    NAPI(napi_typeof(env, argv[1], &kt));
    keybuf_t k;
    if (kt != napi_undefined && !get_key(env, argv[1], &k)) {
        return int32_value(env, BAD_ARG);
    }
    wait_job *job = (wait_job *)calloc(1, sizeof *job);
    if (job != NULL && kt != napi_undefined) {
        job->key = (uint8_t *)malloc(k.len ? k.len : 1);
        if (job->key != NULL) {
            memcpy(job->key, k.ptr, k.len);
            job->key_len = k.len;
        }
    }
    if (kt != napi_undefined) {
        key_free(&k);
    }
    if (job == NULL || (kt != napi_undefined && job->key == NULL)) {
        free(job);
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    job->timeout_ns = t < 0 ? UINT64_MAX : (t >= 1.8e19 ? UINT64_MAX - 1 : (uint64_t)t);
    atomic_init(&job->cancel, false);
    job->env = env;
    job->box = b;
    napi_value name;
    if (napi_create_string_utf8(env, "shmlimit permit wait", NAPI_AUTO_LENGTH, &name) != napi_ok ||
        napi_create_threadsafe_function(env, argv[3], NULL, name, 0, 1, job, wait_finalize, NULL,
                                        wait_deliver, &job->tsfn) != napi_ok) {
        free(job->key);
        free(job);
        throw_napi(env, "napi_create_threadsafe_function");
        return NULL;
    }
    /* From here on the finalizer owns the job (and drops these). */
    atomic_fetch_add(&b->refs, 1);
    atomic_fetch_add(&b->users, 1);
    pthread_mutex_lock(&jobs_lock);
    job->id = next_job_id++;
    if (job->id == 0) {
        job->id = next_job_id++;
    }
    job->next = jobs;
    jobs = job;
    uint32_t id = job->id;
    pthread_mutex_unlock(&jobs_lock);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int err = pthread_create(&job->thread, &attr, wait_thread, job);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        napi_release_threadsafe_function(job->tsfn, napi_tsfn_abort);
        char msg[128];
        snprintf(msg, sizeof msg, "shmlimit: could not start a permit wait thread: %s",
                 strerror(err));
        napi_throw_error(env, NULL, msg);
        return NULL;
    }
    job->started = true;
    napi_value out;
    NAPI(napi_create_uint32(env, id, &out));
    return out;
}

/* Cancel the waits of `env` (all of them), or the wait `id` of `env`. */
static void cancel_waits(napi_env env, uint32_t id) {
    pthread_mutex_lock(&jobs_lock);
    for (wait_job *j = jobs; j; j = j->next) {
        if (j->env == env && (id == 0 || j->id == id)) {
            atomic_store(&j->cancel, true);
        }
    }
    pthread_mutex_unlock(&jobs_lock);
}

/* cancelWait(id): the wait ends within 100 ms with status CLOSED (and holds nothing). */
static napi_value js_cancel_wait(napi_env env, napi_callback_info info) {
    ARGS(1);
    uint32_t id = 0;
    NAPI(napi_get_value_uint32(env, argv[0], &id));
    if (id != 0) {
        cancel_waits(env, id);
    }
    return NULL;
}

static void env_cleanup(void *arg) { cancel_waits((napi_env)arg, 0); }

/* ---------------------------------------------------------------------------------------- */
/* Reservations: tokens of a token bucket booked now, first come first served across          */
/* processes. JavaScript sleeps on a timer until ready_at_ns, then waits (which returns at once */
/* by then): the event loop never sleeps in the library.                                        */

static void reservation_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    shmlimit_reservation_free((shmlimit_reservation *)data);
}

/* reserve(limit, cost, maxDelayNs) -> [status, granted, delayNs, readyAtNs, handle|null]. */
static napi_value js_reserve(napi_env env, napi_callback_info info) {
    ARGS(3);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    uint64_t cost = 0, max_delay = 0;
    int32_t st;
    shmlimit_booking booking;
    memset(&booking, 0, sizeof booking);
    shmlimit_reservation *r = NULL;
    if (l == NULL) {
        st = CLOSED;
    } else if (!get_u64(env, argv[1], &cost) || !get_u64(env, argv[2], &max_delay)) {
        st = BAD_ARG;
    } else {
        st = shmlimit_reserve(l, cost, max_delay, &booking, &r);
    }
    napi_value out, v;
    NAPI(napi_create_array_with_length(env, 5, &out));
    NAPI(napi_create_int32(env, st, &v));
    NAPI(napi_set_element(env, out, 0, v));
    NAPI(napi_get_boolean(env, st == SHMLIMIT_OK && booking.granted, &v));
    NAPI(napi_set_element(env, out, 1, v));
    NAPI(napi_create_bigint_uint64(env, booking.delay_ns, &v));
    NAPI(napi_set_element(env, out, 2, v));
    NAPI(napi_create_bigint_uint64(env, booking.ready_at_ns, &v));
    NAPI(napi_set_element(env, out, 3, v));
    if (r != NULL) {
        if (napi_create_external(env, r, reservation_finalize, NULL, &v) != napi_ok) {
            shmlimit_reservation_free(r);
            throw_napi(env, "napi_create_external");
            return NULL;
        }
    } else {
        NAPI(napi_get_null(env, &v));
    }
    NAPI(napi_set_element(env, out, 4, v));
    return out;
}

/* reservationWait(handle) -> status; the grant is in the shared buffer. Called once
 * CLOCK_MONOTONIC has reached ready_at_ns, so the library does not sleep. */
static napi_value js_reservation_wait(napi_env env, napi_callback_info info) {
    ARGS(1);
    void *r = NULL;
    if (napi_get_value_external(env, argv[0], &r) != napi_ok) {
        return int32_value(env, BAD_ARG);
    }
    return int32_value(env, shmlimit_reservation_wait((const shmlimit_reservation *)r, in->decision));
}

/* reservationCancel(handle) -> status, or -3 when the tokens could not be given back. */
static napi_value js_reservation_cancel(napi_env env, napi_callback_info info) {
    ARGS(1);
    void *r = NULL;
    if (napi_get_value_external(env, argv[0], &r) != napi_ok) {
        return int32_value(env, BAD_ARG);
    }
    bool cancelled = false;
    int32_t st = shmlimit_reservation_cancel((const shmlimit_reservation *)r, &cancelled);
    if (st == SHMLIMIT_OK && !cancelled) {
        st = NOT_HELD;
    }
    return int32_value(env, st);
}

/* ---------------------------------------------------------------------------------------- */
/* Guarded limiters: attached when the file can be opened, each limit's policy deciding until */
/* then (fail open or fail closed).                                                           */

/* guardedOpen(path, reopenEveryNs) -> guarded limiter handle, or a status number. */
static napi_value js_guarded_open(napi_env env, napi_callback_info info) {
    ARGS(2);
    size_t len = 0;
    NAPI(napi_get_value_string_utf8(env, argv[0], NULL, 0, &len));
    char *path = (char *)malloc(len + 1);
    if (path == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    uint64_t every = 0;
    if (napi_get_value_string_utf8(env, argv[0], path, len + 1, &len) != napi_ok ||
        strlen(path) != len || !get_u64(env, argv[1], &every)) {
        free(path);
        return int32_value(env, BAD_ARG);
    }
    shmlimit_guarded_limiter *g = NULL;
    int32_t st = shmlimit_guarded_limiter_open(path, every, &g);
    free(path);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    return wrap_box(env, g, BOX_GUARDED_LIMITER);
}

/* guardedAttached(g) -> boolean, or a status number. */
static napi_value js_guarded_attached(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_guarded_limiter *g =
        (const shmlimit_guarded_limiter *)get_kind(env, argv[0], BOX_GUARDED_LIMITER);
    if (g == NULL) {
        return int32_value(env, CLOSED);
    }
    bool attached = false;
    int32_t st = shmlimit_guarded_limiter_attached(g, &attached);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out;
    NAPI(napi_get_boolean(env, attached, &out));
    return out;
}

/* guardedLimit(g, name, policy) -> guarded limit handle, or a status number. */
static napi_value js_guarded_limit(napi_env env, napi_callback_info info) {
    ARGS(3);
    const shmlimit_guarded_limiter *g =
        (const shmlimit_guarded_limiter *)get_kind(env, argv[0], BOX_GUARDED_LIMITER);
    if (g == NULL) {
        return int32_value(env, CLOSED);
    }
    uint32_t policy = 0;
    NAPI(napi_get_value_uint32(env, argv[2], &policy));
    size_t len = 0;
    NAPI(napi_get_value_string_utf8(env, argv[1], NULL, 0, &len));
    char *name = (char *)malloc(len + 1);
    if (name == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    if (napi_get_value_string_utf8(env, argv[1], name, len + 1, &len) != napi_ok ||
        strlen(name) != len) {
        free(name);
        return int32_value(env, BAD_ARG);
    }
    shmlimit_guarded_limit *l = NULL;
    int32_t st = shmlimit_guarded_limiter_limit(g, name, policy, &l);
    free(name);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    return wrap_box(env, l, BOX_GUARDED_LIMIT);
}

/* guardedDecide(gl, op, cost, key) -> status; the decision is in the shared buffer (refund:
 * the grant is read from it). op: 0 acquire, 1 peek, 2 acquire key, 3 refund. */
static napi_value js_guarded_decide(napi_env env, napi_callback_info info) {
    ARGS(4);
    const shmlimit_guarded_limit *l =
        (const shmlimit_guarded_limit *)get_kind(env, argv[0], BOX_GUARDED_LIMIT);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    int32_t op = 0;
    NAPI(napi_get_value_int32(env, argv[1], &op));
    uint64_t cost = 0;
    if (op != 3 && !get_u64(env, argv[2], &cost)) {
        return int32_value(env, BAD_ARG);
    }
    int32_t st;
    if (op == 0) {
        st = shmlimit_guarded_acquire(l, cost, in->decision);
    } else if (op == 1) {
        st = shmlimit_guarded_peek(l, cost, in->decision);
    } else if (op == 2) {
        keybuf_t k;
        if (!get_key(env, argv[3], &k)) {
            return int32_value(env, BAD_ARG);
        }
        st = shmlimit_guarded_acquire_key(l, k.ptr, k.len, cost, in->decision);
        key_free(&k);
    } else {
        shmlimit_decision grant = *in->decision;
        st = shmlimit_guarded_refund(l, &grant);
    }
    return int32_value(env, st);
}

/* ---------------------------------------------------------------------------------------- */
/* Module registration.                                                                     */

NAPI_MODULE_INIT() {
    inst_t *in = (inst_t *)calloc(1, sizeof *in);
    if (in == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    napi_value buffer, bytes;
    void *data = NULL;
    if (napi_create_arraybuffer(env, sizeof(shmlimit_decision), &data, &buffer) != napi_ok ||
        napi_create_typedarray(env, napi_uint8_array, sizeof(shmlimit_decision), buffer, 0,
                               &bytes) != napi_ok ||
        napi_create_reference(env, buffer, 1, &in->decision_ref) != napi_ok) {
        free(in);
        throw_napi(env, "creating the decision buffer");
        return NULL;
    }
    in->decision = (shmlimit_decision *)data;
    if (napi_set_instance_data(env, in, inst_finalize, NULL) != napi_ok) {
        throw_napi(env, "napi_set_instance_data");
        return NULL;
    }
    napi_add_env_cleanup_hook(env, env_cleanup, env);

    static const struct {
        const char *name;
        napi_callback cb;
    } fns[] = {
        {"version", js_version},
        {"strerror", js_strerror},
        {"lastError", js_last_error},
        {"open", js_open},
        {"close", js_close},
        {"definitions", js_definitions},
        {"limit", js_limit},
        {"definition", js_definition},
        {"acquire", js_acquire},
        {"peek", js_peek},
        {"acquireKey", js_acquire_key},
        {"refund", js_refund},
        {"stats", js_stats},
        {"acquireAll", js_acquire_all},
        {"refundAll", js_refund_all},
        {"headers", js_headers},
        {"policy", js_policy},
        {"retune", js_retune},
        {"count", js_count},
        {"permitTry", js_permit_try},
        {"permitRelease", js_permit_release},
        {"permitHolders", js_permit_holders},
        {"permitWait", js_permit_wait},
        {"cancelWait", js_cancel_wait},
        {"keyTag", js_key_tag},
        {"reserve", js_reserve},
        {"guardedOpen", js_guarded_open},
        {"guardedAttached", js_guarded_attached},
        {"guardedLimit", js_guarded_limit},
        {"guardedDecide", js_guarded_decide},
        {"reservationWait", js_reservation_wait},
        {"reservationCancel", js_reservation_cancel},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        napi_value fn;
        NAPI(napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].cb, in, &fn));
        NAPI(napi_set_named_property(env, exports, fns[i].name, fn));
    }
    NAPI(napi_set_named_property(env, exports, "decision", bytes));
    napi_value v;
    NAPI(napi_create_uint32(env, (uint32_t)sizeof(shmlimit_composed), &v));
    NAPI(napi_set_named_property(env, exports, "composedSize", v));
    NAPI(napi_create_uint32(env, (uint32_t)offsetof(shmlimit_composed, decisions), &v));
    NAPI(napi_set_named_property(env, exports, "composedDecisionsOffset", v));
    return exports;
}
