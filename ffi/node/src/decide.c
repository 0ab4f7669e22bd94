/* Decisions (the hot path), refunds, statistics, composed checks, client headers, policy,
 * retuning and maintenance counts. */
#include "addon.h"

typedef shmlimit_status (*decide_fn)(const shmlimit_limit *, uint64_t, shmlimit_decision *);

/* (limit, cost) -> status, the decision of `decide` in the shared buffer. Inline with a
 * constant `decide`: each caller is its own straight path. */
static inline napi_value decide_unkeyed(napi_env env, napi_callback_info info, decide_fn decide) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    uint64_t cost;
    int32_t st;
    if (l == NULL) {
        st = CLOSED;
    } else if (!get_u64(env, argv[1], &cost)) {
        st = BAD_ARG;
    } else {
        st = decide(l, cost, in->decision);
    }
    return int32_value(env, st);
}

/* acquire(limit, cost) -> status; the decision is in the shared buffer. */
napi_value js_acquire(napi_env env, napi_callback_info info) {
    return decide_unkeyed(env, info, shmlimit_acquire);
}

/* peek(limit, cost) -> status; the decision is in the shared buffer. */
napi_value js_peek(napi_env env, napi_callback_info info) {
    return decide_unkeyed(env, info, shmlimit_peek);
}

/* acquireKey(limit, key, cost, peek) -> status; the decision is in the shared buffer. */
napi_value js_acquire_key(napi_env env, napi_callback_info info) {
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
napi_value js_refund(napi_env env, napi_callback_info info) {
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
napi_value js_stats(napi_env env, napi_callback_info info) {
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
/* The keys of a composed check: a key buffer per check (released by keys_free). */
typedef struct {
    keybuf_t k[SHMLIMIT_MAX_CHECKS];
    uint32_t n;
} keys_t;

static void keys_free(keys_t *keys) {
    for (uint32_t i = 0; i < keys->n; i++) {
        key_free(&keys->k[i]);
    }
    keys->n = 0;
}

/* Read arrays of limit handles, costs and keys (undefined, or an array whose entries are a
 * key or undefined for an unkeyed limit) into checks (at most SHMLIMIT_MAX_CHECKS); the keys'
 * bytes stay in `keys` until keys_free. */
static int32_t read_checks(napi_env env, napi_value handles, napi_value costs, napi_value key_list,
                           shmlimit_check *checks, keys_t *keys, uint32_t *n_out) {
    uint32_t n = 0, nc = 0, nk = 0;
    keys->n = 0;
    napi_valuetype kt;
    if (napi_get_array_length(env, handles, &n) != napi_ok ||
        napi_get_array_length(env, costs, &nc) != napi_ok || n != nc || n > SHMLIMIT_MAX_CHECKS ||
        napi_typeof(env, key_list, &kt) != napi_ok ||
        (kt != napi_undefined &&
         (napi_get_array_length(env, key_list, &nk) != napi_ok || nk != n))) {
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
        if (kt == napi_undefined) {
            continue;
        }
        napi_value key;
        napi_valuetype t;
        if (napi_get_element(env, key_list, i, &key) != napi_ok ||
            napi_typeof(env, key, &t) != napi_ok) {
            return BAD_ARG;
        }
        if (t == napi_undefined || t == napi_null) {
            continue;
        }
        keybuf_t *k = &keys->k[keys->n];
        if (!get_key(env, key, k)) {
            return BAD_ARG;
        }
        keys->n++;
        checks[i].key = k->ptr;
        checks[i].key_len = k->len;
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

/* acquireAll(handles, costs, out Uint8Array(sizeof shmlimit_composed), keys?) -> status. */
napi_value js_acquire_all(napi_env env, napi_callback_info info) {
    ARGS(4);
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    keys_t keys;
    uint32_t n = 0;
    void *out = NULL;
    int32_t st = read_checks(env, argv[0], argv[1], argv[3], checks, &keys, &n);
    if (st == SHMLIMIT_OK && !get_bytes(env, argv[2], sizeof(shmlimit_composed), &out)) {
        st = BAD_ARG;
    }
    if (st == SHMLIMIT_OK) {
        shmlimit_composed c;
        st = shmlimit_acquire_all(checks, n, &c);
        if (st == SHMLIMIT_OK) {
            memcpy(out, &c, sizeof c);
        }
    }
    keys_free(&keys);
    return int32_value(env, st);
}

/* refundAll(handles, costs, composed Uint8Array, keys?) -> status. */
napi_value js_refund_all(napi_env env, napi_callback_info info) {
    ARGS(4);
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    keys_t keys;
    uint32_t n = 0;
    void *raw = NULL;
    int32_t st = read_checks(env, argv[0], argv[1], argv[3], checks, &keys, &n);
    if (st == SHMLIMIT_OK && !get_bytes(env, argv[2], sizeof(shmlimit_composed), &raw)) {
        st = BAD_ARG;
    }
    if (st == SHMLIMIT_OK) {
        shmlimit_composed c;
        memcpy(&c, raw, sizeof c);
        st = shmlimit_refund_all(checks, n, &c);
    }
    keys_free(&keys);
    return int32_value(env, st);
}

/* headers(handles, decisions Uint8Array(64 * n)) -> [RateLimit, RateLimit-Policy, Retry-After]. */
napi_value js_headers(napi_env env, napi_callback_info info) {
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
napi_value js_policy(napi_env env, napi_callback_info info) {
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
napi_value js_retune(napi_env env, napi_callback_info info) {
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
napi_value js_count(napi_env env, napi_callback_info info) {
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
