//! riscv64 trace mode (INSTRFN_MODE=trace) under qemu-user: golden call trees for every
//! compiler and entry kind of the architecture, the shapes whose exits are not traced the usual
//! way, the exit trampoline's register harness (fast and slow exits, and a negative case), the
//! ways out of a function other than its return (longjmp, pthread_exit/cancel, backtrace(),
//! C++ exceptions), signal handlers interrupting the trampolines anywhere, and
//! INSTRFN_MIN_DURATION (also with such handlers).
//!
//! Which code gets exits (asm/riscv64.s, src/arch/riscv64.rs `prologue`): every function whose
//! prologue saves ra at CFA - 8, decoded from its entry to its counting call: gcc -pg at any -O
//! level, with or without -fno-omit-frame-pointer, clang 14 -pg, rustc -Zinstrument-mcount.
//! Entries only: variadic functions (ra below the register save area), -msave-restore
//! prologues, and whatever the decoder does not model; a function tail-called by a traced one
//! runs in its caller's frame (entry only, its return is the caller's exit).

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

const ARCH: Arch = RISCV64;
/// calltree.c's threads and rounds.
const T: usize = 4;
const K: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cc {
    Gcc,
    Clang,
}

/// Compiles `tests/fixtures/c/<src>` with `-O2 -c` and `flags` into `obj`.
fn compile(compiler: Cc, src: &str, flags: &[&str], obj: &Path) {
    let source = fixture(&format!("c/{src}"));
    let mut args: Vec<&OsStr> = ["-O2", "-c"].iter().map(OsStr::new).collect();
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    match compiler {
        Cc::Gcc => {
            cc(ARCH, &args, obj);
        }
        Cc::Clang => {
            require_tool("clang");
            run_ok(
                std::process::Command::new("clang")
                    .arg("--target=riscv64-linux-gnu")
                    .args(&args)
                    .arg("-o")
                    .arg(obj),
            );
        }
    }
}

/// Runs `exe` in trace mode with its trace in `<dir>/<name>` (a fresh directory); returns it.
fn run_traced(
    exe: &Path,
    args: &[&str],
    link: Runtime,
    extra: &[(&str, &str)],
    dir: &Path,
    name: &str,
) -> (std::process::Output, PathBuf) {
    let tdir = dir.join(name);
    let preload = link == Runtime::Preload;
    let out = run_in_trace_mode(ARCH, exe, args, preload, extra, dir, &tdir);
    (out, tdir)
}

/// The one process of a trace, after checking that it lost nothing and names riscv64's clock.
fn one_process(tdir: &Path, context: &str) -> DumpProcess {
    let mut procs = instrfn_dump(tdir);
    assert_eq!(procs.len(), 1, "{context}: {procs:?}");
    for meta in std::fs::read_dir(tdir).unwrap() {
        let path = meta.unwrap().path();
        if path.extension().is_some_and(|e| e == "meta") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.lines().any(|l| l.starts_with("clock time ")),
                "{context}: no `clock time` line:\n{text}"
            );
            assert!(
                !text.lines().any(|l| l.starts_with("lost ")),
                "{context}: events lost:\n{text}"
            );
        }
    }
    procs.remove(0)
}

/// calltree.c at T = 4, K = 5, compiled by `cc` with `flags`, preloaded and linked: exactly
/// the expected entry/exit sequence per thread.
fn golden(cc: Cc, flags: &[&str]) {
    let name = format!("riscv64-trace-golden-{cc:?}{}", flags.join(""));
    let dir = workdir(&name);
    let obj = dir.join("calltree.o");
    compile(cc, "calltree.c", flags, &obj);
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(ARCH, &dir, &obj, &[], "calltree", kind);
        let context = format!("{name} {kind:?}");
        let (out, tdir) = run_traced(&exe, &args, kind, &[], &dir, &format!("trace-{kind:?}"));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("calltree {T} {K}"),
            "{context}"
        );
        let p = one_process(&tdir, &context);
        assert_calltree(&p, T, K, &context);
    }
}

