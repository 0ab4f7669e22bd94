//! No import cycle in any language: the library's and the command line's top-level modules,
//! the Node package's modules and the Python package's modules each form a graph without a
//! cycle (each module can be read, and changed, knowing only the modules below it).

use super::*;

/// The library's top-level modules (`src/NAME.rs` or `src/NAME/`) and, for each, the other
/// top-level modules its code names as `crate::NAME` (comments left out).
fn module_imports() -> BTreeMap<String, BTreeSet<String>> {
    crate_module_imports(&root().join("src"), "lib")
}

/// A cycle of `graph` (its modules in order, the first repeated at the end), if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == node).expect("on the path");
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            g.entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
        }
        g
    };
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );
}

#[test]
fn the_library_modules_import_no_cycle() {
    let imports = module_imports();
    assert!(
        imports.len() > 10 && imports.contains_key("limiter") && imports.contains_key("engine"),
        "the library's modules were not found: {:?}",
        imports.keys().collect::<Vec<_>>()
    );
    assert!(
        imports["limiter"].contains("engine"),
        "the import scan found no `crate::engine` in limiter/: it reads nothing"
    );
    if let Some(cycle) = find_cycle(&imports) {
        panic!(
            "the library's top-level modules import each other in a cycle: {}",
            cycle.join(" -> ")
        );
    }
}

/// The top-level modules of the crate whose sources are in `src` (`src/NAME.rs` or
/// `src/NAME/`, the crate root `root_file` left out) and, for each, the other top-level modules
/// its code names as `crate::NAME` (comments left out).
fn crate_module_imports(src: &Path, root_file: &str) -> BTreeMap<String, BTreeSet<String>> {
    let top_of = |file: &Path| -> String {
        let rel = file.strip_prefix(src).expect("a file under src/");
        let first = rel.components().next().expect("a path").as_os_str();
        first.to_string_lossy().trim_end_matches(".rs").to_owned()
    };
    let files: Vec<PathBuf> = rust_files(src)
        .into_iter()
        .filter(|f| top_of(f) != root_file)
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| top_of(f)).collect();
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = top_of(file);
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let named = imports.entry(from.clone()).or_default();
        for code in text
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
        {
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let to = &rest[..end];
                if to != from && modules.contains(to) {
                    named.insert(to.to_owned());
                }
            }
        }
    }
    imports
}

#[test]
fn the_command_line_modules_import_no_cycle() {
    let imports = crate_module_imports(&root().join("cli/src"), "main");
    assert!(
        imports.contains_key("demo") && imports.contains_key("scenario"),
        "the command line's modules were not found: {:?}",
        imports.keys().collect::<Vec<_>>()
    );
    assert!(
        imports["operate"].contains("inspect"),
        "the import scan found no `crate::inspect` in operate.rs: it reads nothing"
    );
    if let Some(cycle) = find_cycle(&imports) {
        panic!(
            "the command line's top-level modules import each other in a cycle: {}",
            cycle.join(" -> ")
        );
    }
}

