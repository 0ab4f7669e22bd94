//! The shape the sources keep: every source file of the workspace's packages (Rust, with the
//! integration tests, benches and examples, and the C, Python and JavaScript of the bindings and
//! their tests) short enough to read whole (at most [`MAX_LINES`] lines; the loom models, which
//! spell out one interleaving after another, are the exception), and the library's top-level
//! modules free of import cycles (each module can be read, and changed, knowing only the modules
//! below it).

mod common;
#[path = "structure/imports.rs"]
mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::root;

/// The most lines a source file may have.
const MAX_LINES: usize = 700;

/// Every `.rs` file under `dir`, recursively, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The directories of the workspace's Rust sources that the length rule covers: the packages'
/// sources, and the integration tests (with `tests/common/` and the directories of the tests
/// split into modules), benches and examples.
const RUST_DIRS: [&str; 10] = [
    "src",
    "cli/src",
    "fleet/src",
    "ffi/src",
    "ffi/libshmlimit",
    "ffi/bindings/src",
    "ffi/python/rust",
    "tests",
    "benches",
    "examples",
];

/// The Rust files the length rule leaves out, by name: the loom models, which spell out one
/// interleaving after another (`src/algo/loom_models.rs`, `fleet/src/loom_models.rs`). No
/// generated Rust file is under [`RUST_DIRS`].
const LONG_RUST_FILES: [&str; 1] = ["loom_models.rs"];

/// The Rust files under [`RUST_DIRS`] longer than `max` lines, as `path (N lines)`, and how many
/// files were read.
fn long_rust_files(root: &Path, max: usize) -> (Vec<String>, usize) {
    let mut long = Vec::new();
    let mut seen = 0;
    for dir in RUST_DIRS {
        for file in rust_files(&root.join(dir)) {
            seen += 1;
            if file
                .file_name()
                .is_some_and(|name| LONG_RUST_FILES.iter().any(|long| name == *long))
            {
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let lines = text.lines().count();
            if lines > max {
                long.push(format!(
                    "{} ({lines} lines)",
                    file.strip_prefix(root).unwrap_or(&file).display()
                ));
            }
        }
    }
    (long, seen)
}

#[test]
fn every_source_file_is_at_most_700_lines() {
    let (long, seen) = long_rust_files(&root(), MAX_LINES);
    assert!(seen > 50, "found only {seen} source files: wrong root?");
    // The scan reaches the tests' common module, a test split into modules, benches and examples.
    let (every, _) = long_rust_files(&root(), 0);
    for file in [
        "tests/common/mod.rs",
        "tests/fleet/servers.rs",
        "benches/main.rs",
        "examples/retry_budget.rs",
    ] {
        assert!(
            every.iter().any(|f| f.starts_with(&format!("{file} ("))),
            "{file} was not read by the length rule"
        );
    }
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines (split them by concern): {}",
        long.join(", ")
    );
}

/// The directories of hand-written sources in the other languages (C, Python, JavaScript and
/// TypeScript) that the length rule covers, each with the extensions it holds.
const OTHER_LANGUAGES: [(&str, &[&str]); 12] = [
    ("ffi/tests", &["c", "h"]),
    ("ffi/examples", &["c", "h", "cpp"]),
    ("ffi/python/src", &["py", "pyi"]),
    ("ffi/python/tests", &["py"]),
    ("ffi/python/examples", &["py"]),
    ("ffi/python/bench", &["py"]),
    ("ffi/node/lib", &["js", "mjs"]),
    ("ffi/node/src", &["c", "h"]),
    ("ffi/node/test", &["js", "mjs", "ts"]),
    ("ffi/node/bench", &["js"]),
    ("ffi/node/suites", &["js"]),
    ("ffi/node", &["ts"]),
];