/// gcc -O2 -pg keeps no frame pointer: the return slot comes from the decoded prologue
/// (`addi sp, sp, -N; sd ra, N-8(sp); ...; mv a0, ra; call _mcount`), every exit traced.
#[test]
fn riscv64_trace_golden_gcc_pg() {
    golden(Cc::Gcc, &["-pg"]);
}

/// The same with a frame pointer (s0 = CFA at the call, guarded by s0 rather than a0).
#[test]
fn riscv64_trace_golden_gcc_pg_frame_pointer() {
    golden(Cc::Gcc, &["-pg", "-fno-omit-frame-pointer"]);
}

/// clang 14 -pg: a frame pointer always, an argument in a0.
#[test]
fn riscv64_trace_golden_clang_pg() {
    golden(Cc::Clang, &["-pg"]);
}

/// gcc -finstrument-functions: __cyg_profile_func_enter/exit, nothing replaced.
#[test]
fn riscv64_trace_golden_gcc_instrument_functions() {
    golden(Cc::Gcc, &["-finstrument-functions"]);
}

/// clang -finstrument-functions-after-inlining (plain -finstrument-functions also records the
/// glibc inline wrappers atoi/atol that main calls, at addresses without a symbol).
#[test]
fn riscv64_trace_golden_clang_instrument_functions() {
    golden(Cc::Clang, &["-finstrument-functions-after-inlining"]);
}

/// trace_shapes.c: a variadic function (entry only), a sibling call (the callee entry only, the
/// caller's exit when it returns) and a two-step frame (traced), for gcc with and without a
/// frame pointer and clang, preloaded and linked: exactly the documented sequence.
#[test]
fn riscv64_trace_entry_only_shapes() {
    const ROUNDS: usize = 3;
    let round = [
        ("entry-no-exit", "vsum"),
        ("entry", "leaf"),
        ("exit", "leaf"),
        ("entry", "tailer"),
        ("entry-no-exit", "leaf"),
        ("exit", "tailer"),
        ("entry", "big"),
        ("entry", "leaf"),
        ("exit", "leaf"),
        ("exit", "big"),
    ];
    let mut want = vec![("entry", "main")];
    for _ in 0..ROUNDS {
        want.extend(round);
    }
    want.push(("exit", "main"));
    for (cc, flags) in [
        (Cc::Gcc, &["-pg"][..]),
        (Cc::Gcc, &["-pg", "-fno-omit-frame-pointer"][..]),
        (Cc::Clang, &["-pg"][..]),
    ] {
        let name = format!("riscv64-trace-shapes-{cc:?}{}", flags.join(""));
        let dir = workdir(&name);
        let obj = dir.join("trace_shapes.o");
        compile(cc, "trace_shapes.c", flags, &obj);
        for kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(ARCH, &dir, &obj, &[], "trace_shapes", kind);
            let context = format!("{name} {kind:?}");
            let rounds = ROUNDS.to_string();
            let (_, tdir) = run_traced(&exe, &[&rounds], kind, &[], &dir, "trace");
            let p = one_process(&tdir, &context);
            assert_eq!(p.threads.len(), 1, "{context}: {:?}", p.threads);
            let got: Vec<(&str, &str)> = p
                .threads
                .values()
                .next()
                .unwrap()
                .iter()
                .map(|e| (e.kind.as_str(), e.name.as_str()))
                .collect();
            assert_eq!(got, want, "{context}");
        }
    }
}

/// Builds the exit harness (tests/fixtures/regs/riscv64_exit.S and its driver) with `extra`
/// (objects or libraries) into `<dir>/<name>`.
fn exit_harness(dir: &Path, name: &str, extra: &[&OsStr]) -> PathBuf {
    let driver = fixture("regs/riscv64_exit.c");
    let harness = fixture("regs/riscv64_exit.S");
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O1"), driver.as_os_str(), harness.as_os_str()];
    args.extend_from_slice(extra);
    args.push(OsStr::new("-lpthread"));
    cc(ARCH, &args, &dir.join(name))
}

