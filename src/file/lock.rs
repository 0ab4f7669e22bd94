//! [`FileLock`]: an exclusive `flock` on a limiter file, released when dropped.
//!
//! Two things in a file happen under it, each once and never at the same time as the other:
//! the translation (or reset) of the state at the first attach after a reboot, and the
//! management calls that rewrite live parameters or state (a retune, a reset, adopting new
//! definitions). Decisions never wait for it: one that finds the fence slot of a fleet-managed
//! bucket torn tries it without waiting ([`FileLock::try_exclusive`]), to tell a rewrite under
//! way (the lock is held) from damage.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// How long [`FileLock::exclusive`] waits for another holder before it gives up.
pub(crate) const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// An exclusive `flock` held on a file; dropping it unlocks.
#[derive(Debug)]
pub(crate) struct FileLock<'a> {
    /// The locked file: borrowed, so it stays open as long as the lock is held.
    file: &'a File,
}

impl<'a> FileLock<'a> {
    /// Take an exclusive `flock` on `file`, waiting at most [`LOCK_TIMEOUT`] for another holder
    /// (an error of kind `TimedOut` then).
    pub(crate) fn exclusive(file: &'a File) -> std::io::Result<FileLock<'a>> {
        let fd: RawFd = file.as_raw_fd();
        let deadline = Instant::now() + LOCK_TIMEOUT;
        loop {
            // SAFETY: `fd` is the open descriptor `file` owns (borrowed for the call); flock has
            // no memory preconditions.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(FileLock { file });
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "flock held for 10 s",
                ));
            }
            // A sleep, not crossbeam's `Backoff`: the holder is another process translating,
            // retuning or resetting the file (system calls, milliseconds), and flock has no
            // timed wait.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl<'a> FileLock<'a> {
    /// Take an exclusive `flock` on `file` if nobody holds it, without waiting: `None` when
    /// another open of the file holds it (or `flock` fails).
    pub(crate) fn try_exclusive(file: &'a File) -> Option<FileLock<'a>> {
        // SAFETY: `file` is an open descriptor (borrowed for the call); flock has no memory
        // preconditions.
        (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0)
            .then_some(FileLock { file })
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: the descriptor is still open (`file` is borrowed for the guard's lifetime);
        // unlocking has no memory preconditions. An error leaves nothing to do: closing the
        // file releases the lock anyway.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_waits_for_the_first_to_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let a = File::create(&path).unwrap();
        // Another open file description: flock locks conflict between descriptions.
        let b = File::open(&path).unwrap();
        let held = FileLock::exclusive(&a).unwrap();
        // SAFETY: `b` is open; flock has no memory preconditions.
        let rc = unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_ne!(rc, 0, "the lock is held");
        drop(held);
        let again = FileLock::exclusive(&b).unwrap();
        drop(again);
    }
}
