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

#[test]
fn a_conflict_names_every_differing_field_in_user_terms() {
    let (_dir, path) = temp_path("conflict.shm");
    Limiter::builder()
        .limit("api", bucket(200, 20))
        .limit("search", FixedWindow::new(100, Duration::from_secs(60)))
        .create_or_open(&path)
        .unwrap();
    let err = Limiter::builder()
        .limit("api", bucket(300, 20))
        .limit("search", FixedWindow::new(100, Duration::from_secs(60)))
        .create_or_open(&path)
        .unwrap_err();
    assert!(matches!(err, Error::DefinitionConflict { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.ends_with("`api`: rate 200/s in the file, 300/s requested; burst 20 in both"),
        "{text}"
    );
    assert!(!text.contains("TokenBucket {"), "no Debug dump: {text}");
    let err = Limiter::builder()
        .limit("api", SlidingLog::new(20, Duration::from_secs(1)))
        .limit("extra", bucket(1, 1))
        .create_or_open(&path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "`api`: token bucket, rate 200/s, burst 20 in the file, sliding log, limit 20, \
             window 1s requested"
        ) && err.contains("`extra`: not in the file, requested as token bucket, rate 1/s, burst 1")
            && err.contains("`search`: in the file (fixed window, limit 100, window 1min"),
        "{err}"
    );
    // Nothing changed in the file.
    let l = Limiter::open(&path).unwrap();
    assert_eq!(
        l.limit("api").unwrap().live_algorithm().unwrap(),
        *l.limit("api").unwrap().algorithm()
    );
}

#[test]
fn comparisons_use_the_live_parameters() {
    let (_dir, path) = temp_path("live.shm");
    let limiter = Limiter::builder()
        .limit("api", bucket(200, 20))
        .create_or_open(&path)
        .unwrap();
    limiter
        .token_bucket("api")
        .unwrap()
        .set_token_bucket(20, Rate::per_second(300).unwrap())
        .unwrap();
    // The retuned file matches a request for 300/s, and no longer one for 200/s.
    Limiter::builder()
        .limit("api", bucket(300, 20))
        .create_or_open(&path)
        .expect("a file retuned to 300/s matches 300/s");
    let err = Limiter::builder()
        .limit("api", bucket(200, 20))
        .create_or_open(&path)
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("`api`: rate 300/s in the file, 200/s requested; burst 20 in both"),
        "{err}"
    );
    // Builder::open compares the same way.
    Limiter::builder()
        .limit("api", bucket(300, 20))
        .open(&path)
        .unwrap();
}

#[test]
fn adopting_a_rate_or_limit_change_is_a_live_retune_that_keeps_the_usage() {
    let (_dir, path) = temp_path("retune.shm");
    let slow = Rate::new(1, Duration::from_secs(3600)).unwrap();
    let old = Limiter::builder()
        .limit("api", TokenBucket::new(20, slow))
        .limit("win", FixedWindow::new(10, Duration::from_secs(3600)))
        .create_or_open(&path)
        .unwrap();
    let id = old.file_info().file_id;
    let (api, win) = (old.token_bucket("api").unwrap(), old.window("win").unwrap());
    assert!(api.try_acquire(15).unwrap().is_allowed());
    assert!(win.try_acquire(8).unwrap().is_allowed());
    let slower = Rate::new(1, Duration::from_secs(7200)).unwrap();
    let new = Limiter::builder()
        .limit("api", TokenBucket::new(40, slower))
        .limit("win", FixedWindow::new(12, Duration::from_secs(3600)))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    assert_eq!(new.file_info().file_id, id, "a retune keeps the file");
    // The old handles see the new parameters at once, with the usage kept: 15 of 20 used
    // becomes 30 of 40 (15 tokens at the old rate are 15 tokens at the new one).
    assert_eq!(
        api.live_algorithm().unwrap(),
        Algorithm::TokenBucket {
            capacity: 40,
            emission_ns: slower.emission_ns()
        }
    );
    assert!(api.try_acquire(25).unwrap().is_allowed());
    assert!(
        api.try_acquire(1).unwrap().is_denied(),
        "the usage was kept"
    );
    assert!(win.try_acquire(4).unwrap().is_allowed());
    assert!(win.try_acquire(1).unwrap().is_denied(), "8 + 4 of 12");
}

