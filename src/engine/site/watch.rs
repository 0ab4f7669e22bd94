//! The state one attached file shares between its handles ([`Shared`]), the replacement check
//! (whether the path still names the file, and the handle of the file that replaced it), and
//! the retune lock.

use crate::engine::site::Site;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::algo::Decision;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::file::layout::word;
use crate::file::lock::FileLock;
use crate::file::{self, Mapped};
use crate::tally::Region;

use crate::engine::reboot::HOOKS;
use crate::engine::{params_of, Params};

pub(crate) struct Shared {
    pub(crate) mapped: Mapped,
    /// The counter region, for the handles' [`Tally`].
    pub(crate) counters: Region,
    pub(crate) params: Vec<Params>,
    /// Serialises this process's retuning; `flock` serialises processes.
    pub(crate) tuning: Mutex<()>,
    /// Whether the path still names this file (see [`Shared::check`]).
    pub(crate) watch: Watch,
}

/// [`Limiter::sync`]: `shared`'s file, then each file that replaced it in turn.
pub(crate) fn sync_files(shared: &Arc<Shared>, t: u64) -> Result<()> {
    let mut at = Arc::clone(shared);
    for _ in 0..16 {
        file::reboot::sync(&at.mapped).map_err(|source| Error::Io {
            op: "syncing the file to its disk",
            path: at.mapped.path.clone(),
            source,
        })?;
        match at.check(t) {
            Ok(Some(next)) => at = next,
            // Still the file at the path, or nothing usable there now: nothing more to write.
            Ok(None) | Err(_) => break,
        }
    }
    Ok(())
}

/// How often, at most, a handle checks that its path still names the file it mapped.
pub const REPLACEMENT_CHECK: Duration = Duration::from_secs(1);

/// How often, at most, a handle retries attaching to a replacement that could not be opened.
const REATTACH_RETRY: Duration = Duration::from_millis(100);

#[derive(Default)]
pub(crate) struct Watch {
    /// Clock time of the next check (the earliest any handle of this file needs one).
    pub(crate) next_check: AtomicU64,
    /// The file now at the path, once noticed and attached.
    pub(crate) successor: OnceLock<Arc<Shared>>,
    /// Serialises checks; holds the last failed re-attach: (retry at, what failed).
    pub(crate) failure: Mutex<Option<(u64, String)>>,
}

impl Shared {
    /// The shared state of a file just mapped: each limit's in-process parameters, computed
    /// once here.
    pub(crate) fn new(mapped: Mapped) -> Shared {
        let wall = mapped.header(word::WALL_OFFSET);
        let params = mapped
            .defs
            .iter()
            .map(|def| params_of(&def.algorithm, wall))
            .collect();
        Shared {
            counters: Region::of(&mapped),
            mapped,
            params,
            tuning: Mutex::new(()),
            watch: Watch::default(),
        }
    }

    /// Whether the path still names the file this process mapped: same device and inode, and
    /// the same file id in the header (read with `pread`, so a truncated file cannot fault).
    pub(crate) fn still_at_path(&self) -> bool {
        use std::os::unix::fs::FileExt;
        let m = &self.mapped;
        match file::path_ident(&m.anchor) {
            Ok((dev, ino)) if dev == m.ident.dev && ino == m.ident.ino => {
                let mut id = [0u8; 8];
                m.file
                    .read_exact_at(&mut id, (word::FILE_ID * 8) as u64)
                    .is_ok()
                    && u64::from_ne_bytes(id) == m.ident.file_id
            }
            _ => false,
        }
    }

