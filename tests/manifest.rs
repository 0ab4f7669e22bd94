//! Every integration test in `tests/` runs under `cargo test`, and every example in `examples/`
//! is built.
//!
//! The workspace declares its tests by hand: most belong to the library's package (the top-level
//! `Cargo.toml`, `autotests = false`), the ones that run the `shmlimit` binary to the command
//! line's package (`cli/Cargo.toml`, as `path = "../tests/NAME.rs"`, so that cargo builds the
//! binary for them and sets `CARGO_BIN_EXE_shmlimit`). A file added to `tests/` and declared in
//! neither would silently never run: this test fails instead, and names it. The examples are
//! declared by hand too (the library's in `Cargo.toml`, the fleet agent's in `fleet/Cargo.toml`).

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
            && std::fs::read_to_string(&path)
                .expect("test source")
                .contains(concat!("env!(\"CARGO_BIN_EXE_", "shmlimit\")"))
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
