//! Limit definitions from a TOML file or from command-line flags.
//!
//! ```toml
//! [[limit]]
//! name = "api"
//! algorithm = "token_bucket"   # token_bucket | fixed_window | sliding_window | sliding_log
//! rate = "100/s"               # "300/s", "100/min", "10000/day", "7/week", "10000/month",
//!                              # "0.5/s", "5/10s"; a bare number is per second (a month is the
//!                              # average Gregorian month, 2,629,746 s)
//! burst = 20
//!
//! [[limit]]
//! name = "search"
//! algorithm = "sliding_log"
//! limit = 100
//! window = "60s"               # "500ms", "60s", "1min", "2h", "1d", "1week"
//! ```
//!
//! Fixed and sliding windows also take `alignment = "wall_clock"` (the default: windows start at
//! multiples of the window in Unix time), `"monotonic"`, or `"calendar"` with an optional
//! `utc_offset = "+05:30"`: days from that offset's midnight, weeks (`window = "1week"`) from its
//! Monday 00:00. A fixed window of `window = "1month"` is the calendar month (from the first
//! of the month 00:00 in UTC or `utc_offset`). A concurrency limit takes
//! `permits = 5` and an optional `lease = "30s"`. An adaptive concurrency limit
//! (`algorithm = "adaptive_concurrency"`) takes `min` and `max`, and optionally `initial`,
//! `lease`, `window` (e.g. `"20ms"`), `smoothing`, `tolerance`, `headroom` and `backoff`.
//! Keyed counters whose window and limit come with each call (the storage of Python's
//! `limits`) are `algorithm = "counters"` with `keyed = 4096` and an optional
//! `moving_window = 64` (log entries per key: the largest moving-window limit).
//!
//! Every limit also takes options: `keyed = 10000` (one state per key, in a table of that many
//! slots; a keyed concurrency limit allows `permits` per key, at most 64, and a keyed adaptive
//! concurrency limit learns one limit per key, `max` at most 64)
//! with `on_full = "deny" | "allow" | "error"`, `shadow = true` (count, never deny),
//! `split = 4` (a hot token bucket over 4 cache lines), and a fleet share
//! `fleet_total = "300/s"` with `fleet_weight = 2`.
//!
//! Every problem is reported as one line naming the source, the limit and the field:
//! `limits.toml: limit "api": rate: must be positive (got "0/s")`.

mod values;

pub use values::*;

use std::path::Path;
use std::time::Duration;

use shmlimit::{
    consts::{
        MAX_CAPACITY, MAX_KEYS, MAX_LIMITS, MAX_LOG_ENTRIES, MAX_LOG_LIMIT, MAX_NAME_LEN,
        MAX_PERMITS, MAX_SPLIT, MAX_WINDOW, MIN_WINDOW,
    },
    spec::MAX_ADAPTIVE_PERMITS,
    AdaptiveConcurrency, Algorithm, Alignment, Concurrency, Counters, FixedWindow, FleetShare,
    FullPolicy, IntoAlgorithm, Keyed, LimitDef, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use toml::{Table, Value};

use crate::Failure;

/// The algorithm names a config may use, in the order the help lists them.
pub const ALGORITHMS: [&str; 7] = [
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "concurrency",
    "adaptive_concurrency",
    "counters",
];

/// The options every algorithm takes.
const OPTIONS: [&str; 6] = [
    "keyed",
    "on_full",
    "shadow",
    "split",
    "fleet_total",
    "fleet_weight",
];

/// One validated limit: its name, algorithm and options, ready for
/// [`shmlimit::Builder::define`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    pub algorithm: Algorithm,
    pub def: LimitDef,
}

/// The source label of limits given as `create` flags: fields are then named as flags.
pub const COMMAND_LINE: &str = "command line";

/// Read and validate a config file.
pub fn load(path: &Path) -> Result<Vec<Definition>, Failure> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::config(format!(
            "{label}: cannot read the config: {e}; pass the path of a TOML file with [[limit]] tables"
        ))
    })?;
    parse(&label, &text)
}