/// In a trace (its events and staging files): how many chunks after a slot's first one begin
/// with an exit event (common::raw_chunks). With the harness's odd event count and 4 KiB
/// chunks, each such exit found its chunk full in the exit trampoline, which left it to its
/// slow part. With compact events a chunk holds 504 short events, or fewer with long ones
/// among them: which events begin the chunks depends on the slots the long ones take, so the
/// harness runs twice, the second time with its events moved by 8 bytes (`shift`), and one of
/// the two has its chunks begin with exits.
fn chunks_opened_by_an_exit(tdir: &Path) -> usize {
    raw_chunks(tdir)
        .iter()
        .filter(|c| c.seq > 0 && c.first_kind == 2)
        .count()
}

/// The exit trampoline keeps a0, a1, fa0, fa1, fcsr and every callee-saved register (the
/// harness loads sentinels into them before it returns through it), and the trace entry path
/// keeps every register: with its fast part, with its slow part after a frame skipped by a
/// longjmp-like jump, when it makes a call word, and when the chunk is full
/// (INSTRFN_BUFSIZE=4096, also with INSTRFN_CALL_WORDS=off); with a shadow stack
/// of one entry (INSTRFN_MAX_DEPTH=1) the skipped frame is an entry without exit; with
/// INSTRFN_MIN_DURATION=1s the fast exits take their entries back (counted). Linked
/// statically and dynamically (eager binding: a lazy PLT resolver clobbers scratch registers).
#[test]
fn riscv64_exit_trampoline_registers() {
    let dir = workdir("riscv64-trace-regs");
    let lib = runtime_lib(ARCH, Lib::Static);
    let shared = runtime_lib(ARCH, Lib::Shared);
    let libdir = shared.parent().unwrap();
    let st = exit_harness(
        &dir,
        "regs-exit-static",
        &[lib.as_os_str(), OsStr::new("-ldl")],
    );
    let l = format!("-L{}", libdir.display());
    let dy = exit_harness(
        &dir,
        "regs-exit-dynamic",
        &[
            OsStr::new(&l),
            OsStr::new("-linstrfn"),
            OsStr::new("-Wl,-z,now"),
        ],
    );
    let ld_path = libdir.display().to_string();
    // Calls per kind (riscv64_exit.c): 2005 kind 0, 302 kind 1, 21 kind 2.
    let (k0, k1, k2) = (2005, 302, 21);
    for exe in [&st, &dy] {
        // Chunks opened by an exit, over the 4 KiB chunk runs without and with `shift`.
        let mut opened = 0;
        for (extra, shift) in [
            (&[][..], false),
            (&[("INSTRFN_BUFSIZE", "4096")][..], false),
            (&[("INSTRFN_BUFSIZE", "4096")][..], true),
            // (Without call words every exit reserves its event, as before them: with main's
            // entry shifting them by one, exits then meet full chunks, where the fast ones
            // made call words.)
            (
                &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..],
                true,
            ),
            (&[("INSTRFN_MAX_DEPTH", "1")][..], false),
            (&[("INSTRFN_MIN_DURATION", "1s")][..], false),
        ] {
            let mut env = vec![("LD_LIBRARY_PATH", ld_path.as_str())];
            env.extend_from_slice(extra);
            let context = format!("{} {extra:?} shift {shift}", exe.display());
            let args: &[&str] = if shift { &["all", "shift"] } else { &["all"] };
            let (out, tdir) = run_traced(exe, args, Runtime::Static, &env, &dir, "trace");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("ok {} {k0} {k1} {k2}", k0 + k1 + k2),
                "{context}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let p = one_process(&tdir, &context);
            let mut counts = std::collections::BTreeMap::new();
            for events in p.threads.values() {
                for e in events {
                    *counts.entry((e.kind.clone(), e.name.clone())).or_insert(0) += 1;
                }
            }
            if extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION") {
                // Every call is short: the exit trampoline takes the callee's entry back
                // (.Lexit_short, with the registers as they must be), counted; the callee's
                // calls recorded are those whose entry was not the newest event any more (the
                // first of a chunk). The skipper's exits take the slow path: all recorded.
                let key = |k: &str| (k.to_string(), "instrfn_exit_callee".to_string());
                let recorded = counts.remove(&key("entry")).unwrap_or(0);
                assert_eq!(
                    counts.remove(&key("exit")).unwrap_or(0),
                    recorded,
                    "{context}"
                );
                let dropped = meta_dropped(&tdir) as usize;
                assert!(dropped > k0 / 2, "{context}: {dropped} dropped");
                assert_eq!(dropped + recorded, k0, "{context}: {dropped} dropped");
            }
            let depth1 = extra.iter().any(|(k, _)| *k == "INSTRFN_MAX_DEPTH");
            let inner = if depth1 {
                vec![("entry-no-exit", "instrfn_exit_inner", k1)]
            } else {
                vec![
                    ("entry", "instrfn_exit_inner", k1),
                    ("unwound", "instrfn_exit_inner", k1),
                ]
            };
            let mut want: Vec<(&str, &str, usize)> = vec![
                ("entry", "instrfn_exit_skipper", k1),
                ("exit", "instrfn_exit_skipper", k1),
                ("entry-no-exit", "instrfn_exit_noslot", k2),
            ];
            want.extend(inner);
            if shift {
                want.push(("entry", "main", 1));
            }
            if !extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION") {
                want.push(("entry", "instrfn_exit_callee", k0));
                want.push(("exit", "instrfn_exit_callee", k0));
            }
            let want: std::collections::BTreeMap<(String, String), usize> = want
                .into_iter()
                .map(|(k, n, c)| ((k.to_string(), n.to_string()), c))
                .collect();
            assert_eq!(counts, want, "{context}");
            if extra.iter().any(|(k, _)| *k == "INSTRFN_BUFSIZE") {
                opened += chunks_opened_by_an_exit(&tdir);
            }
        }
        assert!(
            opened >= 5,
            "{}: {opened} chunks opened by an exit",
            exe.display()
        );
    }
}

