//! Signal handlers at exact instructions of the trampolines: held up at one critical
//! instruction (exit_window.c: the take-back of INSTRFN_MIN_DURATION, the store of a call
//! word, the pop of a shadow entry, a fork there) while the handler fills and recycles 4 KiB
//! chunks or walks the stack; and at every instruction of the entry and exit fast paths in
//! turn (sweep.c single-stepped on x86_64, bpsweep.c's breakpoints under qemu). Every event
//! must be in the trace exactly once, and every function return where it was called.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

feature_tests! {
    trace_windows:
    take_back_fills_chunks(x86_64, aarch64, riscv64, s390x),
    call_word_fills_chunks(x86_64, aarch64),
    fork_in_a_call_word_window(x86_64),
    exit_pop_walks_the_stack(x86_64),
    every_instruction(x86_64, aarch64, riscv64, s390x),
}

/// INSTRFN_MIN_DURATION's take-back in the exit trampoline reads the thread's position and
/// then the entry before it. exit_window.c stops the trampoline at that point
/// (instrfn_<arch>_exit_take_back: single steps on x86_64, a breakpoint written over the
/// instruction elsewhere) and has its handler fill many 4 KiB chunks there, which the runtime
/// retires, commits and reuses (INSTRFN_COLLECTOR=off: at once, on that thread) while the
/// interrupted trampoline goes on. Every event must still be in the trace exactly once: the
/// take-back must hold its chunk as a reservation does. Windows of different lengths put the
/// reused chunk at every stage (being filled, filled, free) when the trampoline resumes.
fn take_back_fills_chunks(arch: Arch) {
    take_back_rounds(arch);
}

/// The exit trampoline that makes a call word (MERGE_CALL in the runtime's assembly) has read
/// the thread's newest event, stepped's entry, and is about to store the call word over it.
/// exit_window.c stops it there (a breakpoint on the store) and has its handler fill many
/// 4 KiB chunks, which the runtime retires, commits and reuses while the trampoline's pin
/// holds the chunk the word goes into. Every event must be in the trace exactly once,
/// stepped's as entry and exit (a call word in a chunk committed after the store). x86_64
/// reaches all 16 windows; aarch64 nearly all: a call longer than a call word's 2^12 ticks
/// (65 µs of qemu's 62.5 MHz counter) makes none.
fn call_word_fills_chunks(arch: Arch) {
    merge_window_rounds(arch, if arch == X86_64 { 16 } else { 14 });
}

