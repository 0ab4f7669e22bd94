//! The public handles: [`Limiter`] (one attached file) and [`Limit`] (one limit in it).

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_utils::{Backoff, CachePadded};

use crate::algo::fixed_window::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::sliding_log::SlidingLog;
use crate::algo::sliding_window::SlidingWindow;
use crate::algo::{try_decide, try_decide_from, Decision, Fault, Step};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::file::layout::{self, bucket, pack_window_limit, unpack_window_limit, word};
use crate::file::reboot::{OnReboot, RebootInfo};
use crate::file::{self, Access, Mapped};
use crate::reconcile::{self, OnConflict};
use crate::spec::{Algorithm, Alignment, IntoAlgorithm, Keyed, LimitDef, Rate, MAX_CAPACITY};
use crate::tally::{Region, Tally};

/// Defines limits and creates or attaches to a limiter file.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("builder.shm");
/// use std::time::Duration;
/// use shmlimit::{Limiter, SlidingLog, TokenBucket};
///
/// let limiter = Limiter::builder()
///     .limit("downstream", TokenBucket::per_second(300).burst(30))
///     .limit("search", SlidingLog::new(100, Duration::from_secs(60)))
///     .create_or_open(&path)?;
/// // Any other process attaches by path alone and sees the same definitions.
/// let other = Limiter::open(&path)?;
/// assert_eq!(other.definitions().len(), 2);
/// assert!(limiter.sliding_log("search")?.try_acquire(1)?.is_allowed());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Builder<C: Clock = MonotonicClock> {
    defs: Vec<LimitDef>,
    error: Option<Error>,
    access: Access,
    on_conflict: OnConflict,
    clock: C,
    sync_every: Option<Duration>,
}

impl Builder<MonotonicClock> {
    fn new() -> Self {
        Builder {
            defs: Vec::new(),
            error: None,
            access: Access::default(),
            on_conflict: OnConflict::Refuse,
            clock: MonotonicClock,
            sync_every: None,
        }
    }
}

impl<C: Clock> Builder<C> {
    /// Add a limit named `name`. A bad name or parameter is reported by `create_or_open`.
    pub fn limit(self, name: &str, algorithm: impl IntoAlgorithm) -> Self {
        self.limit_with(name, algorithm, |d| d)
    }

    /// Add a keyed limit: one independent `algorithm` state per key, in a table of
    /// `keyed.capacity` slots (rounded up to a power of two).
    pub fn keyed_limit(self, name: &str, algorithm: impl IntoAlgorithm, keyed: Keyed) -> Self {
        self.limit_with(name, algorithm, |mut d| {
            d.keyed = Some(keyed);
            d
        })
    }

    /// Add a limit and set its options (shadow mode, near-limit fraction, fleet share, keys)
    /// on the [`LimitDef`] before it is stored.
    pub fn limit_with(
        mut self,
        name: &str,
        algorithm: impl IntoAlgorithm,
        options: impl FnOnce(LimitDef) -> LimitDef,
    ) -> Self {
        match algorithm.into_algorithm(name) {
            Ok(algorithm) => self
                .defs
                .push(normalize(options(LimitDef::new(name, algorithm)))),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Add a complete definition.
    pub fn define(mut self, def: LimitDef) -> Self {
        self.defs.push(normalize(def));
        self
    }

    /// Permission bits for a created file (default `0o600`; `0o660` shares it with the group).
    /// An opened file may not be writable by more users than these bits allow.
    ///
    /// The mode must include `0o600` (the owner reads and writes the file; mode 0 would make an
    /// unusable file) and must not include `0o002` (every user could truncate the file and
    /// crash every process using it): `create_or_open` and `open` refuse such a mode with
    /// [`Error::InvalidParameter`] before touching the path.
    pub fn mode(mut self, mode: u32) -> Self {
        self.access.mode = mode & 0o777;
        self
    }

    /// Accept a file owned by another user, in a directory owned by another user (both refused
    /// by default).
    pub fn allow_other_owner(mut self, allow: bool) -> Self {
        self.access.allow_other_owner = allow;
        self
    }

    /// Accept a file in a directory that other users may write without the sticky bit, owned
    /// by another (non-root) user, or reached through a symbolic link in its directory path
    /// (all refused by default: whoever can write such a directory, or change such a link, can
    /// replace the file).
    pub fn allow_unsafe_directory(mut self, allow: bool) -> Self {
        self.access.allow_unsafe_directory = allow;
        self
    }

    /// What [`Builder::create_or_open`] does when the file exists with other definitions:
    /// refuse (the default) or adopt the requested ones (see [`OnConflict`]).
    pub fn on_conflict(mut self, policy: OnConflict) -> Self {
        self.on_conflict = policy;
        self
    }

    /// What the file does with its state at a reboot (stored at creation; default
    /// [`OnReboot::Translate`]: quotas used before the reboot stay used). Setting it also
    /// requires an existing file to have made the same choice ([`Error::DefinitionConflict`]).
    pub fn on_reboot(mut self, on_reboot: OnReboot) -> Self {
        self.access.on_reboot = Some(on_reboot);
        self
    }

    /// Use another clock (for example [`crate::CoarseMonotonicClock`], or a
    /// [`crate::ManualClock`] in tests).
    pub fn clock<D: Clock>(self, clock: D) -> Builder<D> {
        Builder {
            defs: self.defs,
            error: self.error,
            access: self.access,
            on_conflict: self.on_conflict,
            clock,
            sync_every: self.sync_every,
        }
    }

    /// Bound what a power loss can forget: a helper thread of this handle writes the file's
    /// dirty pages to the disk every `period` ([`Limiter::sync`]), off the decision path, until
    /// the last clone of the handle is dropped. After a power loss at most `period` (plus one
    /// sync's duration) of admissions are forgotten. The thread does not survive a `fork`; one
    /// syncing process per file is enough (`shmlimit sync PATH --every 1s` does it for any
    /// language).
    pub fn sync_every(mut self, period: Duration) -> Self {
        self.sync_every = Some(period);
        self
    }

    /// Create the file with these definitions, or attach to it if it exists with the same ones.
    ///
    /// An existing file is compared with the request using its *live* parameters (a bucket
    /// retuned to 300/s matches a request for 300/s). When they differ, the
    /// [`Builder::on_conflict`] policy decides: refuse (the default), or adopt the requested
    /// definitions by a live retune or by a new file that atomically replaces the old one.
    /// Processes starting together with the same new definitions converge on one file: each
    /// adopts under an exclusive `flock` of the file it found, after checking that the path
    /// still names it, so one of them retunes or replaces and the others find it done.
    ///
    /// # Errors
    ///
    /// A bad definition ([`Error::InvalidParameter`]); an existing file with other definitions
    /// under [`OnConflict::Refuse`] ([`Error::DefinitionConflict`], naming every differing
    /// field); any open or validation error of [`Limiter::open`].
    pub fn create_or_open(self, path: impl AsRef<Path>) -> Result<Limiter<C>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let path = path.as_ref();
        for _ in 0..64 {
            let mapped = file::create_or_open(path, &self.defs, &self.access)?;
            let limiter = Limiter::from_mapped(mapped, self.clock.clone())?;
            let diff = reconcile::diff(&self.defs, &limiter.live_definitions());
            if diff.is_empty() {
                return Ok(limiter.syncing(self.sync_every));
            }
            if self.on_conflict == OnConflict::Refuse {
                return Err(Error::DefinitionConflict {
                    path: path.to_owned(),
                    reason: diff.message(),
                });
            }
            if self.adopt(&limiter, path)? {
                return Ok(limiter.syncing(self.sync_every));
            }
        }
        Err(Error::NotInitialized(path.to_owned()))
    }

    /// Under the file's lock: retune `limiter`'s file to the requested definitions (`true`),
    /// or replace it with a new file (`false`: attach again), unless another process already
    /// did (`true` if the file now matches, `false` if the path names another file).
    fn adopt(&self, limiter: &Limiter<C>, path: &Path) -> Result<bool> {
        let guard = limiter.shared.lock()?;
        if !limiter.shared.still_at_path() {
            return Ok(false); // replaced meanwhile: look at the file that is there now
        }
        // Another process may have adopted while this one waited for the lock.
        let diff = reconcile::diff(&self.defs, &limiter.live_definitions());
        if diff.is_empty() {
            return Ok(true);
        }
        // A fleet-managed bucket's live rate belongs to its fleet agent (FLEET.md): a retune
        // would overwrite the agent's share, and a new file would start unmanaged (at its
        // configured rate, beyond the fleet's total) while the agent kept leasing the old one.
        let names: Vec<String> = (0..limiter.shared.params.len())
            .map(|i| limiter.limit_at(i))
            .filter(|l| l.is_fleet_managed())
            .filter(|l| diff.needs_new_file || diff.retunes.iter().any(|(i, _)| *i == l.index))
            .map(|l| reconcile::quote(&l.def().name))
            .collect();
        if !names.is_empty() {
            return Err(Error::DefinitionConflict {
                path: path.to_owned(),
                reason: format!(
                    "{}; not adopted: {} fleet-managed (its rate belongs to the fleet agent). \
                     Change the fleet's total instead, or stop the agent (its lease ends and \
                     the bucket is fenced), deploy, and start the agent again",
                    diff.message(),
                    names.join(", ") + if names.len() == 1 { " is" } else { " are" }
                ),
            });
        }
        if !diff.needs_new_file {
            for (index, def) in &diff.retunes {
                limiter.limit_at(*index).retune_to(&def.algorithm, &guard)?;
            }
            return Ok(true);
        }
        // Limits defined the same before and after keep their state (not permits: their
        // holders release them into the old file; not keyed tables: the new file has its own
        // hash seed).
        let live = limiter.live_definitions();
        let stored = limiter.definitions();
        let carry: Vec<(usize, usize)> = self
            .defs
            .iter()
            .enumerate()
            .filter(|(_, def)| {
                def.keyed.is_none() && !matches!(def.algorithm, Algorithm::Concurrency { .. })
            })
            .filter_map(|(to, def)| {
                let from = stored.iter().position(|d| d.name == def.name)?;
                (stored[from] == *def && live[from] == *def).then_some((from, to))
            })
            .collect();
        file::replace(
            path,
            &self.defs,
            &self.access,
            &limiter.shared.mapped,
            &carry,
        )?;
        Ok(false)
    }

    /// Attach to an existing file; if limits were added, they must match the file's (live
    /// parameters, as [`Builder::create_or_open`] compares them). This never changes the file.
    ///
    /// # Errors
    ///
    /// As [`Limiter::open`], plus [`Error::DefinitionConflict`].
    pub fn open(self, path: impl AsRef<Path>) -> Result<Limiter<C>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !self.defs.is_empty() {
            file::check_defs(&self.defs)?;
        }
        let mapped = file::open(path.as_ref(), &self.access)?;
        let limiter = Limiter::from_mapped(mapped, self.clock)?;
        if !self.defs.is_empty() {
            let diff = reconcile::diff(&self.defs, &limiter.live_definitions());
            if !diff.is_empty() {
                return Err(Error::DefinitionConflict {
                    path: path.as_ref().to_owned(),
                    reason: diff.message(),
                });
            }
        }
        Ok(limiter.syncing(self.sync_every))
    }

