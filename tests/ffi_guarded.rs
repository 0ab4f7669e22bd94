//! Guarded limits through the C ABI: `ffi/tests/guarded.c` compiled with gcc (strict C99, and
//! under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer) against the
//! `libshmlimit` cargo built for this test, and run in a fresh temporary directory. The program
//! opens a guarded handle on a missing file (fail-open admits, fail-closed denies, both
//! flagged), creates the file through the C ABI and checks that the guarded limits then decide
//! for real, bounded by their limits.

mod common;

use common::cbuild::{c_program, compile, Link};
use common::root;

/// Build `ffi/tests/guarded.c` with `flags` and run it on a fresh directory; its stdout.
fn build_and_run(flags: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("guarded");
    compile(
        "gcc",
        flags,
        &root().join("ffi/tests/guarded.c"),
        &exe,
        Link::Shared,
    );
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let output = c_program(&exe)
        .arg(&work)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}{stderr}",
        exe.display(),
        output.status
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}{stderr}");
    stdout
}

const C99: &[&str] = &["-std=c99", "-D_POSIX_C_SOURCE=200809L"];

#[test]
fn c_guarded_limits_apply_their_policy_then_the_limit() {
    let out = build_and_run(C99);
    let passed: u32 = out
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {out:?}"));
    // Every check of the program ran (a program that stopped early would pass fewer): the
    // count is fixed, the loops having fixed lengths.
    assert_eq!(passed, 322, "{out}");
}

#[test]
fn c_guarded_limits_are_clean_under_sanitizers() {
    let flags = [
        C99,
        &[
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
        ],
    ]
    .concat();
    build_and_run(&flags);
}
