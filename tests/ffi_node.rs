//! The Node.js package `ffi/node` as a user gets it: its addon built against this build's
//! `libshmlimit.a` (strictly: warnings are errors), the package packed with `npm pack`, the
//! tarball installed into a fresh folder by an npm that finds no Rust toolchain and no C compiler
//! and runs no install script (`--ignore-scripts`), a first decision made there, and then the
//! package's `node:test` suite run inside the installed package: the API on real files, 4
//! `node:cluster` workers and C processes sharing one token bucket and one sliding log with every
//! admission checked against the bounds, a SIGKILLed worker's permit taken over, the HTTP
//! middleware behind real servers, and the TypeScript declarations under `tsc --strict`. The
//! addon inside the tarball must load on glibc 2.17 and later (`tests/ffi_node/portable.rs`):
//! build.js links it with Zig where it finds Zig (`SHMLIMIT_ZIG`, `zig` on PATH, or `python3 -m
//! ziglang`, the `ziglang` pip package); without Zig that test is reported IGNORED with the
//! reason.
//!
//! Node.js and npm: without them the test is reported IGNORED with the reason (never passed
//! without running); with `SHMLIMIT_REQUIRE_NODE=1` (set by `.ci/run`) their absence is a
//! failure instead, and so is the absence of Zig. This binary has its own harness (libtest-mimic), as tests/full_fs.rs, to
//! decide that at run time. The first run downloads the package's development dependencies
//! (Express, express-rate-limit, Fastify, TypeScript, rate-limiter-flexible) from the npm registry into
//! `ffi/node/node_modules`; the tests find them there through `NODE_PATH`.

mod common;
#[path = "ffi_node/portable.rs"]
mod portable;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use libtest_mimic::{Arguments, Failed, Trial};

use common::cbuild::lib_dir;
use common::root;

fn tool_version(tool: &str) -> Option<String> {
    let out = Command::new(tool).arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The Zig build.js would find (`SHMLIMIT_ZIG`, else `zig` on PATH, else `python3 -m ziglang`),
/// as its version, or why there is none.
fn zig_version() -> Result<String, String> {
    let named = std::env::var("SHMLIMIT_ZIG").ok();
    let candidates: Vec<(String, Vec<&str>)> = match named.as_deref() {
        Some("off") => return Err("SHMLIMIT_ZIG=off".to_owned()),
        Some(zig) => vec![(zig.to_owned(), vec![])],
        None => vec![
            ("zig".to_owned(), vec![]),
            ("python3".to_owned(), vec!["-m", "ziglang"]),
        ],
    };
    for (cmd, prefix) in candidates {
        if let Ok(out) = Command::new(&cmd).args(prefix).arg("version").output() {
            if out.status.success() {
                return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
            }
        }
    }
    Err(format!(
        "Zig not found ({}): needed to link the Node addon against glibc 2.17 (pip install \
         ziglang, or a zig on PATH)",
        named.map_or_else(
            || "no `zig` on PATH, no `python3 -m ziglang`".to_owned(),
            |zig| format!("SHMLIMIT_ZIG={zig} does not run")
        )
    ))
}

/// A trial's body as the harness wants it: a panic becomes the failure with its message.
fn outcome(body: fn()) -> Result<(), Failed> {
    std::panic::catch_unwind(body).map_err(|e| Failed::from(panic_message(&*e)))
}

fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "the test panicked".to_owned())
}

