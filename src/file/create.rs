//! Writing a new file: its complete image in an unnamed file, every block allocated, linked
//! into place in one step (see the module docs of `file`).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::layout::{self, word, Geometry, DEF_SIZE, HEADER_SIZE};
use super::{io_err, parent_dir, reboot, Access};
use crate::clock;
use crate::error::Result;
use crate::spec::{Algorithm, LimitDef};

/// The complete initial image of header and definitions.
pub(super) fn image(
    defs: &[LimitDef],
    geometry: &Geometry,
    on_reboot: reboot::OnReboot,
) -> Vec<u8> {
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
pub(super) fn control_lines(defs: &[LimitDef], geometry: &Geometry) -> Vec<(usize, Vec<u8>)> {
    defs.iter()
        .zip(&geometry.slots)
        .map(|(def, &(offset, _))| {
            let mut line = [0u64; layout::LINE / 8];
            for (i, v) in layout::initial_control(def) {
                line[i] = v;
            }
            if let Algorithm::TokenBucket { .. } = def.algorithm {
                // A random first generation (slot 0 active): a handle that decides on another
                // file's bytes copied over its own, before it notices the copy, never finds the
                // generation its cached parameters were read in.
                line[layout::bucket::ACTIVE] = layout::bucket::first_active(random_seed()[0]);
            }
            (offset, line.iter().flat_map(|w| w.to_ne_bytes()).collect())
        })
        .collect()
}

pub(super) fn random_seed() -> [u64; 2] {
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
pub(super) fn create_new(path: &Path, defs: &[LimitDef], access: &Access) -> Result<bool> {
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
pub(super) fn link_fd(file: &File, path: &Path) -> Result<bool> {
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
pub(super) fn reserve_new(file: &File, len: u64) -> io::Result<()> {
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
pub(super) fn fallocate(file: &File, len: u64) -> io::Result<()> {
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
pub(super) fn first_hole(file: &File, len: u64) -> Option<u64> {
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
pub(super) fn allocate_holes(file: &File, path: &Path, len: u64) -> Result<()> {
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
