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
fn file_owned_by_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing a file's owner needs root");
        return;
    }
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
        .limit("api")
        .unwrap()
        .try_acquire(1)
        .unwrap()
        .is_allowed());
}
