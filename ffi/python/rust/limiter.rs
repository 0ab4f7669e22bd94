//! `shmlimit._native.Limiter`: one attached file, and limit definitions between Python and the
//! library.
//!
//! A definition crosses as the fields of C's `shmlimit_def` (the Python `_Def` object's
//! attributes going in, a [`DefTuple`] coming out), checked here as the C ABI checks them, with
//! the same messages: the Python classes (`TokenBucket`, `FixedWindow`, ...) write and read
//! those fields, and every language describes a limit the same way.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::RwLock;
use std::time::Duration;

use pyo3::prelude::*;
use shmlimit::{
    Algorithm, Alignment, FleetShare, FullPolicy, IntoAlgorithm, Keyed, LimitDef, OnConflict,
    OnReboot, Rate,
};

use crate::errors::{closed, OrRaise};

/// `(name, (kind, alignment, limit, period_ns, rate), (key_capacity, on_full, flags,
/// near_limit, split, fleet_weight, fleet_emission_ns))`: the fields of `shmlimit_def`, the
/// algorithm's then the options'.
pub(crate) type DefTuple = (
    String,
    (u32, u32, u64, u64, u64),
    (u64, u32, u32, u16, u16, u32, u64),
    Option<Tuning>,
);

/// An adaptive limit's tuning as Python's `_Def.adaptive_tuning` carries it: initial limit
/// (0: the minimum), window ns, smoothing, tolerance, headroom, backoff.
pub(crate) type Tuning = (u64, u64, f64, f64, f64, f64);

const TOKEN_BUCKET: u32 = 1;
const FIXED_WINDOW: u32 = 2;
const SLIDING_WINDOW: u32 = 3;
const SLIDING_LOG: u32 = 4;
const CONCURRENCY: u32 = 5;
/// An adaptive concurrency limit: `limit` its maximum, `rate` its minimum, `period_ns` its
/// lease; the default tuning.
const ADAPTIVE_CONCURRENCY: u32 = 8;
const COUNTERS: u32 = 6;
const DEF_SHADOW: u32 = 1;
const DEF_NEAR_LIMIT: u32 = 2;

fn invalid(name: &str, reason: impl Into<String>) -> shmlimit::Error {
    shmlimit::Error::InvalidParameter {
        limit: name.to_owned(),
        reason: reason.into(),
    }
}

fn rename(e: shmlimit::Error, name: &str) -> shmlimit::Error {
    match e {
        shmlimit::Error::InvalidParameter { limit, reason } if limit.is_empty() => {
            invalid(name, reason)
        }
        other => other,
    }
}

/// A definition's fields, read from a Python `_Def`.
struct RawDef {
    name: String,
    kind: u32,
    alignment: u32,
    limit: u64,
    period_ns: u64,
    rate: u64,
    key_capacity: u64,
    on_full: u32,
    flags: u32,
    near_limit: u16,
    split: u16,
    fleet_weight: u32,
    fleet_emission_ns: u64,
    adaptive_tuning: Option<Tuning>,
}

impl RawDef {
    fn read(obj: &Bound<'_, PyAny>) -> PyResult<RawDef> {
        macro_rules! field {
            ($name:ident) => {
                obj.getattr(stringify!($name))?.extract()?
            };
        }
        Ok(RawDef {
            name: field!(name),
            kind: field!(kind),
            alignment: field!(alignment),
            limit: field!(limit),
            period_ns: field!(period_ns),
            rate: field!(rate),
            key_capacity: field!(key_capacity),
            on_full: field!(on_full),
            flags: field!(flags),
            near_limit: field!(near_limit),
            split: field!(split),
            fleet_weight: field!(fleet_weight),
            fleet_emission_ns: field!(fleet_emission_ns),
            adaptive_tuning: match obj.getattr("adaptive_tuning") {
                Ok(t) => t.extract()?,
                Err(_) => None,
            },
        })
    }

    /// The library's definition (algorithm validated; the options are validated when the file
    /// is created or opened).
    fn to_def(&self) -> shmlimit::Result<LimitDef> {
        let name = self.name.as_str();
        let mut out = LimitDef::new(name, self.algorithm()?);
        if self.flags & !(DEF_SHADOW | DEF_NEAR_LIMIT) != 0 {
            return Err(invalid(
                name,
                format!("flags {:#x}: unknown bits", self.flags),
            ));
        }
        out.shadow = self.flags & DEF_SHADOW != 0;
        if self.flags & DEF_NEAR_LIMIT != 0 {
            out.near_limit = self.near_limit;
        }
        out.split = self.split.max(1);
        let on_full = match self.on_full {
            0 => FullPolicy::Deny,
            1 => FullPolicy::Allow,
            2 => FullPolicy::Error,
            n => return Err(invalid(name, format!("on_full {n}: not a full policy"))),
        };
        if self.key_capacity > 0 {
            out.keyed = Some(Keyed {
                capacity: self.key_capacity,
                on_full,
            });
        }
        if self.fleet_weight != 0 {
            let total =
                Rate::from_emission_ns(self.fleet_emission_ns).map_err(|e| rename(e, name))?;
            out.fleet = Some(FleetShare {
                total,
                weight: self.fleet_weight,
            });
        }
        Ok(out)
    }

