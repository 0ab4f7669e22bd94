//! The plain C structs of the ABI: limit definitions, open options, decisions, statistics.
//!
//! Enumerations that the caller writes (the kind and alignment of a definition) travel as
//! `uint32_t` fields and are checked here: a value the library does not know is an
//! `SHMLIMIT_INVALID_PARAMETER`, never undefined behaviour. `reserved` fields must be zero;
//! later versions may give them a meaning without changing the struct's size or layout.

use std::ffi::c_char;
use std::time::Duration;

use crate::algo::Decision;
use crate::limiter::Stats;
use crate::spec::{Algorithm, Alignment, IntoAlgorithm, Rate};

use super::status::{shmlimit_status, Failure};

/// The algorithm of a limit (the `kind` field of `shmlimit_def`).
///
/// Values are never reused; new kinds get new numbers.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_kind {
    /// A token bucket (GCRA): `limit` is the capacity (burst), refilled at `rate` tokens per
    /// `period_ns`. At most `floor(limit + rate * T / period_ns)` admissions in any interval `T`.
    SHMLIMIT_TOKEN_BUCKET = 1,
    /// At most `limit` per aligned window of `period_ns`.
    SHMLIMIT_FIXED_WINDOW = 2,
    /// The weighted sliding-window counter: about `limit` per `period_ns` (`limit` < 2^20).
    SHMLIMIT_SLIDING_WINDOW = 3,
    /// The exact sliding log: at most `limit` in every interval of `period_ns`.
    SHMLIMIT_SLIDING_LOG = 4,
    /// A concurrency limit: at most `limit` permits held at once; `period_ns` is the lease after
    /// which a held permit becomes reclaimable (0: no lease). Rate decisions on it return
    /// `SHMLIMIT_WRONG_KIND`.
    SHMLIMIT_CONCURRENCY = 5,
}

/// How window boundaries are placed (the `alignment` field of `shmlimit_def`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum shmlimit_alignment {
    /// Boundaries at multiples of the window in Unix time (the default, value 0).
    SHMLIMIT_ALIGN_WALL_CLOCK = 0,
    /// Boundaries at multiples of the window on `CLOCK_MONOTONIC`.
    SHMLIMIT_ALIGN_MONOTONIC = 1,
}

/// One limit definition: an input of `shmlimit_limiter_create_or_open`, and what
/// `shmlimit_limiter_definition` reports.
///
/// Zero-initialise it (`shmlimit_def d = {0};`) and set the fields the kind uses:
///
/// | kind | `limit` | `period_ns` | `rate` | `alignment` |
/// |---|---|---|---|---|
/// | `SHMLIMIT_TOKEN_BUCKET` | capacity (burst) | refill period | tokens per period | 0 |
/// | `SHMLIMIT_FIXED_WINDOW` | limit per window | window | 0 | a `shmlimit_alignment` |
/// | `SHMLIMIT_SLIDING_WINDOW` | limit per window | window | 0 | a `shmlimit_alignment` |
/// | `SHMLIMIT_SLIDING_LOG` | limit per window | window | 0 | 0 |
/// | `SHMLIMIT_CONCURRENCY` | permits held at once | lease (0: none) | 0 | 0 |
///
/// A token bucket's refill interval is `period_ns / rate` rounded up; the library reports a
/// stored token bucket as `rate = 1` per `period_ns` = that interval.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmlimit_def {
    /// The limit's name: NUL-terminated, 1 to 63 bytes of ASCII letters, digits and `_-.:/`.
    /// As an input it is only read during the call; as an output it points into the handle
    /// that reported it and is valid as long as that handle.
    pub name: *const c_char,
    /// A `shmlimit_kind` value.
    pub kind: u32,
    /// A `shmlimit_alignment` value (windowed kinds), else 0.
    pub alignment: u32,
    /// The capacity (token bucket), the limit per window, or the permits (concurrency).
    pub limit: u64,
    /// The window (windowed kinds), the refill period (token bucket) or the lease
    /// (concurrency), in nanoseconds.
    pub period_ns: u64,
    /// Token bucket: tokens added per `period_ns` (at least 1). Other kinds: 0.
    pub rate: u64,
    /// Must be zero.
    pub reserved: [u64; 4],
}

