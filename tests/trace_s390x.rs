//! Trace mode on s390x, under qemu-user: golden call trees for every entry kind gcc emits
//! (-pg, -pg -mfentry, -finstrument-functions), preloaded and linked; the exit trampoline's
//! registers (fast and slow exits, with and without the vector facility, and a harness that
//! catches a clobbering trampoline); unwinding through traced frames (an unwinder's walk,
//! longjmp, siglongjmp, pthread_exit and cancellation, tail calls, backtrace(), also from
//! signal handlers, and C++ exceptions); INSTRFN_EXITS=off; INSTRFN_MIN_DURATION
//! (also with signal handlers in the middle of a take-back); and the host's `instrfn dump`
//! reading the big-endian traces (symbols, clock).

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// calltree.c's threads and rounds.
const T: usize = 4;
const K: usize = 5;

/// Compiles `tests/fixtures/<src>` for z13 (vector registers live) with `-O2 flags -c`.
fn compile(dir: &Path, src: &str, flags: &[&str], obj: &str) -> PathBuf {
    let source = fixture(src);
    let mut args: Vec<&OsStr> = ["-O2", "-march=z13", "-c"].map(OsStr::new).to_vec();
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    cc(S390X, &args, &dir.join(obj))
}

/// The same with clang for s390x (Debian's clang cross-compiles with the gcc cross headers).
fn compile_clang(dir: &Path, src: &str, flags: &[&str], obj: &str) -> PathBuf {
    require_tool("clang");
    let obj = dir.join(obj);
    run_ok(
        std::process::Command::new("clang")
            .args(["--target=s390x-linux-gnu", "-O2", "-march=z13", "-c"])
            .args(flags)
            .arg(fixture(src))
            .arg("-o")
            .arg(&obj),
    );
    obj
}

/// C++ exceptions through -pg and -pg -mfentry frames of a program linked with -static-libgcc
/// -static-libstdc++, preloaded (its unwinder walks through the exit trampoline with the return
/// pad's unwind info, asm/s390x.s; before, the first throw ended in an abort).
#[test]
fn s390x_trace_survives_cpp_exceptions_with_a_static_libgcc() {
    for flags in [&["-pg"][..], &["-pg", "-mfentry"]] {
        static_libgcc_cpp_runs(S390X, "s390x-linux-gnu-g++", flags);
    }
}

#[test]
fn s390x_trace_golden_call_tree_every_entry() {
    // A known call tree at 4 threads: exactly the expected entry/exit sequence per thread, for
    // -pg (_mcount), -pg -mfentry (__fentry__) and -finstrument-functions, preloaded and with
    // the runtime linked in, read by the host's `instrfn dump` (big-endian chunks, symbols
    // from the s390x ELF file, TOD clock).
    // clang 14 -pg -mfentry makes the same first-instruction call as gcc. (clang 14 -pg
    // itself is s390x_trace_clang14_mcount_entries_only.)
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for (clang, flags) in [
        (false, &["-pg"][..]),
        (false, &["-pg", "-mfentry"][..]),
        (false, &["-finstrument-functions"][..]),
        (true, &["-pg", "-mfentry"][..]),
    ] {
        let name = format!(
            "s390x-trace-golden{}{}",
            if clang { "-clang" } else { "" },
            flags.join("")
        );
        let dir = workdir(&name);
        let obj = if clang {
            compile_clang(&dir, "c/calltree.c", flags, "calltree.o")
        } else {
            compile(&dir, "c/calltree.c", flags, "calltree.o")
        };
        let preloaded = cc(
            S390X,
            &[obj.as_os_str(), OsStr::new("-lpthread")],
            &dir.join("calltree"),
        );
        let linked = link_with(
            S390X.cc,
            &[obj.as_os_str()],
            false,
            &dir.join("calltree-linked"),
        );
        for (exe, preload, how) in [(&preloaded, true, "preloaded"), (&linked, false, "linked")] {
            let context = format!("{name} {how}");
            let trace = dir.join(format!("trace-{how}"));
            let out = run_in_trace_mode(S390X, exe, &args, preload, &[], &dir, &trace);
            assert!(
                String::from_utf8_lossy(&out.stdout).contains(&format!("calltree {T} {K}")),
                "{context}: {out:?}"
            );
            let procs = instrfn_dump(&trace);
            assert_eq!(procs.len(), 1, "{context}");
            let p = &procs[0];
            assert!(
                !p.header.contains("did not exit normally"),
                "{context}: {}",
                p.header
            );
            assert_calltree(p, T, K, &context);
            let events: usize = p.threads.values().map(Vec::len).sum();
            assert_eq!(events, 2 + T * (2 + 10 * K), "{context}");
            // The chunks are big-endian: the version word reads 1 that way.
            for chunk in raw_chunks(&trace) {
                assert!(!chunk.little_endian, "{context}: {chunk:?}");
            }
        }
    }
}