/// Parse and validate config text; `label` names the source in errors.
pub fn parse(label: &str, text: &str) -> Result<Vec<Definition>, Failure> {
    let table: Table = text.parse().map_err(|e: toml::de::Error| {
        let at = e
            .span()
            .map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(":{line}:{column}")
            })
            .unwrap_or_default();
        let message: Vec<&str> = e.message().lines().map(str::trim).collect();
        Failure::config(format!(
            "{label}{at}: not valid TOML: {}",
            message.join(": ")
        ))
    })?;
    for key in table.keys() {
        if key != "limit" {
            return Err(Failure::config(format!(
                "{label}: unknown key \"{key}\": a config holds only [[limit]] tables"
            )));
        }
    }
    let limits = match table.get("limit") {
        None => {
            return Err(Failure::config(format!(
                "{label}: no [[limit]] tables: define at least one limit"
            )))
        }
        Some(Value::Array(limits)) => limits,
        Some(_) => {
            return Err(Failure::config(format!(
                "{label}: \"limit\" must be an array of tables: write each limit as [[limit]]"
            )))
        }
    };
    if limits.len() > MAX_LIMITS {
        return Err(Failure::config(format!(
            "{label}: {} limits: a file holds at most {MAX_LIMITS}",
            limits.len()
        )));
    }
    let mut defs: Vec<Definition> = Vec::with_capacity(limits.len());
    for (i, value) in limits.iter().enumerate() {
        let Value::Table(limit) = value else {
            return Err(Failure::config(format!(
                "{label}: limit #{}: must be a table: write it as [[limit]]",
                i + 1
            )));
        };
        let def = limit_def(label, i, limit)?;
        if let Some(first) = defs.iter().position(|d| d.name == def.name) {
            return Err(Failure::config(format!(
                "{label}: limit \"{}\": name: defined twice (limits #{} and #{}): give each limit its own name",
                def.name,
                first + 1,
                i + 1
            )));
        }
        defs.push(def);
    }
    Ok(defs)
}

