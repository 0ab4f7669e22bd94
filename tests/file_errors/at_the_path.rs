//! What stands at the path when it is not a limiter file: nothing, a symlink, a FIFO, a
//! directory, a socket, or a world-writable file.

use super::*;

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
fn a_socket_at_the_path_is_not_a_regular_file() {
    let (_dir, path) = temp_path("socket.shm");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    for e in open_both(&path) {
        assert!(matches!(e, Error::NotRegularFile(_)), "socket: {e:?}");
    }
}
