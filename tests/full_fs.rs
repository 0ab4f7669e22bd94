//! A full filesystem never makes a limiter raise SIGBUS: each test mounts its own small tmpfs
//! (`mount -t tmpfs -o size=4m`), fills it, and shows that creation fails with a clean ENOSPC
//! leaving nothing at the path, that workers adding keys to a file created there never fault,
//! that an old sparse file is allocated (or refused with ENOSPC) before any page is touched,
//! boot reset included, and that a read-only `shmlimit inspect` allocates no tmpfs memory.
//!
//! Mounting needs root (CAP_SYS_ADMIN). Where it is not permitted the tests are reported
//! IGNORED with the reason, never passed; with `SHMLIMIT_REQUIRE_MOUNT=1` (set by `.ci/run`,
//! which runs as root) "cannot mount" is a failure instead. This binary has its own harness
//! (libtest-mimic) because only at run time can it know whether it may mount.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};
use shmlimit::{Error, Keyed, Limiter, TokenBucket};

const BIN: &str = env!("CARGO_BIN_EXE_shmlimit");
const MIB: u64 = 1 << 20;

/// A tmpfs mounted on a fresh temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mount a tmpfs of `size`; `Err(reason)` when mounting is not permitted here.
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot mount a tmpfs (needs root / CAP_SYS_ADMIN): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Bytes of the filesystem in use (statvfs), which is tmpfs memory actually allocated.
    fn used(&self) -> u64 {
        let s = nix_statvfs(self.dir.path());
        (s.0 - s.1) * s.2
    }

    /// Bytes still free.
    fn free(&self) -> u64 {
        let s = nix_statvfs(self.dir.path());
        s.1 * s.2
    }

    /// Fill the filesystem until at most `leave` bytes are free.
    fn fill_leaving(&self, leave: u64) {
        let filler = self.path("filler");
        let f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&filler)
            .unwrap();
        let chunk = vec![0xA5u8; 64 * 1024];
        while self.free() > leave {
            let n = (self.free() - leave).min(chunk.len() as u64) as usize;
            if std::io::Write::write_all(&mut &f, &chunk[..n.max(4096).min(chunk.len())]).is_err() {
                break;
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// (blocks, free blocks, block size) of the filesystem holding `path`.
fn nix_statvfs(path: &Path) -> (u64, u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path; `s` is a zeroed statvfs the call fills.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs");
    (s.f_blocks as u64, s.f_bavail as u64, s.f_frsize as u64)
}

fn is_enospc(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
}

/// A keyed limit of `slots` keys (16 bytes a slot).
fn keyed(slots: u64) -> shmlimit::Builder {
    Limiter::builder().keyed_limit(
        "per_user",
        TokenBucket::per_second(10).burst(10),
        Keyed::new(slots),
    )
}

/// Copy `from` to `to` leaving every all-zero page a hole, as `cp --sparse=always` does: a file
/// made by an older build (which only called `set_len`) looks like this.
fn copy_sparse(from: &Path, to: &Path) {
    let data = fs::read(from).unwrap();
    let out = fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode_0600()
        .open(to)
        .unwrap();
    out.set_len(data.len() as u64).unwrap();
    for (i, page) in data.chunks(4096).enumerate() {
        if page.iter().any(|&b| b != 0) {
            out.write_all_at(page, (i * 4096) as u64).unwrap();
        }
    }
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

/// A 16 MiB keyed limit on a 4 MiB tmpfs with 1 MiB free: ENOSPC at creation, nothing at the
/// path, no space kept (the unnamed file is gone). The CLI says the same and exits non-zero.
fn create_too_large_is_enospc(fs: &Tmpfs) -> Result<(), Failed> {
    fs.fill_leaving(MIB);
    let used = fs.used();
    let path = fs.path("big.shm");
    match keyed(1 << 20).create_or_open(&path) {
        Err(e) if is_enospc(&e) => {}
        Err(e) => return Err(format!("expected ENOSPC, got {e}").into()),
        Ok(l) => {
            return Err(format!("created a {} byte file on a full tmpfs", l.file_size()).into())
        }
    }
    if path.exists() {
        return Err("a file was left at the path".into());
    }
    if fs.used() != used {
        return Err(format!("{} bytes stayed allocated", fs.used() - used).into());
    }
    // `shmlimit create` of the same file: a non-zero exit naming the cause, nothing left.
    let config = std::env::temp_dir().join(format!("full-fs-{}.toml", std::process::id()));
    fs::write(
        &config,
        "[[limit]]\nname = \"per_user\"\nalgorithm = \"token_bucket\"\nrate = \"10/s\"\n\
         burst = 10\nkeyed = 1048576\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("create")
        .arg(&path)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let _ = fs::remove_file(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !stderr.contains("No space left on device") {
        return Err(format!("shmlimit create: {:?}, {stderr}", out.status).into());
    }
    if path.exists() || fs.used() != used {
        return Err("the CLI left a file or space behind".into());
    }
    Ok(())
}

/// A worker adding keys to a file created on a nearly full tmpfs never faults: every page of
/// the file was reserved before it became visible.
fn workers_adding_keys_never_fault(fs: &Tmpfs) -> Result<(), Failed> {
    let path = fs.path("keys.shm");
    // 2^16 slots: 1 MiB of table.
    let limiter = keyed(1 << 16)
        .create_or_open(&path)
        .map_err(|e| e.to_string())?;
    drop(limiter);
    fs.fill_leaving(0);
    let child = common::fork_child(|| {
        let limiter = Limiter::open(&path).unwrap();
        let l = limiter.limit("per_user").unwrap();
        for i in 0..60_000u64 {
            let _ = l
                .try_acquire_key(format!("user-{i}").as_bytes(), 1)
                .unwrap();
        }
        i32::from(l.key_occupancy().0 < 50_000)
    });
    match common::reap(child) {
        0 => {}
        code if code > 128 => {
            return Err(format!("the Rust worker died of signal {}", code - 128).into())
        }
        code => return Err(format!("the Rust worker exited {code}").into()),
    }
    Ok(())
}

/// An old sparse file on a full filesystem: the open fails with ENOSPC before touching a page
/// (an open that must translate the state for a new boot included); with room, the open allocates the holes.
fn sparse_files_are_allocated_or_refused(fs: &Tmpfs) -> Result<(), Failed> {
    let scratch = tempfile::tempdir().unwrap();
    let original = scratch.path().join("orig.shm");
    keyed(1 << 17)
        .create_or_open(&original)
        .map_err(|e| e.to_string())?; // 2 MiB
    let path = fs.path("sparse.shm");
    copy_sparse(&original, &path);
    // A different boot id: the open must translate every state word.
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0x5Au8; 16], 12 * 8).unwrap();
    drop(f);
    let sparse_used = fs.used();
    fs.fill_leaving(MIB);
    let before = fs.used();
    match Limiter::open(&path) {
        Err(e) if is_enospc(&e) => {}
        Err(e) => return Err(format!("expected ENOSPC, got {e}").into()),
        Ok(_) => return Err("a 2 MiB sparse file opened with 1 MiB free".into()),
    }
    if fs.used() > before + MIB {
        return Err("the refused open kept space".into());
    }
    // Free room: the open allocates the whole file, then translates the state for the new boot and decides normally.
    fs::remove_file(fs.path("filler")).unwrap();
    let limiter = Limiter::open(&path).map_err(|e| e.to_string())?;
    if fs.used() < sparse_used + 2 * MIB - 64 * 1024 {
        return Err(format!(
            "the open left holes: {} bytes in use for a {} byte file",
            fs.used(),
            limiter.file_size()
        )
        .into());
    }
    if limiter.reboot_info().translations != 1 {
        return Err("the reboot translation did not run".into());
    }
    let l = limiter.limit("per_user").unwrap();
    if !l
        .try_acquire_key(b"a", 1)
        .map_err(|e| e.to_string())?
        .is_allowed()
    {
        return Err("a fresh key was denied".into());
    }
    Ok(())
}

/// `shmlimit inspect` of a sparse 16 MiB file allocates no tmpfs memory.
fn inspect_allocates_nothing(fs: &Tmpfs) -> Result<(), Failed> {
    let scratch = tempfile::tempdir().unwrap();
    let original = scratch.path().join("orig.shm");
    keyed(1 << 20)
        .create_or_open(&original)
        .map_err(|e| e.to_string())?; // 16 MiB
    let path = fs.path("sparse.shm");
    copy_sparse(&original, &path);
    let before = fs.used();
    let out = Command::new(BIN)
        .arg("inspect")
        .arg(&path)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!("inspect failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("per_user") {
        return Err(format!("inspect did not show the limit: {text}").into());
    }
    if fs.used() != before {
        return Err(format!(
            "inspect allocated {} bytes of tmpfs",
            fs.used().saturating_sub(before)
        )
        .into());
    }
    Ok(())
}

/// A directory owned by another (non-root) user is refused: its owner could rename the file away
/// and plant another. `allow_other_owner` (or `allow_unsafe_directory`) opts in. Here because
/// it needs root too (to give a directory to another user), on the test's own tmpfs.
fn a_directory_of_another_user_is_refused(fs: &Tmpfs) -> Result<(), Failed> {
    let theirs = fs.path("theirs");
    fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let path = theirs.join("limits.shm");
    let build = || Limiter::builder().limit("api", TokenBucket::per_second(10));
    match build().create_or_open(&path) {
        Err(Error::Permission { reason, .. }) if reason.contains("owned by uid 65534") => {}
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    if path.exists() {
        return Err("a file was created".into());
    }
    build()
        .allow_other_owner(true)
        .create_or_open(&path)
        .map_err(|e| e.to_string())?;
    if !matches!(Limiter::open(&path), Err(Error::Permission { .. })) {
        return Err("a plain open was accepted".into());
    }
    build()
        .allow_unsafe_directory(true)
        .open(&path)
        .map_err(|e| e.to_string())?;
    // A directory owned by root (the tmpfs's root here) needs no opt-in.
    build()
        .create_or_open(fs.path("mine.shm"))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// One test, given its own freshly mounted tmpfs.
type Test = fn(&Tmpfs) -> Result<(), Failed>;

fn main() {
    let args = Arguments::from_args();
    let required = std::env::var("SHMLIMIT_REQUIRE_MOUNT").is_ok_and(|v| v == "1");
    let probe = Tmpfs::mount("4m").map(drop);
    let tests: [(&str, Test); 5] = [
        (
            "create_of_a_too_large_file_is_enospc_and_leaves_nothing",
            create_too_large_is_enospc,
        ),
        (
            "workers_adding_keys_on_a_full_tmpfs_never_fault",
            workers_adding_keys_never_fault,
        ),
        (
            "sparse_files_are_allocated_or_refused_before_any_page_is_touched",
            sparse_files_are_allocated_or_refused,
        ),
        (
            "inspect_of_a_sparse_file_allocates_no_tmpfs_memory",
            inspect_allocates_nothing,
        ),
        (
            "a_directory_owned_by_another_user_is_refused",
            a_directory_of_another_user_is_refused,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            let reason = probe.as_ref().err().cloned();
            let ignored = reason.is_some() && !required;
            let trial = Trial::test(name, move || {
                if let Some(reason) = &reason {
                    return Err(format!("SHMLIMIT_REQUIRE_MOUNT=1 and {reason}").into());
                }
                let fs = Tmpfs::mount("4m").map_err(Failed::from)?;
                test(&fs)
            })
            .with_ignored_flag(ignored);
            if let Err(reason) = &probe {
                if ignored {
                    eprintln!("{name}: IGNORED: {reason}");
                }
            }
            trial
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
