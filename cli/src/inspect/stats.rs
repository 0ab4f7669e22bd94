//! `stats`: the decision counters, as a table, JSON or the Prometheus text format.

use super::*;

#[derive(Args)]
#[command(
    about = "Print decision counters, for people, JSON or Prometheus",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit stats /dev/shm/app.shm\n",
        "  shmlimit stats /dev/shm/app.shm --prometheus > /var/lib/node_exporter/textfile/shmlimit.prom.tmp\n\n",
        "--prometheus writes the text exposition format, for the node exporter's textfile collector\n",
        "(write to a temporary name and rename it into place).\n\n",
        exit_codes!()
    )
)]
pub struct StatsArgs {
    /// The limiter file
    path: PathBuf,
    /// Print as JSON
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the Prometheus text exposition format
    #[arg(long)]
    prometheus: bool,
    #[command(flatten)]
    open: OpenArgs,
}

#[derive(Serialize)]
pub(super) struct StatsJson {
    path: String,
    limits: Vec<LimitJson>,
}

pub fn stats(args: StatsArgs) -> Result<(), Failure> {
    let limiter = open_snapshot(&args.path, &args.open)?;
    let states = states(&limiter);
    if args.prometheus {
        print!(
            "{}",
            prometheus(&args.path.display().to_string(), &limiter, &states)
        );
    } else if args.json {
        print_json(&StatsJson {
            path: args.path.display().to_string(),
            limits: states.iter().map(LimitJson::of).collect(),
        });
    } else {
        print!("{}", state_table(&states));
    }
    Ok(())
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
pub(super) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition format (version 0.0.4) of every limit's counters and state.
pub fn prometheus(path: &str, limiter: &Limiter, states: &[LimitState]) -> String {
    use std::fmt::Write;
    let file = label(path);
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let each = |f: &dyn Fn(&LimitState) -> Option<(String, String)>| -> Vec<(String, String)> {
        states.iter().filter_map(f).collect()
    };
    let base = |s: &LimitState| format!("file=\"{file}\",limit=\"{}\"", label(&s.name));
    family(
        "shmlimit_decisions_total",
        "counter",
        "Decisions made on a limit since the file was created, summed over every process, by outcome.",
        states
            .iter()
            .flat_map(|s| {
                [
                    (format!("{},outcome=\"allowed\"", base(s)), s.stats.allowed.to_string()),
                    (format!("{},outcome=\"denied\"", base(s)), s.stats.denied.to_string()),
                ]
            })
            .collect(),
    );
    family(
        "shmlimit_shadow_denied_total",
        "counter",
        "Decisions a shadow limit would have denied (they were admitted).",
        each(&|s| Some((base(s), s.stats.shadow_denied.to_string()))),
    );
    family(
        "shmlimit_near_limit_total",
        "counter",
        "Admissions that left less than the near-limit fraction of the capacity.",
        each(&|s| Some((base(s), s.stats.near_limit.to_string()))),
    );
    family(
        "shmlimit_refunded_total",
        "counter",
        "Grants given back whole (refunds and composed roll-backs): allowed minus refunded is what passed.",
        each(&|s| Some((base(s), s.stats.refunded.to_string()))),
    );
    family(
        "shmlimit_keys_used",
        "gauge",
        "Keys in use in a keyed limit's table.",
        each(&|s| s.keys.map(|(used, _)| (base(s), used.to_string()))),
    );
    family(
        "shmlimit_permits_held",
        "gauge",
        "Permits of a concurrency limit held right now.",
        each(&|s| s.holders.as_ref().map(|h| (base(s), h.len().to_string()))),
    );
    family(
        "shmlimit_adaptive_limit",
        "gauge",
        "An adaptive concurrency limit's current limit (its permits are the floor).",
        each(&|s| s.adaptive.map(|a| (base(s), format!("{}", a.limit)))),
    );
    family(
        "shmlimit_adaptive_rtt_seconds",
        "gauge",
        "An adaptive concurrency limit's mean round trip of its last window.",
        each(&|s| {
            let a = s.adaptive?;
            a.rtt_recent_us.map(|us| (base(s), format!("{}", us / 1e6)))
        }),
    );
    family(
        "shmlimit_adaptive_key_limit",
        "gauge",
        "A keyed adaptive concurrency limit's current limits over its keys with a slot: the lowest, the mean and the highest.",
        states
            .iter()
            .filter_map(|s| Some((s, key_limits(s.adaptive_keys.as_deref()?)?)))
            .flat_map(|(s, (low, mean, high))| {
                [("min", low), ("mean", mean), ("max", high)]
                    .map(|(stat, v)| (format!("{},stat=\"{stat}\"", base(s)), format!("{v}")))
            })
            .collect(),
    );
    family(
        "shmlimit_live_capacity",
        "gauge",
        "The capacity a limit decides with now (differs from shmlimit_capacity after a retune).",
        states
            .iter()
            .map(|s| {
                (
                    base(s),
                    s.live.unwrap_or(s.algorithm).capacity().to_string(),
                )
            })
            .collect(),
    );
    family(
        "shmlimit_live_rate_per_second",
        "gauge",
        "The rate a limit decides with now (tokens per second): its live (retuned) rate, or a fleet share's fence once its lease has passed.",
        each(&|s| rate_per_s(&s.applied()).map(|r| (base(s), format!("{r}")))),
    );
    family(
        "shmlimit_fleet_lease_seconds",
        "gauge",
        "Seconds left on a fleet-managed bucket's lease (negative once it has passed: fenced).",
        each(&|s| {
            s.fleet.map(|f| {
                (
                    base(s),
                    format!("{}", (f.deadline_ns as f64 - f.now_ns as f64) / 1e9),
                )
            })
        }),
    );
    family(
        "shmlimit_fleet_fenced",
        "gauge",
        "1 while a fleet-managed bucket decides with its fence (its lease has passed), else 0.",
        each(&|s| s.fleet.map(|f| (base(s), u8::from(!f.leased).to_string()))),
    );
    family(
        "shmlimit_remaining",
        "gauge",
        "Units a limit could admit right now (from a cost-1 peek; nothing consumed).",
        each(&|s| {
            s.peek
                .as_ref()
                .ok()
                .copied()
                .flatten()
                .map(|d| (base(s), available(&d).to_string()))
        }),
    );
    family(
        "shmlimit_retry_after_seconds",
        "gauge",
        "Seconds until a cost-1 request would be admitted; 0 when it would be now.",
        each(&|s| {
            s.peek
                .as_ref()
                .ok()
                .copied()
                .flatten()
                .map(|d| (base(s), format!("{}", d.retry_after_ns() as f64 / 1e9)))
        }),
    );
    family(
        "shmlimit_capacity",
        "gauge",
        "The most one decision of a limit can grant (its burst or window limit), as the file was created with it (shmlimit_live_capacity: after any retune).",
        each(&|s| Some((base(s), s.algorithm.capacity().to_string()))),
    );
    family(
        "shmlimit_limit_info",
        "gauge",
        "One sample per limit, labelled with its algorithm.",
        each(&|s| {
            Some((
                format!("{},algorithm=\"{}\"", base(s), s.algorithm.kind()),
                "1".to_owned(),
            ))
        }),
    );
    family(
        "shmlimit_state_damaged",
        "gauge",
        "1 when a limit's shared state holds an impossible value (decisions fail closed).",
        each(&|s| Some((base(s), u8::from(s.peek.is_err()).to_string()))),
    );
    family(
        "shmlimit_resets_total",
        "counter",
        "Times the file's state was reset because the host rebooted.",
        vec![(
            format!("file=\"{file}\""),
            limiter.reset_count().to_string(),
        )],
    );
    out
}
