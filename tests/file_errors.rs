//! Creating, attaching to and refusing limiter files: concurrent creation by several processes,
//! and one typed error for every way a file at the path can be wrong.

mod common;

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

#[test]
fn eight_processes_creating_one_file_at_once_all_attach_to_the_same_state() {
    let _serial = fork_lock();
    for round in 0..5 {
        let (dir, path) = temp_path("race.shm");
        let expected = expected_pairs();
        let results = fork_workers(8, |_| {
            // All eight leave the barrier together and race to create the file.
            let limiter = builder().create_or_open(&path).expect("create_or_open");
            let same = pairs(&limiter) == expected;
            let d = limiter.token_bucket("api").unwrap().try_acquire(1).unwrap();
            let ino = fs::symlink_metadata(&path).unwrap().ino();
            vec![same as u64, d.is_allowed() as u64, d.remaining(), ino]
        });
        assert!(
            results.iter().all(|r| r[0] == 1),
            "round {round}: every process sees the definitions it asked for"
        );
        assert!(results.iter().all(|r| r[1] == 1), "round {round}");
        let inodes: Vec<u64> = results.iter().map(|r| r[3]).collect();
        assert!(
            inodes.iter().all(|&i| i == inodes[0]),
            "round {round}: one file: {inodes:?}"
        );
        // One decision each landed in one bucket of 100: remaining 99, 98, ..., 92, each once.
        let mut remaining: Vec<u64> = results.iter().map(|r| r[2]).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (92..=99).collect::<Vec<_>>(), "round {round}");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["race.shm"],
            "round {round}: no temporary files left"
        );
        let limiter = Limiter::open(&path).unwrap();
        let api = limiter.token_bucket("api").unwrap();
        assert_eq!(api.stats().allowed, 8);
        assert_eq!(api.peek(1).unwrap().remaining(), 91);
        assert_eq!(fs::metadata(&path).unwrap().ino(), inodes[0]);
    }
}

#[test]
fn open_by_path_alone_sees_the_definitions() {
    let (_dir, path) = valid_file();
    let limiter = Limiter::open(&path).unwrap();
    assert_eq!(pairs(&limiter), expected_pairs());
    assert_eq!(limiter.path(), path);
    assert_eq!(limiter.limits().len(), 4);
    assert!(limiter
        .sliding_log("search")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_allowed());
    // The builder's open with the same definitions attaches too.
    assert!(builder().open(&path).is_ok());
}

#[test]
fn unknown_limit() {
    let (_dir, path) = valid_file();
    let limiter = Limiter::open(&path).unwrap();
    match limiter.limit("nope") {
        Err(Error::UnknownLimit(name)) => assert_eq!(name, "nope"),
        other => panic!("expected UnknownLimit, got {other:?}"),
    }
}

#[test]
fn a_missing_file_is_an_io_error_for_open() {
    let (_dir, path) = temp_path("missing.shm");
    match Limiter::open(&path) {
        Err(Error::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("expected Io(NotFound), got {other:?}"),
    }
    assert!(!path.exists(), "open never creates");
}

#[test]
fn truncated_files_are_refused() {
    let (_dir, path) = valid_file();
    let full = file_len(&path);
    let original = fs::read(&path).unwrap();
    // Inside the header, inside the definitions, and inside the state.
    for len in [
        0,
        8,
        100,
        4095,
        4096,
        DEFS_OFFSET + 200,
        full - 4096,
        full - 1,
    ] {
        fs::write(&path, &original[..len as usize]).unwrap();
        for e in open_both(&path) {
            match e {
                Error::Size {
                    expected, actual, ..
                } => {
                    assert_eq!(actual, len, "{e}");
                    assert!(expected > len, "{e}");
                }
                Error::Corrupt { .. } if (DEFS_OFFSET..DEFS_OFFSET + 4 * 128).contains(&len) => {}
                other => panic!("truncated to {len}: expected Size, got {other:?}"),
            }
        }
    }
    fs::write(&path, &original).unwrap();
    assert!(Limiter::open(&path).is_ok(), "restored");
}

#[test]
fn extended_files_are_refused() {
    let (_dir, path) = valid_file();
    let full = file_len(&path);
    for extra in [1, 4096, 1 << 20] {
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full + extra).unwrap();
        for e in open_both(&path) {
            match e {
                Error::Size {
                    expected, actual, ..
                } => assert_eq!((expected, actual), (full, full + extra)),
                other => panic!("extended by {extra}: expected Size, got {other:?}"),
            }
        }
        f.set_len(full).unwrap();
    }
    assert!(Limiter::open(&path).is_ok());
}

