//! Deploys that change definitions, and files replaced under running processes.
//!
//! * `create_or_open` compares with the file's live parameters; under the default
//!   `OnConflict::Refuse` a difference is an error naming every differing field in the user's
//!   terms; under `OnConflict::Adopt` a change the layout can hold is a live retune that keeps
//!   the usage, any other change a new file that atomically replaces the old one;
//! * many processes starting together with new definitions converge on one file;
//! * a handle notices, within about a second, that its path names another file (unlink and
//!   recreate, rename over, bytes copied over the same inode, truncate and restore) and moves
//!   to it: across the replacement, admissions stay within the new file's bound plus what the
//!   old one can grant during the detection interval.

mod common;

#[path = "replace/deploy.rs"]
mod deploy;

#[path = "replace/convergence.rs"]
mod convergence;

#[path = "replace/detection.rs"]
mod detection;

#[path = "replace/following.rs"]
mod following;

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use common::{fork_lock, fork_workers, now_ns, spawn, temp_path, SharedWords, MS, SEC};
use shmlimit::{
    consts::REPLACEMENT_CHECK, Algorithm, Error, FixedWindow, FleetShare, Limiter, OnConflict,
    OnReboot, Rate, SlidingLog, TokenBucket, Unavailable,
};

fn bucket(per_s: u64, burst: u64) -> TokenBucket {
    TokenBucket::new(burst, Rate::per_second(per_s).unwrap())
}

fn ino(path: &Path) -> u64 {
    fs::metadata(path).unwrap().ino()
}
