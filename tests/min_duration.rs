//! INSTRFN_MIN_DURATION: the exit trampoline takes back the entry of every call shorter than
//! the threshold (asm `.Lexit_short`), so the trace holds exactly the long calls, and every
//! call left out is counted (`dropped` lines of the meta file: recorded + dropped = made,
//! exactly), also when signal handlers that trace land in the middle of a take-back.
//! -finstrument-functions code records every call on every architecture (its exit hook has no
//! shadow entry that ties it to its own entry).

#[macro_use]
mod common;

use common::*;
use std::path::{Path, PathBuf};

feature_tests! {
    min_duration:
    leaves_short_calls_out(x86_64, aarch64, riscv64, s390x),
    handlers_interrupt_the_take_back(x86_64, aarch64, riscv64, s390x),
}

/// sleeps.c: 1000 calls of tiny() (nanoseconds) and naps of 10 and 30 ms.
///
/// - x86_64, under `instrfn record` with a threshold of 1 ms: the report has no tiny(), the
///   naps with their exact counts, and at least the 1000 calls of tiny() dropped at record
///   time; without the threshold tiny() is there, 1000 times.
/// - aarch64, riscv64, s390x, with a threshold of 5 ms ([`min_duration_sleeps_runs`]): gcc and
///   clang -pg (s390x: -pg and -pg -mfentry, one exit trampoline for both) and gcc
///   -finstrument-functions, preloaded and linked.
fn leaves_short_calls_out(arch: Arch) {
    use Compiler::{Clang, Gcc};
    if arch == X86_64 {
        let dir = workdir("record-filters-min-duration");
        let sleeps = build_pg(&dir, "sleeps.c");
        let (_, trace) = record_trace(&sleeps, &[], &[("INSTRFN_MIN_DURATION", "1ms")], &dir);
        let r = report_json(&trace, &[]);
        let funcs = report_functions(&r);
        let calls = |f: &str| funcs[f]["calls"].as_u64().unwrap();
        assert!(!funcs.contains_key("tiny"), "{funcs:?}");
        assert_eq!(calls("nap10"), 5);
        assert_eq!(calls("nap30"), 3);
        assert!(r["dropped_at_record_time"].as_u64().unwrap() >= 1000, "{r}");
        let (_, trace) = record_trace(&sleeps, &[], &[], &dir);
        let funcs = report_functions(&report_json(&trace, &[]));
        assert_eq!(funcs["tiny"]["calls"].as_u64(), Some(1000));
        return;
    }
    let builds: &[(Compiler, &[&str])] = match arch.name {
        "s390x" => &[
            (Gcc, &["-pg"]),
            (Gcc, &["-pg", "-mfentry"]),
            (Gcc, &["-finstrument-functions"]),
        ],
        _ => &[
            (Gcc, &["-pg"]),
            (Clang, &["-pg"]),
            (Gcc, &["-finstrument-functions"]),
        ],
    };
    for (compiler, cflags) in builds {
        let name = format!(
            "{}-trace-min-duration-{compiler:?}{}",
            arch.name,
            cflags.join("")
        );
        let dir = workdir(&name);
        let flags = [*cflags, arch_flags(arch)].concat();
        let obj = compile(arch, *compiler, &dir, "sleeps.c", &flags, "sleeps.o");
        let cyg = *cflags == ["-finstrument-functions"];
        for link in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &[], "sleeps", link);
            let context = format!("{name} {link:?}");
            min_duration_sleeps_runs(cyg, &context, |env| {
                let (out, trace) = run_traced(arch, &exe, &[], link, env, &dir);
                one_process(arch, &trace, &context);
                (stdout_of(&out), trace)
            });
        }
    }
}