/// exit_window.c `fork`: a handler forks while the exit trampoline is about to store a call
/// word (the window above); the child sleeps there 200 ms, then stores it and exits, while
/// the parent stores its own and fills and reuses 4 KiB chunks (no collector: at once). The
/// child's store goes to the chunk it was in, whose mapping the parent shares: unless the
/// child's copy of this thread's chunks is private memory (src/trace.rs `after_fork`), it
/// lands in a chunk the parent has reused, over the parent's events (on a long event's
/// timestamp, say, which it then puts 10^18 ns on). The same holds for any event the child
/// finishes (a reservation's store, a take-back's restore), call words or not.
///
/// One window: a second call of stepped() after the parent's 200 ms wait would begin too long
/// after its chunk's time base for a call word. The window is missed when stepped's call takes
/// longer than a call word's 2^12 ticks (the host preempted the program there): the run is
/// checked all the same (no fork, one process) and tried again, up to 4 times, each run's
/// windows in the failure message.
fn fork_in_a_call_word_window(arch: Arch) {
    let dir = workdir("trace-fork-window");
    let exe = build_exit_window(arch, &dir);
    let trace = dir.join("trace");
    let t = trace.display().to_string();
    let env = [
        ("INSTRFN_MODE", "trace"),
        ("INSTRFN_OUTPUT", t.as_str()),
        ("INSTRFN_BUFSIZE", "4096"),
        ("INSTRFN_MAX_DEPTH", "4"),
        ("INSTRFN_COLLECTOR", "off"),
    ];
    let mut reached = Vec::new();
    while reached.len() < 4 {
        let _ = std::fs::remove_dir_all(&trace);
        let started = std::time::Instant::now();
        let out = run_exe(arch, &exe, &["fork", "60"], &env, &dir);
        let wall_ns = started.elapsed().as_nanos() as f64;
        let text = stdout_of(&out);
        let [windows, deep, stepped] = numbers_of(&text)[..] else {
            panic!("{text}")
        };
        reached.push(windows);
        assert!(windows <= 1 && stepped == 1, "{text}");
        let procs = instrfn_dump(&trace);
        // The parent (the first pid), then its child (a trace of its own) if it forked.
        assert_eq!(procs.len() as u64, 1 + windows, "{text}");
        let parent = &procs[0];
        let counts = assert_balanced(parent, "fork window");
        assert_eq!(parent.lost, 0);
        assert_eq!(count_of(&counts, "entry", "stepped"), 1);
        assert_eq!(count_of(&counts, "exit", "stepped"), 1);
        let (entries, exits, noexit) = (
            count_of(&counts, "entry", "deep"),
            count_of(&counts, "exit", "deep"),
            count_of(&counts, "entry-no-exit", "deep"),
        );
        assert_eq!(entries, exits);
        assert_eq!(entries + noexit, deep, "{counts:?}");
        // Every event at a time within the run (as the test measured it around the run).
        for e in parent.threads.values().flatten() {
            assert!(
                (0.0..=wall_ns).contains(&e.ns),
                "{e:?}, the run {wall_ns} ns"
            );
        }
        if windows == 1 {
            return;
        }
    }
    panic!("the window was reached in none of 4 runs (windows per run: {reached:?})");
}

/// The exit trampoline pops its shadow entry and puts the original return address back into
/// the frame, from which it jumps there. exit_window.c single-steps to the instruction between
/// those two stores and has its SIGTRAP handler call backtrace() (every original return
/// address put back) and then a traced function (the exit trampoline put back into the frames
/// still alive). The entry being popped must not count as alive: otherwise the trampoline's
/// jump comes back to itself and the program aborts ("lost track of a return address").
fn exit_pop_walks_the_stack(arch: Arch) {
    let dir = workdir("trace-exit-pop");
    let exe = build_exit_window(arch, &dir);
    exit_window_run(arch, &exe, "pop", |i| i % 3, &[], &dir, "pop", 16);
}

/// A traced, stack-walking signal handler at each instruction of the trace fast paths in turn:
/// every call recorded exactly, as an entry and its exit, an entry without exit (beyond
/// INSTRFN_MAX_DEPTH), or counted as left out (INSTRFN_MIN_DURATION, which XRay sleds ignore),
/// also with 4 KiB chunks filled and recycled under the interrupted code; for -pg code also in
/// gmon mode, gprof's call counts exact.
///
/// - x86_64 (sweep.c, see [`host_every_instruction`]): single-stepped, call i of stepped()
///   interrupted at its i-th instruction.
/// - aarch64, riscv64, s390x (bpsweep.c, [`bpsweep_rounds`]): a breakpoint written over each
///   instruction in turn of _mcount's fast path and the exit trampoline's (and -pg -mfentry's
///   __fentry__ on s390x), of -finstrument-functions' hooks, and on aarch64 of natively
///   patched XRay sleds and their trampolines (clang -fxray-instrument, the runtime linked in).
fn every_instruction(arch: Arch) {
    match arch.name {
        "x86_64" => host_every_instruction(),
        "aarch64" => bpsweeps(arch, &[Sweep::Mcount, Sweep::Cyg, Sweep::Xray]),
        "riscv64" => bpsweeps(arch, &[Sweep::Mcount, Sweep::Cyg]),
        _ => bpsweeps(arch, &[Sweep::Mcount, Sweep::Cyg, Sweep::Fentry]),
    }
}

