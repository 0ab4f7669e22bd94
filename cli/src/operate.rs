//! `set-rate`, `reset`, `gc` and `sync`: steer a live limiter file that workers are using.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use shmlimit::{Algorithm, Limit, Limiter, Rate};

use crate::config;
use crate::inspect::{open, print_json};
use crate::render;
use crate::{Failure, OpenArgs};

#[derive(Args)]
#[command(
    about = "Change a limit's rate or window limit live; attached workers pick it up on their next decision",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit set-rate /dev/shm/app.shm api 500/s\n",
        "  shmlimit set-rate /dev/shm/app.shm api 500/s --burst 50\n",
        "  shmlimit set-rate /dev/shm/app.shm per-minute 200/min   # a window: 200 per its window\n",
        "  shmlimit set-rate /dev/shm/app.shm per-minute 200       # a window: a bare limit\n\n",
        "Token buckets take a rate (\"100/s\", \"100/min\", \"0.5/s\") and keep their fill level;\n",
        "--burst changes the capacity too. Fixed and sliding windows take a new limit per window,\n",
        "as \"L/window\" (\"L\" over the window's own length) or a bare limit L.\n\n",
        exit_codes!()
    )
)]
pub struct SetRateArgs {
    /// The limiter file
    path: PathBuf,
    /// The limit to retune
    limit: String,
    /// The new rate ("500/s") or, for a window, a limit per window ("200/min" or "200")
    rate: String,
    /// New capacity of a token bucket
    #[arg(long, allow_hyphen_values = true)]
    burst: Option<i64>,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    open: OpenArgs,
}

#[derive(Args)]
#[command(
    about = "Return limits to fresh: full buckets, empty windows, logs and key tables, no permits",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit reset /dev/shm/app.shm api\n",
        "  shmlimit reset /dev/shm/app.shm        # every limit\n\n",
        "Live parameters (after set-rate) are kept. A reset grants each limit its whole capacity\n",
        "at once. Decision counters are not reset.\n\n",
        exit_codes!()
    )
)]
pub struct ResetArgs {
    /// The limiter file
    path: PathBuf,
    /// The limit to reset (default: every limit)
    limit: Option<String>,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    open: OpenArgs,
}

#[derive(Args)]
#[command(
    about = "Reclaim idle keys of keyed limits and permits of dead holders, now",
    after_help = concat!(
        "Example:\n",
        "  shmlimit gc /dev/shm/app.shm\n\n",
        "Keyed limits retire keys whose state is back to fresh; concurrency limits free permits\n",
        "whose owner process is gone or whose lease expired. Other limits have nothing to reclaim.\n\n",
        exit_codes!()
    )
)]
pub struct GcArgs {
    /// The limiter file
    path: PathBuf,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    open: OpenArgs,
}

#[derive(Args)]
#[command(
    about = "Write the file's state to its disk, once or every period, so a power loss forgets at most that period",
    after_help = concat!(
        "Examples:\n",
        "  shmlimit sync /var/lib/app/limits.shm\n",
        "  shmlimit sync /var/lib/app/limits.shm --every 1s     # keep running (a service)\n\n",
        "Without it, the kernel writes a limiter file's dirty pages back about 30 s after they\n",
        "were first dirtied (vm.dirty_expire_centisecs) plus the flusher's period: that much of\n",
        "the admissions can be forgotten by a power loss. Each sync also records this boot's\n",
        "wall clock for the translation of the state at the next reboot. Workers are not slowed\n",
        "beyond one minor page fault per written page per period. Files on tmpfs (/dev/shm) have\n",
        "no disk: they vanish at a reboot, and syncing them does nothing.\n\n",
        exit_codes!()
    )
)]
pub struct SyncArgs {
    /// The limiter file
    path: PathBuf,
    /// Keep running and sync every DURATION ("1s", "500ms", "1min")
    #[arg(long, value_name = "DURATION")]
    every: Option<String>,
    #[command(flatten)]
    open: OpenArgs,
}

