//! Limit definitions: what a user asks for, validated before anything touches a file.
//!
//! A definition is stored in the limiter file, so every process (in every language) that attaches
//! decides with the same parameters. Every constructor here is checked: zero, negative, NaN,
//! infinite and overflowing values are refused with [`Error::InvalidParameter`] when the limit is
//! defined, never discovered at decision time.

use std::time::Duration;

use crate::algo::{sliding_log, sliding_window};
use crate::error::{invalid, Error, Result};

/// Longest limit name, in bytes.
pub const MAX_NAME_LEN: usize = 63;
/// Shortest window any windowed algorithm accepts.
pub const MIN_WINDOW: Duration = Duration::from_millis(1);
/// Longest window: about 36 years.
pub const MAX_WINDOW: Duration = Duration::from_nanos(sliding_log::MAX_WINDOW_NS);
/// Largest token-bucket capacity.
pub const MAX_CAPACITY: u64 = 1 << 40;
/// Most entries one sliding log may hold (8 bytes each).
pub const MAX_LOG_LIMIT: u64 = 1 << 24;
/// Most permits one concurrency limit may have.
pub const MAX_PERMITS: u64 = 1 << 16;
/// Most sub-buckets a split token bucket may have.
pub const MAX_SPLIT: usize = 64;
/// Most key slots one keyed limit may have.
pub const MAX_KEYS: u64 = 1 << 26;
/// Most permits per key of a keyed concurrency limit (one bit each in the key's state word).
pub const MAX_KEY_PERMITS: u64 = 64;
/// Most permit entries (key slots times permits per key) of one keyed concurrency limit: 16
/// bytes each, so at most 1 GiB.
pub const MAX_KEY_PERMIT_ENTRIES: u64 = 1 << 26;

/// A refill rate, kept as the emission interval: nanoseconds per token, rounded *up* so that the
/// bound `floor(B + r T)` is never exceeded.
///
/// # Example
///
/// ```
/// use shmlimit::Rate;
/// assert_eq!(Rate::per_second(1_000).unwrap().emission_ns(), 1_000_000);
/// // 100 per minute is one token every 600 ms.
/// assert_eq!(Rate::new(100, std::time::Duration::from_secs(60)).unwrap().emission_ns(), 600_000_000);
/// assert!(Rate::per_second_f64(f64::NAN).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    emission_ns: u64,
}

impl Rate {
    /// `tokens` per `period`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] if either is zero or the rate exceeds one token per nanosecond.
    pub fn new(tokens: u64, period: Duration) -> Result<Rate> {
        if tokens == 0 {
            return Err(invalid("", "rate: tokens per period must be at least 1"));
        }
        let period_ns = u64::try_from(period.as_nanos())
            .map_err(|_| invalid("", "rate: period is too long"))?;
        if period_ns == 0 {
            return Err(invalid("", "rate: period must be longer than zero"));
        }
        if tokens > period_ns {
            return Err(invalid("", "rate: more than one token per nanosecond"));
        }
        Ok(Rate {
            emission_ns: period_ns.div_ceil(tokens),
        })
    }

