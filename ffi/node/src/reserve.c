/* Reservations: tokens of a token bucket booked in turn across processes. */
#include "addon.h"

static void reservation_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    shmlimit_reservation_free((shmlimit_reservation *)data);
}

/* reserve(limit, cost, maxDelayNs) -> [status, granted, delayNs, readyAtNs, handle|null]. */
napi_value js_reserve(napi_env env, napi_callback_info info) {
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
napi_value js_reservation_wait(napi_env env, napi_callback_info info) {
    ARGS(1);
    void *r = NULL;
    if (napi_get_value_external(env, argv[0], &r) != napi_ok) {
        return int32_value(env, BAD_ARG);
    }
    return int32_value(env, shmlimit_reservation_wait((const shmlimit_reservation *)r, in->decision));
}

/* reservationCancel(handle) -> status, or -3 when the tokens could not be given back. */
napi_value js_reservation_cancel(napi_env env, napi_callback_info info) {
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
