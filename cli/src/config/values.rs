//! Reading one value of a config or a flag: its TOML type, a bounded whole number, a rate
//! (`"100/s"`), a window or duration (`"90s"`), a UTC offset.

use super::*;

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

pub(super) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

pub(super) fn power_name(max: u64) -> String {
    match max {
        m if m == MAX_LOG_LIMIT => "2^24".into(),
        m if m == u64::from(u32::MAX) => "2^32-1".into(),
        m if m == (1 << 20) - 1 => "2^20-1".into(),
        m => m.to_string(),
    }
}

/// A whole number in `1..=max`.
pub(super) fn whole(v: &Value, max: u64, max_name: &str) -> Result<u64, String> {
    match v {
        Value::Integer(n) if *n <= 0 => Err(format!("must be at least 1 (got {n})")),
        Value::Integer(n) if *n as u64 > max => Err(format!("{n} is above the maximum {max_name}")),
        Value::Integer(n) => Ok(*n as u64),
        Value::Float(f) => Err(format!("must be a whole number (got {f})")),
        other => Err(format!("must be a whole number, not {}", kind(other))),
    }
}

pub(super) fn rate_value(v: &Value) -> Result<Rate, String> {
    match v {
        Value::String(s) => parse_rate(s),
        Value::Integer(n) => parse_rate(&n.to_string()),
        Value::Float(f) => parse_rate(&f.to_string()),
        other => Err(format!(
            "must be a string like \"100/s\", not {}",
            kind(other)
        )),
    }
}

pub(super) fn window_value(v: &Value) -> Result<Duration, String> {
    let window = match v {
        Value::String(s) => parse_duration(s)?,
        Value::Integer(_) | Value::Float(_) => {
            return Err(format!(
                "{v} has no unit: write it as \"{v}s\" or \"{v}ms\""
            ))
        }
        other => {
            return Err(format!(
                "must be a duration like \"60s\", not {}",
                kind(other)
            ))
        }
    };
    if window < MIN_WINDOW {
        return Err(format!("{} is below the minimum of 1ms", show(v)));
    }
    if window > MAX_WINDOW {
        return Err(format!(
            "{} is above the maximum of 2^60 ns (about 36 years)",
            show(v)
        ));
    }
    Ok(window)
}

/// `"+05:30"`, `"-08:00"`, `"+02"`, `"Z"`: a fixed offset east of UTC, in seconds.
pub(super) fn utc_offset(v: &Value) -> Result<i32, String> {
    let hint = "write \"+HH:MM\" or \"-HH:MM\" (east of UTC), or \"Z\"";
    let Value::String(text) = v else {
        return Err(format!("{}: {hint}", show(v)));
    };
    if text == "Z" || text == "UTC" {
        return Ok(0);
    }
    let (sign, rest) = match text.split_at_checked(1) {
        Some(("+", rest)) => (1, rest),
        Some(("-", rest)) => (-1, rest),
        _ => return Err(format!("\"{text}\": {hint}")),
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let (h, m): (i32, i32) = match (h.parse(), m.parse()) {
        (Ok(h), Ok(m)) if (0..=18).contains(&h) && (0..60).contains(&m) => (h, m),
        _ => return Err(format!("\"{text}\": {hint}, at most 18 h")),
    };
    let seconds = sign * (h * 3_600 + m * 60);
    if seconds.abs() > 18 * 3_600 {
        return Err(format!("\"{text}\": at most 18 h from UTC"));
    }
    Ok(seconds)
}

pub(super) const RATE_HINT: &str =
    "write tokens per period, e.g. \"100/s\", \"100/min\", \"0.5/s\"";

/// `"300/s"`, `"100/min"`, `"0.5/s"`, `"5/10s"`; a bare number is per second.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let s = text.trim();
    let (tokens, period) = match s.split_once('/') {
        Some((tokens, period)) => (tokens.trim(), period.trim()),
        None => (s, "s"),
    };
    let count: f64 = tokens
        .parse()
        .map_err(|_| format!("\"{text}\" is not a rate: {RATE_HINT}"))?;
    if count.is_nan() || count <= 0.0 {
        return Err(format!("must be positive (got \"{text}\")"));
    }
    if !count.is_finite() {
        return Err(format!("must be finite (got \"{text}\")"));
    }
    let period = if period.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        parse_duration(period)?
    } else {
        let unit = unit_ns(period).or_else(|| rate_unit_ns(period)).ok_or_else(|| {
            format!(
                "unknown unit \"{period}\" in \"{text}\" (use ns, us, ms, s, min, h, d, week, month, year or a duration like 10s)"
            )
        })?;
        Duration::from_nanos(unit)
    };
    if period.is_zero() {
        return Err(format!(
            "the period must be longer than zero (got \"{text}\")"
        ));
    }
    let fast = "is faster than one token per nanosecond";
    if count.fract() == 0.0 && count <= u64::MAX as f64 {
        return Rate::new(count as u64, period).map_err(|e| match e {
            shmlimit::Error::InvalidParameter { reason, .. } if reason.contains("nanosecond") => {
                format!("\"{text}\" {fast}")
            }
            other => format!("\"{text}\": {other}"),
        });
    }
    // A fractional count: round the interval between tokens up (stricter, never looser).
    let emission = (period.as_nanos() as f64 / count).ceil();
    if emission < 1.0 {
        return Err(format!("\"{text}\" {fast}"));
    }
    if emission > (1u64 << 62) as f64 {
        return Err(format!(
            "\"{text}\" is too slow (more than 2^62 ns per token)"
        ));
    }
    Rate::from_emission_ns(emission as u64).map_err(|e| format!("\"{text}\": {e}"))
}

