//! Signal handlers that run instrumented code in the middle of the thread's own calls, also
//! between any two instructions of the trampolines: in gmon mode every call of both is
//! counted (also the first call of a thread, inside a handler that interrupted malloc, and new
//! arcs inserted by handlers while the thread inserts its own); in trace mode every thread's
//! trace nests, with every exit and the exact counts, also with 4 KiB chunks that handlers
//! fill while the interrupted code holds a reservation, and with handlers that walk the stack.
//! Under qemu, QEMU_SINGLESTEP delivers a signal after any instruction.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;

feature_tests! {
    signals:
    gmon_handlers_counted_exactly(x86_64, aarch64, riscv64, s390x),
    gmon_first_call_in_a_handler_that_interrupted_malloc(x86_64),
    gmon_handlers_insert_new_arcs_while_the_thread_does(x86_64),
    trace_handlers_interrupt_trampolines(x86_64, aarch64, riscv64, s390x),
    trace_handlers_walk_the_stack_mid_push(s390x),
    trace_handlers_interrupt_a_loop(riscv64),
    trace_big_frames_and_handlers(aarch64),
}

/// scenarios.c `signal N`: N raised signals, then SIGALRM from an interval timer, which lands
/// anywhere, also inside the trampolines (the counting instruction, or an LL/SC loop, must not
/// lose a count); each handler calls from_handler(). Every call is counted, and the runtime
/// says it lost none. x86_64 preloaded and linked, the others linked.
fn gmon_handlers_counted_exactly(arch: Arch) {
    let (links, n): (&[Link], &str) = if arch == X86_64 {
        (&[Link::Preload, Link::Static], "500")
    } else {
        (&[Link::Static], "300")
    };
    let preload = preload_path(arch);
    for &link in links {
        let context = format!("{} {link:?}", arch.name);
        let dir = workdir(&format!("{}-signal-{link:?}", arch.name));
        let exe = build_c(arch, &dir, "scenarios.c", &[], link);
        let env = env_for(link, &preload, &[("INSTRFN_VERBOSE", "1")]);
        let out = run_exe(arch, &exe, &["signal", n], &env, &dir);
        let text = stdout_of(&out);
        let handled = reported(&text, "handler") as u64;
        let work = reported(&text, "work_a") as u64;
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        let expected = [("from_handler", handled), ("work_a", work)];
        assert_calls(&flat, &expected, &context);
        let lost = summary_value(&stderr_of(&out), "calls lost");
        assert_eq!(lost, 0, "{context}");
    }
}

/// Start-up and every thread's first call run inside a signal handler that interrupts
/// malloc, in a program that made 40 pthread keys first (glibc allocates for key values
/// from index 32 on): nothing on the slow path may take a lock or allocate (atexit,
/// pthread_atfork and pthread_key_create take locks; pthread_setspecific allocates), or the
/// program hangs, which the 60 s deadline catches.
fn gmon_first_call_in_a_handler_that_interrupted_malloc(arch: Arch) {
    let dir = workdir("sigfirst");
    let main_obj = dir.join("sigfirst.o");
    let counted_obj = dir.join("sigfirst_counted.o");
    let (main_src, counted_src) = (fixture("c/sigfirst.c"), fixture("c/sigfirst_counted.c"));
    cc(
        arch,
        &[OsStr::new("-O2"), OsStr::new("-c"), main_src.as_os_str()],
        &main_obj,
    );
    let pg = [
        OsStr::new("-O2"),
        OsStr::new("-pg"),
        OsStr::new("-c"),
        counted_src.as_os_str(),
    ];
    cc(arch, &pg, &counted_obj);
    let lib = runtime_lib(arch, Lib::Static);
    let objs = [
        main_obj.as_os_str(),
        counted_obj.as_os_str(),
        OsStr::new("-lpthread"),
    ];
    let preloaded = cc(arch, &objs, &dir.join("sigfirst-preload"));
    let mut st = objs.to_vec();
    st.insert(2, lib.as_os_str());
    let linked = cc(arch, &st, &dir.join("sigfirst-static"));
    let preload = preload_path(arch);
    for (exe, env) in [
        (&preloaded, vec![("LD_PRELOAD", preload.as_str())]),
        (&linked, vec![]),
    ] {
        let _ = std::fs::remove_file(dir.join("gmon.out"));
        let mut cmd = command(arch, exe, &["16", "1.5"], &env, &dir);
        let out = run_within(&mut cmd, 60);
        let handled = reported(&stdout_of(&out), "handled") as u64;
        let flat = gprof_flat(arch, exe, &dir.join("gmon.out"));
        assert_calls(&flat, &[("counted", handled)], &exe.display().to_string());
    }
}