#[test]
fn adopting_a_change_the_layout_cannot_hold_replaces_the_file_and_handles_follow() {
    let (_dir, path) = temp_path("grow.shm");
    let old = Limiter::builder()
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let api = old.token_bucket("api").unwrap();
    assert!(api.try_acquire(5).unwrap().is_allowed());
    let before = ino(&path);
    // `api` changes too, so it starts fresh in the new file (unchanged limits keep their state,
    // see `a_deploy_that_adds_a_limit_keeps_the_quotas_of_the_others`).
    let new = Limiter::builder()
        .limit("api", bucket(2, 5))
        .limit("log", SlidingLog::new(3, Duration::from_secs(60)))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    assert_ne!(ino(&path), before, "a new file at the path");
    assert_ne!(new.file_info().file_id, old.file_info().file_id);
    assert_eq!(new.definitions().len(), 2);
    // No temporary file is left in the directory.
    let names: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Within the check interval the old handle moves to the new (full) bucket: the decision
    // that runs the check (here a peek) is still made on the old file, the next on the new.
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    assert!(!api.peek(5).unwrap().is_allowed(), "the old, empty bucket");
    let d = api.try_acquire(5).unwrap();
    assert!(d.is_allowed(), "decided on the new file's full bucket");
    assert_eq!(new.limit("api").unwrap().stats().allowed, 1, "one decision");
    // A grant made on the new file is refunded there through the old handle.
    api.refund(&d).unwrap();
    assert!(new
        .token_bucket("api")
        .unwrap()
        .peek(5)
        .unwrap()
        .is_allowed());
    // A limit removed by a later replacement is an error for its handles, not a silent
    // decision on the old file.
    let log = new.sliding_log("log").unwrap();
    assert!(log.try_acquire(1).unwrap().is_allowed());
    Limiter::builder()
        .limit("api", bucket(2, 5))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    assert!(
        log.peek(1).unwrap().is_allowed(),
        "the check runs after this decision"
    );
    let err = log.try_acquire(1).unwrap_err().to_string();
    assert!(err.contains("has no limit `log`"), "{err}");
}

/// 16 processes start at once with definitions the file does not hold: all succeed, on one
/// file, with one outcome.
fn race(new_layout: bool) {
    let _g = fork_lock();
    let (_dir, path) = temp_path("race.shm");
    let old = Limiter::builder()
        .limit("api", bucket(200, 20))
        .create_or_open(&path)
        .unwrap();
    let results = fork_workers(16, |_| {
        let mut b = Limiter::builder().limit("api", bucket(300, 30));
        if new_layout {
            b = b.limit("extra", FixedWindow::new(5, Duration::from_secs(1)));
        }
        let l = b
            .on_conflict(OnConflict::Adopt)
            .create_or_open(&path)
            .unwrap();
        let live = l.limit("api").unwrap().live_algorithm().unwrap();
        vec![
            l.file_info().file_id,
            live.capacity(),
            l.definitions().len() as u64,
        ]
    });
    let ids: std::collections::BTreeSet<u64> = results.iter().map(|r| r[0]).collect();
    assert_eq!(ids.len(), 1, "all 16 on one file: {results:?}");
    let final_id = Limiter::open(&path).unwrap().file_info().file_id;
    assert_eq!(ids.into_iter().next(), Some(final_id));
    assert_eq!(
        final_id != old.file_info().file_id,
        new_layout,
        "replaced only for a new layout"
    );
    for r in &results {
        assert_eq!(r[1], 30);
        assert_eq!(r[2], if new_layout { 2 } else { 1 });
    }
    let names = fs::read_dir(path.parent().unwrap()).unwrap().count();
    assert_eq!(names, 1, "no temporary files left");
}

#[test]
fn sixteen_processes_adopting_a_retune_agree() {
    race(false);
}

#[test]
fn sixteen_processes_adopting_a_new_layout_converge_on_one_file() {
    race(true);
}

#[test]
fn sixteen_processes_with_equal_definitions_all_succeed() {
    let _g = fork_lock();
    let (_dir, path) = temp_path("equal.shm");
    let results = fork_workers(16, |_| {
        let l = Limiter::builder()
            .limit("api", bucket(300, 30))
            .create_or_open(&path)
            .unwrap();
        vec![l.file_info().file_id]
    });
    let ids: std::collections::BTreeSet<u64> = results.iter().map(|r| r[0]).collect();
    assert_eq!(ids.len(), 1);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    UnlinkRecreate,
    RenameOver,
    CopyInPlace,
    TruncateRestore,
}

