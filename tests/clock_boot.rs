//! Clocks and boots: a boot id change resets every kind of state once (in a file made to reset;
//! translation, the default, is in `tests/reboot.rs`); a process in another time
//! namespace is refused (a real one made with `unshare --time` when this host permits it, and a
//! simulated offset in the header otherwise); a process whose clock reads are older than the
//! stored state never moves the state backwards.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::words::{read_word, write_word};
use common::{fork_lock, spawn, temp_path, use_up, SEC};
use shmlimit::{
    Alignment, Concurrency, Error, FixedWindow, Keyed, Limiter, ManualClock, OnReboot, Rate,
    SlidingLog, SlidingWindow, TokenBucket,
};

const WORD_BOOT_ID: u64 = 12;
const WORD_TIMENS_OFFSET: u64 = 15;
const CAP: u64 = 4;

fn hourly() -> Rate {
    Rate::new(1, Duration::from_secs(3_600)).unwrap()
}

fn builder() -> shmlimit::Builder {
    Limiter::builder()
        .limit("tb", TokenBucket::new(CAP, hourly()))
        .limit(
            "fw",
            FixedWindow::new(CAP, Duration::from_secs(3_600)).aligned(Alignment::Monotonic),
        )
        .limit("sw", SlidingWindow::new(CAP, Duration::from_secs(3_600)))
        .limit("log", SlidingLog::new(CAP, Duration::from_secs(3_600)))
        .limit("conc", Concurrency::new(CAP))
        .keyed_limit("keyed", TokenBucket::new(CAP, hourly()), Keyed::new(8))
}

/// Use up every limit; returns how many units each admitted (permits are forgotten: held by
/// this live process).
fn exhaust(limiter: &Limiter) -> Vec<u64> {
    let used = use_up(limiter, 2 * CAP, b"user");
    used.into_iter().map(|(_, admitted)| admitted).collect()
}

#[test]
fn a_boot_id_change_resets_every_kind_of_state_once() {
    let (_dir, path) = temp_path("boot.shm");
    // A file made to reset at a reboot (the default translates: see tests/reboot.rs).
    let limiter = builder()
        .on_reboot(OnReboot::Reset)
        .create_or_open(&path)
        .unwrap();
    assert_eq!(exhaust(&limiter), vec![CAP; 6]);
    assert_eq!(exhaust(&limiter), vec![0; 6], "everything is used up");
    let boot = [
        read_word(&path, WORD_BOOT_ID),
        read_word(&path, WORD_BOOT_ID + 1),
    ];
    // The file now claims to come from another boot.
    write_word(&path, WORD_BOOT_ID, boot[0] ^ 0x5A5A);
    write_word(&path, WORD_BOOT_ID + 1, !boot[1]);
    let after = Limiter::open(&path).unwrap();
    assert_eq!(after.reset_count(), 1);
    assert_eq!(
        [
            read_word(&path, WORD_BOOT_ID),
            read_word(&path, WORD_BOOT_ID + 1)
        ],
        boot,
        "this boot's id is written back"
    );
    // Every state is fresh: the whole capacity again, permits of the "previous boot" included
    // (their holder is this live process, but its pid belonged to the old boot).
    assert_eq!(exhaust(&after), vec![CAP; 6]);
    // A second open does not reset again, and neither does the old handle see a second reset.
    let again = Limiter::open(&path).unwrap();
    assert_eq!(again.reset_count(), 1);
    assert_eq!(exhaust(&again), vec![0; 6]);
    assert_eq!(exhaust(&limiter), vec![0; 6]);
}

