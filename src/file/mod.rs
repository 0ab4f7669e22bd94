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

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::clock;
use crate::error::{Error, Result};
use crate::spec::{validate_name, Algorithm, LimitDef};
use layout::{word, Geometry, DEF_SIZE, HEADER_SIZE, MAX_LIMITS};

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

/// The complete initial image of header and definitions.
fn image(defs: &[LimitDef], geometry: &Geometry, on_reboot: reboot::OnReboot) -> Vec<u8> {
    let mut header = vec![0u64; HEADER_SIZE / 8];
    header[word::MAGIC] = layout::MAGIC;
    header[word::VERSION] = layout::FORMAT_VERSION as u64 | ((HEADER_SIZE as u64) << 32);
    header[word::INIT] = layout::READY;
    header[word::FILE_SIZE] = geometry.file_size as u64;
    header[word::COUNTS] = layout::LINE as u64 | ((defs.len() as u64) << 32);
    header[word::DEFS_OFFSET] = geometry.defs_offset as u64;
    header[word::DEFS_LEN] = geometry.defs_len as u64;
    header[word::SLOTS_OFFSET] = geometry.slots_offset as u64;
    header[word::SLOTS_LEN] = geometry.slots_len as u64;
    header[word::STATS_OFFSET] = geometry.stats_offset as u64;
    header[word::STATS_LEN] = geometry.stats_len as u64;
    let boot = clock::boot_id();
    header[word::BOOT_ID] = u64::from_ne_bytes(boot[..8].try_into().expect("8 bytes"));
    header[word::BOOT_ID + 1] = u64::from_ne_bytes(boot[8..].try_into().expect("8 bytes"));
    header[word::CLOCK_ID] = layout::CLOCK_MONOTONIC_ID;
    header[word::TIMENS_OFFSET] = clock::timens_monotonic_offset_ns() as u64;
    header[word::WALL_OFFSET] = clock::wall_offset_ns();
    header[word::WALL_MAX] = header[word::WALL_OFFSET];
    header[word::ON_REBOOT] = on_reboot.code();
    header[word::CREATED] = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let seed = random_seed();
    header[word::HASH_SEED] = seed[0];
    header[word::HASH_SEED + 1] = seed[1];
    header[word::FILE_ID] = random_seed()[0].max(1);
    let mut def_bytes = Vec::with_capacity(defs.len() * DEF_SIZE);
    for (def, &slot) in defs.iter().zip(&geometry.slots) {
        for w in layout::encode_def(def, slot) {
            def_bytes.extend_from_slice(&w.to_ne_bytes());
        }
    }
    header[word::CHECKSUM] = layout::checksum(&header, &def_bytes);
    let mut bytes: Vec<u8> = header.iter().flat_map(|w| w.to_ne_bytes()).collect();
    bytes.extend_from_slice(&def_bytes);
    bytes
}

/// The control lines of every limit as `(file offset, bytes)`: all that is non-zero in the state.
fn control_lines(defs: &[LimitDef], geometry: &Geometry) -> Vec<(usize, Vec<u8>)> {
    defs.iter()
        .zip(&geometry.slots)
        .map(|(def, &(offset, _))| {
            let mut line = [0u64; layout::LINE / 8];
            for (i, v) in layout::initial_control(def) {
                line[i] = v;
            }
            (offset, line.iter().flat_map(|w| w.to_ne_bytes()).collect())
        })
        .collect()
}

fn random_seed() -> [u64; 2] {
    let mut buf = [0u8; 16];
    if let Ok(f) = File::open("/dev/urandom") {
        let _ = f.read_exact_at(&mut buf, 0);
    }
    [
        u64::from_ne_bytes(buf[..8].try_into().expect("8 bytes")),
        u64::from_ne_bytes(buf[8..].try_into().expect("8 bytes")),
    ]
}

