/*
 * The Node-API addon of the `shmlimit` package: a thin C layer over ffi/include/shmlimit.h.
 * This header is what its files share: addon.c (registration), handles.c, limiter.c,
 * decide.c, prepared.c, permits.c, reserve.c, guarded.c and counters.c, one concern each.
 *
 * Only Node-API (no V8 or libuv headers), so one build works on every Node version with
 * Node-API 8. The JavaScript side (lib/) owns the API; these files convert arguments,
 * call the C ABI and hand back its status codes (0 or a shmlimit_status; CLOSED for a handle
 * closed from JavaScript). Nothing here decides anything: every number comes from the library.
 *
 * The hot path (acquire, acquire_key, peek) writes the C decision into one 64-byte buffer per
 * Node environment that JavaScript reads through typed arrays, and returns only the status:
 * no object is built in C. A prepared composition (prepared.c) writes its composed outcome
 * into a second such buffer.
 *
 * Permit waits run on a thread of their own (not the libuv pool, which a few long waits would
 * starve of its 4 threads), blocked on the library's futex wait in slices of at most 100 ms,
 * and deliver their result to the event loop through a thread-safe function.
 */
#ifndef SHMLIMIT_NODE_ADDON_H
#define SHMLIMIT_NODE_ADDON_H

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
/* Status of a permit release that found the permit no longer held. */
#define NOT_HELD (-3)

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

typedef struct {
    shmlimit_decision *decision; /* the shared decision buffer's memory */
    napi_ref decision_ref;
    shmlimit_composed *composed; /* the shared composed buffer's (prepared compositions) */
    napi_ref composed_ref;
} inst_t;