/// The child half of [`a_process_in_another_time_namespace_is_refused`]: run by the test binary
/// itself inside `unshare --time` with `SHMLIMIT_TIMENS_PROBE` set (not a test of its own).
#[test]
#[ignore = "child-process entry point of a_process_in_another_time_namespace_is_refused (run by it inside unshare --time with SHMLIMIT_TIMENS_PROBE set)"]
fn timens_child_probe() {
    let Ok(path) = std::env::var("SHMLIMIT_TIMENS_PROBE") else {
        return;
    };
    let offset = shmlimit_offset();
    match std::env::var("SHMLIMIT_TIMENS_CREATE") {
        Ok(created) => {
            builder().create_or_open(&created).unwrap();
            println!("TIMENS-CREATED offset={offset}");
        }
        Err(_) => match Limiter::open(&path) {
            Err(Error::ClockMismatch {
                file_offset_ns,
                our_offset_ns,
                ..
            }) => {
                println!("TIMENS-RESULT ClockMismatch file={file_offset_ns} ours={our_offset_ns}")
            }
            Err(e) => println!("TIMENS-RESULT other error: {e}"),
            Ok(_) => println!("TIMENS-RESULT opened"),
        },
    }
}

/// This process's monotonic offset, as `/proc/self/timens_offsets` states it (0 without one).
fn shmlimit_offset() -> i64 {
    fs::read_to_string("/proc/self/timens_offsets")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("monotonic"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|secs| secs.parse::<i64>().ok())
        .map_or(0, |s| s * SEC as i64)
}

