//! Trace mode on aarch64, under qemu-user: golden call trees for every compiler and entry kind
//! (gcc -pg, clang 14 -pg, -finstrument-functions, pac-ret), preloaded and linked statically;
//! pac-ret code whose saved return addresses look unsigned; the exit trampoline's registers;
//! a Rust program built with -Zinstrument-mcount; signal handlers interrupting the trampolines
//! anywhere (qemu single-stepping); INSTRFN_MIN_DURATION, also with such handlers.

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The compiler of a fixture object.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Compiler {
    Gcc,
    Clang,
}

/// Compiles `tests/fixtures/c/<src>` for aarch64 with `-O2 -c` and `flags` into `<dir>/<obj>`.
fn compile(compiler: Compiler, dir: &Path, src: &str, flags: &[&str], obj: &str) -> PathBuf {
    let obj = dir.join(obj);
    let source = fixture(&format!("c/{src}"));
    let mut args: Vec<&OsStr> = ["-O2", "-c"].iter().map(OsStr::new).collect();
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    match compiler {
        Compiler::Gcc => cc(AARCH64, &args, &obj),
        Compiler::Clang => {
            // Debian's clang cross-compiles with the gcc cross toolchain's headers.
            require_tool("clang");
            run_ok(
                Command::new("clang")
                    .arg("--target=aarch64-linux-gnu")
                    .args(&args)
                    .arg("-o")
                    .arg(&obj),
            );
            obj
        }
    }
}

/// Runs `exe` under qemu in trace mode, writing into a fresh `<dir>/trace-<link>`: returns its
/// stdout and the trace directory.
fn run_traced(
    exe: &Path,
    args: &[&str],
    link: Runtime,
    extra: &[(&str, &str)],
    dir: &Path,
) -> (String, PathBuf) {
    let trace = dir.join(format!("trace-{link:?}"));
    let preload = link == Runtime::Preload;
    let out = run_in_trace_mode(AARCH64, exe, args, preload, extra, dir, &trace);
    (String::from_utf8_lossy(&out.stdout).into_owned(), trace)
}

/// What a calltree.c build must trace: every entry and exit, or (pac-ret: every function signs
/// its return address) entries without exit only.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Exits,
    EntriesOnly,
}

const T: usize = 4;
const K: usize = 5;

fn golden(compiler: Compiler, flags: &[&str], expect: Expect) {
    let name = format!("aarch64-trace-{compiler:?}{}", flags.join(""));
    let dir = workdir(&name);
    let obj = compile(compiler, &dir, "calltree.c", flags, "calltree.o");
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for link_kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(AARCH64, &dir, &obj, &[], "calltree", link_kind);
        let context = format!("{name} {link_kind:?}");
        // The program runs as it does without instrfn.
        let plain = run_exe(AARCH64, &exe, &args, &[], &dir);
        let (out, trace) = run_traced(&exe, &args, link_kind, &[], &dir);
        assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{context}");
        assert_eq!(out.trim(), format!("calltree {T} {K}"), "{context}");
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{context}");
        match expect {
            Expect::Exits => assert_calltree(&procs[0], T, K, &context),
            Expect::EntriesOnly => assert_calltree_entries_only(&procs[0], T, K, &context),
        }
    }
}

/// gcc -pg: `mov x0, x30; bl _mcount` after the frame record is set up. With
/// INSTRFN_EXITS=off (mode 2 of the fast path) nothing is replaced: entries only.
#[test]
fn aarch64_trace_golden_gcc_pg() {
    golden(Compiler::Gcc, &["-pg"], Expect::Exits);
    let dir = workdir("aarch64-trace-exits-off");
    let obj = compile(Compiler::Gcc, &dir, "calltree.c", &["-pg"], "calltree.o");
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for link_kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(AARCH64, &dir, &obj, &[], "calltree", link_kind);
        let (_, trace) = run_traced(&exe, &args, link_kind, &[("INSTRFN_EXITS", "off")], &dir);
        let context = format!("INSTRFN_EXITS=off {link_kind:?}");
        assert_calltree_entries_only(&instrfn_dump(&trace)[0], T, K, &context);
    }
}

