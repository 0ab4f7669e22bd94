/* Adaptive concurrency permits: the C ABI's opaque permit in an external, released once with
 * its outcome (a permit collected unreleased reports SHMLIMIT_OUTCOME_DROPPED). */
#include "addon.h"

typedef struct {
    shmlimit_adaptive_permit *permit; /* NULL once released */
} adaptive_box_t;

static void adaptive_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    adaptive_box_t *b = (adaptive_box_t *)data;
    if (b->permit != NULL) {
        shmlimit_adaptive_release(b->permit, SHMLIMIT_OUTCOME_DROPPED);
    }
    free(b);
}

/* The external of a held permit (it owns the permit from now on), or NULL with an exception
 * pending (the permit released as dropped). */
napi_value adaptive_external(napi_env env, shmlimit_adaptive_permit *p) {
    adaptive_box_t *b = (adaptive_box_t *)malloc(sizeof *b);
    if (b == NULL) {
        shmlimit_adaptive_release(p, SHMLIMIT_OUTCOME_DROPPED);
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    b->permit = p;
    napi_value out;
    if (napi_create_external(env, b, adaptive_finalize, NULL, &out) != napi_ok) {
        adaptive_finalize(env, b, NULL);
        throw_napi(env, "napi_create_external");
        return NULL;
    }
    return out;
}

/* adaptiveTry(limit, key | undefined) -> [status, permit external | null (the limit is
 * reached)]; with a key, a permit of that key of a keyed adaptive limit. */
napi_value js_adaptive_try(napi_env env, napi_callback_info info) {
    ARGS(2);
    napi_value out, st_v, permit_v;
    NAPI(napi_create_array_with_length(env, 2, &out));
    NAPI(napi_get_null(env, &permit_v));
    const shmlimit_limit *l = get_limit(env, argv[0]);
    int32_t st = CLOSED;
    if (l != NULL) {
        shmlimit_adaptive_permit *p = NULL;
        napi_valuetype kt;
        NAPI(napi_typeof(env, argv[1], &kt));
        if (kt == napi_undefined) {
            st = shmlimit_adaptive_acquire(l, 0, &p);
        } else {
            keybuf_t k;
            if (!get_key(env, argv[1], &k)) {
                return int32_value(env, BAD_ARG);
            }
            st = shmlimit_keyed_adaptive_acquire(l, k.ptr, k.len, 0, &p);
            key_free(&k);
        }
        if (st == SHMLIMIT_OK && p != NULL) {
            permit_v = adaptive_external(env, p);
            if (permit_v == NULL) {
                return NULL;
            }
        }
    }
    NAPI(napi_create_int32(env, st, &st_v));
    NAPI(napi_set_element(env, out, 0, st_v));
    NAPI(napi_set_element(env, out, 1, permit_v));
    return out;
}

/* adaptiveRelease(permit, outcome, latencyMs | undefined) -> status, or NOT_HELD when it was
 * released already. A bad outcome or latency leaves the permit held. */
napi_value js_adaptive_release(napi_env env, napi_callback_info info) {
    ARGS(3);
    void *data = NULL;
    uint32_t outcome = 0;
    if (napi_get_value_external(env, argv[0], &data) != napi_ok ||
        napi_get_value_uint32(env, argv[1], &outcome) != napi_ok) {
        return int32_value(env, BAD_ARG);
    }
    adaptive_box_t *b = (adaptive_box_t *)data;
    if (b->permit == NULL) {
        return int32_value(env, NOT_HELD);
    }
    napi_valuetype lt;
    NAPI(napi_typeof(env, argv[2], &lt));
    int32_t st;
    if (lt == napi_undefined) {
        st = shmlimit_adaptive_release(b->permit, outcome);
    } else {
        double ms = 0;
        if (napi_get_value_double(env, argv[2], &ms) != napi_ok) {
            return int32_value(env, BAD_ARG);
        }
        st = shmlimit_adaptive_release_measured(b->permit, outcome, ms / 1e3);
    }
    if (st == SHMLIMIT_OK) {
        b->permit = NULL; /* freed by the release */
    }
    return int32_value(env, st);
}

/* adaptiveStatus(limit, key | undefined) -> {limit, permits, min, max, inFlight, rttLongUs,
 * rttRecentUs} or a status number (rtt fields null before the first sample); with a key, of
 * that key of a keyed adaptive limit. */
napi_value js_adaptive_status(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    shmlimit_adaptive_info s;
    napi_valuetype kt;
    NAPI(napi_typeof(env, argv[1], &kt));
    int32_t st;
    if (kt == napi_undefined) {
        st = shmlimit_adaptive_status(l, &s);
    } else {
        keybuf_t k;
        if (!get_key(env, argv[1], &k)) {
            return int32_value(env, BAD_ARG);
        }
        st = shmlimit_keyed_adaptive_status(l, k.ptr, k.len, &s);
        key_free(&k);
    }
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out, v;
    NAPI(napi_create_object(env, &out));
    NAPI(napi_create_double(env, s.limit, &v));
    NAPI(napi_set_named_property(env, out, "limit", v));
    NAPI(napi_set_named_property(env, out, "permits", u64_number(env, s.permits)));
    NAPI(napi_set_named_property(env, out, "min", u64_number(env, s.min)));
    NAPI(napi_set_named_property(env, out, "max", u64_number(env, s.max)));
    NAPI(napi_set_named_property(env, out, "inFlight", u64_number(env, s.in_flight)));
    if (s.rtt_long_us > 0) {
        NAPI(napi_create_double(env, s.rtt_long_us, &v));
    } else {
        NAPI(napi_get_null(env, &v));
    }
    NAPI(napi_set_named_property(env, out, "rttLongUs", v));
    if (s.rtt_recent_us > 0) {
        NAPI(napi_create_double(env, s.rtt_recent_us, &v));
    } else {
        NAPI(napi_get_null(env, &v));
    }
    NAPI(napi_set_named_property(env, out, "rttRecentUs", v));
    return out;
}

/* The tuning fields of a definition object (lib/definitions.js rawDef's `tuning`), in the C
 * ABI's units: initial, windowNs, smoothing, tolerance, headroom, backoff. */
static const char *const TUNING_FIELDS[] = {"initial", "windowNs", "smoothing", "tolerance",
                                            "headroom", "backoff"};

/* `obj.tuning` into `*t` (the defaults first, then every field given); *present = 0 when the
 * object has no `tuning`. 0 for a field that is not a number (NaN and out-of-range values pass:
 * the library refuses them, naming the field). */
int read_tuning(napi_env env, napi_value obj, shmlimit_adaptive_tuning *t, int *present) {
    *present = 0;
    if (shmlimit_adaptive_tuning_default(t) != SHMLIMIT_OK) {
        return 0;
    }
    bool has = false;
    napi_value tv;
    if (napi_has_named_property(env, obj, "tuning", &has) != napi_ok) {
        return 0;
    }
    if (!has) {
        return 1;
    }
    napi_valuetype type;
    if (napi_get_named_property(env, obj, "tuning", &tv) != napi_ok ||
        napi_typeof(env, tv, &type) != napi_ok) {
        return 0;
    }
    if (type == napi_undefined || type == napi_null) {
        return 1;
    }
    double f[6];
    for (size_t i = 0; i < 6; i++) {
        napi_value v;
        if (napi_get_named_property(env, tv, TUNING_FIELDS[i], &v) != napi_ok ||
            napi_get_value_double(env, v, &f[i]) != napi_ok) {
            return 0;
        }
    }
    /* Integers exactly, or the library is told something it refuses (a fraction of a ns, a
     * negative count: out of range). */
    for (size_t i = 0; i < 2; i++) {
        if (!(f[i] >= 0) || f[i] > 18446744073709549568.0 || f[i] != (double)(uint64_t)f[i]) {
            return 0;
        }
    }
    t->initial = (uint64_t)f[0];
    t->window_ns = (uint64_t)f[1];
    t->smoothing = f[2];
    t->tolerance = f[3];
    t->headroom = f[4];
    t->backoff = f[5];
    *present = 1;
    return 1;
}

/* adaptiveTuning(limit) -> {initial, windowNs, smoothing, tolerance, headroom, backoff} as the
 * file stores them, or a status number. */
napi_value js_adaptive_tuning(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    shmlimit_adaptive_tuning t;
    int32_t st = shmlimit_adaptive_tuning_of(l, &t);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    const double f[6] = {(double)t.initial, (double)t.window_ns, t.smoothing,
                         t.tolerance,       t.headroom,          t.backoff};
    napi_value out, v;
    NAPI(napi_create_object(env, &out));
    for (size_t i = 0; i < 6; i++) {
        NAPI(napi_create_double(env, f[i], &v));
        NAPI(napi_set_named_property(env, out, TUNING_FIELDS[i], v));
    }
    return out;
}
