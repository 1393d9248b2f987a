//! XRay sleds patched by the runtime itself (src/xray.rs, asm/x86_64-xray.s,
//! asm/aarch64-xray.s), x86_64 and aarch64 (under qemu-user): Rust programs built with
//! `-Zinstrument-xray` and C programs built with clang `-fxray-instrument`, traced with
//! `instrfn record` or LD_PRELOAD + INSTRFN_MODE=trace, and no compiler-rt runtime involved.
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The Rust fixture built with `-Zinstrument-xray=<opts>`.
fn app(opts: &str) -> PathBuf {
    build_xray_rust("xray-app", X86_64.triple, "xray-app", opts, "")
}

/// How a traced run is started.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// `instrfn record -o DIR -- exe args`
    Record,
    /// LD_PRELOAD=libinstrfn.so INSTRFN_MODE=trace INSTRFN_OUTPUT=DIR exe args
    Preload,
}

/// Runs `exe args` traced into `trace` (emptied first) with the extra environment `env`;
/// checks it succeeds.
fn traced(route: Route, exe: &Path, args: &[&str], env: &[(&str, &str)], trace: &Path) -> Output {
    let _ = std::fs::remove_dir_all(trace);
    let mut cmd = match route {
        Route::Record => {
            let mut c = Command::new(instrfn_cli());
            c.arg("record")
                .arg("-o")
                .arg(trace)
                .arg("--")
                .arg(exe)
                .args(args);
            c
        }
        Route::Preload => {
            let mut c = Command::new(exe);
            c.args(args)
                .env("LD_PRELOAD", runtime_lib(X86_64, Lib::Shared))
                .env("INSTRFN_MODE", "trace")
                .env("INSTRFN_OUTPUT", trace);
            c
        }
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_within(&mut cmd, 120)
}

/// `instrfn report DIR --format json`: completed calls per (demangled) function, and the
/// document.
fn report(trace: &Path) -> (BTreeMap<String, u64>, Value) {
    let out = run_ok(
        Command::new(instrfn_cli())
            .arg("report")
            .arg(trace)
            .args(["--format", "json"]),
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut rows = BTreeMap::new();
    for f in doc["functions"].as_array().unwrap() {
        rows.insert(
            f["name"].as_str().unwrap().to_string(),
            f["calls"].as_u64().unwrap(),
        );
    }
    (rows, doc)
}

/// Events of each kind whose raw (mangled) function name contains `part`, all threads.
fn raw_count(p: &DumpProcess, kind: &str, part: &str) -> usize {
    p.threads
        .values()
        .flatten()
        .filter(|e| e.kind == kind && e.name.contains(part))
        .count()
}

fn row(rows: &BTreeMap<String, u64>, name: &str) -> u64 {
    rows.get(name).copied().unwrap_or(0)
}

const T: u64 = 4;
const N: u64 = 1000;

#[test]
fn rust_counts_exact_at_four_threads() {
    let exe = app("always");
    let dir = workdir("xray-counts");
    let plain = run_ok(Command::new(&exe).args(["4", "1000"]));
    let expected = stdout_of(&plain);
    assert!(expected.starts_with("sum "), "{expected}");
    for (route, env) in [
        (Route::Record, vec![]),
        (Route::Preload, vec![]),
        (Route::Record, vec![("INSTRFN_XRAY_WRITE", "mprotect")]),
        (Route::Record, vec![("INSTRFN_BUFSIZE", "4096")]),
        // A malformed value: one line, the default route.
        (Route::Preload, vec![("INSTRFN_XRAY_WRITE", "pokes")]),
    ] {
        let context = format!("{route:?} {env:?}");
        let trace = dir.join("trace");
        let out = traced(route, &exe, &["4", "1000"], &env, &trace);
        assert_eq!(stdout_of(&out), expected, "{context}: output changed");
        if env.contains(&("INSTRFN_XRAY_WRITE", "pokes")) {
            assert_eq!(
                stderr_of(&out).trim(),
                "instrfn: ignoring INSTRFN_XRAY_WRITE=\"pokes\": expected mprotect or auto; using auto",
                "{context}"
            );
        }
        let (rows, doc) = report(&trace);
        assert_eq!(row(&rows, "xray_app::worker"), T, "{context}");
        assert_eq!(row(&rows, "xray_app::work_a"), T * N, "{context}");
        assert_eq!(row(&rows, "xray_app::work_b"), T * N, "{context}");
        assert_eq!(row(&rows, "xray_app::main"), 1, "{context}");
        assert_eq!(doc["exits_without_entry"], 0, "{context}");
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{context}");
        assert_eq!(procs[0].lost, 0, "{context}");
        let counts = assert_balanced(&procs[0], &context);
        for f in ["6work_a", "6work_b"] {
            let entries: u64 = counts
                .iter()
                .filter(|((k, n), _)| k == "entry" && n.contains(f))
                .map(|(_, c)| c)
                .sum();
            let exits: u64 = counts
                .iter()
                .filter(|((k, n), _)| k == "exit" && n.contains(f))
                .map(|(_, c)| c)
                .sum();
            assert_eq!((entries, exits), (T * N, T * N), "{context}: {f}");
        }
        // Each worker thread's calls are its own: 1 worker, N work_a, N work_b.
        let workers = procs[0]
            .threads
            .values()
            .filter(|evs| evs.iter().any(|e| e.name.contains("6worker")))
            .inspect(|evs| {
                let n = |part: &str| {
                    evs.iter()
                        .filter(|e| e.kind == "entry" && e.name.contains(part))
                        .count() as u64
                };
                assert_eq!(
                    (n("6worker"), n("6work_a"), n("6work_b")),
                    (1, N, N),
                    "{context}"
                );
            })
            .count();
        assert_eq!(workers as u64, T, "{context}");
    }
}

#[test]
fn rust_caught_panic_is_balanced() {
    let exe = app("always");
    let dir = workdir("xray-panic");
    let trace = dir.join("trace");
    for route in [Route::Record, Route::Preload] {
        let out = traced(route, &exe, &["panic", "3", "4"], &[], &trace);
        assert_eq!(stdout_of(&out), "caught 3\n", "{route:?}");
        let procs = instrfn_dump(&trace);
        let p = &procs[0];
        assert_balanced(p, &format!("{route:?}"));
        // dive(4) .. dive(0): 5 frames per round, all closed by unwinding, 3 rounds.
        assert_eq!(raw_count(p, "entry", "4dive"), 15, "{route:?}");
        assert_eq!(raw_count(p, "unwound", "4dive"), 15, "{route:?}");
        assert_eq!(raw_count(p, "exit", "4dive"), 0, "{route:?}");
        assert_eq!(raw_count(p, "exit", "5after"), 3, "{route:?}");
        let (rows, _) = report(&trace);
        assert_eq!(row(&rows, "xray_app::after"), 3, "{route:?}");
        assert_eq!(row(&rows, "xray_app::dive"), 15, "{route:?}");
    }
}

/// `xray-app bytes`: the first 11 code bytes of work_a, work_b and worker.
fn code_bytes(out: &Output) -> BTreeMap<String, String> {
    stdout_of(out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn filters_choose_what_is_patched() {
    let exe = app("always");
    let dir = workdir("xray-filter");
    let trace = dir.join("trace");
    let plain = code_bytes(&run_ok(Command::new(&exe).arg("bytes")));
    for f in ["work_a", "work_b", "worker"] {
        assert!(plain[f].starts_with("eb09"), "{f}: {}", plain[f]);
    }
    // Glob and substring patterns; the exclusion wins over the filter.
    let env = [
        ("INSTRFN_FILTER", "xray_app::work*, nothing_matches"),
        ("INSTRFN_EXCLUDE", "work_b"),
    ];
    for route in [Route::Record, Route::Preload] {
        let out = traced(route, &exe, &["bytes"], &env, &trace);
        let code = code_bytes(&out);
        assert_eq!(
            code["work_b"], plain["work_b"],
            "{route:?}: work_b's sled was touched"
        );
        for f in ["work_a", "worker"] {
            // test $((id << 8) | 9), %eax; call <stub>: the jump's `eb` flipped to `a9`, its
            // `09` kept
            assert!(
                code[f].starts_with("a909"),
                "{route:?}: {f} unpatched: {}",
                code[f]
            );
        }
        let (rows, _) = report(&trace);
        let names: Vec<&String> = rows.keys().collect();
        assert_eq!(names, ["xray_app::work_a", "xray_app::worker"], "{route:?}");
        assert_eq!(
            (
                row(&rows, "xray_app::work_a"),
                row(&rows, "xray_app::worker")
            ),
            (1, 1)
        );
    }
    // Threads, one function chosen: its exact count, nothing else.
    let out = traced(
        Route::Record,
        &exe,
        &["4", "1000"],
        &[("INSTRFN_FILTER", "work_a")],
        &trace,
    );
    assert!(stdout_of(&out).starts_with("sum "));
    let (rows, _) = report(&trace);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(row(&rows, "xray_app::work_a"), T * N);
    // Every sled left alone: the program runs as it does plainly.
    let out = traced(
        Route::Record,
        &exe,
        &["bytes"],
        &[("INSTRFN_FILTER", "no_such_function")],
        &trace,
    );
    assert_eq!(code_bytes(&out), plain);
}

#[test]
fn recording_off_with_sleds_patched() {
    // INSTRFN_START=off: by default nothing is patched until recording starts; with
    // INSTRFN_XRAY_STOP=pause every sled is patched at load and the trampolines return at once
    // (what the trampolines alone cost): no event at all.
    let exe = app("always");
    let dir = workdir("xray-pause");
    let trace = dir.join("trace");
    let plain = code_bytes(&run_ok(Command::new(&exe).arg("bytes")));
    let events = |trace: &Path| -> usize {
        instrfn_dump(trace)
            .iter()
            .flat_map(|p| p.threads.values().flatten())
            .count()
    };
    for route in [Route::Record, Route::Preload] {
        let out = traced(route, &exe, &["bytes"], &[("INSTRFN_START", "off")], &trace);
        assert_eq!(code_bytes(&out), plain, "{route:?}");
        let out = traced(
            route,
            &exe,
            &["bytes"],
            &[("INSTRFN_START", "off"), ("INSTRFN_XRAY_STOP", "pause")],
            &trace,
        );
        let code = code_bytes(&out);
        for f in ["work_a", "work_b", "worker"] {
            assert!(code[f].starts_with("a909"), "{route:?}: {f}: {}", code[f]);
        }
        if let Route::Record = route {
            assert!(
                stderr_of(&out).contains("recorded no event: INSTRFN_START=off"),
                "{}",
                stderr_of(&out)
            );
        } else {
            assert_eq!(stderr_of(&out), "", "{route:?}");
        }
        assert_eq!(events(&trace), 0, "{route:?}");
        // The threads run through the patched sleds, recording off: output unchanged.
        let out = traced(
            route,
            &exe,
            &["4", "1000"],
            &[("INSTRFN_START", "off"), ("INSTRFN_XRAY_STOP", "pause")],
            &trace,
        );
        assert_eq!(
            stdout_of(&out),
            stdout_of(&run_ok(Command::new(&exe).args(["4", "1000"]))),
            "{route:?}"
        );
        assert_eq!(events(&trace), 0, "{route:?}");
    }
    // A malformed value: said in one line, the default kept.
    let out = traced(
        Route::Preload,
        &exe,
        &["bytes"],
        &[("INSTRFN_START", "off"), ("INSTRFN_XRAY_STOP", "keep")],
        &trace,
    );
    assert!(
        stderr_of(&out).contains(
            "ignoring INSTRFN_XRAY_STOP=\"keep\": expected unpatch (stopping puts XRay sleds back) or pause (they stay patched); using unpatch"
        ),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(code_bytes(&out), plain);
}

#[test]
fn rustc_variants() {
    let dir = workdir("xray-variants");
    let trace = dir.join("trace");
    let n = 10u64;
    let ns = n.to_string();
    let args = ["tiny", ns.as_str()];
    // (options, calls of tiny, calls of looping) recorded as complete calls.
    for (opts, tiny, looping) in [
        ("always", n, 1),
        ("instruction-threshold=1", n, 1),
        // Below the threshold, but a loop: looping only.
        ("instruction-threshold=200", 0, 1),
        ("ignore-loops,instruction-threshold=200", 0, 0),
    ] {
        let exe = app(opts);
        traced(Route::Record, &exe, &args, &[], &trace);
        let (rows, doc) = report(&trace);
        assert_eq!(
            (
                row(&rows, "xray_app::tiny"),
                row(&rows, "xray_app::looping")
            ),
            (tiny, looping),
            "{opts}: {rows:?}"
        );
        assert_eq!(row(&rows, "xray_app::main"), 1, "{opts}");
        assert_eq!(doc["exits_without_entry"], 0, "{opts}");
        assert_balanced(&instrfn_dump(&trace)[0], opts);
    }
    // skip-entry: exits only, recorded as exits whose entry is not in the trace (the report
    // counts them in its header, `exits_without_entry`; dump lists them).
    let exe = app("skip-entry,always");
    traced(Route::Record, &exe, &["4", "1000"], &[], &trace);
    let p = &instrfn_dump(&trace)[0];
    assert_eq!(raw_count(p, "exit", "6work_a"), (T * N) as usize);
    assert_eq!(raw_count(p, "exit", "6worker"), T as usize);
    assert_eq!(raw_count(p, "entry", "xray_app"), 0);
    let (rows, doc) = report(&trace);
    assert_eq!(row(&rows, "xray_app::work_a"), 0);
    assert!(doc["exits_without_entry"].as_u64().unwrap() >= 2 * T * N + T);
    // skip-exit: entries only, recorded as entries without exit.
    let exe = app("skip-exit,always");
    traced(Route::Record, &exe, &["4", "1000"], &[], &trace);
    let p = &instrfn_dump(&trace)[0];
    assert_eq!(raw_count(p, "entry-no-exit", "6work_a"), (T * N) as usize);
    assert_eq!(raw_count(p, "entry-no-exit", "6worker"), T as usize);
    assert_eq!(raw_count(p, "exit", "xray_app"), 0);
    assert_eq!(raw_count(p, "unwound", "xray_app"), 0);
    let (_, doc) = report(&trace);
    let work_a = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "xray_app::work_a")
        .unwrap();
    assert_eq!(work_a["entries_without_exit"], T * N);
}

#[test]
fn patching_while_threads_run_through_the_sleds() {
    // 3 threads run through entry, exit and tail sleds in a tight loop while the main thread
    // stops and starts recording 300 times (tests/fixtures/c/xray_toggle.c): by default every
    // sled is put back and patched again each time, through /proc/self/mem or mprotect; with
    // INSTRFN_XRAY_STOP=pause the sleds stay patched and only recording flips. No crash, and
    // every thread's trace balanced: a call whose entry was recorded ends with its exit, or,
    // when its exit sled was put back before it returned (unpatch), closed as unwound by the
    // thread's next event that finds its frame gone.
    require_tool("clang");
    let dir = workdir("xray-toggle");
    let trace = dir.join("trace");
    let exe = dir.join("xray_toggle");
    run_ok(
        Command::new("clang")
            .args(["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"])
            .arg(fixture("c/xray_toggle.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-lpthread"),
    );
    const THREADS: u64 = 3;
    const SETTLE: u64 = 100;
    let args = ["3", "300", "100", "50"];
    let plain = run_ok(Command::new(&exe).args(args));
    assert_eq!(stdout_of(&plain), "toggled 0 settled 300\n");
    for (name, env) in [
        ("proc-mem", vec![]),
        ("mprotect", vec![("INSTRFN_XRAY_WRITE", "mprotect")]),
        ("pause", vec![("INSTRFN_XRAY_STOP", "pause")]),
    ] {
        let out = traced(Route::Preload, &exe, &args, &env, &trace);
        assert_eq!(stdout_of(&out), "toggled 300 settled 300\n", "{name}");
        assert_eq!(stderr_of(&out), "", "{name}");
        let procs = instrfn_dump(&trace);
        let p = &procs[0];
        assert_eq!(p.lost, 0, "{name}");
        let counts = assert_balanced(p, name);
        let c = |kind: &str, f: &str| count_of(&counts, kind, f);
        // After the last start, with the sleds patched and recording on: exact.
        assert_eq!(
            (c("entry", "settled"), c("exit", "settled")),
            (THREADS * SETTLE, THREADS * SETTLE),
            "{name}"
        );
        // Entered before the first stop, returned after the last start.
        assert_eq!(
            (c("entry", "spinner"), c("exit", "spinner")),
            (THREADS, THREADS),
            "{name}"
        );
        assert_eq!((c("entry", "main"), c("exit", "main")), (1, 1), "{name}");
        for f in ["outer", "leaf", "tailee"] {
            assert!(c("entry", f) > 0, "{name}: no calls of {f} recorded");
            assert_eq!(c("entry", f), c("exit", f) + c("unwound", f), "{name}: {f}");
        }
        if name == "pause" {
            // Every recorded entry's exit was seen (the exit sleds stayed patched).
            let unwound: u64 = counts
                .iter()
                .filter(|((k, _), _)| k == "unwound")
                .map(|(_, n)| n)
                .sum();
            assert_eq!(unwound, 0, "{name}: {counts:?}");
        }
        for (tid, events) in &p.threads {
            let settled = events
                .iter()
                .filter(|e| e.kind == "entry" && e.name == "settled")
                .count() as u64;
            assert!(
                settled == SETTLE || settled == 0,
                "{name}: thread {tid} settled {settled} times"
            );
        }
    }
}

#[test]
fn rust_threads_through_sleds_while_recording_stops_and_starts() {
    // The Rust fixture's toggle mode (the aarch64 test runs it under qemu): 3 threads in
    // work_a/work_b (a short spin between rounds: fewer events), 300 stops and starts, then 50
    // calls of settled each, exact.
    let exe = app("always");
    let dir = workdir("xray-toggle-rust");
    let trace = dir.join("trace");
    for env in [vec![], vec![("INSTRFN_XRAY_STOP", "pause")]] {
        let out = traced(
            Route::Preload,
            &exe,
            &["toggle", "3", "300", "50", "20000"],
            &env,
            &trace,
        );
        assert_eq!(stdout_of(&out), "toggled 300 settled 150\n", "{env:?}");
        assert_eq!(stderr_of(&out), "", "{env:?}");
        let p = &instrfn_dump(&trace)[0];
        assert_balanced(p, &format!("{env:?}"));
        assert_eq!(raw_count(p, "entry", "7settled"), 150, "{env:?}");
        assert_eq!(raw_count(p, "exit", "7settled"), 150, "{env:?}");
        assert_eq!(raw_count(p, "exit", "7spinner"), 3, "{env:?}");
    }
}

#[test]
fn clang_xray_calltree() {
    require_tool("clang");
    let dir = workdir("xray-clang");
    let trace = dir.join("trace");
    let src = fixture("c/calltree.c");
    let obj = dir.join("calltree.o");
    run_ok(
        Command::new("clang")
            .args([
                "-O2",
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
                "-c",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    // Linked plainly (no compiler-rt), and with compiler-rt's XRay runtime linked in (which
    // patches nothing unless XRAY_OPTIONS asks it to).
    let plain = dir.join("calltree");
    run_ok(
        Command::new("clang")
            .arg(&obj)
            .arg("-o")
            .arg(&plain)
            .arg("-lpthread"),
    );
    let with_rt = dir.join("calltree-rt");
    run_ok(
        Command::new("clang")
            .args(["-fxray-instrument"])
            .arg(&obj)
            .arg("-o")
            .arg(&with_rt)
            .arg("-lpthread"),
    );
    for exe in [&plain, &with_rt] {
        for route in [Route::Record, Route::Preload] {
            traced(route, exe, &["3", "50"], &[], &trace);
            let procs = instrfn_dump(&trace);
            assert_calltree(&procs[0], 3, 50, &format!("{} {route:?}", exe.display()));
        }
    }
}

/// The register harness (tests/fixtures/xray: regs.c and regs_<arch>.S) for `arch`, statically
/// linked with libinstrfn.a or on its own (for LD_PRELOAD).
fn regs_harness(arch: Arch, dir: &Path) -> (PathBuf, PathBuf) {
    let driver = fixture("xray/regs.c");
    let harness = fixture(&format!("xray/regs_{}.S", arch.name));
    let st = cc(
        arch,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            // (the driver's references to these are weak: they pull nothing in by themselves)
            OsStr::new("-Wl,-u,instrfn_stop,-u,instrfn_start"),
            runtime_lib(arch, Lib::Static).as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ],
        &dir.join("regs-static"),
    );
    let dy = cc(
        arch,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-dynamic"),
    );
    (st, dy)
}

/// Counts of the register harness's functions in its trace at `trace`: [entry xf, exit xf,
/// entry xt, exit xt, exit xo], and the entries without exit of xf and xt; checked against
/// `calls` (of each kind) as the `setting` the run had asks.
fn assert_regs_counts(trace: &Path, calls: u64, setting: (&str, &str), context: &str) {
    let p = &instrfn_dump(trace)[0];
    let n = |kind: &str, f: &str| {
        p.threads
            .values()
            .flatten()
            .filter(|e| e.kind == kind && e.name == f)
            .count() as u64
    };
    let got = [
        n("entry", "xf"),
        n("exit", "xf"),
        n("entry", "xt"),
        n("exit", "xt"),
        n("exit", "xo"),
    ];
    match setting.0 {
        "INSTRFN_EXITS" => {
            assert_eq!(got, [0; 5], "{context}");
            assert_eq!(
                (n("entry-no-exit", "xf"), n("entry-no-exit", "xt")),
                (calls, calls),
                "{context}"
            );
        }
        "INSTRFN_TRACE_LIMIT" => {
            assert!(p.lost > 0, "{context}");
            assert_eq!(got[0], got[1], "{context}");
            assert_eq!(got[2], got[3], "{context}");
            assert_eq!(got.iter().sum::<u64>() + p.lost, 5 * calls, "{context}");
        }
        _ => assert_eq!(got, [calls; 5], "{context}"),
    }
}

/// The harness's settings: chunk sizes (1 MiB; 4 KiB: a refill every 252 events, through the
/// slow path), the trace limit (losses), exits off (entries without exit), the mprotect route,
/// and stopping with the sleds left patched (the trampolines run, recording off).
const REGS_SETTINGS: [(&str, &str); 6] = [
    ("INSTRFN_BUFSIZE", "1048576"),
    ("INSTRFN_BUFSIZE", "4096"),
    ("INSTRFN_TRACE_LIMIT", "100000"),
    ("INSTRFN_EXITS", "0"),
    ("INSTRFN_XRAY_WRITE", "mprotect"),
    ("INSTRFN_XRAY_STOP", "pause"),
];

#[test]
fn registers_survive_patched_sleds() {
    let dir = workdir("xray-regs");
    let trace = dir.join("trace");
    let (st, dy) = regs_harness(X86_64, &dir);
    // Plainly: the sleds are nops.
    let out = run_ok(&mut command(X86_64, &dy, &["check"], &[], &dir));
    assert_eq!(stdout_of(&out), "ok 3007 3007 3007\n");
    const CALLS: u64 = 3007;
    for (exe, route) in [
        (&st, None),
        (&dy, Some(Route::Preload)),
        (&dy, Some(Route::Record)),
    ] {
        for setting in REGS_SETTINGS {
            let context = format!("{} {route:?} {}={}", exe.display(), setting.0, setting.1);
            let out = match route {
                Some(r) => traced(r, exe, &["check"], &[setting], &trace),
                None => {
                    let _ = std::fs::remove_dir_all(&trace);
                    let env = [
                        ("INSTRFN_MODE", "trace"),
                        ("INSTRFN_OUTPUT", trace.to_str().unwrap()),
                        setting,
                    ];
                    run_within(&mut command(X86_64, exe, &["check"], &env, &dir), 120)
                }
            };
            let text = stdout_of(&out);
            // Stopped: the entry sled's first byte is the original jump's again, the rest stays
            // as patched (test $((1 << 8) | 9), %eax; call <stub>; nop); started: the test again.
            // (INSTRFN_XRAY_STOP=pause: patched throughout.)
            let (stopped, started) = (
                labelled_line(&text, "stopped ", &context),
                labelled_line(&text, "started ", &context),
            );
            if setting.0 == "INSTRFN_XRAY_STOP" {
                assert_eq!(stopped, started, "{context}: {text}");
            } else {
                assert!(stopped.starts_with("eb09010000e8"), "{context}: {text}");
            }
            assert!(started.starts_with("a909010000e8"), "{context}: {text}");
            assert_eq!(stopped[2..], started[2..], "{context}: {text}");
            assert!(started.ends_with("90"), "{context}: {text}");
            assert!(text.ends_with("ok 3007 3007 3007\n"), "{context}: {text}");
            assert_regs_counts(&trace, CALLS, setting, &context);
        }
    }
}

#[test]
fn the_harness_catches_clobbering_trampolines() {
    // Sleds patched by hand into calls of stubs that clobber rdi (entry) and rdx (exit).
    let dir = workdir("xray-regs-negative");
    let (_, dy) = regs_harness(X86_64, &dir);
    let out = run(&mut command(X86_64, &dy, &["fake"], &[], &dir));
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("fake entry: register #5 clobbered\n"), "{err}");
    assert!(
        err.contains("fake exit: register #3 clobbered by the return"),
        "{err}"
    );
    // compiler-rt's form sets r10: the harness checks it (instrfn's trampolines keep it).
    let out = run(&mut command(X86_64, &dy, &["fake-r10"], &[], &dir));
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("fake r10: register #8 clobbered\n"), "{err}");
}

#[test]
fn clang_xray_cpp_exceptions_are_balanced() {
    // C++ throw through XRay frames with destructors (cleanup pads: _Unwind_Resume), caught,
    // and a rethrow: the thrown-through frames closed as unwound at the catch
    // (__cxa_begin_catch), the catching frames traced returning.
    require_tool("clang++");
    let dir = workdir("xray-cpp");
    let trace = dir.join("trace");
    let exe = dir.join("throw");
    run_ok(
        Command::new("clang++")
            .args(["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"])
            .arg(fixture("c/throw.cpp"))
            .arg("-o")
            .arg(&exe),
    );
    let plain = run_ok(Command::new(&exe).args(["4", "6"]));
    assert_eq!(stdout_of(&plain), "caught 8\n");
    for route in [Route::Record, Route::Preload] {
        let out = traced(route, &exe, &["4", "6"], &[], &trace);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{route:?}");
        let counts = assert_balanced(&instrfn_dump(&trace)[0], "c++");
        // thrower(6) is 7 frames, thrower(1) 2, per round
        assert_eq!(
            count_of(&counts, "unwound", "_Z7throwerm"),
            4 * 9,
            "{counts:?}"
        );
        assert_eq!(count_of(&counts, "exit", "_Z7catcherm"), 4, "{counts:?}");
        assert_eq!(count_of(&counts, "exit", "_Z5afterv"), 4, "{counts:?}");
        assert_eq!(count_of(&counts, "exit", "main"), 1, "{counts:?}");
    }
}

/// Runs the aarch64 build of `exe` under qemu-aarch64 with the aarch64 libinstrfn.so preloaded
/// in trace mode (qemu ignores writes to /proc/self/mem: the sleds are patched with mprotect).
fn qemu_traced(exe: &Path, args: &[&str], env: &[(&str, &str)], trace: &Path) -> Output {
    let _ = std::fs::remove_dir_all(trace);
    let lib = runtime_lib(AARCH64, Lib::Shared);
    let lib = lib.to_str().unwrap();
    let t = trace.to_str().unwrap();
    let mut all = vec![
        ("LD_PRELOAD", lib),
        ("INSTRFN_MODE", "trace"),
        ("INSTRFN_OUTPUT", t),
    ];
    all.extend_from_slice(env);
    run_within(
        &mut command(AARCH64, exe, args, &all, trace.parent().unwrap()),
        300,
    )
}

#[test]
fn aarch64_sleds_patched_under_qemu() {
    let exe = build_xray_rust("xray-app", AARCH64.triple, "xray-app", "always", "");
    let dir = workdir("xray-aarch64");
    let trace = dir.join("trace");
    let plain = run_ok(&mut command(AARCH64, &exe, &["4", "1000"], &[], &dir));
    // Exact counts at 4 threads.
    let out = qemu_traced(&exe, &["4", "1000"], &[], &trace);
    assert_eq!(stdout_of(&out), stdout_of(&plain));
    let (rows, doc) = report(&trace);
    assert_eq!(row(&rows, "xray_app::worker"), T);
    assert_eq!(row(&rows, "xray_app::work_a"), T * N);
    assert_eq!(row(&rows, "xray_app::work_b"), T * N);
    assert_eq!(doc["exits_without_entry"], 0);
    assert_balanced(&instrfn_dump(&trace)[0], "aarch64");
    // work_a and work_b (and a few others) record nothing inside them: their calls are call
    // words (the exit trampoline's MERGE_CALL), but where qemu stretched one past 2^12 ticks
    // (65 µs). (8089 here: 0 before the XRay exit made them.)
    let calls: u64 = raw_chunks(&trace).iter().map(|c| c.calls).sum();
    assert!(
        calls > T * N,
        "{calls} call words for {} calls of work_a and work_b",
        2 * T * N
    );
    // A caught panic: balanced, the thrown-through frames unwound.
    let out = qemu_traced(&exe, &["panic", "3", "4"], &[], &trace);
    assert_eq!(stdout_of(&out), "caught 3\n");
    let p = &instrfn_dump(&trace)[0];
    assert_balanced(p, "aarch64 panic");
    assert_eq!(raw_count(p, "entry", "4dive"), 15);
    assert_eq!(raw_count(p, "unwound", "4dive"), 15);
    assert_eq!(raw_count(p, "exit", "5after"), 3);
    // Filtered: the others' sleds keep their original `b #32; nop...`.
    let plain_bytes = code_bytes(&run_ok(&mut command(AARCH64, &exe, &["bytes"], &[], &dir)));
    assert!(
        plain_bytes["work_b"].starts_with("08000014"),
        "{plain_bytes:?}"
    );
    let out = qemu_traced(&exe, &["bytes"], &[("INSTRFN_FILTER", "work_a")], &trace);
    let code = code_bytes(&out);
    assert_eq!(code["work_b"], plain_bytes["work_b"]);
    assert_eq!(code["worker"], plain_bytes["worker"]);
    // nop (the head, flipped from `b #32` last), then mov x16, x30
    assert!(
        code["work_a"].starts_with("1f2003d5f0031eaa"),
        "nop; mov x16, x30: {code:?}"
    );
    let (rows, _) = report(&trace);
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["xray_app::work_a"]);
    // Recording stopped and started while 2 threads run through the sleds: each sled's head
    // put back and flipped again (the rest checked, not rewritten), 20 times; balanced.
    let out = qemu_traced(&exe, &["toggle", "2", "20", "10"], &[], &trace);
    assert_eq!(stdout_of(&out), "toggled 20 settled 20\n");
    assert_eq!(stderr_of(&out), "");
    let p = &instrfn_dump(&trace)[0];
    assert_balanced(p, "aarch64 toggle");
    assert_eq!(raw_count(p, "entry", "7settled"), 20);
    assert_eq!(raw_count(p, "exit", "7settled"), 20);
    assert_eq!(
        (
            raw_count(p, "entry", "7spinner"),
            raw_count(p, "exit", "7spinner")
        ),
        (2, 2)
    );
}

/// The register harness on aarch64 (tests/fixtures/xray/regs_aarch64.S), under qemu: every
/// register but x16/x17 and NZCV survives the entry, exit and tail trampolines — x0-x15 (x9-x15
/// too: a sled is not a call boundary), x18-x30, sp, v0-v31 whole, FPCR and FPSR, and with
/// SVE (qemu's CPU has it) z0-z31 and p0-p15 whole — on their fast paths (recording on, the
/// 3000 calls in a row after start-up) and their slow paths (start-up, each new thread's
/// first calls, chunk refills with 4 KiB chunks, the trace limit), exits off, recording
/// stopped (sleds put back) and started again, and paused with the sleds left patched. The
/// trace has every call of each kind, exactly.
#[test]
fn aarch64_registers_survive_patched_sleds_under_qemu() {
    let dir = workdir("xray-regs-aarch64");
    let trace = dir.join("trace");
    let (st, dy) = regs_harness(AARCH64, &dir);
    let out = run_ok(&mut command(AARCH64, &dy, &["check"], &[], &dir));
    assert_eq!(stdout_of(&out), "ok 3007 3007 3007\n");
    const CALLS: u64 = 3007;
    for (exe, preload) in [(&st, false), (&dy, true)] {
        for setting in REGS_SETTINGS {
            let context = format!("{} {}={}", exe.display(), setting.0, setting.1);
            let out = if preload {
                qemu_traced(exe, &["check"], &[setting], &trace)
            } else {
                let _ = std::fs::remove_dir_all(&trace);
                let env = [
                    ("INSTRFN_MODE", "trace"),
                    ("INSTRFN_OUTPUT", trace.to_str().unwrap()),
                    setting,
                ];
                run_within(&mut command(AARCH64, exe, &["check"], &env, &dir), 300)
            };
            let text = stdout_of(&out);
            // xf's entry sled, 32 bytes: stopped, its head is `b #32` again and the rest as
            // patched (mov x16, x30; movz w17, #1; movk w17, #0, lsl #16; bl <stub>; bti j;
            // nop; nop); started, the head is a nop again.
            // (INSTRFN_XRAY_STOP=pause: patched throughout.)
            let (stopped, started) = (
                labelled_line(&text, "stopped ", &context),
                labelled_line(&text, "started ", &context),
            );
            if setting.0 == "INSTRFN_XRAY_STOP" {
                assert_eq!(stopped, started, "{context}: {text}");
            } else {
                assert!(stopped.starts_with("08000014"), "{context}: {text}");
            }
            assert!(
                started.starts_with("1f2003d5f0031eaa310080521100a072"),
                "{context}: {text}"
            );
            assert_eq!(stopped[8..], started[8..], "{context}: {text}");
            assert!(
                started.ends_with("9f2403d51f2003d51f2003d5"),
                "{context}: {text}"
            );
            assert!(text.ends_with("ok 3007 3007 3007\n"), "{context}: {text}");
            assert_regs_counts(&trace, CALLS, setting, &context);
        }
    }
}

#[test]
fn aarch64_the_harness_catches_clobbering_trampolines() {
    // Sleds patched by hand (instrfn's form) into calls of fakes that clobber x5 (xf's entry),
    // the high half of v3 (xf's exit) and x9 (xt's tail sled: caller-saved, but a sled must
    // keep it too).
    let dir = workdir("xray-regs-aarch64-negative");
    let (_, dy) = regs_harness(AARCH64, &dir);
    let out = run(&mut command(AARCH64, &dy, &["fake"], &[], &dir));
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("fake entry: register #5 clobbered\n"), "{err}");
    assert!(
        err.contains("fake exit: register #39 clobbered by the return\n"),
        "{err}"
    );
    assert!(
        err.contains("fake tail: register #9 clobbered by the return\n"),
        "{err}"
    );
}

/// tracesig.c (tests/fixtures/c) built with clang's XRay sleds for `arch`: signal handlers
/// that run instrumented code between any two instructions of the XRay trampolines (under qemu
/// with QEMU_SINGLESTEP, where a signal is delivered after any instruction and the sender
/// signals again as soon as a handler ran; natively, wherever they land), with 4 KiB chunks,
/// so that a handler's 200 events often take the next chunk while the code it interrupted
/// holds a reservation in the one before, and push and pop shadow entries above one being
/// pushed or popped. The last round walks the stack with backtrace() in every handler (the
/// unwinder wrappers set the thread's unwound flag: the next events take the slow path).
/// Every run: exact counts, every exit, properly nested, nothing lost.
fn xray_signal_handlers_rounds(arch: Arch, name: &str) {
    require_tool("clang");
    let dir = workdir(name);
    let obj = dir.join("tracesig.o");
    run_ok(
        Command::new("clang")
            .arg(format!("--target={}", arch.triple.replace("-unknown", "")))
            .args([
                "-O2",
                "-c",
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
            ])
            .arg(fixture("c/tracesig.c"))
            .arg("-o")
            .arg(&obj),
    );
    let exe = cc(
        arch,
        &[obj.as_os_str(), OsStr::new("-lpthread"), OsStr::new("-ldl")],
        &dir.join("tracesig"),
    );
    let trace = dir.join("trace");
    let lib = runtime_lib(arch, Lib::Shared);
    for walk in [false, false, true] {
        let context = format!("{name}{}", if walk { " backtrace" } else { "" });
        let _ = std::fs::remove_dir_all(&trace);
        let env = [
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("INSTRFN_MODE", "trace"),
            ("INSTRFN_OUTPUT", trace.to_str().unwrap()),
            ("INSTRFN_BUFSIZE", "4096"),
        ];
        let args: &[&str] = if walk { &["3000", "walk"] } else { &["3000"] };
        let mut cmd = command(arch, &exe, args, &env, &dir);
        cmd.env("QEMU_SINGLESTEP", "1");
        let out = run_within(&mut cmd, 300);
        let stdout = stdout_of(&out);
        let words: Vec<&str> = stdout.split_whitespace().collect();
        let (handled, calls): (u64, u64) = match words[..] {
            ["handled", h, "calls", c] => (h.parse().unwrap(), c.parse().unwrap()),
            _ => panic!("{context}: {stdout}"),
        };
        assert!(handled > 0, "{context}: no signal was handled");
        assert!(
            !meta_text(&trace).lines().any(|l| l.starts_with("lost ")),
            "{context}: events lost"
        );
        let mut procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{context}");
        let p = procs.remove(0);
        assert_eq!(p.lost, 0, "{context}: events lost");
        for (tid, events) in &p.threads {
            assert_nested(events, &format!("{context} thread {tid}"));
        }
        let counts = assert_balanced(&p, &context);
        for (f, n) in [
            ("work", calls),
            ("on_signal", handled),
            ("handler_fn", handled),
            ("leaf", 2 * calls + 100 * handled),
            ("main", 1),
            ("sender", 1),
        ] {
            assert_eq!(count_of(&counts, "entry", f), n, "{context}: {f}");
            assert_eq!(count_of(&counts, "exit", f), n, "{context}: {f}");
        }
    }
}

#[test]
fn aarch64_signal_handlers_interrupt_xray_trampolines_under_qemu() {
    xray_signal_handlers_rounds(AARCH64, "xray-tracesig-aarch64");
}

#[test]
fn signal_handlers_interrupt_xray_trampolines() {
    xray_signal_handlers_rounds(X86_64, "xray-tracesig");
}

/// The dlopen fixtures (tests/fixtures/xray/dlopen_main.c and plugin.c), clang XRay sleds, no
/// compiler-rt linked anywhere.
struct Dlopen {
    /// `<dir>/libplug.so` (also copied to `<dir>/sub/libplug.so`).
    plugin: PathBuf,
    /// The program, plain.
    plain: PathBuf,
    /// With `-rpath <dir>/sub` as a DT_RPATH, and as a DT_RUNPATH.
    rpath: PathBuf,
    runpath: PathBuf,
    /// With libinstrfn.a linked in and the RUNPATH.
    linked: PathBuf,
}

fn dlopen_fixture(dir: &Path) -> Dlopen {
    require_tool("clang");
    let xray = ["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"];
    let compile = |src: &str, pic: &[&str], obj: &Path| {
        run_ok(
            Command::new("clang")
                .args(xray)
                .args(pic)
                .arg("-c")
                .arg(fixture(src))
                .arg("-o")
                .arg(obj),
        );
    };
    let plugin_obj = dir.join("plugin.o");
    compile("xray/plugin.c", &["-fPIC"], &plugin_obj);
    let plugin = dir.join("libplug.so");
    run_ok(
        Command::new("clang")
            .arg("-shared")
            .arg(&plugin_obj)
            .arg("-o")
            .arg(&plugin),
    );
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&plugin, sub.join("libplug.so")).unwrap();
    let main_obj = dir.join("dlopen_main.o");
    compile("xray/dlopen_main.c", &[], &main_obj);
    // Linked without -fxray-instrument: no compiler-rt.
    let link = |name: &str, extra: &[&OsStr]| {
        let exe = dir.join(name);
        run_ok(
            Command::new("clang")
                .arg(&main_obj)
                .args(extra)
                .args(["-lpthread", "-ldl"])
                .arg("-o")
                .arg(&exe),
        );
        exe
    };
    let rpath = |tags: &str| format!("-Wl,--{tags}-new-dtags,-rpath,{}", sub.display());
    let (old, new) = (rpath("disable"), rpath("enable"));
    let archive = runtime_lib(X86_64, Lib::Static);
    Dlopen {
        plain: link("dlopen_main", &[]),
        rpath: link("dlopen_main-rpath", &[OsStr::new(&old)]),
        runpath: link("dlopen_main-runpath", &[OsStr::new(&new)]),
        linked: link(
            "dlopen_main-linked",
            &[
                OsStr::new(&new),
                OsStr::new("-Wl,-u,instrfn_start"),
                archive.as_os_str(),
            ],
        ),
        plugin,
    }
}

/// The meta files of a trace, one after the other.
fn meta_text(trace: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(trace).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "meta") {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    text
}

/// Lines of the meta files that start with `kind` and mention `part`.
fn meta_lines(trace: &Path, kind: &str, part: &str) -> usize {
    meta_text(trace)
        .lines()
        .filter(|l| l.starts_with(kind) && l.contains(part))
        .count()
}

#[test]
fn clang_xray_dlopened_plugin_traced_from_its_first_call() {
    // A plugin with XRay sleds, dlopen'ed after 4 threads have started, never instrfn_flush:
    // the wrapper patches its sleds before dlopen returns, so every call of its functions is
    // traced, from the first; dlclose, then dlopen again (twice), with the same exact counts;
    // dlmopen(LM_ID_BASE) the same. Its constructor runs inside the loader's dlopen, before
    // the sleds are patched: that call is not in the trace.
    let dir = workdir("xray-dlopen");
    let dl = dlopen_fixture(&dir);
    let trace = dir.join("trace");
    let lib = dl.plugin.to_str().unwrap();
    const DN: u64 = 500;
    let n = DN.to_string();
    for (mode, rounds) in [("threads", 1u64), ("threads", 3), ("mbase", 1)] {
        let r = rounds.to_string();
        let args: Vec<&str> = if mode == "mbase" {
            vec![mode, "4", &n, lib]
        } else {
            vec![mode, "4", &n, &r, lib]
        };
        let plain = run_ok(Command::new(&dl.plain).args(&args));
        let calls = T * DN * rounds;
        assert_eq!(stdout_of(&plain), format!("sum {}\n", calls * 6));
        for route in [Route::Record, Route::Preload] {
            let context = format!("{route:?} {}", args.join(" "));
            let out = traced(route, &dl.plain, &args, &[], &trace);
            assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
            let (rows, doc) = report(&trace);
            assert_eq!(row(&rows, "plug_work"), calls, "{context}: {rows:?}");
            assert_eq!(row(&rows, "plug_leaf"), 3 * calls, "{context}");
            assert_eq!(row(&rows, "call_plugin"), calls, "{context}");
            assert_eq!(row(&rows, "main_tick"), calls, "{context}");
            assert_eq!(row(&rows, "worker"), T, "{context}");
            assert_eq!(row(&rows, "main"), 1, "{context}");
            assert_eq!(row(&rows, "plug_ctor_helper"), 0, "{context}");
            assert_eq!(doc["exits_without_entry"], 0, "{context}");
            let procs = instrfn_dump(&trace);
            assert_eq!(procs.len(), 1, "{context}");
            assert_eq!(procs[0].lost, 0, "{context}");
            let counts = assert_balanced(&procs[0], &context);
            for (f, k) in [("plug_work", 1), ("plug_leaf", 3)] {
                for kind in ["entry", "exit"] {
                    assert_eq!(
                        count_of(&counts, kind, f),
                        k * calls,
                        "{context}: {kind} {f}"
                    );
                }
            }
            // Each worker thread made its own calls, from its first one.
            let per_thread: Vec<u64> = procs[0]
                .threads
                .values()
                .filter(|evs| evs.iter().any(|e| e.name == "worker"))
                .map(|evs| {
                    evs.iter()
                        .filter(|e| e.kind == "entry" && e.name == "plug_work")
                        .count() as u64
                })
                .collect();
            assert_eq!(per_thread, vec![DN * rounds; 4], "{context}");
            // A `module` line for each load, an `unload` line for each dlclose.
            assert_eq!(
                meta_lines(&trace, "module ", "/libplug.so "),
                rounds as usize,
                "{context}:\n{}",
                meta_text(&trace)
            );
            assert_eq!(
                meta_lines(&trace, "unload ", ""),
                rounds as usize - 1,
                "{context}"
            );
        }
    }
}

#[test]
fn clang_xray_dlopen_keeps_dlerror_and_the_callers_library_path() {
    // What dlerror() says after failed and successful dlopens, RTLD_NOLOAD, dlopen(NULL), a bad
    // mode and dlmopen(LM_ID_NEWLM) is what it says without instrfn (preloaded, recorded, and
    // linked in), and the plugin loaded in the base namespace is traced at once.
    let dir = workdir("xray-dlopen-caller");
    let dl = dlopen_fixture(&dir);
    let trace = dir.join("trace");
    let lib = dl.plugin.to_str().unwrap();
    let plain = stdout_of(&run_ok(Command::new(&dl.plain).args(["dlerror", lib])));
    for line in [
        "missing path: NULL; /nonexistent-instrfn/libnope.so: cannot open shared object file",
        "read again: (null)\n",
        "missing name: NULL; libnope-instrfn.so: cannot open shared object file",
        "loaded: handle; (null)\n",
        "then missing: NULL; /nonexistent-instrfn/libother.so: cannot open shared object file",
        "noload loaded: same handle; (null)\n",
        "self: handle; (null)\n",
        "bad mode: NULL; ",
        "new namespace: handle; (null)\n",
        "sum 60\n",
    ] {
        assert!(plain.contains(line), "{line:?} not in:\n{plain}");
    }
    let linked_run = |exe: &Path, args: &[&str], env: &[(&str, &str)]| {
        let _ = std::fs::remove_dir_all(&trace);
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", &trace)
            .envs(env.iter().copied());
        run_within(&mut cmd, 120)
    };
    for route in [Some(Route::Preload), Some(Route::Record), None] {
        let out = match route {
            Some(r) => traced(r, &dl.plain, &["dlerror", lib], &[], &trace),
            None => linked_run(&dl.linked, &["dlerror", lib], &[]),
        };
        assert_eq!(stdout_of(&out), plain, "{route:?}");
        let (rows, _) = report(&trace);
        // The call in the other namespace (plug_work(4) there) is not: instrfn sees only the
        // base namespace.
        assert_eq!(row(&rows, "plug_work"), 10, "{route:?}: {rows:?}");
        assert_eq!(row(&rows, "plug_leaf"), 30, "{route:?}");
    }

    // The loader looks for a name without a slash along the caller's search path and
    // substitutes $ORIGIN with the caller's directory: the wrapper calls dlopen on the
    // program's behalf only when that changes nothing (here: the program's RPATH, which the
    // loader also searches for the preloaded runtime, and LD_LIBRARY_PATH; or the runtime
    // linked into the program, which then is the caller). Otherwise (the program's RUNPATH,
    // $ORIGIN) the call goes to libc untouched: the plugin is found as without instrfn, and
    // noticed at exit (its `module` line), too late for its calls to be traced.
    const DN: u64 = 200;
    let n = DN.to_string();
    let sub = dir.join("sub");
    let path = sub.to_str().unwrap();
    let origin = "$ORIGIN/sub/libplug.so";
    for (exe, env, name, now) in [
        (&dl.rpath, vec![], "libplug.so", true),
        (
            &dl.plain,
            vec![("LD_LIBRARY_PATH", path)],
            "libplug.so",
            true,
        ),
        (&dl.runpath, vec![], "libplug.so", false),
        (&dl.plain, vec![], origin, false),
    ] {
        let args = ["name", n.as_str(), name];
        let context = format!("{} {env:?} {name}", exe.display());
        let plain = run_ok(Command::new(exe).args(args).envs(env.iter().copied()));
        assert_eq!(stdout_of(&plain), format!("ok {}\n", DN * 6), "{context}");
        for route in [Route::Preload, Route::Record] {
            let out = traced(route, exe, &args, &env, &trace);
            assert_eq!(stdout_of(&out), stdout_of(&plain), "{context} {route:?}");
            let (rows, _) = report(&trace);
            let calls = if now { DN } else { 0 };
            assert_eq!(row(&rows, "plug_work"), calls, "{context} {route:?}");
            assert_eq!(row(&rows, "plug_leaf"), 3 * calls, "{context} {route:?}");
            assert_eq!(row(&rows, "call_plugin"), DN, "{context} {route:?}");
            assert_eq!(
                meta_lines(&trace, "module ", "/libplug.so "),
                1,
                "{context}"
            );
        }
    }
    let out = linked_run(&dl.linked, &["name", &n, "libplug.so"], &[]);
    assert_eq!(stdout_of(&out), format!("ok {}\n", DN * 6));
    let (rows, _) = report(&trace);
    assert_eq!(row(&rows, "plug_work"), DN, "linked: {rows:?}");
}

#[test]
fn clang_xray_dlopen_from_many_threads_at_once() {
    // 8 threads dlopen at the same moment (two copies of the plugin, four threads each: one
    // thread's dlopen loads a copy while the others' find it loading or loaded) and call it at
    // once: each dlopen returns with the copy's sleds patched, whichever thread patched them.
    let dir = workdir("xray-dlopen-threads");
    let dl = dlopen_fixture(&dir);
    let trace = dir.join("trace");
    let (a, b) = (dir.join("libplug.so"), dir.join("sub/libplug.so"));
    const DN: u64 = 300;
    const DT: u64 = 8;
    let (t, n) = (DT.to_string(), DN.to_string());
    let args = ["each", &t, &n, a.to_str().unwrap(), b.to_str().unwrap()];
    let plain = run_ok(Command::new(&dl.plain).args(args));
    assert_eq!(stdout_of(&plain), format!("sum {}\n", DT * DN * 6));
    for (round, route) in [Route::Preload, Route::Record]
        .iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let context = format!("{route:?} run {round}");
        let out = traced(*route, &dl.plain, &args, &[], &trace);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
        let (_, doc) = report(&trace);
        // Calls per name, both copies together.
        let calls = |name: &str| -> u64 {
            doc["functions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["name"] == name)
                .map(|f| f["calls"].as_u64().unwrap())
                .sum()
        };
        assert_eq!(calls("plug_work"), DT * DN, "{context}");
        assert_eq!(calls("plug_leaf"), 3 * DT * DN, "{context}");
        assert_eq!(calls("main_tick"), DT * DN, "{context}");
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        assert_eq!(count_of(&counts, "exit", "plug_work"), DT * DN, "{context}");
        assert_eq!(
            meta_lines(&trace, "module ", "/libplug.so "),
            2,
            "{context}"
        );
    }
}

/// The rest of the line of `text` that starts with `label` (the register harness's `stopped`
/// and `started` lines: a sled's bytes); panics, naming `context`, if there is none.
fn labelled_line(text: &str, label: &str, context: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("{context}: no {label:?} line: {text}"))
        .to_string()
}
