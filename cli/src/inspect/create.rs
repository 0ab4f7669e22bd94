//! `create`: make a limiter file from a config or from flags (or adopt the one there).

use super::*;

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

/// The one-limit config the inline flags of `create` describe, checked like a config file.
pub(super) fn inline_def(args: &CreateArgs) -> Result<Vec<Definition>, Failure> {
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
    put("fleet_total", args.fleet_total.clone().map(Value::String));
    put("fleet_weight", args.fleet_weight.map(Value::Integer));
    let def = config::limit_def(config::COMMAND_LINE, 0, &table)?;
    Ok(vec![def])
}

#[derive(Serialize)]
pub(super) struct CreateJson {
    path: String,
    created: bool,
    adopted: bool,
    limits: Vec<DefinitionJson>,
}

pub fn create(args: CreateArgs) -> Result<(), Failure> {
    let defs = match &args.config {
        Some(path) => config::load(path)?,
        None => inline_def(&args)?,
    };
    let existed = std::fs::symlink_metadata(&args.path).is_ok();
    let adopt = args.on_conflict == "adopt";
    let builder = |policy| {
        let mut b = Limiter::builder().mode(args.mode).on_conflict(policy);
        if let Some(choice) = args.on_reboot {
            b = b.on_reboot(choice);
        }
        for def in &defs {
            b = b.define(def.def.clone());
        }
        b
    };
    // Whether adopting changes anything: the file as it is, compared without changing it.
    let differed = existed
        && adopt
        && matches!(
            builder(OnConflict::Refuse).open(&args.path),
            Err(shmlimit::Error::DefinitionConflict { .. })
        );
    let policy = if adopt {
        OnConflict::Adopt
    } else {
        OnConflict::Refuse
    };
    let limiter = builder(policy)
        .create_or_open(&args.path)
        .map_err(|e| Failure::library(e, &args.path))?;
    let live = limiter.live_definitions();
    if args.json {
        print_json(&CreateJson {
            path: args.path.display().to_string(),
            created: !existed,
            adopted: differed,
            limits: live
                .iter()
                .map(|d| DefinitionJson::of(&d.name, &d.algorithm))
                .collect(),
        });
    } else {
        if differed {
            println!(
                "{}: existed with other definitions; adopted these",
                args.path.display()
            );
        } else if existed {
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
            render::definitions(live.iter().map(|d| (d.name.as_str(), &d.algorithm)),)
        );
        print_options(&live);
    }
    Ok(())
}