const B: u64 = 10;
const PER_S: u64 = 20;

const OTHER_B: u64 = 5;

/// The file a replacement puts at the path: another limit first, so that `tb` sits at
/// another offset than in the old file (a handle following old offsets would decide on
/// `other`).
fn create_new_file(path: &Path) -> Limiter {
    Limiter::builder()
        .limit("other", bucket(1, OTHER_B))
        .limit("tb", bucket(PER_S, B))
        .create_or_open(path)
        .unwrap()
}

/// Old workers hammer `tb` from before a replacement until the end; new workers start on the
/// new file right after it. Counted across all of them, admissions stay within the old file's
/// bound up to the replacement plus the detection interval, plus the new file's bound.
fn replaced_under_running_workers(how: How) {
    let _g = fork_lock();
    let (dir, path) = temp_path("replaced.shm");
    let t0 = now_ns();
    let _old = Limiter::builder()
        .limit("tb", bucket(PER_S, B))
        .create_or_open(&path)
        .unwrap();
    let end = t0 + 4 * SEC;
    let replace_at = t0 + SEC;
    // Word 0: pause request; word 1: paused workers.
    let ctl = SharedWords::new(2);
    let work = |path: &Path| {
        let limiter = Limiter::open(path).unwrap();
        let tb = limiter.token_bucket("tb").unwrap();
        let (mut admitted, mut errors) = (0u64, 0u64);
        while now_ns() < end {
            if ctl.at(0).load(std::sync::atomic::Ordering::SeqCst) == 1 {
                ctl.at(1).fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                while ctl.at(0).load(std::sync::atomic::Ordering::SeqCst) == 1 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                ctl.at(1).fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
            match tb.try_acquire(1) {
                Ok(d) if d.is_allowed() => admitted += 1,
                Ok(_) => {}
                Err(_) => errors += 1,
            }
            std::thread::yield_now();
        }
        vec![admitted, errors]
    };
    let olds: Vec<_> = (0..3).map(|_| spawn(|| work(&path))).collect();
    std::thread::sleep(Duration::from_nanos(replace_at.saturating_sub(now_ns())));
    let staging = dir.path().join("staging.shm");
    let t_new = now_ns();
    let pause = |on: bool| {
        use std::sync::atomic::Ordering::SeqCst;
        ctl.at(0).store(on as u64, SeqCst);
        let want = if on { olds.len() as u64 } else { 0 };
        while ctl.at(1).load(SeqCst) != want {
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    // A second name for the old file, to read its counters after the replacement (a handle
    // opened by `path` follows the replacement, inspection included).
    let keep = dir.path().join("old.keep");
    fs::hard_link(&path, &keep).unwrap();
    match how {
        How::UnlinkRecreate => {
            fs::remove_file(&path).unwrap();
            drop(create_new_file(&path));
        }
        How::RenameOver => {
            drop(create_new_file(&staging));
            fs::rename(&staging, &path).unwrap();
        }
        How::CopyInPlace => {
            // New bytes over the same inode, without truncating (the size is the same).
            drop(create_new_file(&staging));
            let bytes = fs::read(&staging).unwrap();
            assert_eq!(bytes.len() as u64, fs::metadata(&path).unwrap().len());
            let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(&bytes, 0).unwrap();
        }
        How::TruncateRestore => {
            // Truncated (workers paused: a mapped page past the end would fault), then another
            // limiter file's bytes written back, as `cp` over the path does.
            drop(create_new_file(&staging));
            let bytes = fs::read(&staging).unwrap();
            pause(true);
            let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(0).unwrap();
            f.write_all_at(&bytes, 0).unwrap();
            pause(false);
        }
    }
    let t_replaced = now_ns();
    let news: Vec<_> = (0..2).map(|_| spawn(|| work(&path))).collect();
    let now = Limiter::open(&path).unwrap();
    let other = now.limit("other").unwrap();
    // After the detection interval, the old file grants nothing more, and no handle decides
    // through old offsets.
    std::thread::sleep(Duration::from_nanos(
        (t_replaced + REPLACEMENT_CHECK.as_nanos() as u64 + 500 * MS).saturating_sub(now_ns()),
    ));
    let kept = Limiter::open(&keep).unwrap();
    let old_tb = kept.limit("tb").unwrap();
    let old_mid = old_tb.stats().allowed;
    let other_mid = other.stats().allowed;
    let mut admitted = 0;
    let mut errors = 0;
    for c in olds.into_iter().chain(news) {
        let (status, words) = c.wait();
        assert_eq!(status, 0, "worker failed");
        admitted += words[0];
        errors += words[1];
    }
    let secs = |ns: u64| ns as f64 / SEC as f64;
    // The old file: from its creation to the replacement plus one check interval.
    let old_bound =
        B + (PER_S as f64 * secs(t_replaced - t0 + REPLACEMENT_CHECK.as_nanos() as u64)) as u64;
    // The new file: from its creation to the end.
    let new_bound = B + (PER_S as f64 * secs(end - t_new)) as u64;
    // Bytes written over the same inode: until they notice, handles decide through their old
    // offsets on whatever the new file holds there (here `other`), within that state's own
    // bound over the detection interval.
    let same_inode = matches!(how, How::CopyInPlace | How::TruncateRestore);
    let other_bound = if same_inode {
        OTHER_B + secs(REPLACEMENT_CHECK.as_nanos() as u64).ceil() as u64
    } else {
        0
    };
    let new_tb = now.limit("tb").unwrap().stats().allowed;
    let other_end = other.stats().allowed;
    println!(
        "{how:?}: {admitted} admitted ({new_tb} decisions admitted by the new file's `tb`, \
         {other_end} through old offsets), bound {old_bound} + {new_bound} + {other_bound}, \
         {errors} errors"
    );
    assert!(
        admitted <= old_bound + new_bound + other_bound,
        "{how:?}: {admitted} admitted > {old_bound} + {new_bound} + {other_bound}"
    );
    assert_eq!(
        other_end, other_mid,
        "{how:?}: decided on `other` through old offsets after the detection interval"
    );
    if !same_inode {
        assert_eq!(other_end, 0, "{how:?}: decided on `other`");
    }
    if !same_inode {
        assert_eq!(
            old_tb.stats().allowed,
            old_mid,
            "{how:?}: the old file admitted after the detection interval"
        );
    }
    // Everyone moved: the new file saw the old workers too (more than the new ones alone
    // would be admitted is not required, but none of its admissions may exceed its bound).
    assert!(new_tb <= new_bound, "{how:?}: {new_tb} > {new_bound}");
}

#[test]
fn unlinked_and_recreated_file_is_noticed() {
    replaced_under_running_workers(How::UnlinkRecreate);
}

#[test]
fn file_renamed_over_is_noticed() {
    replaced_under_running_workers(How::RenameOver);
}

#[test]
fn file_copied_in_place_is_noticed() {
    replaced_under_running_workers(How::CopyInPlace);
}

#[test]
fn truncated_and_restored_file_is_noticed() {
    replaced_under_running_workers(How::TruncateRestore);
}

#[test]
fn a_replacement_that_cannot_be_opened_is_an_error_until_it_can() {
    let (dir, path) = temp_path("broken.shm");
    let old = Limiter::builder()
        .limit("tb", bucket(1000, 1000))
        .create_or_open(&path)
        .unwrap();
    let tb = old.token_bucket("tb").unwrap();
    assert!(tb.try_acquire(1).unwrap().is_allowed());
    let guarded = Limiter::open_guarded(&path, Duration::from_millis(0));
    let closed = guarded.limit("tb", Unavailable::FailClosed);
    let d = closed.try_acquire(1).unwrap();
    assert!(d.is_allowed() && !d.is_unavailable());
    // Something else is put at the path.
    let junk = dir.path().join("junk");
    fs::write(&junk, b"not a limiter file").unwrap();
    fs::rename(&junk, &path).unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    // The decision that runs the check is made on the file the handle had; every later one fails.
    assert!(tb.peek(1).unwrap().is_allowed());
    assert!(closed.peek(1).unwrap().is_allowed());
    for _ in 0..3 {
        let err = tb.try_acquire(1).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("re-attaching"), "{err}");
    }
    // A guarded handle re-validates the same way, and applies its policy.
    let d = closed.try_acquire(1).unwrap();
    assert!(d.is_denied() && d.is_unavailable(), "{d:?}");
    // Once a limiter file is there again, the handle attaches to it.
    fs::remove_file(&path).unwrap();
    create_new_file(&path);
    std::thread::sleep(Duration::from_millis(150));
    assert!(tb.try_acquire(1).unwrap().is_allowed());
    assert_eq!(
        Limiter::open(&path)
            .unwrap()
            .limit("tb")
            .unwrap()
            .stats()
            .allowed,
        1
    );
}

/// A typed handle's kind is its type: when the file that replaced its own has a limit of that
/// name of another kind, the handle does not decide on it (a token-bucket handle deciding as a
/// window would mean something else); every decision after the check is an error that says
/// so, and the limit resolved again by its new kind decides (a C limit handle, which holds the
/// typed handle of its limit's kind, too). The untyped view (and the guarded handles, which
/// check the kind at each call) follows the limit whatever its kind.
#[test]
fn a_replacement_whose_limit_changed_kind_is_an_error_for_the_old_handle() {
    let (_dir, path) = temp_path("kind.shm");
    let old = Limiter::builder()
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let api = old.token_bucket("api").unwrap();
    let view = old.limit("api").unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    fs::remove_file(&path).unwrap();
    let new = Limiter::builder()
        .limit("api", FixedWindow::new(100, Duration::from_secs(60)))
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    // The decision that runs the check is made on the file the handle had.
    let d = api.try_acquire(1).unwrap();
    assert!(d.is_allowed(), "{d:?}");
    for _ in 0..3 {
        let err = api.try_acquire(1).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("is a window, not a token bucket") && text.contains("resolve it again"),
            "{text}"
        );
    }
    let window = new.window("api").unwrap();
    let d = window.try_acquire(1).unwrap();
    assert!(d.is_allowed() && d.remaining() == 99, "{d:?}");
    // The untyped view taken before the replacement reads the new file's window (one decision;
    // the old file's bucket had two).
    assert_eq!(view.stats().allowed, 1);
}

#[test]
fn a_zeroed_file_id_is_refused() {
    let (_dir, path) = temp_path("noid.shm");
    drop(
        Limiter::builder()
            .limit("tb", bucket(1, 1))
            .create_or_open(&path)
            .unwrap(),
    );
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&0u64.to_ne_bytes(), 28 * 8).unwrap();
    let err = Limiter::open(&path).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
}

