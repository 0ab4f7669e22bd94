//! `create`, `check`, `inspect` and `stats`: define limiter files and read what they hold.

mod create;
mod state;
mod stats;

pub use create::*;
pub use state::*;
pub use stats::*;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use shmlimit::{
    Algorithm, Decision, Limit, LimitKind, Limiter, OnConflict, OnReboot, PermitHolder,
    SlidingLogLimit, Stats, TokenBucketLimit, WindowLimit,
};
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
        "If the file exists with the same definitions (its live, possibly retuned, parameters), it is\n",
        "left as it is. With other definitions it is an error (exit 2) naming every differing field,\n",
        "unless --on-conflict adopt: then a rate, burst or window limit is retuned live (usage kept),\n",
        "and any other change makes a new file that atomically replaces the old one (processes\n",
        "attached to it move to the new file within about a second).\n\n",
        exit_codes!()
    )
)]
pub struct CreateArgs {
    /// The limiter file to create
    path: PathBuf,
    /// A TOML file of [[limit]] tables (see `shmlimit check --help`)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "algorithm", "rate", "burst", "limit", "window", "alignment", "fleet_total", "fleet_weight"], required_unless_present = "name")]
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
    /// A token bucket that is one host's share of a fleet-wide rate (same grammar as --rate:
    /// "300", "300/s", "5/10s"): the total `shmlimit fleet run` uses when it has no --total
    #[arg(long, value_name = "RATE", requires = "name")]
    fleet_total: Option<String>,
    /// This host's weight in the fleet (with --fleet-total; default 1)
    #[arg(
        long,
        value_name = "N",
        requires = "fleet_total",
        allow_hyphen_values = true
    )]
    fleet_weight: Option<i64>,
    /// Permission bits (octal) of the created file; 660 shares it with the group
    #[arg(long, value_name = "MODE", default_value = "600", value_parser = crate::parse_mode)]
    mode: u32,
    /// When the file exists with other definitions: refuse (default) or adopt
    #[arg(long, value_name = "POLICY", default_value = "refuse", value_parser = ["refuse", "adopt"])]
    on_conflict: String,
    /// At a reboot: translate (default; quotas used before it stay used) or reset (every limit
    /// fresh). Given for an existing file, it must be the file's choice
    #[arg(long, value_name = "CHOICE", value_parser = parse_on_reboot)]
    on_reboot: Option<OnReboot>,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
}

fn parse_on_reboot(text: &str) -> Result<OnReboot, String> {
    match text {
        "translate" => Ok(OnReboot::Translate),
        "reset" => Ok(OnReboot::Reset),
        other => Err(format!("\"{other}\": write translate or reset")),
    }
}

fn on_reboot_name(choice: OnReboot) -> &'static str {
    match choice {
        OnReboot::Translate => "translate",
        OnReboot::Reset => "reset",
    }
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
        "algorithm = \"concurrency\" takes permits = 5 and an optional lease = \"30s\".\n",
        "Every limit takes options: keyed = 10000 with on_full = \"deny\" | \"allow\" | \"error\",\n",
        "shadow = true, split = 4, fleet_total = \"300/s\" with fleet_weight = 2.\n",
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

/// A read-only snapshot of an existing file: copied with `pread`, never mapped, so that reading
/// it never allocates memory of its filesystem (a sparse file on a tmpfs stays sparse).
pub fn open_snapshot(path: &Path, options: &OpenArgs) -> Result<Limiter, Failure> {
    Limiter::builder()
        .mode(options.mode)
        .allow_other_owner(options.allow_other_owner)
        .open_snapshot(path)
        .map_err(|e| Failure::library(e, path))
}

#[derive(Serialize)]
struct InspectJson {
    path: String,
    size_bytes: u64,
    mode: String,
    owner_uid: u32,
    reset_count: u64,
    /// "translate" or "reset": what a reboot does to the state.
    on_reboot: &'static str,
    /// Reboots whose stored times were translated.
    translations: u64,
    /// Wall time that elapsed across the last translated reboot, ns (negative: the wall clock
    /// went backwards).
    last_reboot_wall_elapsed_ns: i64,
    /// Limits holding a state that could not be translated: they deny until it expires or they
    /// are reset.
    failed_closed: Vec<String>,
    format_version: u32,
    /// The boot the stored times belong to, as 32 hex digits.
    boot_id: String,
    created_unix_ns: u64,
    regions: RegionsJson,
    limits: Vec<LimitJson>,
}

#[derive(Serialize)]
struct RegionJson {
    offset: u64,
    length: u64,
}

#[derive(Serialize)]
struct RegionsJson {
    definitions: RegionJson,
    slots: RegionJson,
    counters: RegionJson,
}

fn region((offset, length): (u64, u64)) -> RegionJson {
    RegionJson { offset, length }
}

/// A boot id as 32 hex digits.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Serialize)]
pub struct KeysJson {
    used: usize,
    slots: usize,
}