/// sweep.c on x86_64: call i of stepped() is interrupted at its i-th instruction
/// (single-stepped), for every i along the call (its own code, mcount's or __fentry__'s fast
/// path, the exit trampoline, gcc's `__return__`, -finstrument-functions' two hooks, or
/// natively patched XRay sleds and their trampolines), by a handler that makes traced calls
/// (filling and recycling 4 KiB chunks in the heavier rounds) and walks the stack with
/// backtrace(). Every run: the program ends normally, most instructions were reached, and the
/// trace holds every call exactly; for -pg code, in gmon mode, gprof's call counts are exact
/// too. (A walk that takes a zeroed slot, or a pushed word, for a return address aborts or
/// crashes in the unwinder.)
fn host_every_instruction() {
    let arch = X86_64;
    const N: u64 = 300;
    let lib = runtime_lib(arch, Lib::Shared).display().to_string();
    for (name, flags) in [
        ("pg", &["-pg"][..]),
        ("fentry", &["-pg", "-mfentry"][..]),
        // gcc's return route: __fentry__ pushes, __return__ pops (src/arch/x86_64/return.s).
        (
            "return",
            &["-pg", "-mfentry", "-minstrument-return=call"][..],
        ),
        ("cyg", &["-finstrument-functions"][..]),
        (
            "xray",
            &["-fxray-instrument", "-fxray-instruction-threshold=1"][..],
        ),
    ] {
        let dir = workdir(&format!("trace-sweep-{name}"));
        let xray = name == "xray";
        let exe = if xray {
            // clang, no runtime linked: LD_PRELOAD patches the sleds natively.
            require_tool("clang");
            let exe = dir.join("sweep");
            run_ok(
                Command::new("clang")
                    .args(["-O2", "-Wno-unknown-attributes"])
                    .args(flags)
                    .arg(fixture("c/sweep.c"))
                    .arg("-o")
                    .arg(&exe),
            );
            exe
        } else {
            let obj = c_object(&dir, "sweep.c", flags);
            link_runtime(arch, &dir, &obj, &[], "sweep", Runtime::Static)
        };
        // The common rounds, and one with the collector on and no walking.
        let mut rounds = sweep_rounds(true);
        rounds.insert(2, ("40", false, &[("INSTRFN_BUFSIZE", "4096")]));
        for (r, walk, extra) in rounds {
            let context = format!("{name} rounds {r} walk {walk} {extra:?}");
            let trace = dir.join("trace");
            let _ = std::fs::remove_dir_all(&trace);
            let t = trace.display().to_string();
            let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", t.as_str())];
            if xray {
                env.push(("LD_PRELOAD", lib.as_str()));
            }
            env.extend_from_slice(extra);
            let n = N.to_string();
            let mut args = vec![n.as_str(), r];
            if walk {
                args.push("walk");
            }
            let out = run_exe(arch, &exe, &args, &env, &dir);
            let text = stdout_of(&out);
            let words = numbers_of(&text);
            let [handled, deep, stepped, stopped, missed, in_stub] = words[..] else {
                panic!("{context}: {text}")
            };
            assert_eq!(handled + stopped + missed, N, "{context}: {text}");
            // Walks that began in an XRay stub (two instructions at each sled, on the page
            // instrfn maps near the code, whose unwind info it registers): checked like the
            // others, and there are some (none in other builds).
            if xray && walk {
                assert!(in_stub >= 2, "{context}: {text}");
            } else {
                assert_eq!(in_stub, 0, "{context}: {text}");
            }
            assert!(handled >= 80, "{context}: {text}");
            assert_eq!(stepped, N + 1, "{context}: {text}");
            let procs = instrfn_dump(&trace);
            let counts = assert_balanced(&procs[0], &context);
            assert_eq!(procs[0].lost, 0, "{context}");
            let made = [("deep", deep), ("stepped", stepped), ("main", 1)];
            let mut recorded = 0;
            for (f, n) in made {
                let (entries, exits, noexit) = (
                    count_of(&counts, "entry", f),
                    count_of(&counts, "exit", f),
                    count_of(&counts, "entry-no-exit", f),
                );
                assert_eq!(entries, exits, "{context}: {f}");
                if extra.iter().all(|(k, _)| *k != "INSTRFN_MIN_DURATION") {
                    assert_eq!(entries + noexit, n, "{context}: {f}: {counts:?}");
                }
                recorded += entries + noexit;
            }
            let dropped = meta_dropped(&trace);
            assert_eq!(
                recorded + dropped,
                deep + stepped + 1,
                "{context}: {recorded} recorded, {dropped} dropped: {counts:?}"
            );
        }
        if name == "pg" || name == "fentry" || name == "return" {
            // gmon mode (the default when linked in): the same sweep, every call counted once
            // in gmon.out, as gprof reads it.
            let context = format!("{name} gmon");
            let gmon = dir.join("gmon.out");
            let _ = std::fs::remove_file(&gmon);
            let n = N.to_string();
            let out = run_exe(arch, &exe, &[n.as_str(), "40", "walk"], &[], &dir);
            let text = stdout_of(&out);
            let words = numbers_of(&text);
            let [handled, deep, stepped, ..] = words[..] else {
                panic!("{context}: {text}")
            };
            assert!(handled >= 30, "{context}: {text}"); // (no exit trampoline here)
            assert_sweep_gmon(arch, &exe, &gmon, deep, stepped, &context);
        }
    }
}

