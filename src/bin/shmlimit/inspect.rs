//! `create`, `check`, `inspect` and `stats`: define limiter files and read what they hold.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use shmlimit::{Algorithm, Decision, Limiter, Stats};
use toml::{Table, Value};

use crate::config::{self, Definition};
use crate::render::{self, DefinitionJson, Table as TextTable};
use crate::{Failure, OpenArgs};

#[derive(Args)]
#[command(
    about = "Create a limiter file from a config, or from flags for one limit",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit create /dev/shm/app.shm --config limits.toml\n",
        "  shmlimit create /dev/shm/api.shm --name api --algorithm token_bucket --rate 100/s --burst 20\n",
        "  shmlimit create /dev/shm/search.shm --name search --algorithm sliding_log --limit 100 --window 60s\n\n",
        "If the file exists with the same definitions, it is left as it is; with other definitions,\n",
        "it is an error (exit 2).\n\n",
        exit_codes!()
    )
)]
pub struct CreateArgs {
    /// The limiter file to create
    path: PathBuf,
    /// A TOML file of [[limit]] tables (see `shmlimit check --help`)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "algorithm", "rate", "burst", "limit", "window", "alignment"], required_unless_present = "name")]
    config: Option<PathBuf>,
    /// Name of the one limit defined by flags
    #[arg(long, requires = "algorithm")]
    name: Option<String>,
    /// token_bucket, fixed_window, sliding_window or sliding_log
    #[arg(long, requires = "name")]
    algorithm: Option<String>,
    /// Refill rate of a token bucket: "100/s", "100/min", "0.5/s"
    #[arg(long, allow_hyphen_values = true)]
    rate: Option<String>,
    /// Capacity of a token bucket
    #[arg(long, allow_hyphen_values = true)]
    burst: Option<i64>,
    /// Admissions per window (fixed_window, sliding_window, sliding_log)
    #[arg(long, allow_hyphen_values = true)]
    limit: Option<i64>,
    /// Window length: "60s", "500ms", "1min"
    #[arg(long)]
    window: Option<String>,
    /// Window boundaries: wall_clock (default) or monotonic
    #[arg(long)]
    alignment: Option<String>,
    /// Permission bits (octal) of the created file; 660 shares it with the group
    #[arg(long, value_name = "MODE", default_value = "600", value_parser = crate::parse_mode)]
    mode: u32,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(
    about = "Validate a limits config without creating anything",
    after_help = concat!(
        "Example:\n",
        "  shmlimit check limits.toml\n\n",
        "A config is a list of [[limit]] tables:\n",
        "  [[limit]]\n",
        "  name = \"api\"\n",
        "  algorithm = \"token_bucket\"   # or fixed_window, sliding_window, sliding_log\n",
        "  rate = \"100/s\"               # \"300/s\", \"100/min\", \"0.5/s\"\n",
        "  burst = 20\n\n",
        "  [[limit]]\n",
        "  name = \"search\"\n",
        "  algorithm = \"sliding_log\"\n",
        "  limit = 100\n",
        "  window = \"60s\"               # \"500ms\", \"60s\", \"1min\", \"2h\"\n\n",
        "Windows also take alignment = \"wall_clock\" (default) or \"monotonic\".\n",
        "Each problem is one line naming the file, the limit and the field.\n\n",
        exit_codes!()
    )
)]
pub struct CheckArgs {
    /// The TOML config to validate
    config: PathBuf,
    /// Print the validated definitions as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(
    about = "Show a limiter file: its definitions, live state and decision counts",
    after_help = concat!(
        "Example:\n",
        "  shmlimit inspect /dev/shm/app.shm\n",
        "  shmlimit inspect /dev/shm/app.shm --json | jq '.limits[] | {name, remaining}'\n\n",
        "Live state comes from a peek of cost 1 (nothing is consumed): remaining is how many units\n",
        "a request could take now, retry after how long until one unit would be admitted.\n",
        "Allowed and denied count decisions, summed over every process since the file was created.\n\n",
        exit_codes!()
    )
)]
pub struct InspectArgs {
    /// The limiter file
    path: PathBuf,
    /// Print as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    open: OpenArgs,
}

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

/// Open an existing file for reading its state.
pub fn open(path: &Path, options: &OpenArgs) -> Result<Limiter, Failure> {
    Limiter::builder()
        .mode(options.mode)
        .allow_other_owner(options.allow_other_owner)
        .open(path)
        .map_err(|e| Failure::library(e, path))
}

