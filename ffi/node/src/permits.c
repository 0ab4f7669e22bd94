/* Permits, and permit waits on threads of their own. */
#include "addon.h"

static napi_value permit_result(napi_env env, int32_t st, uint64_t permit) {
    napi_value out, a, b;
    NAPI(napi_create_array_with_length(env, 2, &out));
    NAPI(napi_create_int32(env, st, &a));
    NAPI(napi_create_bigint_uint64(env, permit, &b));
    NAPI(napi_set_element(env, out, 0, a));
    NAPI(napi_set_element(env, out, 1, b));
    return out;
}

/* permitTry(limit, key | undefined) -> [status, permit BigInt (0n: none free)]. */
napi_value js_permit_try(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return permit_result(env, CLOSED, 0);
    }
    napi_valuetype kt;
    NAPI(napi_typeof(env, argv[1], &kt));
    uint64_t permit = 0;
    int32_t st;
    if (kt == napi_undefined) {
        st = shmlimit_permit_acquire(l, &permit);
    } else {
        keybuf_t k;
        if (!get_key(env, argv[1], &k)) {
            return permit_result(env, BAD_ARG, 0);
        }
        st = shmlimit_permit_acquire_key(l, k.ptr, k.len, &permit);
        key_free(&k);
    }
    return permit_result(env, st, permit);
}

/* permitRelease(limit, permit BigInt) -> status (0: released, 1... errors), or -3 when the
 * permit was not held (not an error of the library). */
napi_value js_permit_release(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    uint64_t permit = 0;
    if (!get_u64(env, argv[1], &permit)) {
        return int32_value(env, BAD_ARG);
    }
    bool released = false;
    int32_t st = shmlimit_permit_release(l, permit, &released);
    if (st == SHMLIMIT_OK && !released) {
        st = NOT_HELD;
    }
    return int32_value(env, st);
}

/* permitHolders(limit) -> [{id, pid, reclaimable, sinceNs, leaseExpiryNs, keyTag}], or a
 * status number. */
napi_value js_permit_holders(napi_env env, napi_callback_info info) {
    ARGS(1);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    size_t count = 0;
    shmlimit_permit_holder *hs = NULL;
    int32_t st;
    for (;;) {
        size_t cap = count + 8;
        free(hs);
        hs = (shmlimit_permit_holder *)calloc(cap, sizeof *hs);
        if (hs == NULL) {
            napi_throw_error(env, NULL, "shmlimit addon: out of memory");
            return NULL;
        }
        st = shmlimit_permit_holders(l, hs, cap, &count);
        if (st != SHMLIMIT_OK || count <= cap) {
            break;
        }
    }
    if (st != SHMLIMIT_OK) {
        free(hs);
        return int32_value(env, st);
    }
    napi_value out;
    if (napi_create_array_with_length(env, count, &out) != napi_ok) {
        free(hs);
        throw_napi(env, "napi_create_array_with_length");
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        napi_value o, id, pid, rec, since, lease, tag;
        napi_status s = napi_create_object(env, &o);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].id, &id);
        if (s == napi_ok) s = napi_create_uint32(env, hs[i].pid, &pid);
        if (s == napi_ok) s = napi_get_boolean(env, hs[i].reclaimable, &rec);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].since_ns, &since);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].lease_expiry_ns, &lease);
        if (s == napi_ok) s = napi_create_bigint_uint64(env, hs[i].key_tag, &tag);
        if (s == napi_ok) s = napi_set_named_property(env, o, "id", id);
        if (s == napi_ok) s = napi_set_named_property(env, o, "pid", pid);
        if (s == napi_ok) s = napi_set_named_property(env, o, "reclaimable", rec);
        if (s == napi_ok) s = napi_set_named_property(env, o, "sinceNs", since);
        if (s == napi_ok) s = napi_set_named_property(env, o, "leaseExpiryNs", lease);
        if (s == napi_ok) s = napi_set_named_property(env, o, "keyTag", tag);
        if (s == napi_ok) s = napi_set_element(env, out, (uint32_t)i, o);
        if (s != napi_ok) {
            free(hs);
            throw_napi(env, "building the permit holders");
            return NULL;
        }
    }
    free(hs);
    return out;
}