/// Every file under `dir` whose extension is one of `exts`, recursively (the Python package's
/// Rust sources are covered with the Rust ones), in a stable order; dependencies and build
/// output (`node_modules`, `build`, `target`, `prebuilds`) left out.
fn files_with(dir: &Path, exts: &[&str], recurse: bool) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if recurse && !["node_modules", "build", "target", "prebuilds"].contains(&name) {
                    dirs.push(path);
                }
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The C, Python and JavaScript sources of the packages and their tests keep to the Rust
/// sources' length: at most [`MAX_LINES`] lines each. Generated and vendored files are not
/// under these directories (`ffi/include/shmlimit.h` is cbindgen's, `ffi/node/include/` is
/// Node's own headers).
#[test]
fn every_c_python_and_javascript_file_is_at_most_700_lines() {
    let mut long = Vec::new();
    let mut seen = BTreeMap::new();
    for (dir, exts) in OTHER_LANGUAGES {
        // ffi/node itself: only its top-level typings (the rest is in the rows above).
        let recurse = dir != "ffi/node";
        for file in files_with(&root().join(dir), exts, recurse) {
            let ext = file
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_owned();
            *seen.entry(ext).or_insert(0) += 1;
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let lines = text.lines().count();
            if lines > MAX_LINES {
                long.push(format!(
                    "{} ({lines} lines)",
                    file.strip_prefix(root()).unwrap_or(&file).display()
                ));
            }
        }
    }
    for ext in ["c", "py", "js"] {
        assert!(
            seen.get(ext).copied().unwrap_or(0) > 5,
            "found only {:?} .{ext} files: wrong root or directories? {seen:?}",
            seen.get(ext)
        );
    }
    assert!(
        long.is_empty(),
        "C, Python or JavaScript files over {MAX_LINES} lines (split them by concern): {}",
        long.join(", ")
    );
}

/// The typed handles are one generic `Handle<K, C>` whose methods are written once per group of
/// kinds: no `macro_rules!` under `src/handle/` (a macro there would be writing methods again),
/// and the old `src/handle/macros.rs` stays gone.
#[test]
fn no_macro_writes_the_typed_handles() {
    let handle = root().join("src/handle");
    assert!(
        !handle.join("macros.rs").exists(),
        "src/handle/macros.rs is back: a kind is a type parameter of Handle, not a macro"
    );
    let files = rust_files(&handle);
    assert!(
        files.iter().any(|f| f.ends_with("kind.rs")),
        "src/handle/kind.rs was not found: wrong root?"
    );
    let mut macros = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("macro_rules!") {
                macros.push(format!(
                    "{}:{}",
                    file.strip_prefix(root()).unwrap_or(file).display(),
                    n + 1
                ));
            }
        }
    }
    assert!(
        macros.is_empty(),
        "macro_rules! under src/handle/ (write each method once in an impl over a kind trait): {}",
        macros.join(", ")
    );
}

/// The engines own their words below the handles: no file under `src/engine/` names
/// `crate::limiter` or `crate::handle` in its code (doc comments may link to them).
#[test]
fn no_engine_imports_the_handles() {
    let engine = root().join("src/engine");
    let files = rust_files(&engine);
    assert!(
        files.iter().any(|f| f.ends_with("bucket/mod.rs")),
        "src/engine/bucket/mod.rs was not found: wrong root?"
    );
    let mut upward = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["crate::limiter", "crate::handle", "super::super::limiter"]
                .iter()
                .any(|m| code.contains(m))
            {
                upward.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(root()).unwrap_or(file).display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "an engine imports the handles (engines are below limiter/ and handle/):\n{}",
        upward.join("\n")
    );
}

/// The most methods the untyped `Limit` may have, and the most files they may be spread over.
const VIEW_METHODS: usize = 30;
const VIEW_FILES: usize = 3;

/// The methods of the inherent `impl` blocks of `type_name` in `text` (`impl<C: Clock>
/// Limit<C> {`, not trait impls), by name: each `fn` one level inside such a block.
fn inherent_methods(text: &str, type_name: &str) -> Vec<String> {
    let mut methods = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if !inside {
            let head = line.trim_end();
            inside = head.starts_with("impl")
                && !head.contains(" for ")
                && head.ends_with(&format!(" {type_name}<C> {{"));
            continue;
        }
        if line == "}" {
            inside = false;
            continue;
        }
        let Some(rest) = line.strip_prefix("    ") else {
            continue;
        };
        let rest = rest
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("const ")
            .trim_start_matches("unsafe ");
        if let Some(sig) = rest.strip_prefix("fn ") {
            let name = sig.split(['(', '<']).next().unwrap_or(sig);
            methods.push(name.to_owned());
        }
    }
    methods
}

