//! Who may open a limiter file: owner, mode and directory checks, each refused with a clear
//! error unless the caller opts in.

use std::os::unix::fs::PermissionsExt;

use shmlimit::{Error, Limiter, TokenBucket};

fn create(path: &std::path::Path) -> Result<Limiter, Error> {
    Limiter::builder()
        .limit("api", TokenBucket::per_second(10))
        .create_or_open(path)
}

#[test]
fn world_writable_directory_without_sticky_bit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = open.join("limits.shm");
    match create(&path) {
        Err(Error::Permission { reason, .. }) => {
            assert!(reason.contains("sticky"), "{reason}");
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
    assert!(!path.exists(), "nothing was created");
    // Opting in works; a sticky directory (like /tmp, /dev/shm) needs no opt-in.
    Limiter::builder()
        .limit("api", TokenBucket::per_second(10))
        .allow_unsafe_directory(true)
        .create_or_open(&path)
        .unwrap();
    assert!(matches!(
        Limiter::open(&path),
        Err(Error::Permission { .. })
    ));
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    Limiter::open(&path).unwrap();
}

#[test]
fn group_writable_directory_is_accepted_only_for_group_shared_files() {
    let dir = tempfile::tempdir().unwrap();
    let team = dir.path().join("team");
    std::fs::create_dir(&team).unwrap();
    std::fs::set_permissions(&team, std::fs::Permissions::from_mode(0o770)).unwrap();
    let path = team.join("limits.shm");
    assert!(matches!(create(&path), Err(Error::Permission { .. })));
    let shared = Limiter::builder()
        .limit("api", TokenBucket::per_second(10))
        .mode(0o660)
        .create_or_open(&path)
        .unwrap();
    let mode = std::fs::metadata(shared.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660);
}

#[test]
fn group_or_world_writable_file_is_refused_beyond_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.shm");
    create(&path).unwrap();
    for (mode, who) in [(0o620, "the group"), (0o602, "every user")] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        match Limiter::open(&path) {
            Err(Error::Permission { reason, .. }) => assert!(reason.contains(who), "{reason}"),
            other => panic!("mode {mode:o}: expected a permission error, got {other:?}"),
        }
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    Limiter::builder().mode(0o660).open(&path).unwrap();
}

#[test]
#[ignore = "needs root to chown a file: run as root with `cargo test --test access -- --ignored` (.ci/run does)"]
fn file_owned_by_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "changing a file's owner needs root; this test cannot run as uid {euid}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.shm");
    create(&path).unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    match Limiter::open(&path) {
        Err(Error::Permission { reason, .. }) => assert!(reason.contains("uid 65534"), "{reason}"),
        other => panic!("expected a permission error, got {other:?}"),
    }
    let limiter = Limiter::builder()
        .allow_other_owner(true)
        .open(&path)
        .unwrap();
    assert!(limiter
        .token_bucket("api")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_allowed());
}

/// A symbolic link anywhere in the directory path is refused (whoever controls the link
/// chooses the file), unless the caller opts in; the file itself was never opened through one.
#[test]
fn a_symlink_in_the_directory_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // As the last directory component, and deeper in the path.
    std::fs::create_dir(real.join("sub")).unwrap();
    for (path, target) in [
        (link.join("limits.shm"), real.join("limits.shm")),
        (link.join("sub/limits.shm"), real.join("sub/limits.shm")),
    ] {
        match create(&path) {
            Err(Error::Permission { reason, .. }) => {
                assert!(reason.contains("symbolic link"), "{reason}");
                assert!(reason.contains(&*link.to_string_lossy()), "{reason}");
            }
            other => panic!(
                "{}: expected a permission error, got {other:?}",
                path.display()
            ),
        }
        assert!(!target.exists(), "nothing was created");
        Limiter::builder()
            .limit("api", TokenBucket::per_second(10))
            .allow_unsafe_directory(true)
            .create_or_open(&path)
            .unwrap();
        assert!(matches!(
            Limiter::open(&path),
            Err(Error::Permission { .. })
        ));
    }
    // The real directory is accepted.
    Limiter::open(real.join("limits.shm")).unwrap();
}

/// World-writable modes (any user could truncate the file and crash every process using it)
/// and modes without owner read and write (mode 0 above all) are refused at creation and at
/// open, before anything is created; group write stays allowed.
#[test]
fn world_writable_and_unusable_modes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.shm");
    for mode in [0o666, 0o606, 0o777, 0o602, 0o002, 0, 0o400, 0o200, 0o060] {
        let r = Limiter::builder()
            .limit("api", TokenBucket::per_second(10))
            .mode(mode)
            .create_or_open(&path);
        match r {
            Err(Error::InvalidParameter { reason, .. }) => {
                assert!(reason.contains(&format!("mode {mode:03o}")), "{reason}");
                if mode & 0o002 != 0 && mode & 0o600 == 0o600 {
                    assert!(reason.contains("every user"), "{reason}");
                } else {
                    assert!(reason.contains("owner read and write"), "{reason}");
                }
            }
            other => panic!("mode {mode:o}: expected InvalidParameter, got {other:?}"),
        }
        assert!(!path.exists(), "mode {mode:o} created a file");
    }
    for mode in [0o600, 0o640, 0o660, 0o700, 0o664] {
        let l = Limiter::builder()
            .limit("api", TokenBucket::per_second(10))
            .mode(mode)
            .create_or_open(&path)
            .unwrap();
        drop(l);
        assert!(matches!(
            Limiter::builder().mode(0o666).open(&path),
            Err(Error::InvalidParameter { .. })
        ));
        std::fs::remove_file(&path).unwrap();
    }
    // The CLI: `--mode 666` and `--mode 0` are refused with the reason, and create nothing.
    let config = dir.path().join("limits.toml");
    std::fs::write(
        &config,
        "[[limit]]\nname = \"api\"\nalgorithm = \"token_bucket\"\nrate = \"10/s\"\nburst = 10\n",
    )
    .unwrap();
    for mode in ["666", "0", "606"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shmlimit"))
            .arg("create")
            .arg(&path)
            .args(["--config", config.to_str().unwrap(), "--mode", mode])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--mode {mode}: {stderr}");
        assert!(stderr.contains("mode"), "--mode {mode}: {stderr}");
        assert!(!path.exists(), "--mode {mode} created a file");
    }
}