/// The exit-trampoline harness (tests/fixtures/regs/s390x_exit.S and its driver) built for
/// `march`, statically linked with the runtime, and dynamically against libinstrfn.so.
fn exit_harness(dir: &Path, march: &str) -> (PathBuf, PathBuf) {
    let driver = fixture("regs/s390x_exit_driver.c");
    let harness = fixture("regs/s390x_exit.S");
    let march = format!("-march={march}");
    let lib = runtime_lib(S390X, Lib::Static);
    let shared = runtime_lib(S390X, Lib::Shared);
    let libdir = format!("-L{}", shared.parent().unwrap().display());
    let common: Vec<&OsStr> = vec![
        OsStr::new("-O1"),
        OsStr::new(&march),
        driver.as_os_str(),
        harness.as_os_str(),
    ];
    let mut st = common.clone();
    st.extend([lib.as_os_str(), OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    let st = cc(S390X, &st, &dir.join("exit-static"));
    // Eager binding: a lazy PLT resolver (the loader, not instrfn) clobbers scratch registers.
    let mut dy = common;
    dy.extend([
        OsStr::new(&libdir),
        OsStr::new("-linstrfn"),
        OsStr::new("-Wl,-z,now"),
        OsStr::new("-lpthread"),
    ]);
    let dy = cc(S390X, &dy, &dir.join("exit-dynamic"));
    (st, dy)
}

/// The kinds of the exit harness: 0 `_mcount` (gcc -pg), 1 `__fentry__` (gcc -pg -mfentry),
/// 2 `mcount` (LLVM's name, same sequence), 3 `mcount` called after the prologue (clang 14 -pg:
/// entries without exits).
const EXIT_KINDS: [&str; 4] = ["0", "1", "2", "3"];

/// The harness's "ok calls=N entries=E exits=X skipped=S" line, as (E, X, S).
fn exit_ok(stdout: &str, context: &str) -> (usize, usize, usize) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ok "))
        .unwrap_or_else(|| panic!("{context}: no ok line in {stdout}"));
    let field = |key: &str| -> usize {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.parse().ok())
            .unwrap_or_else(|| panic!("{context}: no {key} in {line}"))
    };
    (field("entries="), field("exits="), field("skipped="))
}

