/* Handles (reference-counted boxes), the per-environment state, and the argument helpers
 * every call uses. */
#include "addon.h"

void box_unref(box_t *b) {
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        free(b);
    }
}

void box_unuse(box_t *b) {
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
void box_close(box_t *b) {
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


void inst_finalize(napi_env env, void *data, void *hint) {
    (void)hint;
    inst_t *in = (inst_t *)data;
    napi_delete_reference(env, in->decision_ref);
    napi_delete_reference(env, in->composed_ref);
    free(in);
}

/* ---------------------------------------------------------------------------------------- */
/* Small helpers. Failures of Node-API itself throw a JavaScript error and return NULL.      */


void throw_napi(napi_env env, const char *what) {
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








napi_value wrap_box(napi_env env, void *ptr, int is_limiter) {
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


int get_key(napi_env env, napi_value v, keybuf_t *k) {
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

void key_free(keybuf_t *k) { free(k->heap); }

/* A string argument as a NUL-terminated copy for the caller to free: 1; 0 for a value that is
 * not a string or holds a NUL character (nothing to free); -1 with a JavaScript error thrown
 * when memory runs out. */
int get_cstring(napi_env env, napi_value v, char **out) {
    *out = NULL;
    size_t len = 0;
    if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
        return 0;
    }
    char *s = (char *)malloc(len + 1);
    if (s == NULL) {
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return -1;
    }
    if (napi_get_value_string_utf8(env, v, s, len + 1, &len) != napi_ok || strlen(s) != len) {
        free(s);
        return 0;
    }
    *out = s;
    return 1;
}
