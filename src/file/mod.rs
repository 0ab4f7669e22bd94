//! The shared file: creation, validation, mapping, and boot resets.
//!
//! # Implementation details
//!
//! **Creation is race-free without waiting.** A creator writes the complete file (header,
//! definitions, zeroed state) into an unnamed `O_TMPFILE` in the target directory and only then
//! links it into place with `linkat`, which fails with `EEXIST` if another creator won. A losing
//! creator opens the winner's file instead. No process can ever observe a half-initialised file,
//! so no opener waits on an init flag. Where `O_TMPFILE` is unsupported, a uniquely named
//! temporary file and `link(2)` give the same guarantee. All-zero state is the fresh state of every
//! algorithm, so the state region needs no writes at all.
//!
//! **Opening validates everything before mapping.** The header and definitions are read with
//! `pread` (so a damaged file cannot fault us), checked (magic, version, init state, checksum,
//! every definition, a geometry recomputed from the definitions, the size on disk, the time
//! namespace), and only then is the file mapped, at exactly the validated size. Geometry is then
//! kept in process memory and never re-read from the file.
//!
//! **SIGBUS.** A process that truncates a mapped file makes the next access to the lost pages raise
//! SIGBUS in every process that maps it. Opens refuse any file whose size differs from its
//! header's; nothing in this crate ever resizes a file after publication. Protect the directory
//! (the default `/dev/shm` is sticky, and files are created 0600; world-writable modes are
//! refused).
//!
//! A write to a page of a *hole* raises SIGBUS too when the filesystem is full. So every block
//! of a new file is allocated (`fallocate`) before the file is linked into place: a full
//! filesystem is `ENOSPC` at creation, with nothing at the path. An open of a file that still
//! has holes (made by an older build, or copied sparse) allocates them the same way before it
//! maps the file, or fails with `ENOSPC` having touched no page. A snapshot
//! ([`open_snapshot`]) reads the data extents with `pread` and allocates nothing.

pub(crate) mod layout;
pub(crate) mod lock;
pub(crate) mod reboot;
mod words;

mod attach;
mod checks;
mod create;

use attach::attach;
use checks::{check_directory, check_mode, parent_dir};
use create::{allocate_holes, create_new, random_seed};
pub(crate) use words::Words;

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::spec::{validate_name, LimitDef};
use layout::{word, Geometry, MAX_LIMITS};
use reboot::EngineHooks;

/// Who may open a file, and how it is created.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    /// Permission bits of a created file, and the most an opened file may grant.
    pub mode: u32,
    /// Accept a file owned by another user.
    pub allow_other_owner: bool,
    /// Accept a file in a directory that others may write without the sticky bit (where anyone
    /// who can write the directory can replace the file).
    pub allow_unsafe_directory: bool,
    /// What a created file does at a reboot; `Some` also requires an opened file to agree.
    pub on_reboot: Option<reboot::OnReboot>,
}

impl Default for Access {
    fn default() -> Self {
        Access {
            mode: 0o600,
            allow_other_owner: false,
            allow_unsafe_directory: false,
            on_reboot: None,
        }
    }
}

/// What names one limiter file: the device and inode it was opened as, and the random id its
/// creator wrote in its header. A path that stops naming both is a replaced file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ident {
    pub dev: u64,
    pub ino: u64,
    pub file_id: u64,
}

/// A validated, mapped limiter file.
pub(crate) struct Mapped {
    map: MmapRaw,
    len: usize,
    /// The path as the caller gave it (messages, `Limiter::path`).
    pub path: PathBuf,
    /// The path made absolute against the working directory at open: what the replacement
    /// check looks at, so that a process that changes its directory keeps watching its file.
    pub anchor: PathBuf,
    pub geometry: Geometry,
    pub defs: Vec<LimitDef>,
    pub file: File,
    /// The file as it was opened.
    pub ident: Ident,
    /// The access checks it was opened with (a re-attach uses them again).
    pub access: Access,
}

// The mapping is only ever accessed through atomics at validated offsets.

