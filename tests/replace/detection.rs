//! A handle notices that its path names another file (unlink and recreate, rename over, bytes
//! copied over the same inode, truncate and restore) and moves to it within the bound; a
//! replacement it cannot use is an error until it can.

use super::*;

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