/// Write a complete file into the directory of `path` and link it into place.
/// `Ok(false)`: another creator won the race.
fn create_new(path: &Path, defs: &[LimitDef], access: &Access) -> Result<bool> {
    let geometry = Geometry::compute(defs);
    let bytes = image(defs, &geometry, access.on_reboot.unwrap_or_default());
    let lines = control_lines(defs, &geometry);
    let dir = parent_dir(path);
    let fill = |file: &File| -> io::Result<()> {
        file.set_permissions(fs::Permissions::from_mode(access.mode))?;
        // Every block reserved before the file has a name: a full filesystem is ENOSPC here,
        // never a SIGBUS later in a process that touches a page nobody could allocate.
        reserve_new(file, geometry.file_size as u64)?;
        file.write_all_at(&bytes, 0)?;
        for (offset, line) in &lines {
            file.write_all_at(line, *offset as u64)?;
        }
        Ok(())
    };
    match fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(access.mode)
        .open(&dir)
    {
        Ok(file) => {
            fill(&file).map_err(|e| io_err("writing the new file", path, e))?;
            link_fd(&file, path)
        }
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) =>
        {
            // No O_TMPFILE here: a unique temporary name, then link(2), which never replaces.
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = dir.join(format!(
                ".{name}.{}.{:x}.tmp",
                std::process::id(),
                random_seed()[0]
            ));
            let file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .mode(access.mode)
                .open(&tmp)
                .map_err(|e| io_err("creating a temporary file", &tmp, e))?;
            let linked = fill(&file)
                .map_err(|e| io_err("writing the new file", path, e))
                .and_then(|()| match fs::hard_link(&tmp, path) {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                    Err(e) => Err(io_err("linking the new file into place", path, e)),
                });
            let _ = fs::remove_file(&tmp);
            linked
        }
        Err(e) => Err(io_err("creating the file", &dir, e)),
    }
}

/// Give the unnamed `O_TMPFILE` behind `file` the name `path`; `Ok(false)` if `path` exists.
fn link_fd(file: &File, path: &Path) -> Result<bool> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL");
    let to = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| crate::error::invalid("", "path contains a NUL byte"))?;
    // SAFETY: both arguments are valid NUL-terminated strings that outlive the call; linkat only
    // reads them. AT_SYMLINK_FOLLOW resolves the /proc magic link to the open file itself, which
    // is how an unprivileged process links an O_TMPFILE (AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH).
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EEXIST) {
        return Ok(false);
    }
    Err(io_err("linking the new file into place", path, e))
}

/// Give the new, still unnamed `file` all `len` bytes as allocated blocks (`fallocate`), so that
/// no page of its mapping can ever fault for lack of space. Where the filesystem has no
/// `fallocate`, writing zeros allocates them as well (safe here: nobody else sees the file yet).
fn reserve_new(file: &File, len: u64) -> io::Result<()> {
    match fallocate(file, len) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => {
            file.set_len(len)?;
            let zeros = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < len {
                let n = (len - at).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            file.sync_data()
        }
        Err(e) => Err(e),
    }
}

/// `fallocate(fd, 0, 0, len)`: allocate every block of `[0, len)`, keeping blocks that exist and
/// their contents. The system call itself, never glibc's `posix_fallocate` emulation, which
/// writes bytes and so could overwrite a live word of a shared file.
fn fallocate(file: &File, len: u64) -> io::Result<()> {
    loop {
        // SAFETY: fallocate on a descriptor we own; it has no memory arguments.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The first hole of `file` below `len`, if any (`SEEK_HOLE`); `Some(0)` when the filesystem
/// cannot tell.
fn first_hole(file: &File, len: u64) -> Option<u64> {
    // SAFETY: lseek on a descriptor we own; it has no memory arguments.
    let at = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_HOLE) };
    match at {
        at if at < 0 => Some(0),
        at if (at as u64) < len => Some(at as u64),
        _ => None,
    }
}

