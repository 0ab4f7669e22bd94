//! Reconciling the definitions a process asks for with the ones a file holds.
//!
//! A file's definitions are compared with the requested ones using its *live* parameters (a
//! bucket retuned to 300/s matches a request for 300/s). Each difference is either one the
//! file's layout can hold (a bucket's rate or burst, a window's limit), which a live retune
//! applies, or one it cannot (a new or removed limit, another kind, a bigger table, another
//! window length...), which only a new file can. [`OnConflict`] says what `create_or_open` does
//! about them.

use std::fmt::Write as _;
use std::time::Duration;

use crate::spec::{Algorithm, Alignment, FullPolicy, LimitDef};

/// What `create_or_open` does when the file exists with other definitions than the requested
/// ones.
///
/// The default is [`OnConflict::Refuse`]: a process that asks for 300/s and finds 200/s
/// cannot tell a deploy that changed the limit from two services that picked the same path by
/// mistake; in the second case adopting would silently retune (or replace) the other
/// service's limits. Deploys that change definitions opt in with [`OnConflict::Adopt`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnConflict {
    /// Refuse with [`crate::Error::DefinitionConflict`], naming every differing field.
    #[default]
    Refuse,
    /// Make the file hold the requested definitions: a live retune when its layout can hold
    /// them (the usage is kept; the transition admits at most the larger of the old and new
    /// bounds), otherwise a new file, complete before it atomically replaces the old one
    /// (`rename`); processes attached to the old file move to the new one on their next
    /// check (at most about a second later).
    Adopt,
}

/// How one file compares with a request.
#[derive(Debug, Default)]
pub(crate) struct Diff {
    /// Differences a live retune can apply: (limit index in the file, requested definition).
    pub retunes: Vec<(usize, LimitDef)>,
    /// Whether some difference needs a new file.
    pub needs_new_file: bool,
    /// Every difference, in the user's terms, one line per limit.
    pub lines: Vec<String>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The message of a refused conflict: every difference, joined.
    pub fn message(&self) -> String {
        bounded(&self.lines.join("; "), 2048)
    }
}

/// Compare `requested` with the file's `live` definitions (stored definitions with their
/// live parameters).
pub(crate) fn diff(requested: &[LimitDef], live: &[LimitDef]) -> Diff {
    let mut d = Diff::default();
    for want in requested {
        let Some(index) = live.iter().position(|h| h.name == want.name) else {
            d.needs_new_file = true;
            d.lines.push(format!(
                "{}: not in the file, requested as {}",
                quote(&want.name),
                describe(want)
            ));
            continue;
        };
        let have = &live[index];
        if have == want {
            continue;
        }
        let (fields, layout) = field_diff(have, want);
        if layout {
            d.needs_new_file = true;
        } else {
            d.retunes.push((index, want.clone()));
        }
        d.lines.push(format!("{}: {fields}", quote(&want.name)));
    }
    for have in live {
        if !requested.iter().any(|w| w.name == have.name) {
            d.needs_new_file = true;
            d.lines.push(format!(
                "{}: in the file ({}), not requested",
                quote(&have.name),
                describe(have)
            ));
        }
    }
    d
}

/// A limit name in a message: back-quoted, cut to a bounded length.
pub(crate) fn quote(name: &str) -> String {
    format!("`{}`", bounded(name, 80))
}

/// `s` cut to at most `max` bytes (on a character boundary), marked when cut.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

/// One field's value in the user's terms.
struct Field {
    name: &'static str,
    value: String,
    /// A live retune can change it.
    tunable: bool,
}

