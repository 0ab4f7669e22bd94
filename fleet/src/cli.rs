//! `shmlimit fleet run ...` and `shmlimit fleet status ...`: the agent and the fleet's state
//! from the command line.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::agent::{self, AgentConfig};
use super::share::fmt_units;
use shmlimit::Rate;

/// Fleet budgets: per-host shares of one fleet-wide rate, allocated through Redis.
#[derive(clap::Args, Debug)]
pub struct FleetArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: FleetCommand,
}

/// The fleet subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum FleetCommand {
    /// Run this host's agent: lease, grant, local share, fencing (until SIGTERM or SIGINT,
    /// then leave cleanly).
    Run(RunArgs),
    /// List the fleet's members, weights, target and granted shares and lease ages.
    Status(StatusArgs),
}

/// `fleet run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Redis URL (`redis://127.0.0.1:6379`).
    #[arg(long)]
    pub redis: String,
    /// The fleet's name.
    #[arg(long)]
    pub fleet: String,
    /// The token-bucket limit in the file that is this host's share.
    #[arg(long)]
    pub limit: String,
    /// Fleet-wide rate (`300`, `300/s`, `1000/min`, `5/10s`; default: the limit's fleet share).
    #[arg(long, value_parser = parse_rate)]
    pub total: Option<Rate>,
    /// This host's weight (default: the limit's fleet weight, else 1).
    #[arg(long)]
    pub weight: Option<u32>,
    /// A minimum share reserved for this host in the total (`5/s`); kept while fenced.
    #[arg(long, value_parser = parse_rate)]
    pub min_share: Option<Rate>,
    /// Fleet-wide burst, split in proportion to the shares (default: the limit's capacity).
    #[arg(long)]
    pub burst: Option<u64>,
    /// This host's member id, unique in the fleet (default: `HOSTNAME:PATH`, the host name and
    /// the limiter file's absolute path).
    #[arg(long)]
    pub member: Option<String>,
    /// Lease in milliseconds (renewal every ttl/5, fencing ttl/4 before expiry).
    #[arg(long, default_value_t = agent::DEFAULT_TTL.as_millis() as u64)]
    pub ttl_ms: u64,
    /// Do not fork the guard that sets the minimum when the agent dies.
    #[arg(long)]
    pub no_guard: bool,
    /// The host's limiter file.
    pub path: PathBuf,
}

/// `fleet status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Redis URL.
    #[arg(long)]
    pub redis: String,
    /// The fleet's name.
    #[arg(long)]
    pub fleet: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parse a rate as `shmlimit create --rate` does: `300` (per second), `300/s`, `100/min`,
/// `0.5/s`, `20/ms`, `5/10s` (tokens per duration); units `ns`, `us`, `ms`, `s`, `min`, `h`,
/// `d`. A fractional count rounds the interval between tokens up (never looser).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let s = text.trim();
    let (tokens, period) = match s.split_once('/') {
        Some((tokens, period)) => (tokens.trim(), period.trim()),
        None => (s, "s"),
    };
    let hint = "write tokens per period, e.g. \"300\", \"300/s\", \"100/min\", \"5/10s\"";
    let count: f64 = tokens
        .parse()
        .map_err(|_| format!("\"{text}\" is not a rate: {hint}"))?;
    if !count.is_finite() || count <= 0.0 {
        return Err(format!("\"{text}\": the rate must be positive and finite"));
    }
    let split = period
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(period.len());
    let (n, unit) = (&period[..split], period[split..].trim());
    let n: f64 = if n.is_empty() {
        1.0
    } else {
        n.parse()
            .map_err(|_| format!("\"{text}\": \"{period}\" is not a period: {hint}"))?
    };
    let unit_ns: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" | "second" | "seconds" => 1e9,
        "m" | "min" | "minute" | "minutes" => 60e9,
        "h" | "hour" | "hours" => 3600e9,
        "d" | "day" | "days" => 86400e9,
        u => {
            return Err(format!(
                "\"{text}\": unknown unit \"{u}\" (use ns, us, ms, s, min, h, d or a duration like 10s)"
            ))
        }
    };
    let period_ns = n * unit_ns;
    if !period_ns.is_finite() || period_ns <= 0.0 {
        return Err(format!("\"{text}\": the period must be longer than zero"));
    }
    let emission = (period_ns / count).ceil();
    if emission < 1.0 {
        return Err(format!(
            "\"{text}\" is faster than one token per nanosecond"
        ));
    }
    if emission > (1u64 << 62) as f64 {
        return Err(format!(
            "\"{text}\" is too slow (more than 2^62 ns per token)"
        ));
    }
    Rate::from_emission_ns(emission as u64).map_err(|e| format!("\"{text}\": {e}"))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Relaxed: a flag polled by the main loop; async-signal-safe (a lock-free store).
    STOP.store(true, Ordering::Relaxed);
}

