//! One agent per limit of a file: `PATH.LIMIT.agent.lock`.
//!
//! The lock is an exclusive `flock` on the file, which the kernel drops when the holder dies, so
//! a file left behind by a killed agent never blocks the next one. An agent that exits cleanly
//! (SIGTERM, SIGINT, the end of [`super::run`], a dropped [`super::Agent`], a start that fails
//! after the lock was taken) removes the file while it still holds the lock. A newcomer that
//! opened the path just before that removal may then lock the removed file: after locking, it
//! checks that the path still names the file it locked (same device and inode), and starts over
//! otherwise, so two agents never hold two different files of the same path.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{AgentConfig, FleetError};

/// The held lock: removes its file when dropped (while still holding the lock).
#[derive(Debug)]
pub(super) struct AgentLock {
    path: PathBuf,
    file: std::fs::File,
}

impl AgentLock {
    /// The locked descriptor (the guard process closes its inherited copy: a lock held by a
    /// guard would outlive its agent).
    pub(super) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Drop for AgentLock {
    fn drop(&mut self) {
        // Still locked here: a newcomer that opened the path before the removal finds, once it
        // holds the lock, that the path no longer names this file, and starts over.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The lock file of `cfg`'s limit: `PATH.LIMIT.agent.lock`, the limit's name with every
/// character but ASCII letters, digits, `-` and `_` as `_`.
pub(super) fn lock_path(path: &Path, limit: &str) -> PathBuf {
    let limit: String = limit
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    PathBuf::from(format!("{}.{limit}.agent.lock", path.display()))
}

/// Hold `PATH.LIMIT.agent.lock` (an exclusive `flock`, see [`lock_path`]) for the agent's life:
/// one agent per limit of a file. `None` when the lock file cannot be created (a read-only
/// directory: no protection against a second agent then).
pub(super) fn agent_lock(cfg: &AgentConfig) -> Result<Option<AgentLock>, FleetError> {
    let path = lock_path(&cfg.path, &cfg.limit);
    // Each round ends with the lock held on the file the path names, or starts over because a
    // clean exit removed the file between our open and our lock (a few rounds at most).
    for _ in 0..100 {
        let file = match std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "fleet[{}/{}] no agent lock ({}: {e}); make sure one agent runs per file",
                    cfg.fleet,
                    cfg.member,
                    path.display()
                );
                return Ok(None);
            }
        };
        // SAFETY: `file` is an open descriptor we own; flock has no memory preconditions.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(FleetError::Config(format!(
                "another fleet agent runs on limit `{}` of {} (it holds {})",
                cfg.limit,
                cfg.path.display(),
                path.display()
            )));
        }
        let same = match (file.metadata(), std::fs::metadata(&path)) {
            (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
            _ => false,
        };
        if same {
            return Ok(Some(AgentLock { path, file }));
        }
    }
    Err(FleetError::Config(format!(
        "cannot hold {}: it is removed and created again without end",
        path.display()
    )))
}
