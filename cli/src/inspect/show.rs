//! `inspect`: one file's header, reboot record, definitions, live state, fleet shares, retuned
//! parameters, keys and permit holders, for people or as JSON.

use super::*;

#[derive(Args)]
#[command(
    about = "Show a limiter file: its definitions, live state and decision counts",
    after_help = concat!(
        "Example:\n",
        "  shmlimit inspect /dev/shm/app.shm\n",
        "  shmlimit inspect /dev/shm/app.shm --json | jq '.limits[] | {name, remaining}'\n\n",
        "Live state comes from a peek of cost 1 (nothing is consumed): remaining is how many units\n",
        "a request could take now, retry after how long until one unit would be admitted.\n",
        "Allowed and denied count decisions, summed over every process since the file was created.\n",
        "Definitions are shown live: with the parameters decisions use now, after any retune\n",
        "(set-rate, create --on-conflict adopt). A retuned limit is listed under \"live parameters\"\n",
        "with the parameters the file was created with; in JSON, a limit's top-level fields are the\n",
        "live ones and `created` holds the created ones (present only when they differ).\n\n",
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

fn on_reboot_name(choice: OnReboot) -> &'static str {
    match choice {
        OnReboot::Translate => "translate",
        OnReboot::Reset => "reset",
    }
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

pub fn inspect(args: InspectArgs) -> Result<(), Failure> {
    let limiter = open_snapshot(&args.path, &args.open)?;
    let meta = std::fs::metadata(limiter.path()).map_err(|e| {
        Failure::file(format!(
            "{}: cannot stat the file: {e}; check the path",
            args.path.display()
        ))
    })?;
    let states = states(&limiter);
    let reboot = limiter.reboot_info();
    let failed: Vec<String> = reboot
        .failed_closed
        .iter()
        .map(|&i| limiter.definitions()[i].name.clone())
        .collect();
    if args.json {
        print_json(&inspect_json(&args.path, &meta, &limiter, &states, failed));
        return Ok(());
    }
    print_header(&args.path, &meta, &limiter, &failed);
    print_definitions_and_state(&limiter, &states);
    print_fleet_shares(&states);
    print_retuned(&states);
    print_keys_and_permits(&states);
    Ok(())
}

/// The file as JSON: its header, reboot record and every limit's definition and state.
fn inspect_json(
    path: &Path,
    meta: &std::fs::Metadata,
    limiter: &Limiter,
    states: &[LimitState],
    failed: Vec<String>,
) -> InspectJson {
    let info = limiter.file_info();
    let reboot = limiter.reboot_info();
    InspectJson {
        path: path.display().to_string(),
        size_bytes: meta.len(),
        mode: format!("{:04o}", meta.mode() & 0o777),
        owner_uid: meta.uid(),
        reset_count: info.reset_count,
        on_reboot: on_reboot_name(reboot.on_reboot),
        translations: reboot.translations,
        last_reboot_wall_elapsed_ns: reboot.last_wall_elapsed_ns,
        failed_closed: failed,
        format_version: info.format_version,
        boot_id: hex(&info.boot_id),
        created_unix_ns: info.created_unix_ns,
        regions: RegionsJson {
            definitions: region(info.definitions),
            slots: region(info.slots),
            counters: region(info.counters),
        },
        limits: states.iter().map(LimitJson::of).collect(),
    }
}

/// The file's header: path, size and owner, format, boot, layout, reboot record and the limits
/// that failed closed.
fn print_header(path: &Path, meta: &std::fs::Metadata, limiter: &Limiter, failed: &[String]) {
    let info = limiter.file_info();
    let reboot = limiter.reboot_info();
    println!("file    {}", path.display());
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
    for name in failed {
        println!(
            "FAILED CLOSED  limit \"{name}\": a state from before the last reboot could not be \
             translated; it denies until that state expires or `shmlimit reset` is run"
        );
    }
}

/// The definitions (live: as decisions use them now) with their options, then the state table
/// (and each damaged state's error).
fn print_definitions_and_state(limiter: &Limiter, states: &[LimitState]) {
    println!();
    let retuned = states.iter().filter(|s| s.live.is_some()).count();
    if retuned == 0 {
        println!("definitions ({})", states.len());
    } else {
        println!(
            "definitions ({}, live: {retuned} retuned, with their created parameters below)",
            states.len()
        );
    }
    let live: Vec<(String, Algorithm)> = states
        .iter()
        .map(|s| (s.name.clone(), s.live_algorithm()))
        .collect();
    print!(
        "{}",
        render::definitions(live.iter().map(|(name, a)| (name.as_str(), a)))
    );
    print_options(limiter.definitions());
    println!();
    println!(
        "state (remaining: units a request could take now; counts: decisions by every process)"
    );
    print!("{}", state_table(states));
    for s in states {
        if let Err(e) = &s.peek {
            println!("  {}: {e}", s.name);
        }
    }
}

/// The fleet-managed token buckets: their share, fence and lease.
fn print_fleet_shares(states: &[LimitState]) {
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
}

/// The limits retuned (with set-rate or an adopt): live parameters, then those the file was
/// created with.
fn print_retuned(states: &[LimitState]) {
    let retuned: Vec<_> = states.iter().filter(|s| s.live.is_some()).collect();
    if !retuned.is_empty() {
        println!();
        println!(
            "live parameters (retuned with set-rate or an adopt; decisions use the live ones)"
        );
        let mut table = TextTable::new(&["limit", "live", "created"], 3);
        for s in retuned {
            table.row(vec![
                s.name.clone(),
                render::parameters(&s.live_algorithm()),
                render::parameters(&s.algorithm),
            ]);
        }
        print!("{}", table.render());
    }
}

/// The keys of a keyed adaptive limit most worth a look: the range of their limits, then the
/// busiest (most permits held, then the lowest limit), at most [`ADAPTIVE_KEYS_SHOWN`].
fn print_adaptive_keys(name: &str, keys: &[(u64, shmlimit::AdaptiveStatus)]) {
    let us = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{:.2} ms", x / 1e3));
    println!();
    let Some((low, mean, high)) = key_limits(keys) else {
        println!("adaptive {name}: no key has a slot (each starts at its initial limit)");
        return;
    };
    let in_flight: u64 = keys.iter().map(|(_, a)| a.in_flight).sum();
    let (min, max) = (keys[0].1.min, keys[0].1.max);
    println!(
        "adaptive {name}: {} keys, limits {low:.2} to {high:.2} (mean {mean:.2}, range {min}..={max}), {in_flight} in flight",
        keys.len()
    );
    let mut busiest: Vec<_> = keys.iter().collect();
    busiest.sort_by(|(_, a), (_, b)| {
        b.in_flight
            .cmp(&a.in_flight)
            .then(a.limit.total_cmp(&b.limit))
    });
    let mut table = TextTable::new(
        &[
            "key tag",
            "limit",
            "permits",
            "in flight",
            "recent RTT",
            "long RTT",
        ],
        1,
    );
    for (tag, a) in busiest.iter().take(ADAPTIVE_KEYS_SHOWN) {
        table.row(vec![
            format!("{tag:016x}"),
            format!("{:.2}", a.limit),
            a.permits.to_string(),
            a.in_flight.to_string(),
            us(a.rtt_recent_us),
            us(a.rtt_long_us),
        ]);
    }
    print!("{}", table.render());
    if keys.len() > ADAPTIVE_KEYS_SHOWN {
        println!(
            "  ({} more keys: inspect --json lists them all)",
            keys.len() - ADAPTIVE_KEYS_SHOWN
        );
    }
}

/// Keys of a keyed adaptive limit `inspect` lists (the busiest).
const ADAPTIVE_KEYS_SHOWN: usize = 10;

/// Each keyed limit's slots in use, and each concurrency limit's permit holders.
fn print_keys_and_permits(states: &[LimitState]) {
    for s in states {
        if let Some((used, slots)) = s.keys {
            println!();
            println!("keys {}: {used} of {slots} slots in use", s.name);
        }
        let us = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{:.2} ms", x / 1e3));
        if let Some(keys) = &s.adaptive_keys {
            print_adaptive_keys(&s.name, keys);
        }
        if let Some(a) = &s.adaptive {
            println!();
            println!(
                "adaptive {}: limit {:.2} ({} permits, range {}..={}), recent RTT {}, long RTT {}, {} in flight",
                s.name,
                a.limit,
                a.permits,
                a.min,
                a.max,
                us(a.rtt_recent_us),
                us(a.rtt_long_us),
                a.in_flight
            );
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
}

/// The monotonic clock the permit stamps are read from.
fn monotonic_now_ns() -> u64 {
    use shmlimit::Clock;
    shmlimit::MonotonicClock.now_ns()
}

/// A signed duration in nanoseconds as `[-]HhMMmSSs`.
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

/// A creation time in Unix nanoseconds, as UTC `YYYY-MM-DD HH:MM:SS`.
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