/// An existing file with holes (made by an older build that only sized it, or copied sparse)
/// gets its blocks allocated before any page is touched, or the open is refused with ENOSPC:
/// a write to a hole of a full filesystem would otherwise raise SIGBUS.
fn allocate_holes(file: &File, path: &Path, len: u64) -> Result<()> {
    if first_hole(file, len).is_none() {
        return Ok(());
    }
    match fallocate(file, len) {
        Ok(()) => Ok(()),
        // A filesystem without fallocate (and without SEEK_HOLE): nothing can be reserved.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => Ok(()),
        Err(e) => Err(io_err(
            "allocating the blocks of a sparse file (every page must exist before it is mapped)",
            path,
            e,
        )),
    }
}

/// Copy the whole file into `dst` (an anonymous mapping of its size) with `pread`, reading
/// only its data extents (`SEEK_DATA` / `SEEK_HOLE`): the anonymous pages under holes stay the
/// untouched zero page, and reading a tmpfs file never allocates its holes (a fault through a
/// shared mapping would).
fn copy_data(file: &File, path: &Path, dst: &mut [u8]) -> Result<()> {
    let len = dst.len() as u64;
    let fd = file.as_raw_fd();
    let mut at = 0u64;
    while at < len {
        // SAFETY: lseek on a descriptor we own; no memory arguments.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        let (start, end) = if data < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // only holes from `at` to the end
            }
            (at, len) // no SEEK_DATA: read everything
        } else {
            let start = (data as u64).min(len);
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
            let end = if hole < 0 {
                len
            } else {
                (hole as u64).min(len)
            };
            (start, end.max(start))
        };
        if start >= len {
            break;
        }
        file.read_exact_at(&mut dst[start as usize..end as usize], start)
            .map_err(|e| io_err("reading", path, e))?;
        at = end.max(start + 1);
    }
    Ok(())
}