fn fields(def: &LimitDef) -> Vec<Field> {
    let f = |name, value: String, tunable| Field {
        name,
        value,
        tunable,
    };
    let mut out = vec![f("kind", def.algorithm.kind().replace('_', " "), false)];
    match def.algorithm {
        Algorithm::TokenBucket {
            capacity,
            emission_ns,
        } => {
            out.push(f("rate", rate(emission_ns), true));
            out.push(f("burst", capacity.to_string(), true));
        }
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        }
        | Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => {
            out.push(f("limit", limit.to_string(), true));
            out.push(f(
                "window",
                if alignment.is_months(window_ns) {
                    "1 calendar month".into()
                } else {
                    duration(window_ns)
                },
                false,
            ));
            out.push(f(
                "alignment",
                match alignment {
                    Alignment::WallClock => "wall clock".into(),
                    Alignment::Monotonic => "monotonic".into(),
                    Alignment::Calendar { utc_offset_s } => {
                        format!("calendar, UTC{:+}s", utc_offset_s)
                    }
                },
                false,
            ));
        }
        Algorithm::SlidingLog { limit, window_ns } => {
            out.push(f("limit", limit.to_string(), false));
            out.push(f("window", duration(window_ns), false));
        }
        Algorithm::AdaptiveConcurrency(a) => {
            out.push(f("limit", format!("{}..={}", a.min, a.max), false));
            out.push(f("initial", a.initial.to_string(), false));
            out.push(f("window", duration(a.window_ms * 1_000_000), false));
            out.push(f(
                "tuning",
                format!(
                    "smoothing {:.3}, tolerance {:.3}, headroom {:.3}, backoff {:.3}",
                    a.smoothing as f64 / 65536.0,
                    a.tolerance as f64 / 4096.0,
                    a.headroom as f64 / 65536.0,
                    a.backoff as f64 / 65536.0
                ),
                false,
            ));
        }
        Algorithm::Counters { log_entries } => {
            out.push(f("log entries per key", log_entries.to_string(), false));
        }
        Algorithm::Concurrency { permits, lease_ns } => {
            out.push(f("permits", permits.to_string(), false));
            out.push(f(
                "lease",
                if lease_ns == 0 {
                    "none".into()
                } else {
                    duration(lease_ns)
                },
                false,
            ));
        }
    }
    out.push(f(
        "keys",
        match def.keyed {
            None => "not keyed".into(),
            Some(k) => format!(
                "{} slots, {} when full",
                k.slots(),
                match k.on_full {
                    FullPolicy::Deny => "deny",
                    FullPolicy::Allow => "allow",
                    FullPolicy::Error => "error",
                }
            ),
        },
        false,
    ));
    out.push(f(
        "shadow",
        if def.shadow { "on" } else { "off" }.into(),
        false,
    ));
    out.push(f(
        "near-limit fraction",
        format!("{:.1}%", def.near_limit as f64 * 100.0 / 65536.0),
        false,
    ));
    out.push(f("split", def.split.max(1).to_string(), false));
    out.push(f(
        "fleet share",
        match def.fleet {
            None => "none".into(),
            Some(s) => format!("weight {} of {}", s.weight, rate(s.total.emission_ns())),
        },
        false,
    ));
    out
}

/// "rate 200/s in the file, 300/s requested; burst 20 in both", and whether a difference
/// needs a new file. A change of kind names only the kinds.
fn field_diff(have: &LimitDef, want: &LimitDef) -> (String, bool) {
    let (h, w) = (fields(have), fields(want));
    if h[0].value != w[0].value {
        return (
            format!(
                "{} in the file, {} requested",
                describe(have),
                describe(want)
            ),
            true,
        );
    }
    let mut differ = Vec::new();
    let mut same = Vec::new();
    let mut layout = false;
    for (a, b) in h.iter().zip(&w).skip(1) {
        if a.value != b.value {
            layout |= !a.tunable;
            differ.push(format!(
                "{} {} in the file, {} requested",
                a.name, a.value, b.value
            ));
        } else if a.tunable {
            same.push(format!("{} {} in both", a.name, a.value));
        }
    }
    if differ.is_empty() {
        // Equal in every field shown: something finer (a rate's last nanosecond) differs.
        differ.push(format!(
            "{} in the file, {} requested (they differ in precision)",
            describe(have),
            describe(want)
        ));
        layout = true;
    }
    differ.extend(same);
    (differ.join("; "), layout)
}