/// gmon mode counts the arcs of -finstrument-functions code (call_site -> this_fn) like
/// mcount's, exactly, and `__cyg_profile_func_exit` counts nothing.
#[test]
fn aarch64_gmon_instrument_functions_arcs() {
    let dir = workdir("aarch64-gmon-cyg");
    let obj = compile(
        Compiler::Gcc,
        &dir,
        "calltree.c",
        &["-finstrument-functions"],
        "calltree.o",
    );
    let (t, k) = (T as u64, K as u64);
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let preload = runtime_lib(AARCH64, Lib::Shared).display().to_string();
    for link_kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(AARCH64, &dir, &obj, &[], "calltree", link_kind);
        let env: &[(&str, &str)] = match link_kind {
            Runtime::Preload => &[("LD_PRELOAD", preload.as_str())],
            Runtime::Static => &[],
        };
        run_exe(AARCH64, &exe, &args, env, &dir);
        let arcs = gprof_arcs(AARCH64, &exe, &dir.join("gmon.out"));
        assert_arcs(
            &arcs,
            &calltree_arcs(t, k),
            &format!("gmon -finstrument-functions {link_kind:?}"),
        );
    }
}

/// clang 14 -pg: a bare `bl _mcount` (x0 holds an argument); the caller is in the frame record.
#[test]
fn aarch64_trace_golden_clang_pg() {
    golden(Compiler::Clang, &["-pg"], Expect::Exits);
}

/// -finstrument-functions: `__cyg_profile_func_enter/exit`, ordinary calls, no replacement.
#[test]
fn aarch64_trace_golden_instrument_functions() {
    golden(Compiler::Gcc, &["-finstrument-functions"], Expect::Exits);
    // clang instruments the calls of functions it inlined (atoi in main) unless told otherwise
    golden(
        Compiler::Clang,
        &["-finstrument-functions-after-inlining"],
        Expect::Exits,
    );
}

/// -mbranch-protection=pac-ret: every function signs its return address (paciasp) and
/// authenticates it before it returns, so it is never replaced: the program runs unchanged and
/// every call is an entry without exit (docs: README, asm/aarch64.s). `standard` adds BTI.
#[test]
fn aarch64_trace_golden_pac_ret() {
    golden(
        Compiler::Gcc,
        &["-pg", "-mbranch-protection=pac-ret"],
        Expect::EntriesOnly,
    );
    golden(
        Compiler::Gcc,
        &["-pg", "-mbranch-protection=standard"],
        Expect::EntriesOnly,
    );
    golden(
        Compiler::Clang,
        &["-pg", "-mbranch-protection=pac-ret"],
        Expect::EntriesOnly,
    );
}