/// Refuse modes no file should have: without owner read and write (the library maps the file
/// read-write; mode 0 would make an unusable file), or writable by every user (any of them
/// could truncate the file and crash every process that maps it with SIGBUS). Group write
/// stays allowed: it is how a group of users shares a file.
fn check_mode(access: &Access) -> Result<()> {
    let mode = access.mode;
    if mode & 0o600 != 0o600 {
        return Err(crate::error::invalid(
            "",
            format!(
                "mode {mode:03o} does not let the owner read and write the file: it must \
                 include 600 (600 is the default, 660 shares it with the group)"
            ),
        ));
    }
    if mode & 0o002 != 0 {
        return Err(crate::error::invalid(
            "",
            format!(
                "mode {mode:03o} lets every user write the file: any of them could truncate it \
                 and crash every process using it (use 660 and a group to share it)"
            ),
        ));
    }
    Ok(())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Refuse a directory in which users other than the owner (beyond the group the mode shares
/// with) could rename or replace the file: writable by them and not sticky.
fn check_directory(path: &Path, access: &Access) -> Result<()> {
    if access.allow_unsafe_directory {
        return Ok(());
    }
    let dir = parent_dir(path);
    // Every directory component as written, without following links: a link anywhere in the
    // path lets whoever can change it point the path at a file of their choosing.
    let mut prefix = PathBuf::new();
    for component in dir.components() {
        prefix.push(component);
        if matches!(
            component,
            std::path::Component::RootDir | std::path::Component::CurDir
        ) {
            continue;
        }
        let meta = fs::symlink_metadata(&prefix)
            .map_err(|e| io_err("inspecting the directory", &prefix, e))?;
        if meta.file_type().is_symlink() {
            return Err(Error::Permission {
                path: path.to_owned(),
                reason: format!(
                    "its directory path goes through the symbolic link {}: whoever controls \
                     the link chooses the file (name the real directory, or opt in)",
                    crate::error::Clip::path(&prefix)
                ),
            });
        }
    }
    let meta =
        fs::symlink_metadata(&dir).map_err(|e| io_err("inspecting the directory", &dir, e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != euid && !access.allow_other_owner {
        return Err(Error::Permission {
            path: path.to_owned(),
            reason: format!(
                "its directory {} is owned by uid {}, not by this user (uid {euid}) or root: \
                 its owner can rename the file away and plant another (use a directory of \
                 your own, or opt in)",
                crate::error::Clip::path(&dir),
                meta.uid()
            ),
        });
    }
    let mode = meta.mode();
    let sticky = mode & 0o1000 != 0;
    // Group write is acceptable when the file itself is shared with the group.
    let allowed = if access.mode & 0o020 != 0 { 0o020 } else { 0 };
    let writable = mode & 0o022 & !allowed;
    if writable != 0 && !sticky {
        return Err(Error::Permission {
            path: path.to_owned(),
            reason: format!(
                "its directory {} (mode {:o}) is writable by {} without the sticky bit: anyone \
                 who can write it can replace the file (use a private directory, or opt in)",
                crate::error::Clip::path(&dir),
                mode & 0o7777,
                if writable & 0o002 != 0 {
                    "every user"
                } else {
                    "the group"
                }
            ),
        });
    }
    Ok(())
}

/// Create the file with `defs` unless it exists, then attach, taking an existing file's
/// definitions as they are (the caller reconciles them with `defs`, see [`crate::reconcile`]).
pub(crate) fn create_or_open(path: &Path, defs: &[LimitDef], access: &Access) -> Result<Mapped> {
    check_mode(access)?;
    check_defs(defs)?;
    check_directory(path, access)?;
    for _ in 0..64 {
        match open_existing(path) {
            Ok(file) => return attach(file, path, access, false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("opening", path, e)),
        }
        if create_new(path, defs, access)? {
            let file = open_existing(path).map_err(|e| io_err("opening", path, e))?;
            return attach(file, path, access, false);
        }
    }
    Err(Error::NotInitialized(path.to_owned()))
}

/// Attach to an existing file, taking its definitions as they are.
pub(crate) fn open(path: &Path, access: &Access) -> Result<Mapped> {
    check_mode(access)?;
    check_directory(path, access)?;
    let file = open_existing(path).map_err(|e| io_err("opening", path, e))?;
    attach(file, path, access, false)
}

/// A private copy of an existing file, for reading its state: validated as [`open`] does,
/// opened read-only, and copied with `pread` into anonymous memory, never mapped. Holes are not
/// read (nor allocated); nothing written to the copy reaches the file.
pub(crate) fn open_snapshot(path: &Path, access: &Access) -> Result<Mapped> {
    check_mode(access)?;
    check_directory(path, access)?;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_err("opening", path, e))?;
    attach(file, path, access, true)
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
        if let Err(e) = carry_state(old, &tmp, access, carry) {
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
fn carry_state(old: &Mapped, tmp: &Path, access: &Access, carry: &[(usize, usize)]) -> Result<()> {
    let new = open(tmp, access)?;
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

fn read_words(file: &File, path: &Path, offset: u64, len: usize) -> Result<Vec<u64>> {
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            corrupt(path, "file ends inside its own header or definitions")
        } else {
            io_err("reading", path, e)
        }
    })?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// Validate an open file completely, then map it.
fn attach(file: File, path: &Path, access: &Access, snapshot: bool) -> Result<Mapped> {
    let meta = file.metadata().map_err(|e| io_err("fstat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::NotRegularFile(path.to_owned()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid && !access.allow_other_owner {
        return Err(Error::Permission {
            path: path.to_owned(),
            reason: format!("owned by uid {}, not by this user (uid {euid})", meta.uid()),
        });
    }
    let extra = meta.mode() & 0o022 & !access.mode;
    if extra != 0 {
        return Err(Error::Permission {
            path: path.to_owned(),
            reason: format!(
                "mode {:o} lets {} write it; the open options allow {:o}",
                meta.mode() & 0o777,
                if extra & 0o002 != 0 {
                    "every user"
                } else {
                    "the group"
                },
                access.mode
            ),
        });
    }
    let actual = meta.len();
    if actual < HEADER_SIZE as u64 {
        let magic = read_words(&file, path, 0, 8.min(actual as usize) / 8 * 8).unwrap_or_default();
        if magic.first().is_some_and(|&m| m != layout::MAGIC) {
            return Err(Error::Foreign(path.to_owned()));
        }
        return Err(Error::Size {
            path: path.to_owned(),
            expected: HEADER_SIZE as u64,
            actual,
        });
    }
    let header = read_words(&file, path, 0, HEADER_SIZE)?;
    if header[word::MAGIC] != layout::MAGIC {
        return Err(Error::Foreign(path.to_owned()));
    }
    let version = (header[word::VERSION] & 0xFFFF_FFFF) as u32;
    if version != layout::FORMAT_VERSION {
        return Err(Error::Version {
            path: path.to_owned(),
            found: version,
            expected: layout::FORMAT_VERSION,
        });
    }
    if header[word::VERSION] >> 32 != HEADER_SIZE as u64 {
        return Err(corrupt(path, "header size field is wrong"));
    }
    if header[word::INIT] != layout::READY {
        return Err(Error::NotInitialized(path.to_owned()));
    }
    let count = (header[word::COUNTS] >> 32) as usize;
    if count > MAX_LIMITS || header[word::COUNTS] & 0xFFFF_FFFF != layout::LINE as u64 {
        return Err(corrupt(path, "limit count or slot size is impossible"));
    }
    if header[word::DEFS_OFFSET] != HEADER_SIZE as u64
        || header[word::DEFS_LEN] != (count * DEF_SIZE) as u64
    {
        return Err(corrupt(path, "definitions region is misplaced"));
    }
    let def_words = read_words(&file, path, HEADER_SIZE as u64, count * DEF_SIZE)?;
    let def_bytes: Vec<u8> = def_words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    if layout::checksum(&header, &def_bytes) != header[word::CHECKSUM] {
        return Err(corrupt(
            path,
            "checksum over layout and definitions does not match",
        ));
    }
    let mut defs = Vec::with_capacity(count);
    let mut stored_slots = Vec::with_capacity(count);
    for record in def_words.chunks_exact(DEF_SIZE / 8) {
        let (def, slot) = layout::decode_def(record).map_err(|r| corrupt(path, r))?;
        validate_name(&def.name).map_err(|e| corrupt(path, e.to_string()))?;
        def.algorithm
            .validate(&def.name)
            .map_err(|e| corrupt(path, e.to_string()))?;
        def.validate_options()
            .map_err(|e| corrupt(path, e.to_string()))?;
        if defs.iter().any(|d: &LimitDef| d.name == def.name) {
            return Err(corrupt(
                path,
                format!("limit `{}` is defined twice", def.name),
            ));
        }
        defs.push(def);
        stored_slots.push(slot);
    }
    let geometry = Geometry::compute(&defs);
    let stored = [
        (word::FILE_SIZE, geometry.file_size),
        (word::SLOTS_OFFSET, geometry.slots_offset),
        (word::SLOTS_LEN, geometry.slots_len),
        (word::STATS_OFFSET, geometry.stats_offset),
        (word::STATS_LEN, geometry.stats_len),
    ];
    if stored.iter().any(|&(i, v)| header[i] != v as u64)
        || stored_slots
            .iter()
            .zip(&geometry.slots)
            .any(|(s, g)| (s.0, s.1) != (g.0 as u64, g.1 as u64))
    {
        return Err(corrupt(
            path,
            "stored layout differs from the one its definitions imply",
        ));
    }
    if actual != geometry.file_size as u64 {
        return Err(Error::Size {
            path: path.to_owned(),
            expected: geometry.file_size as u64,
            actual,
        });
    }
    if header[word::CLOCK_ID] != layout::CLOCK_MONOTONIC_ID {
        return Err(corrupt(
            path,
            format!("unknown clock id {}", header[word::CLOCK_ID]),
        ));
    }
    let ours = clock::timens_monotonic_offset_ns();
    let theirs = header[word::TIMENS_OFFSET] as i64;
    if ours != theirs {
        return Err(Error::ClockMismatch {
            path: path.to_owned(),
            file_offset_ns: theirs,
            our_offset_ns: ours,
        });
    }
    let on_reboot = reboot::OnReboot::from_code(header[word::ON_REBOOT])
        .ok_or_else(|| corrupt(path, "unknown reboot policy (word 25)"))?;
    if access.on_reboot.is_some_and(|want| want != on_reboot) {
        return Err(Error::DefinitionConflict {
            path: path.to_owned(),
            reason: format!(
                "the file was created to {} at a reboot, not to {}",
                on_reboot.describe(),
                access.on_reboot.unwrap_or_default().describe()
            ),
        });
    }
    if header[word::FILE_ID] == 0 {
        return Err(corrupt(path, "file id is zero"));
    }
    let ident = Ident {
        dev: meta.dev(),
        ino: meta.ino(),
        file_id: header[word::FILE_ID],
    };
    let map = if snapshot {
        let mut copy = MmapOptions::new()
            .len(geometry.file_size)
            .map_anon()
            .map_err(|e| io_err("mmap (anonymous, for a copy)", path, e))?;
        copy_data(&file, path, &mut copy)?;
        MmapRaw::from(copy)
    } else {
        allocate_holes(&file, path, actual)?;
        MmapOptions::new()
            .len(geometry.file_size)
            .map_raw(&file)
            .map_err(|e| io_err("mmap", path, e))?
    };
    let mapped = Mapped {
        map,
        len: geometry.file_size,
        path: path.to_owned(),
        anchor: std::path::absolute(path).unwrap_or_else(|_| path.to_owned()),
        geometry,
        defs,
        file,
        ident,
        access: access.clone(),
    };
    reboot::on_open(&mapped)?;
    Ok(mapped)
}

/// Return one limit's state to fresh: full bucket, empty windows, log and table, no permits. The
/// live parameters are kept (a retuned rate survives), moved to parameter slot 0.
pub(crate) fn reset_limit(mapped: &Mapped, index: usize) {
    let def = &mapped.defs[index];
    let (offset, len) = mapped.geometry.slots[index];
    let line = |i: usize| mapped.word(offset + i * 8);
    // Relaxed throughout: a reset races with decisions by design (they retry on the new words);
    // the boot-id path publishes it with a Release store afterwards.
    if let Algorithm::TokenBucket { .. } = def.algorithm {
        let active = (line(layout::bucket::ACTIVE).load(Ordering::Relaxed) & 1) as usize;
        if active == 1 {
            for k in 0..3 {
                let v = line(layout::bucket::PARAMS[1] + k).load(Ordering::Relaxed);
                line(layout::bucket::PARAMS[0] + k).store(v, Ordering::Relaxed);
            }
            line(layout::bucket::ACTIVE).store(0, Ordering::Relaxed);
        }
        // A fleet share's deadline is on the monotonic clock of the boot that wrote it: a reset
        // (a reboot, or an operator's) fences the share until its agent renews.
        line(layout::bucket::DEADLINE).store(0, Ordering::Relaxed);
    }
    match def.algorithm {
        Algorithm::Concurrency { .. } => {
            for w in mapped.words(offset, len / 8) {
                w.store(0, Ordering::Relaxed);
            }
        }
        _ => {
            line(0).store(0, Ordering::Relaxed);
            for w in mapped.words(offset + layout::LINE, (len - layout::LINE) / 8) {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
    reboot::clear_failed(mapped, index);
}
