//! `shmlimit`: run the multi-process demo, and define, check, inspect and watch limiter files.
//!
//! Every command goes through the public library API only. Exit codes: 0 success, 1 usage or
//! config error, 2 file error, 3 a bound exceeded in the demo (see `exit_codes!`).

/// The exit-code table every `--help` ends with (a macro, so that `concat!` can join it to each
/// command's example).
macro_rules! exit_codes {
    () => {
        "Exit codes:\n  \
         0  success\n  \
         1  usage or config error (a bad flag, a bad field in limits.toml)\n  \
         2  file error (the limiter file cannot be created, opened or validated)\n  \
         3  demo only: a limit admitted more than its guaranteed bound"
    };
}

mod adaptive_worker;
mod c_library;
mod config;
mod demo;
mod dependency;
mod inspect;
mod operate;
mod render;
mod scenario;
mod scenario_worker;
mod scratch;
mod watch;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "shmlimit",
    version,
    about = "Lock-free rate limits shared by every process on a host through one memory-mapped file",
    long_about = None,
    after_help = concat!(
        "Start with the demo: N worker processes hammer one shared token bucket and one exact\n",
        "sliding log, and the totals are checked against the guaranteed bounds:\n",
        "  shmlimit demo\n\n",
        "The shared-dependency scenario (10 to 40 instances, retries, batches, a slow dependency):\n",
        "  shmlimit demo --scenario dependency\n\n",
        exit_codes!()
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Demo(demo::DemoArgs),
    DemoDependency(dependency::DependencyArgs),
    /// One instance of the dependency scenario (started by it)
    #[command(hide = true)]
    DemoWorker(scenario_worker::WorkerArgs),
    /// One worker of the adaptive scenario (started by it)
    #[command(hide = true)]
    DemoAdaptiveWorker(adaptive_worker::AdaptiveWorkerArgs),
    Create(inspect::CreateArgs),
    Check(inspect::CheckArgs),
    Inspect(inspect::InspectArgs),
    Stats(inspect::StatsArgs),
    Watch(watch::WatchArgs),
    SetRate(operate::SetRateArgs),
    Reset(operate::ResetArgs),
    Gc(operate::GcArgs),
    Sync(operate::SyncArgs),
    /// Keep this host's share of a fleet-wide budget, allocated through Redis (see docs/fleet.md)
    Fleet(shmlimit_fleet::cli::FleetArgs),
}

/// How a read command opens an existing file.
#[derive(Args, Clone, Debug)]
pub struct OpenArgs {
    /// The most permissive mode (octal) the file may have: files are refused when writable by
    /// more users than this allows
    #[arg(long, value_name = "MODE", default_value = "600", value_parser = parse_mode)]
    pub mode: u32,
    /// Accept a file owned by another user
    #[arg(long)]
    pub allow_other_owner: bool,
}

/// Parse an octal mode such as `600` or `0660`.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim_start_matches("0o");
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 => Ok(mode),
        _ => Err(format!(
            "\"{s}\" is not an octal file mode (e.g. 600 or 660)"
        )),
    }
}

/// A command's failure: the exit code and one line for the operator.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// A bad flag or config field: exit 1.
    pub fn config(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }

    /// The limiter file cannot be created, opened or used: exit 2.
    pub fn file(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    /// A limit admitted more than its bound: exit 3.
    pub fn bound(message: impl Into<String>) -> Failure {
        Failure {
            code: 3,
            message: message.into(),
        }
    }

    /// A library error, classified and completed with what to do about it. File errors name
    /// their file already; `path` is named for the others.
    pub fn library(err: shmlimit::Error, path: &std::path::Path) -> Failure {
        use shmlimit::Error as E;
        let p = path.display();
        let hint = match &err {
            E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => format!(
                "check the path, or create the file first: shmlimit create {p} --config limits.toml"
            ),
            E::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
                "remove it or choose another path".to_owned()
            }
            E::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                "run as the file's owner, or fix the permissions of the file and its directory"
                    .to_owned()
            }
            E::Io { source, .. } if source.raw_os_error() == Some(libc::EISDIR) => {
                "pass the path of a limiter file, not a directory".to_owned()
            }
            E::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                "the filesystem is full: free space there (or use a larger one), then retry; \
                 nothing was left at the path"
                    .to_owned()
            }
            E::Io { .. } => "check the path and the directory it is in".to_owned(),
            E::Symlink(_) => "pass the real path of the limiter file, not a link".to_owned(),
            E::NotRegularFile(_) => "pass the path of a limiter file".to_owned(),
            E::Permission { .. } => {
                "run as the file's owner, or pass --mode / --allow-other-owner if that is intended"
                    .to_owned()
            }
            E::Foreign(_) => "this is not a limiter file: check the path".to_owned(),
            E::Version { .. } => {
                "use the shmlimit build that wrote it, or remove the file and create it again"
                    .to_owned()
            }
            E::Size { .. } | E::Corrupt { .. } | E::CorruptState { .. } => {
                "the file is damaged: remove it and create it again (limits start afresh)"
                    .to_owned()
            }
            E::NotInitialized(_) => {
                "its creator stopped while initialising it: remove it and create it again"
                    .to_owned()
            }
            E::ClockMismatch { .. } => {
                "run in the same time namespace (container) as the file's creator".to_owned()
            }
            E::DefinitionConflict { .. } => format!(
                "remove the file first, or use the definitions it has (shmlimit inspect {p})"
            ),
            E::InvalidParameter { .. } | E::ZeroCost | E::CostExceedsCapacity { .. } => {
                return Failure::config(format!("{p}: {err}"))
            }
            E::UnknownLimit(_) => {
                return Failure::config(format!(
                    "{p}: {err}; list its limits with shmlimit inspect {p}"
                ))
            }
            _ => format!("see shmlimit inspect {p}"),
        };
        let message = match err {
            // These name their file themselves.
            E::Io { .. }
            | E::Symlink(_)
            | E::NotRegularFile(_)
            | E::Permission { .. }
            | E::Foreign(_)
            | E::Version { .. }
            | E::Size { .. }
            | E::Corrupt { .. }
            | E::NotInitialized(_)
            | E::ClockMismatch { .. }
            | E::DefinitionConflict { .. } => err.to_string(),
            other => format!("{p}: {other}"),
        };
        Failure::file(format!("{message}; {hint}"))
    }
}

fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Demo(args) => demo::run(args),
        Command::DemoDependency(args) => dependency::run(args),
        Command::DemoWorker(args) => scenario_worker::run(args),
        Command::DemoAdaptiveWorker(args) => adaptive_worker::run(args),
        Command::Create(args) => inspect::create(args),
        Command::Check(args) => inspect::check(args),
        Command::Inspect(args) => inspect::inspect(args),
        Command::Stats(args) => inspect::stats(args),
        Command::Watch(args) => watch::run(args),
        Command::SetRate(args) => operate::set_rate(args),
        Command::Reset(args) => operate::reset(args),
        Command::Gc(args) => operate::gc(args),
        Command::Sync(args) => operate::sync(args),
        // The agent reports its own errors and chooses its exit code.
        Command::Fleet(args) => match shmlimit_fleet::cli::run_cli(args) {
            0 => Ok(()),
            code => Err(Failure {
                code: code.clamp(1, 255) as u8,
                message: String::new(),
            }),
        },
    }
}

fn main() -> ExitCode {
    // SAFETY: restoring the default SIGPIPE disposition has no preconditions; it is done before
    // any other thread exists. With it, `shmlimit inspect F | head` ends quietly instead of
    // panicking on a closed stdout, as command-line tools do.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(1),
            };
        }
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("shmlimit: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}
