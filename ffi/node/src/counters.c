/* Keyed counters (a limit of kind SHMLIMIT_COUNTERS): the window and the limit come with each
 * call. Each function returns the status; its numbers go to the shared decision buffer, as
 * 64-bit words for the counts (lib/counters.js reads them), or as the C decision for the
 * admissions. Windows and amounts arrive as integers JavaScript has checked (BAD_ARG
 * otherwise); the library checks their ranges. */
#include "addon.h"

/* The limit and key of a counters call: 1, or 0 with the status to return in `st`. */
static int limit_key(napi_env env, napi_value lv, napi_value kv, const shmlimit_limit **l,
                     keybuf_t *k, int32_t *st) {
    *l = get_limit(env, lv);
    if (*l == NULL) {
        *st = CLOSED;
        return 0;
    }
    if (!get_key(env, kv, k)) {
        *st = BAD_ARG;
        return 0;
    }
    return 1;
}

static uint64_t *words(inst_t *in) { return (uint64_t *)(void *)in->decision; }

/* countersIncr(limit, key, windowNs, amount) -> status; words[0] = the count, words[1] = ns
 * until its window ends, read right after (0 when it ended in between), so that the stores
 * cross into the addon once per request. */
napi_value js_counters_incr(napi_env env, napi_callback_info info) {
    ARGS(4);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    uint64_t window, amount;
    if (!get_u64(env, argv[2], &window) || !get_u64(env, argv[3], &amount)) {
        return int32_value(env, BAD_ARG);
    }
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    st = shmlimit_counters_incr(l, k.ptr, k.len, window, amount, &words(in)[0]);
    uint64_t count = 0;
    if (st != SHMLIMIT_OK ||
        shmlimit_counters_count(l, k.ptr, k.len, &count, &words(in)[1]) != SHMLIMIT_OK) {
        words(in)[1] = 0;
    }
    key_free(&k);
    return int32_value(env, st);
}

/* countersDecr(limit, key, amount) -> status; words[0] = the count. */
napi_value js_counters_decr(napi_env env, napi_callback_info info) {
    ARGS(3);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    uint64_t amount;
    if (!get_u64(env, argv[2], &amount)) {
        return int32_value(env, BAD_ARG);
    }
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    st = shmlimit_counters_decr(l, k.ptr, k.len, amount, &words(in)[0]);
    key_free(&k);
    return int32_value(env, st);
}

/* countersSet(limit, key, windowNs, count) -> status; words[0] = the count. */
napi_value js_counters_set(napi_env env, napi_callback_info info) {
    ARGS(4);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    uint64_t window, count;
    if (!get_u64(env, argv[2], &window) || !get_u64(env, argv[3], &count)) {
        return int32_value(env, BAD_ARG);
    }
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    st = shmlimit_counters_set(l, k.ptr, k.len, window, count, &words(in)[0]);
    key_free(&k);
    return int32_value(env, st);
}

/* countersCount(limit, key) -> status; words[0] = the count, words[1] = ns until it ends. */
napi_value js_counters_count(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    st = shmlimit_counters_count(l, k.ptr, k.len, &words(in)[0], &words(in)[1]);
    key_free(&k);
    return int32_value(env, st);
}

/* countersAcquire(limit, key, strategy, max, windowNs, cost) -> status; the decision in the
 * buffer. strategy: 0 fixed window, 1 sliding window counter, 2 moving window. */
napi_value js_counters_acquire(napi_env env, napi_callback_info info) {
    ARGS(6);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    uint32_t strategy;
    uint64_t max, window, cost;
    if (napi_get_value_uint32(env, argv[2], &strategy) != napi_ok || strategy > 2 ||
        !get_u64(env, argv[3], &max) || !get_u64(env, argv[4], &window) ||
        !get_u64(env, argv[5], &cost)) {
        return int32_value(env, BAD_ARG);
    }
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    switch (strategy) {
    case 0:
        st = shmlimit_counters_acquire_fixed(l, k.ptr, k.len, max, window, cost, in->decision);
        break;
    case 1:
        st = shmlimit_counters_acquire_sliding(l, k.ptr, k.len, max, window, cost, in->decision);
        break;
    default:
        st = shmlimit_counters_acquire_moving(l, k.ptr, k.len, max, window, cost, in->decision);
    }
    key_free(&k);
    return int32_value(env, st);
}

/* countersSliding(limit, key, windowNs) -> status; words[0..3] = previous, ns it still
 * weighs, current, ns until it expires. */
napi_value js_counters_sliding(napi_env env, napi_callback_info info) {
    ARGS(3);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    uint64_t window;
    if (!get_u64(env, argv[2], &window)) {
        return int32_value(env, BAD_ARG);
    }
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    shmlimit_sliding_counts c;
    st = shmlimit_counters_sliding(l, k.ptr, k.len, window, &c);
    key_free(&k);
    if (st == SHMLIMIT_OK) {
        words(in)[0] = c.previous;
        words(in)[1] = c.previous_weighs_for_ns;
        words(in)[2] = c.current;
        words(in)[3] = c.current_expires_in_ns;
    }
    return int32_value(env, st);
}

/* countersMoving(limit, key, max, windowNs) -> status; words[0] = admissions in the window,
 * words[1] = ns since the oldest. */
napi_value js_counters_moving(napi_env env, napi_callback_info info) {
    ARGS(4);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    uint64_t max, window;
    if (!get_u64(env, argv[2], &max) || !get_u64(env, argv[3], &window)) {
        return int32_value(env, BAD_ARG);
    }
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    st = shmlimit_counters_moving(l, k.ptr, k.len, max, window, &words(in)[0], &words(in)[1]);
    key_free(&k);
    return int32_value(env, st);
}

/* countersClear(limit, key) -> status. */
napi_value js_counters_clear(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l;
    keybuf_t k;
    int32_t st;
    if (!limit_key(env, argv[0], argv[1], &l, &k, &st)) {
        return int32_value(env, st);
    }
    st = shmlimit_counters_clear_key(l, k.ptr, k.len);
    key_free(&k);
    return int32_value(env, st);
}

/* countersClearAll(limit) -> status; words[0] = how many keys held something. */
napi_value js_counters_clear_all(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    return int32_value(env, shmlimit_counters_clear_all(l, &words(in)[0]));
}
