//! Ways out of a function other than its return, under trace mode (where the runtime replaces
//! return addresses): longjmp and siglongjmp, pthread_exit and cancellation, a shadow stack too
//! small, tail calls, backtrace() and unwinders' walks, C++ exceptions (also through a program's
//! own static unwinder), Rust panics, Lua's errors and coroutines (setjmp/longjmp), and
//! swapcontext coroutines. Every entry gets its exit or is closed as unwound, and the program
//! prints what it prints without instrfn. The return pad's unwind info in the runtime's
//! assembly is its generator's output.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

feature_tests! {
    trace_unwinding:
    longjmp_unwinding_and_tail_calls(x86_64, aarch64, riscv64, s390x),
    cpp_exceptions(x86_64, aarch64, riscv64, s390x),
    cpp_exceptions_static_libgcc(x86_64, aarch64, riscv64, s390x),
    rust_panics_and_backtraces(x86_64, aarch64),
    lua_errors_and_coroutines(x86_64),
    swapcontext_coroutines(x86_64),
    unwinder_sees_the_original_return_addresses(s390x),
    tail_calls_end_their_callers(s390x),
    return_pad_cfi_is_its_generators(x86_64, aarch64, riscv64, s390x),
}

/// The flags of the -pg builds of `arch`: on s390x both entry kinds gcc emits, `_mcount`
/// before the prologue (the return address at 8(%r15), reloaded into r14 after the call) and
/// `__fentry__` as the first instruction (the return address in r14).
fn pg_builds(arch: Arch) -> &'static [&'static [&'static str]] {
    if arch == S390X {
        &[&["-pg"], &["-pg", "-mfentry"]]
    } else {
        &[&["-pg"]]
    }
}

/// `arch`'s g++.
fn gxx(arch: Arch) -> String {
    arch.cc.replace("gcc", "g++")
}

/// unwind.c (compiled with -pg -rdynamic, linked with -rdynamic) for each of its
/// [`unwind_cases`]: longjmp, siglongjmp from a handler on an alternate stack, pthread_exit,
/// cancellation (both through the wrapped _Unwind_ForcedUnwind), a shadow stack too small,
/// tail calls (on aarch64 the tail-called function's frame record need not lie where the
/// caller's did; on s390x `jg` leaves the trampoline in r14 or at 8(%r15) for the callee),
/// backtrace() (glibc's, through the wrapped entry point: the walk sees the real callers, and
/// the frames return traced), and signal handlers in the middle of the thread's own calls
/// (natively ten times the calls of work the qemu runs make). x86_64 under `instrfn record`;
/// the others preloaded and linked statically, for each entry kind.
fn longjmp_unwinding_and_tail_calls(arch: Arch) {
    if arch == X86_64 {
        let dir = workdir("trace-unwind");
        let exe = build_plain(
            &dir,
            "unwind.c",
            &["-pg", "-rdynamic"],
            &["-rdynamic", "-lpthread"],
        );
        assert_unwind_runs(arch, &exe, &dir, 3_000_000, "x86_64", |args, env| {
            let (out, trace) = record_trace(&exe, args, env, &dir);
            (stdout_of(&out), instrfn_dump(&trace).remove(0))
        });
        return;
    }
    for cflags in pg_builds(arch) {
        let name = format!("{}-trace-unwind{}", arch.name, cflags.join(""));
        let dir = workdir(&name);
        let flags = [*cflags, &["-rdynamic"], arch_flags(arch)].concat();
        let obj = compile(arch, Compiler::Gcc, &dir, "unwind.c", &flags, "unwind.o");
        for link in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &["-rdynamic"], "unwind", link);
            let label = format!("{name} {link:?}");
            assert_unwind_runs(arch, &exe, &dir, 300_000, &label, |args, env| {
                let context = format!("{label}: {}", args.join(" "));
                let (out, trace) = run_traced(arch, &exe, args, link, env, &dir);
                (stdout_of(&out), one_process(arch, &trace, &context))
            });
        }
    }
}