    fn algorithm(&self) -> shmlimit::Result<Algorithm> {
        let name = self.name.as_str();
        let alignment = match self.alignment {
            0 => Alignment::WallClock,
            1 => Alignment::Monotonic,
            2 => {
                let offset = self.rate as i64;
                if offset.unsigned_abs() > Alignment::MAX_UTC_OFFSET_S as u64 {
                    return Err(invalid(
                        name,
                        format!("calendar UTC offset {offset} s: must be within 18 h either way"),
                    ));
                }
                Alignment::Calendar {
                    utc_offset_s: offset as i32,
                }
            }
            n => return Err(invalid(name, format!("alignment {n}: not an alignment"))),
        };
        let algorithm = match self.kind {
            TOKEN_BUCKET => {
                let rate = Rate::new(self.rate, Duration::from_nanos(self.period_ns))
                    .map_err(|e| rename(e, name))?;
                Algorithm::TokenBucket {
                    capacity: self.limit,
                    emission_ns: rate.emission_ns(),
                }
            }
            FIXED_WINDOW => Algorithm::FixedWindow {
                limit: self.limit,
                window_ns: self.period_ns,
                alignment,
            },
            SLIDING_WINDOW => Algorithm::SlidingWindow {
                limit: self.limit,
                window_ns: self.period_ns,
                alignment,
            },
            SLIDING_LOG => Algorithm::SlidingLog {
                limit: self.limit,
                window_ns: self.period_ns,
            },
            CONCURRENCY => Algorithm::Concurrency {
                permits: self.limit,
                lease_ns: self.period_ns,
            },
            ADAPTIVE_CONCURRENCY => {
                let mut spec = shmlimit::AdaptiveConcurrency::new(self.rate, self.limit);
                if self.period_ns > 0 {
                    spec = spec.lease(Duration::from_nanos(self.period_ns));
                }
                if let Some((initial, window_ns, s, t, h, b)) = self.adaptive_tuning {
                    if window_ns % 1_000_000 != 0 {
                        return Err(invalid(
                            name,
                            format!(
                                "window {} s: must be a whole number of milliseconds",
                                window_ns as f64 / 1e9
                            ),
                        ));
                    }
                    spec.initial = (initial != 0).then_some(initial);
                    spec.window = Duration::from_nanos(window_ns);
                    (spec.smoothing, spec.tolerance, spec.headroom, spec.backoff) = (s, t, h, b);
                }
                return spec.into_algorithm(name);
            }
            COUNTERS => Algorithm::Counters {
                log_entries: self.limit,
            },
            k => return Err(invalid(name, format!("kind {k}: not a kind of limit"))),
        };
        algorithm.into_algorithm(name)
    }
}

/// A stored definition's fields, with `algorithm` in place of the stored one (the live one).
pub(crate) fn def_tuple(def: &LimitDef, algorithm: &Algorithm) -> DefTuple {
    let align = |a: Alignment| match a {
        Alignment::WallClock => (0, 0),
        Alignment::Monotonic => (1, 0),
        // A calendar window's UTC offset travels in the rate field, as an int64.
        Alignment::Calendar { utc_offset_s } => (2, utc_offset_s as i64 as u64),
    };
    let (kind, (alignment, rate), limit, period_ns) = match *algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => (TOKEN_BUCKET, (0, 1), capacity, emission_ns),
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => (FIXED_WINDOW, align(alignment), limit, window_ns),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => (SLIDING_WINDOW, align(alignment), limit, window_ns),
        Algorithm::SlidingLog { limit, window_ns } => (SLIDING_LOG, (0, 0), limit, window_ns),
        Algorithm::Concurrency { permits, lease_ns } => (CONCURRENCY, (0, 0), permits, lease_ns),
        Algorithm::AdaptiveConcurrency(a) => (ADAPTIVE_CONCURRENCY, (0, a.min), a.max, a.lease_ns),
        Algorithm::Counters { log_entries } => (COUNTERS, (0, 0), log_entries, 0),
    };
    let (key_capacity, on_full) = match def.keyed {
        Some(k) => (
            k.capacity,
            match k.on_full {
                FullPolicy::Deny => 0,
                FullPolicy::Allow => 1,
                FullPolicy::Error => 2,
            },
        ),
        None => (0, 0),
    };
    let (fleet_weight, fleet_emission_ns) = def
        .fleet
        .map_or((0, 0), |f| (f.weight, f.total.emission_ns()));
    let flags = DEF_NEAR_LIMIT | if def.shadow { DEF_SHADOW } else { 0 };
    let tuning = match algorithm {
        Algorithm::AdaptiveConcurrency(a) => {
            let spec = a.spec();
            Some((
                a.initial,
                a.window_ms.saturating_mul(1_000_000),
                spec.smoothing,
                spec.tolerance,
                spec.headroom,
                spec.backoff,
            ))
        }
        _ => None,
    };
    (
        def.name.clone(),
        (kind, alignment, limit, period_ns, rate),
        (
            key_capacity,
            on_full,
            flags,
            def.near_limit,
            def.split,
            fleet_weight,
            fleet_emission_ns,
        ),
        tuning,
    )
}

