//! XRay sleds patched by the runtime itself (src/xray.rs and the XRay trampolines of the
//! runtime's assembly), x86_64 and aarch64 (under qemu-user, which ignores writes to
//! /proc/self/mem: the sleds are patched with mprotect there): Rust programs built with
//! `-Zinstrument-xray` and C programs built with clang `-fxray-instrument`, traced with
//! `instrfn record` or LD_PRELOAD + INSTRFN_MODE=trace, and no compiler-rt runtime involved.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

feature_tests! {
    xray_native:
    rust_counts_exact_at_four_threads(x86_64, aarch64),
    rust_caught_panic_is_balanced(x86_64, aarch64),
    filters_choose_what_is_patched(x86_64, aarch64),
    rust_threads_while_recording_stops_and_starts(x86_64, aarch64),
    recording_off_with_sleds_patched(x86_64),
    rustc_variants(x86_64),
    patching_while_threads_run_through_the_sleds(x86_64),
    clang_calltree(x86_64),
    sleds_keep_every_register(x86_64, aarch64),
    harness_catches_clobbering_trampolines(x86_64, aarch64),
    clang_cpp_exceptions_are_balanced(x86_64),
    handlers_interrupt_the_trampolines(x86_64, aarch64),
}

/// The Rust fixture built for `arch` with `-Zinstrument-xray=<opts>`.
fn app(arch: Arch, opts: &str) -> PathBuf {
    build_xray_rust("xray-app", arch.triple, "xray-app", opts, "")
}

/// Events of each kind whose raw (mangled) function name contains `part`, all threads.
fn raw_count(p: &DumpProcess, kind: &str, part: &str) -> usize {
    p.threads
        .values()
        .flatten()
        .filter(|e| e.kind == kind && e.name.contains(part))
        .count()
}

const T: u64 = 4;
const N: u64 = 1000;

/// xray-app at 4 threads of 1000 rounds, every sled patched: the program's output unchanged;
/// exact calls per function in the report, nothing without its entry; one process, nothing
/// lost, balanced, each worker thread with its own calls (1 worker, N work_a, N work_b).
/// x86_64 under `instrfn record` and preloaded, also with the mprotect route, 4 KiB chunks,
/// and a malformed INSTRFN_XRAY_WRITE (one line, the default route). On aarch64 work_a and
/// work_b (and a few others) record nothing inside them: their calls are call words (the exit
/// trampoline's MERGE_CALL), but where qemu stretched one past 2^12 ticks (65 µs).
fn rust_counts_exact_at_four_threads(arch: Arch) {
    let exe = app(arch, "always");
    let dir = workdir(&format!("{}-xray-counts", arch.name));
    let plain = run_exe(arch, &exe, &["4", "1000"], &[], &dir);
    let expected = stdout_of(&plain);
    assert!(expected.starts_with("sum "), "{expected}");
    let runs: Vec<(Route, Vec<(&str, &str)>)> = if arch == X86_64 {
        vec![
            (Route::Record, vec![]),
            (Route::Preload, vec![]),
            (Route::Record, vec![("INSTRFN_XRAY_WRITE", "mprotect")]),
            (Route::Record, vec![("INSTRFN_BUFSIZE", "4096")]),
            (Route::Preload, vec![("INSTRFN_XRAY_WRITE", "pokes")]),
        ]
    } else {
        vec![(Route::Preload, vec![])]
    };
    for (route, env) in runs {
        let context = format!("{} {route:?} {env:?}", arch.name);
        let trace = dir.join("trace");
        let out = traced(arch, route, &exe, &["4", "1000"], &env, &trace);
        assert_eq!(stdout_of(&out), expected, "{context}: output changed");
        if env.contains(&("INSTRFN_XRAY_WRITE", "pokes")) {
            assert_eq!(
                stderr_of(&out).trim(),
                "instrfn: ignoring INSTRFN_XRAY_WRITE=\"pokes\": expected mprotect or auto; using auto",
                "{context}"
            );
        }
        let (rows, doc) = report_calls(&trace);
        assert_eq!(calls_in(&rows, "xray_app::worker"), T, "{context}");
        assert_eq!(calls_in(&rows, "xray_app::work_a"), T * N, "{context}");
        assert_eq!(calls_in(&rows, "xray_app::work_b"), T * N, "{context}");
        assert_eq!(calls_in(&rows, "xray_app::main"), 1, "{context}");
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
        if arch == AARCH64 {
            let calls: u64 = raw_chunks(&trace).iter().map(|c| c.calls).sum();
            assert!(
                calls > T * N,
                "{context}: {calls} call words for {} calls of work_a and work_b",
                2 * T * N
            );
        }
    }
}