#[test]
fn shmlimit_create_refuses_or_adopts() {
    let (_dir, path) = temp_path("cli.shm");
    let create = |rate: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_shmlimit"))
            .arg("create")
            .arg(&path)
            .args([
                "--name",
                "api",
                "--algorithm",
                "token_bucket",
                "--rate",
                rate,
            ])
            .args(["--burst", "20"])
            .args(extra)
            .output()
            .unwrap()
    };
    assert!(create("200/s", &[]).status.success());
    let out = create("300/s", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`api`: rate 200/s in the file, 300/s requested; burst 20 in both"),
        "{err}"
    );
    let out = create("300/s", &["--on-conflict", "adopt"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("existed with other definitions; adopted these"),
        "{text}"
    );
    let l = Limiter::open(&path).unwrap();
    assert_eq!(
        l.limit("api").unwrap().live_algorithm().unwrap(),
        Algorithm::TokenBucket {
            capacity: 20,
            emission_ns: Rate::per_second(300).unwrap().emission_ns()
        }
    );
    // Now the same request is left as it is.
    let out = create("300/s", &[]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("left as it is"));
}

/// A process that opened its file by a relative path and then changed its working directory
/// keeps watching the file it opened (the path is made absolute at open), instead of failing
/// to re-attach (or following another file of the same name in the new directory).
#[test]
fn a_relative_path_survives_a_change_of_directory() {
    let _g = fork_lock();
    let (dir, _path) = temp_path("relative.shm");
    let dir_path = dir.path().to_owned();
    // In a child: the working directory belongs to the whole process.
    let child = spawn(move || {
        std::env::set_current_dir(&dir_path).unwrap();
        let limiter = Limiter::builder()
            .limit("a", bucket(1000, 1000))
            .create_or_open("relative.shm")
            .unwrap();
        let a = limiter.token_bucket("a").unwrap();
        assert!(a.try_acquire(1).unwrap().is_allowed());
        std::env::set_current_dir("/").unwrap();
        std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
        let first = a.try_acquire(1).is_ok() as u64;
        let second = a.try_acquire(1).is_ok() as u64;
        vec![first, second, a.stats().allowed]
    });
    let (status, words) = child.wait();
    assert_eq!(status, 0, "the child failed");
    assert_eq!(
        words,
        vec![1, 1, 3],
        "decisions after the chdir: ok, ok; 3 counted"
    );
}

