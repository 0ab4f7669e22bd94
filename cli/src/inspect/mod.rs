//! `create`, `check`, `inspect` and `stats`: define limiter files and read what they hold.

mod check;
mod create;
mod show;
mod state;
mod stats;

pub use check::*;
pub use create::*;
pub use show::*;
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

/// Print a value as pretty JSON followed by a newline.
pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        // Serializing these plain structs cannot fail; say so rather than print nothing.
        Err(e) => eprintln!("shmlimit: internal error writing JSON: {e}"),
    }
}