/// Options of `shmlimit_limiter_create_or_open` and `shmlimit_limiter_open`; a NULL pointer
/// means all defaults, and so does a zero-initialised struct.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct shmlimit_options {
    /// Permission bits of a created file (and the most an opened one may grant); 0 means the
    /// default `0600`. `0660` shares the file with the group. Bits above `0777` are invalid.
    pub mode: u32,
    /// 1 accepts a file owned by another user; 0 (the default) refuses it.
    pub allow_other_owner: u32,
    /// Must be zero.
    pub reserved: [u64; 4],
}

/// The outcome of one decision.
///
/// Callers allocate it (usually on the stack); the library writes the whole struct on success.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_decision {
    /// True when admitted (and, except for `shmlimit_peek`, the cost consumed). When false
    /// nothing was consumed.
    pub allowed: bool,
    /// True when a shadow (dry-run) limit would have denied: `allowed` is true anyway and
    /// nothing was consumed.
    pub shadow_denied: bool,
    /// Units that could still be admitted right now after this decision, if no one else acts.
    pub remaining: u64,
    /// Nanoseconds until the same request could be admitted if nothing else is admitted
    /// meanwhile; 0 when allowed, at least 1 when denied.
    pub retry_after_ns: u64,
    /// Written as zero; later versions may record the grant here (for example for a refund),
    /// so pass a decision back to the library unchanged.
    pub reserved: [u64; 4],
}

/// Decision counters of one limit, summed over every process attached to the file.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct shmlimit_stats {
    /// Decisions that admitted (including those a shadow limit would have denied).
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
    /// Decisions a shadow (dry-run) limit would have denied.
    pub shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    pub near_limit: u64,
    /// Zero; room for later counters.
    pub reserved: [u64; 4],
}

// The layout every C compiler must agree on (checked from C too, in ffi/tests/errors.c, and
// from Python in ffi/python/test_shmlimit.py). Changing any of these breaks the ABI.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<shmlimit_def>() == 72);
    assert!(offset_of!(shmlimit_def, kind) == 8);
    assert!(offset_of!(shmlimit_def, limit) == 16);
    assert!(offset_of!(shmlimit_def, reserved) == 40);
    assert!(size_of::<shmlimit_options>() == 40);
    assert!(size_of::<shmlimit_decision>() == 56);
    assert!(offset_of!(shmlimit_decision, shadow_denied) == 1);
    assert!(offset_of!(shmlimit_decision, remaining) == 8);
    assert!(size_of::<shmlimit_stats>() == 64);
};

