//! `instrfn export`, read back by the real consumers: Chrome JSON that follows the trace-event
//! rules, folded stacks that sum to the self time, flame graphs that are XML (Python's parser),
//! and the XRay basic-mode log read by llvm-xray (14 here): exact call counts from `llvm-xray
//! account -instr_map BIN` (strict: no `-k`, no `convert --sort`), a YAML round trip through
//! `llvm-xray convert` whose records are in time order and nest, `llvm-xray stack` per-stack
//! counts; and the errors: a binary without an instrumentation map, several executables in
//! one trace, filters that cannot apply, an unknown format.
//!
//! The XRay traces are of clang `-fxray-instrument` binaries that also call
//! `__cyg_profile_func_enter/exit` (`-finstrument-functions-after-inlining`): their events
//! carry exactly the function addresses of the binary's XRay map. [`check_xray_log`] takes any
//! traced XRay binary; `xray_rust_native_trace_read_back` is a trace recorded through natively
//! patched sleds of a rustc `-Zinstrument-xray=always` binary.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

feature_tests! {
    export:
    chrome_folded_and_svg_follow_their_formats(x86_64),
    xray_c_counts_read_back(x86_64),
    xray_processes_of_one_executable_share_a_log(x86_64),
    xray_binary_without_a_map_is_one_line_exit_2_and_no_file(x86_64),
    unknown_format_names_the_choices(x86_64),
    xray_rust_native_trace_read_back(x86_64),
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// `instrfn ARGS…`, whatever its status.
fn instrfn(args: &[&OsStr]) -> Output {
    run(Command::new(instrfn_cli()).args(args))
}

/// Checks the Chrome trace-event rules instrfn promises: complete events with integer pid and
/// tid, µs timestamps, every thread's slices properly nested; returns slices per name.
fn check_chrome(doc: &Value) -> BTreeMap<String, u64> {
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    // (pid, tid) -> (start, end, name) of each slice
    type Slices = BTreeMap<(u64, u64), Vec<(f64, f64, String)>>;
    let mut slices: Slices = BTreeMap::new();
    let mut counts = BTreeMap::new();
    let mut named_threads = 0;
    for e in events {
        let pid = e["pid"].as_u64().expect("integer pid");
        let tid = e["tid"].as_u64().expect("integer tid");
        match e["ph"].as_str().unwrap() {
            "X" => {
                let ts = e["ts"].as_f64().unwrap();
                let dur = e["dur"].as_f64().unwrap();
                assert!(dur >= 0.0);
                let name = e["name"].as_str().unwrap().to_string();
                *counts.entry(name.clone()).or_default() += 1;
                slices
                    .entry((pid, tid))
                    .or_default()
                    .push((ts, ts + dur, name));
            }
            "M" => {
                if e["name"] == "thread_name" {
                    named_threads += 1;
                }
                assert!(e["args"]["name"].is_string());
            }
            "i" => {}
            ph => panic!("unexpected phase {ph}"),
        }
    }
    assert!(named_threads > 0, "no thread_name metadata");
    for ((pid, tid), mut s) in slices {
        // Nested: sorted by start (longest first on ties), each slice ends within the ones
        // still open around it.
        s.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64, String)> = Vec::new();
        for x in s {
            // (ts + dur in floating point may pass the next slice's ts by an ulp: siblings
            // that touch are not nested.)
            while open.last().is_some_and(|o| o.1 <= x.0 + 1e-6) {
                open.pop();
            }
            if let Some(o) = open.last() {
                assert!(
                    x.1 <= o.1 + 0.001,
                    "{pid}/{tid}: {} [{}, {}] overlaps {} [{}, {}]",
                    x.2,
                    x.0,
                    x.1,
                    o.2,
                    o.0,
                    o.1
                );
            }
            open.push(x);
        }
    }
    counts
}

