//! `check` and `create`: validate a config, and make a file from it or from flags.

use super::*;

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
