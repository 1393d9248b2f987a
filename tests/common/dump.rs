//! Traces read through the `instrfn` command (the reader crate behind it): `instrfn dump`'s
//! processes, threads and their events by kind and function name, and the checks on them that
//! every trace test makes alike (exact golden sequences, nesting, counts per kind and
//! function); `instrfn report --format json`'s document; and the meta files' lines a test
//! reads directly.

use super::run::{run, run_ok};
use super::toolchain::{Arch, RISCV64, instrfn_cli};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One thread's events as `instrfn dump` prints them: (kind, function name, ns).
#[derive(Debug, Clone, PartialEq)]
pub struct DumpEvent {
    pub kind: String,
    pub name: String,
    pub ns: f64,
}

/// A process of `instrfn dump` output: its header line, and per thread id its events.
#[derive(Debug, Default)]
pub struct DumpProcess {
    pub header: String,
    pub threads: BTreeMap<u32, Vec<DumpEvent>>,
    /// Events lost, all threads together (the `; N events lost` of the slot lines).
    pub lost: u64,
}

/// Runs `instrfn dump --no-demangle DIR` and parses it (every process, in order): names as
/// the binary has them.
pub fn instrfn_dump(dir: &Path) -> Vec<DumpProcess> {
    instrfn_dump_with(dir, &["--no-demangle"])
}

/// [`instrfn_dump`] with `args` instead of `--no-demangle` (none: names demangled, as `dump`
/// shows them by default).
pub fn instrfn_dump_with(dir: &Path, args: &[&str]) -> Vec<DumpProcess> {
    let out = run_ok(Command::new(instrfn_cli()).arg("dump").args(args).arg(dir));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut procs: Vec<DumpProcess> = Vec::new();
    let mut tid = 0u32;
    for line in text.lines() {
        let t = line.trim_start();
        if line.starts_with("process ") {
            procs.push(DumpProcess {
                header: line.to_string(),
                ..Default::default()
            });
        } else if let Some(rest) = t.strip_prefix("tid ") {
            tid = rest.trim().parse().unwrap();
        } else if t.starts_with("thread slot") {
            if let Some(n) = t
                .strip_suffix(" events lost")
                .and_then(|r| r.rsplit("; ").next())
            {
                procs.last_mut().expect("a slot before any process").lost +=
                    n.parse::<u64>().unwrap();
            }
        } else {
            let mut w = t.split_whitespace();
            let ns: f64 = w
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            let kind = w.next().unwrap().to_string();
            let name = w.collect::<Vec<_>>().join(" ");
            let p = procs.last_mut().expect("an event before any process");
            p.threads
                .entry(tid)
                .or_default()
                .push(DumpEvent { kind, name, ns });
        }
    }
    procs
}

/// The events calltree.c's worker makes for K rounds (see its header), as (kind, name).
pub fn calltree_worker(k: usize) -> Vec<(String, String)> {
    let mut v = vec![("entry".to_string(), "run".to_string())];
    for _ in 0..k {
        for (kind, name) in [
            ("entry", "a"),
            ("entry", "b"),
            ("entry", "c"),
            ("exit", "c"),
            ("exit", "b"),
            ("entry", "b"),
            ("entry", "c"),
            ("exit", "c"),
            ("exit", "b"),
            ("exit", "a"),
        ] {
            v.push((kind.to_string(), name.to_string()));
        }
    }
    v.push(("exit".to_string(), "run".to_string()));
    v
}

/// Checks one process of a calltree.c trace (T threads, K rounds): every worker thread's
/// events are exactly [`calltree_worker`], the main thread's `entry main, exit main`;
/// timestamps never decrease within a thread, and each thread's events lie within the run.
pub fn assert_calltree(p: &DumpProcess, t: usize, k: usize, context: &str) {
    let worker = calltree_worker(k);
    let main = vec![
        ("entry".to_string(), "main".to_string()),
        ("exit".to_string(), "main".to_string()),
    ];
    let (mut workers, mut mains) = (0, 0);
    for (tid, events) in &p.threads {
        let seq: Vec<(String, String)> = events
            .iter()
            .map(|e| (e.kind.clone(), e.name.clone()))
            .collect();
        if seq == worker {
            workers += 1;
        } else if seq == main {
            mains += 1;
        } else {
            panic!(
                "{context}: thread {tid} has an unexpected sequence:\n{seq:?}\n{}",
                p.header
            );
        }
        for w in events.windows(2) {
            assert!(
                w[1].ns >= w[0].ns,
                "{context}: thread {tid}: time went back: {w:?}"
            );
        }
    }
    assert_eq!((workers, mains), (t, 1), "{context}: {}", p.header);
}