/// calltree.c at 4 threads of 20 rounds: the Chrome export has as many slices of each function
/// as the report has calls, properly nested per thread; the folded stacks (`a;b;c <ns>`) sum
/// to the total self time; the SVG flame graph is well-formed XML with every function of
/// at least 0.1 % of the time in it.
fn chrome_folded_and_svg_follow_their_formats(_: Arch) {
    let dir = workdir("export-calltree");
    let exe = build_pg(&dir, "calltree.c");
    let (_, trace) = record_trace(&exe, &["4", "20"], &[], &dir);
    let r = report_json(&trace, &[]);
    let funcs = report_functions(&r);

    // chrome: slices per function = its calls.
    let json = dir.join("trace.json");
    let out = instrfn(&[
        OsStr::new("export"),
        trace.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("chrome"),
        OsStr::new("-o"),
        json.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let counts = check_chrome(&doc);
    for (name, fun) in &funcs {
        assert_eq!(counts.get(name).copied(), Some(u(&fun["calls"])), "{name}");
    }

    // folded: lines `a;b;c <ns>`, summing to the total self time.
    let out = instrfn(&[
        OsStr::new("export"),
        trace.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("folded"),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut sum = 0u64;
    let mut lines = 0;
    for line in text.lines() {
        let (stack, v) = line.rsplit_once(' ').expect("stack and value");
        assert!(!stack.is_empty());
        sum += v.parse::<u64>().expect("integer ns");
        lines += 1;
    }
    assert!(text.lines().any(|l| l.starts_with("run;a;b;c ")), "{text}");
    let self_total: f64 = funcs.values().map(|x| f(&x["self_ns"])).sum();
    assert!(
        (sum as f64 - self_total).abs() <= lines as f64,
        "folded {sum} ns, self {self_total} ns"
    );

    // svg: well-formed XML (Python's parser), every function of >= 0.1 % of the time in it.
    let svg = dir.join("flame.svg");
    let out = instrfn(&[
        OsStr::new("export"),
        trace.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("svg"),
        OsStr::new("-o"),
        svg.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    require_tool("python3");
    run_ok(
        Command::new("python3")
            .arg("-c")
            .arg("import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])")
            .arg(&svg),
    );
    let body = std::fs::read_to_string(&svg).unwrap();
    for (name, fun) in &funcs {
        if f(&fun["self_ns"]) >= 0.001 * self_total {
            assert!(
                body.contains(&format!("<title>{name} (")),
                "{name} not in the SVG"
            );
        }
    }
}

/// llvm-xray, which must be installed (scripts/test.sh installs it).
fn llvm_xray() -> &'static str {
    require_tool("llvm-xray");
    "llvm-xray"
}

/// Builds `tests/fixtures/c/<src>` with clang's XRay sleds and `-finstrument-functions` hooks
/// after inlining; linked without `-fxray-instrument`, so without compiler-rt's XRay runtime
/// (like rustc's `-Zinstrument-xray` binaries): only instrfn's hooks record.
fn build_xray_c(dir: &Path, src: &str) -> PathBuf {
    require_tool("clang");
    let stem = src.split('.').next().unwrap();
    let obj = dir.join(format!("{stem}.o"));
    run_ok(
        Command::new("clang")
            .args([
                "-O1",
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
                "-finstrument-functions-after-inlining",
                "-c",
            ])
            .arg(fixture(&format!("c/{src}")))
            .arg("-o")
            .arg(&obj),
    );
    let exe = dir.join(stem);
    run_ok(
        Command::new("clang")
            .arg(&obj)
            .arg("-o")
            .arg(&exe)
            .arg("-lpthread"),
    );
    exe
}

/// `instrfn record -o DIR/<name> -- cmd…` (the runtime built and current), checked to succeed.
/// The C fixtures record through their `-finstrument-functions` hooks: their XRay sleds are
/// left unpatched (INSTRFN_EXCLUDE='*'), or every call would be recorded twice.
fn record(dir: &Path, name: &str, cmd: &[&OsStr]) -> PathBuf {
    record_with(dir, name, cmd, &[("INSTRFN_EXCLUDE", "*")])
}

/// `instrfn record` with `env`: an empty one patches every XRay sled natively.
fn record_with(dir: &Path, name: &str, cmd: &[&OsStr], env: &[(&str, &str)]) -> PathBuf {
    runtime_lib(X86_64, Lib::Shared);
    let trace = dir.join(name);
    let _ = std::fs::remove_dir_all(&trace);
    run_ok(
        Command::new(instrfn_cli())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .args(cmd)
            .envs(env.iter().copied())
            .current_dir(dir),
    );
    trace
}

fn export(trace: &Path, out: &Path, extra: &[&str]) -> Output {
    run(Command::new(instrfn_cli())
        .args(["export", "--format", "xray", "-o"])
        .arg(out)
        .arg(trace)
        .args(extra))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a traced XRay binary's exported log must give.
struct Expected<'a> {
    /// Calls per function (every function that has any), as `llvm-xray account` names them.
    calls: &'a [(&'a str, u64)],
    /// Calls of functions the map does not list, and how many such functions, if any.
    left_out: Option<(u64, usize)>,
    /// Distinct threads with records.
    threads: usize,
}

/// `llvm-xray account -format=csv`: function -> count.
fn account(bin: &Path, log: &Path) -> BTreeMap<String, u64> {
    let out = run_ok(
        Command::new(llvm_xray())
            .args(["account", "-format=csv"])
            .arg(format!("-instr_map={}", bin.display()))
            .arg(log),
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.trim().is_empty(),
        "llvm-xray account said:\n{stderr}"
    );
    let mut counts = BTreeMap::new();
    for line in text(&out.stdout).lines().skip(1) {
        // funcid,count,min,median,90%ile,99%ile,max,sum,debug,function
        let f: Vec<&str> = line.split(',').collect();
        assert!(f.len() >= 10, "unexpected account line: {line}");
        let name = f[f.len() - 1].trim().trim_matches('"').to_string();
        let n: u64 = f[1].parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(
            counts.insert(name, n).is_none(),
            "two rows for one name: {line}"
        );
    }
    counts
}

/// `llvm-xray account -format=csv` rows as (function, count), names possibly repeated.
fn account_rows(bin: &Path, log: &Path) -> Vec<(String, u64)> {
    let out = run_ok(
        Command::new(llvm_xray())
            .args(["account", "-format=csv"])
            .arg(format!("-instr_map={}", bin.display()))
            .arg(log),
    );
    assert!(text(&out.stderr).trim().is_empty(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .skip(1)
        .map(|line| {
            let name = line
                .rsplit_once(",\"")
                .map_or("", |(_, n)| n)
                .trim_end_matches('"');
            let n = line.split(',').nth(1).and_then(|c| c.parse().ok());
            (name.to_string(), n.unwrap_or_else(|| panic!("{line}")))
        })
        .collect()
}

/// One record of `llvm-xray convert -output-format=yaml`.
#[derive(Debug)]
struct YamlRecord {
    func_id: i64,
    thread: u64,
    process: u64,
    enter: bool,
    tsc: u64,
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let at = line
        .find(&format!(" {key}: "))
        .unwrap_or_else(|| panic!("no {key} in {line}"));
    let rest = &line[at + key.len() + 3..];
    rest.split([',', ' ', '}']).next().unwrap()
}

fn convert_yaml(bin: &Path, log: &Path) -> Vec<YamlRecord> {
    let out = run_ok(
        Command::new(llvm_xray())
            .args(["convert", "-output-format=yaml"])
            .arg(format!("-instr_map={}", bin.display()))
            .arg(log),
    );
    let yaml = text(&out.stdout);
    assert!(
        yaml.contains("version:         3"),
        "{}",
        &yaml[..400.min(yaml.len())]
    );
    yaml.lines()
        .filter(|l| l.trim_start().starts_with("- { type: 0"))
        .map(|l| {
            let kind = field(l, "kind");
            assert!(
                kind == "function-enter" || kind == "function-exit",
                "unexpected record kind: {l}"
            );
            YamlRecord {
                func_id: field(l, "func-id").parse().unwrap(),
                thread: field(l, "thread").parse().unwrap(),
                process: field(l, "process").parse().unwrap(),
                enter: kind == "function-enter",
                tsc: field(l, "tsc").parse().unwrap(),
            }
        })
        .collect()
}

/// `llvm-xray stack --all-stacks` with counts: calls per function, summed over its stacks
/// (`thread_T;outer;…;leaf; N` lines: N calls of that leaf along that stack).
fn stack_counts(bin: &Path, log: &Path) -> BTreeMap<String, u64> {
    let human = run_ok(
        Command::new(llvm_xray())
            .arg("stack")
            .arg(format!("-instr_map={}", bin.display()))
            .arg(log),
    );
    assert!(
        text(&human.stdout).contains("Unique Stacks:"),
        "{}",
        text(&human.stdout)
    );
    let out = run_ok(
        Command::new(llvm_xray())
            .args([
                "stack",
                "--all-stacks",
                "--stack-format=flame",
                "--aggregation-type=count",
            ])
            .arg(format!("-instr_map={}", bin.display()))
            .arg(log),
    );
    let mut counts = BTreeMap::new();
    for line in text(&out.stdout).lines().filter(|l| !l.trim().is_empty()) {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let leaf = stack.trim_end_matches(';').rsplit(';').next().unwrap();
        *counts.entry(leaf.to_string()).or_insert(0) += n.parse::<u64>().unwrap();
    }
    counts
}

/// Exports `trace` (of XRay binary `bin`) and checks every consumer against `expected`.
fn check_xray_log(bin: &Path, trace: &Path, work: &Path, expected: &Expected, context: &str) {
    let log = work.join(format!("{context}.xray"));
    let out = export(trace, &log, &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{context}: export failed: {stderr}");
    match expected.left_out {
        Some((calls, functions)) => assert!(
            stderr.contains(&format!(
                "left out {calls} calls of {functions} function{} that {}'s XRay",
                if functions == 1 { "" } else { "s" },
                bin.display()
            )),
            "{context}: {stderr}"
        ),
        None => assert!(!stderr.contains("left out"), "{context}: {stderr}"),
    }
    assert_eq!(
        stderr.lines().count(),
        expected.left_out.is_some() as usize,
        "{stderr}"
    );
    let want: BTreeMap<String, u64> = expected
        .calls
        .iter()
        .map(|(n, c)| (n.to_string(), *c))
        .collect();
    assert_eq!(account(bin, &log), want, "{context}: llvm-xray account");
    assert_eq!(stack_counts(bin, &log), want, "{context}: llvm-xray stack");

    let records = convert_yaml(bin, &log);
    let total: u64 = want.values().sum();
    let enters = records.iter().filter(|r| r.enter).count() as u64;
    assert_eq!(enters, total, "{context}: entry records");
    assert_eq!(
        records.len() as u64 - enters,
        total,
        "{context}: exit records"
    );
    assert!(
        records.windows(2).all(|w| w[0].tsc <= w[1].tsc),
        "{context}: records go back in time"
    );
    let threads: BTreeSet<u64> = records.iter().map(|r| r.thread).collect();
    assert_eq!(threads.len(), expected.threads, "{context}: threads");
    assert!(records.iter().all(|r| r.process != 0));
    // Every thread's records nest: each exit closes its thread's newest open entry, and
    // nothing stays open.
    let mut stacks: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for r in &records {
        let s = stacks.entry(r.thread).or_default();
        if r.enter {
            s.push(r.func_id);
        } else {
            assert_eq!(s.pop(), Some(r.func_id), "{context}: unbalanced exit {r:?}");
        }
    }
    assert!(
        stacks.values().all(Vec::is_empty),
        "{context}: calls left open"
    );
}

const T: u64 = 4;
const N: u64 = 2000;

/// xray_calls.c's calls at T threads x N rounds (see its header); hidden's are left out.
fn xray_calls(t: u64, n: u64) -> Vec<(&'static str, u64)> {
    vec![
        ("main", 1),
        ("worker", t),
        ("alpha", t * n),
        ("beta", 2 * t * n),
        ("rec", 4 * t * n),
        ("jumper", t),
        ("deep", t),
        ("finish", 1),
    ]
}

/// xray_calls.c at 4 threads recorded through its -finstrument-functions hooks (its sleds
/// left unpatched), exported: every consumer agrees ([`check_xray_log`]), hidden()'s calls left
/// out (not in the map) and said; the filters apply as in the other exports (by name, by
/// depth); a corrupt event is one line, exit 2 and no file; filters that need a call's end
/// before its entry is written are refused.
fn xray_c_counts_read_back(_: Arch) {
    let dir = workdir("xray-export-c");
    let bin = build_xray_c(&dir, "xray_calls.c");
    let (t, n) = (T.to_string(), N.to_string());
    let trace = record(
        &dir,
        "trace",
        &[bin.as_os_str(), OsStr::new(&t), OsStr::new(&n)],
    );
    let calls = xray_calls(T, N);
    check_xray_log(
        &bin,
        &trace,
        &dir,
        &Expected {
            calls: &calls,
            left_out: Some((T * N, 1)),
            threads: T as usize + 1,
        },
        "xray_calls",
    );

    // Filters apply as in the other exports: by name, and by depth.
    let log = dir.join("filtered.xray");
    let out = export(&trace, &log, &["--exclude", "beta", "--exclude", "re?"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut want: BTreeMap<String, u64> = calls.iter().map(|(f, c)| (f.to_string(), *c)).collect();
    want.remove("beta");
    want.remove("rec");
    assert_eq!(account(&bin, &log), want, "--exclude");
    let out = export(&trace, &log, &["--depth", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outermost: BTreeMap<String, u64> = [("main", 1), ("worker", T)]
        .into_iter()
        .map(|(f, c)| (f.to_string(), c))
        .collect();
    assert_eq!(account(&bin, &log), outermost, "--depth 1");
    // A corrupt event (an unknown kind): one line, exit 2, no file.
    let bad = dir.join("corrupt");
    let _ = std::fs::remove_dir_all(&bad);
    std::fs::create_dir_all(&bad).unwrap();
    for e in std::fs::read_dir(&trace).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), bad.join(e.file_name())).unwrap();
    }
    // (A trace this small is all in the staging file.)
    let events = std::fs::read_dir(&bad)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "stage"))
        .unwrap();
    let mut bytes = std::fs::read(&events).unwrap();
    // The low byte of the tagged word of the first event of the first chunk written (a chunk
    // prepared and never used is zero): kind 15 in a version 1 chunk (16-byte events, the
    // word second); in a version 2 or 3 one (compact events: the word first, low byte first
    // on x86_64) 0x7f, a long event of kind 7 (bit 7 clear: not a call word), whatever the
    // event was.
    let chunk = bytes
        .windows(8)
        .position(|w| w == b"IFNCHNK1")
        .expect("a chunk");
    if bytes[chunk + 8] >= 2 {
        bytes[chunk + 64] = 0x7f;
    } else {
        bytes[chunk + 64 + 8] |= 0x0f;
    }
    std::fs::write(&events, bytes).unwrap();
    let _ = std::fs::remove_file(&log);
    let out = export(&bad, &log, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("corrupt event"),
        "{}",
        text(&out.stderr)
    );
    assert!(!log.exists());

    // Filters that need a call's end before its entry is written: refused, nothing written.
    let _ = std::fs::remove_file(&log);
    for flag in [["--min-duration", "1us"], ["--time-range", "1ms.."]] {
        let out = export(&trace, &log, &flag);
        assert_eq!(out.status.code(), Some(2), "{flag:?}");
        assert_eq!(
            text(&out.stderr).lines().count(),
            1,
            "{}",
            text(&out.stderr)
        );
        assert!(!log.exists());
    }
}

/// Two runs of one executable in one trace: one log, each record with its pid, counts summed.
/// Another executable in the same trace: refused in one line naming --pid, and --pid picks
/// one (the one without an XRay map refused again, naming `xray_instr_map`).
fn xray_processes_of_one_executable_share_a_log(arch: Arch) {
    let dir = workdir("xray-export-processes");
    let bin = build_xray_c(&dir, "xray_calls.c");
    // Two runs of one executable: one log, each record with its pid, counts summed.
    let script = format!("{0} 1 100 && {0} 2 100", bin.display());
    let trace = record(
        &dir,
        "same",
        &[OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)],
    );
    let mut calls = xray_calls(1, 100);
    for (c, (_, n)) in calls.iter_mut().zip(xray_calls(2, 100)) {
        c.1 += n;
    }
    check_xray_log(
        &bin,
        &trace,
        &dir,
        &Expected {
            calls: &calls,
            left_out: Some((300, 1)),
            threads: 2 + 3,
        },
        "two-processes",
    );
    let pids: BTreeSet<u64> = convert_yaml(&bin, &dir.join("two-processes.xray"))
        .iter()
        .map(|r| r.process)
        .collect();
    assert_eq!(pids.len(), 2);

    // Another executable in the same trace: --pid picks one.
    let pg = dir.join("threads-pg");
    cc(
        arch,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            fixture("c/threads.c").as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &pg,
    );
    let script = format!("{} 1 100 && {} 1 10", bin.display(), pg.display());
    let trace = record(
        &dir,
        "mixed",
        &[OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)],
    );
    let log = dir.join("mixed.xray");
    let out = export(&trace, &log, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--pid"), "{stderr}");
    assert!(!log.exists());
    let procs = instrfn_dump(&trace);
    let pid_of = |exe: &Path| -> String {
        let p = procs
            .iter()
            .find(|p| p.header.contains(&exe.display().to_string()))
            .unwrap_or_else(|| panic!("no process of {}", exe.display()));
        p.header.split_whitespace().nth(1).unwrap().to_string()
    };
    let out = export(&trace, &log, &["--pid", &pid_of(&bin)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        account(&bin, &log),
        xray_calls(1, 100)
            .into_iter()
            .map(|(f, c)| (f.to_string(), c))
            .collect()
    );
    let out = export(&trace, &log, &["--pid", &pid_of(&pg)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("xray_instr_map"),
        "{}",
        text(&out.stderr)
    );
}

/// A trace of a binary without an XRay instrumentation map: one line naming the binary, exit
/// 2, no output file left, nothing on standard output.
fn xray_binary_without_a_map_is_one_line_exit_2_and_no_file(arch: Arch) {
    let dir = workdir("xray-export-nomap");
    let exe = dir.join("threads");
    cc(
        arch,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            fixture("c/threads.c").as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &exe,
    );
    let trace = record(
        &dir,
        "trace",
        &[exe.as_os_str(), OsStr::new("2"), OsStr::new("100")],
    );
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let log = out_dir.join("threads.xray");
    let out = export(&trace, &log, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("instrfn: ")
            && stderr.contains(&exe.display().to_string())
            && stderr.contains("no XRay instrumentation map"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&out_dir).unwrap().count(),
        0,
        "an output file was left behind"
    );
    // Standard output (a pipe here) gets nothing either.
    let out = run(Command::new(instrfn_cli())
        .args(["export", "--format", "xray"])
        .arg(&trace));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

/// An unknown --format: exit 2, the choices named, no file.
fn unknown_format_names_the_choices(_: Arch) {
    let dir = workdir("xray-export-format");
    let out = run(Command::new(instrfn_cli())
        .args(["export", "--format", "xrays", "-o"])
        .arg(dir.join("x"))
        .arg(&dir));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'xrays'") && stderr.contains("xray"),
        "{stderr}"
    );
    assert!(!dir.join("x").exists());
}

/// A trace recorded through natively patched sleds (tests/fixtures/xray-app built with
/// `-Zinstrument-xray=always`, no XRay runtime linked) exported and read by llvm-xray: the
/// fixture's own functions have their exact counts in `account` and `stack`, every function
/// with records has the count `instrfn report` gives it (std's generics instantiated in the
/// crate have sleds too, with counts only the run knows), and the records nest per thread.
fn xray_rust_native_trace_read_back(arch: Arch) {
    let dir = workdir("xray-export-rust");
    let bin = build_xray_rust("xray-app", arch.triple, "xray-app", "always", "");
    let (t, n) = (T.to_string(), N.to_string());
    let trace = record_with(
        &dir,
        "trace",
        &[bin.as_os_str(), OsStr::new(&t), OsStr::new(&n)],
        &[],
    );
    let log = dir.join("rust.xray");
    let out = export(&trace, &log, &[]);
    assert!(out.status.success(), "export: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).trim().is_empty(),
        "every recorded function is in the map: {}",
        text(&out.stderr)
    );
    // Distinct functions may demangle alike (generics differ by hash only): rows by id.
    let rows = account_rows(&bin, &log);
    let counts: BTreeMap<String, u64> = rows.iter().cloned().collect();
    for (name, want) in [
        ("xray_app::main", 1),
        ("xray_app::worker", T),
        ("xray_app::work_a", T * N),
        ("xray_app::work_b", T * N),
    ] {
        assert_eq!(counts.get(name), Some(&want), "{name}: {counts:?}");
    }
    // The same calls as the report's, function by function (llvm's demangler may add an
    // `(.llvm.N)` suffix that rustc-demangle drops, so compared as sorted counts), in all.
    let report = run_ok(
        Command::new(instrfn_cli())
            .args(["report", "--format", "json", "--limit", "0"])
            .arg(&trace),
    );
    let doc: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let mut ours: Vec<u64> = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["calls"].as_u64().unwrap())
        .collect();
    let mut theirs: Vec<u64> = rows.iter().map(|r| r.1).collect();
    ours.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(ours, theirs, "per-function counts, report vs account");
    assert_eq!(
        stack_counts(&bin, &log).values().sum::<u64>(),
        theirs.iter().sum::<u64>(),
        "llvm-xray stack"
    );
    let records = convert_yaml(&bin, &log);
    assert!(
        records.windows(2).all(|w| w[0].tsc <= w[1].tsc),
        "time order"
    );
    let threads: BTreeSet<u64> = records.iter().map(|r| r.thread).collect();
    assert_eq!(threads.len() as u64, T + 1, "threads");
    let mut stacks: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for r in &records {
        let s = stacks.entry(r.thread).or_default();
        if r.enter {
            s.push(r.func_id);
        } else {
            assert_eq!(s.pop(), Some(r.func_id), "unbalanced exit {r:?}");
        }
    }
    assert!(stacks.values().all(Vec::is_empty), "calls left open");
}