/// Install SIGTERM and SIGINT handlers that set the flag returned (for [`agent::run`]).
pub fn stop_on_signals() -> &'static AtomicBool {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to a static atomic, which is async-signal-safe.
        unsafe {
            let _ = sigaction(sig, &action);
        }
    }
    &STOP
}

/// Run a fleet subcommand; the process exit code.
pub fn run_cli(args: FleetArgs) -> i32 {
    match args.command {
        FleetCommand::Run(a) => {
            let mut cfg = AgentConfig::new(a.redis, a.fleet, a.path, a.limit)
                .with_ttl(Duration::from_millis(a.ttl_ms));
            cfg.total = a.total;
            cfg.weight = a.weight;
            cfg.min_share = a.min_share;
            cfg.burst = a.burst;
            cfg.guard = !a.no_guard;
            if let Some(m) = a.member {
                cfg.member = m;
            }
            let stop = stop_on_signals();
            match agent::run(cfg, stop) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("shmlimit fleet run: {e}");
                    2
                }
            }
        }
        FleetCommand::Status(a) => match agent::status(&a.redis, &a.fleet) {
            Ok(st) => {
                if a.json {
                    println!("{}", status_json(&st));
                } else {
                    print!("{}", status_table(&st));
                }
                0
            }
            Err(e) => {
                eprintln!("shmlimit fleet status: {e}");
                1
            }
        },
    }
}

/// The status as a table.
pub fn status_table(st: &super::FleetStatus) -> String {
    let mut out = format!(
        "fleet {}: total {}, ttl {} ms, epoch {}, granted {}{}\n",
        st.fleet,
        fmt_units(st.total),
        st.ttl_ms,
        if st.epoch.is_empty() { "-" } else { &st.epoch },
        fmt_units(st.granted()),
        if !st.open && !st.epoch.is_empty() {
            format!(
                " (quarantine: re-asserted shares only, for about {} ms more, until an agent has seen this epoch for one lease)",
                st.quiet_until_ms.saturating_sub(st.server_now_ms)
            )
        } else {
            String::new()
        }
    );
    let w = st
        .members
        .iter()
        .map(|m| m.id.len())
        .max()
        .unwrap_or(0)
        .max(24);
    out.push_str(&format!(
        "{:<w$} {:>6} {:>14} {:>14} {:>14} {:>14} {:>14} {:>10} {:>10} {}\n",
        "member",
        "weight",
        "demand",
        "target",
        "granted",
        "applied",
        "min",
        "lease_age",
        "expires_in",
        "state"
    ));
    for m in &st.members {
        out.push_str(&format!(
            "{:<w$} {:>6} {:>14} {:>14} {:>14} {:>14} {:>14} {:>8}ms {:>8}ms {}\n",
            m.id,
            m.weight,
            fmt_units(m.demand),
            fmt_units(m.target),
            fmt_units(m.granted),
            fmt_units(m.applied),
            fmt_units(m.min),
            m.lease_age_ms,
            m.expires_in_ms,
            if m.live {
                "live"
            } else {
                "fenced: lease ended (minimum kept)"
            }
        ));
    }
    out
}

/// The status as JSON.
pub fn status_json(st: &super::FleetStatus) -> String {
    let members: Vec<serde_json::Value> = st
        .members
        .iter()
        .map(|m| {
            serde_json::json!({
                "member": m.id, "weight": m.weight, "target_units": m.target,
                "granted_units": m.granted, "min_units": m.min, "live": m.live,
                "lease_age_ms": m.lease_age_ms, "expires_in_ms": m.expires_in_ms,
                "lease_expiry_ms": m.lease_expiry_ms, "member_for_ms": m.member_for_ms,
                "demand_units": m.demand, "applied_units": m.applied, "fenced": !m.live,
            })
        })
        .collect();
    serde_json::json!({
        "fleet": st.fleet, "epoch": st.epoch, "total_units": st.total, "ttl_ms": st.ttl_ms,
        "server_now_ms": st.server_now_ms, "quiet_until_ms": st.quiet_until_ms, "open": st.open,
        "granted_units": st.granted(), "members": members,
    })
    .to_string()
}