#[test]
fn foreign_files_are_refused() {
    let (_dir, path) = temp_path("foreign.shm");
    let mut rng = common::XorShift::new(17);
    for len in [9usize, 100, 4096, 8192, 65536] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        fs::write(&path, &bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        for e in open_both(&path) {
            assert!(matches!(e, Error::Foreign(_)), "{len} random bytes: {e:?}");
        }
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "a foreign file is never written"
        );
    }
    // Text is foreign too.
    fs::write(&path, "[limits]\napi = 100\n".repeat(300)).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::Foreign(_)), "{e:?}");
    }
}

#[test]
fn an_empty_file_is_refused() {
    let (_dir, path) = temp_path("empty.shm");
    fs::write(&path, b"").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::Size { actual: 0, .. }), "{e:?}");
        // Says what the user needs: the file is empty, so it is no limiter file.
        let message = e.to_string();
        assert!(
            message.ends_with("empty file: not a limiter file"),
            "{message}"
        );
        assert!(!message.contains("requires"), "{message}");
    }
    assert_eq!(file_len(&path), 0);
}

/// An input echoed in a message is cut to a bounded length, in Rust `Display` and in the C
/// ABI's last-error message: a 10,000-byte name, key or path makes a message of a few hundred
/// bytes that still shows the start of the input and its length.
#[test]
fn long_inputs_are_cut_in_messages() {
    let (_dir, path) = valid_file();
    let limiter = Limiter::open(&path).unwrap();
    let long = "n".repeat(10_000);
    let bound = 4 * shmlimit::consts::MAX_ECHO + 200;
    let mut messages = vec![
        limiter.limit(&long).unwrap_err().to_string(),
        builder()
            .limit(&long, TokenBucket::per_second(1))
            .create_or_open(&path)
            .unwrap_err()
            .to_string(),
        Limiter::open(path.with_file_name(&long[..250]).join(&long[..250]))
            .unwrap_err()
            .to_string(),
    ];
    // The C ABI: the thread's last-error message.
    let c_name = std::ffi::CString::new(long.clone()).unwrap();
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings and out-pointers that live across the calls; the
    // handle is freed once, and the last-error string is copied before any further call.
    unsafe {
        use shmlimit_ffi::*;
        assert_eq!(
            shmlimit_limiter_open(c_path.as_ptr(), std::ptr::null(), &mut handle) as i32,
            0
        );
        let mut limit = std::ptr::null_mut();
        assert_ne!(
            shmlimit_limiter_limit(handle, c_name.as_ptr(), &mut limit) as i32,
            0
        );
        messages.push(
            std::ffi::CStr::from_ptr(shmlimit_last_error())
                .to_string_lossy()
                .into_owned(),
        );
        shmlimit_limiter_free(handle);
    }
    for m in &messages {
        assert!(m.len() <= bound, "{} bytes: {m}", m.len());
        assert!(
            m.contains("nnnnnnnn"),
            "the start of the input is shown: {m}"
        );
        assert!(m.contains('…'), "the cut is marked: {m}");
    }
    assert!(messages[0].contains("(10000 bytes)"), "{}", messages[0]);
}

#[test]
fn another_format_version_is_refused() {
    let (_dir, path) = valid_file();
    let word = read_word(&path, WORD_VERSION);
    assert_eq!(word & 0xFFFF_FFFF, 7, "this build writes format version 7");
    // Version 1 (its key tags mean something else), version 2 (its word 7 is the active slot,
    // where version 3 keeps a fleet lease deadline), version 3 (no file id, no reboot words: its
    // zeros would read as a wall clock at the epoch), version 4 (its counter lanes are shared
    // and have no owner line), version 5 (its retunes rewrite a parameter slot without moving
    // the generation this build's decisions cache and check parameters by), version 6 (no
    // counters limits: its readers refuse kind 6) and a version from the future.
    for other in [1, 2, 3, 4, 5, 6, 8] {
        write_word(&path, WORD_VERSION, (word & !0xFFFF_FFFF) | other);
        for e in open_both(&path) {
            match e {
                Error::Version {
                    found, expected, ..
                } => assert_eq!((found, expected), (other as u32, 7)),
                other => panic!("expected Version, got {other:?}"),
            }
        }
    }
}

