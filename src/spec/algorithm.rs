//! [`Algorithm`]: the parameters of one limit as stored in the file, and their validation.

use std::time::Duration;

use super::*;
use crate::algo::sliding_window;
use crate::error::{invalid, Error, Result};

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
    /// See [`Counters`]: keyed counters whose window and limit come with each call. Always
    /// keyed (its key capacity and table-full policy are the definition's [`Keyed`]).
    Counters {
        /// Entries of each key's moving-window log: the largest moving-window limit the file
        /// supports (0: no moving windows).
        log_entries: u64,
    },
    /// See [`Concurrency`].
    Concurrency {
        /// `C`: permits that may be held at once.
        permits: u64,
        /// A permit held longer than this is reclaimable even if its owner lives; 0 = no lease.
        lease_ns: u64,
    },
    /// See [`AdaptiveConcurrency`](super::AdaptiveConcurrency).
    AdaptiveConcurrency(super::Adaptive),
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
            Algorithm::AdaptiveConcurrency(a) => a.max,
            Algorithm::Counters { .. } => crate::algo::counters::MAX_COUNT,
        }
    }

    /// A short name: `token_bucket`, `fixed_window`, `sliding_window`, `sliding_log`,
    /// `concurrency`, `adaptive_concurrency`.
    pub fn kind(&self) -> &'static str {
        match self {
            Algorithm::TokenBucket { .. } => "token_bucket",
            Algorithm::FixedWindow { .. } => "fixed_window",
            Algorithm::SlidingWindow { .. } => "sliding_window",
            Algorithm::SlidingLog { .. } => "sliding_log",
            Algorithm::Concurrency { .. } => "concurrency",
            Algorithm::AdaptiveConcurrency(_) => "adaptive_concurrency",
            Algorithm::Counters { .. } => "counters",
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
            Algorithm::Counters { log_entries } => {
                if log_entries > MAX_LOG_ENTRIES {
                    return Err(invalid(
                        limit,
                        format!("log entries {log_entries}: must be 0..={MAX_LOG_ENTRIES} per key"),
                    ));
                }
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
            Algorithm::AdaptiveConcurrency(a) => a.validate(limit)?,
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

impl IntoAlgorithm for Counters {
    fn into_algorithm(self, limit: &str) -> Result<Algorithm> {
        Algorithm::Counters {
            log_entries: self.log_entries,
        }
        .into_algorithm(limit)
    }
}