/* keyTag(limit, key) -> BigInt, or a status number. */
napi_value js_key_tag(napi_env env, napi_callback_info info) {
    ARGS(2);
    const shmlimit_limit *l = get_limit(env, argv[0]);
    if (l == NULL) {
        return int32_value(env, CLOSED);
    }
    keybuf_t k;
    if (!get_key(env, argv[1], &k)) {
        return int32_value(env, BAD_ARG);
    }
    uint64_t tag = 0;
    int32_t st = shmlimit_key_tag(l, k.ptr, k.len, &tag);
    key_free(&k);
    if (st != SHMLIMIT_OK) {
        return int32_value(env, st);
    }
    napi_value out;
    NAPI(napi_create_bigint_uint64(env, tag, &out));
    return out;
}

/* ---- Permit waits on threads of their own. ----
 *
 * Lifetime of a wait: js_permit_wait creates the job, its thread-safe function (tsfn) and a
 * joinable thread. The thread waits, queues its result on the tsfn and releases the tsfn.
 * wait_deliver runs the JavaScript callback on the event loop (or, when the environment is
 * being torn down, only gives the permit back). The tsfn's finalizer, which Node runs once the
 * thread has released it or when the environment is torn down, whichever comes first, cancels
 * and joins the thread (at most one wait slice, 100 ms) and only then frees the job: a thread
 * never calls into a tsfn Node has destroyed. */

typedef struct wait_job {
    struct wait_job *next;
    uint32_t id;
    napi_env env;
    atomic_bool cancel;
    box_t *box;           /* a reference and a use held for the wait */
    uint8_t *key;         /* NULL: unkeyed */
    size_t key_len;
    uint64_t timeout_ns;  /* UINT64_MAX: no timeout */
    bool adaptive;        /* a permit of an adaptive limit (delivered as its external) */
    napi_threadsafe_function tsfn;
    pthread_t thread;
    bool started;
    /* Written by the thread before it queues the result, read by wait_deliver. */
    int32_t status;
    uint64_t permit;      /* 0 once delivered or given back */
    shmlimit_adaptive_permit *adaptive_permit; /* NULL once delivered or given back */
    char message[512];
    int os_error;
} wait_job;

/* Every wait not yet finalized, so that an environment's teardown (or an AbortSignal) can
 * cancel it. */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static wait_job *jobs = NULL;
static uint32_t next_job_id = 1;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void give_back(wait_job *job) {
    if (job->adaptive_permit != NULL) {
        shmlimit_adaptive_release(job->adaptive_permit, SHMLIMIT_OUTCOME_DROPPED);
        job->adaptive_permit = NULL;
    }
    if (job->permit != 0) {
        bool released;
        shmlimit_permit_release((const shmlimit_limit *)job->box->ptr, job->permit, &released);
        job->permit = 0;
    }
}