/// A SIGALRM handler calling 64 distinct functions (new arcs, inserted from inside the
/// handler) interrupts a thread that inserts 8192 new arcs and grows its table: every call
/// of both is counted.
fn gmon_handlers_insert_new_arcs_while_the_thread_does(arch: Arch) {
    let dir = workdir("sigarcs");
    let exe = build_c(arch, &dir, "arcs.c", &[], Link::Static);
    let out = run_exe(
        arch,
        &exe,
        &["sigarcs", "1000"],
        &[("INSTRFN_VERBOSE", "1")],
        &dir,
    );
    let text = stdout_of(&out);
    let handled = reported(&text, "handler") as u64;
    assert!(handled > 100, "only {handled} signals");
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    let mut expected = vec![("work_a".to_string(), reported(&text, "work_a") as u64)];
    for i in 1..=8 {
        for j in 0..8 {
            expected.push((format!("h{i}{j}"), handled));
        }
    }
    let expected: Vec<(&str, u64)> = expected.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    assert_calls(&flat, &expected, "sigarcs");
    assert_eq!(summary_value(&stderr_of(&out), "calls lost"), 0);
}

/// tracesig.c: a second thread signals the main thread again as soon as its handler ran, so
/// handlers (which trace 102 calls each: on_signal, handler_fn and its 100 calls of leaf) land
/// between any two instructions of the trampolines. Each handler makes about 200 events, so
/// with 4 KiB chunks (252 events) it usually takes the next chunk while the code it
/// interrupted holds a reserved event in the one before, or the two before; and it pushes
/// shadow entries above one the interrupted code is pushing, or popping. Every run: a nested
/// trace with every exit (nothing unwound, no entry without exit), the exact counts, nothing
/// lost.
///
/// - x86_64: natively under `instrfn record`, -pg and -pg -mfentry, 4 runs each (1000
///   handlers unless the host is busy; tracesig.c goes on until 20 were handled, at most 10 s).
/// - aarch64 and riscv64: single-stepped (`tracesig_singlestep_rounds`), the last of its
///   rounds with every handler walking the stack with backtrace() first (tracesig.c `walk`):
///   the walk puts the original return addresses back and the exit trampoline again
///   afterwards, also while the interrupted code is in the middle of its push or pop. gcc -pg,
///   clang -pg (the caller in the frame record), riscv64 gcc with a frame pointer, and
///   -finstrument-functions (no shadow entries); aarch64 preloaded and linked, riscv64 linked.
/// - s390x: not single-stepped, 20000 calls of work, 3 rounds, for -pg, -pg -mfentry and
///   -finstrument-functions.
fn trace_handlers_interrupt_trampolines(arch: Arch) {
    use Compiler::{Clang, Gcc};
    if arch == X86_64 {
        return host_trace_handlers();
    }
    if arch == S390X {
        for flags in [
            &["-pg"][..],
            &["-pg", "-mfentry"][..],
            &["-finstrument-functions"][..],
        ] {
            let name = format!("s390x-trace-signals{}", flags.join(""));
            signal_rounds(arch, &name, flags, &[], &[("INSTRFN_BUFSIZE", "4096")], 3);
        }
        return;
    }
    let (builds, links): (&[(Compiler, &[&str])], &[Runtime]) = match arch.name {
        "aarch64" => (
            &[
                (Gcc, &["-pg"]),
                (Clang, &["-pg"]),
                (Gcc, &["-finstrument-functions"]),
            ],
            &[Runtime::Preload, Runtime::Static],
        ),
        _ => (
            &[
                (Gcc, &["-pg"]),
                (Gcc, &["-pg", "-fno-omit-frame-pointer"]),
                (Clang, &["-pg"]),
                (Gcc, &["-finstrument-functions"]),
            ],
            &[Runtime::Static],
        ),
    };
    for (compiler, flags) in builds {
        let name = format!(
            "{}-trace-tracesig-{compiler:?}{}",
            arch.name,
            flags.join("")
        );
        let dir = workdir(&name);
        let obj = compile(arch, *compiler, &dir, "tracesig.c", flags, "tracesig.o");
        for &link in links {
            let exe = link_runtime(arch, &dir, &obj, &[], "tracesig", link);
            let preload = link == Runtime::Preload;
            let name = format!("{name} {link:?}");
            tracesig_singlestep_rounds(arch, &exe, preload, &dir, &name, "walk", |tdir, c| {
                one_process(arch, tdir, c);
            });
        }
    }
}

/// tracesig.c natively under `instrfn record` (see [`trace_handlers_interrupt_trampolines`]).
fn host_trace_handlers() {
    let dir = workdir("trace-signals");
    for (name, flags) in [("pg", &["-pg"][..]), ("fentry", &["-pg", "-mfentry"][..])] {
        let exe = build_plain(&dir, "tracesig.c", flags, &["-lpthread"]);
        let exe_named = dir.join(format!("tracesig-{name}"));
        std::fs::rename(&exe, &exe_named).unwrap();
        for run in 0..4 {
            let context = format!("{name} run {run}");
            let (out, trace) =
                record_trace(&exe_named, &["3000"], &[("INSTRFN_BUFSIZE", "4096")], &dir);
            let text = stdout_of(&out);
            let (handled, calls) = tracesig_output(&text, &context);
            assert!(handled >= 10, "{context}: {text}");
            let procs = instrfn_dump(&trace);
            let counts = assert_balanced(&procs[0], &context);
            assert_eq!(procs[0].lost, 0, "{context}");
            assert_tracesig_counts(&counts, handled, calls, &context);
        }
    }
}