/// pac-ret code whose signed return addresses take thousands of different PACs (the stack
/// pointer is the modifier, pacmix.c moves it): with 7 PAC bits about 1 in 128 is zero and
/// looks unsigned. None may be replaced (the call site is known to sign), so the program runs
/// to the end with every signed call entry-only, while the function built without pac-ret in
/// the same program keeps its exits.
#[test]
fn aarch64_trace_pac_ret_zero_pacs() {
    const N: u64 = 3000;
    let dir = workdir("aarch64-trace-pacmix");
    let obj = compile(
        Compiler::Gcc,
        &dir,
        "pacmix.c",
        &["-pg", "-mbranch-protection=pac-ret"],
        "pacmix.o",
    );
    let n = N.to_string();
    for link_kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(AARCH64, &dir, &obj, &[], "pacmix", link_kind);
        let context = format!("pacmix {link_kind:?}");
        let (out, trace) = run_traced(&exe, &[&n], link_kind, &[], &dir);
        let zero: u64 = out
            .trim()
            .strip_prefix(&format!("pacmix {N} zero-pac "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{context}: {out}"));
        assert!(zero > 0, "{context}: no zero PAC in {N} calls: {out}");
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        for (kind, name, calls) in [
            ("entry-no-exit", "main", 1),
            ("entry-no-exit", "mover", N),
            ("entry-no-exit", "signer", N),
            ("entry", "plain", N),
            ("exit", "plain", N),
        ] {
            assert_eq!(
                count_of(&counts, kind, name),
                calls,
                "{context}: {kind} {name}: {counts:?}"
            );
        }
    }
}

/// Builds the exit-trampoline register harness (regs/aarch64_exit.S + aarch64_exit.c) with
/// `extra` objects or libraries.
fn exit_harness(dir: &Path, extra: &[&OsStr], out: &str) -> PathBuf {
    let driver = fixture("regs/aarch64_exit.c");
    let harness = fixture("regs/aarch64_exit.S");
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O1"), driver.as_os_str(), harness.as_os_str()];
    args.extend_from_slice(extra);
    // Eager binding: the loader's lazy PLT resolver (not instrfn) keeps q0-q7 only.
    args.extend([OsStr::new("-Wl,-z,now"), OsStr::new("-lpthread")]);
    cc(AARCH64, &args, &dir.join(out))
}

/// The exit trampoline keeps every register a function returns in (x0-x8 with x8 the indirect
/// result address, v0-v31 whole; z0-z31 and p0-p15 under qemu's default CPU, which has SVE),
/// every callee-saved one, FPCR, FPSR and errno: on its fast path (kind 0), its slow path
/// (kind 1: a frame left behind above the returning one; INSTRFN_BUFSIZE=4096: the chunk
/// fills, also at exits), and the entry's slow path (kind 2: sentinels loaded before the call
/// of _mcount, a new thread for each call), and with INSTRFN_MIN_DURATION=1s (kind 0: every
/// call short, its entry taken back). Statically linked and preloaded; the trace shows every
/// call, or counts it as dropped.
#[test]
fn aarch64_trace_exit_registers() {
    const N: u64 = 1500;
    let dir = workdir("aarch64-trace-exit-regs");
    let lib = runtime_lib(AARCH64, Lib::Static);
    let linked = exit_harness(
        &dir,
        &[lib.as_os_str(), OsStr::new("-ldl")],
        "exit-regs-static",
    );
    let plain = exit_harness(&dir, &[], "exit-regs");
    let n = N.to_string();
    for (exe, link_kind) in [(&linked, Runtime::Static), (&plain, Runtime::Preload)] {
        for (kind, calls, extra) in [
            ("0", N, &[][..]),
            ("1", N, &[][..]),
            ("0", N, &[("INSTRFN_BUFSIZE", "4096")][..]),
            ("1", N, &[("INSTRFN_BUFSIZE", "4096")][..]),
            // (Without call words every exit reserves its event, as before them.)
            (
                "0",
                N,
                &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..],
            ),
            ("2", 40, &[][..]),
            ("0", N, &[("INSTRFN_MIN_DURATION", "1s")][..]),
        ] {
            let context = format!("{} kind {kind} {extra:?}", exe.display());
            let calls_s = calls.to_string();
            let args = [kind, if kind == "2" { "40" } else { n.as_str() }];
            let (out, trace) = run_traced(exe, &args, link_kind, extra, &dir);
            assert_eq!(out.trim(), format!("ok {calls_s} sve"), "{context}");
            let procs = instrfn_dump(&trace);
            assert_eq!(procs.len(), 1, "{context}");
            let counts = assert_balanced(&procs[0], &context);
            let target = if kind == "2" {
                "instrfn_exit_target2"
            } else {
                "instrfn_exit_target"
            };
            let (entries, exits) = (
                count_of(&counts, "entry", target),
                count_of(&counts, "exit", target),
            );
            if extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION") {
                // Every call is short: the exit trampoline takes its entry back (.Lexit_short,
                // with the registers as they must be), counted; the calls recorded are those
                // whose entry was not the newest event any more (the first of a chunk).
                let dropped = meta_dropped(&trace);
                assert_eq!(entries, exits, "{context}");
                assert!(dropped > calls / 2, "{context}: {dropped} dropped");
                assert_eq!(dropped + entries, calls, "{context}: {dropped} dropped");
                continue;
            }
            assert_eq!(entries, calls, "{context}");
            assert_eq!(exits, calls, "{context}");
            let inner = if kind == "1" { calls } else { 0 };
            assert_eq!(
                count_of(&counts, "unwound", "instrfn_exit_inner"),
                inner,
                "{context}"
            );
        }
    }
}