#[test]
fn the_method_counter_counts_inherent_methods_only() {
    let text =
        "impl<C: Clock> Limit<C> {\n    pub fn name(&self) {}\n    fn here(&self) {\n        \
                fn inner() {}\n    }\n}\nimpl<C: Clock> Clone for Limit<C> {\n    fn clone(&self) \
                {}\n}\nimpl<C: Clock> Site<C> {\n    pub(crate) fn decide(&self) {}\n}\n";
    assert_eq!(inherent_methods(text, "Limit"), ["name", "here"]);
    assert_eq!(inherent_methods(text, "Site"), ["decide"]);
}

/// The untyped `Limit` is the inspection view (name, definition, live parameters, statistics,
/// policy, reset, kind, conversion to a typed handle): at most [`VIEW_METHODS`] methods in at
/// most [`VIEW_FILES`] files. Deciding is the engines' (on a `Site`), through the typed handles.
#[test]
fn the_untyped_limit_is_a_small_view() {
    let mut files = Vec::new();
    let mut total = 0;
    for file in rust_files(&root().join("src")) {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let methods = inherent_methods(&text, "Limit");
        if !methods.is_empty() {
            total += methods.len();
            files.push(format!(
                "{}: {}",
                file.strip_prefix(root()).unwrap_or(&file).display(),
                methods.join(", ")
            ));
        }
    }
    assert!(
        total > 5,
        "found only {total} methods of Limit: wrong root or pattern?"
    );
    assert!(
        total <= VIEW_METHODS && files.len() <= VIEW_FILES,
        "Limit has {total} methods in {} files (at most {VIEW_METHODS} in {VIEW_FILES}): \
         decisions belong to the engines\n{}",
        files.len(),
        files.join("\n")
    );
}

/// The files that may refuse a call for its kind (`wrong_kind(`): resolution, the binding
/// dispatch of the untyped callers and of the C ABI, and the constructor itself. The engines
/// decide with no test of the kind.
const KIND_CHECKS: &[&str] = &[
    "src/handle/resolve.rs",
    "src/handle/dispatch.rs",
    "src/c_abi.rs",
    "src/engine/site/parts.rs",
];

/// The lines (1-based) of `text` whose code, outside comments, calls `wrong_kind(`.
fn kind_checks(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            code.contains("wrong_kind(")
        })
        .map(|(n, _)| n + 1)
        .collect()
}

#[test]
fn the_kind_check_finder_finds_kind_checks() {
    let text = "fn f() {\n    return Err(self.wrong_kind(\"is keyed\"));\n}\n\
                /// [`Site::wrong_kind(`] in a doc\n// self.wrong_kind(\"x\")\n";
    assert_eq!(kind_checks(text), vec![2]);
}

#[test]
fn the_kind_is_checked_at_resolution_and_dispatch_only() {
    let files = rust_files(&root().join("src"));
    let mut seen = 0;
    let mut elsewhere = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let rel = file.strip_prefix(root()).unwrap_or(file);
        let lines = kind_checks(&text);
        if KIND_CHECKS.iter().any(|k| rel == Path::new(k)) {
            seen += lines.len();
            continue;
        }
        elsewhere.extend(lines.iter().map(|n| format!("{}:{n}", rel.display())));
    }
    assert!(
        seen >= 3,
        "found {seen} kind checks in {KIND_CHECKS:?}: wrong root or pattern?"
    );
    assert!(
        elsewhere.is_empty(),
        "a kind is checked outside resolution and the binding dispatch (an engine is called \
         for its kind's calls only):\n{}",
        elsewhere.join("\n")
    );
}