/// Checks that every thread's events of `p` nest: each exit (or unwound) closes the newest open
/// entry of the same function, and none is left open at the end (entries without exit are
/// not opened). Returns how many events of each (kind, function) there were.
pub fn assert_balanced(p: &DumpProcess, context: &str) -> BTreeMap<(String, String), u64> {
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (tid, events) in &p.threads {
        let mut open: Vec<&str> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            *counts.entry((e.kind.clone(), e.name.clone())).or_default() += 1;
            match e.kind.as_str() {
                "entry" => open.push(&e.name),
                "exit" | "unwound" => match open.pop() {
                    Some(f) if f == e.name => {}
                    other => panic!(
                        "{context}: thread {tid} event {i} ({} {}) closes {other:?}\n{:?}",
                        e.kind,
                        e.name,
                        &events[i.saturating_sub(8)..(i + 3).min(events.len())]
                    ),
                },
                "entry-no-exit" => {}
                k => panic!(
                    "{context}: thread {tid} event {i}: unexpected {k} {}",
                    e.name
                ),
            }
        }
        assert!(
            open.is_empty(),
            "{context}: thread {tid} left open: {open:?}"
        );
    }
    counts
}

/// `counts[(kind, name)]`, 0 if absent.
pub fn count_of(counts: &BTreeMap<(String, String), u64>, kind: &str, name: &str) -> u64 {
    counts
        .get(&(kind.to_string(), name.to_string()))
        .copied()
        .unwrap_or(0)
}

/// Asserts that `counts` (from [`assert_balanced`]) holds exactly `n` events of each (kind,
/// function, n) of `expected`.
pub fn assert_counts(
    counts: &BTreeMap<(String, String), u64>,
    expected: &[(&str, &str, u64)],
    context: &str,
) {
    for (kind, function, n) in expected {
        assert_eq!(
            count_of(counts, kind, function),
            *n,
            "{context}: {kind} {function}\n{counts:?}"
        );
    }
}

/// Checks one process of a calltree.c trace (T threads, K rounds) in which each call is an
/// entry without exit (aarch64 pac-ret, s390x clang 14 -pg, INSTRFN_EXITS=off): every
/// worker thread's events are exactly [`calltree_worker`]'s entries as `entry-no-exit`, with
/// no exit, the main thread's `entry-no-exit main`; timestamps never decrease within a thread.
pub fn assert_calltree_entries_only(p: &DumpProcess, t: usize, k: usize, context: &str) {
    let entries_only = |seq: Vec<(String, String)>| -> Vec<(String, String)> {
        seq.into_iter()
            .filter(|(kind, _)| kind == "entry")
            .map(|(_, name)| ("entry-no-exit".to_string(), name))
            .collect()
    };
    let worker = entries_only(calltree_worker(k));
    let main = vec![("entry-no-exit".to_string(), "main".to_string())];
    let (mut workers, mut mains) = (0, 0);
    for (tid, events) in &p.threads {
        let seq: Vec<(String, String)> = events
            .iter()
            .map(|e| (e.kind.clone(), e.name.clone()))
            .collect();
        if seq == worker {
            workers += 1;
        } else if seq == main {
            mains += 1;
        } else {
            panic!(
                "{context}: thread {tid} has an unexpected sequence:\n{seq:?}\n{}",
                p.header
            );
        }
        for w in events.windows(2) {
            assert!(
                w[1].ns >= w[0].ns,
                "{context}: thread {tid}: time went back: {w:?}"
            );
        }
    }
    assert_eq!((workers, mains), (t, 1), "{context}: {}", p.header);
}