/// A limit removed by one deploy and restored by the next: its handles error while it is gone,
/// then decide on the file that restored it (the chain of replacements is followed).
#[test]
fn a_limit_removed_then_restored_is_followed_to_the_file_that_restored_it() {
    let (_dir, path) = temp_path("restored.shm");
    let first = Limiter::builder()
        .limit("x", bucket(1000, 1000))
        .create_or_open(&path)
        .unwrap();
    let x = first.token_bucket("x").unwrap();
    assert!(x.try_acquire(1).unwrap().is_allowed());
    let _without = Limiter::builder()
        .limit("y", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    let _ = x.peek(1); // runs the check
    let err = x.try_acquire(1).unwrap_err().to_string();
    assert!(err.contains("has no limit `x`"), "{err}");
    let restored = Limiter::builder()
        .limit("x", bucket(1000, 1000))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    let _ = x.peek(1);
    let d = x.try_acquire(1).expect("the restored limit is found");
    assert!(d.is_allowed());
    assert_eq!(
        restored.limit("x").unwrap().stats().allowed,
        1,
        "decided on the third file"
    );
}

/// A bucket its fleet agent manages (here without a fleet share in its definition, as
/// `fleet run --total` does) matches its own definition: a worker restarting with the same
/// definitions is not refused because the agent changed the live rate.
#[test]
fn a_fleet_managed_bucket_matches_its_stored_definition() {
    let (_dir, path) = temp_path("managed.shm");
    let limiter = Limiter::builder()
        .limit("api", bucket(100, 10))
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    api.fleet_manage(1, Rate::per_second(1).unwrap()).unwrap();
    api.set_fleet_deadline(0).unwrap();
    Limiter::builder()
        .limit("api", bucket(100, 10))
        .create_or_open(&path)
        .expect("the same definitions match");
}

/// Adopt never takes a fleet-managed bucket's rate from its agent: neither a live retune (it
/// would overwrite the share under a running lease) nor a new file (it would start unmanaged,
/// at its configured rate, while the agent kept leasing the old file). Both are refused,
/// saying what to do, and the share and lease are untouched.
#[test]
fn adopt_refuses_to_take_a_fleet_managed_bucket_from_its_agent() {
    let (_dir, path) = temp_path("fleet-adopt.shm");
    let share = FleetShare {
        total: Rate::per_second(1000).unwrap(),
        weight: 1,
    };
    let with_share = |b: shmlimit::Builder, per_s: u64, burst: u64| {
        b.limit_with("api", bucket(per_s, burst), |mut d| {
            d.fleet = Some(share);
            d
        })
    };
    let limiter = with_share(Limiter::builder(), 1, 10)
        .create_or_open(&path)
        .unwrap();
    let api = limiter.token_bucket("api").unwrap();
    api.fleet_manage(1, Rate::per_second(1).unwrap()).unwrap();
    api.set_token_bucket(5, Rate::per_second(5).unwrap())
        .unwrap();
    api.set_fleet_deadline(shmlimit::Clock::now_ns(limiter.clock()) + 5 * SEC)
        .unwrap();
    let before = api.fleet_lease().unwrap().expect("leased");
    let ino_before = ino(&path);
    // A rate change (a live retune), then a new limit (a new file).
    for deploy in [
        with_share(Limiter::builder(), 500, 500),
        with_share(Limiter::builder(), 1, 10).limit("other", bucket(1, 1)),
    ] {
        let Err(err) = deploy.on_conflict(OnConflict::Adopt).create_or_open(&path) else {
            panic!("adopted a change to a fleet-managed bucket");
        };
        let text = err.to_string();
        assert!(matches!(err, Error::DefinitionConflict { .. }), "{err:?}");
        assert!(text.contains("`api` is fleet-managed"), "{text}");
        assert_eq!(ino(&path), ino_before, "no new file");
        let after = api.fleet_lease().unwrap().expect("still leased");
        assert_eq!(
            (after.share, after.fence, after.deadline_ns),
            (before.share, before.fence, before.deadline_ns),
            "the lease is untouched"
        );
    }
    let mut admitted = 0;
    for _ in 0..100 {
        admitted += api.try_acquire(1).unwrap().is_allowed() as u64;
    }
    assert!(
        admitted <= 5,
        "{admitted} admitted under a 5/s burst-5 share"
    );
}

/// A new file made by Adopt keeps the old file's reboot choice and permission bits: workers
/// created with `OnReboot::Reset` and a group-shared mode re-attach to it.
#[test]
fn a_replacement_keeps_the_reboot_choice_and_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = temp_path("keep.shm");
    let worker = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .on_reboot(OnReboot::Reset)
        .mode(0o660)
        .create_or_open(&path)
        .unwrap();
    let api = worker.token_bucket("api").unwrap();
    assert!(api.try_acquire(1).unwrap().is_allowed());
    // The deploy tool asks for neither.
    let deployed = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .limit("b", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .mode(0o660)
        .create_or_open(&path)
        .unwrap();
    assert_eq!(deployed.reboot_info().on_reboot, OnReboot::Reset);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o660
    );
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    let _ = api.peek(1);
    assert!(api.try_acquire(1).expect("re-attached").is_allowed());
    // A worker restarting with its options starts too.
    Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .limit("b", bucket(1, 1))
        .on_reboot(OnReboot::Reset)
        .mode(0o660)
        .create_or_open(&path)
        .expect("a restarted worker attaches");
}