#[test]
fn s390x_trace_exit_trampoline_keeps_registers() {
    // Every register a function may return in, and every callee-saved one (v0-v31 in full),
    // through the exit trampoline's fast part (a call word, and with call words off an exit
    // event) and its slow part (a frame left behind; no room in the chunk; a full shadow
    // stack), and through the entry trampolines in trace mode;
    // with INSTRFN_MIN_DURATION=1s the fast exits take their entries back (counted).
    let dir = workdir("s390x-trace-exit-regs");
    let (st, dy) = exit_harness(&dir, "z13");
    let shared = runtime_lib(S390X, Lib::Shared);
    let libdir = shared.parent().unwrap().display().to_string();
    let ld = ("LD_LIBRARY_PATH", libdir.as_str());
    for (exe, link) in [(&st, "static"), (&dy, "dynamic")] {
        for (label, env) in [
            ("default", vec![]),
            ("4 KiB chunks", vec![("INSTRFN_BUFSIZE", "4096")]),
            // (Without call words every exit reserves its event, as before them.)
            (
                "4 KiB chunks, no call words",
                vec![("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")],
            ),
            ("depth 1", vec![("INSTRFN_MAX_DEPTH", "1")]),
            ("min duration", vec![("INSTRFN_MIN_DURATION", "1s")]),
        ] {
            for kind in EXIT_KINDS {
                let context = format!("{link} {label} kind {kind}");
                let trace = dir.join("trace");
                let mut env = env.clone();
                if link == "dynamic" {
                    env.push(ld);
                }
                let out = run_in_trace_mode(S390X, exe, &[kind], false, &env, &dir, &trace);
                let stdout = String::from_utf8_lossy(&out.stdout);
                let (entries, exits, skipped) = exit_ok(&stdout, &context);
                let procs = instrfn_dump(&trace);
                let counts = dump_counts(&procs[0]);
                let count = |kind: &str, name: &str| {
                    counts
                        .get(&(kind.to_string(), name.to_string()))
                        .copied()
                        .unwrap_or(0)
                };
                let traced = format!("traced{kind}");
                let skip = format!("skipped{kind}");
                if kind == "3" {
                    // Nothing hijacked: entries without exits, nothing to close.
                    assert_eq!(count("entry-no-exit", &traced), entries, "{context}");
                    assert_eq!(count("entry-no-exit", &skip), skipped, "{context}");
                    assert_eq!(exits, 0, "{context}");
                    assert_eq!(
                        counts.len(),
                        4,
                        "{context}: {counts:?} (main's entry and exit, those two)"
                    );
                    continue;
                }
                if label == "min duration" {
                    // Every call is short: the exit trampoline takes the entry back
                    // (.Lexit_short, with the registers as they must be), counted; the calls
                    // recorded are those whose entry was not the newest event any more (the
                    // first of a chunk). The skipped frames' exits take the slow path, and the
                    // entries whose exit the driver does not record (entries - exits: recording
                    // stopped meanwhile) stay.
                    let recorded = count("exit", &traced);
                    let dropped = meta_dropped(&trace) as usize;
                    assert_eq!(
                        count("entry", &traced) - recorded,
                        entries - exits,
                        "{context}: {counts:?}"
                    );
                    assert!(dropped > exits / 2, "{context}: {dropped} dropped");
                    assert_eq!(dropped + recorded, exits, "{context}: {dropped} dropped");
                } else {
                    assert_eq!(count("entry", &traced), entries, "{context}: {counts:?}");
                    assert_eq!(count("exit", &traced), exits, "{context}: {counts:?}");
                }
                if label == "depth 1" {
                    // The skipped frame found the shadow stack full: an entry without exit,
                    // and nothing to close.
                    assert_eq!(count("entry-no-exit", &skip), skipped, "{context}");
                    assert_eq!(count("unwound", &skip), 0, "{context}");
                } else {
                    assert_eq!(count("entry", &skip), skipped, "{context}: {counts:?}");
                    assert_eq!(count("unwound", &skip), skipped, "{context}: {counts:?}");
                }
                if label == "4 KiB chunks, no call words" {
                    // (With call words the fast section's exits take no room: call words.)
                    // The driver's schedule puts an exit at the start of every chunk of its fast
                    // section: exits the trampoline had no room for (15 chunks of 16-byte
                    // events, 7 of compact ones, nearly all short there). A long event among
                    // them moves the rest by 8 bytes: so the driver runs again with its events
                    // moved by 8 bytes (`shift`), and the two runs together must have them.
                    let starts = |trace: &Path| {
                        raw_chunks(trace)
                            .iter()
                            .filter(|c| c.slot == 0 && c.seq > 0 && c.first_kind == 2)
                            .count()
                    };
                    let unshifted = starts(&trace);
                    let out =
                        run_in_trace_mode(S390X, exe, &[kind, "shift"], false, &env, &dir, &trace);
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    assert_eq!(exit_ok(&stdout, &context), (entries, exits, skipped));
                    let shifted = starts(&trace);
                    assert!(
                        unshifted + shifted >= 5,
                        "{context}: {unshifted} and {shifted} chunks start with an exit"
                    );
                }
            }
        }
    }
}

#[test]
fn s390x_trace_exit_trampoline_without_vector_facility() {
    // The slow parts pick their save method at run time: on a CPU without the vector facility
    // they save the FPRs only and execute no vector instruction (qemu would raise SIGILL).
    let dir = workdir("s390x-trace-exit-novx");
    let (st, _) = exit_harness(&dir, "z10");
    for kind in EXIT_KINDS {
        let trace = dir.join("trace");
        let _ = std::fs::remove_dir_all(&trace);
        let out = run_ok(
            std::process::Command::new("qemu-s390x")
                .args([
                    "-cpu",
                    "qemu,vx=off,vxeh=off,vxeh2=off",
                    "-L",
                    S390X.sysroot.unwrap(),
                    "-E",
                    "INSTRFN_MODE=trace",
                    "-E",
                    "INSTRFN_BUFSIZE=4096",
                    "-E",
                ])
                .arg(format!("INSTRFN_OUTPUT={}", trace.display()))
                .arg(&st)
                .arg(kind)
                .current_dir(&dir),
        );
        let (entries, exits, _) = exit_ok(&String::from_utf8_lossy(&out.stdout), kind);
        let counts = dump_counts(&instrfn_dump(&trace)[0]);
        let traced = format!("traced{kind}");
        let entry = if kind == "3" {
            "entry-no-exit"
        } else {
            "entry"
        };
        assert_eq!(
            counts.get(&(entry.to_string(), traced.clone())),
            Some(&entries),
            "kind {kind}"
        );
        assert_eq!(
            counts
                .get(&("exit".to_string(), traced))
                .copied()
                .unwrap_or(0),
            exits,
            "kind {kind}"
        );
    }
}