/// What one limit holds right now.
pub struct LimitState {
    pub name: String,
    pub algorithm: Algorithm,
    pub stats: Stats,
    /// A peek of cost 1, or why it failed (a damaged state word).
    pub peek: Result<Decision, String>,
}

/// Units a request could take now, from a cost-1 peek: the peek's `remaining` is what would
/// be left after admitting that one unit.
pub fn available(peek: &Decision) -> u64 {
    peek.remaining() + u64::from(peek.is_allowed())
}

/// Every limit's state, read now.
pub fn states(limiter: &Limiter) -> Vec<LimitState> {
    limiter
        .limits()
        .into_iter()
        .map(|limit| {
            let stats = limit.stats();
            let peek = limit.peek(1).map_err(|e| e.to_string());
            LimitState {
                name: limit.name().to_owned(),
                algorithm: *limit.algorithm(),
                stats,
                peek,
            }
        })
        .collect()
}

fn named(defs: &[Definition]) -> impl Iterator<Item = (&str, &Algorithm)> {
    defs.iter().map(|d| (d.name.as_str(), &d.algorithm))
}

/// Denied decisions as a share of all decisions, in percent (0 when none).
pub fn denial_percent(allowed: u64, denied: u64) -> f64 {
    let total = allowed + denied;
    if total == 0 {
        0.0
    } else {
        denied as f64 * 100.0 / total as f64
    }
}

#[derive(Serialize)]
struct CheckJson {
    config: String,
    limits: Vec<DefinitionJson>,
}

pub fn check(args: CheckArgs) -> Result<(), Failure> {
    let defs = config::load(&args.config)?;
    if args.json {
        print_json(&CheckJson {
            config: args.config.display().to_string(),
            limits: defs
                .iter()
                .map(|d| DefinitionJson::of(&d.name, &d.algorithm))
                .collect(),
        });
    } else {
        println!(
            "{}: {} limit{} OK",
            args.config.display(),
            defs.len(),
            if defs.len() == 1 { "" } else { "s" }
        );
        print!("{}", render::definitions(named(&defs)));
    }
    Ok(())
}

/// The one-limit config the inline flags of `create` describe, checked like a config file.
fn inline_def(args: &CreateArgs) -> Result<Vec<Definition>, Failure> {
    let mut table = Table::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            table.insert(key.to_owned(), v);
        }
    };
    put("name", args.name.clone().map(Value::String));
    put("algorithm", args.algorithm.clone().map(Value::String));
    put("rate", args.rate.clone().map(Value::String));
    put("burst", args.burst.map(Value::Integer));
    put("limit", args.limit.map(Value::Integer));
    put("window", args.window.clone().map(Value::String));
    put("alignment", args.alignment.clone().map(Value::String));
    let def = config::limit_def(config::COMMAND_LINE, 0, &table)?;
    Ok(vec![def])
}

#[derive(Serialize)]
struct CreateJson {
    path: String,
    created: bool,
    limits: Vec<DefinitionJson>,
}