/// A test that cannot fail proves nothing: the exit harness, linked against a fake `_mcount`
/// that replaces instrfn_exit_callee's return address (at 24(sp)) with an exit trampoline that
/// clobbers one register, must name it: a1 (#11), the upper half of fa1 (#43: a save with
/// fsw/flw NaN-boxes what it reloads), s11 (#27), fs0 (#40) and fcsr (#64).
#[test]
fn riscv64_exit_harness_catches_a_clobbering_trampoline() {
    let dir = workdir("riscv64-trace-regs-negative");
    for (index, what, clobber) in [
        (11, "a1", "li a1, 0"),
        (
            43,
            "fa1 upper half",
            "addi sp, sp, -16\n fsw fa1, 0(sp)\n flw fa1, 0(sp)\n addi sp, sp, 16",
        ),
        (27, "s11", "li s11, 0"),
        (40, "fs0", "fmv.d.x fs0, zero"),
        (64, "fcsr", "csrw fcsr, zero"),
    ] {
        let fake = format!(
            ".globl _mcount\n\
             _mcount:\n addi sp, sp, -16\n sd t0, 0(sp)\n sd t1, 8(sp)\n\
             ld t0, 16+24(sp)\n lla t1, fake_saved\n sd t0, 0(t1)\n\
             lla t0, fake_exit\n sd t0, 16+24(sp)\n\
             ld t0, 0(sp)\n ld t1, 8(sp)\n addi sp, sp, 16\n ret\n\
             fake_exit:\n {clobber}\n lla t0, fake_saved\n ld ra, 0(t0)\n ret\n\
             .data\nfake_saved: .quad 0\n\
             .section .note.GNU-stack,\"\",%progbits\n"
        );
        let fake_s = dir.join(format!("fake{index}.S"));
        std::fs::write(&fake_s, fake).unwrap();
        let exe = exit_harness(
            &dir,
            &format!("regs-exit-fake{index}"),
            &[fake_s.as_os_str()],
        );
        let out = run(&mut command(ARCH, &exe, &["0"], &[], &dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{what} (#{index}) passed: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains(&format!("register #{index} clobbered\n")),
            "{what} (#{index}): {stderr}"
        );
    }
}

/// Signal handlers that trace, interrupting the traced loop anywhere (trace_signals.c): every
/// call of the thread, the handler's included, has its exit and they nest; counts exact.
#[test]
fn riscv64_trace_signal_handlers() {
    const N: u64 = 300;
    for (cc, flags) in [(Cc::Gcc, &["-pg"][..]), (Cc::Clang, &["-pg"][..])] {
        let name = format!("riscv64-trace-signals-{cc:?}");
        let dir = workdir(&name);
        let obj = dir.join("trace_signals.o");
        compile(cc, "trace_signals.c", flags, &obj);
        for kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(ARCH, &dir, &obj, &[], "trace_signals", kind);
            let context = format!("{name} {kind:?}");
            let (out, tdir) = run_traced(&exe, &[&N.to_string()], kind, &[], &dir, "trace");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let value = |key: &str| -> u64 {
                stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                    .unwrap_or_else(|| panic!("{context}: no {key} in {stdout}"))
            };
            let (handled, outer) = (value("handled "), value("outer "));
            assert!(handled >= N, "{context}: {handled} signals handled");
            let p = one_process(&tdir, &context);
            assert_eq!(p.threads.len(), 1, "{context}");
            let events = p.threads.values().next().unwrap();
            assert_nested(events, &context);
            let entries = |f: &str| {
                events
                    .iter()
                    .filter(|e| e.kind == "entry" && e.name == f)
                    .count() as u64
            };
            assert_eq!(entries("outer"), outer, "{context}");
            assert_eq!(entries("from_handler"), handled, "{context}");
            assert_eq!(entries("inner"), 2 * outer + handled, "{context}");
        }
    }
}

/// The gmon register harness (tests/fixtures/regs/riscv64.S, driver.c) in trace mode: its
/// counting call follows no prologue the decoder proves (it calls a function first), so every
/// call takes the trace slow path and is an entry without exit; every register survives it.
#[test]
fn riscv64_trace_slow_path_registers() {
    let dir = workdir("riscv64-trace-regs-slow");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/riscv64.S");
    let lib = runtime_lib(ARCH, Lib::Static);
    let exe = cc(
        ARCH,
        &[
            OsStr::new("-O1"),
            driver.as_os_str(),
            harness.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ],
        &dir.join("regs-static"),
    );
    for kind in ["0", "1", "2", "3"] {
        let context = format!("kind {kind}");
        let (out, tdir) = run_traced(&exe, &[kind], Runtime::Static, &[], &dir, "trace");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok 10012",
            "{context}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p = one_process(&tdir, &context);
        let events: Vec<&DumpEvent> = p.threads.values().flatten().collect();
        // All but the four calls with the guard held or recording stopped.
        assert_eq!(events.len(), 10_008, "{context}");
        assert!(
            events
                .iter()
                .all(|e| e.kind == "entry-no-exit" && e.name == "instrfn_regcheck"),
            "{context}"
        );
    }
}

/// gmon mode counts the arcs of -finstrument-functions code too: __cyg_profile_func_enter
/// counts (call_site, this_fn) like mcount, the exit nothing. calltree.c at T = 4, K = 400,
/// gcc and clang, preloaded and linked: exact arcs in gprof's call graph, the fast path used
/// (one slow path per thread).
#[test]
fn riscv64_gmon_instrument_functions_call_graph() {
    let (t, k) = (T as u64, 400);
    for (cc, flag) in [
        (Cc::Gcc, "-finstrument-functions"),
        (Cc::Clang, "-finstrument-functions-after-inlining"),
    ] {
        let name = format!("riscv64-gmon-cyg-{cc:?}");
        let dir = workdir(&name);
        let obj = dir.join("calltree.o");
        compile(cc, "calltree.c", &[flag], &obj);
        for kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(ARCH, &dir, &obj, &[], "calltree", kind);
            let context = format!("{name} {kind:?}");
            let preload = runtime_lib(ARCH, Lib::Shared).display().to_string();
            let mut env = vec![("INSTRFN_VERBOSE", "1")];
            if kind == Runtime::Preload {
                env.push(("LD_PRELOAD", preload.as_str()));
            }
            let _ = std::fs::remove_file(dir.join("gmon.out"));
            let out = run_exe(ARCH, &exe, &[&T.to_string(), &k.to_string()], &env, &dir);
            let arcs = gprof_arcs(ARCH, &exe, &dir.join("gmon.out"));
            assert_arcs(&arcs, &calltree_arcs(t, k), &context);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_fast_path_used(&stderr, 5 * t * k, &context);
        }
    }
}