/// Nanoseconds in one named unit.
pub(super) fn unit_ns(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        "w" | "week" | "weeks" => 7 * 86_400_000_000_000,
        _ => return None,
    })
}

/// Periods a rate may be given per, beyond the fixed units: a month and a year as their average
/// Gregorian lengths (a year of 365.2425 days, a month of a twelfth of it: 2,629,746 s). A rate is
/// an average, so "10000/month" refills one token every 262.97 s whatever the month's length;
/// windows, which have edges, take no months.
pub(super) fn rate_unit_ns(unit: &str) -> Option<u64> {
    Some(match unit {
        "mo" | "month" | "months" => shmlimit::Rate::MONTH_NS,
        "y" | "yr" | "year" | "years" => 12 * shmlimit::Rate::MONTH_NS,
        _ => return None,
    })
}

/// `"60s"`, `"500ms"`, `"1.5s"`, `"2min"`, `"1h"`, `"1d"`, `"250us"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    let hint = "write a number and a unit, e.g. \"60s\", \"500ms\", \"1min\"";
    if number.is_empty() {
        return Err(format!("\"{text}\" is not a duration: {hint}"));
    }
    if unit.is_empty() {
        return Err(format!("\"{text}\" has no unit: {hint}"));
    }
    if rate_unit_ns(unit).is_some() {
        return Err(format!(
            "\"{text}\": months and years have no fixed length; a window takes ns, us, ms, s, min, h, d or week (a fixed window takes \"1month\" for calendar months; a token bucket takes \"10000/month\")"
        ));
    }
    let unit = unit_ns(unit).ok_or_else(|| {
        format!("unknown unit \"{unit}\" in \"{text}\" (use ns, us, ms, s, min, h, d or week)")
    })?;
    let ns: u128 = if let Ok(n) = number.parse::<u64>() {
        u128::from(n) * u128::from(unit)
    } else {
        let x: f64 = number
            .parse()
            .map_err(|_| format!("\"{text}\" is not a duration: {hint}"))?;
        (x * unit as f64).round() as u128
    };
    if ns == 0 {
        return Err(format!("must be positive (got \"{text}\")"));
    }
    u64::try_from(ns)
        .map(Duration::from_nanos)
        .map_err(|_| format!("\"{text}\" is too long"))
}