#[derive(Serialize)]
pub struct HolderJson {
    id: u64,
    pid: u32,
    /// A keyed limit's key, by its tag (`Limit::key_tag`).
    #[serde(skip_serializing_if = "Option::is_none")]
    key_tag: Option<u64>,
    since_ns: Option<u64>,
    lease_expiry_ns: Option<u64>,
    reclaimable: bool,
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
    /// Decisions a shadow limit would have denied (they were admitted).
    shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    near_limit: u64,
    /// Grants given back whole (refunds, composed roll-backs): `allowed - refunded` passed.
    refunded: u64,
    /// The live parameters, present when a retune made them differ from the definition.
    #[serde(skip_serializing_if = "Option::is_none")]
    live: Option<DefinitionJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<KeysJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<HolderJson>>,
    /// The rate decisions use now (tokens per second): the live (retuned) rate, or a fleet
    /// share's fence once its lease has passed; absent for concurrency limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    live_rate_per_s: Option<f64>,
    /// A fleet-managed token bucket's lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetJson>,
}

#[derive(Serialize)]
struct FleetJson {
    /// The share's rate (tokens per second), in force while the lease runs.
    share_per_s: f64,
    /// The fence's rate (the reserved minimum, or the floor), in force once it has passed.
    fence_per_s: f64,
    /// The rate decisions use now.
    applied_per_s: f64,
    /// The lease deadline, ns on the file's monotonic clock (0: never leased).
    deadline_ns: u64,
    /// Time left on the lease (negative once it has passed).
    deadline_in_ms: f64,
    /// Whether decisions use the fence now.
    fenced: bool,
}

impl LimitJson {
    pub fn of(state: &LimitState) -> LimitJson {
        let peek = state.peek.as_ref().ok().copied().flatten();
        LimitJson {
            definition: DefinitionJson::of(&state.name, &state.algorithm),
            admits_now: peek.map(|d| d.is_allowed()),
            remaining: peek.as_ref().map(available),
            retry_after_ns: peek.map(|d| d.retry_after_ns()),
            state_error: state.peek.as_ref().err().cloned(),
            allowed: state.stats.allowed,
            denied: state.stats.denied,
            shadow_denied: state.stats.shadow_denied,
            near_limit: state.stats.near_limit,
            refunded: state.stats.refunded,
            live: state.live.map(|a| DefinitionJson::of(&state.name, &a)),
            keys: state.keys.map(|(used, slots)| KeysJson { used, slots }),
            live_rate_per_s: rate_per_s(&state.applied()),
            fleet: state.fleet.map(|f| FleetJson {
                share_per_s: rate_per_s(&f.share).unwrap_or(0.0),
                fence_per_s: rate_per_s(&f.fence).unwrap_or(0.0),
                applied_per_s: rate_per_s(&f.applied()).unwrap_or(0.0),
                deadline_ns: f.deadline_ns,
                deadline_in_ms: (f.deadline_ns as f64 - f.now_ns as f64) / 1e6,
                fenced: !f.leased,
            }),
            holders: state.holders.as_ref().map(|hs| {
                hs.iter()
                    .map(|h| HolderJson {
                        id: h.id,
                        pid: h.pid,
                        key_tag: h.key_tag,
                        since_ns: h.since_ns,
                        lease_expiry_ns: h.lease_expiry_ns,
                        reclaimable: h.reclaimable,
                    })
                    .collect()
            }),
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
            "shadow denied",
            "near limit",
            "refunded",
        ],
        1,
    );
    for s in states {
        let (remaining, retry) = match &s.peek {
            Ok(Some(d)) => (
                available(d).to_string(),
                render::duration(d.retry_after_ns()),
            ),
            Ok(None) => ("per key".to_owned(), "-".to_owned()),
            Err(_) => ("damaged".to_owned(), "-".to_owned()),
        };
        table.row(vec![
            s.name.clone(),
            remaining,
            retry,
            s.stats.allowed.to_string(),
            s.stats.denied.to_string(),
            format!("{:.1}%", denial_percent(s.stats.allowed, s.stats.denied)),
            s.stats.shadow_denied.to_string(),
            s.stats.near_limit.to_string(),
            s.stats.refunded.to_string(),
        ]);
    }
    table.render()
}

