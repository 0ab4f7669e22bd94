//! The Node.js package `ffi/node`: `npm install` builds its addon against this build's
//! `libshmlimit.a` (strictly: warnings are errors), then its `node:test` suite runs: the API on
//! real files, 4 `node:cluster` workers and C processes sharing one token bucket and one sliding
//! log with every admission checked against the bounds, a SIGKILLed worker's permit taken over,
//! the HTTP middleware behind real servers, and the TypeScript declarations under `tsc --strict`.
//!
//! Node.js and npm: without them the test is reported IGNORED with the reason (never passed
//! without running); with `SHMLIMIT_REQUIRE_NODE=1` (set by `.ci/run`) their absence is a
//! failure instead. This binary has its own harness (libtest-mimic), as tests/full_fs.rs, to
//! decide that at run time. The first run downloads the package's
//! development dependencies (Express, Fastify, TypeScript, rate-limiter-flexible) from the npm
//! registry into `ffi/node/node_modules`.

mod common;

use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};

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
    let trial = Trial::test(name, move || match &tools {
        Ok((node, npm)) => {
            eprintln!("node {node}, npm {npm}");
            std::panic::catch_unwind(node_package_builds_and_its_tests_pass).map_err(|e| {
                Failed::from(
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "the test panicked".to_owned()),
                )
            })
        }
        Err(reason) => Err(format!("SHMLIMIT_REQUIRE_NODE=1 and {reason}").into()),
    })
    .with_ignored_flag(ignored);
    libtest_mimic::run(&args, vec![trial]).exit();
}

fn node_package_builds_and_its_tests_pass() {
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