/// A test that cannot fail proves nothing: the exit harness, linked against fake trampolines
/// that replace the return address with fake exit trampolines which each clobber one register
/// a function returns in (r2; the right half of v24, the vector return register; f2, the
/// imaginary part of a complex result), must name each.
#[test]
fn s390x_trace_harness_catches_a_clobbering_exit_trampoline() {
    let dir = workdir("s390x-trace-exit-negative");
    let fake = "\
        .machine z13\n\
        .globl _mcount, __fentry__, mcount, instrfn_start, instrfn_stop\n\
        .globl __cyg_profile_func_enter, __cyg_profile_func_exit\n\
        _mcount: lg %r1, 8(%r15)\n stgrl %r1, saved\n larl %r1, exit_r2\n\
         stg %r1, 8(%r15)\n br %r14\n\
        exit_r2: lghi %r2, 0\n lgrl %r1, saved\n br %r1\n\
        __fentry__: stgrl %r14, saved\n larl %r14, exit_v24\n lgr %r1, %r0\n br %r1\n\
        exit_v24: vleig %v24, 0, 1\n lgrl %r1, saved\n br %r1\n\
        mcount: lg %r1, 8(%r15)\n stgrl %r1, saved\n larl %r1, exit_f2\n\
         stg %r1, 8(%r15)\n br %r14\n\
        exit_f2: lzdr %f2\n lgrl %r1, saved\n br %r1\n\
        instrfn_start: br %r14\ninstrfn_stop: br %r14\n\
        __cyg_profile_func_enter: br %r14\n__cyg_profile_func_exit: br %r14\n\
        .data\n .p2align 3\nsaved: .quad 0\n\
        .section .note.GNU-stack,\"\",%progbits\n";
    let fake_s = dir.join("fake.S");
    std::fs::write(&fake_s, fake).unwrap();
    let driver = fixture("regs/s390x_exit_driver.c");
    let harness = fixture("regs/s390x_exit.S");
    let exe = cc(
        S390X,
        &[
            OsStr::new("-O1"),
            OsStr::new("-march=z13"),
            driver.as_os_str(),
            harness.as_os_str(),
            fake_s.as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &dir.join("exit-fake"),
    );
    // Indices in the harness's order: r2 is #0, the right half of v24 #15 + 2 * 24 + 1, f2 (the
    // left half of v2) #15 + 2 * 2.
    for (kind, index, what) in [("0", 0, "r2"), ("1", 64, "v24 right half"), ("2", 19, "f2")] {
        let out = run(&mut command(S390X, &exe, &[kind, "once"], &[], &dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "kind {kind} ({what}) passed: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains(&format!("after the exit: register #{index} clobbered")),
            "kind {kind}, {what} (#{index}): {stderr}"
        );
        assert!(!stderr.contains("at entry"), "kind {kind}: {stderr}");
    }
}

#[test]
fn s390x_trace_unwinder_sees_the_original_return_addresses() {
    // The policy for unwinding (asm/s390x.s, "Trace mode"): a frame's slot is r14's slot in its
    // register save area, where every non-leaf function's prologue saves r14, for mcount and
    // fentry code alike. So what src/trace.rs puts back before an unwinder walks the stack is
    // what the unwinder reads, and the walk goes through every traced frame (the exit
    // trampoline's CFI would end it). The frames return normally afterwards (trampoline back
    // in place: every exit is traced). Linked statically: the entry points around an unwinder
    // that "told" calls by hand are internal to the runtime.
    for flags in [&["-pg"][..], &["-pg", "-mfentry"][..]] {
        let name = format!("s390x-trace-unwind{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(&dir, "c/unwalk.c", flags, "unwalk.o");
        let walker = compile(&dir, "c/unwind_walk.c", &[], "unwind_walk.o");
        let lib = runtime_lib(S390X, Lib::Static);
        let exe = cc(
            S390X,
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
        let out = run_in_trace_mode(S390X, &exe, &[], false, &[], &dir, &trace);
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

#[test]
fn s390x_trace_clock_without_an_end_line() {
    // A trace whose process never wrote its end line (killed) is timed by the counter's
    // nominal rate: for the TOD clock 4096 ticks per microsecond. The same trace read with and
    // without its end must give the same times, within 1%.
    let dir = workdir("s390x-trace-clock");
    let obj = compile(&dir, "c/calltree.c", &["-pg"], "calltree.o");
    let exe = link_with(S390X.cc, &[obj.as_os_str()], false, &dir.join("calltree"));
    let trace = dir.join("trace");
    run_in_trace_mode(S390X, &exe, &["2", "200"], false, &[], &dir, &trace);
    let full = instrfn_dump(&trace);
    let meta = std::fs::read_dir(&trace)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "meta"))
        .unwrap();
    let text = std::fs::read_to_string(&meta).unwrap();
    let clocks = text.lines().filter(|l| l.starts_with("clock ")).count();
    assert_eq!(clocks, 2, "{text}");
    // Keep the first clock line only, and drop the end line.
    let mut seen_clock = false;
    let cut: String = text
        .lines()
        .filter(|l| {
            if l.starts_with("end ") {
                return false;
            }
            if l.starts_with("clock ") {
                let keep = !seen_clock;
                seen_clock = true;
                return keep;
            }
            true
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&meta, cut).unwrap();
    let killed = instrfn_dump(&trace);
    assert!(killed[0].header.contains("did not exit normally"));
    let last = |p: &DumpProcess| {
        p.threads
            .values()
            .flat_map(|v| v.iter().map(|e| e.ns))
            .fold(0.0f64, f64::max)
    };
    let (a, b) = (last(&full[0]), last(&killed[0]));
    assert!(a > 0.0 && (a - b).abs() <= 0.01 * a, "{a} ns vs {b} ns");
}

#[test]
fn s390x_trace_tail_calls_end_their_callers() {
    // gcc -O2 ends f in `jg g` and g in `jg h`: each tail call leaves the frame's slot holding
    // the exit trampoline, with the calling function's shadow entry on the same slot. The
    // slow path closes that function (its exit) and gives the new one its return address, so
    // h returns straight to main through the trampoline.
    for flags in [&["-pg"][..], &["-pg", "-mfentry"][..]] {
        let name = format!("s390x-trace-tailcall{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(&dir, "c/tailcall.c", flags, "tailcall.o");
        let exe = link_with(S390X.cc, &[obj.as_os_str()], false, &dir.join("tailcall"));
        let trace = dir.join("trace");
        let out = run_in_trace_mode(S390X, &exe, &[], false, &[], &dir, &trace);
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

/// Runs tracesig.c (built with `flags`, the runtime linked in) for `rounds` rounds with the
/// extra arguments `args` and environment `env`: the main thread's trace stays nested and
/// complete, and every call is in it.
fn signal_rounds(name: &str, flags: &[&str], args: &[&str], env: &[(&str, &str)], rounds: u32) {
    let dir = workdir(name);
    let obj = compile(&dir, "c/tracesig.c", flags, "tracesig.o");
    let exe = link_with(S390X.cc, &[obj.as_os_str()], false, &dir.join("tracesig"));
    let mut argv = vec!["20000"];
    argv.extend_from_slice(args);
    for round in 0..rounds {
        let context = format!("{name} round {round}");
        let trace = dir.join("trace");
        let out = run_in_trace_mode(S390X, &exe, &argv, false, env, &dir, &trace);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
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

#[test]
fn s390x_trace_signal_handlers_interrupt_trampolines_anywhere() {
    // Handlers that trace (and, with 4 KiB chunks, take the next chunk) between any two
    // instructions of the entry and exit trampolines: the main thread's trace stays nested
    // and complete, and every call is in it. Each handler makes ~200 events, so it usually
    // takes a new chunk while the code it interrupted may hold a reservation in the old one,
    // which must stay mapped until written.
    for flags in [
        &["-pg"][..],
        &["-pg", "-mfentry"][..],
        &["-finstrument-functions"][..],
    ] {
        let name = format!("s390x-trace-signals{}", flags.join(""));
        signal_rounds(&name, flags, &[], &[("INSTRFN_BUFSIZE", "4096")], 3);
    }
}

#[test]
fn s390x_trace_signal_handlers_walk_the_stack_mid_push() {
    // The same handlers, each walking the stack with backtrace() first (tracesig.c `walk`):
    // the walk puts the original return addresses back and the exit trampoline afterwards,
    // also when the handler interrupted an entry fast path between claiming its shadow entry
    // and writing the entry's slot (slot 0: being pushed). That entry's frame has nothing
    // replaced yet and is left alone by both (src/trace.rs, `unwind_looked`: it dereferenced
    // the null slot, SIGSEGV in nearly every run). Default chunks: a handler takes at most one
    // new chunk here.
    for flags in HIJACKED {
        let name = format!("s390x-trace-signals-walk{}", flags.join(""));
        signal_rounds(&name, flags, &["walk"], &[], 3);
    }
}

#[test]
fn s390x_trace_clang14_mcount_entries_only() {
    // clang 14 -pg calls mcount after its prologue, as an ordinary call: nothing reloads r14
    // from 8(%r15), which is a word of the function's own frame. The trampoline sees that at
    // the return address and records entries without exits, replacing nothing; the trace is
    // every entry, in order, and nothing else (no exit, nothing closed as unwound).
    let dir = workdir("s390x-trace-clang14-pg");
    let obj = compile_clang(&dir, "c/calltree.c", &["-pg"], "calltree.o");
    let exe = link_with(S390X.cc, &[obj.as_os_str()], false, &dir.join("calltree"));
    let trace = dir.join("trace");
    run_in_trace_mode(
        S390X,
        &exe,
        &[&T.to_string(), &K.to_string()],
        false,
        &[],
        &dir,
        &trace,
    );
    assert_calltree_entries_only(&instrfn_dump(&trace)[0], T, K, "s390x clang 14 -pg");
}

/// The entry kinds of gcc -pg code: `_mcount` before the prologue (the return address at
/// 8(%r15), reloaded into r14 after the call) and `__fentry__` as the first instruction (the
/// return address in r14).
const HIJACKED: [&[&str]; 2] = [&["-pg"], &["-pg", "-mfentry"]];

/// Links `objs` (C or C++ with `driver`) preloaded or with the runtime linked in.
fn link_with(driver: &str, objs: &[&OsStr], preload: bool, out: &Path) -> PathBuf {
    let lib = runtime_lib(S390X, Lib::Static);
    let mut cmd = std::process::Command::new(driver);
    cmd.args(objs);
    if !preload {
        cmd.arg(&lib);
    }
    run_ok(cmd.args(["-lpthread", "-ldl", "-o"]).arg(out));
    out.to_path_buf()
}

/// Ways out of a function other than its return (unwind.c, as on x86_64 in tests/host.rs and
/// on aarch64): longjmp, siglongjmp from a handler on an alternate stack, pthread_exit,
/// cancellation, a shadow stack too small (INSTRFN_MAX_DEPTH=4: the frames beyond it are
/// entries without exit), tail calls (`jg`, leaving the trampoline in r14 or at 8(%r15) for
/// the callee), backtrace() (glibc's, through the wrapped entry point: the walk sees the real
/// callers, and the frames return traced), and signal handlers in the middle of the thread's
/// own calls. Every entry gets its exit or is closed as unwound, with the exact counts of the
/// x86_64 test, and the program prints what it prints without instrfn; for mcount and fentry
/// code, preloaded and linked statically. (print_backtrace is static and not `noinline`; gcc
/// keeps it a call here, as on aarch64, so it has its exit too.)
#[test]
fn s390x_trace_survives_longjmp_unwinding_and_tail_calls() {
    for flags in HIJACKED {
        let name = format!("s390x-trace-unwind-c{}", flags.join(""));
        let dir = workdir(&name);
        let mut cflags = flags.to_vec();
        cflags.push("-rdynamic");
        let obj = compile(&dir, "c/unwind.c", &cflags, "unwind.o");
        for preload in [true, false] {
            let how = if preload { "preloaded" } else { "linked" };
            let exe = link_with(
                S390X.cc,
                &[obj.as_os_str(), OsStr::new("-rdynamic")],
                preload,
                &dir.join(format!("unwind-{how}")),
            );
            let trace = dir.join(format!("trace-{how}"));
            let label = format!("{name} {how}");
            assert_unwind_runs(S390X, &exe, &dir, 300_000, &label, |args, env| {
                let out = run_in_trace_mode(S390X, &exe, args, preload, env, &dir, &trace);
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                (stdout, instrfn_dump(&trace).remove(0))
            });
        }
    }
}

/// C++ exceptions through -pg frames (throw.cpp, as on x86_64 and aarch64), built with the
/// cross g++ for mcount and fentry code: thrown through destructors (cleanup pads,
/// _Unwind_Resume), caught, rethrown (_Unwind_Resume_or_Rethrow). The unwinder reads each
/// frame's return address from r14's save slot, where src/trace.rs put the original back
/// first; `__cxa_begin_catch` closes the thrown-through frames as unwound, the catching ones
/// are traced returning. The same output; preloaded and linked statically.
#[test]
fn s390x_trace_survives_cpp_exceptions() {
    for flags in HIJACKED {
        let name = format!("s390x-trace-cpp{}", flags.join(""));
        let dir = workdir(&name);
        let mut cflags = vec!["-march=z13"];
        cflags.extend_from_slice(flags);
        // What s390x checks beyond the other architectures: every thrower frame's entry, and
        // after()'s exits (4 rounds).
        let extra = [("entry", "_Z7throwerm", 4 * 9), ("exit", "_Z5afterv", 4)];
        let gxx = "s390x-linux-gnu-g++";
        cross_cpp_exception_runs(S390X, gxx, &cflags, &dir, &extra, |exe, args, kind| {
            let trace = dir.join(format!("trace-{kind:?}"));
            let preload = kind == Runtime::Preload;
            let out = run_in_trace_mode(S390X, exe, args, preload, &[], &dir, &trace);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            (stdout, instrfn_dump(&trace).remove(0))
        });
    }
}

/// INSTRFN_EXITS=off (mode 2 of the fast path): no return address is replaced, for mcount
/// and fentry code; every call is an entry without exit, in the order of the golden sequence,
/// and the program's output is unchanged. A thread's first entry finds no chunk and takes the
/// slow path, which records it the same way; with 4 KiB chunks and 100 rounds each worker
/// thread also fills several chunks.
#[test]
fn s390x_trace_exits_off_records_entries_only() {
    for flags in HIJACKED {
        let name = format!("s390x-trace-exits-off{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(&dir, "c/calltree.c", flags, "calltree.o");
        for preload in [true, false] {
            let how = if preload { "preloaded" } else { "linked" };
            let exe = link_with(
                S390X.cc,
                &[obj.as_os_str()],
                preload,
                &dir.join(format!("calltree-{how}")),
            );
            for (k, chunk) in [(K, "1048576"), (100, "4096")] {
                let context = format!("{name} {how} K={k} INSTRFN_BUFSIZE={chunk}");
                let trace = dir.join(format!("trace-{how}"));
                let args = [T.to_string(), k.to_string()];
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = run_in_trace_mode(
                    S390X,
                    &exe,
                    &args,
                    preload,
                    &[("INSTRFN_EXITS", "off"), ("INSTRFN_BUFSIZE", chunk)],
                    &dir,
                    &trace,
                );
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout).trim(),
                    format!("calltree {T} {k}"),
                    "{context}"
                );
                let procs = instrfn_dump(&trace);
                assert_eq!(procs.len(), 1, "{context}");
                assert_eq!(procs[0].lost, 0, "{context}");
                assert_calltree_entries_only(&procs[0], T, k, &context);
            }
        }
        // The entries are recorded on the fast path: the slow path blocks every signal
        // (rt_sigprocmask twice), which qemu's -strace shows; 4 threads of 100 rounds make
        // 2004 calls, of which only each thread's first and those that take a new chunk
        // (a few per thread) may go slow.
        let exe = dir.join("calltree-linked");
        let trace = dir.join("trace-strace");
        let out = run_ok(
            std::process::Command::new("qemu-s390x")
                .args(["-strace", "-L", S390X.sysroot.unwrap()])
                .args(["-E", "INSTRFN_MODE=trace", "-E", "INSTRFN_EXITS=off"])
                .args(["-E", "INSTRFN_BUFSIZE=4096", "-E"])
                .arg(format!("INSTRFN_OUTPUT={}", trace.display()))
                .arg(&exe)
                .args([T.to_string(), "100".to_string()])
                .current_dir(&dir),
        );
        let masks = String::from_utf8_lossy(&out.stderr)
            .matches("rt_sigprocmask(")
            .count();
        assert!(
            masks < 200,
            "{name}: {masks} rt_sigprocmask calls for 2004 traced calls: the slow path"
        );
        assert_calltree_entries_only(&instrfn_dump(&trace)[0], T, 100, &name);
    }
}

/// INSTRFN_MIN_DURATION (asm/s390x.s `.Lexit_short`): sleeps.c with a threshold of 5 ms,
/// between its 1000 calls of tiny() (nanoseconds) and its naps (10 and 30 ms): the exit
/// trampoline takes back the entry of every short call, so the trace holds exactly the naps
/// and main, and every call left out is counted (`dropped` in the meta file: recorded +
/// dropped = the calls of a run without the threshold, exactly). gcc -pg and -pg -mfentry
/// (one exit trampoline for both), preloaded and linked. -finstrument-functions code records
/// every call, as on every architecture (its exit hook has no shadow entry that ties it to its
/// own entry).
#[test]
fn s390x_trace_min_duration_leaves_short_calls_out() {
    for flags in [
        &["-pg"][..],
        &["-pg", "-mfentry"][..],
        &["-finstrument-functions"][..],
    ] {
        let name = format!("s390x-trace-min-duration{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(&dir, "c/sleeps.c", flags, "sleeps.o");
        let cyg = flags == ["-finstrument-functions"];
        for preload in [true, false] {
            let how = if preload { "preloaded" } else { "linked" };
            let exe = link_with(
                S390X.cc,
                &[obj.as_os_str()],
                preload,
                &dir.join(format!("sleeps-{how}")),
            );
            let context = format!("{name} {how}");
            min_duration_sleeps_runs(cyg, &context, |env| {
                let trace = dir.join(format!("trace-{how}"));
                let out = run_in_trace_mode(S390X, &exe, &[], preload, env, &dir, &trace);
                (String::from_utf8_lossy(&out.stdout).into_owned(), trace)
            });
        }
    }
}

/// INSTRFN_MIN_DURATION under signal handlers that trace between any two instructions of the
/// trampolines (tracesig.c, qemu single-stepping, 4 KiB chunks; see
/// s390x_trace_signal_handlers_interrupt_trampolines_anywhere): a handler that comes while
/// the exit trampoline takes an entry back (between its check of the newest event and the
/// csg that moves the position back) either leaves events, and then the entry stays and gets
/// its exit, or had all its calls taken back too, and then the entry goes as well. At 1 s
/// every call is short; at 100 µs handler_fn (100 calls of leaf) is mostly long and work and
/// leaf are short, so handlers often leave events in the middle of a take-back; the last
/// round walks the stack in every handler. Every run: a nested trace with every exit, nothing
/// lost, and every call recorded or counted as dropped, exactly.
#[test]
fn s390x_trace_min_duration_signal_handlers_interrupt_the_take_back() {
    for flags in HIJACKED {
        let name = format!("s390x-trace-min-duration-tracesig{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(&dir, "c/tracesig.c", flags, "tracesig.o");
        let exe = link_with(S390X.cc, &[obj.as_os_str()], false, &dir.join("tracesig"));
        min_duration_tracesig_rounds(S390X, &exe, &dir, &name, "walk");
    }
}

#[test]
fn s390x_a_full_trace_counts_every_event() {
    let dir = workdir("s390x-trace-full");
    let obj = compile(&dir, "c/calltree.c", &["-pg"], "calltree.o");
    assert_full_trace_counted(S390X, &obj, &dir, "s390x");
}

/// INSTRFN_MIN_DURATION's take-back held up at one exact instruction (exit_window.c
/// `take-back`: a breakpoint written over instrfn_s390x_exit_take_back, its handler under qemu
/// filling many 4 KiB chunks there, which the runtime retires, commits and reuses while the
/// interrupted trampoline goes on; see tests/host.rs's x86_64 test of the same): every event
/// in the trace exactly once, with the collector and without.
#[test]
fn s390x_trace_take_back_survives_a_handler_that_fills_chunks() {
    take_back_rounds(S390X);
}

/// A traced, stack-walking signal handler at each instruction of the trace fast paths in turn
/// (bpsweep.c: a breakpoint written over each instruction of _mcount's fast path and the exit
/// trampoline's, and of -finstrument-functions' hooks, -pg -mfentry's __fentry__ too, one call each, as tests/host.rs's
/// sweep does with the trap flag): every call recorded exactly, also with 4 KiB chunks filled and
/// recycled under the interrupted code and with INSTRFN_MIN_DURATION taking calls back.
#[test]
fn s390x_trace_survives_a_traced_handler_at_every_instruction() {
    bpsweeps(S390X, &[Sweep::Mcount, Sweep::Cyg, Sweep::Fentry]);
}

/// Compact events on s390x (docs/trace-format.md, chunk versions 2 and 3), big-endian:
/// compact.c under qemu, as on aarch64 and riscv64 (tests/trace_aarch64.rs): every call once,
/// balanced, named, the sleep as long as measured, both forms in the numbers the calls make.
/// The TOD clock's 2^30 ticks (4096 a microsecond) are 262 ms, so the 2N + 2 events after the
/// 1 s sleep are long; qemu-s390x maps the library within the code base's reach (4004 short
/// and 2002 long before call words). The first loop's calls of near(), which record nothing
/// inside them, are call words (the exit trampoline's merge: 998 of 1000 when it was written,
/// 2008 short events left; 0 before); built with -finstrument-functions too, where
/// `__cyg_profile_func_exit` makes them (998).
#[test]
fn s390x_compact_events_take_the_long_form_where_they_must() {
    const N: u64 = 1000;
    for flag in ["-pg", "-finstrument-functions"] {
        let c = compact_under_qemu(S390X, N, flag);
        assert!(!c.little_endian, "{c:?}");
        assert!(
            c.calls > N * 9 / 10 && c.short + 2 * c.calls >= 4 * N && c.long >= 2 * N + 2,
            "{flag}: {c:?}"
        );
    }
}
