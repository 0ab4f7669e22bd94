/* Library information and errors; limiters, limits and definitions. */
#include "addon.h"

napi_value js_version(napi_env env, napi_callback_info info) {
    (void)info;
    napi_value out;
    NAPI(napi_create_string_utf8(env, shmlimit_version(), NAPI_AUTO_LENGTH, &out));
    return out;
}

napi_value js_strerror(napi_env env, napi_callback_info info) {
    ARGS(1);
    int32_t code = 0;
    NAPI(napi_get_value_int32(env, argv[0], &code));
    napi_value out;
    NAPI(napi_create_string_utf8(env, shmlimit_strerror(code), NAPI_AUTO_LENGTH, &out));
    return out;
}

napi_value js_last_error(napi_env env, napi_callback_info info) {
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
napi_value js_open(napi_env env, napi_callback_info info) {
    ARGS(6);
    char *path = NULL;
    int got = get_cstring(env, argv[0], &path);
    if (got <= 0) {
        if (got == 0) {
            napi_throw_type_error(env, NULL, "path must be a string without NUL characters");
        }
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
        /* An adaptive limit's tuning (lib/definitions.js gives each its `tuning`). */
        shmlimit_adaptive_tuning *tuning = calloc(n, sizeof *tuning);
        const shmlimit_adaptive_tuning **tunings = calloc(n, sizeof *tunings);
        if (defs == NULL || names == NULL || tuning == NULL || tunings == NULL) {
            free(defs);
            free(names);
            free(tuning);
            free(tunings);
            free(path);
            napi_throw_error(env, NULL, "shmlimit addon: out of memory");
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++) {
            napi_value e;
            int tuned = 0;
            if (napi_get_element(env, argv[1], i, &e) != napi_ok ||
                !read_def(env, e, &defs[i], names[i], sizeof names[i]) ||
                !read_tuning(env, e, &tuning[i], &tuned)) {
                free(defs);
                free(names);
                free(tuning);
                free(tunings);
                free(path);
                return int32_value(env, BAD_ARG);
            }
            tunings[i] = tuned ? &tuning[i] : NULL;
        }
        st = shmlimit_limiter_create_or_open_tuned(path, defs, n, tunings, &opts, &lim);
        free(defs);
        free(names);
        free(tuning);
        free(tunings);
    }
    free(path);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    return wrap_box(env, lim, BOX_LIMITER);
}

/* close(handle): drop the JavaScript owner's reference now rather than at collection. */
napi_value js_close(napi_env env, napi_callback_info info) {
    ARGS(1);
    box_t *b = get_box(env, argv[0]);
    if (b != NULL) {
        box_close(b);
    }
    return NULL;
}

/* definitions(limiter) -> [raw def...] or a status number. */
napi_value js_definitions(napi_env env, napi_callback_info info) {
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
napi_value js_limit(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limiter *lim = get_limiter(env, argv[0]);
    if (lim == NULL) {
        return int32_value(env, CLOSED);
    }
    char *name = NULL;
    int got = get_cstring(env, argv[1], &name);
    if (got <= 0) {
        return got < 0 ? NULL : int32_value(env, BAD_ARG);
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
napi_value js_definition(napi_env env, napi_callback_info info) {
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