#[test]
fn a_damaged_definition_fails_its_checksum() {
    let (_dir, path) = valid_file();
    let original = fs::read(&path).unwrap();
    // A byte of the first record's name, of its parameters, of the third record's kind, and of
    // the header's file-size word: all covered by the checksum.
    for offset in [
        DEFS_OFFSET,
        DEFS_OFFSET + 9 * 8,
        DEFS_OFFSET + 2 * 128 + 8 * 8,
        3 * 8 + 1,
    ] {
        flip_byte(&path, offset);
        for e in open_both(&path) {
            assert!(
                matches!(&e, Error::Corrupt { reason, .. } if reason.contains("checksum")),
                "byte {offset} flipped: {e:?}"
            );
        }
        fs::write(&path, &original).unwrap();
    }
    // A layout word that is impossible on its face is refused before the checksum is read.
    flip_byte(&path, 4 * 8 + 1);
    for e in open_both(&path) {
        assert!(
            matches!(e, Error::Corrupt { .. }),
            "slot size damaged: {e:?}"
        );
    }
    fs::write(&path, &original).unwrap();
    assert!(Limiter::open(&path).is_ok());
}

#[test]
fn an_unfinished_init_state_is_refused() {
    let (_dir, path) = valid_file();
    write_word(&path, WORD_INIT, 0);
    for e in open_both(&path) {
        assert!(matches!(e, Error::NotInitialized(_)), "{e:?}");
    }
}

#[test]
fn a_file_from_another_time_namespace_is_refused() {
    let (_dir, path) = valid_file();
    let ours = read_word(&path, WORD_TIMENS_OFFSET);
    write_word(
        &path,
        WORD_TIMENS_OFFSET,
        ours.wrapping_add(3_600_000_000_000),
    );
    for e in open_both(&path) {
        assert!(matches!(e, Error::ClockMismatch { .. }), "{e:?}");
    }
}

#[test]
fn symlinks_at_the_path_are_refused() {
    let (dir, target) = valid_file();
    let before = fs::read(&target).unwrap();
    let link = dir.path().join("link.shm");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for e in open_both(&link) {
        assert!(
            matches!(e, Error::Symlink(_)),
            "link to a valid file: {e:?}"
        );
    }
    assert_eq!(
        fs::read(&target).unwrap(),
        before,
        "the target is untouched"
    );
    // A dangling link: nothing may be created at its target.
    let nowhere = dir.path().join("nowhere.shm");
    let dangling = dir.path().join("dangling.shm");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    for e in open_both(&dangling) {
        assert!(matches!(e, Error::Symlink(_)), "dangling link: {e:?}");
    }
    assert!(!nowhere.exists(), "no file was created through the link");
    assert!(fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_fifo_at_the_path_is_not_a_regular_file() {
    let (_dir, path) = temp_path("fifo.shm");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for e in open_both(&path) {
        assert!(matches!(e, Error::NotRegularFile(_)), "FIFO: {e:?}");
    }
}

#[test]
fn a_directory_at_the_path_is_not_a_regular_file() {
    let (_dir, path) = temp_path("dir.shm");
    fs::create_dir(&path).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::NotRegularFile(_)), "directory: {e:?}");
    }
}

#[test]
fn conflicting_definitions_are_refused() {
    let (_dir, path) = valid_file();
    let conflict = |b: shmlimit::Builder, what: &str| {
        for e in [
            b.create_or_open(&path).expect_err(what),
            // The same definitions through `Builder::open`.
            Limiter::builder()
                .limit("api", TokenBucket::per_second(5).burst(1))
                .open(&path)
                .expect_err(what),
        ] {
            assert!(
                matches!(e, Error::DefinitionConflict { .. }),
                "{what}: {e:?}"
            );
        }
    };
    let mut changed = definitions();
    changed[0].1 = TokenBucket::new(101, Rate::new(1, Duration::from_secs(3_600)).unwrap())
        .into_algorithm("api")
        .unwrap();
    conflict(
        changed
            .into_iter()
            .fold(Limiter::builder(), |b, (n, a)| b.limit(n, a)),
        "another capacity",
    );
    let mut realigned = definitions();
    realigned[2].1 = FixedWindow::new(30, Duration::from_secs(60))
        .into_algorithm("per-minute")
        .unwrap();
    conflict(
        realigned
            .into_iter()
            .fold(Limiter::builder(), |b, (n, a)| b.limit(n, a)),
        "another alignment",
    );
    conflict(
        builder().limit("extra", SlidingLog::new(1, Duration::from_secs(1))),
        "an extra limit",
    );
    conflict(
        Limiter::builder().limit("api", definitions()[0].1),
        "a subset of the limits",
    );
    // The file is unchanged and still attachable with its own definitions.
    assert!(builder().create_or_open(&path).is_ok());
}

