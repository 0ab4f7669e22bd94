//! The Node.js package `ffi/node`: `npm install` builds its addon against this build's
//! `libshmlimit.a` (strictly: warnings are errors), then its `node:test` suite runs: the API on
//! real files, 4 `node:cluster` workers and C processes sharing one token bucket and one sliding
//! log with every admission checked against the bounds, a SIGKILLed worker's permit taken over,
//! the HTTP middleware behind real servers, and the TypeScript declarations under `tsc --strict`.
//!
//! Node.js and npm are required: without them this test fails (it never passes without running);
//! skip it explicitly with `cargo test -- --skip node_`. The first run downloads the package's
//! development dependencies (Express, Fastify, TypeScript, rate-limiter-flexible) from the npm
//! registry into `ffi/node/node_modules`.

mod common;

use std::process::Command;

use common::cbuild::lib_dir;
use common::root;

fn tool_version(tool: &str) -> Option<String> {
    let out = Command::new(tool).arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The count after `# NAME ` in node:test's TAP summary.
fn summary(tap: &str, name: &str) -> Option<u64> {
    let prefix = format!("# {name} ");
    tap.lines()
        .rev()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

#[test]
fn node_package_builds_and_its_tests_pass() {
    let (Some(node), Some(npm)) = (tool_version("node"), tool_version("npm")) else {
        panic!(
            "node and npm are needed to test the Node package ffi/node (Debian: apt-get install \
             nodejs npm); skip this test with `cargo test -- --skip node_`"
        );
    };
    eprintln!("node {node}, npm {npm}");
    let dir = root().join("ffi/node");

    // Installs the dependencies and runs the package's install script (build.js), which links
    // the addon with the libshmlimit.a of this very build.
    let install = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--no-package-lock"])
        .current_dir(&dir)
        .env("SHMLIMIT_LIB_DIR", lib_dir())
        .env("SHMLIMIT_NODE_STRICT", "1")
        .output()
        .expect("npm runs");
    assert!(
        install.status.success(),
        "npm install in ffi/node failed:\n{}{}",
        String::from_utf8_lossy(&install.stdout),
        String::from_utf8_lossy(&install.stderr)
    );
    let info = std::fs::read_to_string(dir.join("build/Release/build-info.json"))
        .expect("build.js wrote build/Release/build-info.json");
    assert!(
        info.contains(&*lib_dir().join("libshmlimit.a").to_string_lossy()),
        "the addon was not linked with this build's library:\n{info}"
    );

    let mut files: Vec<String> = std::fs::read_dir(dir.join("test"))
        .expect("ffi/node/test")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".test.js"))
        .map(|name| format!("test/{name}"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "test files: {files:?}");
    let out = Command::new("node")
        .args(["--test", "--test-reporter=tap"])
        .args(&files)
        .current_dir(&dir)
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