/// One `[[limit]]` table; `index` counts from 0.
pub fn limit_def(label: &str, index: usize, limit: &Table) -> Result<Definition, Failure> {
    let unnamed = format!("limit #{}", index + 1);
    let name = match limit.get("name") {
        None => return Err(field_err(label, &unnamed, "name", "missing")),
        Some(Value::String(name)) => name.clone(),
        Some(other) => {
            return Err(field_err(
                label,
                &unnamed,
                "name",
                &format!("must be a string, not {}", kind(other)),
            ))
        }
    };
    let quoted = format!("limit \"{name}\"");
    let err = |field: &str, problem: &str| field_err(label, &quoted, field, problem);
    check_name(&name).map_err(|problem| err("name", &problem))?;

    let algorithm = match limit.get("algorithm") {
        None => {
            return Err(err(
                "algorithm",
                &format!("missing (one of {})", ALGORITHMS.join(", ")),
            ))
        }
        Some(Value::String(a)) if ALGORITHMS.contains(&a.as_str()) => a.as_str(),
        Some(Value::String(a)) => {
            return Err(err(
                "algorithm",
                &format!("unknown \"{a}\" (one of {})", ALGORITHMS.join(", ")),
            ))
        }
        Some(other) => {
            return Err(err(
                "algorithm",
                &format!("must be a string, not {}", kind(other)),
            ))
        }
    };
    let fields: &[&str] = match algorithm {
        "token_bucket" => &["rate", "burst"],
        "sliding_log" => &["limit", "window"],
        "concurrency" => &["permits", "lease"],
        "adaptive_concurrency" => &[
            "min",
            "max",
            "initial",
            "lease",
            "window",
            "smoothing",
            "tolerance",
            "headroom",
            "backoff",
        ],
        "counters" => &["moving_window"],
        _ => &["limit", "window", "alignment", "utc_offset"],
    };
    for key in limit.keys() {
        if key != "name"
            && key != "algorithm"
            && !fields.contains(&key.as_str())
            && !OPTIONS.contains(&key.as_str())
        {
            return Err(err(
                key,
                &format!(
                    "not a field of {algorithm} (it takes {})",
                    fields.join(", ")
                ),
            ));
        }
    }
    let required = |field: &str, example: &str| {
        limit.get(field).ok_or_else(|| {
            let example = if label == COMMAND_LINE {
                format!("--{field} {}", example.trim_matches('"'))
            } else {
                format!("{field} = {example}")
            };
            err(field, &format!("missing (for example {example})"))
        })
    };

    let algorithm: Result<Algorithm, shmlimit::Error> = match algorithm {
        "token_bucket" => {
            let rate = rate_value(required("rate", "\"100/s\"")?).map_err(|p| err("rate", &p))?;
            let burst = whole(required("burst", "20")?, MAX_CAPACITY, "2^40")
                .map_err(|p| err("burst", &p))?;
            TokenBucket::new(burst, rate).into_algorithm(&name)
        }
        "counters" => {
            let entries = match limit.get("moving_window") {
                None => 0,
                Some(v) => {
                    whole(v, MAX_LOG_ENTRIES, "2^16").map_err(|p| err("moving_window", &p))?
                }
            };
            Counters::new().moving_window(entries).into_algorithm(&name)
        }
        "concurrency" => {
            let permits = whole(required("permits", "5")?, MAX_PERMITS, "2^16")
                .map_err(|p| err("permits", &p))?;
            let mut c = Concurrency::new(permits);
            if let Some(v) = limit.get("lease") {
                c = c.lease(window_value(v).map_err(|p| err("lease", &p))?);
            }
            c.into_algorithm(&name)
        }
        "adaptive_concurrency" => {
            let bound = |field: &str, example: &str| {
                whole(required(field, example)?, MAX_ADAPTIVE_PERMITS, "65535")
                    .map_err(|p| err(field, &p))
            };
            let mut a = AdaptiveConcurrency::new(bound("min", "4")?, bound("max", "256")?);
            if limit.get("initial").is_some() {
                a = a.initial(bound("initial", "16")?);
            }
            if let Some(v) = limit.get("lease") {
                a = a.lease(window_value(v).map_err(|p| err("lease", &p))?);
            }
            if let Some(v) = limit.get("window") {
                a = a.window(window_value(v).map_err(|p| err("window", &p))?);
            }
            let number = |field: &str| -> Result<Option<f64>, Failure> {
                match limit.get(field) {
                    None => Ok(None),
                    Some(Value::Float(x)) => Ok(Some(*x)),
                    Some(Value::Integer(n)) => Ok(Some(*n as f64)),
                    Some(v) => Err(err(field, &format!("{}: must be a number", show(v)))),
                }
            };
            if let Some(x) = number("smoothing")? {
                a = a.smoothing(x);
            }
            if let Some(x) = number("tolerance")? {
                a = a.tolerance(x);
            }
            if let Some(x) = number("headroom")? {
                a = a.headroom(x);
            }
            if let Some(x) = number("backoff")? {
                a = a.backoff(x);
            }
            a.into_algorithm(&name)
        }
        other => {
            let limit_max = match other {
                "sliding_log" => MAX_LOG_LIMIT,
                "sliding_window" => (1 << 20) - 1,
                _ => u64::from(u32::MAX),
            };
            let l = whole(required("limit", "100")?, limit_max, &power_name(limit_max))
                .map_err(|p| err("limit", &p))?;
            let window_field = required("window", "\"60s\"")?;
            // Calendar months: a fixed window of "1month" (one average month, calendar aligned).
            let monthly = other == "fixed_window"
                && matches!(window_field, Value::String(w) if ["1month", "1 month", "month", "1mo"].contains(&w.trim()));
            let window = if monthly {
                Duration::from_nanos(Rate::MONTH_NS)
            } else {
                window_value(window_field).map_err(|p| err("window", &p))?
            };
            let alignment = match limit.get("alignment") {
                None => Alignment::WallClock,
                Some(Value::String(a)) if a == "wall_clock" => Alignment::WallClock,
                Some(Value::String(a)) if a == "monotonic" => Alignment::Monotonic,
                Some(Value::String(a)) if a == "calendar" => Alignment::UTC,
                Some(v) => {
                    return Err(err(
                        "alignment",
                        &format!(
                            "{}: use \"wall_clock\", \"monotonic\" or \"calendar\"",
                            show(v)
                        ),
                    ))
                }
            };
            let alignment = match (monthly, alignment) {
                (false, a) => a,
                (true, Alignment::WallClock) if limit.get("alignment").is_none() => Alignment::UTC,
                (true, a @ Alignment::Calendar { .. }) => a,
                (true, _) => {
                    return Err(err(
                        "alignment",
                        "a window of \"1month\" is a calendar month: use alignment = \"calendar\" (or none)",
                    ))
                }
            };
            let alignment = match (limit.get("utc_offset"), alignment) {
                (None, a) => a,
                (Some(v), Alignment::Calendar { .. }) => Alignment::Calendar {
                    utc_offset_s: utc_offset(v).map_err(|p| err("utc_offset", &p))?,
                },
                (Some(_), _) => {
                    return Err(err("utc_offset", "only with alignment = \"calendar\""))
                }
            };
            match other {
                "sliding_log" => SlidingLog::new(l, window).into_algorithm(&name),
                "sliding_window" => SlidingWindow {
                    limit: l,
                    window,
                    alignment,
                }
                .into_algorithm(&name),
                _ => FixedWindow::new(l, window)
                    .aligned(alignment)
                    .into_algorithm(&name),
            }
        }
    };
    // Anything the library still refuses (a bucket whose capacity x interval is too long, ...).
    let algorithm = algorithm.map_err(|e| match e {
        shmlimit::Error::InvalidParameter { reason, .. } => {
            Failure::config(format!("{label}: {quoted}: {reason}"))
        }
        other => Failure::config(format!("{label}: {quoted}: {other}")),
    })?;
    let def = options(limit, LimitDef::new(name.clone(), algorithm), &err)?;
    // The library's own check of the whole definition (split against keyed, ...).
    def.validate().map_err(|e| match e {
        shmlimit::Error::InvalidParameter { reason, .. } => {
            Failure::config(format!("{label}: {quoted}: {reason}"))
        }
        other => Failure::config(format!("{label}: {quoted}: {other}")),
    })?;
    Ok(Definition {
        name,
        algorithm,
        def,
    })
}

