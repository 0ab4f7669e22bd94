//! `check`: validate a config; and how a definition's options read, as text and JSON (in
//! `check`, `create` and `inspect`).

use super::*;

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
        "algorithm = \"adaptive_concurrency\" takes min = 4, max = 256 and optionally initial,\n",
        "lease, window = \"20ms\", smoothing, tolerance, headroom and backoff.\n",
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

#[derive(Serialize)]
pub(super) struct CheckJson {
    config: String,
    limits: Vec<CheckLimitJson>,
}

/// A definition with its options, as JSON.
#[derive(Serialize)]
pub(super) struct CheckLimitJson {
    #[serde(flatten)]
    definition: DefinitionJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    keyed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_full: Option<&'static str>,
    shadow: bool,
    split: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet_total: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet_weight: Option<u32>,
}

pub(super) fn full_policy(p: shmlimit::FullPolicy) -> &'static str {
    match p {
        shmlimit::FullPolicy::Deny => "deny",
        shmlimit::FullPolicy::Allow => "allow",
        shmlimit::FullPolicy::Error => "error",
    }
}

impl CheckLimitJson {
    fn of(def: &shmlimit::LimitDef) -> CheckLimitJson {
        CheckLimitJson {
            definition: DefinitionJson::of(&def.name, &def.algorithm),
            keyed: def.keyed.map(|k| k.capacity),
            on_full: def.keyed.map(|k| full_policy(k.on_full)),
            shadow: def.shadow,
            split: def.split,
            fleet_total: def.fleet.map(|f| render::rate(f.total.emission_ns())),
            fleet_weight: def.fleet.map(|f| f.weight),
        }
    }
}

/// A definition's non-default options in one phrase, empty when it has none.
pub fn options_text(def: &shmlimit::LimitDef) -> String {
    let mut parts = Vec::new();
    if let Some(k) = def.keyed {
        parts.push(format!(
            "keyed, {} slots (when full: {}); the budget is per key",
            k.slots(),
            full_policy(k.on_full)
        ));
    }
    if def.shadow {
        parts.push("shadow (counts, never denies)".to_owned());
    }
    if def.split > 1 {
        parts.push(format!("split over {} cache lines", def.split));
    }
    if let Some(f) = def.fleet {
        parts.push(format!(
            "fleet share of {} (weight {})",
            render::rate(f.total.emission_ns()),
            f.weight
        ));
    }
    parts.join(", ")
}

pub(super) fn print_options<'a>(defs: impl IntoIterator<Item = &'a shmlimit::LimitDef>) {
    for def in defs {
        let text = options_text(def);
        if !text.is_empty() {
            println!("  {}: {text}", def.name);
        }
    }
}

pub fn check(args: CheckArgs) -> Result<(), Failure> {
    let defs = config::load(&args.config)?;
    if args.json {
        print_json(&CheckJson {
            config: args.config.display().to_string(),
            limits: defs.iter().map(|d| CheckLimitJson::of(&d.def)).collect(),
        });
    } else {
        println!(
            "{}: {} limit{} OK",
            args.config.display(),
            defs.len(),
            if defs.len() == 1 { "" } else { "s" }
        );
        print!("{}", render::definitions(named(&defs)));
        print_options(defs.iter().map(|d| &d.def));
    }
    Ok(())
}