/// A limit's kind and main parameters: "token bucket, rate 200/s, burst 20".
pub(crate) fn describe(def: &LimitDef) -> String {
    let f = fields(def);
    let mut s = f[0].value.clone();
    for field in &f[1..] {
        let default = match field.name {
            "keys" => field.value == "not keyed",
            "shadow" => field.value == "off",
            "split" => field.value == "1",
            "fleet share" => field.value == "none",
            "near-limit fraction" => true,
            _ => false,
        };
        if !default {
            let _ = write!(s, ", {} {}", field.name, field.value);
        }
    }
    s
}

/// A rate from its emission interval: "300/s", "0.5/s", "2/min".
pub(crate) fn rate(emission_ns: u64) -> String {
    if emission_ns == 0 {
        return "unlimited".into();
    }
    for (unit, ns) in [("s", 1e9), ("min", 60e9), ("h", 3600e9), ("day", 86_400e9)] {
        let per = ns / emission_ns as f64;
        if per >= 1.0 || unit == "day" {
            return format!("{}/{unit}", number(per));
        }
    }
    unreachable!("the last unit always returns")
}

fn number(x: f64) -> String {
    if (x - x.round()).abs() < 1e-6 * x.max(1.0) {
        format!("{}", x.round() as u64)
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn duration(ns: u64) -> String {
    let d = Duration::from_nanos(ns);
    if ns % 1_000_000_000 == 0 {
        let s = d.as_secs();
        if s % 3600 == 0 {
            format!("{}h", s / 3600)
        } else if s % 60 == 0 {
            format!("{}min", s / 60)
        } else {
            format!("{s}s")
        }
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{ns}ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Rate;

    fn bucket(name: &str, per_s: u64, burst: u64) -> LimitDef {
        LimitDef::new(
            name,
            Algorithm::TokenBucket {
                capacity: burst,
                emission_ns: Rate::per_second(per_s).unwrap().emission_ns(),
            },
        )
    }

    #[test]
    fn a_rate_change_is_a_retune_named_in_user_terms() {
        let d = diff(&[bucket("api", 300, 20)], &[bucket("api", 200, 20)]);
        assert!(!d.needs_new_file);
        assert_eq!(d.retunes.len(), 1);
        assert_eq!(
            d.message(),
            "`api`: rate 200/s in the file, 300/s requested; burst 20 in both"
        );
    }

    #[test]
    fn new_removed_and_other_kinds_need_a_new_file() {
        let log = LimitDef::new(
            "api",
            Algorithm::SlidingLog {
                limit: 10,
                window_ns: 1_000_000_000,
            },
        );
        let d = diff(std::slice::from_ref(&log), &[bucket("api", 200, 20)]);
        assert!(d.needs_new_file);
        assert_eq!(
            d.message(),
            "`api`: token bucket, rate 200/s, burst 20 in the file, sliding log, limit 10, \
             window 1s requested"
        );
        let d = diff(&[bucket("a", 1, 1)], &[bucket("b", 1, 1)]);
        assert!(d.needs_new_file);
        assert_eq!(
            d.message(),
            "`a`: not in the file, requested as token bucket, rate 1/s, burst 1; \
             `b`: in the file (token bucket, rate 1/s, burst 1), not requested"
        );
        let mut bigger = log.clone();
        bigger.algorithm = Algorithm::SlidingLog {
            limit: 20,
            window_ns: 1_000_000_000,
        };
        let d = diff(&[bigger], &[log]);
        assert!(d.needs_new_file, "a longer log ring is a new layout");
    }

    #[test]
    fn echoed_names_are_bounded() {
        let long = "x".repeat(10_000);
        let d = diff(&[bucket(&long, 1, 1)], &[]);
        assert!(d.message().len() < 300, "{}", d.message().len());
        assert_eq!(bounded("é", 1), "... (2 bytes)");
    }

    #[test]
    fn rates_read_as_people_write_them() {
        assert_eq!(rate(1_000_000_000 / 300 + 1), "300/s");
        assert_eq!(rate(2_000_000_000), "30/min");
        assert_eq!(rate(3_600_000_000_000), "1/h");
        assert_eq!(rate(400_000_000), "2.5/s");
    }
}
