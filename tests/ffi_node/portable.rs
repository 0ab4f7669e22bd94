//! The packed addon loads on every glibc Linux that Node 16 and later run on: what it needs of
//! the system, read from its ELF file by binutils' `objdump` (as auditwheel reads a wheel's).
//!
//! - The symbol versions it requires (`objdump -p`, "Version References", which the dynamic
//!   loader checks when it loads the file): GLIBC_2.17 at most, the glibc of manylinux2014.
//! - The shared libraries it names (`NEEDED`): glibc's own and libgcc_s, which every glibc
//!   system has (manylinux2014's list), nothing else.
//! - Every function or object it takes from elsewhere (`objdump -T`, `*UND*`) is versioned (so
//!   the versions above cover it), weak (absent is allowed: the Rust standard library's
//!   `statx`, `getrandom`, ... looked up at run time), or a Node-API function, which the `node`
//!   executable exports. An unversioned strong symbol would be bound to whatever the running
//!   glibc has, and fail where it has none, only when first called.
//!
//! build.js links the addon with Zig (`zig cc -target x86_64-linux-gnu.2.17`) wherever it finds
//! Zig; the system `cc` of a glibc 2.34 or later gives GLIBC_2.34 (`pthread_create`, `dlsym`).

use std::path::Path;
use std::process::Command;

/// The oldest glibc the packed addon must load on.
pub const GLIBC: [u32; 2] = [2, 17];

/// The shared libraries the addon may name: glibc's, the dynamic loader, libgcc_s.
const LIBRARIES: &[&str] = &[
    "libc.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "libm.so.6",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

fn objdump(flag: &str, file: &Path) -> String {
    let out = Command::new("objdump")
        .arg(flag)
        .arg(file)
        .output()
        .unwrap_or_else(|e| {
            panic!("objdump {flag} (binutils; Debian: apt-get install binutils): {e}")
        });
    assert!(
        out.status.success(),
        "objdump {flag} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `GLIBC_2.3.4` as [2, 3, 4]; None for another name.
fn glibc_version(name: &str) -> Option<Vec<u32>> {
    name.strip_prefix("GLIBC_")?
        .split('.')
        .map(|n| n.parse().ok())
        .collect()
}

/// Why the addon at `file` would not load on glibc 2.17, one line per reason; empty when it
/// would.
pub fn problems(file: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let headers = objdump("-p", file);
    // "  NEEDED               libc.so.6" among the dynamic section's entries.
    for line in headers.lines() {
        let mut words = line.split_whitespace();
        if let (Some("NEEDED"), Some(library)) = (words.next(), words.next()) {
            if !LIBRARIES.contains(&library) {
                problems.push(format!("it needs {library}, not a library of glibc's"));
            }
        }
    }
    // "Version References:", then "  required from libc.so.6:" and "    0x... 0x00 02 GLIBC_2.17".
    let references = headers
        .split_once("Version References:")
        .map_or("", |(_, rest)| rest);
    let mut glibc = Vec::new();
    for line in references.lines() {
        let Some(name) = line.split_whitespace().nth(3) else {
            continue;
        };
        if let Some(version) = glibc_version(name) {
            if version.as_slice() > GLIBC.as_slice() {
                problems.push(format!("it requires {name} (newer than glibc 2.17)"));
            }
            glibc.push(version);
        }
    }
    if glibc.is_empty() {
        problems.push("objdump -p lists no GLIBC_ version reference".to_owned());
    }
    // "0000000000000000  w   DF *UND*	0000000000000000 (GLIBC_2.2.5) name": the flags, then
    // after the size the version (in parentheses when hidden), `Base` or nothing, then the name.
    for line in objdump("-T", file).lines() {
        let Some((flags, rest)) = line.split_once("*UND*") else {
            continue;
        };
        let weak = flags
            .split_whitespace()
            .nth(1)
            .is_some_and(|f| f.contains('w'));
        // [size, version, name], [size, "Base", name] or [size, name].
        let words: Vec<&str> = rest.split_whitespace().collect();
        let Some(name) = words.last() else {
            continue;
        };
        let versioned = words.len() == 3 && words[1] != "Base";
        let node_api = name.starts_with("napi_") || name.starts_with("node_api_");
        if !weak && !versioned && !node_api {
            problems.push(format!(
                "it takes {name} unversioned from whatever library defines it"
            ));
        }
    }
    problems
}