pub fn create(args: CreateArgs) -> Result<(), Failure> {
    let defs = match &args.config {
        Some(path) => config::load(path)?,
        None => inline_def(&args)?,
    };
    let existed = std::fs::symlink_metadata(&args.path).is_ok();
    let mut builder = Limiter::builder().mode(args.mode);
    for def in &defs {
        builder = builder.limit(&def.name, def.algorithm);
    }
    let limiter = builder
        .create_or_open(&args.path)
        .map_err(|e| Failure::library(e, &args.path))?;
    if args.json {
        print_json(&CreateJson {
            path: args.path.display().to_string(),
            created: !existed,
            limits: limiter
                .definitions()
                .iter()
                .map(|d| DefinitionJson::of(&d.name, &d.algorithm))
                .collect(),
        });
    } else {
        if existed {
            println!(
                "{}: exists with these definitions; left as it is",
                args.path.display()
            );
        } else {
            println!(
                "{}: created (mode {:04o}) with {} limit{}",
                args.path.display(),
                args.mode,
                defs.len(),
                if defs.len() == 1 { "" } else { "s" }
            );
        }
        print!(
            "{}",
            render::definitions(
                limiter
                    .definitions()
                    .iter()
                    .map(|d| (d.name.as_str(), &d.algorithm)),
            )
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct InspectJson {
    path: String,
    size_bytes: u64,
    mode: String,
    owner_uid: u32,
    reset_count: u64,
    limits: Vec<LimitJson>,
}

#[derive(Serialize)]
pub struct LimitJson {
    #[serde(flatten)]
    definition: DefinitionJson,
    /// Whether a decision of cost 1 would be admitted now.
    #[serde(skip_serializing_if = "Option::is_none")]
    admits_now: Option<bool>,
    /// Units a request could take now.
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state_error: Option<String>,
    allowed: u64,
    denied: u64,
}

impl LimitJson {
    pub fn of(state: &LimitState) -> LimitJson {
        let peek = state.peek.as_ref().ok();
        LimitJson {
            definition: DefinitionJson::of(&state.name, &state.algorithm),
            admits_now: peek.map(|d| d.is_allowed()),
            remaining: peek.map(available),
            retry_after_ns: peek.map(|d| d.retry_after_ns()),
            state_error: state.peek.as_ref().err().cloned(),
            allowed: state.stats.allowed,
            denied: state.stats.denied,
        }
    }
}

/// The state table: remaining, retry after, allowed, denied, denied %.
pub fn state_table(states: &[LimitState]) -> String {
    let mut table = TextTable::new(
        &[
            "limit",
            "remaining",
            "retry after",
            "allowed",
            "denied",
            "denied %",
        ],
        1,
    );
    for s in states {
        let (remaining, retry) = match &s.peek {
            Ok(d) => (
                available(d).to_string(),
                render::duration(d.retry_after_ns()),
            ),
            Err(_) => ("damaged".to_owned(), "-".to_owned()),
        };
        table.row(vec![
            s.name.clone(),
            remaining,
            retry,
            s.stats.allowed.to_string(),
            s.stats.denied.to_string(),
            format!("{:.1}%", denial_percent(s.stats.allowed, s.stats.denied)),
        ]);
    }
    table.render()
}

pub fn inspect(args: InspectArgs) -> Result<(), Failure> {
    let limiter = open(&args.path, &args.open)?;
    let meta = std::fs::metadata(limiter.path()).map_err(|e| {
        Failure::file(format!(
            "{}: cannot stat the file: {e}; check the path",
            args.path.display()
        ))
    })?;
    let states = states(&limiter);
    if args.json {
        print_json(&InspectJson {
            path: args.path.display().to_string(),
            size_bytes: meta.len(),
            mode: format!("{:04o}", meta.mode() & 0o777),
            owner_uid: meta.uid(),
            reset_count: limiter.reset_count(),
            limits: states.iter().map(LimitJson::of).collect(),
        });
        return Ok(());
    }
    println!("file    {}", args.path.display());
    println!(
        "size    {} bytes, mode {:04o}, owner uid {}",
        meta.len(),
        meta.mode() & 0o777,
        meta.uid()
    );
    println!(
        "resets  {} (state resets after a host reboot)",
        limiter.reset_count()
    );
    println!();
    println!("definitions ({})", states.len());
    print!(
        "{}",
        render::definitions(
            limiter
                .definitions()
                .iter()
                .map(|d| (d.name.as_str(), &d.algorithm)),
        )
    );
    println!();
    println!(
        "state (remaining: units a request could take now; counts: decisions by every process)"
    );
    print!("{}", state_table(&states));
    for s in &states {
        if let Err(e) = &s.peek {
            println!("  {}: {e}", s.name);
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct StatsJson {
    path: String,
    limits: Vec<LimitJson>,
}

pub fn stats(args: StatsArgs) -> Result<(), Failure> {
    let limiter = open(&args.path, &args.open)?;
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
fn label(value: &str) -> String {
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
        "shmlimit_remaining",
        "gauge",
        "Units a limit could admit right now (from a cost-1 peek; nothing consumed).",
        each(&|s| {
            s.peek
                .as_ref()
                .ok()
                .map(|d| (base(s), available(d).to_string()))
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
                .map(|d| (base(s), format!("{}", d.retry_after_ns() as f64 / 1e9)))
        }),
    );
    family(
        "shmlimit_capacity",
        "gauge",
        "The most one decision of a limit can grant (its burst or window limit).",
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

/// Print a value as pretty JSON followed by a newline.
pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        // Serializing these plain structs cannot fail; say so rather than print nothing.
        Err(e) => eprintln!("shmlimit: internal error writing JSON: {e}"),
    }
}
