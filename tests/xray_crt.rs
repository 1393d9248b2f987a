//! The compiler-rt XRay route: xray-sys links compiler-rt's XRay runtime, which patches the
//! sleds; instrfn-xray's handler (assembly) turns every entry, exit and tail exit into events
//! of instrfn's trace rings, read back with `instrfn dump` / `instrfn report`.
//!
//! - a Rust fixture (tests/fixtures/xray-crt) built entirely with `-Zinstrument-xray=always`,
//!   instrfn and the handler's crate included: exact counts at 4 threads, demangled names,
//!   output unchanged, the runtime's own (instrumented, patched) code recording nothing;
//! - a C fixture (tests/fixtures/c/xray_crt.c) built with clang `-fxray-instrument`, compiler-rt
//!   linked by clang, the handler's assembly and libinstrfn.a linked in: exact counts;
//! - xray-sys's wrappers on a binary of this rustc (LLVM 22's PC-relative function index, which
//!   compiler-rt 14's own `__xray_function_address` crashes on): the addresses llvm-xray reads
//!   from the same binary, per-function patching;
//! - xray-sys's build script without compiler-rt: one line naming the Debian package.
//!
//! Needs clang with compiler-rt's XRay runtime (libclang-rt-14-dev), llvm-xray and the nightly
//! toolchain (scripts/test.sh installs them).

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

feature_tests! {
    xray_crt:
    rust_fixture_traced_through_compiler_rt_exact_counts(x86_64),
    rust_fixture_installed_before_main_is_balanced(x86_64),
    caught_panic_through_compiler_rt_frames_is_balanced(x86_64),
    runtime_code_has_sleds_and_the_handler_path_none(x86_64),
    wrappers_cope_with_llvm22_function_index(x86_64),
    uninstall_stops_and_install_resumes(x86_64),
    c_fixture_traced_through_compiler_rt_exact_counts(x86_64),
    cpp_exceptions_through_compiler_rt_frames_are_balanced(x86_64),
    build_script_without_compiler_rt_says_which_package(x86_64),
}

const THREADS: u64 = 4;
const ROUNDS: u64 = 5000;

/// The Rust fixture, built with every crate instrumented (`-Zinstrument-xray=always`).
fn xray_crt() -> PathBuf {
    build_xray_rust("xray-crt", X86_64.triple, "xray-crt", "always", "")
}