pub fn sync(args: SyncArgs) -> Result<(), Failure> {
    let every = args
        .every
        .as_deref()
        .map(|t| config::parse_duration(t).map_err(|e| Failure::config(format!("--every: {e}"))))
        .transpose()?;
    let limiter = open(&args.path, &args.open)?;
    loop {
        limiter
            .sync()
            .map_err(|e| Failure::library(e, &args.path))?;
        match every {
            Some(period) => std::thread::sleep(period),
            None => {
                println!("{}: synced to disk", args.path.display());
                return Ok(());
            }
        }
    }
}

fn limit_of(limiter: &Limiter, name: &str) -> Result<Limit, Failure> {
    limiter
        .limit(name)
        .map_err(|e| Failure::library(e, limiter.path()))
}

fn live(limit: &Limit, path: &std::path::Path) -> Result<Algorithm, Failure> {
    limit
        .live_algorithm()
        .map_err(|e| Failure::library(e, path))
}

/// Retune the token bucket `name` (keyed or not): its rate, and its capacity if `burst` is
/// given.
fn retune_bucket(
    limiter: &Limiter,
    name: &str,
    keyed: bool,
    rate: Rate,
    burst: Option<u64>,
) -> shmlimit::Result<()> {
    if keyed {
        let bucket = limiter.keyed_token_bucket(name)?;
        match burst {
            None => bucket.set_rate(rate),
            Some(b) => bucket.set_token_bucket(b, rate),
        }
    } else {
        let bucket = limiter.token_bucket(name)?;
        match burst {
            None => bucket.set_rate(rate),
            Some(b) => bucket.set_token_bucket(b, rate),
        }
    }
}

#[derive(Serialize)]
struct SetRateJson {
    path: String,
    limit: String,
    old: render::DefinitionJson,
    new: render::DefinitionJson,
}

/// A window's new limit from "L/window" (L over the window's own length, or a rate converted
/// to the window, rounded down) or a bare "L".
fn window_limit(text: &str, window_ns: u64) -> Result<u64, String> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i64>() {
        return if n <= 0 {
            Err(format!("must be at least 1 (got \"{text}\")"))
        } else {
            Ok(n as u64)
        };
    }
    let rate = config::parse_rate(t)?;
    let limit = (u128::from(window_ns) / u128::from(rate.emission_ns())) as u64;
    if limit == 0 {
        return Err(format!(
            "\"{text}\" is less than 1 per {} window",
            render::duration(window_ns)
        ));
    }
    Ok(limit)
}

pub fn set_rate(args: SetRateArgs) -> Result<(), Failure> {
    let limiter = open(&args.path, &args.open)?;
    let limit = limit_of(&limiter, &args.limit)?;
    let p = args.path.display();
    let bad =
        |problem: String| Failure::config(format!("{p}: limit \"{}\": {problem}", args.limit));
    let old = live(&limit, &args.path)?;
    let result = match old {
        Algorithm::TokenBucket { .. } => {
            let rate = config::parse_rate(&args.rate).map_err(|e| bad(format!("RATE: {e}")))?;
            let burst = match args.burst {
                Some(b) if b <= 0 => {
                    return Err(bad(format!("--burst: must be at least 1 (got {b})")))
                }
                b => b.map(|b| b as u64),
            };
            retune_bucket(&limiter, &args.limit, limit.kind().is_keyed(), rate, burst)
        }
        Algorithm::FixedWindow { window_ns, .. } | Algorithm::SlidingWindow { window_ns, .. } => {
            if args.burst.is_some() {
                return Err(bad(
                    "--burst: only token buckets have a burst; give the window's new limit as RATE"
                        .to_owned(),
                ));
            }
            let l = window_limit(&args.rate, window_ns).map_err(|e| bad(format!("RATE: {e}")))?;
            if limit.kind().is_keyed() {
                limiter
                    .keyed_window(&args.limit)
                    .and_then(|w| w.set_limit(l))
            } else {
                limiter.window(&args.limit).and_then(|w| w.set_limit(l))
            }
        }
        other => {
            return Err(bad(format!(
                "a {} limit cannot be retuned live (only token buckets, fixed and sliding windows)",
                other.kind()
            )))
        }
    };
    result.map_err(|e| Failure::library(e, &args.path))?;
    let new = live(&limit, &args.path)?;
    if args.json {
        print_json(&SetRateJson {
            path: p.to_string(),
            limit: args.limit.clone(),
            old: render::DefinitionJson::of(&args.limit, &old),
            new: render::DefinitionJson::of(&args.limit, &new),
        });
    } else {
        println!("{p}: limit \"{}\" retuned", args.limit);
        println!("  old  {}", render::parameters(&old));
        println!("  new  {}", render::parameters(&new));
    }
    Ok(())
}

