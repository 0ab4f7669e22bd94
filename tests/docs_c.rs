//! The C examples of the documentation compile against the header and the library: every
//! ```c block of README.md and ffi/README.md. A block that is a whole program (it has `main`) is
//! compiled strictly (C99, warnings are errors), linked against this build's libshmlimit and run
//! with its `/dev/shm/` paths pointed into a temporary directory; it must exit 0. A fragment is
//! compiled strictly as the body of a function, after declarations of the handles and helpers
//! the page's text names (`api`, `per_user`, `send_request()`...), with its `#include` lines
//! moved to the top: what it calls, with which argument types, must be in the header.

mod common;

use std::path::Path;

use common::cbuild::{c_program, compile, Link};
use common::root;

/// The pages whose C examples are checked, with the least number of blocks each holds (so that
/// a page whose fences change is noticed rather than silently checked for nothing).
const DOCUMENTS: &[(&str, usize)] = &[("README.md", 1), ("ffi/README.md", 8)];

/// What a fragment may use without declaring it: the handles and values the page's text
/// introduces before it, and the application's own functions it calls. File-scope, so that a
/// fragment's own declaration of the same name shadows it.
const PRELUDE: &str = r#"
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <shmlimit.h>

static shmlimit_limit *api, *per_user, *per_minute, *downstream, *db;
static shmlimit_decision d, grant;
static shmlimit_def def;
static shmlimit_fleet_lease lease;
static const char *user = "alice";
static const uint8_t *key = (const uint8_t *)"alice";
static size_t key_len = 5;
static const char *path = "/dev/shm/app.shm";
static bool send_request(void) { return true; }
static void query(void) {}
"#;

/// The ```c blocks of a Markdown file: (line of the opening fence, code).
fn c_blocks(document: &str) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(root().join(document))
        .unwrap_or_else(|e| panic!("{document}: {e}"));
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match open.take() {
            None if line.trim_end() == "```c" => open = Some((i + 1, String::new())),
            None => {}
            Some(block) if line.trim_end() == "```" => blocks.push(block),
            Some((at, mut code)) => {
                code.push_str(line);
                code.push('\n');
                open = Some((at, code));
            }
        }
    }
    assert!(open.is_none(), "{document}: a ```c block is not closed");
    blocks
}

/// `code` as a translation unit: a whole program as written, a fragment as the body of
/// `int example(void)` after [`PRELUDE`] (its `#include` lines moved before the prelude).
fn translation_unit(code: &str) -> (bool, String) {
    if code.contains("int main(") {
        return (true, code.to_owned());
    }
    let (includes, body): (Vec<&str>, Vec<&str>) = code
        .lines()
        .partition(|l| l.trim_start().starts_with("#include"));
    let unit = format!(
        "{}\n{PRELUDE}\nint example(void);\nint example(void) {{\n{}\n    return 0;\n}}\n",
        includes.join("\n"),
        body.join("\n")
    );
    (false, unit)
}

/// Compile (and, for a whole program, run) the block at `document:line`; the program's
/// output on failure.
fn check(document: &str, line: usize, code: &str, dir: &Path) -> Result<(), String> {
    let (program, unit) = translation_unit(code);
    let work = dir.join(format!("{}-{line}", document.replace('/', "_")));
    std::fs::create_dir(&work).expect("work dir");
    let source = work.join("example.c");
    let unit = unit.replace("/dev/shm/", &format!("{}/", work.display()));
    std::fs::write(&source, &unit).expect("write the example");
    let exe = work.join("example");
    if !program {
        // A fragment: compiled as an object (nothing to run it against), unused prelude
        // declarations allowed.
        let out = std::process::Command::new("gcc")
            .args(["-std=c99", "-c"])
            .args(common::cbuild::STRICT)
            .args(["-Wno-unused-variable", "-Wno-unused-function"])
            .args(["-Wno-unused-but-set-variable", "-Wno-unused-result"])
            .arg("-I")
            .arg(root().join("ffi/include"))
            .arg(&source)
            .arg("-o")
            .arg(work.join("example.o"))
            .output()
            .expect("running gcc");
        return if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "gcc failed:\n{}\n--- the unit ---\n{unit}",
                String::from_utf8_lossy(&out.stderr)
            ))
        };
    }
    compile("gcc", &["-std=c99"], &source, &exe, Link::Shared);
    let out = c_program(&exe)
        .current_dir(&work)
        .output()
        .map_err(|e| format!("running it: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "it exited with {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[test]
fn every_c_example_of_the_documentation_compiles_and_the_whole_programs_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    let (mut programs, mut fragments) = (0, 0);
    for &(document, least) in DOCUMENTS {
        let blocks = c_blocks(document);
        assert!(
            blocks.len() >= least,
            "{document}: {} ```c blocks, expected at least {least}",
            blocks.len()
        );
        for (line, code) in blocks {
            if code.contains("int main(") {
                programs += 1;
            } else {
                fragments += 1;
            }
            if let Err(e) = check(document, line, &code, dir.path()) {
                failures.push(format!("the example at {document}:{line}: {e}"));
            }
        }
    }
    println!("{programs} whole programs compiled and run, {fragments} fragments compiled");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(programs >= 1, "README.md's C example is a whole program");
}

#[test]
fn a_wrong_example_fails_to_compile_or_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A fragment calling a function the header does not declare.
    assert!(check("x.md", 1, "shmlimit_no_such_call(api);\n", dir.path()).is_err());
    // A fragment with the wrong argument type.
    assert!(check("x.md", 2, "shmlimit_acquire(api, 1, &def);\n", dir.path()).is_err());
    // A whole program that fails.
    let failing = "#include <shmlimit.h>\nint main(void) {\n    shmlimit_limiter *l;\n    \
                   return shmlimit_limiter_open(\"/dev/shm/none.shm\", NULL, &l) == SHMLIMIT_OK \
                   ? 0 : 1;\n}\n";
    assert!(check("x.md", 3, failing, dir.path()).is_err());
    // The same fragment shape compiles when it is right.
    assert_eq!(
        check("x.md", 4, "shmlimit_acquire(api, 1, &d);\n", dir.path()),
        Ok(())
    );
}