/// Runs `instrfn dump` on `dir` and checks its one process: per thread, every exit closes the
/// newest open entry of the same function, except exits of frames that were already running
/// when the handler was installed (no entry was recorded for them): those are allowed only
/// with nothing open, and only for the functions in `orphans`. Returns (events per (kind,
/// raw name), exits without entry per raw name).
fn dump_counts_allowing(
    dir: &Path,
    orphans: &[&str],
    context: &str,
) -> (BTreeMap<(String, String), u64>, BTreeMap<String, u64>) {
    let procs = instrfn_dump(dir);
    assert_eq!(procs.len(), 1, "{context}: one process");
    assert_eq!(procs[0].lost, 0, "{context}: {}", procs[0].header);
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut orphan_exits: BTreeMap<String, u64> = BTreeMap::new();
    for (tid, events) in &procs[0].threads {
        let mut open: Vec<&str> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            *counts.entry((e.kind.clone(), e.name.clone())).or_default() += 1;
            match e.kind.as_str() {
                "entry" => open.push(&e.name),
                "exit" => match open.pop() {
                    Some(f) if f == e.name => {}
                    None if orphans.iter().any(|o| e.name.contains(o)) => {
                        *orphan_exits.entry(e.name.clone()).or_default() += 1;
                    }
                    other => panic!(
                        "{context}: thread {tid} event {i} (exit {}) closes {other:?}",
                        e.name
                    ),
                },
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
    (counts, orphan_exits)
}

/// The entries and exits of the one function whose raw (mangled, v0) name ends with `part`
/// (`8xray_crt6work_a` for `xray_crt::work_a`).
fn entries_exits(
    counts: &BTreeMap<(String, String), u64>,
    part: &str,
    context: &str,
) -> (u64, u64) {
    let names: Vec<&String> = counts
        .keys()
        .filter(|(_, n)| n.ends_with(part))
        .map(|(_, n)| n)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        names.len(),
        1,
        "{context}: functions named like {part}: {names:?}"
    );
    (
        count_of(counts, "entry", names[0]),
        count_of(counts, "exit", names[0]),
    )
}

/// `instrfn report DIR --format json`: (demangled name -> calls, exits without entry).
fn report(dir: &Path) -> (BTreeMap<String, u64>, u64) {
    let out = run_ok(
        Command::new(instrfn_cli())
            .arg("report")
            .arg(dir)
            .args(["--format", "json"]),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let calls = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    (calls, v["exits_without_entry"].as_u64().unwrap())
}

/// The frames running when `install()` is called at the start of the fixture's main: main
/// itself and std's start-up code that is instantiated in the fixture's crate (so it has
/// sleds). Their exits would come without entries; the handler records none (no shadow entry
/// of their frames), and the tests that allow them find none.
const STARTUP_FRAMES: [&str; 3] = [
    "8xray_crt4main",
    "10lang_start",
    "__rust_begin_short_backtrace",
];

/// The Rust fixture, its handler installed at the start of main, linked runtime in trace mode
/// by the environment and under `instrfn record`: the program's output unchanged, exact
/// entries and exits per function (relay's exits are tail-exit sleds), nothing of the frames
/// running before install(), nothing of the runtime's own (patched) code, and the report's
/// counts exact.
fn rust_fixture_traced_through_compiler_rt_exact_counts(_: Arch) {
    let exe = xray_crt();
    let dir = workdir("xray-crt-rust");
    let (t, n) = (THREADS.to_string(), ROUNDS.to_string());
    let plain = run_ok(Command::new(&exe).args(["plain", &t, &n]).current_dir(&dir));
    let calls = THREADS * ROUNDS;
    // Linked runtime, trace mode by the environment; then the same under `instrfn record`.
    for how in ["env", "record"] {
        let trace = dir.join(format!("trace-{how}"));
        let out = if how == "env" {
            run_ok(
                Command::new(&exe)
                    .args([&t, &n])
                    .env("INSTRFN_MODE", "trace")
                    .env("INSTRFN_OUTPUT", &trace)
                    .current_dir(&dir),
            )
        } else {
            run_ok(
                Command::new(instrfn_cli())
                    .arg("record")
                    .arg("-o")
                    .arg(&trace)
                    .arg("--")
                    .arg(&exe)
                    .args([&t, &n])
                    .current_dir(&dir),
            )
        };
        let context = format!("xray-crt under {how}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{context}: the program's output"
        );
        let (counts, orphans) = dump_counts_allowing(&trace, &STARTUP_FRAMES, &context);
        for (f, expected) in [
            ("8xray_crt6worker", THREADS),
            ("8xray_crt6work_a", calls),
            // relay leaves by a tail call: its exits are tail-exit sleds.
            ("8xray_crt5relay", calls),
            ("8xray_crt6work_c", calls),
        ] {
            assert_eq!(
                entries_exits(&counts, f, &context),
                (expected, expected),
                "{context}: {f}"
            );
        }
        // The start-up frames were running before install(): nothing of theirs is recorded
        // (their exits find no shadow entry of their frames, as on the native route).
        assert!(orphans.is_empty(), "{context}: {orphans:?}");
        assert!(
            !counts.keys().any(|(_, n)| n.contains("8xray_crt4main")),
            "{context}: main recorded"
        );
        // The runtime's own code has sleds too (it is instrumented and patched): it runs with
        // its guard held, so it records nothing, and nothing on the handler's path recursed.
        assert!(
            !counts.keys().any(|(_, n)| n.contains("7instrfn")),
            "{context}: the runtime recorded itself: {:?}",
            counts
                .keys()
                .filter(|(_, n)| n.contains("7instrfn"))
                .collect::<Vec<_>>()
        );
        let (by_name, without_entry) = report(&trace);
        for (f, expected) in [
            ("xray_crt::worker", THREADS),
            ("xray_crt::work_a", calls),
            ("xray_crt::relay", calls),
            ("xray_crt::work_c", calls),
        ] {
            assert_eq!(
                by_name.get(f),
                Some(&expected),
                "{context}: report's {f}: {by_name:?}"
            );
        }
        assert_eq!(without_entry, 0, "{context}: report's exits without entry");
    }
}

/// install_before_main!: the handler is set and every sled patched from a constructor, with
/// no Rust frame running: every call is an entry and an exit, main's and std's included.
fn rust_fixture_installed_before_main_is_balanced(_: Arch) {
    let exe = build_xray_rust("xray-crt", X86_64.triple, "xray-crt-ctor", "always", "");
    let dir = workdir("xray-crt-ctor");
    let (t, n) = (THREADS.to_string(), ROUNDS.to_string());
    let trace = dir.join("trace");
    let out = run_ok(
        Command::new(&exe)
            .args([&t, &n])
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", &trace)
            .current_dir(&dir),
    );
    let plain = run_ok(Command::new(&exe).args([&t, &n]).current_dir(&dir));
    assert_eq!(out.stdout, plain.stdout, "the program's output");
    let procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].lost, 0);
    let counts = assert_balanced(&procs[0], "xray-crt-ctor");
    let calls = THREADS * ROUNDS;
    for (f, expected) in [
        ("13xray_crt_ctor4main", 1),
        ("13xray_crt_ctor6worker", THREADS),
        ("13xray_crt_ctor6work_a", calls),
        ("13xray_crt_ctor5relay", calls),
        ("13xray_crt_ctor6work_c", calls),
    ] {
        assert_eq!(
            entries_exits(&counts, f, "xray-crt-ctor"),
            (expected, expected),
            "{f}"
        );
    }
    // std's start-up code instantiated in the crate ran after the constructor: traced too.
    assert!(
        counts
            .keys()
            .any(|(k, n)| k == "entry" && n.contains("10lang_start")),
        "{counts:?}"
    );
    assert!(
        !counts.keys().any(|(_, n)| n.contains("instrfn")),
        "{counts:?}"
    );
    let (_, without_entry) = report(&trace);
    assert_eq!(without_entry, 0);
}

