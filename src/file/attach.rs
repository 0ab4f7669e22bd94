//! Attaching to an existing file: everything validated with `pread` before anything is mapped
//! (see the module docs of `file`), or copied into private memory for a snapshot.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use memmap2::{MmapOptions, MmapRaw};

use super::layout::{self, word, Geometry, DEF_SIZE, HEADER_SIZE, MAX_LIMITS};
use super::reboot::{self, EngineHooks};
use super::{allocate_holes, corrupt, io_err, Access, Ident, Mapped};
use crate::clock;
use crate::error::{Error, Result};
use crate::spec::{validate_name, LimitDef};

/// Copy the whole file into `dst` (an anonymous mapping of its size) with `pread`, reading
/// only its data extents (`SEEK_DATA` / `SEEK_HOLE`): the anonymous pages under holes stay the
/// untouched zero page, and reading a tmpfs file never allocates its holes (a fault through a
/// shared mapping would).
pub(super) fn copy_data(file: &File, path: &Path, dst: &mut [u8]) -> Result<()> {
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

pub(super) fn read_words(file: &File, path: &Path, offset: u64, len: usize) -> Result<Vec<u64>> {
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
pub(super) fn attach(
    file: File,
    path: &Path,
    access: &Access,
    snapshot: bool,
    hooks: &EngineHooks,
) -> Result<Mapped> {
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
    reboot::on_open(&mapped, hooks)?;
    Ok(mapped)
}
