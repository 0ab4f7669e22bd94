//! [`Builder`]: defining limits, and creating, attaching to, adopting or snapshotting a file.

use crate::engine::bucket::Bucket;
use crate::engine::reboot::HOOKS;
use std::path::Path;
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::file::reboot::OnReboot;
use crate::file::{self, Access};
use crate::reconcile::{self, OnConflict};
use crate::spec::{Algorithm, IntoAlgorithm, Keyed, LimitDef};

use super::Limiter;

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
    pub(super) fn new() -> Self {
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
            let mapped = file::create_or_open(path, &self.defs, &self.access, &HOOKS)?;
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
    pub(super) fn adopt(&self, limiter: &Limiter<C>, path: &Path) -> Result<bool> {
        let guard = limiter.shared.lock()?;
        if !limiter.shared.still_at_path() {
            return Ok(false); // replaced meanwhile: look at the file that is there now
        }
        // Another process may have adopted while this one waited for the lock.
        let diff = reconcile::diff(&self.defs, &limiter.live_definitions());
        if diff.is_empty() {
            return Ok(true);
        }
        // A fleet-managed bucket's live rate belongs to its fleet agent (docs/fleet.md): a retune
        // would overwrite the agent's share, and a new file would start unmanaged (at its
        // configured rate, beyond the fleet's total) while the agent kept leasing the old one.
        let names: Vec<String> = (0..limiter.shared.params.len())
            .map(|i| limiter.limit_at(i))
            .filter(|l| Bucket(l).is_fleet_managed())
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
            &HOOKS,
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
        let mapped = file::open(path.as_ref(), &self.access, &HOOKS)?;
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
        let mapped = file::open_snapshot(path.as_ref(), &self.access, &HOOKS)?;
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