    /// A private, read-only snapshot of an existing file, for inspection tools: validated as
    /// [`Builder::open`] does, opened read-only (read permission suffices), and copied into
    /// this process's memory with `pread`, never mapped. Holes of a sparse file are neither
    /// read nor allocated, so inspecting a file on a tmpfs never grows it. Statistics, peeks,
    /// key occupancy and permit holders show the file as it was when copied (after the reset a
    /// new boot implies); decisions and retunes on a snapshot change only the copy.
    ///
    /// # Errors
    ///
    /// As [`Limiter::open`].
    pub fn open_snapshot(self, path: impl AsRef<Path>) -> Result<Limiter<C>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mapped = file::open_snapshot(path.as_ref(), &self.access)?;
        Limiter::from_mapped(mapped, self.clock)
    }
}

/// Store keyed capacities as the table size actually allocated, so that definitions compare
/// equal to what a file holds.
fn normalize(mut def: LimitDef) -> LimitDef {
    if let Some(k) = def.keyed.as_mut() {
        // Out-of-range capacities are left for validation to refuse with a clear error.
        if k.capacity > 0 && k.capacity <= crate::spec::MAX_KEYS {
            k.capacity = k.slots();
        }
    }
    def
}

/// The per-limit parameters a decision needs, in process memory. Live-tunable parameters (the
/// bucket's rate and capacity, a window's limit) are read from the control line instead.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Params {
    TokenBucket,
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    SlidingLog(SlidingLog),
    Concurrency { permits: u64, lease_ns: u64 },
}

pub(crate) struct Shared {
    pub(crate) mapped: Mapped,
    /// The counter region, for the handles' [`Tally`].
    counters: Region,
    params: Vec<Params>,
    /// Serialises this process's retuning; `flock` serialises processes.
    tuning: Mutex<()>,
    /// Whether the path still names this file (see [`Shared::check`]).
    watch: Watch,
}

/// [`Limiter::sync`]: `shared`'s file, then each file that replaced it in turn.
fn sync_files(shared: &Arc<Shared>, t: u64) -> Result<()> {
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
struct Watch {
    /// Clock time of the next check (the earliest any handle of this file needs one).
    next_check: AtomicU64,
    /// The file now at the path, once noticed and attached.
    successor: OnceLock<Arc<Shared>>,
    /// Serialises checks; holds the last failed re-attach: (retry at, what failed).
    failure: Mutex<Option<(u64, String)>>,
}

impl Shared {
    fn new(mapped: Mapped, params: Vec<Params>) -> Shared {
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
    fn check(&self, t: u64) -> Result<Option<Arc<Shared>>> {
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
        match file::open(&self.mapped.anchor, &self.mapped.access).map(|m| {
            let wall = m.header(word::WALL_OFFSET);
            let params = m
                .defs
                .iter()
                .map(|d| params_of(&d.algorithm, wall))
                .collect();
            Shared::new(m, params)
        }) {
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
    fn lock(&self) -> Result<RetuneGuard<'_>> {
        let local = self.tuning.lock().unwrap_or_else(|p| p.into_inner());
        let fd = self.mapped.file.as_raw_fd();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // SAFETY: `fd` is the open descriptor owned by the mapping's File; flock has no
            // memory preconditions.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(RetuneGuard { fd, _local: local });
            }
            if Instant::now() > deadline {
                return Err(Error::Io {
                    op: "taking the retune lock",
                    path: self.mapped.path.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "flock held for 10 s",
                    ),
                });
            }
            // A sleep, not crossbeam's `Backoff`: the holder is another process retuning or
            // resetting the file (system calls, milliseconds), and flock has no timed wait.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The error of a handle whose file was replaced by one it cannot attach to.
#[cold]
fn reattach_error(path: &Path, reason: String) -> Error {
    Error::Io {
        op: "re-attaching to the file that replaced this one",
        path: path.to_owned(),
        source: std::io::Error::other(reason),
    }
}

/// One attached limiter file. Cheap to clone; every clone shares the mapping.
///
/// See [`Builder`] for an example.
pub struct Limiter<C: Clock = MonotonicClock> {
    shared: Arc<Shared>,
    clock: C,
}

impl<C: Clock> Clone for Limiter<C> {
    fn clone(&self) -> Self {
        Limiter {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("path", &self.shared.mapped.path)
            .field("limits", &self.shared.mapped.defs)
            .finish()
    }
}

impl Limiter<MonotonicClock> {
    /// Start defining limits.
    pub fn builder() -> Builder<MonotonicClock> {
        Builder::new()
    }

    /// Attach to an existing file by path alone, with the default access checks.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] (missing file, no permission), [`Error::Symlink`],
    /// [`Error::NotRegularFile`], [`Error::Permission`], [`Error::Foreign`], [`Error::Version`],
    /// [`Error::Size`], [`Error::Corrupt`], [`Error::NotInitialized`], [`Error::ClockMismatch`].
    pub fn open(path: impl AsRef<Path>) -> Result<Limiter> {
        Builder::new().open(path)
    }
}

impl<C: Clock> Limiter<C> {
    fn from_mapped(mapped: Mapped, clock: C) -> Result<Limiter<C>> {
        let wall = mapped.header(word::WALL_OFFSET);
        let params = mapped
            .defs
            .iter()
            .map(|def| params_of(&def.algorithm, wall))
            .collect();
        Ok(Limiter {
            shared: Arc::new(Shared::new(mapped, params)),
            clock,
        })
    }

    /// The definitions with their live parameters (a retuned rate, a window's live limit).
    /// A fleet share keeps its stored rate: the fleet agent retunes the live one.
    pub fn live_definitions(&self) -> Vec<LimitDef> {
        (0..self.shared.params.len())
            .map(|i| {
                let limit = self.limit_at(i);
                let mut def = limit.def().clone();
                if def.fleet.is_none() && !limit.is_fleet_managed() {
                    if let Ok(a) = limit.live_algorithm() {
                        def.algorithm = a;
                    }
                }
                def
            })
            .collect()
    }

    /// Start the helper thread of [`Builder::sync_every`].
    fn syncing(self, every: Option<Duration>) -> Self {
        if let Some(period) = every {
            let weak = Arc::downgrade(&self.shared);
            let clock = self.clock.clone();
            // A thread that cannot be started leaves the kernel's writeback as the only bound.
            let _ = std::thread::Builder::new()
                .name("shmlimit-sync".into())
                .spawn(move || loop {
                    std::thread::sleep(period);
                    match weak.upgrade() {
                        Some(shared) => {
                            let _ = sync_files(&shared, clock.now_ns());
                        }
                        None => return,
                    }
                });
        }
        self
    }

    /// Write the file's dirty pages (every limit's state and counters) to the disk now, and
    /// record this boot as alive for the translation at the next reboot. Off the decision
    /// path: decisions go on meanwhile; the first write to each page after it costs that
    /// process one minor page fault. A power loss forgets at most what was decided since the
    /// last sync (or since the kernel last wrote the pages back, about 30 s by default).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the kernel reports a write error.
    ///
    /// After the file was replaced (see [`Builder::on_conflict`]), the file now at the path is
    /// written too (and the old one, which handles may still have decided on).
    pub fn sync(&self) -> Result<()> {
        sync_files(&self.shared, self.clock.now_ns())
    }

    /// The limit definitions stored in the file (as created; see [`Limit::live_algorithm`] for
    /// retuned parameters).
    pub fn definitions(&self) -> &[LimitDef] {
        &self.shared.mapped.defs
    }

    /// The file's path as it was opened.
    pub fn path(&self) -> &Path {
        &self.shared.mapped.path
    }

    /// How many times the state was reset because the host rebooted (files created with
    /// [`OnReboot::Reset`]).
    pub fn reset_count(&self) -> u64 {
        self.shared.mapped.header(word::RESET_COUNT)
    }

    /// What the file does at a reboot, how many reboots it translated, and which limits hold a
    /// state that could not be translated (and deny until it expires or they are reset).
    pub fn reboot_info(&self) -> RebootInfo {
        file::reboot::info(&self.shared.mapped)
    }

    /// The file's size in bytes.
    pub fn file_size(&self) -> u64 {
        self.shared.mapped.geometry.file_size as u64
    }

    /// What the header says about the file (for `shmlimit inspect`).
    pub fn file_info(&self) -> FileInfo {
        let m = &self.shared.mapped;
        let g = &m.geometry;
        let boot = [m.header(word::BOOT_ID), m.header(word::BOOT_ID + 1)];
        let mut boot_id = [0u8; 16];
        boot_id[..8].copy_from_slice(&boot[0].to_ne_bytes());
        boot_id[8..].copy_from_slice(&boot[1].to_ne_bytes());
        FileInfo {
            format_version: (m.header(word::VERSION) & 0xFFFF_FFFF) as u32,
            file_size: g.file_size as u64,
            limits: m.defs.len(),
            definitions: (g.defs_offset as u64, g.defs_len as u64),
            slots: (g.slots_offset as u64, g.slots_len as u64),
            counters: (g.stats_offset as u64, g.stats_len as u64),
            boot_id,
            created_unix_ns: m.header(word::CREATED),
            reset_count: m.header(word::RESET_COUNT),
            file_id: m.ident.file_id,
        }
    }

    /// The clock this limiter decides with.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Resolve a limit by name, once; the handle is what the hot path uses.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownLimit`].
    pub fn limit(&self, name: &str) -> Result<Limit<C>> {
        let index = self
            .shared
            .mapped
            .defs
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| Error::UnknownLimit(name.to_owned()))?;
        Ok(self.limit_at(index))
    }

    /// Handles for every limit, in definition order.
    pub fn limits(&self) -> Vec<Limit<C>> {
        (0..self.shared.params.len())
            .map(|i| self.limit_at(i))
            .collect()
    }

    fn limit_at(&self, index: usize) -> Limit<C> {
        let m = &self.shared.mapped;
        let def = &m.defs[index];
        let (offset, len) = m.geometry.slots[index];
        let control = m.words(offset, layout::LINE / 8).as_ptr();
        // Everything after the control line: log entries, permits, or the key table (and a
        // keyed concurrency limit's permit blocks after it).
        let area_words = (len - layout::LINE) / 8;
        let area = m.words(offset + layout::LINE, area_words).as_ptr();
        Limit {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
            params: self.shared.params[index],
            index,
            control,
            area,
            area_words,
            tally: Tally::new(self.shared.counters, index, def.shadow, def.near_limit),
            keyed: def.keyed.is_some(),
            split: def.split.max(1) as usize,
            plain_bucket: matches!(self.shared.params[index], Params::TokenBucket)
                && def.keyed.is_none()
                && def.split <= 1,
            plain_window: matches!(
                self.shared.params[index],
                Params::FixedWindow(_) | Params::SlidingWindow(_)
            ) && def.keyed.is_none(),
            seed: [m.header(word::HASH_SEED), m.header(word::HASH_SEED + 1)],
            key_slots: def.keyed.map_or(0, |k| k.slots() as usize),
            cache: Default::default(),
            origin: (index as u64 + 1) | (m.header(word::HASH_SEED) << 32),
            next_check: AtomicU64::new(0),
            moved: OnceLock::new(),
        }
    }
}

/// How far ahead of the limit's clock a dated call ([`TokenBucketLimit::try_acquire_at`](crate::TokenBucketLimit::try_acquire_at),
/// [`KeyedTokenBucketLimit::try_acquire_key_at`](crate::KeyedTokenBucketLimit::try_acquire_key_at), and the C and Python equivalents) may be: 1 ms. A date read
/// from the same clock is never ahead; a later one could let its caller take tomorrow's budget
/// today, or move a window's or a log's state past every other process's clock. Dates in the
/// past are always accepted (the state never moves back: they only see less).
pub const DATE_TOLERANCE: Duration = Duration::from_millis(1);
const DATE_TOLERANCE_NS: u64 = 1_000_000;

/// The latest date any state encodes: 2^61 ns (73 years of uptime). A token bucket's TAT runs
/// at most 2^62 ns ahead of its date and must stay below bit 63 (its parameter tag); the
/// windows and the log have room to spare. Dated calls beyond it are refused with
/// [`Error::ClockOutOfRange`].
pub const MAX_DATE_NS: u64 = 1 << 61;

fn params_of(algorithm: &Algorithm, wall_offset: u64) -> Params {
    let phase = |window_ns: u64, alignment: Alignment| alignment.phase_ns(window_ns, wall_offset);
    match *algorithm {
        Algorithm::TokenBucket { .. } => Params::TokenBucket,
        Algorithm::FixedWindow {
            limit,
            window_ns,
            alignment,
        } => Params::FixedWindow(FixedWindow {
            limit,
            window_ns: if alignment.is_months(window_ns) {
                crate::algo::fixed_window::MONTHS
            } else {
                window_ns
            },
            phase_ns: phase(window_ns, alignment),
        }),
        Algorithm::SlidingWindow {
            limit,
            window_ns,
            alignment,
        } => Params::SlidingWindow(SlidingWindow {
            limit,
            window_ns,
            phase_ns: phase(window_ns, alignment),
        }),
        Algorithm::SlidingLog { limit, window_ns } => {
            Params::SlidingLog(SlidingLog { limit, window_ns })
        }
        Algorithm::Concurrency { permits, lease_ns } => Params::Concurrency { permits, lease_ns },
    }
}

/// Why a single-word step could not decide (see [`Limit::step_fast`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepError {
    /// Damaged live parameters.
    Corrupt,
    /// The cost exceeds this capacity.
    Cost(u64),
    /// The limit has no single-word state.
    NoWord,
    /// A fleet-managed bucket past its lease whose fence cannot grant the cost.
    Fenced,
}

/// The lease of a fleet-managed token bucket (see [`Limit::fleet_lease`] and `FLEET.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetLease {
    /// The share: the bucket decisions use while the lease runs.
    pub share: Algorithm,
    /// The fence: the bucket decisions use once it has passed (the reserved minimum or the
    /// floor).
    pub fence: Algorithm,
    /// The lease deadline, ns on the limit's clock (0: never leased, or reset).
    pub deadline_ns: u64,
    /// When this was read, ns on the limit's clock.
    pub now_ns: u64,
    /// Whether the deadline covered `now_ns`: the share applies; else the fence does.
    pub leased: bool,
}

impl FleetLease {
    /// The bucket a decision at `now_ns` used: the share or the fence.
    pub fn applied(&self) -> Algorithm {
        if self.leased {
            self.share
        } else {
            self.fence
        }
    }
}

/// What a decision at some instant decides with (see [`Limit::bucket_at`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BucketAt {
    /// The parameters.
    pub g: Gcra,
    /// They are the fence's: a fleet share past its lease.
    pub fenced: bool,
    /// How long they hold from that instant (a fleet share: until its deadline).
    pub horizon_ns: u64,
}

