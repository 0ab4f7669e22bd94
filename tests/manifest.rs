//! Every integration test in `tests/` runs under `cargo test`, and every example in `examples/`
//! is built.
//!
//! The workspace declares its tests by hand: most belong to the library's package (the top-level
//! `Cargo.toml`, `autotests = false`), the ones that run the `shmlimit` binary to the command
//! line's package (`cli/Cargo.toml`, as `path = "../tests/NAME.rs"`, so that cargo builds the
//! binary for them and sets `CARGO_BIN_EXE_shmlimit`). A file added to `tests/` and declared in
//! neither would silently never run: this test fails instead, and names it. A test split into
//! modules keeps them in `tests/NAME/`, declared by its root `tests/NAME.rs` with `#[path]` (one
//! binary per test, under the test's own name), and the modules the tests share are in
//! `tests/common/`: a file there that its root does not declare fails the test too. The examples
//! are declared by hand too (the library's in `Cargo.toml`, the fleet agent's in
//! `fleet/Cargo.toml`).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::root;

/// The `path` of every `[[test]]` (`table` "test", default directory `tests/`) or `[[example]]`
/// ("example", `examples/`) in `manifest`: its `path` relative to `dir`, or `DEFAULT/NAME.rs`.
fn declared(manifest: &Path, dir: &Path, table: &str, default: &str) -> Vec<PathBuf> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut tests = Vec::new();
    // (name, path) of the [[test]] table being read.
    let mut current: Option<(Option<String>, Option<String>)> = None;
    let mut flush = |current: &mut Option<(Option<String>, Option<String>)>| {
        if let Some((name, path)) = current.take() {
            let path = match (path, name) {
                (Some(path), _) => dir.join(path),
                (None, Some(name)) => dir.join(default).join(format!("{name}.rs")),
                (None, None) => panic!(
                    "{}: a [[{table}]] with neither name nor path",
                    manifest.display()
                ),
            };
            tests.push(path);
        }
    };
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            flush(&mut current);
            if line == format!("[[{table}]]") {
                current = Some((None, None));
            }
            continue;
        }
        let Some((name, path)) = current.as_mut() else {
            continue;
        };
        if let Some((key, value)) = line.split_once('=') {
            let value = value.trim().trim_matches('"').to_owned();
            match key.trim() {
                "name" => *name = Some(value),
                "path" => *path = Some(value),
                _ => {}
            }
        }
    }
    flush(&mut current);
    tests
}