/// The count after `# NAME ` in node:test's TAP summary.
fn summary(tap: &str, name: &str) -> Option<u64> {
    let prefix = format!("# {name} ");
    tap.lines()
        .rev()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

fn main() {
    let args = Arguments::from_args();
    let required = std::env::var("SHMLIMIT_REQUIRE_NODE").is_ok_and(|v| v == "1");
    let tools = match (tool_version("node"), tool_version("npm")) {
        (Some(node), Some(npm)) => Ok((node, npm)),
        (node, npm) => Err(format!(
            "{} not found: needed to test the Node package ffi/node (Debian: apt-get install \
             nodejs npm)",
            match (node, npm) {
                (None, None) => "node and npm",
                (None, _) => "node",
                _ => "npm",
            }
        )),
    };
    let name = "node_package_builds_and_its_tests_pass";
    let ignored = tools.is_err() && !required;
    if let (Err(reason), true) = (&tools, ignored) {
        eprintln!("{name}: IGNORED: {reason}");
    }
    let trial = Trial::test(name, {
        let tools = tools.clone();
        move || match &tools {
            Ok((node, npm)) => {
                eprintln!("node {node}, npm {npm}");
                outcome(node_package_builds_and_its_tests_pass)
            }
            Err(reason) => Err(format!("SHMLIMIT_REQUIRE_NODE=1 and {reason}").into()),
        }
    })
    .with_ignored_flag(ignored);
    // The packed addon's glibc: needs node and npm (to pack) and Zig (to link it for glibc 2.17).
    let name = "node_packed_addon_loads_on_glibc_2_17";
    let zig = tools.and_then(|_| zig_version());
    let ignored = zig.is_err() && !required;
    if let (Err(reason), true) = (&zig, ignored) {
        eprintln!("{name}: IGNORED: {reason}");
    }
    let portable = Trial::test(name, move || match &zig {
        Ok(version) => {
            eprintln!("zig {version}");
            outcome(node_packed_addon_loads_on_glibc_2_17)
        }
        Err(reason) => Err(format!("SHMLIMIT_REQUIRE_NODE=1 and {reason}").into()),
    })
    .with_ignored_flag(ignored);
    let tables = Trial::test(
        "node_status_tables_are_generated_from_the_rust_table",
        || {
            node_status_tables_are_generated_from_the_rust_table();
            Ok(())
        },
    );
    let conclusion = libtest_mimic::run(&args, vec![trial, portable, tables]);
    if let Some(Ok(packed)) = PACKED.get() {
        // Statics are never dropped: the TempDir would stay.
        let _ = std::fs::remove_dir_all(packed.scratch.path());
    }
    conclusion.exit();
}

/// The Node package's copies of the status table, generated from the Rust one
/// (`shmlimit_ffi::status_table`): `lib/status.js` whole, and the error classes' regions of
/// `index.d.ts` and `lib/index.mjs` (between `<generated: error classes>` and `</generated>`).
/// `SHMLIMIT_BLESS=1 cargo test --test ffi_node` rewrites them.
fn node_status_tables_are_generated_from_the_rust_table() {
    use shmlimit_ffi::status_table::{status_table, BINDING_ERRORS};

    // (status as JavaScript writes it, C name, class, description)
    let mut rows: Vec<(String, String, &str, &str)> = status_table()
        .into_iter()
        .map(|r| {
            (
                format!("{}", r.status as i32),
                r.name,
                r.class,
                r.description,
            )
        })
        .collect();
    for ((name, class, description), status) in
        BINDING_ERRORS.iter().zip(["-1", "'PERMIT_UNAVAILABLE'"])
    {
        rows.push((status.to_owned(), (*name).to_owned(), class, description));
    }
    let header =
        "// Generated from the Rust status table (ffi/src/status_table.rs) by tests/ffi_node.rs:\n\
                  // do not edit; regenerate with SHMLIMIT_BLESS=1 cargo test --test ffi_node.\n";
    let mut status_js = format!(
        "'use strict';\n{header}// [status, code, class, description] for every error the package raises.\n\n\
         module.exports = [\n"
    );
    for (status, name, class, description) in &rows {
        status_js += &format!("  [{status}, '{name}', '{class}', {description:?}],\n");
    }
    status_js += "];\n";
    let mut mjs = String::new();
    let mut dts = String::new();
    for (_, name, class, description) in &rows {
        mjs += &format!("  {class},\n");
        dts += &format!(
            "/** `{name}`: {description}. */\nexport class {class} extends ShmlimitError {{}}\n"
        );
    }

    let dir = root().join("ffi/node");
    let bless = std::env::var_os("SHMLIMIT_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    let mut check = |file: &str, want: String| {
        let path = dir.join(file);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            if bless {
                std::fs::write(&path, &want).expect("write the generated file");
            } else {
                stale.push(file.to_owned());
            }
        }
    };
    check("lib/status.js", status_js);
    for (file, region) in [("index.d.ts", dts), ("lib/index.mjs", mjs)] {
        let text = std::fs::read_to_string(dir.join(file)).expect("read");
        let (start, end) = ("<generated: error classes>", "</generated>");
        // From the line after the start marker to the start of the end marker's line.
        let open = text
            .find(start)
            .and_then(|i| text[i..].find('\n').map(|n| i + n + 1));
        let close = open.and_then(|o| {
            let c = o + text[o..].find(end)?;
            Some(text[..c].rfind('\n').map_or(0, |n| n + 1).max(o))
        });
        let (Some(open), Some(close)) = (open, close) else {
            panic!("ffi/node/{file} has no `{start}` ... `{end}` region");
        };
        check(file, format!("{}{region}{}", &text[..open], &text[close..]));
    }
    assert!(
        stale.is_empty(),
        "ffi/node/{{{}}} differ from the Rust status table: regenerate them with \
         SHMLIMIT_BLESS=1 cargo test --test ffi_node",
        stale.join(",")
    );
}