/// A handle's copy of one parameter slot, valid while the slot's check word equals `check`.
/// The tolerance is not kept: it is recomputed from the two words the check covers (two
/// threads refilling for different retunes could leave a third word of another version).
#[derive(Debug, Default)]
struct ParamCache {
    check: AtomicU64,
    emission: AtomicU64,
    capacity: AtomicU64,
}

impl ParamCache {
    fn copy(&self) -> ParamCache {
        // Relaxed: a copy for a new handle; a stale copy only costs that handle a refill.
        let v = |a: &AtomicU64| AtomicU64::new(a.load(Ordering::Relaxed));
        ParamCache {
            check: v(&self.check),
            emission: v(&self.emission),
            capacity: v(&self.capacity),
        }
    }
}

/// The header facts of a limiter file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// The format version.
    pub format_version: u32,
    /// The file's size in bytes.
    pub file_size: u64,
    /// How many limits it defines.
    pub limits: usize,
    /// Offset and length of the definitions region.
    pub definitions: (u64, u64),
    /// Offset and length of the state region.
    pub slots: (u64, u64),
    /// Offset and length of the counters region.
    pub counters: (u64, u64),
    /// The boot id the stored times belong to.
    pub boot_id: [u8; 16],
    /// When the file was created, Unix nanoseconds.
    pub created_unix_ns: u64,
    /// How many times a reboot reset the state.
    pub reset_count: u64,
    /// The random id written at creation: a file copied over another in place has another id.
    pub file_id: u64,
}

/// Decision counters of one limit, summed over every process.
///
/// Counts are exact and never go backwards: every committed decision adds one to a counter
/// word of its thread's lane in the file (see the layout), which a reader in any process sees
/// as soon as the store is visible; a lane outlives the thread or process that wrote it. What
/// passed is `allowed - refunded`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Decisions that admitted (including shadow-denied ones, which are admitted).
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
    /// Decisions a shadow limit would have denied.
    pub shadow_denied: u64,
    /// Admissions that left less than the near-limit fraction of the capacity.
    pub near_limit: u64,
    /// Grants given back whole: explicit refunds
    /// ([`refund`](crate::TokenBucketLimit::refund),
    /// [`refund_key`](crate::KeyedTokenBucketLimit::refund_key), a composed refund) and the
    /// roll-backs of composed checks that denied ([`crate::try_acquire_all`]).
    /// `allowed - refunded` is what passed.
    pub refunded: u64,
}

/// The untyped view of one limit, whatever its kind: what [`Limiter::limit`] and
/// [`Limiter::limits`] return, for listing and inspecting a file (name, definition, kind, live
/// parameters, statistics, permit holders, key occupancy) and for maintenance (reset, reclaiming
/// dead permits and idle keys).
///
/// Deciding goes through a handle of the limit's kind ([`crate::TokenBucketLimit`],
/// [`crate::WindowLimit`], ..., see [`LimitKind`](crate::LimitKind)), resolved with
/// [`Limiter::token_bucket`] and the like, or converted from this view with `try_from`: each
/// has exactly the operations of its kind, and is a newtype over this handle. Handles are
/// `Send + Sync` and cheap to clone.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), shmlimit::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("limit.shm");
/// use std::time::Duration;
/// use shmlimit::{Concurrency, FixedWindow, LimitKind, Limiter, WindowLimit};
/// let limiter = Limiter::builder()
///     .limit("per-minute", FixedWindow::new(2, Duration::from_secs(60)))
///     .limit("jobs", Concurrency::new(4))
///     .create_or_open(&path)?;
/// for limit in limiter.limits() {
///     println!("{} ({}): {:?}", limit.name(), limit.kind(), limit.stats());
/// }
/// let limit = limiter.limit("per-minute")?;
/// assert_eq!(limit.kind(), LimitKind::Window);
/// let window = WindowLimit::try_from(limit)?; // as limiter.window("per-minute")
/// assert!(window.try_acquire(2)?.is_allowed());
/// assert_eq!(limiter.limit("per-minute")?.stats().allowed, 1);
/// assert_eq!(limiter.limit("jobs")?.permit_holders().len(), 0);
/// # Ok(()) }
/// ```
pub struct Limit<C: Clock = MonotonicClock> {
    shared: Arc<Shared>,
    clock: C,
    params: Params,
    index: usize,
    control: *const AtomicU64,
    area: *const AtomicU64,
    area_words: usize,
    /// What happens after a decision: shadow mode, near-limit, counters.
    tally: Tally,
    keyed: bool,
    split: usize,
    /// An unkeyed, unsplit token bucket: decided by [`Limit::bucket_run`].
    plain_bucket: bool,
    /// An unkeyed fixed or sliding window: decided by [`Limit::window_run`].
    plain_window: bool,
    /// The file's hash seed (header words, fixed at creation), read once.
    seed: [u64; 2],
    /// A keyed limit's table slots ([`Keyed::slots`]), 0 when unkeyed.
    key_slots: usize,
    /// Read by every bucket decision, written only when a retune makes it refill: on a cache
    /// line (pair) of its own, so that writes to whatever the process keeps next to the handle
    /// (the handle is often a field of a larger, mutable struct) never evict it.
    cache: CachePadded<[ParamCache; 2]>,
    /// This limit's identity in the grants it makes: its index and the file's hash seed.
    origin: u64,
    /// Clock time at which this handle next checks that its file is still the one at the path
    /// (one compare per decision; the check itself is off the hot path). Zero once moved.
    next_check: AtomicU64,
    /// The same limit in the file that replaced this one, once noticed.
    moved: OnceLock<Box<Limit<C>>>,
}

