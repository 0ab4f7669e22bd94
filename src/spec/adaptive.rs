//! [`AdaptiveConcurrency`]: a concurrency limit whose permit count moves between a minimum and
//! a maximum with the latency and outcome every release reports, and [`Adaptive`], its
//! parameters as stored in the file.
//!
//! The algorithm (formulas, defaults, the bound on how fast the limit moves) is documented in
//! the engine: see [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit).

use std::time::Duration;

use super::bounds::MAX_WINDOW;
use crate::error::{invalid, Result};

/// The largest maximum an adaptive limit may have (its permit table holds `max` entries).
pub const MAX_ADAPTIVE_PERMITS: u64 = (1 << 16) - 1;
/// The longest update window: 2^24 - 1 ms (about 4.7 hours).
pub const MAX_ADAPTIVE_WINDOW_MS: u64 = (1 << 24) - 1;

/// The parameters of an adaptive concurrency limit as stored in the file: integers, so that
/// every process (in every language) decides with exactly the same ones. Fractions are in
/// 1/65536 (`tolerance` in 1/4096).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Adaptive {
    /// The smallest the limit may become (at least 1).
    pub min: u64,
    /// The largest the limit may become, and the number of permit entries in the file.
    pub max: u64,
    /// The limit of a fresh (or reset) state.
    pub initial: u64,
    /// A permit held longer than this is reclaimable even if its owner lives; 0 = no lease.
    pub lease_ns: u64,
    /// The update window, ms: the limit changes at most once per window.
    pub window_ms: u64,
    /// Smoothing `s` of each update, in 1/65536 (1..=65535).
    pub smoothing: u16,
    /// Multiplicative decrease `b` after a window with errors or timeouts, in 1/65536.
    pub backoff: u16,
    /// Headroom `h`: the queue the gradient adds, as a fraction of the limit, in 1/65536.
    pub headroom: u16,
    /// Tolerance `t` of the latency gradient, in 1/4096 (4096 = 1.0).
    pub tolerance: u16,
}

impl Adaptive {
    /// The builder these stored parameters read back as: the fractions as stored (a value
    /// given to the builder comes back rounded to its unit, 1/65536 or 1/4096), the window in
    /// whole milliseconds. Its [`into_algorithm`](super::IntoAlgorithm::into_algorithm) gives
    /// these parameters again.
    ///
    /// ```
    /// use shmlimit::{AdaptiveConcurrency, Algorithm, IntoAlgorithm};
    /// let spec = AdaptiveConcurrency::new(2, 50).initial(9).smoothing(0.5).tolerance(2.0);
    /// let Algorithm::AdaptiveConcurrency(a) = spec.into_algorithm("db")? else { unreachable!() };
    /// let back = a.spec();
    /// assert_eq!((back.initial, back.smoothing, back.tolerance), (Some(9), 0.5, 2.0));
    /// assert_eq!(back.into_algorithm("db")?, Algorithm::AdaptiveConcurrency(a));
    /// # Ok::<(), shmlimit::Error>(())
    /// ```
    pub fn spec(&self) -> AdaptiveConcurrency {
        AdaptiveConcurrency {
            min: self.min,
            max: self.max,
            initial: Some(self.initial),
            lease: (self.lease_ns > 0).then(|| Duration::from_nanos(self.lease_ns)),
            window: Duration::from_millis(self.window_ms),
            smoothing: self.smoothing as f64 / 65536.0,
            tolerance: self.tolerance as f64 / 4096.0,
            headroom: self.headroom as f64 / 65536.0,
            backoff: self.backoff as f64 / 65536.0,
        }
    }

    /// Check every parameter; `limit` names the limit in the error.
    pub(crate) fn validate(&self, limit: &str) -> Result<()> {
        if self.min == 0 {
            return Err(invalid(limit, "minimum 0: must be at least 1"));
        }
        if self.max > MAX_ADAPTIVE_PERMITS {
            return Err(invalid(
                limit,
                format!("maximum {}: must be 1..=65535", self.max),
            ));
        }
        if self.min > self.max {
            return Err(invalid(
                limit,
                format!(
                    "minimum {} is above maximum {}: need 1 <= min <= max",
                    self.min, self.max
                ),
            ));
        }
        if self.initial < self.min || self.initial > self.max {
            return Err(invalid(
                limit,
                format!(
                    "initial limit {}: must be within [{}, {}]",
                    self.initial, self.min, self.max
                ),
            ));
        }
        if self.lease_ns > MAX_WINDOW.as_nanos() as u64 {
            return Err(invalid(limit, "lease is too long (more than 2^60 ns)"));
        }
        if self.window_ms == 0 || self.window_ms > MAX_ADAPTIVE_WINDOW_MS {
            return Err(invalid(
                limit,
                format!("window {} ms: must be 1..=16777215 ms", self.window_ms),
            ));
        }
        if self.smoothing == 0 || self.backoff == 0 || self.tolerance == 0 {
            return Err(invalid(
                limit,
                "smoothing, backoff and tolerance must be above zero",
            ));
        }
        Ok(())
    }
}

