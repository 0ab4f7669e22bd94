//! A file truncated or extended under a process that has it mapped.

use super::*;

/// Truncating a file that another process has mapped: that process dies of SIGBUS on its next
/// access past the new end (the library sizes files only at creation and never remaps, so it
/// cannot prevent this; it is why files must be writable only by the processes that share
/// them). A new open refuses the truncated file. Extending is harmless to the mapped process
/// (the mapping keeps its length) but a new open refuses it too.
#[test]
fn truncated_or_extended_while_mapped() {
    let _serial = fork_lock();
    let (_dir, path) = temp_path("resize.shm");
    let limiter = create(&path);
    let size = limiter.file_size();
    drop(limiter);
    let pipe = || {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    };
    let (go_r, go_w) = pipe();
    let (ready_r, ready_w) = pipe();
    let p = path.clone();
    let child = spawn(move || {
        let l = Limiter::open(&p).unwrap();
        let log = l.sliding_log("log").unwrap();
        assert!(log.try_acquire(1).unwrap().is_allowed());
        // SAFETY: `ready_w` is the pipe's open write end; one byte from a valid buffer.
        unsafe { libc::write(ready_w, b"r".as_ptr().cast(), 1) };
        let mut b = [0u8; 1];
        // SAFETY: `go_r` is the pipe's open read end; `b` is a valid one-byte buffer.
        unsafe { libc::read(go_r, b.as_mut_ptr().cast(), 1) };
        // The slot pages are gone now: this access raises SIGBUS.
        let _ = log.try_acquire(1);
        vec![1]
    });
    // Once the child has mapped the file and decided, truncate it under the child.
    let mut b = [0u8; 1];
    // SAFETY: `ready_r` is the pipe's open read end; `b` is a valid one-byte buffer.
    assert_eq!(unsafe { libc::read(ready_r, b.as_mut_ptr().cast(), 1) }, 1);
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    // SAFETY: `go_w` is the pipe's open write end; one byte from a valid buffer.
    unsafe { libc::write(go_w, b"x".as_ptr().cast(), 1) };
    let (status, words) = child.wait();
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
        "the child should die of SIGBUS, status {status:#x}, wrote {words:?}"
    );
    match Limiter::open(&path) {
        // The definitions are past the new end (Corrupt) or the size disagrees (Size).
        Err(Error::Size { .. } | Error::Corrupt { .. }) => {}
        other => panic!("truncated file accepted: {other:?}"),
    }

    // Extended while mapped: the mapped handle keeps working, a new open refuses the file.
    fs::remove_file(&path).unwrap();
    let limiter = create(&path);
    let log = limiter.sliding_log("log").unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size + 4096)
        .unwrap();
    assert!(log.try_acquire(1).unwrap().is_allowed());
    match Limiter::open(&path) {
        Err(Error::Size {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (size, size + 4096)),
        other => panic!("extended file accepted: {other:?}"),
    }
    // SAFETY: both descriptors are ours and open.
    unsafe {
        libc::close(go_r);
        libc::close(go_w);
        libc::close(ready_r);
        libc::close(ready_w);
    }
}