/// INSTRFN_EXITS=off: no return address is replaced; every call is an entry without exit, in
/// the order of the golden sequence.
#[test]
fn riscv64_trace_exits_off_records_entries_only() {
    let dir = workdir("riscv64-trace-exits-off");
    let obj = dir.join("calltree.o");
    compile(Cc::Gcc, "calltree.c", &["-pg"], &obj);
    let entries: Vec<String> = calltree_worker(K)
        .into_iter()
        .filter(|(kind, _)| kind == "entry")
        .map(|(_, name)| name)
        .collect();
    for kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(ARCH, &dir, &obj, &[], "calltree", kind);
        let context = format!("exits off {kind:?}");
        let args = [T.to_string(), K.to_string()];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, tdir) = run_traced(
            &exe,
            &args,
            kind,
            &[("INSTRFN_EXITS", "off")],
            &dir,
            &format!("trace-{kind:?}"),
        );
        let p = one_process(&tdir, &context);
        let mut workers = 0;
        for events in p.threads.values() {
            assert!(
                events.iter().all(|e| e.kind == "entry-no-exit"),
                "{context}: {events:?}"
            );
            let names: Vec<String> = events.iter().map(|e| e.name.clone()).collect();
            if names == entries {
                workers += 1;
            } else {
                assert_eq!(names, ["main"], "{context}");
            }
        }
        assert_eq!(workers, T, "{context}");
    }
}