// SAFETY: the raw pointers point into the mapping owned by `shared` (an Arc kept alive by every
// handle), at offsets validated at attach; they are only used to form `&AtomicU64`, which is Sync.
unsafe impl<C: Clock> Send for Limit<C> {}
// SAFETY: as for Send: all access through the pointers is atomic.
unsafe impl<C: Clock> Sync for Limit<C> {}

impl<C: Clock> Clone for Limit<C> {
    fn clone(&self) -> Self {
        Limit {
            shared: Arc::clone(&self.shared),
            clock: self.clock.clone(),
            params: self.params,
            index: self.index,
            control: self.control,
            area: self.area,
            area_words: self.area_words,
            tally: self.tally,
            keyed: self.keyed,
            split: self.split,
            plain_bucket: self.plain_bucket,
            plain_window: self.plain_window,
            seed: self.seed,
            key_slots: self.key_slots,
            cache: CachePadded::new([self.cache[0].copy(), self.cache[1].copy()]),
            origin: self.origin,
            // Relaxed: a time; a stale copy only makes the clone check sooner.
            next_check: AtomicU64::new(self.next_check.load(Ordering::Relaxed)),
            moved: self.moved.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Limit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limit")
            .field("name", &self.name())
            .field("algorithm", self.algorithm())
            .finish()
    }
}

impl<C: Clock> Limit<C> {
    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.def().name
    }

    /// Its definition as stored in the file.
    pub fn def(&self) -> &LimitDef {
        &self.shared.mapped.defs[self.index]
    }

    /// Its algorithm and parameters as defined at creation.
    pub fn algorithm(&self) -> &Algorithm {
        &self.def().algorithm
    }

    /// The most one decision can grant under the current (possibly retuned) parameters.
    pub fn capacity(&self) -> u64 {
        match self.live_algorithm() {
            // A split bucket grants at most one sub-bucket's capacity at once.
            Ok(a) if self.split > 1 => a.capacity().div_ceil(self.split as u64),
            Ok(a) => a.capacity(),
            Err(_) => 0,
        }
    }

    /// True for a token bucket split into sub-buckets.
    pub(crate) fn is_split(&self) -> bool {
        self.split > 1
    }