/// INSTRFN_MIN_DURATION under signal handlers that trace between any two instructions of the
/// trampolines (tracesig.c, 4 KiB chunks; single-stepped under qemu; natively on x86_64, its
/// sender signalling the main thread again as soon as a handler ran): a handler that comes
/// while the exit trampoline takes an entry back (between its check of the newest event and
/// the atomic store that moves the position back) either leaves events, and then the entry
/// stays and gets its exit, or had all its calls taken back too, and then the entry goes as
/// well. At 1 s every call is short; at 100 µs handler_fn (100 calls of leaf) is mostly long
/// and work and leaf are short, so handlers often leave events in the middle of a take-back;
/// the last round walks the stack in every handler (backtrace()). Every run: a nested trace
/// with every exit, nothing lost, and every call recorded or counted as dropped, exactly. gcc
/// -pg and clang -pg (x86_64 and s390x: -pg and -pg -mfentry; riscv64 also gcc with a frame
/// pointer), linked statically.
fn handlers_interrupt_the_take_back(arch: Arch) {
    use Compiler::{Clang, Gcc};
    let builds: &[(Compiler, &[&str])] = match arch.name {
        "x86_64" | "s390x" => &[(Gcc, &["-pg"]), (Gcc, &["-pg", "-mfentry"])],
        "riscv64" => &[
            (Gcc, &["-pg"]),
            (Gcc, &["-pg", "-fno-omit-frame-pointer"]),
            (Clang, &["-pg"]),
        ],
        _ => &[(Gcc, &["-pg"]), (Clang, &["-pg"])],
    };
    for (compiler, cflags) in builds {
        let name = format!(
            "{}-trace-min-duration-tracesig-{compiler:?}{}",
            arch.name,
            cflags.join("")
        );
        let dir = workdir(&name);
        let flags = [*cflags, arch_flags(arch)].concat();
        let obj = compile(arch, *compiler, &dir, "tracesig.c", &flags, "tracesig.o");
        let exe = link_runtime(arch, &dir, &obj, &[], "tracesig", Runtime::Static);
        min_duration_tracesig_rounds(arch, &exe, &dir, &name, "walk");
    }
}

/// Checks a trace of sleeps.c recorded with INSTRFN_MIN_DURATION = `threshold_ns` (`kept`, with
/// `dropped` calls counted in its meta file) against one of the same binary recorded without
/// it (`all`): the trace nests and loses nothing; every call of main, nap10 and nap30 (and
/// sleep_ms, where gcc kept it out of line), each of which lasts 10 ms or more, is in it; a
/// call with no recorded callee is in it only if it lasted at least the threshold (tiny() takes
/// nanoseconds: only a host that stalls the program for that long inside one keeps it, and its
/// timestamps then say so; 0.8 allows for the rate the runtime measured the threshold with);
/// and every call is either recorded or counted as dropped, exactly.
fn assert_min_duration_sleeps(
    all: &DumpProcess,
    kept: &DumpProcess,
    dropped: u64,
    threshold_ns: f64,
    context: &str,
) {
    assert_eq!(all.lost + kept.lost, 0, "{context}: events lost");
    assert_balanced(all, context);
    assert_balanced(kept, context);
    let made = calls_per_function(all);
    let recorded = calls_per_function(kept);
    assert_eq!(made.get("tiny"), Some(&1000), "{context}: {made:?}");
    for f in ["main", "nap10", "nap30", "sleep_ms"] {
        assert_eq!(recorded.get(f), made.get(f), "{context}: {f}: {recorded:?}");
    }
    for (f, n) in &recorded {
        assert!(
            made.get(f).is_some_and(|m| n <= m),
            "{context}: {f}: {n}, made {made:?}"
        );
    }
    for (tid, events) in &kept.threads {
        // (function, entry ns, whether a callee was recorded) of each open call
        let mut open: Vec<(&str, f64, bool)> = Vec::new();
        for e in events {
            if e.kind == "entry" {
                if let Some(parent) = open.last_mut() {
                    parent.2 = true;
                }
                open.push((&e.name, e.ns, false));
            } else if e.kind == "exit" {
                let (f, start, callees) = open.pop().unwrap();
                assert!(
                    callees || e.ns - start >= 0.8 * threshold_ns,
                    "{context}: thread {tid}: a call of {f} of {} ns without recorded callees \
                     is in the trace",
                    e.ns - start
                );
            }
        }
    }
    let (n_made, n_recorded): (u64, u64) = (made.values().sum(), recorded.values().sum());
    assert!(dropped > 0, "{context}: nothing dropped");
    assert_eq!(
        dropped + n_recorded,
        n_made,
        "{context}: {dropped} dropped + {n_recorded} recorded, {n_made} made: {recorded:?}"
    );
}