/// A panic unwinds through frames traced on the compiler-rt route: XRay's exit sleds do not
/// run, the handler's shadow entries (frames found at the offsets it measured on
/// compiler-rt's trampolines) let the runtime close them at the thread's next event.
fn caught_panic_through_compiler_rt_frames_is_balanced(_: Arch) {
    let exe = build_xray_rust("xray-crt", X86_64.triple, "xray-crt-ctor", "always", "");
    let dir = workdir("xray-crt-panic");
    let trace = dir.join("trace");
    let run_traced = |trace: &Path| {
        let _ = std::fs::remove_dir_all(trace);
        run_ok(
            Command::new(&exe)
                .args(["panic", "3", "4"])
                .env("INSTRFN_MODE", "trace")
                .env("INSTRFN_OUTPUT", trace)
                .current_dir(&dir),
        )
    };
    let out = run_traced(&trace);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("caught 3\n"), "{text}");
    // compiler-rt 14's trampolines (objdump of libclang_rt.xray-x86_64.a): __xray_FunctionEntry
    // and its tail-exit and argument-logging siblings push 8 + 8 + 240 bytes before calling the
    // handler, __xray_FunctionExit 8 + 64; the sled's call adds 8 for an entry.
    assert!(text.contains("frames [272, 80, 272, 272]"), "{text}");
    let procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].lost, 0);
    let counts = assert_balanced(&procs[0], "compiler-rt panic");
    let of = |kind: &str, part: &str| -> u64 {
        counts
            .iter()
            .filter(|((k, n), _)| k == kind && n.ends_with(part))
            .map(|(_, c)| c)
            .sum()
    };
    // dive(4) .. dive(0): 5 frames per round, all closed by unwinding, 3 rounds.
    assert_eq!(of("entry", "13xray_crt_ctor4dive"), 15);
    assert_eq!(of("unwound", "13xray_crt_ctor4dive"), 15);
    assert_eq!(of("exit", "13xray_crt_ctor4dive"), 0);
    assert_eq!(
        (
            of("entry", "13xray_crt_ctor5after"),
            of("exit", "13xray_crt_ctor5after")
        ),
        (3, 3)
    );
    assert_eq!(
        (
            of("entry", "13xray_crt_ctor4main"),
            of("exit", "13xray_crt_ctor4main")
        ),
        (1, 1)
    );
    let (by_name, without_entry) = report(&trace);
    assert_eq!(by_name.get("xray_crt_ctor::dive"), Some(&15), "{by_name:?}");
    assert_eq!(by_name.get("xray_crt_ctor::after"), Some(&3), "{by_name:?}");
    assert_eq!(without_entry, 0);
}