fn normalise(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_test_file_is_declared_by_a_package() {
    let root = root();
    let mut declared_files = BTreeSet::new();
    let mut binary_tests = BTreeSet::new();
    for dir in [root.clone(), root.join("cli")] {
        for path in declared(&dir.join("Cargo.toml"), &dir, "test", "tests") {
            let path = normalise(&path);
            if dir.ends_with("cli") {
                binary_tests.insert(path.clone());
            }
            assert!(
                declared_files.insert(path.clone()),
                "{} is declared twice",
                path.display()
            );
        }
    }
    let mut missing = Vec::new();
    let mut misplaced = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let path = normalise(&path);
        if !declared_files.contains(&path) {
            missing.push(name);
        } else if !binary_tests.contains(&path)
            && sources_of(&path)
                .iter()
                .any(|source| source.contains(concat!("env!(\"CARGO_BIN_EXE_", "shmlimit\")")))
        {
            // Only the binary's own package has the binary built and its path set.
            misplaced.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/{{{}}} would never run: declare each as a [[test]] in Cargo.toml (or in \
         cli/Cargo.toml, with path = \"../tests/NAME.rs\", if it runs the shmlimit binary)",
        missing.join(", ")
    );
    assert!(
        misplaced.is_empty(),
        "tests/{{{}}} run the shmlimit binary: declare them in cli/Cargo.toml (path = \
         \"../tests/NAME.rs\"), not in Cargo.toml",
        misplaced.join(", ")
    );
    // The check itself: the library's and the binary's test lists were both read.
    for name in ["manifest.rs", "cli.rs"] {
        assert!(
            declared_files.contains(&normalise(&root.join("tests").join(name))),
            "tests/{name} not found among the declared tests: the manifests were misread"
        );
    }
}

/// The `.rs` files in `dir`, sorted.
fn rust_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

/// The text of the test `tests/NAME.rs` and of its modules in `tests/NAME/`, if it has any.
fn sources_of(test: &Path) -> Vec<String> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let mut sources = vec![read(test)];
    let modules = test.with_extension("");
    if modules.is_dir() {
        sources.extend(rust_files_in(&modules).iter().map(|path| read(path)));
    }
    sources
}

/// A test split into modules keeps them in `tests/NAME/`, each declared by the test's root file
/// `tests/NAME.rs` as `#[path = "NAME/FILE.rs"]`; the modules shared by the tests are in
/// `tests/common/`, each declared in `tests/common/mod.rs` as `mod FILE;`. A file in such a
/// directory that its root does not declare would silently never be compiled: this test fails
/// instead, and names it. Directories in these directories are refused (no test nests deeper).
#[test]
fn every_module_file_of_a_test_is_declared_by_its_root() {
    let tests = root().join("tests");
    let mut undeclared = Vec::new();
    let mut split = 0;
    for entry in std::fs::read_dir(&tests).expect("tests/") {
        let dir = entry.expect("directory entry").path();
        if !dir.is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        for inner in std::fs::read_dir(&dir).expect("a test's directory") {
            let inner = inner.expect("directory entry").path();
            assert!(
                !inner.is_dir(),
                "{}: a directory inside tests/{name}/ (keep a test's modules in one directory)",
                inner.display()
            );
        }
        let (root_file, declaration): (PathBuf, fn(&str, &str) -> String) = if name == "common" {
            (dir.join("mod.rs"), |_, module| format!("mod {module};"))
        } else {
            split += 1;
            (tests.join(format!("{name}.rs")), |dir, module| {
                format!("#[path = \"{dir}/{module}.rs\"]")
            })
        };
        let text = std::fs::read_to_string(&root_file).unwrap_or_else(|e| {
            panic!(
                "tests/{name}/ holds modules but its root {} cannot be read: {e}",
                root_file.display()
            )
        });
        for file in rust_files_in(&dir) {
            let module = file.file_stem().unwrap().to_string_lossy().into_owned();
            if file == root_file {
                continue;
            }
            if !text.contains(&declaration(&name, &module)) {
                undeclared.push(format!("tests/{name}/{module}.rs"));
            }
        }
    }
    assert!(
        undeclared.is_empty(),
        "{} would never be compiled: declare each in its test's root (tests/NAME.rs: \
         #[path = \"NAME/FILE.rs\"] mod FILE;, tests/common/mod.rs: mod FILE;)",
        undeclared.join(", ")
    );
    // The check itself: the directories of the split tests were read.
    assert!(
        split > 5,
        "found only {split} directories of split tests in tests/: wrong root?"
    );
}

#[test]
fn every_example_is_declared_by_a_package() {
    let root = root();
    let mut declared_files = BTreeSet::new();
    for dir in [root.clone(), root.join("fleet")] {
        for path in declared(&dir.join("Cargo.toml"), &dir, "example", "examples") {
            assert!(
                declared_files.insert(normalise(&path)),
                "{} is declared twice",
                path.display()
            );
        }
    }
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).expect("examples/") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "rs")
            && !declared_files.contains(&normalise(&path))
        {
            missing.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "examples/{{{}}} would never be built: declare each as an [[example]] in Cargo.toml (or \
         in fleet/Cargo.toml, with path = \"../examples/NAME.rs\", if it needs the fleet agent)",
        missing.join(", ")
    );
    assert!(
        declared_files.contains(&normalise(&root.join("examples/fleet_agent.rs"))),
        "examples/fleet_agent.rs not found among the declared examples: the manifests were misread"
    );
}
