/* Guarded limiters: fail open or fail closed while the file is unavailable. */
#include "addon.h"

/* guardedOpen(path, reopenEveryNs) -> guarded limiter handle, or a status number. */
napi_value js_guarded_open(napi_env env, napi_callback_info info) {
    ARGS(2);
    uint64_t every = 0;
    if (!get_u64(env, argv[1], &every)) {
        return int32_value(env, BAD_ARG);
    }
    char *path = NULL;
    int got = get_cstring(env, argv[0], &path);
    if (got <= 0) {
        return got < 0 ? NULL : int32_value(env, BAD_ARG);
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
napi_value js_guarded_attached(napi_env env, napi_callback_info info) {
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
napi_value js_guarded_limit(napi_env env, napi_callback_info info) {
    ARGS(3);
    const shmlimit_guarded_limiter *g =
        (const shmlimit_guarded_limiter *)get_kind(env, argv[0], BOX_GUARDED_LIMITER);
    if (g == NULL) {
        return int32_value(env, CLOSED);
    }
    uint32_t policy = 0;
    NAPI(napi_get_value_uint32(env, argv[2], &policy));
    char *name = NULL;
    int got = get_cstring(env, argv[1], &name);
    if (got <= 0) {
        return got < 0 ? NULL : int32_value(env, BAD_ARG);
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
napi_value js_guarded_decide(napi_env env, napi_callback_info info) {
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