/// C++ exceptions (throw.cpp) thrown through -pg frames with destructors (cleanup pads:
/// _Unwind_Resume), caught, and rethrown (_Unwind_Resume_or_Rethrow): the same output, every
/// frame closed, the thrown-through ones as unwound (at the catch: `__cxa_begin_catch`), the
/// catching ones traced returning. x86_64 under `instrfn record`; the others built with the
/// cross g++, preloaded and linked statically. On s390x (mcount and fentry code) the unwinder
/// reads each frame's return address from r14's save slot, where src/trace.rs put the
/// original back first; there every thrower frame's entry and after()'s exits are counted too.
fn cpp_exceptions(arch: Arch) {
    if arch == X86_64 {
        let context = "c++ shared";
        let dir = workdir("trace-cpp-shared");
        let exe = build_plain(&dir, "throw.cpp", &["-pg"], &[]);
        let args = ["4", "6"];
        let plain = run_ok(Command::new(&exe).args(args).current_dir(&dir));
        assert_eq!(stdout_of(&plain), "caught 8\n");
        let (out, trace) = record_trace(&exe, &args, &[], &dir);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
        let counts = assert_balanced(&instrfn_dump(&trace)[0], context);
        assert_cpp_exception_counts(&counts, context);
        return;
    }
    let extra: &[(&str, &str, u64)] = if arch == S390X {
        &[("entry", "_Z7throwerm", 4 * 9), ("exit", "_Z5afterv", 4)]
    } else {
        &[]
    };
    for cflags in pg_builds(arch) {
        let name = format!("{}-trace-cpp{}", arch.name, cflags.join(""));
        let dir = workdir(&name);
        let flags = [arch_flags(arch), *cflags].concat();
        cross_cpp_exception_runs(arch, &gxx(arch), &flags, &dir, extra, |exe, args, link| {
            let context = format!("{name} {link:?}");
            let (out, trace) = run_traced(arch, exe, args, link, &[], &dir);
            (stdout_of(&out), one_process(arch, &trace, &context))
        });
    }
}

/// C++ exceptions through -pg frames of a program linked with -static-libgcc
/// -static-libstdc++ (as programs that ship as one file are), preloaded (x86_64: under
/// `instrfn record`): its unwinder is in the program, which no wrapper reaches, and walks
/// through the exit trampoline with the return pad's unwind info in the runtime's assembly.
/// On s390x for mcount and fentry code.
fn cpp_exceptions_static_libgcc(arch: Arch) {
    if arch != X86_64 {
        for cflags in pg_builds(arch) {
            static_libgcc_cpp_runs(arch, &gxx(arch), cflags);
        }
        return;
    }
    let context = "c++ static-libgcc";
    let dir = workdir("trace-cpp-static-libgcc");
    let link = ["-static-libgcc", "-static-libstdc++"];
    let exe = build_plain(&dir, "throw.cpp", &["-pg"], &link);
    let args = ["4", "6"];
    let plain = run_ok(Command::new(&exe).args(args).current_dir(&dir));
    assert_eq!(stdout_of(&plain), "caught 8\n");
    let (out, trace) = record_trace(&exe, &args, &[], &dir);
    assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
    let counts = assert_balanced(&instrfn_dump(&trace)[0], context);
    assert_cpp_exception_counts(&counts, context);
}