/// Checks a trace of tracesig.c (`handled` signals, `calls` calls of work) recorded with
/// INSTRFN_MIN_DURATION, `dropped` calls counted in its meta file: every thread's events nest
/// with every exit, nothing is lost, and every call (work, leaf, on_signal, handler_fn, main,
/// sender) is either recorded, entry and exit, or counted as dropped, exactly, whatever the
/// signal handlers interrupted.
fn assert_min_duration_tracesig(
    p: &DumpProcess,
    dropped: u64,
    handled: u64,
    calls: u64,
    context: &str,
) {
    assert_eq!(p.lost, 0, "{context}: events lost");
    let counts = assert_balanced(p, context);
    let made = [
        ("work", calls),
        ("leaf", 2 * calls + 100 * handled),
        ("on_signal", handled),
        ("handler_fn", handled),
        ("main", 1),
        ("sender", 1),
    ];
    let mut n_recorded = 0;
    for (f, n) in made {
        let (entries, exits) = (count_of(&counts, "entry", f), count_of(&counts, "exit", f));
        assert_eq!(entries, exits, "{context}: {f}");
        assert!(entries <= n, "{context}: {f}: {entries} recorded, {n} made");
        n_recorded += entries;
    }
    let n_events: u64 = counts.values().sum();
    assert_eq!(
        n_events,
        2 * n_recorded,
        "{context}: other events: {counts:?}"
    );
    let n_made: u64 = made.iter().map(|(_, n)| n).sum();
    assert!(dropped > 0, "{context}: nothing dropped");
    assert_eq!(
        dropped + n_recorded,
        n_made,
        "{context}: {dropped} dropped + {n_recorded} recorded, {n_made} made: {counts:?}"
    );
}

/// INSTRFN_MIN_DURATION under signal handlers that trace between any two instructions of the
/// trampolines: tracesig.c `exe` (the runtime linked in) single-stepped under qemu with 4 KiB
/// chunks, at 1 s (every call short), 100 µs (handler_fn mostly long, work and leaf short), and
/// 100 µs with `walk` (tracesig.c's stack-walking argument) in every handler. Every run: a
/// nested trace with every exit, nothing lost, every call recorded or counted as dropped.
fn min_duration_tracesig_rounds(arch: Arch, exe: &Path, dir: &Path, name: &str, walk: &str) {
    for (threshold, walking) in [("1s", false), ("100us", false), ("100us", true)] {
        let context = format!("{name} {threshold}{}", if walking { " walk" } else { "" });
        let args: &[&str] = if walking { &["3000", walk] } else { &["3000"] };
        let env = [("INSTRFN_MIN_DURATION", threshold)];
        let (handled, calls, p, tdir) =
            tracesig_singlestep_run(arch, exe, args, &env, dir, &context);
        assert_min_duration_tracesig(&p, meta_dropped(&tdir), handled, calls, &context);
    }
}

/// INSTRFN_MIN_DURATION=5ms on sleeps.c: `traced(env)` runs it in trace mode with extra
/// environment `env` and returns its output and trace directory, once without the threshold
/// and once with it. Each trace is one process; with the threshold the program still prints
/// its naps. Code built with -finstrument-functions (`instrument_functions`) records every
/// call, as on every architecture (its exit hook has no shadow entry that ties it to its own
/// entry): nothing dropped, the same calls as without the threshold; any other code as
/// [`assert_min_duration_sleeps`] says.
fn min_duration_sleeps_runs(
    instrument_functions: bool,
    context: &str,
    traced: impl Fn(&[(&str, &str)]) -> (String, PathBuf),
) {
    let (_, trace) = traced(&[]);
    let mut procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1, "{context}");
    let all = procs.remove(0);
    let (out, trace) = traced(&[("INSTRFN_MIN_DURATION", "5ms")]);
    assert!(out.starts_with("nap10 "), "{context}: {out}");
    let mut procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1, "{context}");
    let (kept, dropped) = (procs.remove(0), meta_dropped(&trace));
    if instrument_functions {
        assert_eq!(dropped, 0, "{context}");
        assert_eq!(
            calls_per_function(&kept),
            calls_per_function(&all),
            "{context}"
        );
    } else {
        assert_min_duration_sleeps(&all, &kept, dropped, 5e6, context);
    }
}