impl From<Decision> for shmlimit_decision {
    fn from(d: Decision) -> Self {
        shmlimit_decision {
            allowed: d.is_allowed(),
            shadow_denied: d.is_shadow_denied(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_ns(),
            reserved: [0; 4],
        }
    }
}

impl From<Stats> for shmlimit_stats {
    fn from(s: Stats) -> Self {
        shmlimit_stats {
            allowed: s.allowed,
            denied: s.denied,
            shadow_denied: s.shadow_denied,
            near_limit: s.near_limit,
            reserved: [0; 4],
        }
    }
}

fn invalid(name: &str, reason: impl Into<String>) -> Failure {
    let reason = reason.into();
    let message = if name.is_empty() {
        format!("invalid parameter: {reason}")
    } else {
        format!("limit `{name}`: invalid parameter: {reason}")
    };
    Failure::new(shmlimit_status::SHMLIMIT_INVALID_PARAMETER, message)
}

impl shmlimit_options {
    /// Check the fields; `(mode, allow_other_owner)`.
    pub(crate) fn validate(&self) -> Result<(u32, bool), Failure> {
        if self.reserved != [0; 4] {
            return Err(invalid("", "shmlimit_options.reserved must be zero"));
        }
        if self.mode > 0o777 {
            return Err(invalid(
                "",
                format!(
                    "mode {:#o}: only permission bits (0777) are allowed",
                    self.mode
                ),
            ));
        }
        let allow = match self.allow_other_owner {
            0 => false,
            1 => true,
            n => {
                return Err(invalid(
                    "",
                    format!("allow_other_owner is {n}: must be 0 or 1"),
                ))
            }
        };
        let mode = if self.mode == 0 { 0o600 } else { self.mode };
        Ok((mode, allow))
    }
}

/// Convert a definition into the library's validated algorithm, given its already-read name.
pub(crate) fn to_algorithm(def: &shmlimit_def, name: &str) -> Result<Algorithm, Failure> {
    if def.reserved != [0; 4] {
        return Err(invalid(name, "shmlimit_def.reserved must be zero"));
    }
    let alignment = match def.alignment {
        0 => Alignment::WallClock,
        1 => Alignment::Monotonic,
        n => {
            return Err(invalid(
                name,
                format!("alignment {n}: not a shmlimit_alignment"),
            ))
        }
    };
    let no_rate = |what: &str| -> Result<(), Failure> {
        if def.rate != 0 {
            return Err(invalid(name, format!("rate must be 0 for a {what}")));
        }
        Ok(())
    };
    let algorithm = match def.kind {
        k if k == shmlimit_kind::SHMLIMIT_TOKEN_BUCKET as u32 => {
            if def.alignment != 0 {
                return Err(invalid(name, "alignment must be 0 for a token bucket"));
            }
            let rate = Rate::new(def.rate, Duration::from_nanos(def.period_ns))
                .map_err(|e| Failure::from(rename(e, name)))?;
            Algorithm::TokenBucket {
                capacity: def.limit,
                emission_ns: rate.emission_ns(),
            }
        }
        k if k == shmlimit_kind::SHMLIMIT_FIXED_WINDOW as u32 => {
            no_rate("fixed window")?;
            Algorithm::FixedWindow {
                limit: def.limit,
                window_ns: def.period_ns,
                alignment,
            }
        }
        k if k == shmlimit_kind::SHMLIMIT_SLIDING_WINDOW as u32 => {
            no_rate("sliding window")?;
            Algorithm::SlidingWindow {
                limit: def.limit,
                window_ns: def.period_ns,
                alignment,
            }
        }
        k if k == shmlimit_kind::SHMLIMIT_SLIDING_LOG as u32 => {
            no_rate("sliding log")?;
            if def.alignment != 0 {
                return Err(invalid(name, "alignment must be 0 for a sliding log"));
            }
            Algorithm::SlidingLog {
                limit: def.limit,
                window_ns: def.period_ns,
            }
        }
        k if k == shmlimit_kind::SHMLIMIT_CONCURRENCY as u32 => {
            no_rate("concurrency limit")?;
            if def.alignment != 0 {
                return Err(invalid(name, "alignment must be 0 for a concurrency limit"));
            }
            Algorithm::Concurrency {
                permits: def.limit,
                lease_ns: def.period_ns,
            }
        }
        k => return Err(invalid(name, format!("kind {k}: not a shmlimit_kind"))),
    };
    Ok(algorithm.into_algorithm(name)?)
}

fn rename(e: crate::Error, name: &str) -> crate::Error {
    match e {
        crate::Error::InvalidParameter { limit, reason } if limit.is_empty() => {
            crate::Error::InvalidParameter {
                limit: name.to_owned(),
                reason,
            }
        }
        other => other,
    }
}

/// Describe a stored definition; `name` must outlive every use of the result.
pub(crate) fn from_algorithm(algorithm: &Algorithm, name: *const c_char) -> shmlimit_def {
    let align = |a: Alignment| match a {
        Alignment::WallClock => shmlimit_alignment::SHMLIMIT_ALIGN_WALL_CLOCK as u32,
        Alignment::Monotonic => shmlimit_alignment::SHMLIMIT_ALIGN_MONOTONIC as u32,
    };
    let (kind, alignment, limit, period_ns, rate) = match *algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => (
            shmlimit_kind::SHMLIMIT_TOKEN_BUCKET as u32,
            0,
            capacity,
            emission_ns,
            1,
        ),
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => (
            shmlimit_kind::SHMLIMIT_FIXED_WINDOW as u32,
            align(alignment),
            limit,
            window_ns,
            0,
        ),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => (
            shmlimit_kind::SHMLIMIT_SLIDING_WINDOW as u32,
            align(alignment),
            limit,
            window_ns,
            0,
        ),
        Algorithm::SlidingLog { limit, window_ns } => (
            shmlimit_kind::SHMLIMIT_SLIDING_LOG as u32,
            0,
            limit,
            window_ns,
            0,
        ),
        Algorithm::Concurrency { permits, lease_ns } => (
            shmlimit_kind::SHMLIMIT_CONCURRENCY as u32,
            0,
            permits,
            lease_ns,
            0,
        ),
        // A kind this ABI has no number for yet: reported as kind 0 with its capacity, so a
        // listing still shows it.
        #[allow(unreachable_patterns)]
        _ => (0, 0, algorithm.capacity(), 0, 0),
    };
    shmlimit_def {
        name,
        kind,
        alignment,
        limit,
        period_ns,
        rate,
        reserved: [0; 4],
    }
}
