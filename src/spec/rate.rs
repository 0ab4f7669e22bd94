//! [`Rate`]: a refill rate, kept as its emission interval.

use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;
use crate::error::{invalid, Result};

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
    pub(super) emission_ns: u64,
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
