//! The C ABI's library (`libshmlimit.so`) built with this binary, which the C workers of
//! `demo --mixed` link against, and next to which the scenario finds the Python package's
//! compiled module.

use std::path::{Path, PathBuf};

use crate::Failure;

/// The directory of the `libshmlimit.so` built with this binary: next to it, in `deps/`
/// (where `cargo test` builds it without copying it up) or one level up; the most recently
/// built one when there are several, so a stale copy is never linked.
pub fn dir() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::file(format!("cannot find this binary: {e}")))?;
    let here = exe.parent().unwrap_or(Path::new(".")).to_path_buf();
    let candidates = [here.clone(), here.join("deps"), here.join("..")];
    candidates
        .into_iter()
        .filter_map(|d| {
            let modified = std::fs::metadata(d.join("libshmlimit.so"))
                .ok()
                .filter(|m| m.is_file())?
                .modified()
                .ok()?;
            Some((modified, d))
        })
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, d)| d)
        .ok_or_else(|| {
            Failure::file(format!(
                "libshmlimit.so not found in {} or its deps/; build it with cargo build (the crate makes it)",
                here.display()
            ))
        })
}