/// What makes the test above meaningful: llvm-xray finds sleds in instrfn's own functions
/// (so compiler-rt patched them, and they called the handler with the runtime's guard
/// held), and none in the handler or the runtime entry point it continues in.
fn runtime_code_has_sleds_and_the_handler_path_none(_: Arch) {
    require_tool("llvm-xray");
    let exe = xray_crt();
    let out = run_ok(
        Command::new("llvm-xray")
            .arg("extract")
            .arg("--symbolize")
            .arg(&exe),
    );
    let yaml = String::from_utf8_lossy(&out.stdout);
    let runtime = yaml
        .lines()
        .filter(|l| l.contains("kind: function-enter") && l.contains("function-name: 'instrfn::"))
        .count();
    assert!(
        runtime >= 50,
        "only {runtime} instrfn functions with sleds:\n{yaml}"
    );
    for f in [
        "instrfn_xray_handler",
        "__cyg_profile_func_enter",
        "__cyg_profile_func_exit",
    ] {
        assert!(!yaml.contains(f), "{f} has sleds");
    }
    let dir = workdir("xray-crt-handler");
    let out = run_ok(Command::new(&exe).args(["wrappers", "1"]).current_dir(&dir));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("handler_in_map=false"), "{text}");
    assert!(text.contains("cyg_in_map=false"), "{text}");
}

/// xray-sys's wrappers on a binary of this rustc: LLVM 22's PC-relative function index, which
/// compiler-rt 14's own `__xray_function_address` reads as absolute pointers (a SIGSEGV), set
/// aside; every function's address as llvm-xray reads the same binary's map; per-function
/// patching and unpatching exact.
fn wrappers_cope_with_llvm22_function_index(_: Arch) {
    require_tool("llvm-xray");
    let exe = xray_crt();
    let dir = workdir("xray-crt-wrappers");
    // compiler-rt 14's own __xray_function_address reads the relative index as absolute
    // pointers: the fault the wrappers exist for.
    let raw = run(Command::new(&exe).arg("raw-address").current_dir(&dir));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        raw.status.signal(),
        Some(11),
        "raw __xray_function_address: {raw:?}"
    );

    const K: u64 = 3000;
    let trace = dir.join("trace");
    let out = run_ok(
        Command::new(&exe)
            .args(["wrappers", &K.to_string()])
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", &trace)
            .current_dir(&dir),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in:\n{text}"))
            .to_string()
    };
    assert_eq!(value("format"), "PcRelative");
    assert_eq!(value("use"), "SetAside");
    assert_eq!(value("max_id"), value("walk"));
    assert_eq!(value("mismatches"), "0");
    assert_eq!(value("outside"), "None None None");
    assert_eq!(value("patch_work_a"), "Ok(())");
    assert_eq!(value("unpatch_work_a"), "Ok(())");

    // Every function's address, as llvm-xray reads the same binary's sled map (link-time
    // addresses; the fixture printed its addresses minus the load bias).
    let ours: BTreeMap<u64, u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("fn "))
        .map(|l| {
            let (id, a) = l.split_once(' ').unwrap();
            (
                id.parse().unwrap(),
                u64::from_str_radix(&a[2..], 16).unwrap(),
            )
        })
        .collect();
    let out = run_ok(Command::new("llvm-xray").arg("extract").arg(&exe));
    let mut theirs: BTreeMap<u64, u64> = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let field = |k: &str| {
            let rest = &l[l.find(&format!("{k}: "))? + k.len() + 2..];
            let v = rest.split([',', ' ']).next()?;
            v.strip_prefix("0x")
                .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
        };
        if let (Some(id), Some(f)) = (field("id"), field("function")) {
            let seen = theirs.insert(id, f);
            assert!(
                seen.is_none_or(|s| s == f),
                "llvm-xray: id {id} in two functions"
            );
        }
    }
    assert!(ours.len() > 100, "{} functions", ours.len());
    assert_eq!(
        ours, theirs,
        "function addresses by id: ours vs llvm-xray's"
    );

    // Per-function patching (through compiler-rt, its index set aside): work_a alone was
    // patched for K calls of work_a and K of work_b, then unpatched for K more of work_a.
    let (counts, _) = dump_counts_allowing(&trace, &[], "wrappers");
    assert_eq!(
        entries_exits(&counts, "8xray_crt6work_a", "wrappers"),
        (K, K)
    );
    assert!(
        !counts.keys().any(|(_, n)| !n.contains("8xray_crt6work_a")),
        "only work_a was patched: {counts:?}"
    );
}