    /// `tokens` per second.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_second(tokens: u64) -> Result<Rate> {
        Rate::new(tokens, Duration::from_secs(1))
    }

    /// An average Gregorian month in nanoseconds: a twelfth of 365.2425 days, 2,629,746 s.
    pub const MONTH_NS: u64 = 2_629_746_000_000_000;

    /// `tokens` per day (86,400 s): `Rate::per_day(10_000)` refills one token every 8.64 s.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_day(tokens: u64) -> Result<Rate> {
        Rate::new(tokens, Duration::from_secs(86_400))
    }

    /// `tokens` per week (7 days).
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_week(tokens: u64) -> Result<Rate> {
        Rate::new(tokens, Duration::from_secs(7 * 86_400))
    }

    /// `tokens` per average Gregorian month ([`Rate::MONTH_NS`]): a rate is an average, so the
    /// refill does not follow the calendar's month lengths.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_month(tokens: u64) -> Result<Rate> {
        Rate::new(tokens, Duration::from_nanos(Rate::MONTH_NS))
    }

    /// A fractional rate in tokens per second (e.g. `0.5` or `33.3`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] for zero, negative, NaN or infinite rates, rates above one token
    /// per nanosecond, and rates so small that a token takes longer than 2^62 ns.
    pub fn per_second_f64(tokens_per_second: f64) -> Result<Rate> {
        if !tokens_per_second.is_finite() || tokens_per_second <= 0.0 {
            return Err(invalid(
                "",
                format!("rate {tokens_per_second}/s: must be finite and positive"),
            ));
        }
        let exact = 1e9 / tokens_per_second;
        let ns = exact.ceil();
        if exact < 1.0 {
            return Err(invalid("", "rate: more than one token per nanosecond"));
        }
        if ns > (1u64 << 62) as f64 {
            return Err(invalid("", "rate: too slow (more than 2^62 ns per token)"));
        }
        Ok(Rate {
            emission_ns: ns as u64,
        })
    }

    /// A rate given directly as its emission interval: one token every `ns` nanoseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] if `ns` is zero or above 2^62.
    pub fn from_emission_ns(ns: u64) -> Result<Rate> {
        if ns == 0 || ns > 1 << 62 {
            return Err(invalid(
                "",
                "rate: emission interval must be in 1..=2^62 ns",
            ));
        }
        Ok(Rate { emission_ns: ns })
    }

    /// Nanoseconds per token.
    pub fn emission_ns(&self) -> u64 {
        self.emission_ns
    }

    /// Tokens per second (for display).
    pub fn per_second_approx(&self) -> f64 {
        1e9 / self.emission_ns as f64
    }
}

/// A token bucket of `capacity` tokens refilled at `rate`; starts full.
///
/// Admissions of cost 1 in any interval of length `T` never exceed `floor(capacity + rate x T)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Burst size `B`.
    pub capacity: u64,
    /// Refill rate `r`.
    pub rate: Rate,
}

impl TokenBucket {
    /// A bucket of `capacity` refilled at `rate`.
    pub fn new(capacity: u64, rate: Rate) -> TokenBucket {
        TokenBucket { capacity, rate }
    }

    /// `per_second` tokens per second, with a burst of one second's worth; use
    /// [`TokenBucketSpec::burst`] to change it.
    pub fn per_second(per_second: u64) -> TokenBucketSpec {
        TokenBucketSpec {
            rate: Rate::per_second(per_second),
            capacity: per_second,
        }
    }
}

/// A token bucket being defined; a rate error is reported when the limit is added.
#[derive(Debug)]
pub struct TokenBucketSpec {
    rate: Result<Rate>,
    capacity: u64,
}

impl TokenBucketSpec {
    /// Set the capacity (burst size).
    pub fn burst(mut self, capacity: u64) -> TokenBucketSpec {
        self.capacity = capacity;
        self
    }
}

/// How window boundaries are placed on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alignment {
    /// Boundaries at multiples of the window in Unix time ("each clock-aligned minute"),
    /// through the realtime-minus-monotonic offset captured when the file was created.
    #[default]
    WallClock,
    /// Boundaries at multiples of the window on `CLOCK_MONOTONIC`.
    Monotonic,
    /// Calendar boundaries in a fixed offset from UTC (`utc_offset_s` seconds east, at most
    /// 18 h either way): windows of whole weeks start on Monday 00:00 of that offset, windows of
    /// whole days at its midnight, other lengths at multiples of the window in its local time.
    /// [`FixedWindow::daily`] and [`FixedWindow::weekly`] use it with offset 0 (UTC); in
    /// [`Alignment::WallClock`] a week starts on Thursday, as the Unix epoch did.
    Calendar {
        /// Seconds east of UTC (`-5 * 3600` for UTC-05:00).
        utc_offset_s: i32,
    },
}

impl Alignment {
    /// Calendar boundaries in UTC.
    pub const UTC: Alignment = Alignment::Calendar { utc_offset_s: 0 };
    /// The largest UTC offset a calendar alignment takes, in seconds (18 h).
    pub const MAX_UTC_OFFSET_S: i32 = 18 * 3_600;

    /// A calendar-aligned window of one average month ([`Rate::MONTH_NS`]) is the calendar
    /// month (fixed windows only).
    pub(crate) fn is_months(self, window_ns: u64) -> bool {
        matches!(self, Alignment::Calendar { .. }) && window_ns == Rate::MONTH_NS
    }

