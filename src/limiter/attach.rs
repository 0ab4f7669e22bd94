//! [`Limiter`]: one attached file, and the handles of its limits.

use crate::engine::bucket::Bucket;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::file::layout::word;
use crate::file::reboot::RebootInfo;
use crate::file::{self, Mapped};
use crate::spec::LimitDef;

use super::{sync_files, Builder, FileInfo, Limit, Shared};
use crate::engine::site::Site;

/// One attached limiter file. Cheap to clone; every clone shares the mapping.
///
/// See [`Builder`] for an example.
pub struct Limiter<C: Clock = MonotonicClock> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) clock: C,
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
    pub(super) fn from_mapped(mapped: Mapped, clock: C) -> Result<Limiter<C>> {
        Ok(Limiter {
            shared: Arc::new(Shared::new(mapped)),
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
                if def.fleet.is_none() && !Bucket(&limit).is_fleet_managed() {
                    if let Ok(a) = limit.live_algorithm() {
                        def.algorithm = a;
                    }
                }
                def
            })
            .collect()
    }

    /// Start the helper thread of [`Builder::sync_every`].
    pub(super) fn syncing(self, every: Option<Duration>) -> Self {
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

    /// The limit definitions stored in the file, as created: before any retune or adopted
    /// change ([`Limiter::live_definitions`] has the live ones, [`Limit::live_algorithm`] one
    /// limit's). The Python and Node packages' `definitions()` are the live ones.
    pub fn definitions(&self) -> &[LimitDef] {
        &self.shared.mapped.defs
    }

    /// The file's path as it was opened.
    pub fn path(&self) -> &Path {
        &self.shared.mapped.path
    }

    /// How many times the state was reset because the host rebooted (files created with
    /// [`OnReboot::Reset`](crate::OnReboot::Reset)).
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
        Ok(Limit::of(self.limit_at(index)))
    }

    /// Handles for every limit, in definition order.
    pub fn limits(&self) -> Vec<Limit<C>> {
        (0..self.shared.params.len())
            .map(|i| Limit::of(self.limit_at(i)))
            .collect()
    }

    pub(crate) fn limit_at(&self, index: usize) -> Site<C> {
        Site::at(&self.shared, self.clock.clone(), index)
    }
}