/// `cmd`'s output, which must be a success.
fn run(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A directory whose only commands are `node` and `npm`: a PATH without cargo or a C compiler.
fn node_only_path(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin");
    for tool in ["node", "npm"] {
        let out = run(
            Command::new("sh").args(["-c", &format!("command -v {tool}")]),
            "command -v",
        );
        let found = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let real = std::fs::canonicalize(&found).expect("resolve the tool");
        std::os::unix::fs::symlink(real, bin.join(tool)).expect("link the tool");
    }
    bin
}

/// Copy the directory `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("read the directory") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The package built and packed once for the trials that need it.
struct Packed {
    /// Holds the tarball (and the fresh install of `node_package_builds_and_its_tests_pass`).
    scratch: tempfile::TempDir,
    tarball: PathBuf,
    /// The addon build.js wrote.
    built: Vec<u8>,
    /// build.js's build/build-info.json.
    info: serde_json::Value,
}

static PACKED: OnceLock<Result<Packed, String>> = OnceLock::new();

/// The package, built and packed by the first trial that asks (the other waits for it).
fn packed() -> &'static Packed {
    let packed = PACKED
        .get_or_init(|| std::panic::catch_unwind(build_and_pack).map_err(|e| panic_message(&*e)));
    match packed {
        Ok(packed) => packed,
        Err(e) => panic!("building and packing the package failed: {e}"),
    }
}

fn build_and_pack() -> Packed {
    let dir = root().join("ffi/node");
    let include = root().join("ffi/include");

    // The development dependencies (the package itself has no install script: nothing builds).
    run(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--no-package-lock"])
            .current_dir(&dir),
        "npm install in ffi/node",
    );
    // The addon, linked with the libshmlimit.a of this very build.
    run(
        Command::new("node")
            .arg("build.js")
            .current_dir(&dir)
            .env("SHMLIMIT_LIB_DIR", lib_dir())
            .env("SHMLIMIT_INCLUDE_DIR", &include)
            .env("SHMLIMIT_NODE_STRICT", "1"),
        "node build.js",
    );
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("build/build-info.json"))
            .expect("build.js wrote build/build-info.json"),
    )
    .expect("build-info.json");
    assert_eq!(
        info["archive"].as_str(),
        Some(&*lib_dir().join("libshmlimit.a").to_string_lossy()),
        "the addon was not linked with this build's library:\n{info}"
    );
    let addon = dir.join("prebuilds/linux-x64/shmlimit.node");
    let built = std::fs::read(&addon).expect("build.js wrote the addon");

    // Packed: the addon inside, no install script.
    let scratch = tempfile::tempdir().expect("temp dir");
    let packed = run(
        Command::new("npm")
            .args(["pack", "--ignore-scripts", "--json", "--pack-destination"])
            .arg(scratch.path())
            .current_dir(&dir),
        "npm pack",
    );
    let listing: serde_json::Value =
        serde_json::from_slice(&packed.stdout).expect("npm pack --json");
    let files: Vec<&str> = listing[0]["files"]
        .as_array()
        .expect("the tarball's files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for want in [
        "prebuilds/linux-x64/shmlimit.node",
        "lib/index.js",
        "index.d.ts",
    ] {
        assert!(files.contains(&want), "{want} is not packed: {files:?}");
    }
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("package.json")).expect("read"))
            .expect("package.json");
    for script in ["preinstall", "install", "postinstall", "prepare"] {
        assert!(
            manifest["scripts"][script].is_null(),
            "package.json has a `{script}` script: an install must run nothing"
        );
    }
    // npm refuses the install on a platform the tarball has no addon for: `os`, `cpu` and `libc`
    // name exactly the packed prebuilds (linux-x64, linked with glibc).
    let mut platforms: Vec<&str> = files
        .iter()
        .filter_map(|f| f.strip_prefix("prebuilds/")?.strip_suffix("/shmlimit.node"))
        .collect();
    platforms.sort_unstable();
    let listed = |field: &str| -> Vec<&str> {
        manifest[field]
            .as_array()
            .unwrap_or_else(|| panic!("package.json has no `{field}` list"))
            .iter()
            .filter_map(|v| v.as_str())
            .collect()
    };
    let named: Vec<String> = listed("os")
        .iter()
        .flat_map(|os| {
            listed("cpu")
                .into_iter()
                .map(move |cpu| format!("{os}-{cpu}"))
        })
        .collect();
    assert_eq!(
        named, platforms,
        "package.json's os and cpu are not the packed prebuilds' platforms"
    );
    assert_eq!(listed("libc"), ["glibc"], "package.json's libc");
    let tarball = scratch
        .path()
        .join(listing[0]["filename"].as_str().expect("the tarball's name"));
    Packed {
        scratch,
        tarball,
        built,
        info,
    }
}