impl Mapped {
    /// The word at byte `offset`.
    ///
    /// # Panics
    ///
    /// If `offset` is unaligned or out of the mapping: offsets come from the local geometry, so
    /// that would be a bug in this crate, never a consequence of file contents.
    pub fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset % 8 == 0 && offset + 8 <= self.len,
            "word offset {offset} out of bounds"
        );
        // SAFETY: [1] the offset is 8-aligned and in bounds (checked above) of a mapping that is
        // page-aligned and lives as long as `self`; [2] the memory is shared with other processes
        // that only ever access it atomically, which is exactly what AtomicU64 permits; [3] the
        // file's size was validated equal to the mapping's, so the pages exist (see module docs on
        // SIGBUS).
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u64>()) }
    }

    /// `count` consecutive words starting at byte `offset`.
    ///
    /// # Panics
    ///
    /// As [`Mapped::word`].
    pub fn words(&self, offset: usize, count: usize) -> &[AtomicU64] {
        assert!(
            offset % 8 == 0
                && count
                    .checked_mul(8)
                    .and_then(|b| b.checked_add(offset))
                    .is_some_and(|end| end <= self.len),
            "words {offset}+{count} out of bounds"
        );
        // SAFETY: as in `word`, for every element: the range is aligned and in bounds, and
        // `[AtomicU64]` has the layout of `[u64]`.
        unsafe {
            std::slice::from_raw_parts(self.map.as_mut_ptr().add(offset).cast::<AtomicU64>(), count)
        }
    }

    /// `msync(MS_SYNC)` of the whole mapping: its dirty pages are on the disk on return.
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }

    pub fn header(&self, index: usize) -> u64 {
        // Acquire: pairs with the Release stores of a boot reset.
        self.word(index * 8).load(Ordering::Acquire)
    }
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> Error {
    if source.raw_os_error() == Some(libc::ELOOP) {
        return Error::Symlink(path.to_owned());
    }
    // A socket (ENXIO) or a device without a driver (ENODEV) cannot be opened at all: say what
    // the path is rather than how opening it failed.
    if matches!(
        source.raw_os_error(),
        Some(libc::ENXIO | libc::ENODEV | libc::EISDIR)
    ) {
        if let Ok(meta) = fs::symlink_metadata(path) {
            if !meta.file_type().is_file() {
                return Error::NotRegularFile(path.to_owned());
            }
        }
    }
    Error::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Open an existing file at `path`, refusing links and non-regular files.
fn open_existing(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
}

/// Create the file with `defs` unless it exists, then attach, taking an existing file's
/// definitions as they are (the caller reconciles them with `defs`, see [`crate::reconcile`]).
pub(crate) fn create_or_open(
    path: &Path,
    defs: &[LimitDef],
    access: &Access,
    hooks: &EngineHooks,
) -> Result<Mapped> {
    check_mode(access)?;
    check_defs(defs)?;
    check_directory(path, access)?;
    for _ in 0..64 {
        match open_existing(path) {
            Ok(file) => return attach(file, path, access, false, hooks),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("opening", path, e)),
        }
        if create_new(path, defs, access)? {
            let file = open_existing(path).map_err(|e| io_err("opening", path, e))?;
            return attach(file, path, access, false, hooks);
        }
    }
    Err(Error::NotInitialized(path.to_owned()))
}

/// Attach to an existing file, taking its definitions as they are.
pub(crate) fn open(path: &Path, access: &Access, hooks: &EngineHooks) -> Result<Mapped> {
    check_mode(access)?;
    check_directory(path, access)?;
    let file = open_existing(path).map_err(|e| io_err("opening", path, e))?;
    attach(file, path, access, false, hooks)
}

/// A private copy of an existing file, for reading its state: validated as [`open`] does,
/// opened read-only, and copied with `pread` into anonymous memory, never mapped. Holes are not
/// read (nor allocated); nothing written to the copy reaches the file.
pub(crate) fn open_snapshot(path: &Path, access: &Access, hooks: &EngineHooks) -> Result<Mapped> {
    check_mode(access)?;
    check_directory(path, access)?;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_err("opening", path, e))?;
    attach(file, path, access, true, hooks)
}

