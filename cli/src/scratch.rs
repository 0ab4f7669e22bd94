//! Where the demo and the scenario put their files: a fresh directory under `/dev/shm` (or the
//! temporary directory), removed whole when the run ends, on every path out of it; or a
//! directory the user named, which is kept.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use shmlimit::{Clock, MonotonicClock};

/// Where a test or script may put files by default: `/dev/shm` when it is usable, else the
/// temporary directory.
pub fn root() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    let usable = std::fs::metadata(&shm)
        .map(|m| m.is_dir() && !m.permissions().readonly())
        .unwrap_or(false);
    if usable && std::env::var_os("TMPDIR").is_none() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// A run's directory. A fresh one is removed whole when dropped (the limiter file and whatever
/// else the run wrote: the C worker's source and program, the Python package, sockets,
/// records). Forked workers leave through `_exit`, so only the process that made it drops it.
pub struct Scratch {
    path: PathBuf,
    remove: bool,
}

impl Scratch {
    /// A new directory `PREFIX-PID-STAMP` under [`root`], readable by this user only.
    ///
    /// # Errors
    ///
    /// The directory cannot be created: the message names it and the reason.
    pub fn fresh(prefix: &str) -> Result<Scratch, String> {
        let path = root().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            MonotonicClock.now_ns()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| {
                format!(
                    "{}: cannot create a temporary directory: {e}",
                    path.display()
                )
            })?;
        Ok(Scratch { path, remove: true })
    }

    /// A directory the user named (and this run created): kept at the end.
    pub fn kept(path: PathBuf) -> Scratch {
        Scratch {
            path,
            remove: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it is removed at the end.
    pub fn removed(&self) -> bool {
        self.remove
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
