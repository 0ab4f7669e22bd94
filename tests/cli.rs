//! The `shmlimit` binary, run as a separate process on real files in temporary directories.

mod common;

#[path = "cli/demo.rs"]
mod demo;

#[path = "cli/config.rs"]
mod config;

#[path = "cli/errors.rs"]
mod errors;

#[path = "cli/operate.rs"]
mod operate;

#[path = "cli/watch.rs"]
mod watch;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::words::{read_word, write_word};
use serde_json::Value;
use shmlimit::{Limiter, Rate, SlidingLog, TokenBucket};

const BIN: &str = env!("CARGO_BIN_EXE_shmlimit");

fn shmlimit(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run shmlimit")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

/// Run and require exit code `code`; returns stdout.
fn expect_code(args: &[&str], code: i32) -> String {
    let out = shmlimit(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "shmlimit {args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

fn ok(args: &[&str]) -> String {
    expect_code(args, 0)
}

fn json(args: &[&str]) -> Value {
    let text = ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{text}"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn number(cell: &str) -> u64 {
    cell.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {cell:?}"))
}

/// The cells of the first table row whose first cell is `first`.
fn row<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{text}"))
}

/// The cells of the first row starting with `first` after the line starting with `header`.
fn row_after<'a>(text: &'a str, header: &str, first: &str) -> Vec<&'a str> {
    let at = text
        .find(header)
        .unwrap_or_else(|| panic!("no {header:?} in:\n{text}"));
    row(&text[at..], first)
}

const CONFIG: &str = r#"
[[limit]]
name = "api"
algorithm = "token_bucket"
rate = "1/h"
burst = 5

[[limit]]
name = "search"
algorithm = "sliding_log"
limit = 3
window = "10min"

[[limit]]
name = "signups"
algorithm = "fixed_window"
limit = 20
window = "1min"
alignment = "monotonic"

[[limit]]
name = "exports"
algorithm = "sliding_window"
limit = 1000
window = "1h"
"#;

fn config_in(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path
}