#[test]
fn created_files_are_private_by_default_and_group_shared_on_request() {
    let (dir, path) = temp_path("private.shm");
    drop(builder().create_or_open(&path).unwrap());
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    let shared = dir.path().join("shared.shm");
    drop(builder().mode(0o660).create_or_open(&shared).unwrap());
    assert_eq!(fs::metadata(&shared).unwrap().mode() & 0o777, 0o660);
    // A group-writable file is refused by a default (0600) opener, accepted by a 0660 one.
    assert!(matches!(
        Limiter::open(&shared),
        Err(Error::Permission { .. })
    ));
    assert!(Limiter::builder().mode(0o660).open(&shared).is_ok());
}

#[test]
fn world_writable_files_are_refused() {
    let (_dir, path) = valid_file();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::Permission { .. }), "0666: {e:?}");
    }
    assert!(matches!(
        builder().mode(0o660).create_or_open(&path),
        Err(Error::Permission { .. })
    ));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(Limiter::open(&path).is_ok(), "readable by others is fine");
}

#[test]
fn a_boot_id_change_resets_the_state_once() {
    let (_dir, path) = reset_file();
    let limiter = Limiter::open(&path).unwrap();
    assert_eq!(limiter.reset_count(), 0);
    let api = limiter.token_bucket("api").unwrap();
    // Drain the bucket of 100 (one token an hour: no refill during the test).
    assert!(api.try_acquire(100).unwrap().is_allowed());
    assert!(api.try_acquire(1).unwrap().is_denied());
    let search = limiter.sliding_log("search").unwrap();
    assert!(search.try_acquire(10).unwrap().is_allowed());
    drop((api, search, limiter));

    // Another boot wrote this file: different bytes in the boot id words.
    let (a, b) = (
        read_word(&path, WORD_BOOT_ID),
        read_word(&path, WORD_BOOT_ID + 1),
    );
    write_word(&path, WORD_BOOT_ID, !a);
    write_word(&path, WORD_BOOT_ID + 1, b ^ 0x5a5a);

    let limiter = Limiter::open(&path).unwrap();
    assert_eq!(limiter.reset_count(), 1, "the open reset the state");
    assert_eq!(
        read_word(&path, WORD_BOOT_ID),
        a,
        "this boot's id is restored"
    );
    assert_eq!(read_word(&path, WORD_BOOT_ID + 1), b);
    let api = limiter.token_bucket("api").unwrap();
    assert_eq!(
        api.peek(1).unwrap().remaining(),
        99,
        "the bucket is full again"
    );
    assert!(api.try_acquire(100).unwrap().is_allowed());
    assert!(limiter
        .sliding_log("search")
        .unwrap()
        .try_acquire(10)
        .unwrap()
        .is_allowed());

    // The same boot opening again resets nothing.
    let again = Limiter::open(&path).unwrap();
    assert_eq!(again.reset_count(), 1);
    assert!(again
        .token_bucket("api")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_denied());

    // A second reboot, seen through create_or_open, counts again.
    write_word(&path, WORD_BOOT_ID, a ^ 1);
    let third = builder().create_or_open(&path).unwrap();
    assert_eq!(third.reset_count(), 2);
    assert!(third
        .token_bucket("api")
        .unwrap()
        .try_acquire(100)
        .unwrap()
        .is_allowed());
}

#[test]
fn a_socket_at_the_path_is_not_a_regular_file() {
    let (_dir, path) = temp_path("socket.shm");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::NotRegularFile(_)), "socket: {e:?}");
    }
}

#[test]
fn racing_creators_with_different_definitions_agree_on_one_winner() {
    // Four processes create the file with the usual definitions, four with a bucket of 101:
    // whichever links its file first wins; every process with the winner's definitions attaches,
    // every other one gets DefinitionConflict, and the file holds exactly one of the two sets.
    let _serial = fork_lock();
    let other = || -> shmlimit::Builder {
        let mut defs = definitions();
        defs[0].1 = TokenBucket::new(101, Rate::new(1, Duration::from_secs(3_600)).unwrap())
            .into_algorithm("api")
            .unwrap();
        defs.into_iter()
            .fold(Limiter::builder(), |b, (n, a)| b.limit(n, a))
    };
    for round in 0..5 {
        let (_dir, path) = temp_path("race.shm");
        let results = fork_workers(8, |i| {
            let outcome = if i % 2 == 0 {
                builder().create_or_open(&path)
            } else {
                other().create_or_open(&path)
            };
            vec![match outcome {
                Ok(_) => 0,
                Err(Error::DefinitionConflict { .. }) => 1,
                Err(_) => 2,
            }]
        });
        let outcomes: Vec<u64> = results.iter().map(|r| r[0]).collect();
        let capacity = Limiter::open(&path)
            .unwrap()
            .limit("api")
            .unwrap()
            .capacity();
        let (winners, losers) = if capacity == 100 { (0, 1) } else { (1, 0) };
        for (i, &o) in outcomes.iter().enumerate() {
            let expected = if i % 2 == winners { 0 } else { 1 };
            assert_eq!(
                o, expected,
                "round {round}: process {i} (file has capacity {capacity}): {outcomes:?}"
            );
        }
        assert_ne!(winners, losers);
    }
}

