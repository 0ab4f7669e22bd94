//! `watch`: a live view of a limiter file, redrawn every interval until Ctrl-C.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use serde::Serialize;
use shmlimit::Stats;

use crate::inspect::{self, denial_percent, LimitState};
use crate::render::{self, Table};
use crate::{config, Failure, OpenArgs};

#[derive(Args)]
#[command(
    about = "Watch a limiter file live: decisions per second, denial ratio, remaining budget",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit watch /dev/shm/app.shm                 # redraw every second until Ctrl-C\n",
        "  shmlimit watch /dev/shm/app.shm --count 5 --json   # five JSON lines, one per second\n\n",
        "Rates are over the last interval; the denial ratio is denied / decisions in that interval.\n",
        "On a terminal the table is redrawn in place; otherwise each refresh is appended.\n\n",
        exit_codes!()
    )
)]
pub struct WatchArgs {
    /// The limiter file
    path: PathBuf,
    /// Stop after N refreshes (default: run until Ctrl-C)
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Time between refreshes: "1s", "500ms"
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
    /// Print one JSON object per refresh instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    open: OpenArgs,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = config::parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("\"{s}\" is shorter than the minimum of 10ms"));
    }
    Ok(d)
}

/// Set by SIGINT / SIGTERM; the loop finishes its frame and exits.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_: libc::c_int) {
    // Relaxed: the flag is the whole message; the main loop only polls it.
    STOP.store(true, Ordering::Relaxed);
}

fn install_stop_handler() -> Result<(), Failure> {
    let action = SigAction::new(
        SigHandler::Handler(request_stop),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic flag, which is async-signal-safe; it
        // touches no lock, allocation or other state the interrupted code might hold.
        unsafe { sigaction(signal, &action) }
            .map_err(|e| Failure::file(format!("cannot install the {signal} handler: {e}")))?;
    }
    Ok(())
}

#[derive(Serialize)]
struct FrameJson<'a> {
    path: &'a str,
    refresh: u64,
    interval_s: f64,
    limits: Vec<LimitFrame>,
}

#[derive(Serialize)]
struct LimitFrame {
    name: String,
    algorithm: &'static str,
    decisions_per_second: f64,
    denied_per_second: f64,
    /// Denied / decisions over the interval, 0 to 1 (0 when there were none).
    denial_ratio: f64,
    /// Units a request could take now; absent for a keyed limit (its budget is per key) and
    /// for a damaged state word.
    remaining: Option<u64>,
    /// A keyed limit: its budget is per key.
    keyed: bool,
    /// The most one decision can grant now: the live capacity (after any retune).
    capacity: u64,
    allowed_total: u64,
    denied_total: u64,
    /// An adaptive concurrency limit's state now (absent for other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptive: Option<AdaptiveFrame>,
    /// A keyed adaptive concurrency limit's keys now (absent for other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptive_keys: Option<AdaptiveKeysFrame>,
}

/// What `inspect` sums up of a keyed adaptive limit's keys, for each refresh.
#[derive(Serialize)]
struct AdaptiveKeysFrame {
    /// Keys with a slot.
    keys: usize,
    /// The lowest, mean and highest current limit over those keys (absent with no key).
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_max: Option<f64>,
    min: u64,
    max: u64,
    in_flight: u64,
}

/// What `inspect` shows of an adaptive concurrency limit, for each refresh.
#[derive(Serialize)]
struct AdaptiveFrame {
    /// The current limit, fractional; its floor is granted at once.
    limit: f64,
    permits: u64,
    min: u64,
    max: u64,
    in_flight: u64,
    /// The mean round trip of the last closed window, ms (absent before the first sample).
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt_recent_ms: Option<f64>,
}

