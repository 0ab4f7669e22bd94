//! The checked-in C header `ffi/include/shmlimit.h` must be exactly what cbindgen generates from
//! `ffi/src/` with `ffi/cbindgen.toml`. Regenerate it with
//! `SHMLIMIT_BLESS=1 cargo test --test ffi_header`.

mod common;

use std::path::{Path, PathBuf};

use common::root;

/// The Rust sources of the C ABI.
fn sources(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("ffi/src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

fn generate(root: &Path) -> String {
    let config = cbindgen::Config::from_file(root.join("ffi/cbindgen.toml"))
        .expect("ffi/cbindgen.toml parses");
    // cbindgen follows the `mod` declarations of ffi/src/lib.rs into the other files.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("ffi/src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn header_matches_the_rust_exports() {
    let root = root();
    let path = root.join("ffi/include/shmlimit.h");
    let generated = generate(&root);
    if std::env::var_os("SHMLIMIT_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "{} is out of date with ffi/src/ (first difference at line {}).\n\
             Regenerate it with: SHMLIMIT_BLESS=1 cargo test --test ffi_header\n\
             checked in: {:?}\n\
             generated:  {:?}",
            path.display(),
            first + 1,
            checked_in.lines().nth(first).unwrap_or("<end of file>"),
            generated.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

/// Every exported symbol of the library is declared in the header, and the other way round:
/// the cbindgen run above could miss a function it cannot parse.
#[test]
fn every_export_is_declared() {
    let root = root();
    let header = std::fs::read_to_string(root.join("ffi/include/shmlimit.h")).expect("header");
    let mut exports = Vec::new();
    for src in sources(&root) {
        let text = std::fs::read_to_string(&src).expect("source");
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() != "#[no_mangle]" {
                continue;
            }
            let signature = lines.next().unwrap_or_default();
            let name = signature
                .split("fn ")
                .nth(1)
                .and_then(|rest| rest.split('(').next())
                .unwrap_or_else(|| panic!("{}: no fn after #[no_mangle]", src.display()));
            exports.push(name.to_owned());
        }
    }
    assert!(exports.len() >= 15, "found only {exports:?}");
    let declared = declared_functions(&header);
    for name in &exports {
        assert!(
            name.starts_with("shmlimit_"),
            "{name}: exports are prefixed shmlimit_"
        );
        assert!(declared.contains(name), "{name} is missing from the header");
    }
    for name in &declared {
        assert!(
            exports.contains(name),
            "{name} is declared but not exported"
        );
    }
}

/// Names of the functions the header declares: identifiers followed by `(` outside comments.
fn declared_functions(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in header.lines() {
        let code = line.split("//").next().unwrap_or_default();
        if code.trim_start().starts_with('#') || code.trim_start().starts_with('*') {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find('(') {
            let ident: String = rest[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if ident.starts_with("shmlimit_") {
                names.push(ident);
            }
            rest = &rest[at + 1..];
        }
    }
    names
}
