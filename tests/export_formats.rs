//! `instrfn export --format perfetto` and `--format pprof`, read by their real consumers:
//! Perfetto's own schema (`perfetto_trace_pb2` of the `perfetto` package on PyPI, through
//! scripts/check-perfetto.py) and `go tool pprof`. The traces are of real programs (gcc -pg,
//! g++ -pg, -finstrument-functions) whose call counts are known by construction.
//!
//! Self-contained: the few helpers it needs are here. scripts/test.sh installs the consumers:
//! golang-go, and perfetto and protobuf in the Python environment target/export-python (or the
//! Python named by INSTRFN_EXPORT_PYTHON). A missing one fails the test, never skips it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh, empty work directory `target/instrfn-tests/<name>`.
fn workdir(name: &str) -> PathBuf {
    let dir = root().join("target/instrfn-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "command failed: {cmd:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// target/release/instrfn, built by `cargo build --release` (with libinstrfn.so beside it).
fn instrfn() -> PathBuf {
    let path = root().join("target/release/instrfn");
    for file in [&path, &root().join("target/release/libinstrfn.so")] {
        assert!(
            file.is_file(),
            "{} is missing: run `cargo build --release` first (scripts/test.sh does)",
            file.display()
        );
    }
    path
}

/// Compiles `source` with `compiler` and `flags` into `dir/<name>`.
fn build(dir: &Path, compiler: &str, source: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    run_ok(
        Command::new(compiler)
            .args(flags)
            .arg(source)
            .arg("-lpthread")
            .arg("-o")
            .arg(&exe),
    );
    exe
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/c").join(name)
}

/// `instrfn record -o dir/<name>.trace -- exe args` with `env`: the trace and how many events it
/// holds (from record's summary line).
fn record(
    dir: &Path,
    name: &str,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, u64) {
    let trace = dir.join(format!("{name}.trace"));
    let mut cmd = Command::new(instrfn());
    cmd.arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(exe)
        .args(args);
    cmd.current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_ok(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = stderr
        .split("instrfn: ")
        .nth(1)
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event count in: {stderr}"));
    (trace, events)
}

/// `instrfn export TRACE --format FORMAT -o OUT extra…`, checked to succeed.
fn export(trace: &Path, format: &str, out: &Path, extra: &[&str]) -> PathBuf {
    run_ok(
        Command::new(instrfn())
            .arg("export")
            .arg(trace)
            .args(["--format", format, "-o"])
            .arg(out)
            .args(extra),
    );
    out.to_path_buf()
}

/// The Python that scripts/test.sh installed perfetto and protobuf into.
fn python() -> PathBuf {
    let path = std::env::var_os("INSTRFN_EXPORT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/export-python/bin/python3"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/test.sh, which installs perfetto and protobuf there",
        path.display()
    );
    path
}

/// scripts/check-perfetto.py's summary of a Perfetto trace (it fails on a broken one).
fn check_perfetto(file: &Path) -> Value {
    let out = run_ok(
        Command::new(python())
            .arg(root().join("scripts/check-perfetto.py"))
            .arg(file),
    );
    serde_json::from_slice(&out.stdout).expect("the checker prints JSON")
}

/// A map of the summary's `key`: name -> count.
fn counts(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

fn expect(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// Complete events per name in a chrome export.
fn chrome_counts(file: &Path) -> BTreeMap<String, u64> {
    let doc: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    for e in doc["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            *out.entry(e["name"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
    }
    out
}

fn size(file: &Path) -> u64 {
    std::fs::metadata(file).unwrap().len()
}

#[test]
fn perfetto_threads_nest_and_count() {
    let dir = workdir("export-perfetto-calltree");
    let exe = build(
        &dir,
        "gcc",
        &fixture("calltree.c"),
        "calltree",
        &["-O1", "-pg"],
    );
    // 4 threads: run once each, a 10000 times, b and c 20000 times; main once.
    let (trace, events) = record(&dir, "trace", &exe, &["4", "10000"], &[]);
    let pf = export(&trace, "perfetto", &dir.join("t.pftrace"), &[]);
    let s = check_perfetto(&pf);
    assert_eq!(
        counts(&s["slices"]),
        expect(&[
            ("main", 1),
            ("run", 4),
            ("a", 40000),
            ("b", 80000),
            ("c", 80000)
        ])
    );
    assert_eq!(s["events"], events, "one event per event recorded");
    assert!(counts(&s["instants"]).is_empty() && s["closed"].as_object().unwrap().is_empty());
    assert_eq!(s["max_depth"], 4, "run > a > b > c");
    let procs = s["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    let pid = procs[0]["pid"].as_u64().unwrap();
    assert!(
        procs[0]["name"]
            .as_str()
            .unwrap()
            .contains("calltree 4 10000")
    );
    let threads = s["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 5, "{threads:?}");
    let mut tids: Vec<u64> = threads.iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    tids.dedup();
    assert_eq!(tids.len(), 5, "distinct tids: {threads:?}");
    for t in threads {
        assert_eq!(t["pid"], pid, "{t}");
        assert_eq!(t["name"], "calltree", "{t}");
        let main = t["tid"] == pid;
        assert_eq!(t["slices"], if main { 1 } else { 50001 }, "{t}");
    }

    // Size: at most 12 bytes per event (a begin costs 12, an end 10, plus the headers). The
    // chrome export of the same trace is about 4 times as large with these one-letter names.
    let json = export(&trace, "chrome", &dir.join("t.json"), &[]);
    let per_event = size(&pf) as f64 / events as f64;
    let ratio = size(&json) as f64 / size(&pf) as f64;
    eprintln!(
        "calltree: {events} events, perfetto {per_event:.2} bytes/event, chrome/perfetto {ratio:.2}"
    );
    assert!(per_event <= 12.0, "{per_event:.2} bytes per event");
    assert!(
        ratio >= 3.5,
        "chrome is only {ratio:.2} times the perfetto trace"
    );

    // The filters keep the calls they keep in the chrome export.
    for filter in [
        &["--min-duration", "100ns"][..],
        &["--time-range", "1ms..3ms"],
        &["--min-duration", "50ns", "--time-range", "2ms..4ms"],
        &["--filter", "b", "--depth", "3"],
        &["--exclude", "c"],
    ] {
        let pf = export(&trace, "perfetto", &dir.join("f.pftrace"), filter);
        let json = export(&trace, "chrome", &dir.join("f.json"), filter);
        let s = check_perfetto(&pf);
        assert_eq!(counts(&s["slices"]), chrome_counts(&json), "{filter:?}");
    }
    let tid = threads.iter().find(|t| t["tid"] != pid).unwrap()["tid"].to_string();
    let pf = export(
        &trace,
        "perfetto",
        &dir.join("tid.pftrace"),
        &["--tid", &tid],
    );
    let s = check_perfetto(&pf);
    assert_eq!(
        counts(&s["slices"]),
        expect(&[("run", 1), ("a", 10000), ("b", 20000), ("c", 20000)])
    );
}

#[test]
fn perfetto_is_five_times_smaller_than_chrome_on_cpp_names() {
    // C++ names as they are in real code: namespaces, parameter types, templates. 5 functions
    // called 50000 times each from main: 500002 events.
    let dir = workdir("export-perfetto-names");
    let exe = build(
        &dir,
        "g++",
        &fixture("names.cpp"),
        "names",
        &["-O1", "-pg", "-g"],
    );
    let (trace, events) = record(&dir, "trace", &exe, &["50000"], &[]);
    let pf = export(&trace, "perfetto", &dir.join("t.pftrace"), &[]);
    let json = export(&trace, "chrome", &dir.join("t.json"), &[]);
    let ratio = size(&json) as f64 / size(&pf) as f64;
    let per_event = size(&pf) as f64 / events as f64;
    eprintln!(
        "names: {events} events, perfetto {per_event:.2} bytes/event, chrome/perfetto {ratio:.2}"
    );
    assert!(
        ratio >= 5.0,
        "chrome is only {ratio:.2} times the perfetto trace"
    );
    let s = check_perfetto(&pf);
    let n = 50000;
    assert_eq!(
        counts(&s["slices"]),
        expect(&[
            ("main", 1),
            ("geometry::Square::area() const", n),
            ("geometry::scale(double, int)", n),
            ("geometry::scale(double)", n),
            ("int geometry::twice<int>(int)", n),
            ("double geometry::twice<double>(double)", n),
        ])
    );
    // Raw names, and source locations (interned, checked by the checker).
    let pf = export(
        &trace,
        "perfetto",
        &dir.join("raw.pftrace"),
        &["--no-demangle", "--lines"],
    );
    let s = check_perfetto(&pf);
    let slices = counts(&s["slices"]);
    assert_eq!(slices.get("_ZN8geometry5scaleEdi"), Some(&n), "{slices:?}");
    assert_eq!(
        slices.get("_ZN8geometry5twiceIiEET_S1_"),
        Some(&n),
        "{slices:?}"
    );
}

#[test]
fn perfetto_unwound_and_before_the_trace() {
    let dir = workdir("export-perfetto-unwind");
    // longjmp: 40 times dive(5) (6 frames) left by longjmp from the bottom, then after().
    let exe = build(&dir, "gcc", &fixture("unwind.c"), "unwind", &["-O1", "-pg"]);
    let (trace, _) = record(&dir, "longjmp", &exe, &["longjmp", "40", "5"], &[]);
    let s = check_perfetto(&export(&trace, "perfetto", &dir.join("lj.pftrace"), &[]));
    assert_eq!(
        counts(&s["slices"]),
        expect(&[("main", 1), ("dive", 240), ("after", 40)])
    );
    assert_eq!(counts(&s["closed"]["unwound"]), expect(&[("dive", 240)]));

    // C++ exceptions: 4 times catcher(8) (9 frames of thrower, then 2 more rethrown).
    let exe = build(&dir, "g++", &fixture("throw.cpp"), "throw", &["-O2", "-pg"]);
    let (trace, _) = record(&dir, "throw", &exe, &["4", "8"], &[]);
    let s = check_perfetto(&export(&trace, "perfetto", &dir.join("th.pftrace"), &[]));
    let slices = counts(&s["slices"]);
    assert_eq!(
        slices.get("thrower(unsigned long)"),
        Some(&(4 * 11)),
        "{slices:?}"
    );
    assert_eq!(slices.get("catcher(unsigned long)"), Some(&4), "{slices:?}");
    assert_eq!(
        counts(&s["closed"]["unwound"]),
        expect(&[("thrower(unsigned long)", 4 * 11)])
    );

    // Recording starts inside middle() (INSTRFN_START=off, then moncontrol(1)): with
    // -finstrument-functions the exits of middle, outer and main are recorded, their entries
    // lie before the trace. They are slices from the thread's first event, around the leaves.
    let src = dir.join("begin.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n\
         void moncontrol(int);\n\
         #define COUNTED __attribute__((noinline, noclone))\n\
         volatile unsigned long sink;\n\
         COUNTED void leaf(unsigned long x) { sink += x; }\n\
         COUNTED void middle(long n) { moncontrol(1); for (long i = 0; i < n; i++) leaf(i); }\n\
         COUNTED void outer(long n) { middle(n); sink++; }\n\
         int main(int argc, char **argv) { outer(argc > 1 ? atol(argv[1]) : 10); return 0; }\n",
    )
    .unwrap();
    let exe = build(
        &dir,
        "gcc",
        &src,
        "begin",
        &["-O1", "-finstrument-functions"],
    );
    let (trace, _) = record(&dir, "begin", &exe, &["25"], &[("INSTRFN_START", "off")]);
    let s = check_perfetto(&export(&trace, "perfetto", &dir.join("b.pftrace"), &[]));
    assert_eq!(
        counts(&s["slices"]),
        expect(&[("main", 1), ("outer", 1), ("middle", 1), ("leaf", 25)])
    );
    assert_eq!(
        counts(&s["begun_before_the_trace"]),
        expect(&[("main", 1), ("outer", 1), ("middle", 1)])
    );
    assert_eq!(s["max_depth"], 4, "main > outer > middle > leaf");
}

/// `go tool pprof ARGS FILE` (no network: a local, symbolized profile), its stdout.
fn go_pprof(dir: &Path, args: &[&str], file: &Path) -> String {
    let home = dir.join("go-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = run_ok(
        Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(file)
            .env("HOME", &home)
            .env("GOCACHE", home.join("cache"))
            .env("GOPATH", home.join("go"))
            .env("PPROF_TMPDIR", &home),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `-top` rows: function -> (flat, cum), as integers (counts, or ns with -unit=ns).
fn top(text: &str) -> BTreeMap<String, (u64, u64)> {
    let num = |s: &str| -> u64 {
        s.trim_end_matches("ns")
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("`{s}` in {text}")) as u64
    };
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[5..].join(" "), (num(w[0]), num(w[3])))
        })
        .collect()
}

/// `-traces` samples: the stack (leaf first, `;`-joined) -> value.
fn traces(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for sample in text.split("-----------+").skip(1) {
        let mut value = 0;
        let mut frames = Vec::new();
        for l in sample.lines().skip(1) {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [] => {}
                [label, _] if label.ends_with(':') => {}
                [v, f] if frames.is_empty() => {
                    value = v.parse().unwrap_or_else(|_| panic!("{l}"));
                    frames.push(f.to_string());
                }
                [f] => frames.push(f.to_string()),
                _ => panic!("unexpected line `{l}` in {text}"),
            }
        }
        if !frames.is_empty() {
            *out.entry(frames.join(";")).or_insert(0) += value;
        }
    }
    out
}

#[test]
fn pprof_counts_stacks_and_self_time() {
    let dir = workdir("export-pprof");
    let exe = build(
        &dir,
        "gcc",
        &fixture("calltree.c"),
        "calltree",
        &["-O1", "-pg", "-g"],
    );
    let (trace, _) = record(&dir, "trace", &exe, &["3", "1000"], &[]);
    let prof = export(&trace, "pprof", &dir.join("calltree.pb.gz"), &[]);
    let bytes = std::fs::read(&prof).unwrap();
    assert_eq!(&bytes[..2], b"\x1f\x8b", "gzipped");
    // Calls per function, exact.
    let t = top(&go_pprof(
        &dir,
        &["-top", "-nodefraction=0", "-sample_index=calls"],
        &prof,
    ));
    let flat: BTreeMap<String, u64> = t.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    assert_eq!(
        flat,
        expect(&[
            ("main", 1),
            ("run", 3),
            ("a", 3000),
            ("b", 6000),
            ("c", 6000)
        ])
    );
    assert_eq!(t["run"].1, 3 + 3000 + 6000 + 6000, "calls under run");
    // Stacks: one sample per distinct stack, leaf first.
    let stacks = traces(&go_pprof(&dir, &["-traces", "-sample_index=calls"], &prof));
    assert_eq!(
        stacks,
        expect(&[
            ("main", 1),
            ("run", 3),
            ("a;run", 3000),
            ("b;a;run", 6000),
            ("c;b;a;run", 6000)
        ])
    );
    // Self time per function: the report's (pprof adds the callees' up itself).
    let out = run_ok(
        Command::new(instrfn())
            .arg("report")
            .arg(&trace)
            .args(["--format", "json"]),
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = top(&go_pprof(
        &dir,
        &["-top", "-nodefraction=0", "-sample_index=self", "-unit=ns"],
        &prof,
    ));
    for f in report["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let ns = f["self_ns"].as_f64().unwrap();
        let got = t.get(name).map_or(0, |v| v.0) as f64;
        assert!(
            (got - ns).abs() <= 2.0 + ns * 1e-3,
            "{name}: pprof {got} ns, report {ns} ns"
        );
    }
    // Source lines, and the executable as the main binary.
    let prof = export(&trace, "pprof", &dir.join("lines.pb.gz"), &["--lines"]);
    let raw = go_pprof(&dir, &["-raw"], &prof);
    assert!(raw.contains("calltree.c:"), "{raw}");
    let head = go_pprof(&dir, &["-top", "-sample_index=calls"], &prof);
    assert!(head.starts_with("File: calltree"), "{head}");
}

#[test]
fn pprof_threads_processes_and_pid() {
    let dir = workdir("export-pprof-tree");
    // threads 3 2000: work_a and work_b 6000 times each, on 3 threads.
    let exe = build(
        &dir,
        "gcc",
        &fixture("threads.c"),
        "threads",
        &["-O1", "-pg"],
    );
    let (trace, _) = record(&dir, "threads", &exe, &["3", "2000"], &[]);
    let prof = export(&trace, "pprof", &dir.join("threads.pb.gz"), &[]);
    let t = top(&go_pprof(
        &dir,
        &["-top", "-nodefraction=0", "-sample_index=calls"],
        &prof,
    ));
    assert_eq!(t["work_a"].0, 6000, "{t:?}");
    assert_eq!(t["work_b"].0, 6000, "{t:?}");
    // Two processes of one executable: spawn 50 runs `child 100` (work_b 100 times), then
    // work_a 50 times. Each sample carries its pid.
    let exe = build(&dir, "gcc", &fixture("tree.c"), "tree", &["-O1", "-pg"]);
    let (trace, _) = record(&dir, "tree", &exe, &["spawn", "50"], &[]);
    let prof = export(&trace, "pprof", &dir.join("tree.pb.gz"), &[]);
    let t = top(&go_pprof(
        &dir,
        &["-top", "-nodefraction=0", "-sample_index=calls"],
        &prof,
    ));
    assert_eq!((t["work_a"].0, t["work_b"].0), (50, 100), "{t:?}");
    let tags = go_pprof(&dir, &["-tags", "-sample_index=calls"], &prof);
    let pids: Vec<u64> = tags
        .lines()
        .filter_map(|l| l.split_whitespace().last()?.parse().ok())
        .filter(|&p| p > 1)
        .collect();
    assert_eq!(pids.len(), 2, "{tags}");
    // --pid: the child only.
    let child = pids.iter().max().unwrap().to_string();
    let parent = pids.iter().min().unwrap().to_string();
    let mut only = BTreeMap::new();
    for pid in [&child, &parent] {
        let prof = export(&trace, "pprof", &dir.join("one.pb.gz"), &["--pid", pid]);
        let t = top(&go_pprof(
            &dir,
            &["-top", "-nodefraction=0", "-sample_index=calls"],
            &prof,
        ));
        only.insert(pid.clone(), t.keys().cloned().collect::<Vec<_>>().join(","));
    }
    assert!(
        only.values().any(|v| v == "main,work_b") && only.values().any(|v| v == "main,work_a"),
        "{only:?}"
    );
    // --filter: only matching functions count (their stacks still show their callers).
    let prof = export(
        &trace,
        "pprof",
        &dir.join("f.pb.gz"),
        &["--filter", "work_b"],
    );
    let t = top(&go_pprof(
        &dir,
        &["-top", "-nodefraction=0", "-sample_index=calls"],
        &prof,
    ));
    let counted: Vec<(&str, u64)> = t
        .iter()
        .filter(|(_, v)| v.0 > 0)
        .map(|(k, v)| (k.as_str(), v.0))
        .collect();
    assert_eq!(counted, [("work_b", 100)], "{t:?}");
}

#[test]
fn errors_are_one_line() {
    let dir = workdir("export-formats-errors");
    let exe = build(&dir, "gcc", &fixture("tree.c"), "tree", &["-O1", "-pg"]);
    let (trace, _) = record(&dir, "trace", &exe, &["child", "10"], &[]);
    std::fs::write(dir.join("empty.meta"), "").unwrap();
    for format in ["perfetto", "pprof"] {
        // A bad trace: one line, status 2, no output file.
        let out_file = dir.join(format!("bad.{format}"));
        let out = run(Command::new(instrfn())
            .arg("export")
            .arg(&dir)
            .args(["--format", format, "-o"])
            .arg(&out_file));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{format}: {stderr}");
        assert!(!out_file.exists());
        // An unwritable output: one line, status 2.
        let out = run(Command::new(instrfn()).arg("export").arg(&trace).args([
            "--format",
            format,
            "-o",
            "/nonexistent/dir/out",
        ]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{format}: {stderr}");
        // No such process.
        let out = run(Command::new(instrfn())
            .arg("export")
            .arg(&trace)
            .args(["--format", format, "--pid", "1", "-o"])
            .arg(&out_file));
        assert_eq!(out.status.code(), Some(2), "{format}");
        // Standard output when no -o is given.
        let out = run_ok(
            Command::new(instrfn())
                .arg("export")
                .arg(&trace)
                .args(["--format", format]),
        );
        assert!(!out.stdout.is_empty(), "{format}");
    }
}
