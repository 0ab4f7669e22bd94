//! The plain-C reference GCRA (`benches/c/gcra_ref.c`): one `clock_gettime(CLOCK_MONOTONIC)` and
//! one CAS loop on a word in a mapped file. It is compiled at startup with `gcc -O2 -shared
//! -fPIC` into the target directory, loaded with `dlopen`, and called through a function pointer
//! once per decision.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tempfile::TempDir;

use super::{file_in, scratch_dir, Contender, Workload};

/// `struct gcra_ref_limit` of the C source.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawLimit {
    tat: *mut u64,
    emission_ns: u64,
    tolerance_ns: u64,
}

type AttachFn = unsafe extern "C" fn(*const c_char, u64, u64, *mut RawLimit) -> c_int;
type AcquireFn = unsafe extern "C" fn(*const RawLimit, u64) -> c_int;

/// The loaded library's entry points (the library stays loaded until the process exits).
struct Library {
    attach: AttachFn,
    acquire: AcquireFn,
}

fn compile() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c/gcra_ref.c");
    // The bench binary is `<target>/<profile>/deps/shmlimit-<hash>`.
    let exe = std::env::current_exe().expect("the bench binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench binary lives in <target>/<profile>/deps");
    let dir = profile_dir.join("bench-c");
    std::fs::create_dir_all(&dir).expect("create the C build directory");
    let out = dir.join("libgcra_ref.so");
    // Build under a private name, then rename: concurrent runs never load a half-written file.
    let partial = dir.join(format!("libgcra_ref.so.{}", std::process::id()));
    let status = Command::new("gcc")
        .args([
            "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o",
        ])
        .arg(&partial)
        .arg(&source)
        .status()
        .expect("run gcc (the C reference needs a C compiler)");
    assert!(status.success(), "gcc failed on {}", source.display());
    std::fs::rename(&partial, &out).expect("install the C reference library");
    out
}

fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: `handle` is a live handle from dlopen and `name` is NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!sym.is_null(), "dlsym {name:?}");
    sym
}

fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let path = compile();
        let cpath = CString::new(path.as_os_str().as_bytes()).expect("no NUL in the path");
        // SAFETY: `cpath` is NUL-terminated; the library has no constructors.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {}", path.display());
        let attach = symbol(handle, c"gcra_ref_attach");
        let acquire = symbol(handle, c"gcra_ref_acquire");
        // SAFETY: [1] both symbols are functions defined in gcra_ref.c with exactly these C
        // signatures; [2] the handle is never closed, so the code stays mapped.
        unsafe {
            Library {
                attach: std::mem::transmute::<*mut c_void, AttachFn>(attach),
                acquire: std::mem::transmute::<*mut c_void, AcquireFn>(acquire),
            }
        }
    })
}

/// A mapped state word and its parameters, attached through the C code.
pub struct CReference {
    path: PathBuf,
    limit: RawLimit,
    _dir: TempDir,
}

// SAFETY: `limit.tat` points into a shared mapping that is never unmapped; the C code only
// accesses it with atomic operations, so sharing the pointer between threads is sound.
unsafe impl Sync for CReference {}

fn attach(path: &Path, emission_ns: u64, tolerance_ns: u64) -> RawLimit {
    let cpath = CString::new(path.as_os_str().as_bytes()).expect("no NUL in the path");
    let mut limit = RawLimit {
        tat: std::ptr::null_mut(),
        emission_ns: 0,
        tolerance_ns: 0,
    };
    // SAFETY: `cpath` is NUL-terminated and `limit` is a valid, writable `gcra_ref_limit`.
    let rc = unsafe { (library().attach)(cpath.as_ptr(), emission_ns, tolerance_ns, &mut limit) };
    assert_eq!(rc, 0, "gcra_ref_attach {}", path.display());
    limit
}

impl CReference {
    /// A fresh file holding a full bucket of `workload`.
    pub fn new(workload: Workload) -> Self {
        let dir = scratch_dir();
        let path = file_in(&dir, "c_reference");
        let p = workload.bucket();
        let limit = attach(&path, p.emission_ns, p.tolerance_ns());
        CReference {
            path,
            limit,
            _dir: dir,
        }
    }
}

/// What one thread or process calls: the parameters and the function pointer.
pub struct CWorker {
    limit: RawLimit,
    acquire: AcquireFn,
}

impl Contender for CReference {
    type Worker = CWorker;

    fn worker(&self) -> CWorker {
        CWorker {
            limit: self.limit,
            acquire: library().acquire,
        }
    }

    /// Map the file again, as an independent process would.
    fn attach(&self) -> CWorker {
        let limit = attach(&self.path, self.limit.emission_ns, self.limit.tolerance_ns);
        CWorker {
            limit,
            acquire: library().acquire,
        }
    }

    #[inline(always)]
    fn decide(w: &mut CWorker) -> bool {
        // SAFETY: `limit` was filled by gcra_ref_attach and its mapping is never unmapped.
        unsafe { (w.acquire)(&w.limit, 1) != 0 }
    }
}
