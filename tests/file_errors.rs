//! Creating, attaching to and refusing limiter files: concurrent creation by several processes,
//! and one typed error for every way a file at the path can be wrong.

mod common;

#[path = "file_errors/creation.rs"]
mod creation;

#[path = "file_errors/contents.rs"]
mod contents;

#[path = "file_errors/at_the_path.rs"]
mod at_the_path;

#[path = "file_errors/boot_id.rs"]
mod boot_id;

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::words::{read_word, write_word};
use common::{fork_lock, fork_workers, temp_path};
use shmlimit::{
    Algorithm, Alignment, Error, FixedWindow, IntoAlgorithm, Limiter, OnReboot, Rate, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// Header word indices, as documented in the layout of the file format (version 7).
const WORD_VERSION: u64 = 1;
const WORD_INIT: u64 = 2;
const WORD_BOOT_ID: u64 = 12;
const WORD_TIMENS_OFFSET: u64 = 15;
/// Definitions start right after the 4096-byte header, one 128-byte record each.
const DEFS_OFFSET: u64 = 4096;

/// The definitions every test file holds (the bucket refills one token an hour: no refill
/// during a test).
fn definitions() -> Vec<(&'static str, Algorithm)> {
    let hourly = Rate::new(1, Duration::from_secs(3_600)).unwrap();
    vec![
        (
            "api",
            TokenBucket::new(100, hourly).into_algorithm("api").unwrap(),
        ),
        (
            "search",
            SlidingLog::new(10, Duration::from_secs(60))
                .into_algorithm("search")
                .unwrap(),
        ),
        (
            "per-minute",
            FixedWindow::new(30, Duration::from_secs(60))
                .aligned(Alignment::Monotonic)
                .into_algorithm("per-minute")
                .unwrap(),
        ),
        (
            "smooth",
            SlidingWindow::new(40, Duration::from_secs(10))
                .into_algorithm("smooth")
                .unwrap(),
        ),
    ]
}

/// The definitions a limiter holds, as (name, algorithm) pairs.
fn pairs<C: shmlimit::Clock>(limiter: &Limiter<C>) -> Vec<(String, Algorithm)> {
    limiter
        .definitions()
        .iter()
        .map(|d| (d.name.clone(), d.algorithm))
        .collect()
}

fn expected_pairs() -> Vec<(String, Algorithm)> {
    definitions()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a))
        .collect()
}

fn builder() -> shmlimit::Builder {
    definitions()
        .into_iter()
        .fold(Limiter::builder(), |b, (name, algorithm)| {
            b.limit(name, algorithm)
        })
}

/// A valid file at a fresh path; the directory lives as long as the returned guard.
fn valid_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, path) = temp_path("limits.shm");
    drop(builder().create_or_open(&path).expect("create"));
    (dir, path)
}

/// A valid file that resets its state at a reboot (the behaviour the reboot tests here check;
/// `tests/reboot.rs` covers the default, which translates it).
fn reset_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, path) = temp_path("limits.shm");
    drop(
        builder()
            .on_reboot(OnReboot::Reset)
            .create_or_open(&path)
            .expect("create"),
    );
    (dir, path)
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn flip_byte(path: &Path, offset: u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], offset).unwrap();
}

/// Both ways of attaching to an existing file: by path alone, and with the same definitions.
fn open_both(path: &Path) -> [Error; 2] {
    [
        Limiter::open(path).expect_err("open must refuse"),
        builder()
            .create_or_open(path)
            .expect_err("create_or_open must refuse"),
    ]
}