/// A Rust program linked with the runtime (rust-app): panics caught by catch_unwind,
/// resume_unwind (no panic hook runs), std's Backtrace, and panics on 4 threads at once, all
/// through instrumented frames: every frame closes, backtraces show the real callers (the
/// program's output, its backtrace's frames included, is the plain run's). On glibc the
/// unwinder is libgcc_s (wrapped); on musl it is linked into the program (LLVM's libunwind),
/// cannot be wrapped, and walks through the exit trampoline with its return pad's unwind info.
/// glibc linked statically (crt-static): libgcc_eh is in the program too, and takes the same
/// unwind info (whose frame needs a CFA of its own there: libgcc takes a frame with the
/// returning function's CFA for the catching frame, and aborts).
fn rust_panics_and_backtraces(arch: Arch) {
    let triples: &[&str] = if arch == X86_64 {
        &["x86_64-unknown-linux-gnu", "x86_64-unknown-linux-musl"]
    } else {
        &[arch.triple]
    };
    for triple in triples {
        let exe = build_instrumented_rust("rust-app", triple, "rust-app");
        let dir = workdir(&format!("{}-trace-rust-{triple}", arch.name));
        rust_panic_runs(arch, &exe, &dir, triple, true);
    }
    let extra = "-C target-feature=+crt-static";
    let exe = build_instrumented_rust_with("rust-app", arch.triple, "rust-app", extra);
    let dir = workdir(&format!("{}-trace-rust-crt-static", arch.name));
    rust_panic_runs(arch, &exe, &dir, &format!("{} crt-static", arch.name), true);
}

/// The Lua 5.4 sources of the lua-src crate (a dev-dependency), found with `cargo metadata`.
fn lua_sources() -> PathBuf {
    let out = run_ok(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["metadata", "--format-version", "1", "--locked"])
            .current_dir(root()),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let manifest = text
        .split("\"manifest_path\":\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .find(|p| p.contains("/lua-src-547."))
        .expect("lua-src is a dev-dependency: cargo metadata names its manifest");
    let src = Path::new(manifest).parent().unwrap().join("lua-5.4.7");
    assert!(src.join("lua.h").is_file(), "{}", src.display());
    src
}

/// Lua 5.4 built with -pg: its pcall/error and coroutines are setjmp/longjmp in C. Under
/// instrfn record the interpreter prints exactly what it prints without it, exits with the
/// same status (also for an uncaught error), and every thread's trace nests, with the
/// frames longjmp skipped closed as unwound.
fn lua_errors_and_coroutines(_: Arch) {
    let dir = workdir("trace-lua");
    let src = lua_sources();
    let mut objs = Vec::new();
    let mut c_files: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "c")
                && !["lua.c", "luac.c"].contains(&p.file_name().unwrap().to_str().unwrap())
        })
        .collect();
    c_files.push(fixture("c/lua_driver.c"));
    for c in &c_files {
        let obj = dir.join(c.file_name().unwrap()).with_extension("o");
        run_ok(
            Command::new("gcc")
                .args(["-O2", "-pg", "-DLUA_USE_LINUX", "-c"])
                .arg("-I")
                .arg(&src)
                .arg(c)
                .arg("-o")
                .arg(&obj),
        );
        objs.push(obj);
    }
    let lua = dir.join("lua-pg");
    run_ok(
        Command::new("gcc")
            .args(&objs)
            .args(["-lm", "-ldl", "-o"])
            .arg(&lua),
    );
    for (script, status) in [("errors.lua", 0), ("fails.lua", 1)] {
        let script = fixture(&format!("lua/{script}"));
        let plain = run(Command::new(&lua).arg(&script).current_dir(&dir));
        assert_eq!(plain.status.code(), Some(status), "{}", stderr_of(&plain));
        let trace = dir.join("trace");
        let out = run(Command::new(instrfn_cli())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(&lua)
            .arg(&script)
            .current_dir(&dir));
        let context = script.display().to_string();
        assert_eq!(out.status.code(), Some(status), "{context}");
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}: stdout");
        // The interpreter's stderr, then instrfn's summary line.
        let err = stderr_of(&out);
        let (program, summary) = err.rsplit_once("instrfn: ").unwrap();
        assert_eq!(program, stderr_of(&plain), "{context}: stderr");
        assert!(summary.contains(" 0 lost"), "{context}: {summary}");
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        assert_eq!(count_of(&counts, "entry", "main"), 1, "{context}");
        if status == 0 {
            // 2000 + 200 + 200 + 1 errors thrown (and those in coroutines): each a longjmp
            // from luaD_throw, which never returns.
            assert!(
                count_of(&counts, "unwound", "luaD_throw") >= 2401,
                "{context}: {:?}",
                count_of(&counts, "unwound", "luaD_throw")
            );
            assert_eq!(count_of(&counts, "exit", "luaD_throw"), 0, "{context}");
            assert!(
                count_of(&counts, "entry", "lua_resume") >= 1000,
                "{context}"
            );
        }
    }
}