/// install, worker(N), uninstall, worker(N), install, worker(N): two workers' events.
fn uninstall_stops_and_install_resumes(_: Arch) {
    let exe = xray_crt();
    let dir = workdir("xray-crt-cycle");
    let trace = dir.join("trace");
    run_ok(
        Command::new(&exe)
            .args(["cycle", "1000"])
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", &trace)
            .current_dir(&dir),
    );
    let (counts, _) = dump_counts_allowing(&trace, &STARTUP_FRAMES, "cycle");
    assert_eq!(entries_exits(&counts, "8xray_crt6worker", "cycle"), (2, 2));
    assert_eq!(
        entries_exits(&counts, "8xray_crt6work_a", "cycle"),
        (2000, 2000)
    );
    assert_eq!(
        entries_exits(&counts, "8xray_crt6work_c", "cycle"),
        (2000, 2000)
    );
}

/// clang -fxray-instrument links compiler-rt's XRay runtime (whole archive, its modes
/// too); the program assembles instrfn's handler (instrfn-xray/asm/x86_64.s), links the
/// runtime statically, and installs the handler from a constructor (instrfn_xray.h).
fn c_fixture_traced_through_compiler_rt_exact_counts(_: Arch) {
    require_tool("clang");
    let dir = workdir("xray-crt-c");
    let exe = dir.join("xray_crt");
    let include = root().join("instrfn-xray/c");
    run_ok(
        Command::new("clang")
            .args([
                "-O2",
                "-g",
                "-fxray-instrument",
                "-fxray-instruction-threshold=1",
                "-I",
            ])
            .arg(&include)
            .arg(fixture("c/xray_crt.c"))
            .arg(root().join("instrfn-xray/asm/x86_64.s"))
            .arg(runtime_lib(X86_64, Lib::Static))
            .args(["-lpthread", "-ldl", "-o"])
            .arg(&exe),
    );
    // logged's entry is an argument-logging sled (compiler-rt calls the handler with type 3).
    require_tool("llvm-xray");
    let map = run_ok(
        Command::new("llvm-xray")
            .args(["extract", "--symbolize"])
            .arg(&exe),
    );
    let map = String::from_utf8_lossy(&map.stdout);
    assert!(
        map.lines()
            .any(|l| l.contains("function-name: logged") && l.contains("kind: log-args-enter")),
        "{map}"
    );
    let (t, n) = (THREADS.to_string(), ROUNDS.to_string());
    let plain = run_ok(Command::new(&exe).args([&t, &n]).current_dir(&dir));
    let calls = THREADS * ROUNDS;
    for how in ["env", "record"] {
        let trace = dir.join(format!("trace-{how}"));
        let out = if how == "env" {
            run_ok(
                Command::new(&exe)
                    .args([&t, &n])
                    .env("INSTRFN_MODE", "trace")
                    .env("INSTRFN_OUTPUT", &trace)
                    .current_dir(&dir),
            )
        } else {
            run_ok(
                Command::new(instrfn_cli())
                    .arg("record")
                    .arg("-o")
                    .arg(&trace)
                    .arg("--")
                    .arg(&exe)
                    .args([&t, &n])
                    .current_dir(&dir),
            )
        };
        let context = format!("xray_crt.c under {how}");
        assert_eq!(out.stdout, plain.stdout, "{context}: the program's output");
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{context}");
        assert_eq!(procs[0].lost, 0, "{context}");
        // Installed before main: every call, main's too, balanced.
        let counts = assert_balanced(&procs[0], &context);
        for (f, expected) in [
            ("main", 1),
            ("worker", THREADS),
            ("work_a", calls),
            ("relay", calls),
            ("work_c", calls),
            ("logged", calls),
            ("report", 1),
        ] {
            assert_eq!(count_of(&counts, "entry", f), expected, "{context}: {f}");
            assert_eq!(count_of(&counts, "exit", f), expected, "{context}: {f}");
        }
        let others: Vec<_> = counts
            .keys()
            .filter(|(_, f)| {
                ![
                    "main", "worker", "work_a", "relay", "work_c", "logged", "report",
                ]
                .contains(&f.as_str())
            })
            .collect();
        assert!(others.is_empty(), "{context}: other events: {others:?}");
    }
}