#[derive(Serialize)]
struct ResetJson {
    path: String,
    reset: Vec<String>,
}

pub fn reset(args: ResetArgs) -> Result<(), Failure> {
    let limiter = open(&args.path, &args.open)?;
    let limits = match &args.limit {
        Some(name) => vec![limit_of(&limiter, name)?],
        None => limiter.limits(),
    };
    let mut names = Vec::new();
    for limit in &limits {
        limit.reset().map_err(|e| Failure::library(e, &args.path))?;
        names.push(limit.name().to_owned());
    }
    if args.json {
        print_json(&ResetJson {
            path: args.path.display().to_string(),
            reset: names,
        });
    } else {
        for name in &names {
            println!("{}: limit \"{name}\" reset to fresh", args.path.display());
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct GcLimitJson {
    name: String,
    /// "keys", "permits", "permits and keys" (a keyed concurrency limit) or "none": what this
    /// limit can reclaim.
    reclaims: &'static str,
    /// Dead holders' permits and idle keys freed, together.
    reclaimed: usize,
    /// Of those, dead holders' permits (concurrency limits only).
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<usize>,
    /// Of those, idle keys (keyed limits only).
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<usize>,
}

#[derive(Serialize)]
struct GcJson {
    path: String,
    limits: Vec<GcLimitJson>,
}

pub fn gc(args: GcArgs) -> Result<(), Failure> {
    let limiter = open(&args.path, &args.open)?;
    let rows: Vec<GcLimitJson> = limiter
        .limits()
        .iter()
        .map(|limit| {
            let concurrency = matches!(limit.algorithm(), Algorithm::Concurrency { .. });
            // Permits first: a key whose last holder was dead is idle only once it is freed.
            let permits = concurrency.then(|| limit.reclaim_dead_permits());
            let keys = limit.def().keyed.map(|_| limit.reclaim_idle_keys());
            let reclaims = match (permits, keys) {
                (Some(_), Some(_)) => "permits and keys",
                (Some(_), None) => "permits",
                (None, Some(_)) => "keys",
                (None, None) => "none",
            };
            GcLimitJson {
                name: limit.name().to_owned(),
                reclaims,
                reclaimed: permits.unwrap_or(0) + keys.unwrap_or(0),
                permits,
                keys,
            }
        })
        .collect();
    if args.json {
        print_json(&GcJson {
            path: args.path.display().to_string(),
            limits: rows,
        });
    } else {
        let mut table = render::Table::new(&["limit", "reclaimed"], 1);
        for r in &rows {
            let cell = match (r.permits, r.keys) {
                (Some(p), Some(k)) => format!("{p} dead permits, {k} idle keys"),
                (Some(p), None) => format!("{p} dead permits"),
                (None, Some(k)) => format!("{k} idle keys"),
                (None, None) => "- (nothing to reclaim)".to_owned(),
            };
            table.row(vec![r.name.clone(), cell]);
        }
        print!("{}", table.render());
    }
    Ok(())
}