    /// Where window boundaries fall: what to add to a monotonic time so that boundaries are at
    /// multiples of the window, given the wall offset (realtime - monotonic) of this boot.
    pub(crate) fn phase_ns(self, window_ns: u64, wall_offset: u64) -> u64 {
        const DAY: i128 = 86_400_000_000_000;
        if let (Alignment::Calendar { utc_offset_s }, true) = (self, self.is_months(window_ns)) {
            // Months are found from the local time itself: the whole shift.
            return (wall_offset as i64 as i128 + utc_offset_s as i128 * 1_000_000_000)
                .clamp(0, u64::MAX as i128) as u64;
        }
        match self {
            Alignment::WallClock => wall_offset % window_ns,
            Alignment::Monotonic => 0,
            Alignment::Calendar { utc_offset_s } => {
                // 1970-01-05, the first Monday, is day 4: shift weeks by 3 days.
                let monday = if window_ns as i128 % (7 * DAY) == 0 {
                    3 * DAY
                } else {
                    0
                };
                let shift = utc_offset_s as i128 * 1_000_000_000 + monday;
                (wall_offset as i128 + shift).rem_euclid(window_ns as i128) as u64
            }
        }
    }
}

/// At most `limit` per clock-aligned window of length `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    /// `L`.
    pub limit: u64,
    /// `W`.
    pub window: Duration,
    /// Boundary placement.
    pub alignment: Alignment,
}

impl FixedWindow {
    /// `limit` per `window`, wall-clock aligned.
    pub fn new(limit: u64, window: Duration) -> FixedWindow {
        FixedWindow {
            limit,
            window,
            alignment: Alignment::WallClock,
        }
    }
    /// Change the boundary placement.
    pub fn aligned(mut self, alignment: Alignment) -> FixedWindow {
        self.alignment = alignment;
        self
    }

    /// `limit` per calendar day, from midnight UTC (see [`FixedWindow::utc_offset`]).
    pub fn daily(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_secs(86_400)).aligned(Alignment::UTC)
    }

    /// `limit` per calendar month, from the first of the month 00:00 UTC (see
    /// [`FixedWindow::utc_offset`]). Months have their calendar lengths (28 to 31 days); the
    /// retry-after of a full month is the time to the next month's start. Stored as a
    /// calendar-aligned window of one average month ([`Rate::MONTH_NS`]), which is what
    /// definitions and `inspect` show.
    pub fn monthly(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_nanos(Rate::MONTH_NS)).aligned(Alignment::UTC)
    }

    /// `limit` per calendar week, from Monday 00:00 UTC (see [`FixedWindow::utc_offset`]).
    pub fn weekly(limit: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_secs(7 * 86_400)).aligned(Alignment::UTC)
    }

    /// Calendar boundaries in a fixed offset from UTC, `seconds` east (`-5 * 3600` for
    /// UTC-05:00): days start at that offset's midnight, weeks on its Monday. A fixed offset,
    /// not a time zone: daylight-saving changes are not followed.
    pub fn utc_offset(mut self, seconds: i32) -> FixedWindow {
        self.alignment = Alignment::Calendar {
            utc_offset_s: seconds,
        };
        self
    }
}

/// The weighted sliding-window counter: approximately `limit` per any `window` (see the module
/// docs of the algorithm for its error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    /// `L`, at most 2^20 - 1.
    pub limit: u64,
    /// `W`.
    pub window: Duration,
    /// Boundary placement of the two underlying windows.
    pub alignment: Alignment,
}

impl SlidingWindow {
    /// About `limit` per `window`.
    pub fn new(limit: u64, window: Duration) -> SlidingWindow {
        SlidingWindow {
            limit,
            window,
            alignment: Alignment::WallClock,
        }
    }
}

/// The exact sliding log: at most `limit` admissions in every interval `(t - window, t]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    /// `L`: also the number of 8-byte entries the log keeps.
    pub limit: u64,
    /// `W`.
    pub window: Duration,
}

impl SlidingLog {
    /// At most `limit` in any `window`.
    pub fn new(limit: u64, window: Duration) -> SlidingLog {
        SlidingLog { limit, window }
    }
}

/// At most `permits` held at once across every process (an in-flight limit).
///
/// A permit of a process that died is reclaimed; with a lease, so is one held longer than the
/// lease by a live process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// `C`.
    pub permits: u64,
    /// Optional lease.
    pub lease: Option<Duration>,
}