pub fn inspect(args: InspectArgs) -> Result<(), Failure> {
    let limiter = open_snapshot(&args.path, &args.open)?;
    let meta = std::fs::metadata(limiter.path()).map_err(|e| {
        Failure::file(format!(
            "{}: cannot stat the file: {e}; check the path",
            args.path.display()
        ))
    })?;
    let states = states(&limiter);
    let info = limiter.file_info();
    let reboot = limiter.reboot_info();
    let failed: Vec<String> = reboot
        .failed_closed
        .iter()
        .map(|&i| limiter.definitions()[i].name.clone())
        .collect();
    if args.json {
        print_json(&InspectJson {
            path: args.path.display().to_string(),
            size_bytes: meta.len(),
            mode: format!("{:04o}", meta.mode() & 0o777),
            owner_uid: meta.uid(),
            reset_count: info.reset_count,
            on_reboot: on_reboot_name(reboot.on_reboot),
            translations: reboot.translations,
            last_reboot_wall_elapsed_ns: reboot.last_wall_elapsed_ns,
            failed_closed: failed.clone(),
            format_version: info.format_version,
            boot_id: hex(&info.boot_id),
            created_unix_ns: info.created_unix_ns,
            regions: RegionsJson {
                definitions: region(info.definitions),
                slots: region(info.slots),
                counters: region(info.counters),
            },
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
        "format  version {}, created {}",
        info.format_version,
        created(info.created_unix_ns)
    );
    println!("boot    {}", hex(&info.boot_id));
    println!(
        "layout  definitions {}+{}, slots {}+{}, counters {}+{} (offset+bytes)",
        info.definitions.0,
        info.definitions.1,
        info.slots.0,
        info.slots.1,
        info.counters.0,
        info.counters.1
    );
    match reboot.on_reboot {
        OnReboot::Translate => println!(
            "reboot  translate: {} reboot{} translated{}",
            reboot.translations,
            if reboot.translations == 1 { "" } else { "s" },
            if reboot.translations == 0 {
                String::new()
            } else {
                format!(
                    ", the last after {} of wall time{}",
                    render_signed_duration(reboot.last_wall_elapsed_ns),
                    if reboot.last_wall_elapsed_ns < 0 {
                        " (the wall clock went backwards: nothing extra granted)"
                    } else {
                        ""
                    }
                )
            }
        ),
        OnReboot::Reset => println!(
            "reboot  reset: {} state reset{} after a host reboot",
            info.reset_count,
            if info.reset_count == 1 { "" } else { "s" }
        ),
    }
    for name in &failed {
        println!(
            "FAILED CLOSED  limit \"{name}\": a state from before the last reboot could not be \
             translated; it denies until that state expires or `shmlimit reset` is run"
        );
    }
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
    print_options(limiter.definitions());
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
    let managed: Vec<_> = states.iter().filter(|s| s.fleet.is_some()).collect();
    if !managed.is_empty() {
        println!();
        println!("fleet shares (see docs/fleet.md: past its lease deadline a share is fenced)");
        let mut table = TextTable::new(
            &["limit", "applied", "share", "fence", "lease left", "fenced"],
            1,
        );
        for s in managed {
            let f = s.fleet.expect("filtered");
            table.row(vec![
                s.name.clone(),
                render::parameters(&f.applied()),
                render::parameters(&f.share),
                render::parameters(&f.fence),
                format!("{:.0}ms", (f.deadline_ns as f64 - f.now_ns as f64) / 1e6),
                if f.leased { "no" } else { "yes" }.into(),
            ]);
        }
        print!("{}", table.render());
    }
    let retuned: Vec<_> = states.iter().filter(|s| s.live.is_some()).collect();
    if !retuned.is_empty() {
        println!();
        println!("live parameters (retuned with set-rate)");
        let mut table = TextTable::new(&["limit", "defined", "live"], 3);
        for s in retuned {
            table.row(vec![
                s.name.clone(),
                render::parameters(&s.algorithm),
                s.live.as_ref().map(render::parameters).unwrap_or_default(),
            ]);
        }
        print!("{}", table.render());
    }
    for s in &states {
        if let Some((used, slots)) = s.keys {
            println!();
            println!("keys {}: {used} of {slots} slots in use", s.name);
        }
        if let Some(holders) = &s.holders {
            println!();
            println!("permits {}: {} held", s.name, holders.len());
            if !holders.is_empty() {
                let keyed = s.keys.is_some();
                let mut columns = vec!["permit", "pid", "held for", "lease left", "reclaimable"];
                if keyed {
                    columns.insert(1, "key tag");
                }
                let mut table = TextTable::new(&columns, 1);
                let now = monotonic_now_ns();
                for h in holders {
                    let mut row = vec![
                        h.id.to_string(),
                        h.pid.to_string(),
                        h.since_ns
                            .map(|t| render::duration(now.saturating_sub(t)))
                            .unwrap_or_else(|| "-".to_owned()),
                        h.lease_expiry_ns
                            .map(|t| render::duration(t.saturating_sub(now)))
                            .unwrap_or_else(|| "-".to_owned()),
                        if h.reclaimable { "yes" } else { "no" }.to_owned(),
                    ];
                    if keyed {
                        row.insert(1, format!("{:016x}", h.key_tag.unwrap_or(0)));
                    }
                    table.row(row);
                }
                print!("{}", table.render());
            }
        }
    }
    Ok(())
}

/// The monotonic clock the permit stamps are read from.
fn monotonic_now_ns() -> u64 {
    use shmlimit::Clock;
    shmlimit::MonotonicClock.now_ns()
}

/// A creation time in Unix nanoseconds, as UTC `YYYY-MM-DD HH:MM:SS` (and the raw value).
fn render_signed_duration(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let secs = ns.unsigned_abs() / 1_000_000_000;
    format!(
        "{sign}{}h{:02}m{:02}s",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

fn created(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Print a value as pretty JSON followed by a newline.
pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        // Serializing these plain structs cannot fail; say so rather than print nothing.
        Err(e) => eprintln!("shmlimit: internal error writing JSON: {e}"),
    }
}