/// Runs tracesig.c (built with `flags`, the runtime linked in) for `rounds` rounds of 20000
/// calls with the extra arguments `args` and environment `env`: the main thread's trace stays
/// nested and complete, and every call is in it.
fn signal_rounds(
    arch: Arch,
    name: &str,
    flags: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    rounds: u32,
) {
    let dir = workdir(name);
    let flags = [flags, arch_flags(arch)].concat();
    let obj = compile(
        arch,
        Compiler::Gcc,
        &dir,
        "tracesig.c",
        &flags,
        "tracesig.o",
    );
    let exe = link_runtime(arch, &dir, &obj, &[], "tracesig", Runtime::Static);
    let mut argv = vec!["20000"];
    argv.extend_from_slice(args);
    for round in 0..rounds {
        let context = format!("{name} round {round}");
        let trace = dir.join("trace");
        let out = run_in_trace_mode(arch, &exe, &argv, false, env, &dir, &trace);
        let stdout = stdout_of(&out);
        let (handled, calls) = tracesig_output(&stdout, &context);
        assert!(handled > 0, "{context}: no signal was handled");
        let procs = instrfn_dump(&trace);
        let p = &procs[0];
        for (tid, events) in &p.threads {
            assert_nested(events, &format!("{context} thread {tid}"));
        }
        let counts = assert_balanced(p, &context);
        assert_tracesig_counts(&counts, handled, calls, &context);
    }
}

/// The same handlers on s390x, each walking the stack with backtrace() first (tracesig.c
/// `walk`): the walk puts the original return addresses back and the exit trampoline
/// afterwards, also when the handler interrupted an entry fast path between claiming its
/// shadow entry and writing the entry's slot (slot 0: being pushed). That entry's frame has
/// nothing replaced yet and is left alone by both (src/trace.rs, `unwind_looked`). Default
/// chunks: a handler takes at most one new chunk here.
fn trace_handlers_walk_the_stack_mid_push(arch: Arch) {
    for flags in [&["-pg"][..], &["-pg", "-mfentry"][..]] {
        let name = format!("s390x-trace-signals-walk{}", flags.join(""));
        signal_rounds(arch, &name, flags, &["walk"], &[], 3);
    }
}

/// Signal handlers that trace, interrupting the traced loop anywhere (trace_signals.c): every
/// call of the thread, the handler's included, has its exit and they nest; counts exact.
fn trace_handlers_interrupt_a_loop(arch: Arch) {
    const N: u64 = 300;
    for compiler in [Compiler::Gcc, Compiler::Clang] {
        let name = format!("riscv64-trace-signals-{compiler:?}");
        let dir = workdir(&name);
        let obj = compile(
            arch,
            compiler,
            &dir,
            "trace_signals.c",
            &["-pg"],
            "trace_signals.o",
        );
        for kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &[], "trace_signals", kind);
            let context = format!("{name} {kind:?}");
            let (out, tdir) = run_traced(arch, &exe, &[&N.to_string()], kind, &[], &dir);
            let stdout = stdout_of(&out);
            let value = |key: &str| -> u64 {
                stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                    .unwrap_or_else(|| panic!("{context}: no {key} in {stdout}"))
            };
            let (handled, outer) = (value("handled "), value("outer "));
            assert!(handled >= N, "{context}: {handled} signals handled");
            let p = one_process(arch, &tdir, &context);
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

/// Large frames with signal handlers running instrumented code on the thread's own stack
/// (bigframe.c). A function whose frame record lies deeper below its CFA than a signal frame
/// is long, or whose prologue moves sp in a way the classifier does not follow (gcc: `mov x12,
/// #n; sub sp, sp, x12`, and the record below the locals), is entry-only; clang's big frame
/// (record above the locals, `sub sp, sp, #4, lsl #12`) keeps its exits. Handlers that
/// interrupt anywhere, the return of big() included, never disturb the frames they interrupt.
fn trace_big_frames_and_handlers(arch: Arch) {
    const N: u64 = 100_000;
    let n = N.to_string();
    for (compiler, big_exits) in [(Compiler::Gcc, false), (Compiler::Clang, true)] {
        let dir = workdir(&format!("aarch64-trace-bigframe-{compiler:?}"));
        let obj = compile(arch, compiler, &dir, "bigframe.c", &["-pg"], "bigframe.o");
        for link_kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &[], "bigframe", link_kind);
            let context = format!("{compiler:?} {link_kind:?}");
            let (out, trace) = run_traced(arch, &exe, &[&n], link_kind, &[], &dir);
            let out = stdout_of(&out);
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