/// The options of one `[[limit]]` table: keyed, on_full, shadow, split, fleet share.
fn options(
    limit: &Table,
    mut def: LimitDef,
    err: &dyn Fn(&str, &str) -> Failure,
) -> Result<LimitDef, Failure> {
    if let Some(v) = limit.get("keyed") {
        let capacity = whole(v, MAX_KEYS, "2^26").map_err(|p| err("keyed", &p))?;
        let on_full = match limit.get("on_full") {
            None => FullPolicy::Deny,
            Some(Value::String(p)) if p == "deny" => FullPolicy::Deny,
            Some(Value::String(p)) if p == "allow" => FullPolicy::Allow,
            Some(Value::String(p)) if p == "error" => FullPolicy::Error,
            Some(v) => {
                return Err(err(
                    "on_full",
                    &format!("{}: use \"deny\", \"allow\" or \"error\"", show(v)),
                ))
            }
        };
        def.keyed = Some(Keyed::new(capacity).on_full(on_full));
    } else if limit.contains_key("on_full") {
        return Err(err(
            "on_full",
            "only keyed limits have a full table: add keyed = <slots>",
        ));
    }
    match limit.get("shadow") {
        None => {}
        Some(Value::Boolean(b)) => def.shadow = *b,
        Some(other) => {
            return Err(err(
                "shadow",
                &format!("must be true or false, not {}", kind(other)),
            ))
        }
    }
    if let Some(v) = limit.get("split") {
        let k = whole(v, MAX_SPLIT as u64, &MAX_SPLIT.to_string()).map_err(|p| err("split", &p))?;
        def.split = k as u16;
    }
    match (limit.get("fleet_total"), limit.get("fleet_weight")) {
        (None, None) => {}
        (None, Some(_)) => {
            return Err(err(
                "fleet_weight",
                "needs fleet_total (for example fleet_total = \"300/s\")",
            ))
        }
        (Some(total), weight) => {
            let total = rate_value(total).map_err(|p| err("fleet_total", &p))?;
            let weight = match weight {
                None => 1,
                Some(w) => whole(w, u64::from(u32::MAX), "2^32-1")
                    .map_err(|p| err("fleet_weight", &p))? as u32,
            };
            def.fleet = Some(FleetShare { total, weight });
        }
    }
    Ok(def)
}

fn field_err(label: &str, limit: &str, field: &str, problem: &str) -> Failure {
    let field = if label == COMMAND_LINE {
        format!("--{}", field.replace('_', "-"))
    } else {
        field.to_owned()
    };
    Failure::config(format!("{label}: {limit}: {field}: {problem}"))
}