/// Permits acquired by id (the C ABI's way) through a handle that moved to a new file are
/// released in the file that issued them, and an old file's permit in the old file: the id
/// names its file, so a release never frees another permit with the same index.
#[test]
fn permit_ids_are_released_in_the_file_that_issued_them() {
    use shmlimit::Concurrency;
    let (_dir, path) = temp_path("permit-ids.shm");
    let first = Limiter::builder()
        .limit("jobs", Concurrency::new(2))
        .create_or_open(&path)
        .unwrap();
    let jobs = first.concurrency("jobs").unwrap();
    // A second name for the first file, to inspect it after the replacement (handles opened
    // by `path` follow the replacement, inspection included).
    let keep = path.with_extension("keep");
    fs::hard_link(&path, &keep).unwrap();
    let kept = Limiter::open(&keep).unwrap();
    let old = jobs.try_acquire_permit().unwrap().unwrap().into_id();
    let _deploy = Limiter::builder()
        .limit("jobs", Concurrency::new(2))
        .limit("other", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    // An acquisition runs the check, and moves the handle to the new file.
    let _ = jobs.try_acquire_permit().unwrap().map(|p| p.release());
    let now = Limiter::open(&path).unwrap();
    let fresh = now.limit("jobs").unwrap();
    let a = jobs
        .try_acquire_permit()
        .unwrap()
        .expect("a permit")
        .into_id();
    let b = jobs
        .try_acquire_permit()
        .unwrap()
        .expect("a permit")
        .into_id();
    assert_eq!(fresh.permit_holders().len(), 2, "both held in the new file");
    assert!(
        jobs.try_acquire_permit().unwrap().is_none(),
        "the new file is full"
    );
    assert!(jobs.release_permit(a).unwrap());
    assert!(jobs.release_permit(b).unwrap());
    assert!(
        fresh.permit_holders().is_empty(),
        "both released in the new file"
    );
    assert_eq!(
        kept.limit("jobs").unwrap().permit_holders().len(),
        1,
        "the old one untouched"
    );
    assert!(
        jobs.release_permit(old).unwrap(),
        "released in the old file"
    );
    assert!(kept.limit("jobs").unwrap().permit_holders().is_empty());
    assert!(!jobs.release_permit(old).unwrap(), "only once");
}

/// `Limiter::sync` (and so `sync_every` and `shmlimit sync --every`) writes the file that
/// replaced the one it opened too, and records that file's boot as alive: the bound on what a
/// power loss forgets holds across a deploy that replaced the file.
#[test]
fn sync_reaches_the_file_that_replaced_the_one_opened() {
    let (_dir, path) = temp_path("sync.shm");
    let limiter = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .create_or_open(&path)
        .unwrap();
    let _deploy = Limiter::builder()
        .limit("api", bucket(1000, 1000))
        .limit("b", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    // Header word 22: the latest Unix time this boot was seen alive (written by a sync).
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&1u64.to_ne_bytes(), 22 * 8).unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    limiter.sync().unwrap();
    let mut word = [0u8; 8];
    fs::File::open(&path)
        .unwrap()
        .read_exact_at(&mut word, 22 * 8)
        .unwrap();
    assert!(u64::from_ne_bytes(word) > 1, "the new file was synced");
}

/// A deploy that needs a new file (here: a limit added) carries the state of every limit it
/// leaves unchanged: a daily quota used up stays used up, in the new file, for the handles that
/// move and for new ones; a changed limit starts fresh.
#[test]
fn a_deploy_that_adds_a_limit_keeps_the_quotas_of_the_others() {
    let (_dir, path) = temp_path("carry.shm");
    let daily = || FixedWindow::new(10, Duration::from_secs(86_400));
    let first = Limiter::builder()
        .limit("daily", daily())
        .limit("log", SlidingLog::new(5, Duration::from_secs(3600)))
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let quota = first.window("daily").unwrap();
    assert!(quota.try_acquire(10).unwrap().is_allowed());
    assert!(first
        .sliding_log("log")
        .unwrap()
        .try_acquire(5)
        .unwrap()
        .is_allowed());
    assert!(first
        .token_bucket("api")
        .unwrap()
        .try_acquire(5)
        .unwrap()
        .is_allowed());
    let before = ino(&path);
    let deployed = Limiter::builder()
        .limit("daily", daily())
        .limit("log", SlidingLog::new(5, Duration::from_secs(3600)))
        .limit("api", bucket(1, 50)) // changed: starts fresh
        .limit("new", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    assert_ne!(ino(&path), before, "a new file");
    assert!(deployed
        .window("daily")
        .unwrap()
        .peek(1)
        .unwrap()
        .is_denied());
    assert!(deployed
        .sliding_log("log")
        .unwrap()
        .peek(1)
        .unwrap()
        .is_denied());
    assert!(deployed
        .token_bucket("api")
        .unwrap()
        .peek(50)
        .unwrap()
        .is_allowed());
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    let _ = quota.peek(1); // runs the check
    assert!(
        quota.try_acquire(1).unwrap().is_denied(),
        "still used up after the move"
    );
    assert_eq!(
        deployed.limit("daily").unwrap().stats().denied,
        1,
        "decided on the new file"
    );
}

/// Management and inspection calls of a handle follow a replacement as its decisions do: a
/// retune, a reset and the statistics act on the file now at the path, not silently on the old
/// one.
#[test]
fn management_calls_follow_a_replacement() {
    let (_dir, path) = temp_path("manage.shm");
    let first = Limiter::builder()
        .limit("api", bucket(1, 5))
        .create_or_open(&path)
        .unwrap();
    let api = first.token_bucket("api").unwrap();
    assert!(api.try_acquire(5).unwrap().is_allowed());
    let deployed = Limiter::builder()
        .limit("api", bucket(1, 5))
        .limit("b", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    std::thread::sleep(REPLACEMENT_CHECK + Duration::from_millis(100));
    api.set_token_bucket(50, Rate::per_second(1000).unwrap())
        .unwrap();
    let now = deployed.token_bucket("api").unwrap();
    match now.live_algorithm().unwrap() {
        Algorithm::TokenBucket { capacity, .. } => assert_eq!(capacity, 50, "retuned the new file"),
        other => panic!("{other:?}"),
    }
    assert!(now.try_acquire(1).unwrap().is_allowed());
    assert_eq!(api.stats().allowed, 1, "the new file's statistics");
    api.reset().unwrap();
    assert!(
        now.peek(50).unwrap().is_allowed(),
        "reset the new file: full again"
    );
}

/// A wait for a permit goes on in the file that replaced the one it started in: it is granted
/// there (the new file's permits are free), instead of waiting out its timeout on the old file.
#[test]
fn a_permit_wait_moves_to_the_file_that_replaced_its_own() {
    use shmlimit::Concurrency;
    let (_dir, path) = temp_path("permit-wait.shm");
    let first = Limiter::builder()
        .limit("jobs", Concurrency::new(1))
        .create_or_open(&path)
        .unwrap();
    let jobs = first.concurrency("jobs").unwrap();
    let held = jobs.try_acquire_permit().unwrap().expect("the only permit");
    let waiter = {
        let jobs = jobs.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let got = jobs.acquire_permit_timeout(Duration::from_secs(5)).unwrap();
            (got.map(|p| p.release()), start.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let _deploy = Limiter::builder()
        .limit("jobs", Concurrency::new(1))
        .limit("other", bucket(1, 1))
        .on_conflict(OnConflict::Adopt)
        .create_or_open(&path)
        .unwrap();
    let (released, waited) = waiter.join().unwrap();
    assert_eq!(
        released,
        Some(true),
        "granted in the new file, after {waited:?}"
    );
    assert!(waited < Duration::from_secs(4), "it waited {waited:?}");
    drop(held);
}