/// A test that cannot fail proves nothing: the harness, linked against a fake `_mcount` whose
/// exit trampoline clobbers one register, must name it: a result register, a callee-saved one,
/// the upper half of a vector result, a Z register beyond its low 128 bits (what a NEON write
/// does), a predicate, and the indirect result address.
#[test]
fn aarch64_exit_harness_catches_a_clobbering_trampoline() {
    let dir = workdir("aarch64-trace-exit-regs-negative");
    let fake = dir.join("fake.S");
    std::fs::write(&fake, FAKE_EXIT).unwrap();
    let exe = exit_harness(&dir, &[fake.as_os_str()], "exit-regs-fake");
    let out = run_exe(AARCH64, &exe, &["0", "3", "0"], &[], &dir);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 3 sve");
    for (which, index, what) in [
        ("1", 3, "x3"),
        ("2", 21, "x21"),
        ("3", 43, "v5 upper half"),
        ("4", 104, "z6 beyond 128 bits"),
        ("5", 132, "p2"),
        ("6", 8, "x8"),
    ] {
        let out = run(&mut command(AARCH64, &exe, &["0", "3", which], &[], &dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what} passed: {stderr}");
        assert!(
            stderr.contains(&format!("register #{index} clobbered")),
            "{what} (#{index}): {stderr}"
        );
    }
}

/// A fake `_mcount` that replaces the return address with its own exit, which clobbers the
/// register `instrfn_exit_fake` selects and returns to the original.
const FAKE_EXIT: &str = "    .arch armv8-a+sve
    .data
    .globl instrfn_exit_fake
instrfn_exit_fake: .word 0
    .p2align 3
fake_ret: .quad 0
    .text
    .globl _mcount
_mcount:
    ldr x16, [x29, #8]
    adrp x17, fake_ret
    str x16, [x17, #:lo12:fake_ret]
    adr x16, fake_exit
    str x16, [x29, #8]
    ret
fake_exit:
    adrp x16, instrfn_exit_fake
    ldr w16, [x16, #:lo12:instrfn_exit_fake]
    cmp w16, #1
    b.ne 1f
    mov x3, xzr
1:  cmp w16, #2
    b.ne 2f
    mov x21, xzr
2:  cmp w16, #3
    b.ne 3f
    mov v5.d[1], xzr
3:  cmp w16, #4
    b.ne 4f
    mov v6.16b, v6.16b
4:  cmp w16, #5
    b.ne 5f
    pfalse p2.b
5:  cmp w16, #6
    b.ne 6f
    mov x8, xzr
6:  adrp x16, fake_ret
    ldr x30, [x16, #:lo12:fake_ret]
    ret
    .section .note.GNU-stack,\"\",%progbits
";

/// The Rust dependency route in trace mode: tests/fixtures/rust-app built with nightly and
/// -Zinstrument-mcount for aarch64 (the runtime comes in as a dependency), run under qemu: each
/// worker thread's events nest, and worker, work_a and work_b have as many exits as entries.
/// (`instrfn dump` prints Rust's mangled names.)
#[test]
fn aarch64_trace_rust_dependency_route() {
    const THREADS: u64 = 2;
    const N: u64 = 20_000;
    let exe = build_instrumented_rust("rust-app", AARCH64.triple, "rust-app");
    let dir = workdir("aarch64-trace-rust");
    let trace = dir.join("trace");
    let trace_s = trace.display().to_string();
    let out = run_exe(
        AARCH64,
        &exe,
        &[&THREADS.to_string(), &N.to_string()],
        &[("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", &trace_s)],
        &dir,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("threads={THREADS} iterations={N}")),
        "{stdout}"
    );
    let procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1);
    let counts = assert_balanced(&procs[0], "aarch64 rust");
    for (function, calls) in [
        ("worker", THREADS),
        ("work_a", THREADS * N),
        ("work_b", THREADS * N),
    ] {
        let mangled = format!("8rust_app{}{function}", function.len());
        let of = |kind: &str| -> u64 {
            counts
                .iter()
                .filter(|((k, name), _)| k == kind && name.contains(&mangled))
                .map(|(_, n)| n)
                .sum()
        };
        assert_eq!(of("entry"), calls, "{function} entries: {counts:?}");
        assert_eq!(of("exit"), calls, "{function} exits: {counts:?}");
        assert_eq!(of("entry-no-exit"), 0, "{function}: {counts:?}");
    }
    assert!(
        !counts.keys().any(|(_, name)| name.contains("7instrfn")),
        "runtime functions were traced: {counts:?}"
    );
}

/// Ways out of a function other than its return (unwind.c, as on x86_64 in tests/host.rs):
/// longjmp, siglongjmp from a handler on an alternate stack, pthread_exit, cancellation, a
/// shadow stack too small, tail calls (on aarch64 the tail-called function's frame record
/// need not lie where the caller's did), backtrace(), and signal handlers in the middle of the
/// thread's own calls. Every entry gets its exit or is closed as unwound, and the program
/// prints what it prints without instrfn; preloaded and linked statically.
#[test]
fn aarch64_trace_survives_longjmp_unwinding_and_tail_calls() {
    let dir = workdir("aarch64-trace-unwind");
    let obj = compile(
        Compiler::Gcc,
        &dir,
        "unwind.c",
        &["-pg", "-rdynamic"],
        "unwind.o",
    );
    for link_kind in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(AARCH64, &dir, &obj, &["-rdynamic"], "unwind", link_kind);
        let label = format!("aarch64 {link_kind:?}");
        assert_unwind_runs(AARCH64, &exe, &dir, 300_000, &label, |args, env| {
            let (out, trace) = run_traced(&exe, args, link_kind, env, &dir);
            (out, instrfn_dump(&trace).remove(0))
        });
    }
}

/// Large frames with signal handlers running instrumented code on the thread's own stack
/// (bigframe.c). A function whose frame record lies deeper below its CFA than a signal frame
/// is long, or whose prologue moves sp in a way the classifier does not follow (gcc: `mov x12,
/// #n; sub sp, sp, x12`, and the record below the locals), is entry-only; clang's big frame
/// (record above the locals, `sub sp, sp, #4, lsl #12`) keeps its exits. Handlers that
/// interrupt anywhere, the return of big() included, never disturb the frames they interrupt.
#[test]
fn aarch64_trace_big_frames_and_signal_handlers() {
    const N: u64 = 100_000;
    let n = N.to_string();
    for (compiler, big_exits) in [(Compiler::Gcc, false), (Compiler::Clang, true)] {
        let dir = workdir(&format!("aarch64-trace-bigframe-{compiler:?}"));
        let obj = compile(compiler, &dir, "bigframe.c", &["-pg"], "bigframe.o");
        for link_kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(AARCH64, &dir, &obj, &[], "bigframe", link_kind);
            let context = format!("{compiler:?} {link_kind:?}");
            let (out, trace) = run_traced(&exe, &[&n], link_kind, &[], &dir);
            let handled: u64 = out
                .trim()
                .strip_prefix(&format!("bigframe {N} handled "))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{context}: {out}"));
            let counts = assert_balanced(&instrfn_dump(&trace)[0], &context);
            let big = if big_exits {
                [("entry", "big", N), ("exit", "big", N)]
            } else {
                [("entry-no-exit", "big", N), ("exit", "big", 0)]
            };
            for (kind, name, calls) in big.into_iter().chain([
                ("entry", "small", N),
                ("exit", "small", N),
                ("exit", "handled", handled),
                ("exit", "on_alarm", handled),
            ]) {
                assert_eq!(
                    count_of(&counts, kind, name),
                    calls,
                    "{context}: {kind} {name}: {counts:?}"
                );
            }
        }
    }
}

/// C++ exceptions through -pg frames (throw.cpp, as on x86_64): thrown through destructors
/// (cleanup pads, _Unwind_Resume), caught, rethrown. The same output; every frame closed, the
/// thrown-through ones as unwound, the catching ones returning. Preloaded and static.
#[test]
fn aarch64_trace_survives_cpp_exceptions() {
    let dir = workdir("aarch64-trace-cpp");
    let gxx = "aarch64-linux-gnu-g++";
    cross_cpp_exception_runs(AARCH64, gxx, &["-pg"], &dir, &[], |exe, args, link_kind| {
        let (out, trace) = run_traced(exe, args, link_kind, &[], &dir);
        (out, instrfn_dump(&trace).remove(0))
    });
}

/// C++ exceptions through -pg frames of a program linked with -static-libgcc
/// -static-libstdc++, preloaded (its unwinder walks through the exit trampoline with the return
/// pad's unwind info, asm/aarch64.s; before, the first throw ended in std::terminate).
#[test]
fn aarch64_trace_survives_cpp_exceptions_with_a_static_libgcc() {
    static_libgcc_cpp_runs(AARCH64, "aarch64-linux-gnu-g++", &["-pg"]);
}

/// Rust panics caught by catch_unwind, resume_unwind and std's Backtrace through instrumented
/// frames (rust-app, as on x86_64): the same output, every frame of dive closed (unwound by
/// the panics, returning after the backtrace).
#[test]
fn aarch64_trace_survives_rust_panics_and_backtraces() {
    let exe = build_instrumented_rust("rust-app", AARCH64.triple, "rust-app");
    let dir = workdir("aarch64-trace-rust-panics");
    rust_panic_runs(AARCH64, &exe, &dir, "aarch64", true);
    // Linked statically (crt-static): libgcc_eh is in the program, no wrapper reaches it, and
    // it walks through the exit trampoline with the return pad's unwind info (asm/aarch64.s).
    let extra = "-C target-feature=+crt-static";
    let exe = build_instrumented_rust_with("rust-app", AARCH64.triple, "rust-app", extra);
    let dir = workdir("aarch64-trace-rust-panics-crt-static");
    rust_panic_runs(AARCH64, &exe, &dir, "aarch64 crt-static", true);
}

/// Signal handlers that trace between any two instructions of the trampolines (tracesig.c, as
/// on x86_64, riscv64 and s390x; qemu in single-step mode delivers a signal after any
/// instruction, and the sender signals again as soon as a handler ran, so handlers often run
/// back to back at one point): each handler makes about 200 events, so with 4 KiB chunks (252
/// events) it usually takes the next chunk while the code it interrupted holds a reserved
/// event in the one before, or the two before; and it pushes shadow entries above one the
/// interrupted code is pushing, or popping. The last round walks the stack with backtrace() in
/// every handler first (tracesig.c `walk`), which puts the original return addresses back and
/// the exit trampoline again afterwards, also while the interrupted code is in the middle of
/// its push or pop. gcc -pg, clang -pg (the caller in the frame record), -finstrument-functions
/// (no shadow entries); preloaded and linked. Every run: status 0, a nested trace with every
/// exit (nothing unwound, no entry without exit), the exact counts, nothing lost. Before the
/// push wrote the slot last and pops zeroed it, every -pg backtrace round and about one plain
/// -pg round in seven aborted ("lost track of a return address"): a handler took a reserved
/// entry's stale or early slot for a live frame's (closed it, or put the exit trampoline into
/// the return slot of a call that then went to the slow path and got none).
#[test]
fn aarch64_trace_signal_handlers_interrupt_trampolines_anywhere() {
    for (compiler, flags) in [
        (Compiler::Gcc, &["-pg"][..]),
        (Compiler::Clang, &["-pg"][..]),
        (Compiler::Gcc, &["-finstrument-functions"][..]),
    ] {
        let name = format!("aarch64-trace-tracesig-{compiler:?}{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(compiler, &dir, "tracesig.c", flags, "tracesig.o");
        for link_kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(AARCH64, &dir, &obj, &[], "tracesig", link_kind);
            let preload = link_kind == Runtime::Preload;
            let name = format!("{name} {link_kind:?}");
            tracesig_singlestep_rounds(AARCH64, &exe, preload, &dir, &name, "walk", |_, _| {});
        }
    }
}

/// INSTRFN_MIN_DURATION (asm/aarch64.s `.Lexit_short`): sleeps.c with a threshold of 5 ms,
/// between its 1000 calls of tiny() (nanoseconds) and its naps (10 and 30 ms): the exit
/// trampoline takes back the entry of every short call, so the trace holds exactly the naps
/// and main, and every call left out is counted (`dropped` in the meta file: recorded +
/// dropped = the calls of a run without the threshold, exactly). gcc and clang -pg, preloaded
/// and linked. -finstrument-functions code records every call, as on every architecture (its
/// exit hook has no shadow entry that ties it to its own entry).
#[test]
fn aarch64_trace_min_duration_leaves_short_calls_out() {
    for (compiler, flags) in [
        (Compiler::Gcc, &["-pg"][..]),
        (Compiler::Clang, &["-pg"][..]),
        (Compiler::Gcc, &["-finstrument-functions"][..]),
    ] {
        let name = format!("aarch64-trace-min-duration-{compiler:?}{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(compiler, &dir, "sleeps.c", flags, "sleeps.o");
        let cyg = flags == ["-finstrument-functions"];
        for link_kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(AARCH64, &dir, &obj, &[], "sleeps", link_kind);
            let context = format!("{name} {link_kind:?}");
            min_duration_sleeps_runs(cyg, &context, |env| {
                run_traced(&exe, &[], link_kind, env, &dir)
            });
        }
    }
}

/// INSTRFN_MIN_DURATION under signal handlers that trace between any two instructions of the
/// trampolines (tracesig.c, qemu single-stepping, 4 KiB chunks; see
/// aarch64_trace_signal_handlers_interrupt_trampolines_anywhere): a handler that comes while
/// the exit trampoline takes an entry back (between its check of the newest event and the
/// stxr that moves the position back) either leaves events, and then the entry stays and gets
/// its exit, or had all its calls taken back too, and then the entry goes as well. At 1 s
/// every call is short; at 100 µs handler_fn (100 calls of leaf) is mostly long and work and
/// leaf are short, so handlers often leave events in the middle of a take-back; the last
/// round walks the stack in every handler. Every run: a nested trace with every exit, nothing
/// lost, and every call recorded or counted as dropped, exactly.
#[test]
fn aarch64_trace_min_duration_signal_handlers_interrupt_the_take_back() {
    for (compiler, flags) in [
        (Compiler::Gcc, &["-pg"][..]),
        (Compiler::Clang, &["-pg"][..]),
    ] {
        let name = format!("aarch64-trace-min-duration-tracesig-{compiler:?}");
        let dir = workdir(&name);
        let obj = compile(compiler, &dir, "tracesig.c", flags, "tracesig.o");
        let exe = link_runtime(AARCH64, &dir, &obj, &[], "tracesig", Runtime::Static);
        min_duration_tracesig_rounds(AARCH64, &exe, &dir, &name, "walk");
    }
}

#[test]
fn aarch64_a_full_trace_counts_every_event() {
    let dir = workdir("aarch64-trace-full");
    let obj = compile(Compiler::Gcc, &dir, "calltree.c", &["-pg"], "calltree.o");
    assert_full_trace_counted(AARCH64, &obj, &dir, "aarch64");
}

/// INSTRFN_MIN_DURATION's take-back held up at one exact instruction (exit_window.c
/// `take-back`: a breakpoint written over instrfn_aarch64_exit_take_back, its handler under qemu
/// filling many 4 KiB chunks there, which the runtime retires, commits and reuses while the
/// interrupted trampoline goes on; see tests/host.rs's x86_64 test of the same): every event
/// in the trace exactly once, with the collector and without.
#[test]
fn aarch64_trace_take_back_survives_a_handler_that_fills_chunks() {
    take_back_rounds(AARCH64);
}

/// A traced, stack-walking signal handler at each instruction of the trace fast paths in turn
/// (bpsweep.c: a breakpoint written over each instruction of _mcount's fast path and the exit
/// trampoline's, and of -finstrument-functions' hooks, the XRay sleds and trampolines too (natively patched: clang -fxray-instrument, the runtime linked in), one call each, as tests/host.rs's
/// sweep does with the trap flag): every call recorded exactly, also with 4 KiB chunks filled and
/// recycled under the interrupted code and with INSTRFN_MIN_DURATION taking calls back.
#[test]
fn aarch64_trace_survives_a_traced_handler_at_every_instruction() {
    bpsweeps(AARCH64, &[Sweep::Mcount, Sweep::Cyg, Sweep::Xray]);
}

/// Compact events on aarch64 (docs/trace-format.md, chunk versions 2 and 3), as tests/host.rs's
/// x86_64 test: tests/fixtures/c/compact.c, preloaded, with a -pg library: every call,
/// balanced and named, the sleep's traced length the one the program measured, 6N + 6 events
/// in the chunk. Under qemu the counter runs at 62.5 MHz, so its 2^30 ticks of time base reach
/// are 17 s, more than the test sleeps, and qemu maps the library within the code base's reach:
/// every event is short here (all 6006 before call words). The first loop's calls of near(),
/// which record nothing inside them, are call words (one word for an entry and its exit); the
/// library's are not (more than 4 MiB from the code base's middle). The long form's code is
/// the one entries without exit take (the pac-ret golden tests, every event long). The same
/// built with -finstrument-functions: `__cyg_profile_func_exit` makes the call words
/// (MERGE_CALL, as the mcount exit does; none before).
#[test]
fn aarch64_compact_events_take_the_long_form_where_they_must() {
    const N: u64 = 1000;
    for flag in ["-pg", "-finstrument-functions"] {
        let c = compact_under_qemu(AARCH64, N, flag);
        assert!(
            c.calls > N * 9 / 10 && c.calls <= 2 * N && c.short + 2 * c.calls >= 4 * N,
            "{flag}: {c:?}"
        );
    }
}

/// The exit trampoline that makes a call word held up at its store (exit_window.c `merge`, a
/// breakpoint written over it) while the handler fills many 4 KiB chunks, which the runtime
/// retires, commits and reuses, the collector off and on: every event in the trace exactly
/// once, the call words among them (asm/aarch64.s MERGE_CALL's pin; tests/host.rs has the
/// x86_64 one and the case without the pin).
#[test]
fn aarch64_trace_call_word_survives_a_handler_that_fills_chunks() {
    // (Nearly every window: a call longer than a call word's 2^12 ticks, 65 µs of qemu's
    // 62.5 MHz counter, makes none, as when stepped's entry takes the next chunk and commits
    // one under qemu. Retranslating the code the breakpoint changed took hundreds of µs inside
    // the call, and 0 to 16 windows by the code's layout, until exit_window.c's warm() ran it
    // first: 16 of 16 since.)
    merge_window_rounds(AARCH64, 14);
}
