/* Prepared compositions: the limits and costs of a composed check read from JavaScript once
 * (prepareAll), so that each decision (preparedAcquire) converts only its keys and calls
 * shmlimit_acquire_all, the same call as acquireAll makes. */
#include "addon.h"

/* Tells a prepared composition from the other externals of the addon (a box starts with its
 * reference count, never this value). */
#define PREPARED_MAGIC 0x70726570u

typedef struct {
    uint32_t magic;
    uint32_t n;     /* checks */
    uint32_t keyed; /* the checks that take a key, each call passing that many keys */
    uint8_t is_keyed[SHMLIMIT_MAX_CHECKS];
    /* Each limit's box, held by a reference (its memory lives while this does; the limit
     * itself while its JavaScript owner has not closed it, which every call checks). */
    box_t *boxes[SHMLIMIT_MAX_CHECKS];
    /* The limits and costs; each call copies them and adds its keys. */
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
} prepared_t;

static void prepared_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    prepared_t *p = (prepared_t *)data;
    for (uint32_t i = 0; i < p->n; i++) {
        box_unref(p->boxes[i]);
    }
    free(p);
}

/* prepareAll(handles, costs, keyed booleans) -> a prepared composition (an external), or a
 * status number (CLOSED for a closed handle, BAD_ARG for anything else malformed). */
napi_value js_prepare_all(napi_env env, napi_callback_info info) {
    ARGS(3);
    uint32_t n = 0, nc = 0, nk = 0;
    if (napi_get_array_length(env, argv[0], &n) != napi_ok ||
        napi_get_array_length(env, argv[1], &nc) != napi_ok ||
        napi_get_array_length(env, argv[2], &nk) != napi_ok || n == 0 ||
        n > SHMLIMIT_MAX_CHECKS || nc != n || nk != n) {
        return int32_value(env, BAD_ARG);
    }
    prepared_t *p = (prepared_t *)calloc(1, sizeof *p);
    if (p == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    p->magic = PREPARED_MAGIC;
    int32_t st = SHMLIMIT_OK;
    for (uint32_t i = 0; i < n && st == SHMLIMIT_OK; i++) {
        napi_value h, c, k;
        bool keyed = false;
        if (napi_get_element(env, argv[0], i, &h) != napi_ok ||
            napi_get_element(env, argv[1], i, &c) != napi_ok ||
            napi_get_element(env, argv[2], i, &k) != napi_ok ||
            napi_get_value_bool(env, k, &keyed) != napi_ok ||
            !get_u64(env, c, &p->checks[i].cost)) {
            st = BAD_ARG;
            break;
        }
        if ((p->checks[i].limit = get_limit(env, h)) == NULL) {
            st = CLOSED;
            break;
        }
        p->boxes[i] = get_box(env, h);
        p->is_keyed[i] = keyed;
        p->keyed += keyed;
    }
    if (st != SHMLIMIT_OK) {
        free(p);
        return int32_value(env, st);
    }
    for (uint32_t i = 0; i < n; i++) {
        atomic_fetch_add(&p->boxes[i]->refs, 1);
    }
    p->n = n;
    napi_value out;
    if (napi_create_external(env, p, prepared_finalize, NULL, &out) != napi_ok) {
        prepared_finalize(env, p, NULL);
        throw_napi(env, "napi_create_external");
        return NULL;
    }
    return out;
}

/* preparedAcquire(prepared, key...) -> status, with one key (a string or bytes) per keyed
 * check in order; the outcome (a shmlimit_composed) is in the shared composed buffer. */
napi_value js_prepared_acquire(napi_env env, napi_callback_info info) {
    napi_value argv[1 + SHMLIMIT_MAX_CHECKS + 1];
    size_t argc = sizeof argv / sizeof argv[0];
    void *data = NULL;
    if (napi_get_cb_info(env, info, &argc, argv, NULL, &data) != napi_ok) {
        throw_napi(env, "napi_get_cb_info");
        return NULL;
    }
    inst_t *in = (inst_t *)data;
    void *ext = NULL;
    if (argc == 0 || napi_get_value_external(env, argv[0], &ext) != napi_ok || ext == NULL ||
        ((prepared_t *)ext)->magic != PREPARED_MAGIC) {
        return int32_value(env, BAD_ARG);
    }
    const prepared_t *p = (const prepared_t *)ext;
    if (argc - 1 != p->keyed) {
        return int32_value(env, BAD_ARG);
    }
    for (uint32_t i = 0; i < p->n; i++) {
        if (atomic_load_explicit(&p->boxes[i]->closed, memory_order_relaxed)) {
            return int32_value(env, CLOSED);
        }
    }
    shmlimit_check checks[SHMLIMIT_MAX_CHECKS];
    memcpy(checks, p->checks, sizeof checks);
    keybuf_t keys[SHMLIMIT_MAX_CHECKS];
    uint32_t got = 0;
    int32_t st = SHMLIMIT_OK;
    for (uint32_t i = 0; i < p->n; i++) {
        if (!p->is_keyed[i]) {
            continue;
        }
        if (!get_key(env, argv[1 + got], &keys[got])) {
            st = BAD_ARG;
            break;
        }
        checks[i].key = keys[got].ptr;
        checks[i].key_len = keys[got].len;
        got++;
    }
    if (st == SHMLIMIT_OK) {
        st = shmlimit_acquire_all(checks, p->n, in->composed);
    }
    for (uint32_t i = 0; i < got; i++) {
        key_free(&keys[i]);
    }
    return int32_value(env, st);
}