impl Concurrency {
    /// At most `permits` at once, no lease.
    pub fn new(permits: u64) -> Concurrency {
        Concurrency {
            permits,
            lease: None,
        }
    }
    /// Permits held longer than `lease` become reclaimable.
    pub fn lease(mut self, lease: Duration) -> Concurrency {
        self.lease = Some(lease);
        self
    }
}

/// The algorithm and parameters of one limit, as stored in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// See [`TokenBucket`].
    TokenBucket {
        /// `B`.
        capacity: u64,
        /// `T`, nanoseconds per token.
        emission_ns: u64,
    },
    /// See [`FixedWindow`].
    FixedWindow {
        /// `L`.
        limit: u64,
        /// `W` in nanoseconds.
        window_ns: u64,
        /// Boundary placement.
        alignment: Alignment,
    },
    /// See [`SlidingWindow`].
    SlidingWindow {
        /// `L`.
        limit: u64,
        /// `W` in nanoseconds.
        window_ns: u64,
        /// Boundary placement.
        alignment: Alignment,
    },
    /// See [`SlidingLog`].
    SlidingLog {
        /// `L`.
        limit: u64,
        /// `W` in nanoseconds.
        window_ns: u64,
    },
    /// See [`Concurrency`].
    Concurrency {
        /// `C`: permits that may be held at once.
        permits: u64,
        /// A permit held longer than this is reclaimable even if its owner lives; 0 = no lease.
        lease_ns: u64,
    },
}

impl Algorithm {
    /// The most one decision can ever grant: a larger cost is [`Error::CostExceedsCapacity`].
    pub fn capacity(&self) -> u64 {
        match *self {
            Algorithm::TokenBucket { capacity, .. } => capacity,
            Algorithm::FixedWindow { limit, .. }
            | Algorithm::SlidingWindow { limit, .. }
            | Algorithm::SlidingLog { limit, .. } => limit,
            Algorithm::Concurrency { permits, .. } => permits,
        }
    }

    /// A short name: `token_bucket`, `fixed_window`, `sliding_window`, `sliding_log`.
    pub fn kind(&self) -> &'static str {
        match self {
            Algorithm::TokenBucket { .. } => "token_bucket",
            Algorithm::FixedWindow { .. } => "fixed_window",
            Algorithm::SlidingWindow { .. } => "sliding_window",
            Algorithm::SlidingLog { .. } => "sliding_log",
            Algorithm::Concurrency { .. } => "concurrency",
        }
    }

    /// Check every parameter; `limit` names the limit in the error.
    pub(crate) fn validate(&self, limit: &str) -> Result<()> {
        let window = |window_ns: u64| -> Result<()> {
            let (lo, hi) = (MIN_WINDOW.as_nanos() as u64, MAX_WINDOW.as_nanos() as u64);
            if window_ns < lo || window_ns > hi {
                return Err(invalid(
                    limit,
                    format!("window {window_ns} ns: must be 1 ms to 2^60 ns"),
                ));
            }
            Ok(())
        };
        let offset = |alignment: Alignment| -> Result<()> {
            match alignment {
                Alignment::Calendar { utc_offset_s }
                    if utc_offset_s.unsigned_abs() > Alignment::MAX_UTC_OFFSET_S as u32 =>
                {
                    Err(invalid(
                        limit,
                        format!("UTC offset {utc_offset_s} s: must be within 18 h either way"),
                    ))
                }
                _ => Ok(()),
            }
        };
        match *self {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => {
                if capacity == 0 || capacity > MAX_CAPACITY {
                    return Err(invalid(
                        limit,
                        format!("capacity {capacity}: must be 1..=2^40"),
                    ));
                }
                if emission_ns == 0 || emission_ns > 1 << 62 {
                    return Err(invalid(
                        limit,
                        "rate: emission interval must be 1..=2^62 ns",
                    ));
                }
                if capacity
                    .checked_mul(emission_ns)
                    .is_none_or(|tau| tau > 1 << 62)
                {
                    return Err(invalid(
                        limit,
                        "capacity x emission interval exceeds 2^62 ns: lower the capacity or raise the rate",
                    ));
                }
            }
            Algorithm::FixedWindow {
                limit: l,
                window_ns,
                alignment,
            } => {
                if l == 0 || l > u32::MAX as u64 {
                    return Err(invalid(limit, format!("limit {l}: must be 1..=2^32-1")));
                }
                window(window_ns)?;
                offset(alignment)?;
            }
            Algorithm::SlidingWindow {
                limit: l,
                window_ns,
                alignment,
            } => {
                offset(alignment)?;
                if alignment.is_months(window_ns) {
                    return Err(invalid(
                        limit,
                        "calendar months are for fixed windows: a sliding window needs a fixed length",
                    ));
                }
                if l == 0 || l > sliding_window::MAX_LIMIT {
                    return Err(invalid(limit, format!("limit {l}: must be 1..=2^20-1")));
                }
                window(window_ns)?;
            }
            Algorithm::SlidingLog {
                limit: l,
                window_ns,
            } => {
                if l == 0 || l > MAX_LOG_LIMIT {
                    return Err(invalid(
                        limit,
                        format!("limit {l}: must be 1..=2^24 entries"),
                    ));
                }
                window(window_ns)?;
            }
            Algorithm::Concurrency { permits, lease_ns } => {
                if permits == 0 || permits > MAX_PERMITS {
                    return Err(invalid(
                        limit,
                        format!("permits {permits}: must be 1..=65536"),
                    ));
                }
                if lease_ns > MAX_WINDOW.as_nanos() as u64 {
                    return Err(invalid(limit, "lease is too long (more than 2^60 ns)"));
                }
            }
        }
        Ok(())
    }
}