fn unshare_time(env: &[(&str, &Path)]) -> Option<String> {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--user",
        "--map-root-user",
        "--time",
        "--monotonic",
        "86400",
    ])
    .arg(exe)
    .args([
        "--exact",
        "timens_child_probe",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().ok()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // The namespace was made and the test binary ran in it: the probe must have reported.
    assert!(
        !out.status.success() || stdout.contains("TIMENS-"),
        "timens_child_probe did not run inside unshare --time:\n{stdout}"
    );
    if !out.status.success() {
        println!(
            "notice: unshare --time is not permitted here ({}); using a simulated offset",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    Some(stdout)
}

#[test]
fn a_process_in_another_time_namespace_is_refused() {
    let (dir, path) = temp_path("timens.shm");
    drop(builder().create_or_open(&path).unwrap());
    match unshare_time(&[("SHMLIMIT_TIMENS_PROBE", &path)]) {
        Some(out) => {
            assert!(
                out.contains("TIMENS-RESULT ClockMismatch file=0 ours=86400000000000"),
                "a process 1 day ahead must be refused: {out}"
            );
            // And the other way: a file made inside the namespace is refused out here.
            let inner = dir.path().join("inner.shm");
            let out = unshare_time(&[
                ("SHMLIMIT_TIMENS_PROBE", &path),
                ("SHMLIMIT_TIMENS_CREATE", &inner),
            ])
            .expect("unshare worked a moment ago");
            assert!(
                out.contains("TIMENS-CREATED offset=86400000000000"),
                "{out}"
            );
            match Limiter::open(&inner) {
                Err(Error::ClockMismatch {
                    file_offset_ns,
                    our_offset_ns,
                    ..
                }) => assert_eq!((file_offset_ns, our_offset_ns), (86_400 * SEC as i64, 0)),
                other => panic!("a file from another time namespace was accepted: {other:?}"),
            }
        }
        None => {
            write_word(&path, WORD_TIMENS_OFFSET, 86_400 * SEC);
            assert!(matches!(
                Limiter::open(&path),
                Err(Error::ClockMismatch { .. })
            ));
        }
    }
    // Whatever happened, an unchanged process still opens the original.
    if read_word(&path, WORD_TIMENS_OFFSET) == 0 {
        Limiter::open(&path).unwrap();
    }
}

/// Two handles with their own clocks, one behind the other: the one behind never moves any
/// state backwards; its decisions are only stricter (it sees less refill) or dated at the
/// newer time.
#[test]
fn a_clock_behind_the_stored_state_never_moves_it_backwards() {
    let _serial = fork_lock();
    let (_dir, path) = temp_path("stale.shm");
    let t0 = 10_000 * SEC;
    let ahead = ManualClock::new(t0);
    let behind = ManualClock::new(t0 - 100 * SEC);
    let w = Duration::from_secs(10);
    let b = || {
        Limiter::builder()
            .limit("tb", TokenBucket::new(2, Rate::per_second(1).unwrap()))
            .limit("fw", FixedWindow::new(3, w).aligned(Alignment::Monotonic))
            .limit(
                "sw",
                SlidingWindow {
                    limit: 3,
                    window: w,
                    alignment: Alignment::Monotonic,
                },
            )
            .limit("log", SlidingLog::new(3, w))
    };
    let a = b().clock(ahead.clone()).create_or_open(&path).unwrap();
    let s = b().clock(behind.clone()).open(&path).unwrap();

    // Token bucket: the ahead handle empties it; the behind handle sees no refill at all.
    let (tba, tbs) = (a.token_bucket("tb").unwrap(), s.token_bucket("tb").unwrap());
    assert!(tba.try_acquire(2).unwrap().is_allowed());
    let d = tbs.try_acquire(1).unwrap();
    assert!(d.is_denied(), "a stale clock sees an empty bucket");
    assert!(
        d.retry_after_ns() > 100 * SEC,
        "measured from its own (older) now"
    );
    // Exactly one token per second from the newest time, whatever the stale handle did.
    ahead.advance(SEC);
    assert!(tba.try_acquire(1).unwrap().is_allowed());
    assert!(tba.try_acquire(1).unwrap().is_denied());

    // Sliding log: the stale handle's admission is dated at the newest entry, not in the past:
    // so it does not expire before the entries ahead of it.
    let (la, ls) = (a.sliding_log("log").unwrap(), s.sliding_log("log").unwrap());
    assert!(la.try_acquire(2).unwrap().is_allowed()); // at t0 + 1 s
    assert!(ls.try_acquire(1).unwrap().is_allowed()); // read at t0 - 100 s, dated t0 + 1 s
    ahead.advance(10 * SEC - 1); // t0 + 11 s - 1 ns: all three still inside (t - W, t]
    assert!(
        la.try_acquire(1).unwrap().is_denied(),
        "the stale entry went back in time"
    );
    ahead.advance(2048); // past the 1024 ns unit the log rounds dates up to
    assert!(la.try_acquire(3).unwrap().is_allowed());

    // Fixed window: a stale read counts against the stored (newer) window.
    let (fa, fs_) = (a.window("fw").unwrap(), s.window("fw").unwrap());
    assert!(fa.try_acquire(2).unwrap().is_allowed());
    assert!(fs_.try_acquire(1).unwrap().is_allowed());
    assert!(fs_.try_acquire(1).unwrap().is_denied());
    assert!(
        fa.try_acquire(1).unwrap().is_denied(),
        "the stale grant counted in the window"
    );

    // Sliding window: likewise.
    let (sa, ss) = (a.window("sw").unwrap(), s.window("sw").unwrap());
    assert!(sa.try_acquire(2).unwrap().is_allowed());
    assert!(ss.try_acquire(1).unwrap().is_allowed());
    assert!(sa.try_acquire(1).unwrap().is_denied());

    // The behind clock going further back between decisions changes nothing either.
    behind.set(1);
    assert!(ss.try_acquire(1).unwrap().is_denied());
    assert!(fs_.try_acquire(1).unwrap().is_denied());
    assert!(tbs.try_acquire(1).unwrap().is_denied());
    assert!(ls.try_acquire(1).unwrap().is_denied());

    // And across processes: a forked child with the stale clock cannot undo anything.
    let p = path.clone();
    let child = spawn(move || {
        let s = b().clock(ManualClock::new(5 * SEC)).open(&p).unwrap();
        common::rates(&s)
            .iter()
            .map(|l| l.try_acquire(1).unwrap().is_allowed() as u64)
            .collect()
    });
    let (status, admitted) = child.wait();
    assert_eq!(status, 0);
    assert_eq!(
        admitted,
        vec![0, 0, 0, 0],
        "tb, fw, sw, log all denied to the stale child"
    );
}