/// Ways out of a function other than its return (unwind.c, as on x86_64 in tests/host.rs and
/// on aarch64): longjmp, siglongjmp from a handler on an alternate stack, pthread_exit,
/// cancellation (both through the wrapped _Unwind_ForcedUnwind), a shadow stack too small,
/// tail calls, backtrace(), and signal handlers in the middle of the thread's own calls. Every
/// entry gets its exit or is closed as unwound, and the program prints what it prints without
/// instrfn; preloaded and linked statically.
#[test]
fn riscv64_trace_survives_longjmp_unwinding_and_tail_calls() {
    let dir = workdir("riscv64-trace-unwind");
    let obj = dir.join("unwind.o");
    compile(Cc::Gcc, "unwind.c", &["-pg", "-rdynamic"], &obj);
    for kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(ARCH, &dir, &obj, &["-rdynamic"], "unwind", kind);
        let label = format!("riscv64 {kind:?}");
        assert_unwind_runs(ARCH, &exe, &dir, 300_000, &label, |args, env| {
            let context = format!("{label}: {}", args.join(" "));
            let (out, tdir) = run_traced(&exe, args, kind, env, &dir, "trace");
            assert!(
                out.status.success(),
                "{context}: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            (stdout, one_process(&tdir, &context))
        });
    }
}

/// C++ exceptions through -pg frames (throw.cpp, as on x86_64 and aarch64): thrown through
/// destructors (cleanup pads, _Unwind_Resume), caught, rethrown. The same output; every frame
/// closed, the thrown-through ones as unwound, the catching ones returning. Preloaded and
/// static.
#[test]
fn riscv64_trace_survives_cpp_exceptions() {
    let dir = workdir("riscv64-trace-cpp");
    let gxx = "riscv64-linux-gnu-g++";
    cross_cpp_exception_runs(ARCH, gxx, &["-pg"], &dir, &[], |exe, args, kind| {
        let context = format!("c++ {kind:?}");
        let (out, tdir) = run_traced(exe, args, kind, &[], &dir, "trace");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (stdout, one_process(&tdir, &context))
    });
}