/// The builder of the open options: `mode` (0: 0600), `on_conflict` (0 refuse, 1 adopt),
/// `on_reboot` (0: the file's choice, 1 translate, 2 reset).
fn builder(
    mode: u32,
    allow_other_owner: bool,
    on_conflict: u32,
    on_reboot: u32,
) -> shmlimit::Result<shmlimit::Builder> {
    if mode > 0o777 {
        return Err(invalid(
            "",
            format!("mode {mode:#o}: only permission bits (0777) are allowed"),
        ));
    }
    let on_conflict = match on_conflict {
        0 => OnConflict::Refuse,
        1 => OnConflict::Adopt,
        n => return Err(invalid("", format!("on_conflict is {n}: must be 0 or 1"))),
    };
    let builder = shmlimit::Limiter::builder()
        .mode(if mode == 0 { 0o600 } else { mode })
        .allow_other_owner(allow_other_owner)
        .on_conflict(on_conflict);
    Ok(match on_reboot {
        0 => builder,
        1 => builder.on_reboot(OnReboot::Translate),
        2 => builder.on_reboot(OnReboot::Reset),
        n => return Err(invalid("", format!("on_reboot is {n}: must be 0, 1 or 2"))),
    })
}

/// One attached limiter file.
#[pyclass(frozen, module = "shmlimit._native")]
pub(crate) struct Limiter {
    inner: RwLock<Option<shmlimit::Limiter>>,
}

impl Limiter {
    fn new(inner: shmlimit::Limiter) -> Limiter {
        Limiter {
            inner: RwLock::new(Some(inner)),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&shmlimit::Limiter) -> PyResult<T>) -> PyResult<T> {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        f(guard.as_ref().ok_or_else(|| closed("Limiter"))?)
    }

    /// The untyped handle of limit `name` (UnknownLimitError).
    pub(crate) fn resolve(&self, name: &str) -> PyResult<shmlimit::Limit> {
        self.with(|l| l.limit(name).or_raise("shmlimit_limiter_limit"))
    }
}

#[pymethods]
impl Limiter {
    /// Create the file at `path` with these definitions, or attach to it.
    #[staticmethod]
    fn create_or_open(
        path: &[u8],
        defs: Vec<Bound<'_, PyAny>>,
        mode: u32,
        allow_other_owner: bool,
        on_conflict: u32,
        on_reboot: u32,
    ) -> PyResult<Limiter> {
        let op = "shmlimit_limiter_create_or_open";
        let mut b = builder(mode, allow_other_owner, on_conflict, on_reboot).or_raise(op)?;
        for def in &defs {
            b = b.define(RawDef::read(def)?.to_def().or_raise(op)?);
        }
        let path = Path::new(OsStr::from_bytes(path));
        Ok(Limiter::new(b.create_or_open(path).or_raise(op)?))
    }

    /// Attach to an existing file by path alone.
    #[staticmethod]
    fn open(path: &[u8], mode: u32, allow_other_owner: bool, on_reboot: u32) -> PyResult<Limiter> {
        let op = "shmlimit_limiter_open";
        let b = builder(mode, allow_other_owner, 0, on_reboot).or_raise(op)?;
        let path = Path::new(OsStr::from_bytes(path));
        Ok(Limiter::new(b.open(path).or_raise(op)?))
    }

    /// The definitions with their live parameters (a retuned rate, an adopted change), in
    /// definition order.
    fn live_definitions(&self) -> PyResult<Vec<DefTuple>> {
        self.with(|l| {
            Ok(l.live_definitions()
                .iter()
                .map(|d| def_tuple(d, &d.algorithm))
                .collect())
        })
    }

    /// The definitions as the file was created with them.
    fn definitions(&self) -> PyResult<Vec<DefTuple>> {
        self.with(|l| {
            Ok(l.definitions()
                .iter()
                .map(|d| def_tuple(d, &d.algorithm))
                .collect())
        })
    }

    /// Detach (idempotent); limits resolved from it stay usable.
    fn close(&self) {
        let inner = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        drop(inner);
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Limiter>()
}
