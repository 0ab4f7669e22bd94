//! Hostile and damaged files: every header word corrupted in turn, random bytes anywhere
//! (proptest), impossible slot words, and a file truncated or extended under a process that has
//! it mapped.
//!
//! What is shown:
//!
//! * every header word that the format validates refuses the file with a typed error when it is
//!   flipped, zeroed or set to all ones; the words that are not validated (the boot id, which
//!   resets the state; the wall offset, creation time, reset count and reserved words, which are
//!   informational) open, and then every limit still decides within its bound;
//! * random bytes written over random parts of a valid file: opening errors cleanly or succeeds,
//!   and then no decision panics and, at one instant, no limit admits more than its definition's
//!   capacity whatever its state words hold (fail closed: a deny or [`Error::CorruptState`]);
//! * each kind of impossible slot word (a TAT far in the future, counts above the limit, a log
//!   head out of range, log entries with impossible laps, garbage permit owner words) is denied
//!   or reported as `CorruptState`, never admitted beyond the capacity;
//! * a file truncated while another process has it mapped kills that process with SIGBUS when
//!   it touches a page past the new end (shown in a forked child), and no new open accepts the
//!   truncated or extended file.

mod common;

#[path = "hostile/header.rs"]
mod header;

#[path = "hostile/state.rs"]
mod state;

#[path = "hostile/random.rs"]
mod random;

#[path = "hostile/mapped.rs"]
mod mapped;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::words::{read_word, write_word};
use common::{fork_lock, keyed_rate, now_ns, rate, spawn, temp_path, MS};
use proptest::prelude::*;
use shmlimit::{
    AdaptiveConcurrency, Alignment, Concurrency, Error, FixedWindow, Keyed, Limit, Limiter,
    MonotonicClock, Rate, RateLimit, SlidingLog, SlidingWindow, TokenBucket,
};

/// Header words of format version 7 (see the layout table of the file format): 0..=28 (word 28
/// is the file id); words 64..128 are the failed-closed bitmap.
const HEADER_WORDS: u64 = 29;
const DEFS_OFFSET: u64 = 4096;
const DEF_SIZE: u64 = 128;
const CAP: u64 = 10;
const PERMITS: u64 = 3;
const KEY_CAP: u64 = 5;

/// One limit of every kind, none of them refilling during a test.
fn create(path: &Path) -> Limiter {
    let slow = Rate::new(1, Duration::from_secs(3_600)).unwrap();
    Limiter::builder()
        .limit("tb", TokenBucket::new(CAP, slow))
        .limit(
            "fw",
            FixedWindow::new(CAP, Duration::from_secs(60)).aligned(Alignment::Monotonic),
        )
        .limit("sw", SlidingWindow::new(CAP, Duration::from_secs(60)))
        .limit("log", SlidingLog::new(CAP, Duration::from_secs(60)))
        .limit("conc", Concurrency::new(PERMITS))
        .keyed_limit("keyed", TokenBucket::new(KEY_CAP, slow), Keyed::new(16))
        .keyed_limit("keyed_conc", Concurrency::new(PERMITS), Keyed::new(8))
        .keyed_limit(
            "keyed_adaptive",
            AdaptiveConcurrency::new(1, PERMITS).initial(PERMITS),
            Keyed::new(8),
        )
        .create_or_open(path)
        .expect("creating the test file")
}

fn write_at(path: &Path, byte_offset: u64, bytes: &[u8]) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(bytes, byte_offset)
        .unwrap();
}

/// The slot region of definition `i` in words (its first word, its length), from its record's
/// words 12 and 13 (which give them in bytes).
fn slot_of(path: &Path, i: u64) -> (u64, u64) {
    let rec = (DEFS_OFFSET + i * DEF_SIZE) / 8;
    (read_word(path, rec + 12) / 8, read_word(path, rec + 13) / 8)
}

/// Limit indices in definition order.
const TB: u64 = 0;
const FW: u64 = 1;
const SW: u64 = 2;
const LOG: u64 = 3;
const CONC: u64 = 4;
const KEYED: u64 = 5;
const KEYED_CONC: u64 = 6;
const KEYED_ADAPTIVE: u64 = 7;
/// Definitions in the test file.
const LIMITS: u64 = 8;

/// Run `n` decisions of cost 1 on every limit at one instant (permits are held, not released)
/// and check that none admits more than its capacity; errors must be `CorruptState` (or a clock
/// out of range from a damaged date). Returns the admissions per limit.
fn decide_at_one_instant(limiter: &Limiter, n: usize) -> Vec<u64> {
    let now = now_ns();
    let fail_closed = |e: Error, l: &Limit| match e {
        Error::CorruptState { .. } | Error::ClockOutOfRange(_) => {}
        other => panic!("limit {}: unexpected error {other:?}", l.name()),
    };
    let mut out = Vec::new();
    for l in limiter.limits() {
        let mut admitted = 0u64;
        let mut permits = Vec::new();
        let mut adaptive = Vec::new();
        for _ in 0..n {
            match l.name() {
                "conc" => match limiter
                    .concurrency("conc")
                    .and_then(|c| c.try_acquire_permit())
                {
                    Ok(Some(p)) => permits.push(p),
                    Ok(None) => {}
                    Err(e) => fail_closed(e, &l),
                },
                // One key's permits: at most C of them.
                "keyed_conc" => match limiter
                    .keyed_concurrency("keyed_conc")
                    .and_then(|c| c.try_acquire_key_permit(b"k"))
                {
                    Ok(Some(p)) => permits.push(p),
                    Ok(None) => {}
                    Err(e) => fail_closed(e, &l),
                },
                // One key's adaptive permits: at most its maximum, whatever its words hold.
                "keyed_adaptive" => match limiter
                    .keyed_adaptive_concurrency("keyed_adaptive")
                    .and_then(|c| c.try_acquire(b"k"))
                {
                    Ok(Some(p)) => adaptive.push(p),
                    Ok(None) => {}
                    Err(e) => fail_closed(e, &l),
                },
                "keyed" => match keyed_rate(limiter, "keyed")
                    .and_then(|k| k.try_acquire_key_at(b"k", 1, now))
                {
                    Ok(d) if d.is_allowed() => admitted += 1,
                    Ok(_) => {}
                    Err(e) => fail_closed(e, &l),
                },
                name => match rate(limiter, name).and_then(|r| r.try_acquire_at(1, now)) {
                    Ok(d) if d.is_allowed() => admitted += 1,
                    Ok(_) => {}
                    Err(e) => fail_closed(e, &l),
                },
            }
        }
        admitted += (permits.len() + adaptive.len()) as u64;
        let cap = l.algorithm().capacity();
        assert!(
            admitted <= cap,
            "limit {} admitted {admitted} at one instant, capacity {cap}",
            l.name()
        );
        // Peeks, stats, holders and refunds of a damaged state do not panic either.
        let _ = rate(limiter, l.name()).map(|r| r.peek(1));
        let _ = l.stats();
        let _ = l.live_algorithm();
        let _ = l.permit_holders();
        let _ = l.key_occupancy();
        out.push(admitted);
    }
    out
}

/// A pristine file's bytes and its slot region, built once for the property tests.
fn pristine() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>, (u64, u64)) {
    let (dir, path) = temp_path("prop.shm");
    drop(create(&path));
    let bytes = fs::read(&path).unwrap();
    let slots = (read_word(&path, 7), read_word(&path, 8));
    (dir, path, bytes, slots)
}