#[test]
fn openers_racing_a_creator_never_see_a_half_made_file() {
    // Six processes poll `Limiter::open` while two create the file: an opener sees either no
    // file (NotFound) or a complete one, never a size, checksum or init-state error.
    let _serial = fork_lock();
    for round in 0..5 {
        let (_dir, path) = temp_path("race.shm");
        let results = fork_workers(8, |i| {
            if i < 2 {
                builder().create_or_open(&path).expect("create");
                return vec![0, 0];
            }
            let deadline = common::now_ns() + 10 * common::SEC;
            let mut polls = 0;
            loop {
                polls += 1;
                match Limiter::open(&path) {
                    Ok(limiter) => {
                        assert_eq!(limiter.definitions().len(), 4);
                        return vec![0, polls];
                    }
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound
                            && common::now_ns() < deadline => {}
                    Err(_) => return vec![1, polls],
                }
            }
        });
        for (i, r) in results.iter().enumerate() {
            assert_eq!(
                r[0], 0,
                "round {round}: process {i} saw a bad file after {} polls",
                r[1]
            );
        }
    }
}

#[test]
fn eight_processes_opening_after_a_boot_id_change_reset_once() {
    // All eight see the foreign boot id at once; exactly one resets, and no decision a process
    // makes after attaching is wiped by another's reset.
    let _serial = fork_lock();
    for round in 0..5 {
        let (_dir, path) = reset_file();
        {
            let limiter = Limiter::open(&path).unwrap();
            assert!(limiter
                .token_bucket("api")
                .unwrap()
                .try_acquire(100)
                .unwrap()
                .is_allowed());
        }
        let a = read_word(&path, WORD_BOOT_ID);
        write_word(&path, WORD_BOOT_ID, !a);
        let results = fork_workers(8, |_| {
            let limiter = Limiter::open(&path).expect("open after the boot id change");
            let d = limiter.token_bucket("api").unwrap().try_acquire(1).unwrap();
            vec![d.is_allowed() as u64, limiter.reset_count()]
        });
        assert!(
            results.iter().all(|r| r == &[1, 1]),
            "round {round}: every process admitted after one reset: {results:?}"
        );
        let limiter = Limiter::open(&path).unwrap();
        assert_eq!(limiter.reset_count(), 1, "round {round}");
        let api = limiter.token_bucket("api").unwrap();
        assert_eq!(
            api.peek(1).unwrap().remaining(),
            91,
            "round {round}: the eight decisions all landed in the reset bucket"
        );
        assert_eq!(api.stats().allowed, 8, "round {round}");
    }
}

#[test]
fn eight_processes_opening_after_a_boot_id_change_translate_once() {
    // The default keeps what was used: exactly one process translates (a second translation
    // would move the times again), and the drained bucket stays drained for all eight.
    let _serial = fork_lock();
    for round in 0..5 {
        let (_dir, path) = valid_file();
        {
            let limiter = Limiter::open(&path).unwrap();
            let api = limiter.token_bucket("api").unwrap();
            assert!(api.try_acquire(100).unwrap().is_allowed());
        }
        let a = read_word(&path, WORD_BOOT_ID);
        write_word(&path, WORD_BOOT_ID, !a);
        let results = fork_workers(8, |_| {
            let limiter = Limiter::open(&path).expect("open after the boot id change");
            let d = limiter.token_bucket("api").unwrap().try_acquire(1).unwrap();
            vec![
                d.is_allowed() as u64,
                limiter.reboot_info().translations,
                limiter.reset_count(),
            ]
        });
        assert!(
            results.iter().all(|r| r == &[0, 1, 0]),
            "round {round}: every process denied after one translation: {results:?}"
        );
        let limiter = Limiter::open(&path).unwrap();
        assert_eq!(limiter.reboot_info().translations, 1, "round {round}");
        assert!(limiter.reboot_info().failed_closed.is_empty());
    }
}
