//! The house rules the code keeps, checked on the source tree itself:
//! - the modules of the runtime (src/), the reader (reader/src) and the CLI (cli/src) form
//!   layers: no module reaches, through `crate::` paths, a module that reaches it back;
//! - no source file outside tests/ (Rust, assembly, C) is longer than 800 lines;
//! - every Rust source file opens with a `//!` comment that says what it holds.
//!
//! A module is a top-level file or folder of a crate's source directory (src/trace.rs and
//! src/trace/ are both `trace`). An edge A -> B is a `crate::B` path written in A's code,
//! comments and strings left out; `use crate::{B, C}` names both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` whose name ends with one of `exts`, `target` directories left out.
fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    todo.push(path);
                }
            } else if exts.iter().any(|e| name.ends_with(e)) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Rust code without its comments and the contents of its string and char literals.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || (b.get(i + 1) == Some(&b'\\')) => {
                // A char literal ('x', '\n', '\''); a lifetime has no closing quote there.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The module a source file belongs to: the first component of its path under `src`, or None
/// for the crate root (lib.rs, main.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (!(rel.components().count() == 1 && (name == "lib" || name == "main"))).then_some(name)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment of every `crate::` path in `code` (both levels of
/// `crate::{a, b::c}`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue; // e.g. `mycrate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() && name != "self" {
                    found.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Module -> the modules it uses, with one file that shows each use.
fn graph(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let files = files(src, &[".rs"]);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<String, BTreeMap<String, PathBuf>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeMap::new()))
        .collect();
    for file in &files {
        let Some(from) = module_of(src, file) else {
            continue;
        };
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        for to in crate_paths(&code) {
            if to != from && modules.contains(&to) {
                edges
                    .get_mut(&from)
                    .unwrap()
                    .entry(to)
                    .or_insert_with(|| file.clone());
            }
        }
    }
    edges
}

/// The cycles of a graph: its strongly connected components of more than one module.
fn cycles(edges: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Vec<BTreeSet<String>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    fn finish(
        v: &str,
        edges: &BTreeMap<String, BTreeMap<String, PathBuf>>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(v.to_string()) {
            return;
        }
        for w in edges[v].keys() {
            finish(w, edges, seen, order);
        }
        order.push(v.to_string());
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for v in edges.keys() {
        finish(v, edges, &mut seen, &mut order);
    }
    let mut reversed: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (v, ws) in edges {
        for w in ws.keys() {
            reversed.entry(w).or_default().push(v);
        }
    }
    let mut assigned = BTreeSet::new();
    let mut found = Vec::new();
    for v in order.iter().rev() {
        if assigned.contains(v.as_str()) {
            continue;
        }
        let mut comp = BTreeSet::new();
        let mut todo = vec![v.as_str()];
        while let Some(x) = todo.pop() {
            if assigned.insert(x.to_string()) {
                comp.insert(x.to_string());
                todo.extend(reversed.get(x).into_iter().flatten());
            }
        }
        if comp.len() > 1 {
            found.push(comp);
        }
    }
    found
}

fn assert_layered(crate_src: &str) {
    let src = root().join(crate_src);
    let edges = graph(&src);
    assert!(edges.len() > 1, "no modules found in {}", src.display());
    let mut report = String::new();
    for comp in cycles(&edges) {
        report += &format!(
            "cycle: {}\n",
            comp.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        for a in &comp {
            for (b, file) in &edges[a] {
                if comp.contains(b) {
                    report += &format!("  {a} -> {b}   ({})\n", file.display());
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "{crate_src} has import cycles:\n{report}"
    );
}

#[test]
fn layers_of_the_runtime_have_no_cycle() {
    assert_layered("src");
}

#[test]
fn layers_of_the_cli_have_no_cycle() {
    assert_layered("cli/src");
}

#[test]
fn layers_of_the_reader_have_no_cycle() {
    assert_layered("reader/src");
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    // Two modules that use each other, one that uses both: one cycle of two.
    let edge = |to: &[&str]| {
        to.iter()
            .map(|t| (t.to_string(), PathBuf::from("x.rs")))
            .collect::<BTreeMap<_, _>>()
    };
    let edges = BTreeMap::from([
        ("a".to_string(), edge(&["b"])),
        ("b".to_string(), edge(&["a"])),
        ("c".to_string(), edge(&["a", "b"])),
    ]);
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], BTreeSet::from(["a".to_string(), "b".to_string()]));
    // Paths in comments and strings are no uses; grouped imports are.
    let code = code_only("// crate::gone\nlet s = \"crate::gone\";\nuse crate::{x, y::z};");
    assert_eq!(
        crate_paths(&code),
        BTreeSet::from(["x".to_string(), "y".to_string()])
    );
}

/// The source directories of every package: the runtime, its helpers and the tools.
const SOURCES: &[&str] = &[
    "src",
    "format",
    "preload",
    "reader",
    "cli",
    "xray-sys",
    "instrfn-xray",
    "benches",
    "build.rs",
];

#[test]
fn no_source_file_passes_800_lines() {
    let mut long = Vec::new();
    for dir in SOURCES {
        let path = root().join(dir);
        let files = if path.is_file() {
            vec![path]
        } else {
            files(&path, &[".rs", ".s", ".S", ".c", ".h"])
        };
        for file in files {
            let lines = std::fs::read_to_string(&file).unwrap().lines().count();
            if lines > 800 {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "source files over 800 lines (split where the responsibilities part):\n{}",
        long.join("\n")
    );
}

#[test]
fn every_rust_source_file_says_what_it_holds() {
    let mut bare = Vec::new();
    for dir in ["src", "format/src", "preload/src", "reader/src", "cli/src"] {
        for file in files(&root().join(dir), &[".rs"]) {
            let text = std::fs::read_to_string(&file).unwrap();
            if !text.starts_with("//!") {
                bare.push(file.display().to_string());
            }
        }
    }
    assert!(
        bare.is_empty(),
        "files without an opening //! comment:\n{}",
        bare.join("\n")
    );
}