/// exit_window.c (see [`build_exit_window`]) run for `arch` in trace mode with `extra`
/// environment: `mode` and 16 windows with `rounds(i)` handler rounds each. Checks that all 16
/// windows were reached and the trace holds every event once: balanced, nothing lost or
/// dropped, stepped 16 entries and exits, every deep call an entry (with its exit) or an entry
/// without exit. `trace` is removed first.
/// Every one of the 16 windows must be reached, or at least `min_windows` of them (a call
/// word's window under qemu, where a call that takes the next chunk can be too long for a
/// call word). Returns the windows reached.
#[allow(clippy::too_many_arguments)]
fn exit_window_run(
    arch: Arch,
    exe: &Path,
    mode: &str,
    rounds: fn(usize) -> usize,
    extra: &[(&str, &str)],
    dir: &Path,
    context: &str,
    min_windows: u64,
) -> u64 {
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let t = trace.display().to_string();
    let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", t.as_str())];
    env.extend_from_slice(extra);
    let mut args = vec![mode.to_string()];
    args.extend((0..16).map(|i| rounds(i).to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_exe(arch, exe, &args, &env, dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let words = numbers_of(&text);
    let [windows, deep, stepped] = words[..] else {
        panic!("{context}: {text}")
    };
    assert!((min_windows..=16).contains(&windows), "{context}: {text}");
    assert_eq!(stepped, 16, "{context}: {text}");
    let procs = instrfn_dump(&trace);
    let counts = assert_balanced(&procs[0], context);
    assert_eq!(procs[0].lost, 0, "{context}");
    assert_eq!(meta_dropped(&trace), 0, "{context}");
    // The handler's events came after stepped's entry: nothing is taken back.
    assert_eq!(count_of(&counts, "entry", "stepped"), 16, "{context}");
    assert_eq!(count_of(&counts, "exit", "stepped"), 16, "{context}");
    let (entries, exits, noexit) = (
        count_of(&counts, "entry", "deep"),
        count_of(&counts, "exit", "deep"),
        count_of(&counts, "entry-no-exit", "deep"),
    );
    assert_eq!(entries, exits, "{context}");
    assert_eq!(entries + noexit, deep, "{context}: {counts:?}");
    windows
}

/// tests/fixtures/c/exit_window.c built with gcc -O2 -pg for `arch` and linked with its
/// libinstrfn.a (the fixture names the runtime's hidden labels).
fn build_exit_window(arch: Arch, dir: &Path) -> PathBuf {
    let obj = dir.join("exit_window.o");
    let source = fixture("c/exit_window.c");
    let args: Vec<&OsStr> = vec![
        OsStr::new("-O2"),
        OsStr::new("-pg"),
        OsStr::new("-c"),
        source.as_os_str(),
    ];
    cc(arch, &args, &obj);
    link_runtime(arch, dir, &obj, &[], "exit_window", Runtime::Static)
}

/// exit_window.c in `mode`, built for `arch`, with the handler's 30-45 rounds filling 4 KiB
/// chunks at the window (entries beyond depth 4 left without exit, so that they cannot be
/// taken back), which the runtime retires, commits and reuses while the interrupted
/// trampoline goes on, with the collector off (the thread commits and reuses them at once)
/// and on; `extra` added to the environment; every event in the trace exactly once
/// ([`exit_window_run`]). Calls `after` with the trace directory and the windows reached.
fn window_rounds(
    arch: Arch,
    mode: &str,
    extra: &[(&str, &str)],
    min_windows: u64,
    after: impl Fn(&Path, u64, &str),
) {
    let dir = workdir(&format!("{}-trace-{mode}-window", arch.name));
    let exe = build_exit_window(arch, &dir);
    for collector in ["off", "on"] {
        let mut env = vec![
            ("INSTRFN_BUFSIZE", "4096"),
            ("INSTRFN_MAX_DEPTH", "4"),
            ("INSTRFN_COLLECTOR", collector),
        ];
        env.extend_from_slice(extra);
        let context = format!("{} {mode} INSTRFN_COLLECTOR={collector}", arch.name);
        // A window is missed when the call at it takes too long (the host preempted qemu
        // there, say: a call word's window under qemu is 1-65 µs): the run is checked whole
        // all the same, and tried again, up to 4 times, until it reached `min_windows`.
        let mut reached = Vec::new();
        let mut windows = 0;
        while reached.len() < 4 && windows < min_windows {
            windows = exit_window_run(arch, &exe, mode, |i| 30 + i, &env, &dir, &context, 0);
            reached.push(windows);
        }
        assert!(
            windows >= min_windows,
            "{context}: {min_windows} windows asked; reached per run: {reached:?}"
        );
        after(&dir.join("trace"), windows, &context);
    }
}

/// INSTRFN_MIN_DURATION's take-back held up at its one critical instruction (exit_window.c
/// `take-back`): every one of the 16 windows, every event once ([`window_rounds`]).
fn take_back_rounds(arch: Arch) {
    window_rounds(
        arch,
        "take-back",
        &[("INSTRFN_MIN_DURATION", "10s")],
        16,
        |_, _, _| {},
    );
}

/// The exit trampoline's call word held up at its store (exit_window.c `merge`) while the
/// trampoline's pin holds the chunk the word goes into: at least `min_windows` of the 16
/// windows, every event once ([`window_rounds`]), a call word for each window.
fn merge_window_rounds(arch: Arch, min_windows: u64) {
    window_rounds(
        arch,
        "merge",
        &[],
        min_windows,
        |trace, windows, context| {
            let calls: u64 = raw_chunks(trace).iter().map(|c| c.calls).sum();
            assert!(calls >= windows, "{context}: {calls} call words");
        },
    );
}

/// The sweeps' rounds: one traced call per handler, walking; 40+ rounds with 4 KiB chunks and
/// no collector (the handler fills and recycles chunks under the interrupted code), walking;
/// and (`short`, for code that INSTRFN_MIN_DURATION applies to) the same with every call short
/// and entries beyond depth 4 left without exit, so that handlers still leave events.
fn sweep_rounds(short: bool) -> Vec<SweepRound<'static>> {
    const SMALL: &[(&str, &str)] = &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_COLLECTOR", "off")];
    const SHORT: &[(&str, &str)] = &[
        ("INSTRFN_BUFSIZE", "4096"),
        ("INSTRFN_COLLECTOR", "off"),
        ("INSTRFN_MIN_DURATION", "10s"),
        ("INSTRFN_MAX_DEPTH", "4"),
    ];
    let mut rounds: Vec<SweepRound> = vec![("1", true, &[]), ("40", true, SMALL)];
    if short {
        rounds.push(("40", true, SHORT));
    }
    rounds
}

/// [`bpsweep_rounds`] for each build in `how`, in a work directory of its own (`<arch>-trace-
/// bpsweep-<build>`), with [`sweep_rounds`] (the short round for mcount and fentry code).
fn bpsweeps(arch: Arch, how: &[Sweep]) {
    for &h in how {
        let dir = workdir(&format!("{}-trace-bpsweep-{h:?}", arch.name));
        let short = matches!(h, Sweep::Mcount | Sweep::Fentry);
        bpsweep_rounds(arch, &dir, h, &sweep_rounds(short));
    }
}

/// gprof's counts in `gmon` for a sweep run of `exe` (sweep.c, bpsweep.c) that made `deep`
/// calls of deep (each handler round is deep(3): one call from outside, three of itself) and
/// `stepped` of stepped: exact, and no runtime function counted. (The flat profile leaves out
/// a function's calls of itself: the call graph has them, on the deep -> deep arc.)
fn assert_sweep_gmon(arch: Arch, exe: &Path, gmon: &Path, deep: u64, stepped: u64, context: &str) {
    let flat = gprof_flat(arch, exe, gmon);
    let arcs = gprof_arcs(arch, exe, gmon);
    let recursive = arcs.0.get(&("deep".into(), "deep".into())).copied();
    assert_eq!(recursive, Some(deep / 4 * 3), "{context}: {}", arcs.1);
    assert_eq!(flat.calls("deep"), deep / 4, "{context}: {}", flat.text);
    assert_eq!(flat.calls("stepped"), stepped, "{context}: {}", flat.text);
    flat.assert_no_runtime_calls(context);
}

/// One round of sweep.c or bpsweep.c: its ROUNDS argument, whether its handlers walk the
/// stack, extra environment.
type SweepRound<'a> = (&'a str, bool, &'a [(&'a str, &'a str)]);

/// How bpsweep.c is instrumented, and which code it sweeps.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Sweep {
    /// gcc -pg: `_mcount`, `mcount`, `instrfn_<arch>_mcount`, the exit trampoline up to its
    /// slow part.
    Mcount,
    /// gcc -pg -mfentry (s390x): `__fentry__`, `instrfn_<arch>_fentry`, the exit trampoline.
    Fentry,
    /// gcc -finstrument-functions: the two hooks and the runtime's routines behind them.
    Cyg,
    /// clang -fxray-instrument, sleds patched natively: the traced function's sleds and the
    /// XRay entry and exit trampolines.
    Xray,
}

/// tests/fixtures/c/bpsweep.c for `arch` (aarch64, riscv64, s390x), built as `how` says and
/// linked with libinstrfn.a in `dir`, run under qemu over every instruction of the code `how`
/// names (as the linked program's disassembly lists it), for each `(rounds, walk,
/// environment)`: the program ends normally, most instructions were reached, and the trace
/// holds every call exactly, as an entry and its exit, an entry without exit, or counted as
/// left out; for mcount and fentry code also once in gmon mode, gprof's counts exact.
fn bpsweep_rounds(arch: Arch, dir: &Path, how: Sweep, rounds: &[SweepRound]) {
    let obj = dir.join("bpsweep.o");
    let source = fixture("c/bpsweep.c");
    let xray = how == Sweep::Xray;
    if xray {
        require_tool("clang");
        let target = format!("--target={}", arch.cc.trim_end_matches("-gcc"));
        let mut clang = Command::new("clang");
        clang
            .arg(target)
            .args(["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"])
            .args(["-Wno-unknown-attributes", "-c"]);
        if arch.name == "aarch64" {
            // The stubs' instructions too (found at run time: bpsweep.c).
            clang.arg("-DSWEEP_STUBS");
        }
        run_ok(clang.arg(&source).arg("-o").arg(&obj));
    } else {
        let flags: &[&str] = match how {
            Sweep::Cyg => &["-finstrument-functions"],
            Sweep::Fentry => &["-pg", "-mfentry"],
            _ => &["-pg"],
        };
        // (Unwind tables for the handler's walk: riscv64's gcc makes none by default.)
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("-O2"),
            OsStr::new("-fasynchronous-unwind-tables"),
        ];
        args.extend(flags.iter().map(OsStr::new));
        args.extend([OsStr::new("-c"), source.as_os_str()]);
        cc(arch, &args, &obj);
    }
    let exe = link_runtime(arch, dir, &obj, &[], "bpsweep", Runtime::Static);
    let objdump = arch.cc.replace("gcc", "objdump");
    require_tool(&objdump);
    let listing = run_ok(Command::new(&objdump).arg("-d").arg(&exe));
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let base_name = format!("instrfn_{}_exit", arch.name);
    let a = arch.name;
    let swept: Vec<String> = match how {
        Sweep::Xray => vec![
            "stepped".to_string(),
            format!("instrfn_{a}_xray_entry"),
            format!("instrfn_{a}_xray_exit"),
            format!("instrfn_{a}_xray_exit_merge"),
        ],
        Sweep::Cyg => vec![
            "__cyg_profile_func_enter".to_string(),
            "__cyg_profile_func_exit".to_string(),
            format!("instrfn_{a}_cyg_enter"),
            format!("instrfn_{a}_cyg_exit"),
            format!("instrfn_{a}_cyg_exit_merge"),
            // (Not riscv64's instrfn_riscv64_cyg_trace_enter/exit: the slow routine calls
            // them with signals blocked, where a breakpoint's trap would kill the process.)
        ],
        // (The hidden labels inside the trampolines start blocks of their own in the listing:
        // each is named, or its instructions would drop out of the sweep; checked below.)
        Sweep::Fentry => vec![
            "__fentry__".to_string(),
            format!("instrfn_{a}_fentry"),
            format!("instrfn_{a}_fentry_hijacked"),
            base_name.clone(),
            format!("instrfn_{a}_exit_ours"),
            format!("instrfn_{a}_exit_merge"),
            format!("instrfn_{a}_exit_take_back"),
            format!("instrfn_{a}_exit_slow_entry"),
        ],
        Sweep::Mcount => vec![
            "_mcount".to_string(),
            "mcount".to_string(),
            format!("instrfn_{a}_mcount"),
            format!("instrfn_{a}_mcount_hijacked"),
            base_name.clone(),
            format!("instrfn_{a}_exit_ours"),
            format!("instrfn_{a}_exit_merge"),
            format!("instrfn_{a}_exit_take_back"),
            format!("instrfn_{a}_exit_slow_entry"),
        ],
    };
    // Labels that do start routines (or parts) left out on purpose: the slow exits, which block
    // signals (a breakpoint's trap there would kill the process).
    let left_out = [
        format!("instrfn_{a}_exit_slow"),
        format!("instrfn_{a}_exit_slow_part"),
    ];
    let (mut base, mut current, mut addrs) = (None, String::new(), Vec::new());
    for line in listing.lines() {
        if let Some((addr, rest)) = line.split_once(" <")
            && let (Ok(a), Some(name)) = (u64::from_str_radix(addr, 16), rest.strip_suffix(">:"))
        {
            current = name.to_string();
            if current == base_name {
                base = Some(a);
            }
            let inside = swept
                .iter()
                .any(|s| current.len() > s.len() + 1 && current.starts_with(&format!("{s}_")));
            assert!(
                !inside || swept.contains(&current) || left_out.contains(&current),
                "{current}: a label inside a swept routine, not in bpsweep's list (its \
                 instructions would not be swept)"
            );
            continue;
        }
        if swept.contains(&current)
            && let Some((addr, _)) = line.trim_start().split_once(':')
            && let Ok(a) = u64::from_str_radix(addr, 16)
        {
            addrs.push(a);
        }
    }
    let base = base.unwrap_or_else(|| panic!("{base_name} not in the disassembly"));
    assert!(addrs.len() > 50, "{} instructions found", addrs.len());
    // (bpsweep.c's main is not instrumented when built for XRay.)
    let main_calls = u64::from(!xray);
    let list = dir.join("offsets");
    let text: String = addrs
        .iter()
        .map(|&a| {
            let off = a as i64 - base as i64;
            if off < 0 {
                format!("-{:x}\n", -off)
            } else {
                format!("{off:x}\n")
            }
        })
        .collect();
    std::fs::write(&list, text).unwrap();
    let n = addrs.len() as u64;
    for &(r, walk, extra) in rounds {
        let context = format!("{} bpsweep rounds {r} walk {walk} {extra:?}", arch.name);
        let trace = dir.join("trace");
        let _ = std::fs::remove_dir_all(&trace);
        let t = trace.display().to_string();
        let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", t.as_str())];
        env.extend_from_slice(extra);
        let l = list.display().to_string();
        let mut args = vec![l.as_str(), r];
        if walk {
            args.extend(["walk", "check"]); // the walks must reach main (bpsweep.c)
        }
        let out = run_exe(arch, &exe, &args, &env, dir);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let words = numbers_of(&text);
        let [handled, deep, stepped, missed, stubs, stubs_handled] = words[..] else {
            panic!("{context}: {text}")
        };
        assert_eq!(handled + missed, n + stubs, "{context}: {text}");
        assert!(handled >= 30, "{context}: {text}");
        assert_eq!(stepped, n + stubs + 1, "{context}: {text}");
        // aarch64 XRay: the four instructions of the entry and of the exit stub, each reached
        // (with `check`, each handler's walk from there reached main).
        let stub_lines = if xray && arch.name == "aarch64" { 8 } else { 0 };
        assert_eq!(
            (stubs, stubs_handled),
            (stub_lines, stub_lines),
            "{context}: {text}"
        );
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        assert_eq!(procs[0].lost, 0, "{context}");
        let left_out = extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION");
        let mut recorded = 0;
        for (f, made) in [("deep", deep), ("stepped", stepped), ("main", main_calls)] {
            let (entries, exits, noexit) = (
                count_of(&counts, "entry", f),
                count_of(&counts, "exit", f),
                count_of(&counts, "entry-no-exit", f),
            );
            assert_eq!(entries, exits, "{context}: {f}");
            if !left_out {
                assert_eq!(entries + noexit, made, "{context}: {f}: {counts:?}");
            }
            recorded += entries + noexit;
        }
        let dropped = meta_dropped(&trace);
        assert_eq!(
            recorded + dropped,
            deep + stepped + main_calls,
            "{context}: {recorded} recorded, {dropped} dropped: {counts:?}"
        );
    }
    if matches!(how, Sweep::Mcount | Sweep::Fentry) {
        // gmon mode (the default when linked in): the same sweep over the same instructions
        // (the gmon fast path runs through them too), every call counted once in gmon.out.
        let context = format!("{} bpsweep {how:?} gmon", arch.name);
        let gmon = dir.join("gmon.out");
        let _ = std::fs::remove_file(&gmon);
        let l = list.display().to_string();
        let args = [l.as_str(), "40", "walk", "check"]; // the walks reach main (bpsweep.c)
        let out = run_exe(arch, &exe, &args, &[], dir);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let words = numbers_of(&text);
        let [handled, deep, stepped, ..] = words[..] else {
            panic!("{context}: {text}")
        };
        assert!(handled >= 20, "{context}: {text}");
        assert_sweep_gmon(arch, &exe, &gmon, deep, stepped, &context);
    }
}