/// tests/fixtures/c/throw.cpp on the compiler-rt route (clang++ -fxray-instrument, the
/// handler installed from a constructor): thrown-through frames closed as unwound at the
/// catch (__cxa_begin_catch), the catching frames traced returning, as on the native route.
fn cpp_exceptions_through_compiler_rt_frames_are_balanced(_: Arch) {
    require_tool("clang++");
    let dir = workdir("xray-crt-cpp");
    let exe = dir.join("throw");
    let include = root().join("instrfn-xray/c");
    let install = dir.join("install.o");
    run_ok(
        Command::new("clang")
            .args(["-O2", "-c", "-fxray-instrument", "-I"])
            .arg(&include)
            .arg(fixture("c/xray_crt_install.c"))
            .arg("-o")
            .arg(&install),
    );
    run_ok(
        Command::new("clang++")
            .args(["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"])
            .arg(fixture("c/throw.cpp"))
            .arg(&install)
            .arg(root().join("instrfn-xray/asm/x86_64.s"))
            .arg(runtime_lib(X86_64, Lib::Static))
            .args(["-lpthread", "-ldl", "-o"])
            .arg(&exe),
    );
    let trace = dir.join("trace");
    let out = run_ok(
        Command::new(&exe)
            .args(["4", "6"])
            .env("INSTRFN_MODE", "trace")
            .env("INSTRFN_OUTPUT", &trace)
            .current_dir(&dir),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "caught 8\n");
    let procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].lost, 0);
    let counts = assert_balanced(&procs[0], "c++ compiler-rt");
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

/// xray-sys built with a clang that is not there (/bin/false), and with one that finds no
/// XRay runtime (it prints a path that does not exist, as clang 15 without
/// libclang-rt-15-dev would): one line naming the package, and the build fails.
fn build_script_without_compiler_rt_says_which_package(_: Arch) {
    let dir = workdir("xray-crt-no-compiler-rt");
    let fake = dir.join("clang-15");
    std::fs::write(
        &fake,
        "#!/bin/sh\ncase \"$1\" in\n-dumpversion) echo 15.0.7 ;;\n\
         -print-file-name=*) echo /usr/lib/llvm-15/lib/clang/15.0.7/lib/linux/${1#-print-file-name=} ;;\n\
         *) exit 1 ;;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (clang, package) in [
        (PathBuf::from("/bin/false"), "libclang-rt-14-dev"),
        (fake, "libclang-rt-15-dev"),
    ] {
        let out = run(Command::new("cargo")
            .args([
                "build",
                "--release",
                "--locked",
                "--offline",
                "-p",
                "xray-sys",
            ])
            .arg("--target-dir")
            .arg(root().join("target/xray-sys-missing"))
            .env("CLANG", &clang)
            .env_remove("CARGO_TARGET_DIR")
            .current_dir(root()));
        let context = format!("CLANG={}", clang.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{context}: the build succeeded:\n{err}"
        );
        // The build script's own stderr, as cargo shows it (indented).
        let script: Vec<&str> = err
            .split_once("--- stderr\n")
            .unwrap_or_else(|| panic!("{context}: no build script stderr in:\n{err}"))
            .1
            .lines()
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(script.len(), 1, "{context}: {script:?}");
        assert!(
            script[0].starts_with("xray-sys: "),
            "{context}: {}",
            script[0]
        );
        assert!(script[0].contains(package), "{context}: {}", script[0]);
        assert!(
            script[0].contains("libclang_rt.xray-x86_64.a"),
            "{context}: {}",
            script[0]
        );
    }
}
