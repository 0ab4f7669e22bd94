//! A prototype of a napi-rs binding's hot path, to measure it against the C addon
//! (`../napi-rs.js`): `tryAcquire` on an unkeyed token bucket, its decision written into a
//! 64-byte buffer that JavaScript reads (as the C addon does), through three call paths:
//!
//! - `ProtoLimit.acquire(cost)`: a `#[napi]` class method (the receiver unwrapped and checked
//!   by napi-rs's generated glue);
//! - `acquireId(id, cost)`: a `#[napi]` function over a per-thread table of handles;
//! - `rawAcquireId(id, cost)`: the same function registered as a raw Node-API callback
//!   (`napi::sys`), with none of the generated glue.
//!
//! Not a product: errors are reduced to a status (3) and nothing is freed.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::cell::{Cell, RefCell};
use std::ptr;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::{sys, Env};
use napi_derive::napi;
use shmlimit::{Decision, Limiter, Rate, TokenBucket, TokenBucketLimit};

thread_local! {
    /// The decision buffer's memory (an ArrayBuffer of 64 bytes held by a strong reference
    /// for the life of the environment, which runs on this thread only).
    static OUT: Cell<*mut u8> = const { Cell::new(ptr::null_mut()) };
    /// The handles `acquireId` reaches by index.
    static TABLE: RefCell<Vec<TokenBucketLimit>> = const { RefCell::new(Vec::new()) };
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::from_reason(format!("{what} failed: {status}")))
    }
}

/// Exports `decision` (the buffer) and `rawAcquireId`.
#[napi(module_exports)]
pub fn init(exports: Object, env: Env) -> Result<()> {
    let mut data: *mut std::ffi::c_void = ptr::null_mut();
    let mut buffer = ptr::null_mut();
    let mut reference = ptr::null_mut();
    let mut raw = ptr::null_mut();
    // SAFETY: Node-API calls on the live environment of this module's initialisation, with
    // out-pointers to locals; the names are NUL-terminated literals.
    unsafe {
        check(
            sys::napi_create_arraybuffer(env.raw(), 64, &mut data, &mut buffer),
            "napi_create_arraybuffer",
        )?;
        // Never released: the buffer lives as long as the environment.
        check(
            sys::napi_create_reference(env.raw(), buffer, 1, &mut reference),
            "napi_create_reference",
        )?;
        check(
            sys::napi_set_named_property(env.raw(), exports.raw(), c"decision".as_ptr(), buffer),
            "napi_set_named_property",
        )?;
        check(
            sys::napi_create_function(
                env.raw(),
                c"rawAcquireId".as_ptr(),
                -1,
                Some(raw_acquire_id),
                ptr::null_mut(),
                &mut raw,
            ),
            "napi_create_function",
        )?;
        check(
            sys::napi_set_named_property(env.raw(), exports.raw(), c"rawAcquireId".as_ptr(), raw),
            "napi_set_named_property",
        )?;
    }
    OUT.with(|o| o.set(data.cast()));
    Ok(())
}

/// Write `d` into the buffer: remaining, retry-after and reset as f64 at bytes 0, 8, 16; the
/// flags (allowed, shadow-denied) as a u32 at byte 24; the grant record at bytes 32..56.
#[inline(always)]
fn write(d: &Decision) {
    let p = OUT.with(|o| o.get());
    if p.is_null() {
        return;
    }
    let (grant, origin) = shmlimit::c_abi::grant_record(d);
    // SAFETY: `p` is the 64-byte, 8-aligned ArrayBuffer of this thread's environment, kept
    // alive by its reference; every write below is inside it and aligned for its type.
    unsafe {
        let f = p.cast::<f64>();
        f.write(d.remaining() as f64);
        f.add(1).write(d.retry_after_ns() as f64);
        f.add(2).write(d.reset_after_ns() as f64);
        p.add(24)
            .cast::<u32>()
            .write(u32::from(d.is_allowed()) | u32::from(d.is_shadow_denied()) << 1);
        let g = p.add(32).cast::<u64>();
        g.write(grant[0]);
        g.add(1).write(grant[1]);
        g.add(2).write(origin);
    }
}

fn decide(limit: &TokenBucketLimit, cost: f64) -> i32 {
    match limit.try_acquire(cost as u64) {
        Ok(d) => {
            write(&d);
            0
        }
        Err(_) => 3,
    }
}

/// A token bucket handle as a napi-rs class.
#[napi]
pub struct ProtoLimit {
    limit: TokenBucketLimit,
}

#[napi]
impl ProtoLimit {
    /// `tryAcquire(cost)`: 0 and the decision in the buffer, or 3.
    #[napi]
    pub fn acquire(&self, cost: f64) -> i32 {
        decide(&self.limit, cost)
    }

    /// This handle's index in the table `acquireId` reads.
    #[napi]
    pub fn id(&self) -> u32 {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            t.push(self.limit.clone());
            (t.len() - 1) as u32
        })
    }
}

/// Create (or open) `path` with one token bucket `name` of `burst` refilled at `per_second`
/// per second (0: one per hour).
#[napi]
pub fn proto_open(path: String, name: String, per_second: u32, burst: u32) -> Result<ProtoLimit> {
    let fail = |e: shmlimit::Error| Error::from_reason(e.to_string());
    let rate = if per_second == 0 {
        Rate::new(1, Duration::from_secs(3600))
    } else {
        Rate::per_second(u64::from(per_second))
    }
    .map_err(fail)?;
    let limiter = Limiter::builder()
        .limit(&name, TokenBucket::new(u64::from(burst), rate))
        .create_or_open(&path)
        .map_err(fail)?;
    let limit = limiter.token_bucket(&name).map_err(fail)?;
    Ok(ProtoLimit { limit })
}

/// `tryAcquire(cost)` on the handle at `id` of the table: 0, 3, or -1 for no such handle.
#[napi]
pub fn acquire_id(id: u32, cost: f64) -> i32 {
    TABLE.with(|t| t.borrow().get(id as usize).map_or(-1, |l| decide(l, cost)))
}

/// `acquireId` as a raw Node-API callback.
unsafe extern "C" fn raw_acquire_id(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    let mut argv = [ptr::null_mut(); 2];
    let mut argc = argv.len();
    let mut id = u32::MAX;
    let mut cost = 0f64;
    let mut out = ptr::null_mut();
    // SAFETY: Node calls this with its live `env` and `info`; the out-pointers are locals and
    // `argv` holds `argc` slots. A failed conversion leaves `id` out of the table (-1).
    unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        );
        sys::napi_get_value_uint32(env, argv[0], &mut id);
        sys::napi_get_value_double(env, argv[1], &mut cost);
        sys::napi_create_int32(env, acquire_id(id, cost), &mut out);
    }
    out
}