/// Replace the file at `path` with a new one holding `defs`: the new file is complete (written
/// and linked under a temporary name in the same directory) before `rename` puts it at `path`
/// in one step. Processes attached to the old file keep it mapped until they notice.
///
/// The new file keeps what the old one was given at creation beyond its definitions: its reboot
/// choice, its permission bits and (where this process may give them) its owner and group, so
/// that every process attached to the old file can attach to the new one.
///
/// `carry` pairs (index in `old`, index in `defs`) of limits defined the same in both: their
/// state is copied into the new file before it is published (a read of `old` at that instant;
/// decisions still made on `old` until its handles notice are not carried, within the bound
/// across a replacement), so a deploy that adds a limit does not give the others' quotas back.
pub(crate) fn replace(
    path: &Path,
    defs: &[LimitDef],
    access: &Access,
    old: &Mapped,
    carry: &[(usize, usize)],
    hooks: &EngineHooks,
) -> Result<()> {
    check_defs(defs)?;
    let meta = old.file.metadata().map_err(|e| io_err("fstat", path, e))?;
    let access = &Access {
        mode: meta.mode() & 0o777,
        on_reboot: reboot::OnReboot::from_code(old.header(word::ON_REBOOT)).or(access.on_reboot),
        ..access.clone()
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent_dir(path).join(format!(
        ".{name}.{}.{:x}.new",
        std::process::id(),
        random_seed()[0]
    ));
    if !create_new(&tmp, defs, access)? {
        return Err(io_err(
            "creating the replacement file",
            &tmp,
            io::Error::from(io::ErrorKind::AlreadyExists),
        ));
    }
    if !carry.is_empty() {
        if let Err(e) = carry_state(old, &tmp, access, carry, hooks) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    }
    // Best effort: only root (or a member of the group, for the group) may give the file away;
    // a file left owned by this process's user is reported by the opens that refuse it.
    let _ = std::os::unix::fs::chown(&tmp, Some(meta.uid()), Some(meta.gid()));
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err("renaming the replacement file into place", path, e)
    })
}

/// Copy the state lines of the `carry` limits from `old` into the unpublished file `tmp`, and
/// the wall offset their window phases were computed with.
fn carry_state(
    old: &Mapped,
    tmp: &Path,
    access: &Access,
    carry: &[(usize, usize)],
    hooks: &EngineHooks,
) -> Result<()> {
    let new = open(tmp, access, hooks)?;
    for &(from, to) in carry {
        let (src, len) = old.geometry.slots[from];
        let (dst, new_len) = new.geometry.slots[to];
        if len != new_len {
            continue;
        }
        // Relaxed: a snapshot of words other processes may be changing (each word is a whole
        // state); the file is published by the rename that follows.
        for (w, v) in new.words(dst, len / 8).iter().zip(old.words(src, len / 8)) {
            w.store(v.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    for i in [word::WALL_OFFSET, word::WALL_MAX] {
        // Relaxed: as above.
        new.word(i * 8).store(old.header(i), Ordering::Relaxed);
    }
    Ok(())
}

/// What `path` names now: its device and inode (without following a final symlink).
pub(crate) fn path_ident(path: &Path) -> io::Result<(u64, u64)> {
    let meta = fs::symlink_metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// Check the definitions as creating a file would.
pub(crate) fn check_defs(defs: &[LimitDef]) -> Result<()> {
    if defs.len() > MAX_LIMITS {
        return Err(crate::error::invalid(
            "",
            format!("at most {MAX_LIMITS} limits per file"),
        ));
    }
    for (i, def) in defs.iter().enumerate() {
        validate_name(&def.name)?;
        def.algorithm.validate(&def.name)?;
        def.validate_options()?;
        if defs[..i].iter().any(|d| d.name == def.name) {
            return Err(crate::error::invalid(&def.name, "defined twice"));
        }
    }
    Ok(())
}

fn corrupt(path: &Path, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_owned(),
        reason: reason.into(),
    }
}