fn frame(states: &[LimitState], before: &[Stats], seconds: f64) -> Vec<LimitFrame> {
    states
        .iter()
        .zip(before)
        .map(|(s, b)| {
            let allowed = s.stats.allowed.saturating_sub(b.allowed);
            let denied = s.stats.denied.saturating_sub(b.denied);
            LimitFrame {
                name: s.name.clone(),
                algorithm: s.algorithm.kind(),
                decisions_per_second: (allowed as f64 + denied as f64) / seconds,
                denied_per_second: denied as f64 / seconds,
                denial_ratio: denial_percent(allowed, denied) / 100.0,
                remaining: s
                    .peek
                    .as_ref()
                    .ok()
                    .copied()
                    .flatten()
                    .as_ref()
                    .map(inspect::available),
                keyed: s.keys.is_some(),
                capacity: s.live_algorithm().capacity(),
                allowed_total: s.stats.allowed,
                denied_total: s.stats.denied,
                adaptive: s.adaptive.map(|a| AdaptiveFrame {
                    limit: a.limit,
                    permits: a.permits,
                    min: a.min,
                    max: a.max,
                    in_flight: a.in_flight,
                    rtt_recent_ms: a.rtt_recent_us.map(|us| us / 1e3),
                }),
                adaptive_keys: s.adaptive_keys.as_deref().map(|keys| {
                    let limits = inspect::key_limits(keys);
                    let (min, max) = match s.algorithm {
                        shmlimit::Algorithm::AdaptiveConcurrency(a) => (a.min, a.max),
                        _ => (0, 0),
                    };
                    AdaptiveKeysFrame {
                        keys: keys.len(),
                        limit_min: limits.map(|l| l.0),
                        limit_mean: limits.map(|l| l.1),
                        limit_max: limits.map(|l| l.2),
                        min,
                        max,
                        in_flight: keys.iter().map(|(_, a)| a.in_flight).sum(),
                    }
                }),
            }
        })
        .collect()
}

fn table(limits: &[LimitFrame]) -> String {
    let mut table = Table::new(
        &[
            "limit",
            "algorithm",
            "decisions/s",
            "denied %",
            "remaining",
            "capacity",
            "allowed",
            "denied",
        ],
        2,
    );
    for l in limits {
        table.row(vec![
            l.name.clone(),
            l.algorithm.to_owned(),
            render::thousands(l.decisions_per_second.round() as u64),
            format!("{:.1}%", l.denial_ratio * 100.0),
            match l.remaining {
                Some(r) => r.to_string(),
                None if l.keyed => "per key".to_owned(),
                None => "damaged".to_owned(),
            },
            // An adaptive limit grants its current limit, within its range; a keyed one, each
            // key its own.
            match (&l.adaptive, &l.adaptive_keys) {
                (Some(a), _) => format!("{} ({}..={})", a.permits, a.min, a.max),
                (_, Some(k)) => match (k.limit_min, k.limit_max) {
                    (Some(low), Some(high)) => {
                        format!("{low:.1}-{high:.1} per key ({}..={})", k.min, k.max)
                    }
                    _ => format!("per key ({}..={})", k.min, k.max),
                },
                _ => l.capacity.to_string(),
            },
            render::thousands(l.allowed_total),
            render::thousands(l.denied_total),
        ]);
    }
    table.render()
}

/// Sleep until `deadline`, waking early if a stop was requested; true if it was.
fn sleep_until(deadline: Instant) -> bool {
    loop {
        // Relaxed: see `request_stop`.
        if STOP.load(Ordering::Relaxed) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

pub fn run(args: WatchArgs) -> Result<(), Failure> {
    let limiter = inspect::open(&args.path, &args.open)?;
    install_stop_handler()?;
    let path = args.path.display().to_string();
    let terminal = std::io::stdout().is_terminal() && !args.json;
    let mut before: Vec<Stats> = limiter.limits().iter().map(|l| l.stats()).collect();
    let mut taken = Instant::now();
    let mut next = taken + args.interval;
    let mut refresh = 0u64;
    if terminal {
        print!("\x1b[2J");
    }
    while args.count.is_none_or(|n| refresh < n) {
        if sleep_until(next) {
            break;
        }
        let states = inspect::states(&limiter);
        let now = Instant::now();
        let seconds = (now - taken).as_secs_f64().max(1e-9);
        let limits = frame(&states, &before, seconds);
        before = states.iter().map(|s| s.stats).collect();
        taken = now;
        next += args.interval;
        refresh += 1;
        let mut out = std::io::stdout().lock();
        let written = if args.json {
            let frame = FrameJson {
                path: &path,
                refresh,
                interval_s: seconds,
                limits,
            };
            serde_json::to_string(&frame)
                .map_err(std::io::Error::other)
                .and_then(|line| writeln!(out, "{line}"))
        } else {
            let home = if terminal { "\x1b[H\x1b[J" } else { "" };
            write!(
                out,
                "{home}shmlimit watch {path}: refresh {refresh} every {} (Ctrl-C to quit)\n{}\n",
                render::duration(args.interval.as_nanos() as u64),
                table(&limits)
            )
        };
        if written.and_then(|()| out.flush()).is_err() {
            // stdout was closed: nobody is watching any more.
            return Ok(());
        }
    }
    Ok(())
}