/// Two coroutines on stacks of their own (in the heap, in mappings of their own, in .bss)
/// interleave their calls on one thread: each returns through its own entry (the newer
/// entries of the other coroutine stay), nothing aborts, the output is the program's own.
/// Frames a longjmp skips on a coroutine's stack are not judged gone by address (such a
/// stack may lie anywhere): they stay open.
/// With `walk` every leaf() call also runs backtrace(), whose walk passes the tombstone
/// that fa's entry becomes when fa returns under fb's newer entry: the walk's end looks at
/// live entries only (a tombstone's slot, 1, is no address).
fn swapcontext_coroutines(arch: Arch) {
    let dir = workdir("trace-coroutines");
    let exe = build_c(arch, &dir, "coroutines.c", &[], Link::Preload);
    for (kind, walk) in [("heap", ""), ("mmap", ""), ("static", ""), ("heap", "walk")] {
        let args = [kind, "100", walk];
        let args = &args[..if walk.is_empty() { 2 } else { 3 }];
        let plain = run_ok(Command::new(&exe).args(args).current_dir(&dir));
        let (out, trace) = record_trace(&exe, args, &[], &dir);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{kind} {walk}");
        let procs = instrfn_dump(&trace);
        let mut counts = std::collections::BTreeMap::<(String, String), u64>::new();
        for e in procs[0].threads.values().flatten() {
            *counts.entry((e.kind.clone(), e.name.clone())).or_default() += 1;
        }
        for (kind_, name, n) in [
            ("entry", "fa", 100),
            ("exit", "fa", 100),
            ("entry", "fb", 100),
            ("exit", "fb", 100),
            ("entry", "leaf", 400),
            ("exit", "leaf", 400),
            ("entry", "dive", 40),
            ("exit", "dive", 0),
            ("entry", "run_a", 1),
            ("exit", "run_a", 0),
            ("exit", "main", 1),
        ] {
            assert_eq!(count_of(&counts, kind_, name), n, "{kind}: {kind_} {name}");
        }
    }
}

/// The policy for unwinding (s390x's assembly, "Trace mode"): a frame's slot is r14's slot
/// in its register save area, where every non-leaf function's prologue saves r14, for mcount
/// and fentry code alike. So what src/trace.rs puts back before an unwinder walks the stack
/// is what the unwinder reads, and the walk goes through every traced frame (the exit
/// trampoline's CFI would end it). The frames return normally afterwards (trampoline back in
/// place: every exit is traced). Linked statically: the entry points around an unwinder that
/// "told" calls by hand are internal to the runtime.
fn unwinder_sees_the_original_return_addresses(arch: Arch) {
    for flags in [&["-pg"][..], &["-pg", "-mfentry"][..]] {
        let name = format!("s390x-trace-unwalk{}", flags.join(""));
        let dir = workdir(&name);
        let pg = [flags, arch_flags(arch)].concat();
        let obj = compile(arch, Compiler::Gcc, &dir, "unwalk.c", &pg, "unwalk.o");
        let walker = compile(
            arch,
            Compiler::Gcc,
            &dir,
            "unwind_walk.c",
            arch_flags(arch),
            "unwind_walk.o",
        );
        let lib = runtime_lib(arch, Lib::Static);
        let exe = cc(
            arch,
            &[
                OsStr::new("-rdynamic"),
                obj.as_os_str(),
                walker.as_os_str(),
                lib.as_os_str(),
                OsStr::new("-lpthread"),
                OsStr::new("-ldl"),
            ],
            &dir.join("unwind"),
        );
        let trace = dir.join("trace");
        let out = run_in_trace_mode(arch, &exe, &[], false, &[], &dir, &trace);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let walk = |label: &str| -> Vec<String> {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("walk {label}:")))
                .unwrap_or_else(|| panic!("{name}: no {label} walk in {stdout}"))
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        // "alone": the program's own _Unwind_Backtrace goes through the runtime's wrapper
        // (src/interpose.c), which puts the return addresses back as "told" does by hand.
        for label in ["alone", "told"] {
            let frames = walk(label);
            let at = frames
                .iter()
                .position(|n| n == "f3")
                .unwrap_or_else(|| panic!("{name} {label}: {frames:?}"));
            assert_eq!(
                &frames[at..at + 4],
                &["f3", "f2", "f1", "main"],
                "{name} {label}: {frames:?}"
            );
        }
        let procs = instrfn_dump(&trace);
        let seq: Vec<(String, String)> = procs[0]
            .threads
            .values()
            .next()
            .unwrap()
            .iter()
            .map(|e| (e.kind.clone(), e.name.clone()))
            .collect();
        let want: Vec<(String, String)> = [
            ("entry", "main"),
            ("entry", "f1"),
            ("entry", "f2"),
            ("entry", "f3"),
            ("exit", "f3"),
            ("exit", "f2"),
            ("exit", "f1"),
            ("exit", "main"),
        ]
        .iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
        assert_eq!(seq, want, "{name}");
    }
}