    /// At clock time `t`: `Ok(None)` while this is still the file at the path (checked at most
    /// once per [`REPLACEMENT_CHECK`]), the file that replaced it once noticed, or why the
    /// replacement cannot be attached (retried at most once per [`REATTACH_RETRY`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn check(&self, t: u64) -> Result<Option<Arc<Shared>>> {
        if let Some(next) = self.watch.successor.get() {
            return Ok(Some(Arc::clone(next)));
        }
        // Relaxed: a time; the mutex below orders the check itself.
        if t < self.watch.next_check.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Another thread is checking (it may be opening the new file, which can take a while):
        // decide on this file meanwhile rather than wait. Never blocking here also keeps a
        // child forked while another thread held the lock from waiting for it forever.
        let mut failure = match self.watch.failure.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
        };
        if let Some(next) = self.watch.successor.get() {
            return Ok(Some(Arc::clone(next)));
        }
        if t < self.watch.next_check.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let path = &self.mapped.path;
        if let Some((retry_at, reason)) = failure.as_ref() {
            if t < *retry_at {
                return Err(reattach_error(path, reason.clone()));
            }
        }
        if self.still_at_path() {
            *failure = None;
            self.watch.next_check.store(
                t.saturating_add(REPLACEMENT_CHECK.as_nanos() as u64),
                Ordering::Relaxed,
            );
            return Ok(None);
        }
        match file::open(&self.mapped.anchor, &self.mapped.access, &HOOKS).map(Shared::new) {
            Ok(next) => {
                *failure = None;
                Ok(Some(Arc::clone(
                    self.watch.successor.get_or_init(|| Arc::new(next)),
                )))
            }
            Err(e) => {
                let reason = e.to_string();
                *failure = Some((
                    t.saturating_add(REATTACH_RETRY.as_nanos() as u64),
                    reason.clone(),
                ));
                Err(reattach_error(path, reason))
            }
        }
    }

    /// This process's tuning mutex and an exclusive `flock` on the file.
    pub(crate) fn lock(&self) -> Result<RetuneGuard<'_>> {
        let local = self.tuning.lock().unwrap_or_else(|p| p.into_inner());
        let file = FileLock::exclusive(&self.mapped.file).map_err(|source| Error::Io {
            op: "taking the retune lock",
            path: self.mapped.path.clone(),
            source,
        })?;
        Ok(RetuneGuard {
            _file: file,
            _local: local,
        })
    }

    /// The retune lock if nobody holds it, without waiting (this process's mutex, then the
    /// file's `flock`): `None` while another thread or process holds it. For a decision, which
    /// must never wait for a management call (its holder may be descheduled or stopped).
    pub(crate) fn try_lock(&self) -> Option<RetuneGuard<'_>> {
        let local = match self.tuning.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let file = FileLock::try_exclusive(&self.mapped.file)?;
        Some(RetuneGuard {
            _file: file,
            _local: local,
        })
    }
}

/// The error of a handle whose file was replaced by one it cannot attach to.
#[cold]
pub(crate) fn reattach_error(path: &Path, reason: String) -> Error {
    Error::Io {
        op: "re-attaching to the file that replaced this one",
        path: path.to_owned(),
        source: std::io::Error::other(reason),
    }
}

pub(crate) struct RetuneGuard<'a> {
    // Fields drop in order: the file lock first (as other processes wait for it), then this
    // process's mutex.
    _file: FileLock<'a>,
    _local: std::sync::MutexGuard<'a, ()>,
}

impl<C: Clock> Site<C> {
    /// For management and inspection calls: the handle of the file that replaced this one, once
    /// the replacement check (at most once per [`REPLACEMENT_CHECK`], as decisions run it) has
    /// noticed it, or `None` while this is still the file at the path.
    pub(crate) fn moved_handle(&self) -> Result<Option<&Site<C>>> {
        let this = self.current()?;
        Ok((!std::ptr::eq(this, self)).then_some(this))
    }

    /// The random id of the file this handle decides on.
    pub(crate) fn file_id(&self) -> u64 {
        self.shared.mapped.ident.file_id
    }

    /// The handle of the file that replaced this one, once noticed.
    pub(crate) fn moved_to(&self) -> Option<&Site<C>> {
        self.moved.get().map(|next| &**next)
    }

    /// The handle that made `grant`: this one, or one of the files that replaced it.
    pub(crate) fn maker_of(&self, grant: &Decision) -> &Site<C> {
        let mut at = self;
        while grant.origin != 0 && grant.origin != at.origin {
            match at.moved.get() {
                Some(next) => at = next,
                None => return self,
            }
        }
        at
    }
}
