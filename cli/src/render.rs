//! Human output: aligned tables, and limits, rates and durations written the way a config
//! writes them.

use serde::Serialize;
use shmlimit::{Algorithm, Alignment};

/// A text table: the first column left-aligned, the others right-aligned.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left: usize,
}

impl Table {
    /// A table with these column titles; the first `left` columns are left-aligned.
    pub fn new(header: &[&str], left: usize) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            left,
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as lines indented by two spaces, each ending in a newline.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::from(" ");
            for (i, cell) in row.iter().enumerate().take(columns) {
                let pad = widths[i] - cell.chars().count();
                line.push(' ');
                if i < self.left {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
                line.push(' ');
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate in decisions per second, scaled: `3.29 M/s`, `412 k/s`, `950 /s`.
pub fn per_second(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2} M/s", rate / 1e6)
    } else if rate >= 1e4 {
        format!("{:.0} k/s", rate / 1e3)
    } else {
        format!("{rate:.0} /s")
    }
}

const UNITS: [(&str, u64); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("min", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// A duration as a config would write it: the largest unit that divides it exactly (`60s`,
/// `500ms`, `2min`), or seconds with decimals when none does above a microsecond.
pub fn duration(ns: u64) -> String {
    if ns == 0 {
        return "0".into();
    }
    for (unit, size) in UNITS {
        if ns % size == 0 && (size >= 1_000 || ns < 1_000) {
            return format!("{}{unit}", ns / size);
        }
    }
    let (unit, size): (&str, u64) = match ns {
        n if n >= 1_000_000_000 => ("s", 1_000_000_000),
        n if n >= 1_000_000 => ("ms", 1_000_000),
        _ => ("us", 1_000),
    };
    let places = size.ilog10() as usize;
    let fraction = format!("{:0places$}", ns % size);
    format!("{}.{}{unit}", ns / size, fraction.trim_end_matches('0'))
}

/// A token-bucket rate from its emission interval, as a config would write it: `1000/s`,
/// `300/s` (stored as one token every 3.333334 ms, rounded up), `100/min`; `~0.123/s` when no
/// whole number of tokens per second, minute or hour gives this interval.
pub fn rate(emission_ns: u64) -> String {
    for (unit, size) in [
        ("s", 1_000_000_000u64),
        ("min", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ] {
        let tokens = (size as f64 / emission_ns as f64).round() as u64;
        if tokens > 0 && size.div_ceil(tokens) == emission_ns {
            return format!("{tokens}/{unit}");
        }
    }
    let per_second = 1e9 / emission_ns as f64;
    if per_second >= 1.0 {
        format!("~{per_second:.3}/s")
    } else {
        format!("~{:.3}/min", per_second * 60.0)
    }
}

/// A fixed UTC offset as `UTC`, `UTC+05:30` or `UTC-08:00`.
pub fn utc_offset(seconds: i32) -> String {
    if seconds == 0 {
        return "UTC".to_owned();
    }
    let sign = if seconds < 0 { '-' } else { '+' };
    let m = seconds.unsigned_abs() / 60;
    format!("UTC{sign}{:02}:{:02}", m / 60, m % 60)
}

/// The parameters of a limit in one phrase: `1000/s, burst 100`, `500 per 1s (wall-clock
/// aligned)`, `100 in any 60s`.
// A limit kind added to the library later is still shown, by kind and capacity.
#[allow(unreachable_patterns)]
pub fn parameters(algorithm: &Algorithm) -> String {
    let aligned = |a: Alignment| match a {
        Alignment::WallClock => "wall-clock aligned".to_owned(),
        Alignment::Monotonic => "monotonic aligned".to_owned(),
        Alignment::Calendar { utc_offset_s } => {
            format!("calendar aligned, {}", utc_offset(utc_offset_s))
        }
    };
    match *algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => format!(
            "{}, burst {capacity} (1 token every {})",
            rate(emission_ns),
            duration(emission_ns)
        ),
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment: Alignment::Calendar { utc_offset_s },
        } if window_ns == shmlimit::Rate::MONTH_NS => {
            format!("{limit} per calendar month ({})", utc_offset(utc_offset_s))
        }
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => format!(
            "{limit} per {} window ({})",
            duration(window_ns),
            aligned(alignment)
        ),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => format!(
            "about {limit} in any {} (weighted, {})",
            duration(window_ns),
            aligned(alignment)
        ),
        Algorithm::SlidingLog { limit, window_ns } => {
            format!("{limit} in any {} (exact)", duration(window_ns))
        }
        Algorithm::Concurrency { permits, lease_ns } => match lease_ns {
            0 => format!("{permits} permits held at once (no lease)"),
            lease => format!("{permits} permits held at once (lease {})", duration(lease)),
        },
        Algorithm::AdaptiveConcurrency(a) => format!(
            "{} to {} permits held at once, adapting every {} ms{}",
            a.min,
            a.max,
            a.window_ms,
            match a.lease_ns {
                0 => String::new(),
                lease => format!(" (lease {})", duration(lease)),
            }
        ),
        Algorithm::Counters { log_entries } => {
            format!("window and limit per call; moving windows of up to {log_entries}")
        }
        #[allow(unreachable_patterns)]
        other => format!("capacity {}", other.capacity()),
    }
}

/// A limit definition as JSON.
#[derive(Serialize)]
pub struct DefinitionJson {
    pub name: String,
    pub algorithm: &'static str,
    /// The most one decision can grant.
    pub capacity: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emission_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u64>,
    /// A concurrency limit's lease, 0 for none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ns: Option<u64>,
}

impl DefinitionJson {
    // A limit kind added to the library later is still listed, by kind and capacity.
    #[allow(unreachable_patterns)]
    pub fn of(name: &str, algorithm: &Algorithm) -> DefinitionJson {
        let mut json = DefinitionJson {
            name: name.to_owned(),
            algorithm: algorithm.kind(),
            capacity: algorithm.capacity(),
            rate: None,
            emission_ns: None,
            burst: None,
            limit: None,
            window: None,
            window_ns: None,
            alignment: None,
            permits: None,
            lease_ns: None,
        };
        let alignment = |a: Alignment| match a {
            Alignment::WallClock => "wall_clock",
            Alignment::Monotonic => "monotonic",
            Alignment::Calendar { .. } => "calendar",
        };
        match *algorithm {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => {
                json.rate = Some(rate(emission_ns));
                json.emission_ns = Some(emission_ns);
                json.burst = Some(capacity);
            }
            Algorithm::FixedWindow {
                limit,
                window_ns,
                alignment: a,
            }
            | Algorithm::SlidingWindow {
                limit,
                window_ns,
                alignment: a,
            } => {
                json.limit = Some(limit);
                json.window = Some(duration(window_ns));
                json.window_ns = Some(window_ns);
                json.alignment = Some(alignment(a));
            }
            Algorithm::SlidingLog { limit, window_ns } => {
                json.limit = Some(limit);
                json.window = Some(duration(window_ns));
                json.window_ns = Some(window_ns);
            }
            Algorithm::Concurrency { permits, lease_ns } => {
                json.permits = Some(permits);
                json.lease_ns = Some(lease_ns);
            }
            _ => {}
        }
        json
    }
}

/// The definitions as a table: name, algorithm, parameters.
pub fn definitions<'a>(defs: impl IntoIterator<Item = (&'a str, &'a Algorithm)>) -> String {
    let mut table = Table::new(&["limit", "algorithm", "parameters"], 3);
    for (name, algorithm) in defs {
        table.row(vec![
            name.to_owned(),
            algorithm.kind().to_owned(),
            parameters(algorithm),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(duration(60_000_000_000), "1min");
        assert_eq!(duration(1_500_000_000), "1500ms");
        assert_eq!(duration(333_333_334), "333.333334ms");
        assert_eq!(rate(1_000_000), "1000/s");
        assert_eq!(rate(600_000_000), "100/min");
        assert_eq!(rate(333_333_334), "3/s");
        assert_eq!(rate(3_333_334), "300/s");
        assert_eq!(rate(2_000_000_000), "30/min");
        assert_eq!(rate(333_333_333), "~3.000/s");
    }
}