/// gcc -O2 ends f in `jg g` and g in `jg h`: each tail call leaves the frame's slot holding
/// the exit trampoline, with the calling function's shadow entry on the same slot. The
/// slow path closes that function (its exit) and gives the new one its return address, so
/// h returns straight to main through the trampoline.
fn tail_calls_end_their_callers(arch: Arch) {
    for flags in [&["-pg"][..], &["-pg", "-mfentry"][..]] {
        let name = format!("s390x-trace-tailcall{}", flags.join(""));
        let dir = workdir(&name);
        let pg = [flags, arch_flags(arch)].concat();
        let obj = compile(arch, Compiler::Gcc, &dir, "tailcall.c", &pg, "tailcall.o");
        let exe = link_runtime(arch, &dir, &obj, &[], "tailcall", Runtime::Static);
        let trace = dir.join("trace");
        let out = run_in_trace_mode(arch, &exe, &[], false, &[], &dir, &trace);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "result 9");
        let procs = instrfn_dump(&trace);
        let seq: Vec<String> = procs[0]
            .threads
            .values()
            .next()
            .unwrap()
            .iter()
            .map(|e| format!("{} {}", e.kind, e.name))
            .collect();
        assert_eq!(
            seq,
            [
                "entry main",
                "entry f",
                "exit f",
                "entry g",
                "exit g",
                "entry h",
                "exit h",
                "exit main"
            ],
            "{name}"
        );
    }
}

/// The return pad's FDE in the runtime's assembly for `arch` holds
/// scripts/return-pad-cfi.py's output (its branch offsets are computed there): they must not
/// drift apart.
fn return_pad_cfi_is_its_generators(arch: Arch) {
    require_tool("python3");
    let script = root().join("scripts/return-pad-cfi.py");
    let out = run_ok(Command::new("python3").arg(script).arg(arch.name));
    let generated = String::from_utf8(out.stdout).unwrap();
    assert!(generated.lines().count() > 2, "{generated}");
    assert!(
        asm_source(arch).contains(&generated),
        "the runtime's assembly for {} does not hold scripts/return-pad-cfi.py's output:\n\
         {generated}",
        arch.name
    );
}

/// One run of unwind.c: its arguments, the (kind, function, events) expected, extra environment.
type UnwindCase = (
    &'static [&'static str],
    &'static [(&'static str, &'static str, u64)],
    &'static [(&'static str, &'static str)],
);