static void *wait_thread(void *arg) {
    wait_job *job = (wait_job *)arg;
    const shmlimit_limit *l = (const shmlimit_limit *)job->box->ptr;
    uint64_t start = now_ns();
    int32_t st = SHMLIMIT_OK;
    uint64_t permit = 0;
    shmlimit_adaptive_permit *adaptive = NULL;
    for (;;) {
        if (atomic_load(&job->cancel)) {
            st = CLOSED;
            break;
        }
        uint64_t slice = WAIT_SLICE_NS;
        if (job->timeout_ns != UINT64_MAX) {
            uint64_t spent = now_ns() - start;
            uint64_t left = spent >= job->timeout_ns ? 0 : job->timeout_ns - spent;
            slice = left < slice ? left : slice;
        }
        if (job->adaptive && job->key) {
            st = shmlimit_keyed_adaptive_acquire(l, job->key, job->key_len, slice, &adaptive);
        } else if (job->adaptive) {
            st = shmlimit_adaptive_acquire(l, slice, &adaptive);
        } else if (job->key) {
            st = shmlimit_permit_acquire_key_timeout(l, job->key, job->key_len, slice, &permit);
        } else {
            st = shmlimit_permit_acquire_timeout(l, slice, &permit);
        }
        if (st != SHMLIMIT_OK || permit != 0 || adaptive != NULL) {
            break;
        }
        if (job->timeout_ns != UINT64_MAX && now_ns() - start >= job->timeout_ns) {
            break; /* timed out: permit 0 */
        }
    }
    if (st != SHMLIMIT_OK && st != CLOSED) {
        snprintf(job->message, sizeof job->message, "%s", shmlimit_last_error());
        job->os_error = shmlimit_last_os_error();
    }
    job->status = st;
    job->permit = permit;
    job->adaptive_permit = adaptive;
    if (napi_call_threadsafe_function(job->tsfn, job, napi_tsfn_blocking) != napi_ok) {
        /* The environment is going away: nobody will take this permit. */
        give_back(job);
    }
    napi_release_threadsafe_function(job->tsfn, napi_tsfn_release);
    return NULL;
}

/* On the event loop: callback(status, permit, message, osError); `permit` is a BigInt (0n:
 * none), or for an adaptive wait the permit's external (null: none). */
static void wait_deliver(napi_env env, napi_value callback, void *context, void *data) {
    (void)context;
    wait_job *job = (wait_job *)data;
    if (env == NULL || callback == NULL) {
        give_back(job);
        return;
    }
    napi_value argv[4], undefined;
    napi_get_undefined(env, &undefined);
    napi_create_int32(env, job->status, &argv[0]);
    if (!job->adaptive) {
        napi_create_bigint_uint64(env, job->permit, &argv[1]);
    } else if (job->adaptive_permit == NULL) {
        napi_get_null(env, &argv[1]);
    } else {
        /* The external owns the permit from here on (its finalizer reports it dropped if
         * the callback never takes it); on failure it was released already. */
        argv[1] = adaptive_external(env, job->adaptive_permit);
        job->adaptive_permit = NULL;
        if (argv[1] == NULL) {
            return;
        }
    }
    napi_create_string_utf8(env, job->message, NAPI_AUTO_LENGTH, &argv[2]);
    napi_create_int32(env, job->os_error, &argv[3]);
    if (napi_call_function(env, undefined, callback, 4, argv, NULL) != napi_ok) {
        /* The callback could not take it (an exception is pending): give it back. */
        give_back(job);
    }
    job->permit = 0; /* delivered: the JavaScript Permit owns it */
    job->adaptive_permit = NULL;
}

static void wait_finalize(napi_env env, void *data, void *hint) {
    (void)env;
    (void)hint;
    wait_job *job = (wait_job *)data;
    atomic_store(&job->cancel, true);
    if (job->started) {
        pthread_join(job->thread, NULL);
    }
    pthread_mutex_lock(&jobs_lock);
    for (wait_job **p = &jobs; *p; p = &(*p)->next) {
        if (*p == job) {
            *p = job->next;
            break;
        }
    }
    pthread_mutex_unlock(&jobs_lock);
    box_unuse(job->box);
    box_unref(job->box);
    free(job->key);
    free(job);
}

/* A wait for a permit of argv[0] (key argv[1], timeout argv[2], callback argv[3]); an adaptive
 * wait has a key for a keyed adaptive limit. */
