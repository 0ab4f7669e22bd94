/* The Node-API addon of the `shmlimit` package (see addon.h): module registration. */
#include "addon.h"

/* Module registration: one instance (the decision and composed buffers) per environment, and
 * the functions lib/ calls. */

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
    napi_value composed_buffer, composed;
    if (napi_create_arraybuffer(env, sizeof(shmlimit_composed), &data, &composed_buffer) !=
            napi_ok ||
        napi_create_typedarray(env, napi_uint8_array, sizeof(shmlimit_composed), composed_buffer,
                               0, &composed) != napi_ok ||
        napi_create_reference(env, composed_buffer, 1, &in->composed_ref) != napi_ok) {
        napi_delete_reference(env, in->decision_ref);
        free(in);
        throw_napi(env, "creating the composed buffer");
        return NULL;
    }
    in->composed = (shmlimit_composed *)data;
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
        {"prepareAll", js_prepare_all},
        {"preparedAcquire", js_prepared_acquire},
        {"headers", js_headers},
        {"policy", js_policy},
        {"retune", js_retune},
        {"count", js_count},
        {"permitTry", js_permit_try},
        {"adaptiveTry", js_adaptive_try},
        {"adaptiveRelease", js_adaptive_release},
        {"adaptiveStatus", js_adaptive_status},
        {"adaptiveWait", js_adaptive_wait},
        {"adaptiveTuning", js_adaptive_tuning},
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
        {"countersIncr", js_counters_incr},
        {"countersDecr", js_counters_decr},
        {"countersSet", js_counters_set},
        {"countersCount", js_counters_count},
        {"countersAcquire", js_counters_acquire},
        {"countersSliding", js_counters_sliding},
        {"countersMoving", js_counters_moving},
        {"countersClear", js_counters_clear},
        {"countersClearAll", js_counters_clear_all},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        napi_value fn;
        NAPI(napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].cb, in, &fn));
        NAPI(napi_set_named_property(env, exports, fns[i].name, fn));
    }
    NAPI(napi_set_named_property(env, exports, "decision", bytes));
    NAPI(napi_set_named_property(env, exports, "composed", composed));
    napi_value v;
    NAPI(napi_create_uint32(env, (uint32_t)sizeof(shmlimit_composed), &v));
    NAPI(napi_set_named_property(env, exports, "composedSize", v));
    NAPI(napi_create_uint32(env, (uint32_t)offsetof(shmlimit_composed, decisions), &v));
    NAPI(napi_set_named_property(env, exports, "composedDecisionsOffset", v));
    return exports;
}