/// The Node package's modules (`ffi/node/lib/NAME.js` or `.mjs`) and, for each, the package's
/// other modules it loads: `require('./NAME')` or `from './NAME.js'` (comments left out).
fn node_module_imports() -> BTreeMap<String, BTreeSet<String>> {
    let lib = root().join("ffi/node/lib");
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let entries = std::fs::read_dir(&lib).unwrap_or_else(|e| panic!("read {}: {e}", lib.display()));
    for entry in entries {
        let file = entry.expect("a directory entry").path();
        let Some(name) = file.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        if !(name.ends_with(".js") || name.ends_with(".mjs")) {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let named = imports.entry(name.clone()).or_default();
        for code in text
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
        {
            for quote in ['\'', '"'] {
                for (i, _) in code.match_indices(&format!("{quote}./")) {
                    let rest = &code[i + 3..];
                    let Some(end) = rest.find(quote) else {
                        continue;
                    };
                    let target = &rest[..end];
                    let target = if target.ends_with(".js") || target.ends_with(".mjs") {
                        target.to_owned()
                    } else {
                        format!("{target}.js")
                    };
                    if target != name {
                        named.insert(target);
                    }
                }
            }
        }
    }
    imports
}

#[test]
fn the_node_package_modules_require_no_cycle() {
    let imports = node_module_imports();
    assert!(
        imports.get("middleware.js").is_some_and(|m| !m.is_empty()),
        "the scan found no module that middleware.js requires: it reads nothing ({imports:?})"
    );
    if let Some(cycle) = find_cycle(&imports) {
        panic!(
            "the Node package's modules require each other in a cycle: {}",
            cycle.join(" -> ")
        );
    }
}

/// The package modules that `text`, a module of the Python package whose modules are
/// `modules`, imports when it runs: `from .m import ...`, and `from . import a, b` (a module of
/// the package, else the package itself, `__init__`), at any depth (an import inside a
/// function is an import when it runs). Imports under `if TYPE_CHECKING:` are for the type
/// checker only, and docstrings are not code.
fn python_imports(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let (mut type_only, mut in_doc) = (None, false);
    for line in text.lines() {
        if line.matches("\"\"\"").count() % 2 == 1 {
            in_doc = !in_doc;
            continue;
        }
        let code = line.trim();
        if in_doc || code.is_empty() || code.starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        match type_only {
            Some(block) if indent > block => continue,
            _ => type_only = None,
        }
        if code.starts_with("if TYPE_CHECKING") {
            type_only = Some(indent);
            continue;
        }
        let Some(rest) = code.strip_prefix("from .") else {
            continue;
        };
        let Some(names) = rest.strip_prefix(" import") else {
            let module = rest.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            out.insert(module.into_iter().next().unwrap_or("").to_owned());
            continue;
        };
        let names = names.trim().trim_start_matches('(').split(',');
        let names = names.map(|n| {
            n.split(" as ")
                .next()
                .unwrap_or("")
                .trim()
                .trim_end_matches(')')
        });
        let mut any = false;
        for name in names.filter(|n| !n.is_empty()) {
            any = true;
            let target = if modules.contains(name) {
                name
            } else {
                "__init__"
            };
            out.insert(target.to_owned());
        }
        if !any {
            out.insert("__init__".to_owned());
        }
    }
    out
}

#[test]
fn the_python_import_reader_reads_run_time_imports() {
    let modules: BTreeSet<String> = ["__init__", "limit", "aio", "_native"]
        .map(String::from)
        .into();
    let text = "from . import _native\nif TYPE_CHECKING:\n    from .limit import Limit\n\
                \"\"\"\nfrom .doc import X\n\"\"\"\ndef f():\n    from .aio import A\n\
                from . import (\n    Decision,\n)\n";
    let want: BTreeSet<String> = ["_native", "aio", "__init__"].map(String::from).into();
    assert_eq!(python_imports(text, &modules), want);
}

#[test]
fn the_python_package_modules_import_no_cycle() {
    let dir = root().join("ffi/python/src/shmlimit");
    let files = files_with(&dir, &["py", "pyi"], false);
    let stem = |f: &PathBuf| f.file_stem().map(|s| s.to_string_lossy().into_owned());
    let modules: BTreeSet<String> = files.iter().filter_map(stem).collect();
    let mut imports = BTreeMap::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "py"))
    {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let name = stem(file).unwrap_or_default();
        let mut found = python_imports(&text, &modules);
        found.remove(&name);
        imports.insert(name, found);
    }
    assert!(
        imports.get("limit").is_some_and(|m| m.contains("aio")),
        "the scan did not find limit.py's import of aio: it reads nothing ({imports:?})"
    );
    if let Some(cycle) = find_cycle(&imports) {
        panic!(
            "the Python package's modules import each other in a cycle: {}",
            cycle.join(" -> ")
        );
    }
}