/// The addon inside the tarball, as `objdump` reads it (`tests/ffi_node/portable.rs`): glibc
/// 2.17's symbol versions at most, glibc's libraries only, nothing unversioned but Node-API.
fn node_packed_addon_loads_on_glibc_2_17() {
    let packed = packed();
    let compiler = packed.info["compiler"].as_str().unwrap_or_default();
    assert!(
        compiler.starts_with("zig "),
        "build.js did not link the addon with Zig (it used {compiler}), though Zig is found"
    );
    let unpacked = tempfile::tempdir().expect("temp dir");
    let member = "package/prebuilds/linux-x64/shmlimit.node";
    run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&packed.tarball)
            .arg("-C")
            .arg(unpacked.path())
            .arg(member),
        "tar -xzf the tarball's addon",
    );
    let addon = unpacked.path().join(member);
    let problems = portable::problems(&addon);
    assert!(
        problems.is_empty(),
        "the packed addon (linked by {compiler}) would not load on glibc 2.17:\n  {}",
        problems.join("\n  ")
    );
    assert_eq!(
        packed.info["glibc"].as_str(),
        Some("2.17"),
        "build.js says the addon needs another glibc"
    );
}

fn node_package_builds_and_its_tests_pass() {
    let dir = root().join("ffi/node");
    let include = root().join("ffi/include");
    let Packed {
        scratch,
        tarball,
        built,
        ..
    } = packed();

    // Installed into a fresh folder, with no toolchain on PATH and no script run.
    let fresh = scratch.path().join("fresh");
    std::fs::create_dir_all(&fresh).expect("create the fresh folder");
    std::fs::write(
        fresh.join("package.json"),
        r#"{"name": "fresh", "version": "1.0.0", "private": true}"#,
    )
    .expect("write package.json");
    let path = node_only_path(scratch.path());
    run(
        Command::new("npm")
            .args(["install", "--ignore-scripts", "--no-audit", "--no-fund"])
            .arg(tarball)
            .current_dir(&fresh)
            .env_clear()
            .env("PATH", &path)
            .env(
                "HOME",
                std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
            ),
        "npm install of the tarball",
    );
    let installed = fresh.join("node_modules/shmlimit");
    assert_eq!(
        &std::fs::read(installed.join("prebuilds/linux-x64/shmlimit.node")).expect("installed"),
        built,
        "the installed addon is not the one built here"
    );
    let decided = run(
        Command::new("node")
            .args([
                "-e",
                "const s = require('shmlimit'); \
                 const l = s.Limiter.createOrOpen('fresh.shm', { api: s.tokenBucket({ rate: 2, per: 3600000 }) }); \
                 const api = l.limit('api'); \
                 console.log([1, 2, 3].map(() => api.tryAcquire().allowed).join(' '));",
            ])
            .current_dir(&fresh)
            .env_clear()
            .env("PATH", &path),
        "a first decision from the installed package",
    );
    assert_eq!(
        String::from_utf8_lossy(&decided.stdout).trim(),
        "true true false"
    );

    // The suite, inside the installed package: `require('..')` is the installed package.
    copy_dir(&dir.join("test"), &installed.join("test"));
    let mut files: Vec<String> = std::fs::read_dir(installed.join("test"))
        .expect("test")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".test.js"))
        .map(|name| format!("test/{name}"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "test files: {files:?}");
    let out = Command::new("node")
        .args(["--test", "--test-reporter=tap"])
        .args(&files)
        .current_dir(&installed)
        .env("NODE_PATH", dir.join("node_modules"))
        .env("SHMLIMIT_LIB_DIR", lib_dir())
        .env("SHMLIMIT_INCLUDE_DIR", &include)
        // test/readme.test.js checks the repository README's Node.js example too.
        .env("SHMLIMIT_CHECKOUT", root())
        .output()
        .expect("node --test runs");
    let tap = String::from_utf8_lossy(&out.stdout);
    eprintln!("{tap}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "node --test failed (see the TAP output above)"
    );
    // Every test ran: none failed, was skipped, cancelled or left to do.
    for (what, want) in [("fail", 0), ("skipped", 0), ("cancelled", 0), ("todo", 0)] {
        assert_eq!(summary(&tap, what), Some(want), "# {what}");
    }
    let passed = summary(&tap, "pass").expect("# pass in the TAP summary");
    assert!(passed >= 20, "only {passed} Node tests passed");
}