static napi_value start_wait(napi_env env, napi_value *argv, bool adaptive) {
    box_t *b = get_box(env, argv[0]);
    if (b == NULL || b->is_limiter != BOX_LIMIT || atomic_load(&b->closed)) {
        return int32_value(env, CLOSED);
    }
    double t = -1;
    NAPI(napi_get_value_double(env, argv[2], &t));
    napi_valuetype kt;
    NAPI(napi_typeof(env, argv[1], &kt));
    keybuf_t k;
    if (kt != napi_undefined && !get_key(env, argv[1], &k)) {
        return int32_value(env, BAD_ARG);
    }
    wait_job *job = (wait_job *)calloc(1, sizeof *job);
    if (job != NULL && kt != napi_undefined) {
        job->key = (uint8_t *)malloc(k.len ? k.len : 1);
        if (job->key != NULL) {
            memcpy(job->key, k.ptr, k.len);
            job->key_len = k.len;
        }
    }
    if (kt != napi_undefined) {
        key_free(&k);
    }
    if (job == NULL || (kt != napi_undefined && job->key == NULL)) {
        free(job);
        napi_throw_error(env, NULL, "shmlimit addon: out of memory");
        return NULL;
    }
    job->timeout_ns = t < 0 ? UINT64_MAX : (t >= 1.8e19 ? UINT64_MAX - 1 : (uint64_t)t);
    job->adaptive = adaptive;
    atomic_init(&job->cancel, false);
    job->env = env;
    job->box = b;
    napi_value name;
    if (napi_create_string_utf8(env, "shmlimit permit wait", NAPI_AUTO_LENGTH, &name) != napi_ok ||
        napi_create_threadsafe_function(env, argv[3], NULL, name, 0, 1, job, wait_finalize, NULL,
                                        wait_deliver, &job->tsfn) != napi_ok) {
        free(job->key);
        free(job);
        throw_napi(env, "napi_create_threadsafe_function");
        return NULL;
    }
    /* From here on the finalizer owns the job (and drops these). */
    atomic_fetch_add(&b->refs, 1);
    atomic_fetch_add(&b->users, 1);
    pthread_mutex_lock(&jobs_lock);
    job->id = next_job_id++;
    if (job->id == 0) {
        job->id = next_job_id++;
    }
    job->next = jobs;
    jobs = job;
    uint32_t id = job->id;
    pthread_mutex_unlock(&jobs_lock);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int err = pthread_create(&job->thread, &attr, wait_thread, job);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        napi_release_threadsafe_function(job->tsfn, napi_tsfn_abort);
        char msg[128];
        snprintf(msg, sizeof msg, "shmlimit: could not start a permit wait thread: %s",
                 strerror(err));
        napi_throw_error(env, NULL, msg);
        return NULL;
    }
    job->started = true;
    napi_value out;
    NAPI(napi_create_uint32(env, id, &out));
    return out;
}

/* permitWait(limit, key | undefined, timeoutNs | -1, callback) -> a wait id (> 0), or a status
 * (< 0) when the wait could not start. */
napi_value js_permit_wait(napi_env env, napi_callback_info info) {
    ARGS(4);
    return start_wait(env, argv, false);
}

/* adaptiveWait(limit, timeoutNs | -1, callback, key | undefined) -> a wait id (> 0), or a
 * status (< 0): the wait of permitWait for a permit of an adaptive limit (of the key of a
 * keyed one), blocked in the library's futex wait (woken by every release and by every window
 * that raises the limit). */
napi_value js_adaptive_wait(napi_env env, napi_callback_info info) {
    ARGS(4);
    napi_value args4[4];
    args4[0] = argv[0];
    args4[1] = argv[3];
    args4[2] = argv[1];
    args4[3] = argv[2];
    return start_wait(env, args4, true);
}

/* Cancel the waits of `env` (all of them), or the wait `id` of `env`. */
static void cancel_waits(napi_env env, uint32_t id) {
    pthread_mutex_lock(&jobs_lock);
    for (wait_job *j = jobs; j; j = j->next) {
        if (j->env == env && (id == 0 || j->id == id)) {
            atomic_store(&j->cancel, true);
        }
    }
    pthread_mutex_unlock(&jobs_lock);
}

/* cancelWait(id): the wait ends within 100 ms with status CLOSED (and holds nothing). */
napi_value js_cancel_wait(napi_env env, napi_callback_info info) {
    ARGS(1);
    uint32_t id = 0;
    NAPI(napi_get_value_uint32(env, argv[0], &id));
    if (id != 0) {
        cancel_waits(env, id);
    }
    return NULL;
}

void env_cleanup(void *arg) { cancel_waits((napi_env)arg, 0); }
