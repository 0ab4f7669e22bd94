//! The access checks an open or a creation makes before anything else: the requested mode and
//! the directory the file lives in.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{io_err, Access};
use crate::error::{Error, Result};

/// Refuse modes no file should have: without owner read and write (the library maps the file
/// read-write; mode 0 would make an unusable file), or writable by every user (any of them
/// could truncate the file and crash every process that maps it with SIGBUS). Group write
/// stays allowed: it is how a group of users shares a file.
pub(super) fn check_mode(access: &Access) -> Result<()> {
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

pub(super) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Refuse a directory in which users other than the owner (beyond the group the mode shares
/// with) could rename or replace the file: writable by them and not sticky.
pub(super) fn check_directory(path: &Path, access: &Access) -> Result<()> {
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
