//! Dated decisions (`try_acquire_at`, `shmlimit_acquire_at` in C) beside ordinary ones, from
//! several processes on one file: a date ahead of the clock, within
//! [`DATE_TOLERANCE`](shmlimit::consts::DATE_TOLERANCE), never lets the ordinary callers exceed
//! a window.
//!
//! One worker decides alternately dated 0.7 ms ahead of its clock read and undated; the others
//! decide undated as fast as they can. Every admission is bracketed by two clock reads
//! `lo <= date <= hi` (a dated one by its clock read before the call and its date or the clock
//! read after, whichever is later), and the parent counts, for every window, the admissions
//! certainly inside it. A window's state moved into the next window by a date the clock had not
//! reached counted every other caller's decisions of the current window against the next one
//! (a fixed window of 10 admitted 19 within one real window).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{fork_lock, fork_workers, now_ns, temp_path, MS};
use shmlimit::{Alignment, FixedWindow, Limiter, SlidingLog};

const WORKERS: usize = 3;
const LIMIT: u64 = 10;
const W: u64 = 100 * MS;
const RUN_NS: u64 = 1_500 * MS;
/// How far ahead of its clock read the dating worker dates its decisions: within the 1 ms
/// tolerance, so every such date is accepted.
const AHEAD_NS: u64 = 700_000;
/// At most this many admissions a worker records (two words each).
const STAMPS: usize = 1 << 14;

/// Run the workers on the limit `name` of the file at `path` until `deadline`; worker 0 dates
/// every other decision ahead. Each worker returns `[dated admissions, lo, hi, lo, hi, ...]`.
fn run(path: &Path, name: &str, deadline: u64) -> Vec<Vec<u64>> {
    fork_workers(WORKERS, |index| {
        let limiter = Limiter::open(path).expect("open the file");
        let limit = common::rate(&limiter, name).expect("the limit");
        let mut out = vec![0];
        while now_ns() < deadline && out.len() < 1 + 2 * STAMPS {
            let lo = now_ns();
            if index == 0 {
                let date = lo + AHEAD_NS;
                let decision = limit
                    .try_acquire_at(1, date)
                    .expect("a date within tolerance");
                let hi = now_ns().max(date);
                if decision.is_allowed() {
                    out[0] += 1;
                    out.extend([lo, hi]);
                }
            }
            let decision = limit.try_acquire(1).expect("a decision");
            let hi = now_ns();
            if decision.is_allowed() {
                out.extend([lo, hi]);
            }
        }
        out
    })
}

/// Every admission `(lo, hi)`, and how many of them the dating worker dated ahead.
fn admissions(reports: &[Vec<u64>]) -> (Vec<(u64, u64)>, u64) {
    let mut all = Vec::new();
    let mut dated = 0;
    for report in reports {
        dated += report[0];
        all.extend(report[1..].chunks_exact(2).map(|c| (c[0], c[1])));
    }
    all.sort_unstable();
    (all, dated)
}

#[test]
fn a_date_ahead_of_the_clock_never_lets_a_fixed_window_admit_more_than_its_limit() {
    let _fork = fork_lock();
    let (_dir, path) = temp_path("dated-fixed.shm");
    Limiter::builder()
        .limit(
            "w",
            FixedWindow::new(LIMIT, Duration::from_nanos(W)).aligned(Alignment::Monotonic),
        )
        .create_or_open(&path)
        .expect("create");
    let deadline = now_ns() + RUN_NS;
    let (admitted, dated) = admissions(&run(&path, "w", deadline));
    assert!(dated > 0, "the dating worker was never admitted");
    // Windows are [k W, (k + 1) W) on the monotonic clock: count the admissions certainly in one.
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    for &(lo, hi) in &admitted {
        if lo / W == hi / W {
            *per_window.entry(lo / W).or_default() += 1;
        }
    }
    let full = per_window.values().filter(|&&n| n == LIMIT).count();
    let over: Vec<_> = per_window.iter().filter(|(_, &n)| n > LIMIT).collect();
    assert!(
        over.is_empty(),
        "windows of {} ms holding more than {LIMIT} admissions (window index, admissions): {over:?}",
        W / MS
    );
    // The claim above is only tested where demand filled windows.
    assert!(
        full >= 3,
        "only {full} windows reached the limit: demand must saturate ({per_window:?})"
    );
}

#[test]
fn a_date_ahead_of_the_clock_never_lets_a_sliding_log_admit_more_than_its_limit() {
    let _fork = fork_lock();
    let (_dir, path) = temp_path("dated-log.shm");
    Limiter::builder()
        .limit("log", SlidingLog::new(LIMIT, Duration::from_nanos(W)))
        .create_or_open(&path)
        .expect("create");
    let deadline = now_ns() + RUN_NS;
    let (admitted, dated) = admissions(&run(&path, "log", deadline));
    assert!(dated > 0, "the dating worker was never admitted");
    // Every interval (s, s + W] with s just before an admission's `lo`: the admissions certainly
    // inside it (`lo > s`, `hi <= s + W`) are at most the limit.
    let mut worst = (0, 0);
    for (i, &(start, _)) in admitted.iter().enumerate() {
        let inside = admitted[i..]
            .iter()
            .take_while(|&&(lo, _)| lo < start + W)
            .filter(|&&(_, hi)| hi < start + W)
            .count() as u64;
        worst = worst.max((inside, start));
    }
    assert!(
        worst.0 <= LIMIT,
        "{} admissions within {} ms starting at {} ns (at most {LIMIT})",
        worst.0,
        W / MS,
        worst.1
    );
    assert!(
        worst.0 == LIMIT,
        "no interval of {} ms reached the limit: demand must saturate",
        W / MS
    );
}
