//! The documentation holds together: README.md stays a front door (at most 200 lines, the
//! commands a fresh machine runs on its first screen), and every relative link of every markdown
//! file in the repository (README.md, docs/, ffi/) names a file that exists and, with a
//! `#fragment`, a heading of that file.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::root;

/// Longest README.md, in lines: the front door; the depth is in docs/.
const README_MAX_LINES: usize = 200;

/// Every `.md` file under `dir`, recursively, leaving out build output, installed packages and
/// hidden directories.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                    dirs.push(path);
                }
            } else if name.ends_with(".md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// `line` without its inline code spans (a link's text may be code; a link inside code is not
/// a link).
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join("")
}

/// The targets of the inline links and images `[text](target)` on `line`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_owned());
        rest = &after[end..];
    }
    targets
}

/// The anchors GitHub gives the headings of a markdown file: lower case, letters, digits,
/// `-` and `_` kept, spaces made `-`, everything else dropped; a repeated heading gets `-1`,
/// `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for (_, line) in prose_lines(text) {
        if !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim().to_lowercase();
        let slug: String = title
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.push(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// What is wrong with each relative link of the markdown file `file` (empty: nothing).
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let dir = file.parent().expect("a file has a directory");
    let mut broken = Vec::new();
    for (number, line) in prose_lines(&text) {
        for target in link_targets(line) {
            let is_url = target
                .split_once(':')
                .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()));
            if target.is_empty() || is_url {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() {
                file.to_path_buf()
            } else {
                dir.join(path)
            };
            let place = format!("{}:{number}: ({target})", file.display());
            if !linked.exists() {
                broken.push(format!("{place}: {} does not exist", linked.display()));
            } else if !fragment.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                let heading = std::fs::read_to_string(&linked)
                    .map(|text| anchors(&text).iter().any(|a| a == fragment))
                    .unwrap_or(false);
                if !heading {
                    broken.push(format!(
                        "{place}: no heading of {} is #{fragment}",
                        linked.display()
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_markdown_files_resolves() {
    let root = root();
    let files = markdown_files(&root);
    for required in ["README.md", "docs/guarantees.md", "docs/failures.md"] {
        assert!(
            files.contains(&root.join(required)),
            "{required} is missing"
        );
    }
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(
        broken.is_empty(),
        "{} broken links in the markdown files:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES}): move depth to a page of docs/ \
         and link it"
    );
    // The first screen: the demo and every test on a fresh machine, and the Python package
    // (.ci/run runs the README's `cargo test` and `pip install ./ffi/python`).
    let first_screen: Vec<&str> = readme.lines().take(24).collect();
    for command in [
        "cargo run --release --bin shmlimit -- demo ",
        "cargo test ",
        "pip install ./ffi/python ",
    ] {
        assert!(
            first_screen.iter().any(|l| l.starts_with(command)),
            "README.md's first 24 lines have no line starting with `{command}`"
        );
    }
}

#[test]
fn the_link_checker_finds_a_broken_link_and_a_missing_heading() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("b.md"),
        "# B page\n\n## A `code` heading: twice\n",
    )
    .unwrap();
    let a = dir.path().join("a.md");
    std::fs::write(
        &a,
        "[ok](b.md) [ok](b.md#b-page) [ok](b.md#a-code-heading-twice) [ok](https://x.org/y)\n\
         `[not a link](nowhere.md)`\n```\n[in a fence](nowhere.md)\n```\n\
         [missing](gone.md) [no heading](b.md#c-page)\n",
    )
    .unwrap();
    let broken = broken_links(&a);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("(gone.md)"), "{broken:#?}");
    assert!(broken[1].contains("(b.md#c-page)"), "{broken:#?}");
}