/// The runs of unwind.c (compiled with -pg -rdynamic, linked with -rdynamic) that the trace
/// tests of every architecture make, with the exact events each must leave on `arch`: longjmp,
/// siglongjmp from a handler on an alternate stack, pthread_exit, cancellation, a shadow stack
/// too small (INSTRFN_MAX_DEPTH=4: the frames beyond it are entries without exit), tail calls,
/// backtrace(). The same on every architecture but where a case says otherwise.
fn unwind_cases(arch: Arch) -> [UnwindCase; 7] {
    let tailcall: UnwindCase = if arch.triple == RISCV64.triple {
        // riscv64: tail_g, tail-called by tail_f, runs in tail_f's frame with the exit
        // trampoline already in its return slot (the same CFA - 8), so it is an entry without
        // exit and its return is tail_f's exit (riscv64's documented entry-only case,
        // src/arch/riscv64.rs `instrfn_riscv64_trace_path`).
        (
            &["tailcall", "7"],
            &[
                ("entry", "tail_f", 7),
                ("exit", "tail_f", 7),
                ("entry-no-exit", "tail_g", 7),
                ("exit", "tail_g", 0),
            ],
            &[],
        )
    } else {
        (
            &["tailcall", "7"],
            &[("exit", "tail_f", 7), ("exit", "tail_g", 7)],
            &[],
        )
    };
    let backtrace: UnwindCase = if arch.triple == X86_64.triple {
        // x86_64: gcc inlines print_backtrace (static, not `noinline`) into its caller, so it
        // has no events of its own. The cross gccs (aarch64, riscv64, s390x) keep it a call.
        (&["backtrace", "1", "5"], &[("exit", "dive", 6)], &[])
    } else {
        (
            &["backtrace", "1", "5"],
            &[("exit", "dive", 6), ("exit", "print_backtrace", 1)],
            &[],
        )
    };
    [
        (
            &["longjmp", "5", "6"],
            &[
                ("entry", "dive", 35),
                ("unwound", "dive", 35),
                ("exit", "after", 5),
            ],
            &[],
        ),
        (
            &["siglongjmp", "5", "6"],
            &[
                ("entry", "dive", 35),
                ("unwound", "dive", 35),
                ("unwound", "on_signal", 5),
                ("exit", "after", 5),
            ],
            &[],
        ),
        (
            &["exit", "3", "4"],
            &[
                ("entry", "dive", 15),
                ("unwound", "dive", 15),
                ("unwound", "thread_dive", 3),
            ],
            &[],
        ),
        (
            &["cancel", "3", "4"],
            &[
                ("entry", "dive", 15),
                ("unwound", "dive", 15),
                ("unwound", "thread_dive", 3),
            ],
            &[],
        ),
        (
            &["recurse", "2", "10"],
            &[
                ("entry", "dive", 6),
                ("exit", "dive", 6),
                ("entry-no-exit", "dive", 16),
            ],
            &[("INSTRFN_MAX_DEPTH", "4")],
        ),
        tailcall,
        backtrace,
    ]
}