/// The limit-name rule the library applies when a file is created.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "must be 1 to {MAX_NAME_LEN} bytes, got {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_-.:/".contains(*c)))
    {
        return Err(format!(
            "{c:?} is not allowed: use ASCII letters, digits and _ - . : /"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("300/s").unwrap().emission_ns(), 3_333_334);
        assert_eq!(parse_rate("100/min").unwrap().emission_ns(), 600_000_000);
        assert_eq!(parse_rate("0.5/s").unwrap().emission_ns(), 2_000_000_000);
        assert_eq!(parse_rate("5/10s").unwrap().emission_ns(), 2_000_000_000);
        assert_eq!(parse_rate("1000").unwrap().emission_ns(), 1_000_000);
        assert!(parse_rate("0/s")
            .unwrap_err()
            .starts_with("must be positive"));
        assert!(parse_rate("-3/s")
            .unwrap_err()
            .starts_with("must be positive"));
        assert!(parse_rate("fast").unwrap_err().contains("not a rate"));
        assert!(parse_rate("1/fortnight")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_rate("2000000000/s").unwrap_err().contains("faster"));
        assert_eq!(parse_rate("10000/d").unwrap().emission_ns(), 8_640_000_000);
        assert_eq!(
            parse_rate("10000/day").unwrap().emission_ns(),
            8_640_000_000
        );
        assert_eq!(
            parse_rate("7/week").unwrap().emission_ns(),
            86_400_000_000_000
        );
        assert_eq!(
            parse_rate("10000/month").unwrap().emission_ns(),
            262_974_600_000
        );
        assert_eq!(
            parse_rate("12/year").unwrap().emission_ns(),
            2_629_746_000_000_000
        );
        assert_eq!(
            parse_rate("1/2w").unwrap().emission_ns(),
            14 * 86_400_000_000_000
        );
    }

    #[test]
    fn calendar_windows_and_offsets() {
        let defs = parse(
            "t",
            "[[limit]]\nname = \"w\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1week\"\nalignment = \"calendar\"\nutc_offset = \"-05:30\"\n",
        )
        .unwrap();
        assert_eq!(
            defs[0].algorithm,
            Algorithm::FixedWindow {
                limit: 5,
                window_ns: 7 * 86_400_000_000_000,
                alignment: Alignment::Calendar {
                    utc_offset_s: -(5 * 3_600 + 30 * 60)
                }
            }
        );
        for bad in ["\"+19:00\"", "\"5\"", "3600", "\"+05:75\""] {
            let text = format!(
                "[[limit]]\nname = \"w\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1d\"\nalignment = \"calendar\"\nutc_offset = {bad}\n"
            );
            assert!(parse("t", &text).is_err(), "{bad}");
        }
        let text = "[[limit]]\nname = \"w\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1d\"\nutc_offset = \"+01:00\"\n";
        assert!(
            parse("t", text).is_err(),
            "an offset needs calendar alignment"
        );
    }

    #[test]
    fn a_fixed_window_of_one_month_is_the_calendar_month() {
        let defs = parse(
            "t",
            "[[limit]]\nname = \"m\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1month\"\n",
        )
        .unwrap();
        assert_eq!(
            defs[0].algorithm,
            FixedWindow::monthly(5).into_algorithm("m").unwrap()
        );
        let bad = "[[limit]]\nname = \"m\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1month\"\nalignment = \"monotonic\"\n";
        assert!(parse("t", bad).is_err());
        let sliding = "[[limit]]\nname = \"m\"\nalgorithm = \"sliding_window\"\nlimit = 5\nwindow = \"1month\"\n";
        assert!(parse("t", sliding).is_err());
    }

    #[test]
    fn windows_take_weeks_but_not_months() {
        assert_eq!(
            parse_duration("1week").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        let e = parse_duration("1month").unwrap_err();
        assert!(e.contains("no fixed length"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("60").unwrap_err().contains("no unit"));
        assert!(parse_duration("0s")
            .unwrap_err()
            .starts_with("must be positive"));
        assert_eq!(
            parse_duration("3 weeks").unwrap(),
            Duration::from_secs(21 * 86_400)
        );
        assert!(parse_duration("3 fortnights")
            .unwrap_err()
            .contains("unknown unit"));
    }
}