/// How many events of each (kind, function name) a dumped process holds, over all threads.
pub fn dump_counts(p: &DumpProcess) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for e in p.threads.values().flatten() {
        *counts.entry((e.kind.clone(), e.name.clone())).or_insert(0) += 1;
    }
    counts
}

/// The calls the record-time filters left out of the trace in `dir`: the `dropped` lines of
/// every meta file, summed (docs/trace-format.md).
pub fn meta_dropped(dir: &Path) -> u64 {
    let mut dropped = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "meta") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                if let Some(rest) = line.strip_prefix("dropped ") {
                    let n = rest.split_whitespace().nth(1).unwrap();
                    dropped += n.parse::<u64>().unwrap();
                }
            }
        }
    }
    dropped
}

/// The calls of `p` per function: its entries, with or without exit, over all threads.
pub fn calls_per_function(p: &DumpProcess) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for e in p.threads.values().flatten() {
        if e.kind == "entry" || e.kind == "entry-no-exit" {
            *calls.entry(e.name.clone()).or_insert(0) += 1;
        }
    }
    calls
}

/// A thread's events nest: every exit closes its newest open entry, nothing else occurs
/// (no unwound frame, no entry without exit) and nothing stays open.
pub fn assert_nested(events: &[DumpEvent], context: &str) {
    let mut open: Vec<&str> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind.as_str() {
            "entry" => open.push(&e.name),
            "exit" => assert_eq!(
                open.pop(),
                Some(e.name.as_str()),
                "{context}: event {i} exits {} (open: {open:?})",
                e.name
            ),
            other => panic!("{context}: event {i} is `{other} {}`", e.name),
        }
    }
    assert!(open.is_empty(), "{context}: never closed: {open:?}");
}

/// The meta files of a trace, one after the other.
pub fn meta_text(trace: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(trace).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "meta") {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    text
}

/// The files of trace directory `dir` whose names end with `suffix`, sorted.
pub fn trace_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// The one process of the trace in `tdir`, after checking that no meta file says events were
/// lost and, on riscv64, that the meta file names its clock (rdtime's `clock time` line).
pub fn one_process(arch: Arch, tdir: &Path, context: &str) -> DumpProcess {
    let mut procs = instrfn_dump(tdir);
    assert_eq!(procs.len(), 1, "{context}: {procs:?}");
    for meta in trace_files(tdir, ".meta") {
        let text = std::fs::read_to_string(&meta).unwrap();
        if arch == RISCV64 {
            assert!(
                text.lines().any(|l| l.starts_with("clock time ")),
                "{context}: no `clock time` line:\n{text}"
            );
        }
        assert!(
            !text.lines().any(|l| l.starts_with("lost ")),
            "{context}: events lost:\n{text}"
        );
    }
    procs.remove(0)
}

/// `instrfn report --format json DIR extra…`, checked to succeed, parsed.
pub fn report_json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let out = run(Command::new(instrfn_cli())
        .arg("report")
        .arg(trace)
        .args(["--format", "json"])
        .args(extra));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report --format json is JSON")
}

/// A JSON report's rows by function name (rows without --threads).
pub fn report_functions(report: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap().to_string(), f.clone()))
        .collect()
}

/// `instrfn report DIR --format json`: completed calls per (demangled) function, and the
/// document.
pub fn report_calls(trace: &Path) -> (BTreeMap<String, u64>, serde_json::Value) {
    let doc = report_json(trace, &[]);
    let mut rows = BTreeMap::new();
    for f in doc["functions"].as_array().unwrap() {
        rows.insert(
            f["name"].as_str().unwrap().to_string(),
            f["calls"].as_u64().unwrap(),
        );
    }
    (rows, doc)
}

/// The calls of function `name` in `rows` (from [`report_calls`]), 0 if absent.
pub fn calls_in(rows: &BTreeMap<String, u64>, name: &str) -> u64 {
    rows.get(name).copied().unwrap_or(0)
}