/// Signal handlers that trace between any two instructions of the trampolines (tracesig.c, as
/// on x86_64 and s390x; qemu in single-step mode delivers a signal after any instruction, and
/// the sender signals again as soon as a handler ran, so handlers often run back to back at
/// one point): each handler makes about 200 events, so with 4 KiB chunks (252 events) it
/// usually takes the next chunk while the code it interrupted holds a reserved event in the
/// one before, or the two before. The last round of each build has every handler walk the
/// stack with backtrace() first, through the frame it interrupted (which may be pushing or
/// popping a shadow entry). Every run: a nested trace with every exit, the exact counts,
/// nothing lost, exit status 0. Before events were reserved against the room just checked, a
/// handler that took the next chunk between the reservation and the check left the event
/// unwritten (a hole, where the reader stops reading the chunk: entries missing); before a
/// chunk with an unwritten event stayed mapped, two chunk switches in that window made the
/// interrupted write fault (SIGSEGV); before shadow slots were written last (0 while being
/// pushed), backtrace()'s wrapper put the trampoline into the slot of a half-pushed entry that
/// still held a stale original (the previous call's, often the same), which then went into the
/// entry: "trace mode lost track of a return address; aborting"; and before the wrapper's
/// second half skipped entries being pushed, it read through their slot 0 (SIGSEGV).
#[test]
fn riscv64_trace_signal_handlers_interrupt_trampolines_anywhere() {
    for (cc, flags) in [
        (Cc::Gcc, &["-pg"][..]),
        (Cc::Gcc, &["-pg", "-fno-omit-frame-pointer"][..]),
        (Cc::Clang, &["-pg"][..]),
        (Cc::Gcc, &["-finstrument-functions"][..]),
    ] {
        let name = format!("riscv64-trace-tracesig-{cc:?}{}", flags.join(""));
        let dir = workdir(&name);
        let obj = dir.join("tracesig.o");
        compile(cc, "tracesig.c", flags, &obj);
        let exe = link_runtime(ARCH, &dir, &obj, &[], "tracesig", Runtime::Static);
        // Every trace of riscv64's also names its clock (one_process).
        tracesig_singlestep_rounds(ARCH, &exe, false, &dir, &name, "backtrace", |tdir, c| {
            one_process(tdir, c);
        });
    }
}

/// INSTRFN_MIN_DURATION (asm/riscv64.s `.Lexit_short`): sleeps.c with a threshold of 5 ms,
/// between its 1000 calls of tiny() (nanoseconds) and its naps (10 and 30 ms): the exit
/// trampoline takes back the entry of every short call, so the trace holds exactly the naps
/// and main, and every call left out is counted (`dropped` in the meta file: recorded +
/// dropped = the calls of a run without the threshold, exactly). gcc and clang -pg, preloaded
/// and linked. -finstrument-functions code records every call, as on every architecture (its
/// exit hook has no shadow entry that ties it to its own entry).
#[test]
fn riscv64_trace_min_duration_leaves_short_calls_out() {
    for (cc, flags) in [
        (Cc::Gcc, &["-pg"][..]),
        (Cc::Clang, &["-pg"][..]),
        (Cc::Gcc, &["-finstrument-functions"][..]),
    ] {
        let name = format!("riscv64-trace-min-duration-{cc:?}{}", flags.join(""));
        let dir = workdir(&name);
        let obj = dir.join("sleeps.o");
        compile(cc, "sleeps.c", flags, &obj);
        let cyg = flags == ["-finstrument-functions"];
        for kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(ARCH, &dir, &obj, &[], "sleeps", kind);
            let context = format!("{name} {kind:?}");
            min_duration_sleeps_runs(cyg, &context, |env| {
                let (out, tdir) = run_traced(&exe, &[], kind, env, &dir, "trace");
                one_process(&tdir, &context);
                (String::from_utf8_lossy(&out.stdout).into_owned(), tdir)
            });
        }
    }
}