fn window_ns(limit: &str, window: Duration) -> Result<u64> {
    u64::try_from(window.as_nanos()).map_err(|_| invalid(limit, "window is too long"))
}

/// Anything that can be turned into a validated [`Algorithm`].
pub trait IntoAlgorithm {
    /// Validate and convert; `limit` names the limit in errors.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] naming the bad field.
    fn into_algorithm(self, limit: &str) -> Result<Algorithm>;
}

impl IntoAlgorithm for Algorithm {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        self.validate(limit)?;
        Ok(self)
    }
}

impl IntoAlgorithm for TokenBucket {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        Algorithm::TokenBucket {
            capacity: self.capacity,
            emission_ns: self.rate.emission_ns,
        }
        .into_algorithm(limit)
    }
}

impl IntoAlgorithm for TokenBucketSpec {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        let rate = self.rate.map_err(|e| rename(e, limit))?;
        TokenBucket::new(self.capacity, rate).into_algorithm(limit)
    }
}

impl IntoAlgorithm for FixedWindow {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        let window_ns = window_ns(limit, self.window)?;
        Algorithm::FixedWindow {
            limit: self.limit,
            window_ns,
            alignment: self.alignment,
        }
        .into_algorithm(limit)
    }
}

impl IntoAlgorithm for SlidingWindow {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        let window_ns = window_ns(limit, self.window)?;
        Algorithm::SlidingWindow {
            limit: self.limit,
            window_ns,
            alignment: self.alignment,
        }
        .into_algorithm(limit)
    }
}

impl IntoAlgorithm for SlidingLog {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        let window_ns = window_ns(limit, self.window)?;
        Algorithm::SlidingLog {
            limit: self.limit,
            window_ns,
        }
        .into_algorithm(limit)
    }
}

impl IntoAlgorithm for Concurrency {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        let lease_ns = match self.lease {
            None => 0,
            Some(d) if d.is_zero() => return Err(invalid(limit, "lease must be longer than zero")),
            Some(d) => window_ns(limit, d)?,
        };
        Algorithm::Concurrency {
            permits: self.permits,
            lease_ns,
        }
        .into_algorithm(limit)
    }
}

impl<T: IntoAlgorithm> IntoAlgorithm for Result<T> {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        self.map_err(|e| rename(e, limit))?.into_algorithm(limit)
    }
}

fn rename(e: Error, limit: &str) -> Error {
    match e {
        Error::InvalidParameter { limit: l, reason } if l.is_empty() => Error::InvalidParameter {
            limit: limit.to_owned(),
            reason,
        },
        other => other,
    }
}

/// Check a limit name: 1 to 63 bytes of ASCII letters, digits and `_ - . : /`.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(invalid(
            name,
            format!("name must be 1..={MAX_NAME_LEN} bytes"),
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
    {
        return Err(invalid(
            name,
            "name may hold only ASCII letters, digits and _ - . : /",
        ));
    }
    Ok(())
}