/// Runs unwind.c `exe` (built for `arch`) for each of its [`unwind_cases`], without instrfn (in
/// `dir`) and in trace mode through `traced(args, env)`, which returns the program's output and
/// its trace's one process: every case prints what it prints without instrfn and leaves a
/// balanced trace ([`assert_balanced`]: every entry gets its exit or is closed as unwound) with
/// exactly the case's counts. Then `signal <signals>` in trace mode: signal handlers run
/// instrumented code in the middle of the thread's own calls; the trace is balanced, more than
/// 10 handlers are traced (returning, but on riscv64: see below), and all `signals` calls of
/// work return.
fn assert_unwind_runs(
    arch: Arch,
    exe: &Path,
    dir: &Path,
    signals: u64,
    label: &str,
    traced: impl Fn(&[&str], &[(&str, &str)]) -> (String, DumpProcess),
) {
    for (args, expected, env) in unwind_cases(arch) {
        let context = format!("{label}: {}", args.join(" "));
        let plain = run_exe(arch, exe, args, &[], dir);
        let (out, p) = traced(args, env);
        assert_eq!(
            out,
            String::from_utf8_lossy(&plain.stdout),
            "{context}: the program's output"
        );
        assert_counts(&assert_balanced(&p, &context), expected, &context);
    }
    let context = format!("{label}: signal {signals}");
    let (out, p) = traced(&["signal", &signals.to_string()], &[]);
    let handled = assert_balanced(&p, &context);
    if arch.triple == RISCV64.triple {
        // riscv64: on_alarm tail-calls handled (gcc -O2): as with tail_g in unwind_cases,
        // handled is an entry without exit and its return is on_alarm's exit.
        let n = count_of(&handled, "entry-no-exit", "handled");
        assert!(n > 10, "{context}: {handled:?} {out}");
        assert_eq!(count_of(&handled, "exit", "on_alarm"), n, "{context}");
        assert_eq!(count_of(&handled, "exit", "handled"), 0, "{context}");
    } else {
        assert!(
            count_of(&handled, "exit", "handled") > 10,
            "{context}: {handled:?} {out}"
        );
    }
    assert_eq!(
        count_of(&handled, "exit", "work"),
        signals,
        "{context}: {handled:?}"
    );
}

/// Checks the trace of throw.cpp `4 6` (`counts` from [`assert_balanced`]): C++ exceptions
/// thrown through -pg frames with destructors (cleanup pads, _Unwind_Resume), caught and
/// rethrown. Every thrower frame (thrower(6) is 7 frames, thrower(1) 2, per round: 4 rounds) is
/// closed as unwound; the 4 catching frames and main are traced returning.
fn assert_cpp_exception_counts(counts: &BTreeMap<(String, String), u64>, context: &str) {
    let expected = [
        ("unwound", "_Z7throwerm", 4 * 9),
        ("exit", "_Z7catcherm", 4),
        ("exit", "main", 1),
    ];
    assert_counts(counts, &expected, context);
}

/// tests/fixtures/c/throw.cpp compiled by g++ `gxx` (`-O2 -c` and `cflags`) into
/// `<dir>/throw.o`.
fn throw_object(gxx: &str, cflags: &[&str], dir: &Path) -> PathBuf {
    require_tool(gxx);
    let obj = dir.join("throw.o");
    run_ok(
        Command::new(gxx)
            .args(["-O2", "-c"])
            .args(cflags)
            .arg(fixture("c/throw.cpp"))
            .arg("-o")
            .arg(&obj),
    );
    obj
}

/// throw.cpp built `-O2` and `cflags` (`-pg`, ...) by `arch`'s g++ `gxx` and linked with
/// -static-libgcc -static-libstdc++ (the program's own unwinder, which no wrapper reaches), run
/// `4 6` plainly and in trace mode with libinstrfn.so preloaded: "caught 8" both times, a
/// balanced trace with the counts of [`assert_cpp_exception_counts`].
fn static_libgcc_cpp_runs(arch: Arch, gxx: &str, cflags: &[&str]) {
    let context = format!("{} c++ static-libgcc {}", arch.name, cflags.join(" "));
    let dir = workdir(&format!(
        "{}-trace-cpp-static-libgcc{}",
        arch.name,
        cflags.join("")
    ));
    let obj = throw_object(gxx, cflags, &dir);
    let exe = dir.join("throw");
    run_ok(
        Command::new(gxx)
            .arg(&obj)
            .args(["-static-libgcc", "-static-libstdc++", "-o"])
            .arg(&exe),
    );
    let args = ["4", "6"];
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let plain = run_exe(arch, &exe, &args, &[], &dir);
    assert_eq!(text(&plain), "caught 8\n", "{context}");
    let trace = dir.join("trace");
    let out = run_in_trace_mode(arch, &exe, &args, true, &[], &dir, &trace);
    assert_eq!(text(&out), text(&plain), "{context}");
    let counts = assert_balanced(&instrfn_dump(&trace)[0], &context);
    assert_cpp_exception_counts(&counts, &context);
}