/// A panic caught by catch_unwind, thrown through frames traced through their sleds: the
/// trace is balanced, dive(4) .. dive(0) (5 frames per round, 3 rounds) all closed by
/// unwinding, after() traced returning.
fn rust_caught_panic_is_balanced(arch: Arch) {
    let exe = app(arch, "always");
    let dir = workdir(&format!("{}-xray-panic", arch.name));
    let trace = dir.join("trace");
    for &route in routes(arch) {
        let context = format!("{} {route:?}", arch.name);
        let out = traced(arch, route, &exe, &["panic", "3", "4"], &[], &trace);
        assert_eq!(stdout_of(&out), "caught 3\n", "{context}");
        let procs = instrfn_dump(&trace);
        let p = &procs[0];
        assert_balanced(p, &context);
        assert_eq!(raw_count(p, "entry", "4dive"), 15, "{context}");
        assert_eq!(raw_count(p, "unwound", "4dive"), 15, "{context}");
        assert_eq!(raw_count(p, "exit", "4dive"), 0, "{context}");
        assert_eq!(raw_count(p, "exit", "5after"), 3, "{context}");
        let (rows, _) = report_calls(&trace);
        assert_eq!(calls_in(&rows, "xray_app::after"), 3, "{context}");
        assert_eq!(calls_in(&rows, "xray_app::dive"), 15, "{context}");
    }
}