/// INSTRFN_MIN_DURATION under signal handlers that trace between any two instructions of the
/// trampolines (tracesig.c, qemu single-stepping, 4 KiB chunks; see
/// riscv64_trace_signal_handlers_interrupt_trampolines_anywhere): a handler that comes while
/// the exit trampoline takes an entry back (between its check of the newest event and the
/// sc.d that moves the position back) either leaves events, and then the entry stays and gets
/// its exit, or had all its calls taken back too, and then the entry goes as well. At 1 s
/// every call is short; at 100 µs handler_fn (100 calls of leaf) is mostly long and work and
/// leaf are short, so handlers often leave events in the middle of a take-back; the last
/// round walks the stack in every handler. Every run: a nested trace with every exit, nothing
/// lost, and every call recorded or counted as dropped, exactly.
#[test]
fn riscv64_trace_min_duration_signal_handlers_interrupt_the_take_back() {
    for (cc, flags) in [
        (Cc::Gcc, &["-pg"][..]),
        (Cc::Gcc, &["-pg", "-fno-omit-frame-pointer"][..]),
        (Cc::Clang, &["-pg"][..]),
    ] {
        let name = format!(
            "riscv64-trace-min-duration-tracesig-{cc:?}{}",
            flags.join("")
        );
        let dir = workdir(&name);
        let obj = dir.join("tracesig.o");
        compile(cc, "tracesig.c", flags, &obj);
        let exe = link_runtime(ARCH, &dir, &obj, &[], "tracesig", Runtime::Static);
        min_duration_tracesig_rounds(ARCH, &exe, &dir, &name, "backtrace");
    }
}

#[test]
fn riscv64_a_full_trace_counts_every_event() {
    let dir = workdir("riscv64-trace-full");
    let obj = dir.join("calltree.o");
    compile(Cc::Gcc, "calltree.c", &["-pg"], &obj);
    assert_full_trace_counted(ARCH, &obj, &dir, "riscv64");
}

/// INSTRFN_MIN_DURATION's take-back held up at one exact instruction (exit_window.c
/// `take-back`: a breakpoint written over instrfn_riscv64_exit_take_back, its handler under qemu
/// filling many 4 KiB chunks there, which the runtime retires, commits and reuses while the
/// interrupted trampoline goes on; see tests/host.rs's x86_64 test of the same): every event
/// in the trace exactly once, with the collector and without.
#[test]
fn riscv64_trace_take_back_survives_a_handler_that_fills_chunks() {
    take_back_rounds(ARCH);
}

/// C++ exceptions through -pg frames of a program linked with -static-libgcc
/// -static-libstdc++, preloaded (its unwinder walks through the exit trampoline with the return
/// pad's unwind info, asm/riscv64.s; before, the first throw ended in std::terminate).
#[test]
fn riscv64_trace_survives_cpp_exceptions_with_a_static_libgcc() {
    static_libgcc_cpp_runs(ARCH, "riscv64-linux-gnu-g++", &["-pg"]);
}

/// A traced, stack-walking signal handler at each instruction of the trace fast paths in turn
/// (bpsweep.c: a breakpoint written over each instruction of _mcount's fast path and the exit
/// trampoline's, and of -finstrument-functions' hooks, one call each, as tests/host.rs's
/// sweep does with the trap flag): every call recorded exactly, also with 4 KiB chunks filled and
/// recycled under the interrupted code and with INSTRFN_MIN_DURATION taking calls back.
#[test]
fn riscv64_trace_survives_a_traced_handler_at_every_instruction() {
    bpsweeps(ARCH, &[Sweep::Mcount, Sweep::Cyg]);
}

/// Compact events on riscv64 (docs/trace-format.md, chunk versions 2 and 3), as on aarch64
/// (tests/trace_aarch64.rs): compact.c under qemu, every call once, balanced, named, the sleep
/// as long as measured. qemu-user runs rdtime at the host's time stamp counter rate (2.4 GHz
/// here: 2^30 ticks are 0.44 s, as the meta file's clock lines say), so the 2N + 2 events after
/// the 1 s sleep are long, and the library's are short (qemu maps it within the code base's
/// reach): 4004 short and 2002 long before call words (a call site's first call goes through
/// the slow path, which writes short events too where they fit). The first loop's calls of
/// near(), which record nothing inside them, are call words (MERGE_CALL in the exit
/// trampoline: 997 of 1000 when it was written, 2010 short events left, 0 before); built with
/// -finstrument-functions too, where `__cyg_profile_func_exit` makes them (998).
#[test]
fn riscv64_compact_events_take_the_long_form_where_they_must() {
    const N: u64 = 1000;
    for flag in ["-pg", "-finstrument-functions"] {
        let c = compact_under_qemu(ARCH, N, flag);
        assert!(
            c.calls > N * 9 / 10 && c.short + 2 * c.calls >= 4 * N - 8 && c.long >= 2 * N + 2,
            "{flag}: {c:?}"
        );
    }
}
