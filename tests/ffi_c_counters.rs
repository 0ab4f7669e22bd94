//! A counters limit through the C ABI from a real C program (`ffi/tests/counters.c`, strict
//! C99 and as C++, and under the address and undefined-behaviour sanitizers): its error paths,
//! then forked C workers sharing it, each strategy held to its bound per key.

mod common;

use common::cbuild::{c_program, compile, Link};
use common::root;

fn build_and_run(compiler: &str, lang: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("counters");
    compile(
        compiler,
        lang,
        &root().join("ffi/tests/counters.c"),
        &exe,
        Link::Shared,
    );
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let output = c_program(&exe)
        .arg(&work)
        .output()
        .expect("running the C program");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

#[test]
fn counters_from_c_hold_their_bounds_and_refuse_bad_input() {
    let out = build_and_run("gcc", &["-std=c99"]);
    assert!(out.contains(" passed, 0 failed"), "{out}");
    let passed: u32 = out
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a count of checks");
    assert!(passed > 100, "{out}");
}

#[test]
fn counters_from_cxx() {
    let out = build_and_run("g++", &["-x", "c++", "-std=c++11"]);
    assert!(out.contains(" passed, 0 failed"), "{out}");
}