/// `xray-app bytes`: the first code bytes of work_a, work_b and worker.
fn code_bytes(out: &Output) -> BTreeMap<String, String> {
    stdout_of(out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// INSTRFN_FILTER and INSTRFN_EXCLUDE choose the sleds that are patched; the others keep
/// their original bytes (x86_64 `eb 09` + nops, aarch64 `b #32` + nops).
///
/// - x86_64: glob and substring patterns, the exclusion winning over the filter, under
///   `instrfn record` and preloaded: the chosen functions patched (the jump's `eb` flipped to
///   `a9`: test $((id << 8) | 9), %eax; call <stub>), the report has exactly them; threads with
///   one function chosen: its exact count, nothing else; every sled left alone: the program
///   runs as it does plainly.
/// - aarch64: work_a alone patched (the head, flipped from `b #32` last, is a nop, then mov
///   x16, x30), the others' sleds unchanged, the report has work_a alone.
fn filters_choose_what_is_patched(arch: Arch) {
    let exe = app(arch, "always");
    let dir = workdir(&format!("{}-xray-filter", arch.name));
    let trace = dir.join("trace");
    let plain = code_bytes(&run_exe(arch, &exe, &["bytes"], &[], &dir));
    if arch == AARCH64 {
        assert!(plain["work_b"].starts_with("08000014"), "{plain:?}");
        let filter = [("INSTRFN_FILTER", "work_a")];
        let out = traced(arch, Route::Preload, &exe, &["bytes"], &filter, &trace);
        let code = code_bytes(&out);
        assert_eq!(code["work_b"], plain["work_b"]);
        assert_eq!(code["worker"], plain["worker"]);
        assert!(
            code["work_a"].starts_with("1f2003d5f0031eaa"),
            "nop; mov x16, x30: {code:?}"
        );
        let (rows, _) = report_calls(&trace);
        assert_eq!(rows.keys().collect::<Vec<_>>(), ["xray_app::work_a"]);
        return;
    }
    for f in ["work_a", "work_b", "worker"] {
        assert!(plain[f].starts_with("eb09"), "{f}: {}", plain[f]);
    }
    let env = [
        ("INSTRFN_FILTER", "xray_app::work*, nothing_matches"),
        ("INSTRFN_EXCLUDE", "work_b"),
    ];
    for &route in routes(arch) {
        let out = traced(arch, route, &exe, &["bytes"], &env, &trace);
        let code = code_bytes(&out);
        assert_eq!(
            code["work_b"], plain["work_b"],
            "{route:?}: work_b's sled was touched"
        );
        for f in ["work_a", "worker"] {
            assert!(
                code[f].starts_with("a909"),
                "{route:?}: {f} unpatched: {}",
                code[f]
            );
        }
        let (rows, _) = report_calls(&trace);
        let names: Vec<&String> = rows.keys().collect();
        assert_eq!(names, ["xray_app::work_a", "xray_app::worker"], "{route:?}");
        assert_eq!(
            (
                calls_in(&rows, "xray_app::work_a"),
                calls_in(&rows, "xray_app::worker")
            ),
            (1, 1)
        );
    }
    let filter = [("INSTRFN_FILTER", "work_a")];
    let out = traced(arch, Route::Record, &exe, &["4", "1000"], &filter, &trace);
    assert!(stdout_of(&out).starts_with("sum "));
    let (rows, _) = report_calls(&trace);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(calls_in(&rows, "xray_app::work_a"), T * N);
    let none = [("INSTRFN_FILTER", "no_such_function")];
    let out = traced(arch, Route::Record, &exe, &["bytes"], &none, &trace);
    assert_eq!(code_bytes(&out), plain);
}

/// The Rust fixture's toggle mode: threads in work_a/work_b (x86_64: a short spin between
/// rounds, fewer events) while the main thread stops and starts recording again and again
/// (each sled's head put back and flipped again, the rest checked, not rewritten; with
/// INSTRFN_XRAY_STOP=pause only recording flips), then calls of settled from each thread,
/// exact; every spinner entered before the first stop returns after the last start; balanced,
/// nothing said. x86_64: 3 threads, 300 toggles, 50 settled calls each; aarch64 under qemu: 2
/// threads, 20 toggles, 10 each.
fn rust_threads_while_recording_stops_and_starts(arch: Arch) {
    let exe = app(arch, "always");
    let dir = workdir(&format!("{}-xray-toggle-rust", arch.name));
    let trace = dir.join("trace");
    let (threads, toggles, settle): (usize, usize, usize) = if arch == X86_64 {
        (3, 300, 50)
    } else {
        (2, 20, 10)
    };
    let (t, k, s) = (threads.to_string(), toggles.to_string(), settle.to_string());
    let mut args = vec!["toggle", t.as_str(), k.as_str(), s.as_str()];
    let envs: &[&[(&str, &str)]] = if arch == X86_64 {
        args.push("20000");
        &[&[], &[("INSTRFN_XRAY_STOP", "pause")]]
    } else {
        &[&[]]
    };
    for env in envs {
        let context = format!("{} {env:?}", arch.name);
        let out = traced(arch, Route::Preload, &exe, &args, env, &trace);
        let settled = threads * settle;
        assert_eq!(
            stdout_of(&out),
            format!("toggled {toggles} settled {settled}\n"),
            "{context}"
        );
        assert_eq!(stderr_of(&out), "", "{context}");
        let p = &instrfn_dump(&trace)[0];
        assert_balanced(p, &context);
        assert_eq!(raw_count(p, "entry", "7settled"), settled, "{context}");
        assert_eq!(raw_count(p, "exit", "7settled"), settled, "{context}");
        assert_eq!(raw_count(p, "entry", "7spinner"), threads, "{context}");
        assert_eq!(raw_count(p, "exit", "7spinner"), threads, "{context}");
    }
}

/// INSTRFN_START=off: by default nothing is patched until recording starts; with
/// INSTRFN_XRAY_STOP=pause every sled is patched at load and the trampolines return at once
/// (what the trampolines alone cost): no event at all.
fn recording_off_with_sleds_patched(arch: Arch) {
    let exe = app(arch, "always");
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
        let out = traced(
            arch,
            route,
            &exe,
            &["bytes"],
            &[("INSTRFN_START", "off")],
            &trace,
        );
        assert_eq!(code_bytes(&out), plain, "{route:?}");
        let out = traced(
            arch,
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
            arch,
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
        arch,
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

/// rustc's `-Zinstrument-xray` options: `always`, `instruction-threshold=N` (a loop keeps its
/// sleds unless `ignore-loops`), `skip-entry` (exits only: exits without entry in the report)
/// and `skip-exit` (entries only: entries without exit).
fn rustc_variants(arch: Arch) {
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
        let exe = app(arch, opts);
        traced(arch, Route::Record, &exe, &args, &[], &trace);
        let (rows, doc) = report_calls(&trace);
        assert_eq!(
            (
                calls_in(&rows, "xray_app::tiny"),
                calls_in(&rows, "xray_app::looping")
            ),
            (tiny, looping),
            "{opts}: {rows:?}"
        );
        assert_eq!(calls_in(&rows, "xray_app::main"), 1, "{opts}");
        assert_eq!(doc["exits_without_entry"], 0, "{opts}");
        assert_balanced(&instrfn_dump(&trace)[0], opts);
    }
    // skip-entry: exits only, recorded as exits whose entry is not in the trace (the report
    // counts them in its header, `exits_without_entry`; dump lists them).
    let exe = app(arch, "skip-entry,always");
    traced(arch, Route::Record, &exe, &["4", "1000"], &[], &trace);
    let p = &instrfn_dump(&trace)[0];
    assert_eq!(raw_count(p, "exit", "6work_a"), (T * N) as usize);
    assert_eq!(raw_count(p, "exit", "6worker"), T as usize);
    assert_eq!(raw_count(p, "entry", "xray_app"), 0);
    let (rows, doc) = report_calls(&trace);
    assert_eq!(calls_in(&rows, "xray_app::work_a"), 0);
    assert!(doc["exits_without_entry"].as_u64().unwrap() >= 2 * T * N + T);
    // skip-exit: entries only, recorded as entries without exit.
    let exe = app(arch, "skip-exit,always");
    traced(arch, Route::Record, &exe, &["4", "1000"], &[], &trace);
    let p = &instrfn_dump(&trace)[0];
    assert_eq!(raw_count(p, "entry-no-exit", "6work_a"), (T * N) as usize);
    assert_eq!(raw_count(p, "entry-no-exit", "6worker"), T as usize);
    assert_eq!(raw_count(p, "exit", "xray_app"), 0);
    assert_eq!(raw_count(p, "unwound", "xray_app"), 0);
    let (_, doc) = report_calls(&trace);
    let work_a = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "xray_app::work_a")
        .unwrap();
    assert_eq!(work_a["entries_without_exit"], T * N);
}

/// 3 threads run through entry, exit and tail sleds in a tight loop while the main thread
/// stops and starts recording 300 times (tests/fixtures/c/xray_toggle.c): by default every
/// sled is put back and patched again each time, through /proc/self/mem or mprotect; with
/// INSTRFN_XRAY_STOP=pause the sleds stay patched and only recording flips. No crash, and
/// every thread's trace balanced: a call whose entry was recorded ends with its exit, or,
/// when its exit sled was put back before it returned (unpatch), closed as unwound by the
/// thread's next event that finds its frame gone.
fn patching_while_threads_run_through_the_sleds(arch: Arch) {
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
        let out = traced(arch, Route::Preload, &exe, &args, &env, &trace);
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

/// calltree.c with clang's XRay sleds, linked plainly and with compiler-rt's XRay runtime
/// (which patches nothing unless XRAY_OPTIONS asks it to), under `instrfn record` and
/// preloaded: the golden call tree.
fn clang_calltree(arch: Arch) {
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
            traced(arch, route, exe, &["3", "50"], &[], &trace);
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

/// The register harness (tests/fixtures/xray: regs.c and regs_<arch>.S) with every sled
/// patched, linked with libinstrfn.a and preloaded (x86_64 also under `instrfn record`), for
/// each of [`REGS_SETTINGS`]: every register survives the entry, exit and tail trampolines on
/// their fast paths (recording on, the 3000 calls in a row after start-up) and their slow
/// paths (start-up, each new thread's first calls, chunk refills, the trace limit), exits
/// off, recording stopped (sleds put back) and started again, and paused with the sleds left
/// patched; the trace has every call of each kind, exactly ([`assert_regs_counts`]).
///
/// The harness prints xf's entry sled stopped and started. Stopped, its head is the original
/// one again and the rest as patched; started, the head is patched again (with
/// INSTRFN_XRAY_STOP=pause patched throughout):
/// - x86_64 (every register but r10/r11 the sled's call may use): `eb 09` stopped, `a9 09`
///   started (test $((1 << 8) | 9), %eax; call <stub>; nop).
/// - aarch64 (every register but x16/x17 and NZCV: x0-x15, x9-x15 too as a sled is not a call
///   boundary, x18-x30, sp, v0-v31 whole, FPCR and FPSR, and with SVE z0-z31 and p0-p15
///   whole), 32 bytes: `b #32` stopped, a nop started, then mov x16, x30; movz w17, #1; movk
///   w17, #0, lsl #16; bl <stub>; bti j; nop; nop.
fn sleds_keep_every_register(arch: Arch) {
    // (stopped head, started head, head length in hex digits, started tail)
    let (stopped_head, started_head, head, started_tail) = if arch == X86_64 {
        ("eb09010000e8", "a909010000e8", 2, "90")
    } else {
        (
            "08000014",
            "1f2003d5f0031eaa310080521100a072",
            8,
            "9f2403d51f2003d51f2003d5",
        )
    };
    let dir = workdir(&format!("{}-xray-regs", arch.name));
    let trace = dir.join("trace");
    let (st, dy) = regs_harness(arch, &dir);
    // Plainly: the sleds are nops.
    let out = run_exe(arch, &dy, &["check"], &[], &dir);
    assert_eq!(stdout_of(&out), "ok 3007 3007 3007\n");
    const CALLS: u64 = 3007;
    let mut runs = vec![(&st, None)];
    runs.extend(routes(arch).iter().map(|&r| (&dy, Some(r))));
    for (exe, route) in runs {
        for setting in REGS_SETTINGS {
            let context = format!("{} {route:?} {}={}", exe.display(), setting.0, setting.1);
            let out = match route {
                Some(r) => traced(arch, r, exe, &["check"], &[setting], &trace),
                None => {
                    let _ = std::fs::remove_dir_all(&trace);
                    let env = [
                        ("INSTRFN_MODE", "trace"),
                        ("INSTRFN_OUTPUT", trace.to_str().unwrap()),
                        setting,
                    ];
                    run_within(&mut command(arch, exe, &["check"], &env, &dir), 300)
                }
            };
            let text = stdout_of(&out);
            let (stopped, started) = (
                labelled_line(&text, "stopped ", &context),
                labelled_line(&text, "started ", &context),
            );
            if setting.0 == "INSTRFN_XRAY_STOP" {
                assert_eq!(stopped, started, "{context}: {text}");
            } else {
                assert!(stopped.starts_with(stopped_head), "{context}: {text}");
            }
            assert!(started.starts_with(started_head), "{context}: {text}");
            assert_eq!(stopped[head..], started[head..], "{context}: {text}");
            assert!(started.ends_with(started_tail), "{context}: {text}");
            assert!(text.ends_with("ok 3007 3007 3007\n"), "{context}: {text}");
            assert_regs_counts(&trace, CALLS, setting, &context);
        }
    }
}

/// Sleds patched by hand (instrfn's form) into calls of fakes that clobber a register: the
/// harness names it. x86_64: rdi (an entry) and rdx (an exit), and compiler-rt's form, which
/// sets r10 (instrfn's trampolines keep it). aarch64: x5 (xf's entry), the high half of v3
/// (xf's exit) and x9 (xt's tail sled: caller-saved, but a sled must keep it too).
fn harness_catches_clobbering_trampolines(arch: Arch) {
    let dir = workdir(&format!("{}-xray-regs-negative", arch.name));
    let (_, dy) = regs_harness(arch, &dir);
    let out = run(&mut command(arch, &dy, &["fake"], &[], &dir));
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("fake entry: register #5 clobbered\n"), "{err}");
    if arch == AARCH64 {
        assert!(
            err.contains("fake exit: register #39 clobbered by the return\n"),
            "{err}"
        );
        assert!(
            err.contains("fake tail: register #9 clobbered by the return\n"),
            "{err}"
        );
        return;
    }
    assert!(
        err.contains("fake exit: register #3 clobbered by the return"),
        "{err}"
    );
    let out = run(&mut command(arch, &dy, &["fake-r10"], &[], &dir));
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("fake r10: register #8 clobbered\n"), "{err}");
}

/// C++ throw through XRay frames with destructors (cleanup pads: _Unwind_Resume), caught,
/// and a rethrow: the thrown-through frames closed as unwound at the catch
/// (__cxa_begin_catch), the catching frames traced returning.
fn clang_cpp_exceptions_are_balanced(arch: Arch) {
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
        let out = traced(arch, route, &exe, &["4", "6"], &[], &trace);
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

/// tracesig.c (tests/fixtures/c) built with clang's XRay sleds for `arch`: signal handlers
/// that run instrumented code between any two instructions of the XRay trampolines (under qemu
/// with QEMU_SINGLESTEP, where a signal is delivered after any instruction and the sender
/// signals again as soon as a handler ran; natively, wherever they land), with 4 KiB chunks,
/// so that a handler's 200 events often take the next chunk while the code it interrupted
/// holds a reservation in the one before, and push and pop shadow entries above one being
/// pushed or popped. The last round walks the stack with backtrace() in every handler (the
/// unwinder wrappers set the thread's unwound flag: the next events take the slow path).
/// Every run: exact counts, every exit, properly nested, nothing lost.
fn handlers_interrupt_the_trampolines(arch: Arch) {
    let name = &format!("{}-xray-tracesig", arch.name);
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

/// The rest of the line of `text` that starts with `label` (the register harness's `stopped`
/// and `started` lines: a sled's bytes); panics, naming `context`, if there is none.
fn labelled_line(text: &str, label: &str, context: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("{context}: no {label:?} line: {text}"))
        .to_string()
}