/// What a keyed limit does when its table has no slot for a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FullPolicy {
    /// Deny the request (fail closed). The default.
    #[default]
    Deny,
    /// Admit the request without limiting it (fail open).
    Allow,
    /// Return [`Error::TableFull`].
    Error,
}

/// Makes a limit keyed: one independent state per key (user, tenant, ...), in a table of
/// `capacity` slots in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyed {
    /// Key slots (rounded up to a power of two).
    pub capacity: u64,
    /// What happens when no slot is free.
    pub on_full: FullPolicy,
}

impl Keyed {
    /// A table with room for `capacity` keys (rounded up to a power of two), denying when full.
    pub fn new(capacity: u64) -> Keyed {
        Keyed {
            capacity,
            on_full: FullPolicy::Deny,
        }
    }
    /// Choose the full-table policy.
    pub fn on_full(mut self, policy: FullPolicy) -> Keyed {
        self.on_full = policy;
        self
    }
    /// The table size actually allocated.
    pub fn slots(&self) -> u64 {
        // Saturates for capacities no table can have; validation refuses those.
        self.capacity
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63)
    }
}

/// This limit is this host's share of a budget shared by a fleet of hosts.
///
/// Informational for the workers (they decide on the local rate); the fleet agent reads it to
/// know the fleet total and this host's weight, and retunes the local rate with `set_rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetShare {
    /// The fleet-wide rate, as an emission interval.
    pub total: Rate,
    /// This host's weight among the live members (at least 1).
    pub weight: u32,
}

/// One named limit and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDef {
    /// The name handles are resolved by.
    pub name: String,
    /// What it limits and how.
    pub algorithm: Algorithm,
    /// `Some` for a per-key limit.
    pub keyed: Option<Keyed>,
    /// Shadow (dry-run) mode: decisions are computed and counted, but never deny.
    pub shadow: bool,
    /// Remaining budget under this fraction of the capacity counts as a near-limit decision,
    /// in 1/65536 units (default 6554, about 10%).
    pub near_limit: u16,
    /// `Some` when the limit is a per-host share of a fleet budget.
    pub fleet: Option<FleetShare>,
    /// A hot token bucket split into this many sub-buckets on separate cache lines (1 = not
    /// split); see [`LimitDef::split`].
    pub split: u16,
}

/// The default near-limit fraction: about 10% of the capacity, in 1/65536 units.
pub const DEFAULT_NEAR_LIMIT: u16 = 6554;

impl LimitDef {
    /// A plain (unkeyed, enforced) limit.
    pub fn new(name: impl Into<String>, algorithm: Algorithm) -> LimitDef {
        LimitDef {
            name: name.into(),
            algorithm,
            keyed: None,
            shadow: false,
            near_limit: DEFAULT_NEAR_LIMIT,
            fleet: None,
            split: 1,
        }
    }

    /// Split a hot token bucket into `k` sub-buckets (at most [`MAX_SPLIT`]), each on its own
    /// cache line, so that processes on different CPUs do not fight over one line.
    ///
    /// The budget is *partitioned*, never copied: sub-bucket `i` gets capacity `B / k` (the
    /// remainder spread over the first ones) and rate `r / k`, so the sum of the sub-buckets'
    /// bounds is the bucket's bound, `floor(B + r T)`: as strict as the unsplit bucket. A
    /// process decides on the sub-bucket of the CPU it runs on and, when that one is empty,
    /// borrows from its siblings in turn before denying, so utilisation stays close to the
    /// unsplit bucket's; the price is a few more CAS attempts on a denial, a retry-after that is
    /// the earliest of all sub-buckets, and a largest single cost of `B / k`.
    pub fn split(mut self, k: u16) -> LimitDef {
        self.split = k;
        self
    }

