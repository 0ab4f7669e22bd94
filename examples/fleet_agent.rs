//! The fleet agent and status as a standalone program (the same subcommands as
//! `shmlimit fleet ...`):
//!
//! ```text
//! cargo run --example fleet_agent -- run --redis redis://127.0.0.1:6379 --fleet api \
//!     --limit downstream --total 300/s --weight 1 /dev/shm/api.shm
//! cargo run --example fleet_agent -- status --redis redis://127.0.0.1:6379 --fleet api
//! ```

use clap::Parser;

/// Fleet budgets: per-host shares of one fleet-wide rate, allocated through Redis.
#[derive(Parser)]
#[command(name = "fleet_agent")]
struct Cli {
    #[command(flatten)]
    fleet: shmlimit_fleet::cli::FleetArgs,
}

fn main() {
    std::process::exit(shmlimit_fleet::cli::run_cli(Cli::parse().fleet));
}