/// A concurrency limit that adapts: at most `limit` permits held at once across every
/// process, where `limit` moves within `[min, max]` from the latency and outcome each release
/// reports, pooled from every process (see
/// [`AdaptiveConcurrencyLimit`](crate::AdaptiveConcurrencyLimit) for the algorithm).
///
/// Defaults: initial limit `min`, window 20 ms, smoothing 0.2, tolerance 1.0, headroom 0.1,
/// backoff 0.9, no lease.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use shmlimit::{AdaptiveConcurrency, Algorithm, IntoAlgorithm};
/// let spec = AdaptiveConcurrency::new(4, 64).initial(16).window(Duration::from_millis(50));
/// let Algorithm::AdaptiveConcurrency(a) = spec.into_algorithm("db")? else { unreachable!() };
/// assert_eq!((a.min, a.max, a.initial, a.window_ms), (4, 64, 16, 50));
/// assert!(AdaptiveConcurrency::new(8, 4).into_algorithm("db").is_err()); // min > max
/// assert!(AdaptiveConcurrency::new(1, 8).smoothing(f64::NAN).into_algorithm("db").is_err());
/// # Ok::<(), shmlimit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConcurrency {
    /// The smallest limit.
    pub min: u64,
    /// The largest limit.
    pub max: u64,
    /// The starting limit (`None`: `min`).
    pub initial: Option<u64>,
    /// Optional lease, as [`Concurrency::lease`](crate::Concurrency::lease).
    pub lease: Option<Duration>,
    /// The update window (default 20 ms).
    pub window: Duration,
    /// Smoothing, in (0, 1) (default 0.2).
    pub smoothing: f64,
    /// Tolerance of the gradient, in [1, 15] (default 1.0).
    pub tolerance: f64,
    /// Headroom, in [0, 1) (default 0.1).
    pub headroom: f64,
    /// Backoff after errors, in (0, 1) (default 0.9).
    pub backoff: f64,
}

impl AdaptiveConcurrency {
    /// A limit moving within `[min, max]`, starting at `min`, with the default tuning.
    pub fn new(min: u64, max: u64) -> AdaptiveConcurrency {
        AdaptiveConcurrency {
            min,
            max,
            initial: None,
            lease: None,
            window: Duration::from_millis(20),
            smoothing: 0.2,
            tolerance: 1.0,
            headroom: 0.1,
            backoff: 0.9,
        }
    }
    /// Start at `initial` instead of `min`.
    pub fn initial(mut self, initial: u64) -> Self {
        self.initial = Some(initial);
        self
    }
    /// Permits held longer than `lease` become reclaimable.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
    /// Update the limit at most once per `window` (whole milliseconds).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }
    /// The weight `s` of each update's target.
    pub fn smoothing(mut self, s: f64) -> Self {
        self.smoothing = s;
        self
    }
    /// The gradient's tolerance `t`: latency may grow to `t` times the long RTT before the
    /// limit shrinks.
    pub fn tolerance(mut self, t: f64) -> Self {
        self.tolerance = t;
        self
    }
    /// The queue `h x limit` the gradient adds (at least 1).
    pub fn headroom(mut self, h: f64) -> Self {
        self.headroom = h;
        self
    }
    /// The factor `b` a window with errors or timeouts multiplies the limit by.
    pub fn backoff(mut self, b: f64) -> Self {
        self.backoff = b;
        self
    }
}

/// `x` in `units` per 1, if `lo <= x <= hi` (NaN fails).
fn fraction(limit: &str, what: &str, x: f64, lo: f64, hi: f64, units: f64) -> Result<u16> {
    if !(x >= lo && x <= hi) {
        return Err(invalid(
            limit,
            format!("{what} {x}: must be within [{lo}, {hi}]"),
        ));
    }
    Ok(((x * units).round() as u64).clamp(1, u16::MAX as u64) as u16)
}

impl super::IntoAlgorithm for AdaptiveConcurrency {
    fn into_algorithm(self, limit: &str) -> Result<super::Algorithm> {
        let lease_ns = match self.lease {
            None => 0,
            Some(d) if d.is_zero() => return Err(invalid(limit, "lease must be longer than zero")),
            Some(d) => {
                u64::try_from(d.as_nanos()).map_err(|_| invalid(limit, "lease is too long"))?
            }
        };
        let window_ms = u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX);
        let a = Adaptive {
            min: self.min,
            max: self.max,
            initial: self.initial.unwrap_or(self.min),
            lease_ns,
            window_ms,
            smoothing: fraction(limit, "smoothing", self.smoothing, 1e-4, 0.9999, 65536.0)?,
            backoff: fraction(limit, "backoff", self.backoff, 1e-4, 0.9999, 65536.0)?,
            headroom: if self.headroom == 0.0 {
                0
            } else {
                fraction(limit, "headroom", self.headroom, 0.0, 0.9999, 65536.0)?
            },
            tolerance: fraction(limit, "tolerance", self.tolerance, 1.0, 15.0, 4096.0)?,
        };
        super::IntoAlgorithm::into_algorithm(super::Algorithm::AdaptiveConcurrency(a), limit)
    }
}