    /// Check the whole definition (name, parameters, options) as creating a file would,
    /// without creating anything.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] naming the limit and the field.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        self.algorithm.validate(&self.name)?;
        self.validate_options()
    }

    /// Check the options against the algorithm.
    pub(crate) fn validate_options(&self) -> Result<()> {
        if self.split == 0 || self.split as usize > MAX_SPLIT {
            return Err(invalid(
                &self.name,
                format!("split {}: must be 1..={MAX_SPLIT}", self.split),
            ));
        }
        if self.split > 1 {
            match self.algorithm {
                Algorithm::TokenBucket {
                    capacity,
                    emission_ns,
                } if self.keyed.is_none() => {
                    let k = self.split as u64;
                    let sub_tau = emission_ns
                        .checked_mul(k)
                        .and_then(|e| e.checked_mul(capacity / k + 1));
                    if sub_tau.is_none_or(|t| t > 1 << 62) {
                        return Err(invalid(
                            &self.name,
                            "split: the sub-buckets' rate is too slow to represent",
                        ));
                    }
                    if capacity < k {
                        return Err(invalid(
                            &self.name,
                            format!(
                                "split {}: the capacity {capacity} leaves a sub-bucket empty",
                                self.split
                            ),
                        ));
                    }
                }
                _ => {
                    return Err(invalid(
                        &self.name,
                        "only an unkeyed token bucket can be split",
                    ))
                }
            }
        }
        if let Some(k) = self.keyed {
            if k.capacity == 0 || k.capacity > MAX_KEYS {
                return Err(invalid(
                    &self.name,
                    format!("key capacity {}: must be 1..=2^26", k.capacity),
                ));
            }
            if matches!(self.algorithm, Algorithm::SlidingLog { .. }) {
                return Err(invalid(
                    &self.name,
                    "a keyed sliding log is not supported; key a token bucket, a window or a \
                     concurrency limit",
                ));
            }
            if let Algorithm::Concurrency { permits, .. } = self.algorithm {
                if permits > MAX_KEY_PERMITS {
                    return Err(invalid(
                        &self.name,
                        format!("permits {permits}: a keyed concurrency limit has 1..=64 per key"),
                    ));
                }
                if k.slots().saturating_mul(permits) > MAX_KEY_PERMIT_ENTRIES {
                    return Err(invalid(
                        &self.name,
                        format!(
                            "{} key slots x {permits} permits: at most 2^26 permit entries",
                            k.slots()
                        ),
                    ));
                }
            }
        }
        if let Some(f) = self.fleet {
            if f.weight == 0 {
                return Err(invalid(&self.name, "fleet weight must be at least 1"));
            }
            if !matches!(self.algorithm, Algorithm::TokenBucket { .. }) {
                return Err(invalid(&self.name, "a fleet share must be a token bucket"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_parameters() {
        assert!(Rate::per_second(0).is_err());
        assert!(Rate::new(5, Duration::ZERO).is_err());
        assert!(Rate::per_second_f64(-1.0).is_err());
        assert!(Rate::per_second_f64(f64::INFINITY).is_err());
        assert!(Rate::per_second_f64(2e9).is_err());
        assert!(Rate::per_second_f64(1e-30).is_err());
        assert!(TokenBucket::per_second(10)
            .burst(0)
            .into_algorithm("a")
            .is_err());
        assert!(TokenBucket::new(1 << 41, Rate::per_second(1).unwrap())
            .into_algorithm("a")
            .is_err());
        assert!(FixedWindow::new(0, Duration::from_secs(1))
            .into_algorithm("a")
            .is_err());
        assert!(FixedWindow::new(5, Duration::from_micros(10))
            .into_algorithm("a")
            .is_err());
        assert!(SlidingWindow::new(1 << 20, Duration::from_secs(1))
            .into_algorithm("a")
            .is_err());
        assert!(SlidingLog::new(0, Duration::from_secs(1))
            .into_algorithm("a")
            .is_err());
        assert!(SlidingLog::new(5, Duration::MAX)
            .into_algorithm("a")
            .is_err());
        let e = TokenBucket::per_second(0)
            .into_algorithm("api")
            .unwrap_err();
        assert!(e.to_string().contains("limit `api`"), "{e}");
    }

    #[test]
    fn rate_rounds_emission_up() {
        assert_eq!(Rate::per_second(3).unwrap().emission_ns(), 333_333_334);
        assert_eq!(
            Rate::per_second_f64(0.5).unwrap().emission_ns(),
            2_000_000_000
        );
    }

    #[test]
    fn names() {
        assert!(validate_name("api.v1:search/x_y-z").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("has space").is_err());
        assert!(validate_name(&"x".repeat(64)).is_err());
    }
}