    /// The clock this handle decides with.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Word `i` of the limit's control line.
    #[inline(always)]
    pub(crate) fn control(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < layout::LINE / 8);
        // SAFETY: `control` points at the 16 aligned words of this limit's control line inside the
        // live mapping (established in `limit_at` from the validated geometry); `i < 16`.
        unsafe { &*self.control.add(i) }
    }

    /// The words after the control line: log entries, permits, or the key table.
    #[inline(always)]
    pub(crate) fn area(&self) -> &[AtomicU64] {
        // SAFETY: `area` points at `area_words` aligned words of this limit's state area inside
        // the live mapping (established in `limit_at`).
        unsafe { std::slice::from_raw_parts(self.area, self.area_words) }
    }

    /// The hash seed of the file's keyed tables (16 bytes, chosen at creation).
    #[inline(always)]
    pub(crate) fn hash_seed(&self) -> [u64; 2] {
        self.seed
    }

    /// The slots of a keyed limit's table (0 for an unkeyed limit).
    #[inline(always)]
    pub(crate) fn key_slots(&self) -> usize {
        self.key_slots
    }

    /// The shared file this limit lives in.
    pub(crate) fn mapped(&self) -> &Mapped {
        &self.shared.mapped
    }

    /// In-process parameters.
    pub(crate) fn params(&self) -> Params {
        self.params
    }

    /// The token bucket's parameters in slot `tag`, validated against the slot's check word
    /// (a fleet share's too: these are the slot's parameters, not what a fenced decision uses;
    /// see [`Limit::bucket_at`]).
    #[inline(always)]
    pub(crate) fn bucket_params(&self, tag: usize) -> Result<Gcra> {
        self.slot_params(bucket::PARAMS[tag & 1]).map(|(g, _)| g)
    }

    /// The parameters in the slot at control word `base` (emission, capacity, check), and
    /// whether the slot is a fleet share (its check carries [`bucket::FLEET`]).
    #[inline(always)]
    fn slot_params(&self, base: usize) -> Result<(Gcra, bool)> {
        // A mismatch means a retune is between its stores: spin, exponentially longer each time
        // (crossbeam's Backoff, at most 2^6 spin hints a round), rather than re-reading the
        // line the retuning process is writing at once.
        let backoff = Backoff::new();
        for _ in 0..64 {
            // Acquire on the check word: pairs with the Release store a retune ends with, so the
            // two parameter words read after it are at least as new. A torn read fails the check.
            let check = self.control(base + 2).load(Ordering::Acquire);
            let emission_ns = self.control(base).load(Ordering::Relaxed);
            let capacity = self.control(base + 1).load(Ordering::Relaxed);
            // A retune writes the two words, then the check: a read that mixes versions fails
            // the check and is retried.
            let mark = bucket::check(emission_ns, capacity) ^ check;
            if mark == 0 || mark == bucket::FLEET {
                if emission_ns == 0 || capacity == 0 || capacity > MAX_CAPACITY {
                    break;
                }
                return match capacity.checked_mul(emission_ns) {
                    Some(tol) if tol <= 1 << 62 => Ok((
                        Gcra {
                            emission_ns,
                            tolerance_ns: tol,
                            capacity,
                        },
                        mark != 0,
                    )),
                    _ => break,
                };
            }
            backoff.spin();
        }
        Err(self.fault(Fault::Corrupt))
    }

    /// The parameters a decision at `now` uses for slot `tag`: the slot's, unless it is a fleet
    /// share whose lease deadline does not cover `now` (then the fence's).
    pub(crate) fn bucket_at(&self, tag: usize, now: u64) -> Result<BucketAt> {
        let (g, fleet) = self.slot_params(bucket::PARAMS[tag & 1])?;
        if !fleet {
            return Ok(BucketAt {
                g,
                fenced: false,
                horizon_ns: u64::MAX,
            });
        }
        // Acquire: pairs with the Release store of a deadline (after the check load above).
        let deadline = self.control(bucket::DEADLINE).load(Ordering::Acquire);
        if bucket::leased(deadline, now) {
            return Ok(BucketAt {
                g,
                fenced: false,
                horizon_ns: deadline - now,
            });
        }
        Ok(BucketAt {
            g: self.fence_params()?,
            fenced: true,
            horizon_ns: u64::MAX,
        })
    }

    /// The fence slot: what a fleet-managed bucket decides with once its lease has passed.
    fn fence_params(&self) -> Result<Gcra> {
        match self.slot_params(bucket::FENCE)? {
            (g, false) => Ok(g),
            // A fence slot is never itself a fleet share.
            (_, true) => Err(self.fault(Fault::Corrupt)),
        }
    }

    /// A window's live limit.
    #[inline(always)]
    fn window_limit(&self) -> Result<u64> {
        self.window_limit_fast()
            .map_err(|_| self.fault(Fault::Corrupt))
    }

    /// The pure decision for one single-word state (token bucket, fixed or sliding window) at
    /// `now`: shared by unkeyed limits and key slots.
    #[inline(always)]
    pub(crate) fn step_word(&self, now: u64, word: u64, cost: u64) -> Result<Step> {
        self.step_fast(now, word, cost)
            .map_err(|e| self.step_error(e, cost))
    }

    /// [`Limit::step_word`] with a small, `Copy` error, so the hot path passes it in registers;
    /// [`Limit::step_error`] makes the [`Error`] out of line.
    #[inline(always)]
    pub(crate) fn step_fast(&self, now: u64, word: u64, cost: u64) -> Result<Step, StepError> {
        match self.params {
            Params::TokenBucket => self.bucket_step(now, word, cost),
            Params::FixedWindow(fw) => self.fixed_step(fw, now, word, cost),
            Params::SlidingWindow(sw) => self.sliding_step(sw, now, word, cost),
            Params::SlidingLog(_) | Params::Concurrency { .. } => Err(StepError::NoWord),
        }
    }

    /// A fixed window's pure decision at its live limit.
    #[inline(always)]
    fn fixed_step(
        &self,
        fw: FixedWindow,
        now: u64,
        word: u64,
        cost: u64,
    ) -> Result<Step, StepError> {
        let limit = self.live_window_limit(cost)?;
        Ok(FixedWindow { limit, ..fw }.step(now, word, cost))
    }

    /// A sliding window's pure decision at its live limit.
    #[inline(always)]
    fn sliding_step(
        &self,
        sw: SlidingWindow,
        now: u64,
        word: u64,
        cost: u64,
    ) -> Result<Step, StepError> {
        let limit = self.live_window_limit(cost)?;
        Ok(SlidingWindow { limit, ..sw }.step(now, word, cost))
    }

    /// A window's live limit, if it can ever grant `cost`.
    #[inline(always)]
    fn live_window_limit(&self, cost: u64) -> Result<u64, StepError> {
        let limit = self.window_limit_fast()?;
        if cost > limit {
            return Err(StepError::Cost(limit));
        }
        Ok(limit)
    }

    /// The [`Error`] for a [`StepError`], made out of line.
    #[cold]
    #[inline(never)]
    pub(crate) fn step_error(&self, e: StepError, cost: u64) -> Error {
        match e {
            StepError::Corrupt => self.fault(Fault::Corrupt),
            StepError::Cost(capacity) => Error::CostExceedsCapacity { cost, capacity },
            StepError::NoWord => self.wrong_kind("has no single-word state"),
            // `step_fast` turns it into a denial; it never gets here.
            StepError::Fenced => self.fault(Fault::Corrupt),
        }
    }

    /// The bucket's parameters in slot `tag`, from this handle's cache while the slot's check
    /// word is the one the cache was filled for: one load of the (already fetched) control line
    /// and a compare, instead of reading and re-validating three words on every decision.
    ///
    /// A fleet share's slot (its check carries [`bucket::FLEET`]) costs one more compare, one
    /// load of the deadline word on the same 64 bytes and one compare with `now`; once the
    /// deadline has passed the decision uses the fence slot instead (cold path).
    #[inline(always)]
    fn bucket_cached(&self, tag: usize, now: u64, cost: u64) -> Result<Gcra, StepError> {
        let tag = tag & 1;
        // Acquire: pairs with the Release store that ends a retune of this slot.
        let check = self
            .control(bucket::PARAMS[tag] + 2)
            .load(Ordering::Acquire);
        let c = &self.cache[tag];
        // Acquire: pairs with the Release store of `fill_cache`, so the values are its.
        if c.check.load(Ordering::Acquire) == check {
            // Relaxed: published by the Acquire load of the check above.
            let emission_ns = c.emission.load(Ordering::Relaxed);
            let capacity = c.capacity.load(Ordering::Relaxed);
            let g = Gcra {
                emission_ns,
                // At most 2^62: the pair was validated when a fill stored it (and the check
                // below proves the pair is one fill's).
                tolerance_ns: emission_ns.wrapping_mul(capacity),
                capacity,
            };
            // Two threads refilling for different retunes could interleave their stores: the
            // values must still be the ones the check word names.
            let mark = bucket::check(g.emission_ns, g.capacity) ^ check;
            if mark == 0 {
                return Ok(g);
            }
            if mark == bucket::FLEET {
                return self.fleet_gate(g, now, cost);
            }
        }
        self.fill_cache(tag, now, cost)
    }

    /// A fleet share `g` at `now`: `g` while the lease deadline covers `now`, else the fence.
    #[inline(always)]
    fn fleet_gate(&self, g: Gcra, now: u64, cost: u64) -> Result<Gcra, StepError> {
        // Acquire: pairs with the agent's Release store of the deadline, after the check load.
        if bucket::leased(self.control(bucket::DEADLINE).load(Ordering::Acquire), now) {
            Ok(g)
        } else {
            self.fenced(cost)
        }
    }

    #[cold]
    #[inline(never)]
    fn fenced(&self, cost: u64) -> Result<Gcra, StepError> {
        let g = self.fence_params().map_err(|_| StepError::Corrupt)?;
        if cost > g.capacity {
            return Err(StepError::Fenced);
        }
        Ok(g)
    }

    #[cold]
    #[inline(never)]
    fn fill_cache(&self, tag: usize, now: u64, cost: u64) -> Result<Gcra, StepError> {
        let (g, fleet) = self
            .slot_params(bucket::PARAMS[tag & 1])
            .map_err(|_| StepError::Corrupt)?;
        let c = &self.cache[tag];
        let check =
            bucket::check(g.emission_ns, g.capacity) ^ if fleet { bucket::FLEET } else { 0 };
        // Relaxed: published by the Release store of the check word below.
        c.emission.store(g.emission_ns, Ordering::Relaxed);
        c.capacity.store(g.capacity, Ordering::Relaxed);
        c.check.store(check, Ordering::Release);
        if fleet {
            return self.fleet_gate(g, now, cost);
        }
        Ok(g)
    }

    /// A window's live limit, with the small error of the hot path.
    #[inline(always)]
    fn window_limit_fast(&self) -> Result<u64, StepError> {
        // Relaxed: the packed word carries its own check; it orders nothing else.
        unpack_window_limit(self.control(layout::WINDOW_LIMIT).load(Ordering::Relaxed))
            .ok_or(StepError::Corrupt)
    }

    /// The word after refunding `decision` (admitted earlier) from a single-word state.
    pub(crate) fn refund_word(
        &self,
        now: u64,
        word: u64,
        decision: &Decision,
        units: u64,
    ) -> Result<u64> {
        Ok(match self.params {
            Params::TokenBucket => {
                let tag = word & bucket::PARAM_TAG;
                let g = self.bucket_params((tag >> 63) as usize)?;
                g.refund(now, word & !bucket::PARAM_TAG, units) | tag
            }
            Params::FixedWindow(fw) => fw.refund(word, decision.stamp, units),
            Params::SlidingWindow(sw) => sw.refund(word, decision.stamp, units),
            Params::SlidingLog(_) | Params::Concurrency { .. } => {
                return Err(self.wrong_kind("has no single-word state"))
            }
        })
    }

    /// Whether a single-word state is equivalent to a fresh one at `now` (full bucket, windows
    /// expired): such a state can be dropped or reused without losing anything.
    pub(crate) fn is_fresh_word(&self, now: u64, word: u64) -> bool {
        match self.params {
            Params::TokenBucket => word & !bucket::PARAM_TAG <= now,
            Params::FixedWindow(fw) => fw.is_fresh(now, word),
            Params::SlidingWindow(sw) => sw.is_fresh(now, word),
            Params::SlidingLog(_) | Params::Concurrency { .. } => false,
        }
    }

    /// Admit `cost` units now, or deny and consume nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`]; [`Error::CostExceedsCapacity`] when `cost` can never be granted;
    /// [`Error::CorruptState`] when the shared state is damaged (fail closed);
    /// [`Error::WrongKind`] on a keyed or concurrency limit.
    #[inline(always)]
    pub(crate) fn try_acquire(&self, cost: u64) -> Result<Decision> {
        self.run(cost, true, None)
    }

    /// The decision [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire) would make now, consuming nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire).
    #[inline(always)]
    pub(crate) fn peek(&self, cost: u64) -> Result<Decision> {
        self.run(cost, false, None)
    }

    /// [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire) dated at `now_ns` on the monotonic timeline instead of the clock
    /// (for replaying traces and for tests). A `now_ns` older than the stored state is clamped
    /// as any stale read is.
    ///
    /// A date is checked against the limit's clock (one clock read, on this dated path only): a
    /// date ahead of it by more than [`DATE_TOLERANCE`], or beyond what the state can encode
    /// ([`MAX_DATE_NS`]), is refused, so that no date can leave a state that locks other
    /// processes out, opens the limit to them, or fails their decisions.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::try_acquire`](crate::TokenBucketLimit::try_acquire); [`Error::ClockOutOfRange`] for a date ahead of the clock by
    /// more than [`DATE_TOLERANCE`] or beyond [`MAX_DATE_NS`], consuming nothing.
    pub(crate) fn try_acquire_at(&self, cost: u64, now_ns: u64) -> Result<Decision> {
        self.check_date(now_ns)?;
        self.run(cost, true, Some(now_ns))
    }

    /// Refuse a caller's date that the state cannot encode or that runs ahead of the clock.
    #[inline]
    pub(crate) fn check_date(&self, now_ns: u64) -> Result<()> {
        if now_ns > MAX_DATE_NS || now_ns > self.clock.now_ns().saturating_add(DATE_TOLERANCE_NS) {
            return Err(Error::ClockOutOfRange(now_ns));
        }
        Ok(())
    }

    #[inline(always)]
    fn run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let this = self.follow()?;
        if this.plain_bucket && cost != 0 {
            return this.bucket_run(cost, commit, at);
        }
        if this.plain_window && cost != 0 {
            return this.window_run(cost, commit, at);
        }
        if let (Params::SlidingLog(log), false) = (this.params, this.keyed || cost == 0) {
            return this.log_run(log, cost, commit, || this.decision_time(at));
        }
        this.run_on(cost, commit, || this.decision_time(at))
    }

    /// The decision of a sliding log.
    #[inline(always)]
    fn log_run(
        &self,
        log: SlidingLog,
        cost: u64,
        commit: bool,
        now: impl Fn() -> u64,
    ) -> Result<Decision> {
        if cost > log.limit {
            return Err(Error::CostExceedsCapacity {
                cost,
                capacity: log.limit,
            });
        }
        let decision = log
            .acquire(self.control(0), self.area_log(log), now, cost, commit)
            .map_err(|f| self.fault(f))?;
        Ok(self.finish(decision, cost, commit))
    }

    /// The decision of an unkeyed fixed or sliding window, as [`Limit::bucket_run`]: one loop
    /// per algorithm, its step inlined (one closure over every algorithm compiles to a call
    /// that returns the step through memory).
    #[inline(always)]
    fn window_run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let now = || self.decision_time(at);
        let word = self.control(0);
        let decision = match self.params {
            Params::FixedWindow(fw) => try_decide(
                word,
                now,
                commit,
                #[inline(always)]
                |t, w| self.fixed_step(fw, t, w, cost),
            ),
            Params::SlidingWindow(sw) => try_decide(
                word,
                now,
                commit,
                #[inline(always)]
                |t, w| self.sliding_step(sw, t, w, cost),
            ),
            _ => Err(StepError::NoWord),
        }
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish(decision, cost, commit))
    }

    /// The decision of an unkeyed, unsplit token bucket: the one CAS loop with the bucket's
    /// step and nothing else, so that it compiles to straight-line code (no dispatch on the
    /// algorithm, no call, the decision in registers). Every other limit goes through
    /// [`Limit::run_on`].
    #[inline(always)]
    fn bucket_run(&self, cost: u64, commit: bool, at: Option<u64>) -> Result<Decision> {
        let decision = try_decide(
            self.control(0),
            || self.decision_time(at),
            commit,
            |t, w| self.bucket_step(t, w, cost),
        )
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish(decision, cost, commit))
    }

    /// The first half of a decision dated by a clock read that the caller makes after it (a
    /// composed check reads the clock once for all its limits): the handle to decide on
    /// (following a replacement) and its state word, loaded now. `None` for a limit whose
    /// state is not one word (keyed, split, sliding log, concurrency).
    #[inline(always)]
    pub(crate) fn load_word(&self) -> Result<Option<(&Limit<C>, u64)>> {
        let this = self.follow()?;
        let single = matches!(
            this.params,
            Params::TokenBucket | Params::FixedWindow(_) | Params::SlidingWindow(_)
        );
        if this.keyed || this.split > 1 || !single {
            return Ok(None);
        }
        // Acquire: as in `try_decide`.
        Ok(Some((this, this.control(0).load(Ordering::Acquire))))
    }

    /// The second half: admit `cost` on the handle [`Limit::load_word`] returned, from the word
    /// it loaded, dated `t` (a clock read after that load); a retry reads the clock again.
    /// The replacement check runs at `t` when it is due, as in [`Limit::decision_time`].
    #[inline(always)]
    pub(crate) fn acquire_loaded(&self, word: u64, t: u64, cost: u64) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        let mut first = Some(t);
        let now = || match first.take() {
            Some(t) => {
                // Relaxed: as in `current_at`.
                if t >= self.next_check.load(Ordering::Relaxed) {
                    self.check_due(t);
                }
                t
            }
            None => self.decision_time(None),
        };
        let decision = if self.plain_bucket {
            try_decide_from(self.control(0), word, now, true, |t, w| {
                self.bucket_step(t, w, cost)
            })
        } else {
            try_decide_from(self.control(0), word, now, true, |t, w| {
                self.step_fast(t, w, cost)
            })
        }
        .map_err(|e| self.step_error(e, cost))?;
        Ok(self.finish(decision, cost, true))
    }

    /// The token bucket's pure decision on state word `word` at `now`: the bucket's parameters
    /// from the slot the word's tag names (through this handle's cache), then GCRA.
    #[inline(always)]
    fn bucket_step(&self, now: u64, word: u64, cost: u64) -> Result<Step, StepError> {
        let tag = word & bucket::PARAM_TAG;
        let g = match self.bucket_cached((tag >> 63) as usize, now, cost) {
            Ok(g) => g,
            // Fenced, and the fence's bucket can never grant this much: deny.
            Err(StepError::Fenced) => return Ok(Step::Deny(Decision::denied(u64::MAX, 0, 1))),
            Err(e) => return Err(e),
        };
        if cost > g.capacity {
            return Err(StepError::Cost(g.capacity));
        }
        Ok(match g.step(now, word & !bucket::PARAM_TAG, cost) {
            Step::Admit { new, decision } => Step::Admit {
                new: new | tag,
                decision,
            },
            deny => deny,
        })
    }

    /// What [`Limit::bucket_run`], [`Limit::window_run`] and [`Limit::log_run`] do not decide:
    /// split buckets, and the errors (out of line: inlined, its code makes the hot loops above
    /// allocate registers worse).
    #[inline(never)]
    fn run_on(&self, cost: u64, commit: bool, now: impl Fn() -> u64) -> Result<Decision> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        if self.keyed {
            return Err(self.wrong_kind("is keyed: use try_acquire_key"));
        }
        let decision = match self.params {
            Params::SlidingLog(log) => return self.log_run(log, cost, commit, now),
            Params::Concurrency { .. } => {
                return Err(self.wrong_kind("is a concurrency limit: use try_acquire_permit"))
            }
            Params::TokenBucket if self.split > 1 => self.split_run(cost, commit, now)?,
            _ => try_decide(self.control(0), now, commit, |t, w| {
                self.step_fast(t, w, cost)
            })
            .map_err(|e| self.step_error(e, cost))?,
        };
        let decision = self.finish(decision, cost, commit);
        Ok(decision)
    }

    /// The state word of sub-bucket `i` of a split bucket: word 0 of its line.
    fn sub_state(&self, i: usize) -> &AtomicU64 {
        if i == 0 {
            self.control(0)
        } else {
            &self.area()[(i - 1) * layout::LINE / 8]
        }
    }

    /// Sub-bucket `i`'s share of the bucket `whole`: capacity `B / k` (the remainder spread over
    /// the first sub-buckets) and rate `r / k`. The shares add up to the whole, never more.
    fn sub_params(&self, whole: Gcra, i: usize) -> Gcra {
        let k = self.split as u64;
        let capacity = whole.capacity / k + u64::from((i as u64) < whole.capacity % k);
        let emission_ns = whole.emission_ns.saturating_mul(k);
        Gcra {
            emission_ns,
            tolerance_ns: capacity.saturating_mul(emission_ns),
            capacity,
        }
    }

    /// The sub-bucket this process decides on first: the CPU it runs on (a vDSO call), so that
    /// processes on different CPUs write different lines.
    fn home_sub(&self) -> usize {
        // SAFETY: sched_getcpu has no preconditions; it returns -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        let seed = if cpu >= 0 {
            cpu as usize
        } else {
            std::process::id() as usize
        };
        seed % self.split
    }

    /// A decision on a split bucket: the home sub-bucket first, then each sibling in turn.
    fn split_run(&self, cost: u64, commit: bool, now: impl Fn() -> u64) -> Result<Decision> {
        // Acquire: pairs with the retune's flip of sub-bucket 0, the first one it moves.
        let tag = self.control(0).load(Ordering::Acquire) >> 63;
        let largest = self
            .sub_params(self.bucket_params(tag as usize)?, 0)
            .capacity;
        if cost > largest {
            return Err(Error::CostExceedsCapacity {
                cost,
                capacity: largest,
            });
        }
        let home = self.home_sub();
        let mut denied: Option<Decision> = None;
        for j in 0..self.split {
            let i = (home + j) % self.split;
            let d = try_decide(self.sub_state(i), &now, commit, |t, w| {
                let tag = w & bucket::PARAM_TAG;
                let sub = self.sub_params(self.bucket_at((tag >> 63) as usize, t)?.g, i);
                if cost > sub.capacity {
                    // Only the larger sub-buckets can grant this much: deny here, try a sibling.
                    return Ok(Step::Deny(Decision::denied(u64::MAX, 0, 1)));
                }
                Ok(match sub.step(t, w & !bucket::PARAM_TAG, cost) {
                    Step::Admit { new, decision } => Step::Admit {
                        new: new | tag,
                        decision,
                    },
                    deny => deny,
                })
            })?;
            if d.is_allowed() {
                return Ok(d.stamped(i as u64));
            }
            if denied.is_none_or(|best| d.retry_after_ns() < best.retry_after_ns()) {
                denied = Some(d);
            }
        }
        Ok(denied.unwrap_or_else(|| Decision::denied(u64::MAX, 0, 1)))
    }

    /// Stamp a decision with its cost and origin; a committed one then goes through the
    /// [`Tally`] (shadow mode, counters, near-limit). Shared with the keyed, permit and wait
    /// paths.
    #[inline(always)]
    pub(crate) fn finish(&self, mut decision: Decision, cost: u64, commit: bool) -> Decision {
        decision.cost = cost;
        decision.origin = self.origin;
        if !commit {
            return decision;
        }
        self.tally.after(decision)
    }

    /// Count a grant given back: called once per refund of a whole grant, by every refund path
    /// (so composed checks count their roll-backs).
    ///
    /// A grant of cost 0 counts only when it is shadow-denied (admitted, taking nothing): a
    /// denial, a peek or a grant record without its grant (from C) gives nothing back.
    pub(crate) fn count_refund(&self, grant: &Decision, units: u64) {
        let whole = if grant.cost == 0 {
            grant.shadow_denied
        } else {
            units >= grant.cost
        };
        if grant.is_allowed() && whole {
            self.tally.refunded();
        }
    }

    fn area_log(&self, log: SlidingLog) -> &[AtomicU64] {
        &self.area()[..log.limit as usize]
    }

    #[cold]
    pub(crate) fn fault(&self, fault: Fault) -> Error {
        match fault {
            Fault::Corrupt => Error::CorruptState {
                limit: self.name().to_owned(),
            },
            Fault::ClockRange(ns) => Error::ClockOutOfRange(ns),
        }
    }

    #[cold]
    pub(crate) fn wrong_kind(&self, reason: &str) -> Error {
        Error::WrongKind {
            limit: self.name().to_owned(),
            reason: format!("this limit {reason}"),
        }
    }

    /// Give back what `grant` admitted, for work that was admitted but never done.
    ///
    /// A refund can never create more budget than the grant took: a bucket never fills past
    /// full, a window refund only applies while the grant's window is still counted, and a log
    /// refund frees entries dated no later than the grant. Refunding a denied (or shadow-denied)
    /// decision is a no-op. Refund each grant at most once: a second refund of the same grant
    /// gives its cost back again, which is budget no request returned.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`]; [`Error::WrongKind`] on a keyed or concurrency limit.
    pub(crate) fn refund(&self, grant: &Decision) -> Result<()> {
        self.refund_units(grant, grant.cost)
    }

    /// Give back `units` of what `grant` admitted (at most its cost).
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::refund`](crate::TokenBucketLimit::refund).
    pub(crate) fn refund_units(&self, grant: &Decision, units: u64) -> Result<()> {
        let maker = self.maker_of(grant);
        if !std::ptr::eq(maker, self) {
            return maker.refund_units(grant, units);
        }
        if self.keyed {
            return Err(self.wrong_kind("is keyed: use refund_key"));
        }
        self.check_origin(grant)?;
        let units = units.min(grant.cost);
        if !grant.is_allowed() || units == 0 {
            // A shadow-denied grant took nothing, but it was admitted: giving it back counts.
            self.count_refund(grant, units);
            return Ok(());
        }
        self.refund_state(grant, units)?;
        self.count_refund(grant, units);
        Ok(())
    }

    /// Give `units` of `grant` back to the state.
    fn refund_state(&self, grant: &Decision, units: u64) -> Result<()> {
        match self.params {
            Params::SlidingLog(log) => {
                let now = self.clock.now_ns();
                log.refund(self.control(0), self.area_log(log), now, grant.stamp, units);
                Ok(())
            }
            Params::Concurrency { .. } => {
                Err(self.wrong_kind("is a concurrency limit: drop the permit"))
            }
            Params::TokenBucket if self.split > 1 => {
                let i = grant.stamp as usize % self.split;
                let state = self.sub_state(i);
                // Acquire: pairs with the decisions' AcqRel CAS.
                let mut current = state.load(Ordering::Acquire);
                loop {
                    let tag = current & bucket::PARAM_TAG;
                    let sub = self.sub_params(self.bucket_params((tag >> 63) as usize)?, i);
                    let now = self.clock.now_ns();
                    let new = sub.refund(now, current & !bucket::PARAM_TAG, units) | tag;
                    if new == current {
                        return Ok(());
                    }
                    // AcqRel: a refund is a state change like a decision.
                    match state.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => return Ok(()),
                        Err(actual) => current = actual,
                    }
                }
            }
            _ => self.refund_in(self.control(0), grant, units),
        }
    }

    /// Refuse a grant made by another limit (or another file): refunding it here would give
    /// this limit budget it never granted.
    pub(crate) fn check_origin(&self, grant: &Decision) -> Result<()> {
        if grant.origin != 0 && grant.origin != self.origin {
            return Err(self.wrong_kind("did not make this grant: refund it on the limit that did"));
        }
        Ok(())
    }

    /// The refund CAS loop on one single-word state (unkeyed state or a key's state word).
    pub(crate) fn refund_in(&self, state: &AtomicU64, grant: &Decision, units: u64) -> Result<()> {
        // Acquire: pairs with the decisions' AcqRel CAS.
        let mut current = state.load(Ordering::Acquire);
        loop {
            let new = self.refund_word(self.clock.now_ns(), current, grant, units)?;
            if new == current {
                return Ok(());
            }
            // AcqRel: a refund is a state change like a decision.
            match state.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// Decisions of this limit so far, summed over all processes (see [`Stats`] for how
    /// current they are).
    pub fn stats(&self) -> Stats {
        if let Ok(Some(next)) = self.moved_handle() {
            return next.stats();
        }
        self.tally.read()
    }

    /// The algorithm with its live parameters (after any [`TokenBucketLimit::set_rate`](crate::TokenBucketLimit::set_rate)).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`] when the live parameters are damaged.
    pub fn live_algorithm(&self) -> Result<Algorithm> {
        if let Some(next) = self.moved_handle()? {
            return next.live_algorithm();
        }
        let mut a = *self.algorithm();
        match &mut a {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => {
                // Acquire: pairs with the Release store that ends a retune.
                let active = self.control(bucket::ACTIVE).load(Ordering::Acquire) as usize & 1;
                let g = self.bucket_params(active)?;
                *capacity = g.capacity;
                *emission_ns = g.emission_ns;
            }
            Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => {
                *limit = self.window_limit()?;
            }
            Algorithm::SlidingLog { .. } | Algorithm::Concurrency { .. } => {}
        }
        Ok(a)
    }

    /// Change the refill rate of a token bucket, live: every process attached picks it up on its
    /// next decision, without reopening.
    ///
    /// The tokens already used are carried over (the bucket's fill level in tokens is kept), so
    /// the transition never admits more than the larger of the old and new bounds over any
    /// interval. Retunes are serialised across processes by an exclusive `flock` on the file.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the limit is not a token bucket; [`Error::InvalidParameter`] for a
    /// rate and capacity that do not fit; [`Error::CorruptState`]; [`Error::Io`] if the lock
    /// cannot be taken.
    pub(crate) fn set_rate(&self, rate: Rate) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.set_rate(rate);
        }
        let capacity = match self.live_algorithm()? {
            Algorithm::TokenBucket { capacity, .. } => capacity,
            _ => return self.set_window_rate(rate),
        };
        self.set_token_bucket(capacity, rate)
    }

    /// Change a token bucket's capacity and rate together, live (see [`TokenBucketLimit::set_rate`](crate::TokenBucketLimit::set_rate)).
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_rate`](crate::TokenBucketLimit::set_rate).
    ///
    /// A fleet-managed bucket ([`TokenBucketLimit::fleet_manage`](crate::TokenBucketLimit::fleet_manage)) stays fleet-managed: the new rate holds
    /// until its lease deadline, like the share it replaces.
    pub(crate) fn set_token_bucket(&self, capacity: u64, rate: Rate) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.set_token_bucket(capacity, rate);
        }
        self.retune_bucket(capacity, rate, None)
    }

    /// Retune a token bucket; `fleet`: mark the new slot a fleet share (`Some(true)`), a plain
    /// rate (`Some(false)`), or as the active slot is (`None`).
    fn retune_bucket(&self, capacity: u64, rate: Rate, fleet: Option<bool>) -> Result<()> {
        if !matches!(self.params, Params::TokenBucket) {
            return Err(self.wrong_kind("is not a token bucket"));
        }
        let algo = Algorithm::TokenBucket {
            capacity,
            emission_ns: rate.emission_ns(),
        };
        algo.validate(self.name())?;
        let _guard = self.retune_lock()?;
        self.retune_bucket_locked(capacity, rate, fleet)
    }

    /// [`Limit::retune_bucket`] with the retune lock held.
    fn retune_bucket_locked(&self, capacity: u64, rate: Rate, fleet: Option<bool>) -> Result<()> {
        let active = (self.control(bucket::ACTIVE).load(Ordering::Acquire) & 1) as usize;
        let (old, was_fleet) = self.slot_params(bucket::PARAMS[active])?;
        let mark = if fleet.unwrap_or(was_fleet) {
            bucket::FLEET
        } else {
            0
        };
        let next = 1 - active;
        let base = bucket::PARAMS[next];
        // Relaxed: the slot is inactive (no state word is tagged with it); the Release stores
        // below publish it before any state word points at it.
        self.control(base)
            .store(rate.emission_ns(), Ordering::Relaxed);
        self.control(base + 1).store(capacity, Ordering::Relaxed);
        self.control(base + 2).store(
            bucket::check(rate.emission_ns(), capacity) ^ mark,
            Ordering::Release,
        );
        let new = self.bucket_params(next)?;
        if self.split > 1 {
            for i in 0..self.split {
                self.rescale_in(
                    self.sub_state(i),
                    self.sub_params(old, i),
                    self.sub_params(new, i),
                    next,
                )?;
            }
        } else if !self.keyed {
            self.rescale_in(self.control(0), old, new, next)?;
        } else {
            crate::keyed::rescale_all(self, old, new, next)?;
        }
        // Release: readers of ACTIVE (retuners, resets, inspectors) see the finished slot.
        self.control(bucket::ACTIVE)
            .store(next as u64, Ordering::Release);
        Ok(())
    }

    /// Make this token bucket fleet-managed (see `FLEET.md`): its rate becomes a share that
    /// holds only until the lease deadline ([`TokenBucketLimit::set_fleet_deadline`](crate::TokenBucketLimit::set_fleet_deadline)); a decision past it
    /// decides with the fence bucket `fence_capacity`, `fence_rate` (the host's reserved
    /// minimum, or the floor) instead. The share is set to the fence and the deadline to 0, so
    /// the bucket starts fenced. Calling it again changes the fence (the share and deadline are
    /// then left as they are); the fence must never be above what the host may spend without a
    /// lease.
    ///
    /// The cost on each decision: one compare, one load of the deadline on the 64 bytes the
    /// decision already reads, and one compare with its `now`. Plain buckets pay nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_token_bucket`](crate::TokenBucketLimit::set_token_bucket).
    pub(crate) fn fleet_manage(&self, fence_capacity: u64, fence_rate: Rate) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.fleet_manage(fence_capacity, fence_rate);
        }
        if !matches!(self.params, Params::TokenBucket) {
            return Err(self.wrong_kind("is not a token bucket"));
        }
        Algorithm::TokenBucket {
            capacity: fence_capacity,
            emission_ns: fence_rate.emission_ns(),
        }
        .validate(self.name())?;
        let managed = {
            let _guard = self.retune_lock()?;
            let active = (self.control(bucket::ACTIVE).load(Ordering::Acquire) & 1) as usize;
            let managed = self.slot_params(bucket::PARAMS[active])?.1;
            if !managed {
                // Release: a decision that reads the deadline sees 0 (fenced) or a later one.
                self.control(bucket::DEADLINE).store(0, Ordering::Release);
            }
            let e = fence_rate.emission_ns();
            // The check first, so that a decision reading the slot mid-write fails its check
            // (and retries) rather than mixing two fences; Release on the final check: the
            // words are published with it.
            self.control(bucket::FENCE + 2).store(0, Ordering::Relaxed);
            self.control(bucket::FENCE).store(e, Ordering::Relaxed);
            self.control(bucket::FENCE + 1)
                .store(fence_capacity, Ordering::Relaxed);
            self.control(bucket::FENCE + 2)
                .store(bucket::check(e, fence_capacity), Ordering::Release);
            managed
        };
        if managed {
            return Ok(());
        }
        self.retune_bucket(fence_capacity, fence_rate, Some(true))
    }

    /// Set a fleet-managed bucket's lease deadline, in nanoseconds on this limit's clock (its
    /// [`Clock::now_ns`]): its share holds for decisions dated before it. A deadline more than
    /// 2^40 ns (about 18 minutes) ahead of a decision is treated as damage, and fences.
    ///
    /// Keep the pair (share, deadline) safe at every instant: extend the deadline after a share
    /// is lowered, and before a share is raised.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] if the bucket is not fleet-managed.
    pub(crate) fn set_fleet_deadline(&self, deadline_ns: u64) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.set_fleet_deadline(deadline_ns);
        }
        if self.fleet_lease()?.is_none() {
            return Err(self.wrong_kind("is not fleet-managed (see fleet_manage)"));
        }
        // Release: pairs with the decisions' Acquire load of the deadline; a share published
        // after it (a raise) is only seen with this deadline or a later one.
        self.control(bucket::DEADLINE)
            .store(deadline_ns, Ordering::Release);
        Ok(())
    }

    /// End fleet management: the current share becomes a plain rate, with no deadline.
    ///
    /// # Errors
    ///
    /// As [`TokenBucketLimit::set_token_bucket`](crate::TokenBucketLimit::set_token_bucket).
    pub(crate) fn end_fleet_management(&self) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.end_fleet_management();
        }
        match self.live_algorithm()? {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => self.retune_bucket(capacity, Rate::from_emission_ns(emission_ns)?, Some(false)),
            _ => Err(self.wrong_kind("is not a token bucket")),
        }
    }

    /// Whether this is a token bucket whose live rate is a fleet agent's share.
    pub(crate) fn is_fleet_managed(&self) -> bool {
        matches!(self.fleet_lease(), Ok(Some(_)))
    }

    /// The fleet lease of a fleet-managed token bucket at this instant (`None` for any other
    /// limit).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptState`] when the parameters or the fence are damaged.
    pub fn fleet_lease(&self) -> Result<Option<FleetLease>> {
        if let Some(next) = self.moved_handle()? {
            return next.fleet_lease();
        }
        if !matches!(self.params, Params::TokenBucket) {
            return Ok(None);
        }
        // Acquire: pairs with the Release store that ends a retune.
        let active = self.control(bucket::ACTIVE).load(Ordering::Acquire) as usize & 1;
        let (g, fleet) = self.slot_params(bucket::PARAMS[active])?;
        if !fleet {
            return Ok(None);
        }
        let now = self.clock.now_ns();
        // Acquire: as a decision reads it.
        let deadline_ns = self.control(bucket::DEADLINE).load(Ordering::Acquire);
        let fence = self.fence_params()?;
        let algo = |g: Gcra| Algorithm::TokenBucket {
            capacity: g.capacity,
            emission_ns: g.emission_ns,
        };
        Ok(Some(FleetLease {
            share: algo(g),
            fence: algo(fence),
            deadline_ns,
            now_ns: now,
            leased: bucket::leased(deadline_ns, now),
        }))
    }

    /// Move one bucket state from parameters `old` to `new` (slot `tag`), keeping its tokens.
    pub(crate) fn rescale_in(
        &self,
        state: &AtomicU64,
        old: Gcra,
        new: Gcra,
        tag: usize,
    ) -> Result<()> {
        // Acquire: pairs with the decisions' AcqRel CAS.
        let mut current = state.load(Ordering::Acquire);
        loop {
            if (current >> 63) as usize == tag {
                return Ok(()); // already moved
            }
            let word = rescale_word(self.clock.now_ns(), current, old, new, tag);
            // AcqRel: the flip publishes the new slot (Release) to whoever decides next.
            match state.compare_exchange(current, word, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    fn set_window_rate(&self, rate: Rate) -> Result<()> {
        let window_ns = match self.params {
            Params::FixedWindow(fw) if fw.window_ns == crate::algo::fixed_window::MONTHS => {
                Rate::MONTH_NS
            }
            Params::FixedWindow(fw) => fw.window_ns,
            Params::SlidingWindow(sw) => sw.window_ns,
            _ => return Err(self.wrong_kind("has no rate to change")),
        };
        // The limit per window that `rate` means, rounded down (never looser).
        let limit = (window_ns as u128 / rate.emission_ns() as u128) as u64;
        self.set_limit(limit)
    }

    /// Change a fixed or sliding window's limit `L`, live. Within the window in which it changes,
    /// at most the larger of the old and new limits is admitted.
    ///
    /// # Errors
    ///
    /// [`Error::WrongKind`] for other algorithms; [`Error::InvalidParameter`] for a bad limit.
    pub(crate) fn set_limit(&self, limit: u64) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.set_limit(limit);
        }
        let mut algo = *self.algorithm();
        match &mut algo {
            Algorithm::FixedWindow { limit: l, .. } | Algorithm::SlidingWindow { limit: l, .. } => {
                *l = limit
            }
            _ => return Err(self.wrong_kind("is not a fixed or sliding window")),
        }
        algo.validate(self.name())?;
        let _guard = self.retune_lock()?;
        self.store_window_limit(limit);
        Ok(())
    }

    fn store_window_limit(&self, limit: u64) {
        // Release: one word holds the limit and its check; decisions read it whole.
        self.control(layout::WINDOW_LIMIT)
            .store(pack_window_limit(limit), Ordering::Release);
    }

    /// Return the limit's state to fresh (full bucket, empty windows, log and table, no permits),
    /// keeping its live parameters. What this grants: the whole capacity, at once.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the retune lock cannot be taken.
    pub fn reset(&self) -> Result<()> {
        if let Some(next) = self.moved_handle()? {
            return next.reset();
        }
        let _guard = self.retune_lock()?;
        file::reset_limit(&self.shared.mapped, self.index);
        Ok(())
    }

    /// Hold this process's tuning mutex and an exclusive `flock` on the file.
    fn retune_lock(&self) -> Result<RetuneGuard<'_>> {
        self.shared.lock()
    }

    /// Retune to `algorithm` (same kind; what a live retune can change) under a held lock.
    fn retune_to(&self, algorithm: &Algorithm, _locked: &RetuneGuard<'_>) -> Result<()> {
        match *algorithm {
            Algorithm::TokenBucket {
                capacity,
                emission_ns,
            } => self.retune_bucket_locked(capacity, Rate::from_emission_ns(emission_ns)?, None),
            Algorithm::FixedWindow { limit, .. } | Algorithm::SlidingWindow { limit, .. } => {
                self.store_window_limit(limit);
                Ok(())
            }
            _ => Err(self.wrong_kind("cannot be retuned live")),
        }
    }

    /// The handle to decide with at clock time `t`: this one, or (after its file was
    /// replaced) the same limit in the new file. One compare unless a check is due.
    #[inline(always)]
    pub(crate) fn current_at(&self, t: u64) -> Result<&Limit<C>> {
        // Relaxed: a time; a stale value only moves the check by one decision.
        if t < self.next_check.load(Ordering::Relaxed) {
            return Ok(self);
        }
        self.recheck(t)
    }

    /// The handle a decision runs on: this one, or, once a replacement was noticed (the next
    /// check time is then 0), the handle of the file that replaced it. One load on the hot path.
    #[inline(always)]
    pub(crate) fn follow(&self) -> Result<&Limit<C>> {
        // Relaxed: a time; 0 sends every later decision to the slow path.
        if self.next_check.load(Ordering::Relaxed) != 0 {
            return Ok(self);
        }
        self.recheck(self.clock.now_ns())
    }

    /// The time of one attempt of a decision, read after the attempt loaded the state word (so
    /// that it is never older than the time of the decision that wrote the word), or the
    /// caller's date `at`. The clock read doubles as the time of the replacement check: once it
    /// is due, the check runs here, off the hot path; the decision under way still completes on
    /// this file (so a replaced file serves at most one more decision per handle), and the next
    /// one starts on the file that replaced it. A failed check is reported by the next call,
    /// through [`Limit::follow`].
    #[inline(always)]
    pub(crate) fn decision_time(&self, at: Option<u64>) -> u64 {
        let t = self.clock.now_ns();
        // Relaxed: as in `current_at`.
        if t >= self.next_check.load(Ordering::Relaxed) {
            self.check_due(t);
        }
        at.unwrap_or(t)
    }

    #[cold]
    #[inline(never)]
    fn check_due(&self, t: u64) {
        if t != 0 && self.recheck(t).is_err() {
            // Relaxed: as in `current_at`.
            self.next_check.store(0, Ordering::Relaxed);
        }
    }

    /// [`Limit::current_at`] at the clock's time now.
    #[inline(always)]
    pub(crate) fn current(&self) -> Result<&Limit<C>> {
        self.current_at(self.clock.now_ns())
    }

    /// Check, off the hot path, that the file is still the one at the path; move to its
    /// replacement once it is not.
    #[cold]
    #[inline(never)]
    fn recheck(&self, t: u64) -> Result<&Limit<C>> {
        if let Some(next) = self.moved.get() {
            return next.current_at(t);
        }
        match self.shared.check(t)? {
            None => {
                // Relaxed: times; see `current_at`.
                let next = self.shared.watch.next_check.load(Ordering::Relaxed);
                self.next_check.store(next, Ordering::Relaxed);
                Ok(self)
            }
            Some(mut shared) => {
                // The file that replaced this one may have been replaced in turn (a deploy that
                // removed this limit, then one that restored it): follow the chain to the file
                // at the path now. Each link checks its own path at most once per interval.
                for _ in 0..16 {
                    match shared.check(t)? {
                        Some(next) => shared = next,
                        None => break,
                    }
                }
                let limiter = Limiter {
                    shared,
                    clock: self.clock.clone(),
                };
                let limit = limiter.limit(self.name()).map_err(|_| {
                    reattach_error(
                        &self.shared.mapped.path,
                        format!(
                            "the file now at the path has no limit {}",
                            reconcile::quote(self.name())
                        ),
                    )
                })?;
                let next = self.moved.get_or_init(|| Box::new(limit));
                // Relaxed: every later decision takes the slow path to the new file.
                self.next_check.store(0, Ordering::Relaxed);
                next.current_at(t)
            }
        }
    }

    /// For management and inspection calls: the handle of the file that replaced this one, once
    /// the replacement check (at most once per [`REPLACEMENT_CHECK`], as decisions run it) has
    /// noticed it, or `None` while this is still the file at the path.
    pub(crate) fn moved_handle(&self) -> Result<Option<&Limit<C>>> {
        let this = self.current()?;
        Ok((!std::ptr::eq(this, self)).then_some(this))
    }

    /// The random id of the file this handle decides on.
    pub(crate) fn file_id(&self) -> u64 {
        self.shared.mapped.ident.file_id
    }

    /// The handle of the file that replaced this one, once noticed.
    pub(crate) fn moved_to(&self) -> Option<&Limit<C>> {
        self.moved.get().map(|next| &**next)
    }

    /// The handle that made `grant`: this one, or one of the files that replaced it.
    pub(crate) fn maker_of(&self, grant: &Decision) -> &Limit<C> {
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

struct RetuneGuard<'a> {
    fd: i32,
    _local: std::sync::MutexGuard<'a, ()>,
}

impl Drop for RetuneGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `fd` is still open (the mapping's File outlives the guard); unlocking has no
        // memory preconditions.
        unsafe { libc::flock(self.fd, libc::LOCK_UN) };
    }
}

/// A bucket state computed with `old` parameters, re-expressed with `new` ones (slot `tag`):
/// the tokens in use `(tat - now) / T_old` are kept, rounded up.
pub(crate) fn rescale_word(now: u64, word: u64, old: Gcra, new: Gcra, tag: usize) -> u64 {
    let tat = word & !bucket::PARAM_TAG;
    let used = tat.saturating_sub(now) as u128;
    let scaled = (used * new.emission_ns as u128).div_ceil(old.emission_ns as u128);
    let scaled = scaled.min((new.tolerance_ns as u128) * 2) as u64;
    let tat = if used == 0 { tat } else { now + scaled };
    (tat & !bucket::PARAM_TAG) | ((tag as u64) << 63)
}