/// throw.cpp compiled by `arch`'s cross g++ `gxx` (`-O2 -c` and `cflags`) into `<dir>`, linked
/// by it for each [`Runtime`] into `<dir>/throw-<runtime>`, and run `4 6` without instrfn and
/// in trace mode through `traced(exe, args, runtime)`, which returns the program's output and
/// its trace's one process: "caught 8" both times, a balanced trace with the counts of
/// [`assert_cpp_exception_counts`], and `extra` (kind, function, events) counts as well.
fn cross_cpp_exception_runs(
    arch: Arch,
    gxx: &str,
    cflags: &[&str],
    dir: &Path,
    extra: &[(&str, &str, u64)],
    traced: impl Fn(&Path, &[&str], Runtime) -> (String, DumpProcess),
) {
    let obj = throw_object(gxx, cflags, dir);
    let lib = runtime_lib(arch, Lib::Static);
    let name = dir.file_name().unwrap().to_string_lossy();
    for runtime in [Runtime::Preload, Runtime::Static] {
        let context = format!("{name} {runtime:?}");
        let exe = dir.join(format!("throw-{runtime:?}"));
        let mut cmd = Command::new(gxx);
        cmd.arg(&obj);
        if runtime == Runtime::Static {
            cmd.arg(&lib);
        }
        run_ok(cmd.args(["-lpthread", "-ldl", "-o"]).arg(&exe));
        let args = ["4", "6"];
        let plain = run_exe(arch, &exe, &args, &[], dir);
        assert_eq!(String::from_utf8_lossy(&plain.stdout), "caught 8\n");
        let (out, p) = traced(&exe, &args, runtime);
        assert_eq!(out, "caught 8\n", "{context}");
        let counts = assert_balanced(&p, &context);
        assert_cpp_exception_counts(&counts, &context);
        assert_counts(&counts, extra, &context);
    }
}

/// rust-app `exe` (built for `arch` with [`build_instrumented_rust`]) run `panic 5 4`, `resume
/// 5 4`, `backtrace 4` and `tpanic 4 50 4` in `dir`, without instrfn and in trace mode (into
/// `<dir>/trace`): Rust panics caught by catch_unwind, resume_unwind, std's Backtrace, and
/// panics on 4 threads at once, through instrumented frames. The same output, a balanced trace,
/// and dive's frames (25 per panicking run, 5 for the backtrace, 1000 for the threads) all
/// entered and, with `exits`, all closed (unwound by the panics, returning
/// after the backtrace); without `exits` (where trace mode records entries only) all entries
/// without exit.
fn rust_panic_runs(arch: Arch, exe: &Path, dir: &Path, label: &str, exits: bool) {
    for args in [
        &["panic", "5", "4"][..],
        &["resume", "5", "4"][..],
        &["backtrace", "4"][..],
        &["tpanic", "4", "50", "4"][..],
    ] {
        let context = format!("{label} {}", args.join(" "));
        let plain = run_exe(arch, exe, args, &[], dir);
        let trace = dir.join("trace");
        let out = run_in_trace_mode(arch, exe, args, false, &[], dir, &trace);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{context}: the program's output"
        );
        let counts = assert_balanced(&instrfn_dump(&trace)[0], &context);
        let dive = counts
            .keys()
            .find(|(_, n)| n.contains("rust_app4dive"))
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| panic!("{context}: no dive events: {counts:?}"));
        let (frames, closed) = match args[0] {
            "backtrace" => (5, "exit"),
            "tpanic" => (4 * 50 * 5, "unwound"), // 4 threads x 50 panics x 5 frames
            _ => (25, "unwound"),
        };
        if exits {
            assert_eq!(count_of(&counts, "entry", &dive), frames, "{context}");
            assert_eq!(count_of(&counts, closed, &dive), frames, "{context}");
        } else {
            assert_eq!(
                count_of(&counts, "entry-no-exit", &dive),
                frames,
                "{context}"
            );
        }
    }
}