#define NAPI(call)                                                                          \
    do {                                                                                    \
        if ((call) != napi_ok) {                                                            \
            throw_napi(env, #call);                                                         \
            return NULL;                                                                    \
        }                                                                                   \
    } while (0)

/* A key argument: a string (its UTF-8 bytes) or a Buffer / Uint8Array (its bytes). */
typedef struct {
    const uint8_t *ptr;
    size_t len;
    char *heap;
    char stack[1100];
} keybuf_t;

#define ARGS(n)                                                                             \
    napi_value argv[(n) > 0 ? (n) : 1];                                                     \
    void *data_ = NULL;                                                                     \
    if ((n) > 0 && args(env, info, (n), argv, &data_) == NULL) {                            \
        return NULL;                                                                        \
    }                                                                                       \
    inst_t *in = (inst_t *)data_;                                                           \
    (void)in

/* Shared by the files of the addon (hidden: the build uses -fvisibility=hidden). */
void box_unref(box_t *b);
void box_unuse(box_t *b);
void box_close(box_t *b);
void inst_finalize(napi_env env, void *data, void *hint);
void throw_napi(napi_env env, const char *what);
napi_value wrap_box(napi_env env, void *ptr, int is_limiter);
int get_key(napi_env env, napi_value v, keybuf_t *k);
void key_free(keybuf_t *k);
napi_value js_version(napi_env env, napi_callback_info info);
napi_value js_strerror(napi_env env, napi_callback_info info);
napi_value js_last_error(napi_env env, napi_callback_info info);
napi_value js_open(napi_env env, napi_callback_info info);
napi_value js_close(napi_env env, napi_callback_info info);
napi_value js_definitions(napi_env env, napi_callback_info info);
napi_value js_limit(napi_env env, napi_callback_info info);
napi_value js_definition(napi_env env, napi_callback_info info);
napi_value js_acquire(napi_env env, napi_callback_info info);
napi_value js_peek(napi_env env, napi_callback_info info);
napi_value js_acquire_key(napi_env env, napi_callback_info info);
napi_value js_refund(napi_env env, napi_callback_info info);
napi_value js_stats(napi_env env, napi_callback_info info);
napi_value js_acquire_all(napi_env env, napi_callback_info info);
napi_value js_refund_all(napi_env env, napi_callback_info info);
napi_value js_prepare_all(napi_env env, napi_callback_info info);
napi_value js_prepared_acquire(napi_env env, napi_callback_info info);
napi_value js_headers(napi_env env, napi_callback_info info);
napi_value js_policy(napi_env env, napi_callback_info info);
napi_value js_retune(napi_env env, napi_callback_info info);
napi_value js_count(napi_env env, napi_callback_info info);
napi_value js_permit_try(napi_env env, napi_callback_info info);
napi_value js_permit_release(napi_env env, napi_callback_info info);
napi_value js_permit_holders(napi_env env, napi_callback_info info);
napi_value js_key_tag(napi_env env, napi_callback_info info);
napi_value js_permit_wait(napi_env env, napi_callback_info info);
napi_value js_cancel_wait(napi_env env, napi_callback_info info);
void env_cleanup(void *arg);
napi_value js_reserve(napi_env env, napi_callback_info info);
napi_value js_reservation_wait(napi_env env, napi_callback_info info);
napi_value js_reservation_cancel(napi_env env, napi_callback_info info);
napi_value js_guarded_open(napi_env env, napi_callback_info info);
napi_value js_guarded_attached(napi_env env, napi_callback_info info);
napi_value js_guarded_limit(napi_env env, napi_callback_info info);
napi_value js_guarded_decide(napi_env env, napi_callback_info info);
napi_value js_adaptive_try(napi_env env, napi_callback_info info);
napi_value js_adaptive_release(napi_env env, napi_callback_info info);
napi_value js_adaptive_status(napi_env env, napi_callback_info info);
napi_value js_adaptive_wait(napi_env env, napi_callback_info info);
napi_value adaptive_external(napi_env env, shmlimit_adaptive_permit *p);
napi_value js_adaptive_tuning(napi_env env, napi_callback_info info);
int read_tuning(napi_env env, napi_value obj, shmlimit_adaptive_tuning *t, int *present);
napi_value js_counters_incr(napi_env env, napi_callback_info info);
napi_value js_counters_decr(napi_env env, napi_callback_info info);
napi_value js_counters_set(napi_env env, napi_callback_info info);
napi_value js_counters_count(napi_env env, napi_callback_info info);
napi_value js_counters_acquire(napi_env env, napi_callback_info info);
napi_value js_counters_sliding(napi_env env, napi_callback_info info);
napi_value js_counters_moving(napi_env env, napi_callback_info info);
napi_value js_counters_clear(napi_env env, napi_callback_info info);
napi_value js_counters_clear_all(napi_env env, napi_callback_info info);


int get_cstring(napi_env env, napi_value v, char **out);

/* Small helpers of every call, inline (the hot path among them). */

static inline napi_value int32_value(napi_env env, int32_t v) {
    napi_value out;
    NAPI(napi_create_int32(env, v, &out));
    return out;
}

static inline napi_value u64_number(napi_env env, uint64_t v) {
    napi_value out;
    NAPI(napi_create_double(env, (double)v, &out));
    return out;
}

/* A non-negative integer argument (a JavaScript number, or a BigInt). */
static inline int get_u64(napi_env env, napi_value v, uint64_t *out) {
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

static inline box_t *get_box(napi_env env, napi_value v) {
    void *p = NULL;
    if (napi_get_value_external(env, v, &p) != napi_ok) {
        return NULL;
    }
    return (box_t *)p;
}

/* The live limit of a handle argument, or NULL (closed or not a handle). */
static inline const shmlimit_limit *get_limit(napi_env env, napi_value v) {
    box_t *b = get_box(env, v);
    if (b == NULL || b->is_limiter != BOX_LIMIT ||
        atomic_load_explicit(&b->closed, memory_order_relaxed)) {
        return NULL;
    }
    return (const shmlimit_limit *)b->ptr;
}

static inline const shmlimit_limiter *get_limiter(napi_env env, napi_value v) {
    box_t *b = get_box(env, v);
    if (b == NULL || b->is_limiter != BOX_LIMITER ||
        atomic_load_explicit(&b->closed, memory_order_relaxed)) {
        return NULL;
    }
    return (const shmlimit_limiter *)b->ptr;
}

/* The live guarded limiter (kind BOX_GUARDED_LIMITER) or guarded limit of a handle argument. */
static inline const void *get_kind(napi_env env, napi_value v, int kind) {
    box_t *b = get_box(env, v);
    if (b == NULL || b->is_limiter != kind ||
        atomic_load_explicit(&b->closed, memory_order_relaxed)) {
        return NULL;
    }
    return b->ptr;
}

/* The arguments of a call (see ARGS). */
static inline napi_value args(napi_env env, napi_callback_info info, size_t want, napi_value *argv,
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

#endif
