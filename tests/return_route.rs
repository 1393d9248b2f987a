//! gcc's return route (x86_64): code built with `gcc -pg -mfentry -minstrument-return=call`
//! calls `__fentry__` first and `__return__` before each return and tail call. Traced, its
//! entries replace no return address and `__return__` writes the exits: exact call trees
//! (tail calls, recursion, threads) preloaded by `instrfn record` over the stub library, with
//! libinstrfn.a and with libinstrfn.so linked; real return addresses inside the functions;
//! every register through both calls on every path, with negative cases; C++ exceptions,
//! longjmp and the other ways out of a frame closed; the link lines; processes that mix it
//! with plain -pg -mfentry code; -mrecord-return, -mnop-mcount and gmon mode.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

feature_tests! {
    return_route:
    call_tree(x86_64),
    return_addresses_are_never_replaced(x86_64),
    registers(x86_64),
    harness_catches_a_clobbering_return(x86_64),
    exceptions_and_longjmp(x86_64),
    link_lines(x86_64),
    mixed_processes(x86_64),
    compiler_options(x86_64),
}

/// The flags of the route.
const ROUTE: &[&str] = &["-pg", "-mfentry", "-minstrument-return=call"];

/// return_route.c's threads and rounds.
const T: usize = 4;
const K: usize = 5;

/// How a route program gets `__return__`, and how it is traced.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Link {
    /// Linked against the stub library; traced by `instrfn record` (the preloaded runtime's
    /// `__return__` comes first).
    Stub,
    /// libinstrfn.a linked in; INSTRFN_MODE=trace.
    Static,
    /// libinstrfn.so linked in; INSTRFN_MODE=trace.
    Shared,
}

const LINKS: [Link; 3] = [Link::Stub, Link::Static, Link::Shared];

/// libinstrfn-return-stub.so built into `dir` from preload/return-stub.s, as the
/// documentation says.
fn stub(dir: &Path) -> PathBuf {
    let out = dir.join("libinstrfn-return-stub.so");
    let src = root().join("preload/return-stub.s");
    cc(
        X86_64,
        &[
            OsStr::new("-shared"),
            OsStr::new("-nostdlib"),
            OsStr::new("-Wl,-soname,libinstrfn-return-stub.so"),
            src.as_os_str(),
        ],
        &out,
    )
}

/// tests/fixtures/c/`src` compiled by `compiler` (gcc or g++) with -O2 and `flags` into
/// `<dir>/<stem>.o`.
fn object(compiler: &str, dir: &Path, src: &str, flags: &[&str]) -> PathBuf {
    require_tool(compiler);
    let stem = src.split('.').next().unwrap();
    let obj = dir.join(format!("{stem}.o"));
    run_ok(
        Command::new(compiler)
            .args(["-O2", "-c"])
            .args(flags)
            .arg(fixture(&format!("c/{src}")))
            .arg("-o")
            .arg(&obj),
    );
    obj
}

/// Links `obj` with `linker` as `link` says, with `extra` arguments, into `<dir>/<stem>-<link>`.
fn link(linker: &str, dir: &Path, obj: &Path, link: Link, extra: &[&str], stem: &str) -> PathBuf {
    let exe = dir.join(format!("{stem}-{link:?}"));
    let mut cmd = Command::new(linker);
    cmd.arg(obj).args(extra);
    match link {
        Link::Stub => {
            stub(dir);
            cmd.arg(format!("-L{}", dir.display()))
                .arg("-linstrfn-return-stub")
                .arg(format!("-Wl,-rpath,{}", dir.display()));
        }
        Link::Static => {
            cmd.arg(runtime_lib(X86_64, Lib::Static));
        }
        Link::Shared => {
            let lib = runtime_lib(X86_64, Lib::Shared);
            let libdir = lib.parent().unwrap();
            cmd.arg(format!("-L{}", libdir.display()))
                .arg("-linstrfn")
                .arg(format!("-Wl,-rpath,{}", libdir.display()));
        }
    }
    run_ok(cmd.args(["-lpthread", "-ldl", "-lm", "-o"]).arg(&exe));
    exe
}

/// Runs `exe args` traced as `link` says, with `env`, into `<dir>/trace-<link>`: its output
/// (checked to succeed) and the trace directory.
fn traced_run(
    exe: &Path,
    args: &[&str],
    link: Link,
    env: &[(&str, &str)],
    dir: &Path,
) -> (Output, PathBuf) {
    match link {
        Link::Stub => {
            let (out, trace) = record_trace(exe, args, env, dir);
            let renamed = dir.join("trace-Stub");
            let _ = std::fs::remove_dir_all(&renamed);
            std::fs::rename(&trace, &renamed).unwrap();
            (out, renamed)
        }
        _ => {
            let trace = dir.join(format!("trace-{link:?}"));
            let out = run_in_trace_mode(X86_64, exe, args, false, env, dir, &trace);
            (out, trace)
        }
    }
}

/// The events of one round of return_route.c's run() (see its header).
fn round() -> Vec<(&'static str, &'static str)> {
    let call = |f| [("entry", f), ("exit", f)];
    let mut v = Vec::new();
    v.extend(call("leaf"));
    // Tail calls: each caller's exit before its callee's entry.
    v.extend(call("tail_a"));
    v.extend(call("tail_b"));
    v.extend(call("leaf"));
    v.extend([("entry", "rec"); 4]);
    v.extend([("exit", "rec"); 4]);
    for f in ["ld_twice", "cld_rot", "sret_fill", "pair", "dpair"] {
        v.extend(call(f));
    }
    for (caller, callee) in [
        ("tail_args", "args6"),
        ("tail_vd", "vsumd"),
        ("tail_ind", "leaf"),
    ] {
        v.extend(call(caller));
        v.extend(call(callee));
    }
    v.extend(call("whoami"));
    v.extend([
        ("entry", "with_alloca"),
        ("entry", "leaf"),
        ("exit", "leaf"),
        ("exit", "with_alloca"),
    ]);
    v
}

/// Checks a trace of return_route.c at `t` threads of `k` rounds: every worker thread's events
/// are exactly `entry run`, k rounds, `exit run`; the main thread's `entry main, exit main`;
/// time never goes back within a thread.
fn assert_route_tree(p: &DumpProcess, t: usize, k: usize, context: &str) {
    let mut worker = vec![("entry", "run")];
    for _ in 0..k {
        worker.extend(round());
    }
    worker.push(("exit", "run"));
    let main = vec![("entry", "main"), ("exit", "main")];
    let (mut workers, mut mains) = (0, 0);
    for (tid, events) in &p.threads {
        let seq: Vec<(&str, &str)> = events
            .iter()
            .map(|e| (e.kind.as_str(), e.name.as_str()))
            .collect();
        if seq == worker {
            workers += 1;
        } else if seq == main {
            mains += 1;
        } else {
            panic!("{context}: thread {tid}: unexpected sequence\n{seq:?}");
        }
        for w in events.windows(2) {
            assert!(w[1].ns >= w[0].ns, "{context}: thread {tid}: {w:?}");
        }
    }
    assert_eq!((workers, mains), (t, 1), "{context}: {}", p.header);
}

/// return_route.c and calltree.c built for the route, linked each way: the program prints what
/// it prints without instrfn (linked with the stub), and the trace holds exactly the expected
/// sequence per thread (return_route.c: tail calls, recursion, every kind of result; calltree.c:
/// the suite's golden tree). `instrfn record`'s summary counts every event. calltree.c also
/// with musl, linked statically.
fn call_tree(_arch: Arch) {
    let dir = workdir("return-route-golden");
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let obj = object(
        "gcc",
        &dir,
        "return_route.c",
        &[ROUTE, &["-rdynamic"]].concat(),
    );
    let plain = run_exe(
        X86_64,
        &link("gcc", &dir, &obj, Link::Stub, &["-rdynamic"], "route"),
        &args,
        &[],
        &dir,
    );
    assert!(stdout_of(&plain).starts_with(&format!("return_route {T} {K} ")));
    for l in LINKS {
        let context = format!("return_route.c {l:?}");
        let exe = link("gcc", &dir, &obj, l, &["-rdynamic"], "route");
        let (out, trace) = traced_run(&exe, &args, l, &[], &dir);
        assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
        let p = one_process(X86_64, &trace, &context);
        assert_route_tree(&p, T, K, &context);
        if l == Link::Stub {
            let events = 2 + T * (2 + K * round().len());
            assert!(
                stderr_of(&out).contains(&format!(
                    "instrfn: {events} events, {} threads, 1 process, 0 lost",
                    T + 1
                )),
                "{context}: {}",
                stderr_of(&out)
            );
        }
    }
    let obj = object("gcc", &dir, "calltree.c", ROUTE);
    for l in LINKS {
        let context = format!("calltree.c {l:?}");
        let exe = link("gcc", &dir, &obj, l, &[], "calltree");
        let (out, trace) = traced_run(&exe, &args, l, &[], &dir);
        assert_eq!(
            stdout_of(&out).trim(),
            format!("calltree {T} {K}"),
            "{context}"
        );
        assert_calltree(&one_process(X86_64, &trace, &context), T, K, &context);
    }
    require_tool("musl-gcc");
    let mobj = dir.join("calltree-musl.o");
    let src = fixture("c/calltree.c");
    let mut cargs: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
    cargs.extend(ROUTE.iter().map(OsStr::new));
    cargs.push(src.as_os_str());
    cc(X86_64_MUSL, &cargs, &mobj);
    let mlib = runtime_lib(X86_64_MUSL, Lib::Static);
    let musl = cc(
        X86_64_MUSL,
        &[OsStr::new("-static"), mobj.as_os_str(), mlib.as_os_str()],
        &dir.join("calltree-musl"),
    );
    let mdir = dir.join("musl-trace");
    run_in_trace_mode(X86_64_MUSL, &musl, &args, false, &[], &dir, &mdir);
    assert_calltree(&instrfn_dump(&mdir)[0], T, K, "calltree.c musl");
}

/// return_route.c's whoami() reads its own return address (`__builtin_return_address(0)`) and
/// checks that it lies in its caller: it does on the route, each way it is linked (the program
/// exits 0); the same program built with plain `-pg -mfentry`, whose return addresses trace
/// mode replaces, fails that check (so the check can fail).
fn return_addresses_are_never_replaced(_arch: Arch) {
    let dir = workdir("return-route-addresses");
    let args = ["2", "3"];
    let obj = object(
        "gcc",
        &dir,
        "return_route.c",
        &[ROUTE, &["-rdynamic"]].concat(),
    );
    for l in LINKS {
        let exe = link("gcc", &dir, &obj, l, &["-rdynamic"], "route");
        let (out, _) = traced_run(&exe, &args, l, &[], &dir);
        assert!(!stderr_of(&out).contains("wrong return address"), "{l:?}");
    }
    let plain = object(
        "gcc",
        &dir,
        "return_route.c",
        &["-pg", "-mfentry", "-rdynamic"],
    );
    let exe = link(
        "gcc",
        &dir,
        &plain,
        Link::Static,
        &["-rdynamic"],
        "hijacked",
    );
    let trace = dir.join("trace-hijacked");
    let out = run(&mut command(
        X86_64,
        &exe,
        &args,
        &[
            ("INSTRFN_MODE", "trace"),
            ("INSTRFN_OUTPUT", trace.to_str().unwrap()),
        ],
        &dir,
    ));
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("wrong return address"));
}

/// The register harness of the route (regs/x86_64_return.S, which includes regs/x86_64.S,
/// run by regs/driver.c) with `extra` objects or libraries, into `<dir>/<name>`.
fn regs_harness(dir: &Path, extra: &[&OsStr], name: &str) -> PathBuf {
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/x86_64_return.S");
    let mut args: Vec<&OsStr> = vec![driver.as_os_str(), harness.as_os_str()];
    args.extend_from_slice(extra);
    args.push(OsStr::new("-lpthread"));
    cc(X86_64, &args, &dir.join(name))
}

/// The harness's route kinds: (kind, the traced function, an inner function and its events per
/// call besides the traced function's).
const KINDS: [(&str, &str, Option<&str>); 4] = [
    ("4", "traced_return", None),
    ("5", "traced_tail", None),
    ("6", "traced_left", Some("left_inner")),
    ("7", "traced_none", None),
];

/// Every register survives `__fentry__` and `__return__` on the route (regs/x86_64_return.S:
/// sentinels in every register a function returns in, every argument register of a tail call,
/// ymm0-15 whole, st0, st1, mxcsr, every callee-saved one; errno): a plain return (kind 4), a
/// tail call (5), a frame left open below (6: the slow path closes it as unwound), a return
/// whose frame has no entry (7), on each path of regs/driver.c (first event, fast paths, new
/// threads, the guard held, stopped) and with 4 KiB chunks (exits that meet a full chunk: the
/// slow path; with call words off and shifted by one event, so that chunks begin with exits),
/// the trace limit, entries only (INSTRFN_EXITS=0: `__return__` returns at once) and
/// INSTRFN_MIN_DURATION (which the route does not apply). libinstrfn.a and libinstrfn.so
/// linked in. The trace holds each call as the kind says.
fn registers(_arch: Arch) {
    let dir = workdir("return-route-regs");
    let lib = runtime_lib(X86_64, Lib::Static);
    let shared = runtime_lib(X86_64, Lib::Shared);
    let libdir = shared.parent().unwrap();
    let (l, r) = (
        format!("-L{}", libdir.display()),
        format!("-Wl,-rpath,{}", libdir.display()),
    );
    let st = regs_harness(&dir, &[lib.as_os_str(), OsStr::new("-ldl")], "regs-static");
    let dy = regs_harness(
        &dir,
        &[
            OsStr::new(&l),
            OsStr::new("-linstrfn"),
            OsStr::new(&r),
            OsStr::new("-Wl,-z,now"),
        ],
        "regs-dynamic",
    );
    // Recorded calls: all but the 2 while stopped and (static only) the 2 with the guard held.
    const RECORDED: u64 = 10008;
    let no_words = &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..];
    let rows: [(&[(&str, &str)], bool); 7] = [
        (&[("INSTRFN_BUFSIZE", "1048576")], false),
        (&[("INSTRFN_BUFSIZE", "4096")], false),
        (no_words, false),
        (no_words, true),
        (&[("INSTRFN_TRACE_LIMIT", "100000")], false),
        (&[("INSTRFN_EXITS", "0")], false),
        (&[("INSTRFN_MIN_DURATION", "1s")], false),
    ];
    for exe in [&st, &dy] {
        for (kind, func, inner) in KINDS {
            let mut begun_by_exits = 0;
            for (settings, shift) in rows {
                let context = format!("{} kind {kind} {settings:?} shift {shift}", exe.display());
                let trace = dir.join("trace");
                let _ = std::fs::remove_dir_all(&trace);
                let mut env = vec![
                    ("INSTRFN_MODE", "trace"),
                    ("INSTRFN_OUTPUT", trace.to_str().unwrap()),
                ];
                env.extend_from_slice(settings);
                let args: &[&str] = if shift { &[kind, "shift"] } else { &[kind] };
                let out = run_exe(X86_64, exe, args, &env, &dir);
                let expect = if exe == &st { "ok 10012" } else { "ok 10010" };
                assert_eq!(
                    stdout_of(&out).trim(),
                    expect,
                    "{context}: {}",
                    stderr_of(&out)
                );
                let procs = instrfn_dump(&trace);
                assert_eq!(procs.len(), 1, "{context}");
                let counts = assert_balanced(&procs[0], &context);
                let n = |k: &str, f: &str| count_of(&counts, k, f);
                let lost = procs[0].lost;
                match settings[0] {
                    ("INSTRFN_EXITS", _) => {
                        assert_eq!(n("entry-no-exit", func), RECORDED, "{context}");
                        assert_eq!(n("entry", func) + n("exit", func) + lost, 0, "{context}");
                        if let Some(inner) = inner {
                            assert_eq!(n("entry-no-exit", inner), RECORDED, "{context}");
                        }
                    }
                    ("INSTRFN_TRACE_LIMIT", _) => {
                        assert!(lost > 0, "{context}: nothing lost");
                        let per_call = if inner.is_some() { 4 } else { 2 };
                        let inner_events = inner.map_or(0, |i| n("entry", i) + n("unwound", i));
                        assert_eq!(
                            n("entry", func) + n("exit", func) + inner_events + lost,
                            per_call * RECORDED,
                            "{context}"
                        );
                    }
                    _ => {
                        assert_eq!(
                            (n("entry", func), n("exit", func), lost),
                            (RECORDED, RECORDED, 0),
                            "{context}"
                        );
                        if let Some(inner) = inner {
                            assert_eq!(
                                (n("entry", inner), n("unwound", inner)),
                                (RECORDED, RECORDED),
                                "{context}"
                            );
                        }
                        assert_eq!(meta_dropped(&trace), 0, "{context}");
                    }
                }
                if settings == no_words {
                    begun_by_exits += raw_chunks(&trace)
                        .iter()
                        .filter(|c| c.seq > 0 && c.first_kind == 2)
                        .count();
                }
            }
            // Chunks that an exit began: `__return__` met a full chunk and took the slow path.
            if kind != "6" {
                assert!(begun_by_exits > 0, "{} kind {kind}", exe.display());
            }
        }
    }
}

/// The route's harness linked with a `__fentry__` that returns at once and a `__return__`
/// that clobbers a register (the upper half of ymm1; st1): the harness names it as clobbered by
/// the return in every kind, and the entry as intact.
fn harness_catches_a_clobbering_return(_arch: Arch) {
    let dir = workdir("return-route-regs-negative");
    for (clobber, register) in [
        ("vperm2i128 $0x80, %ymm1, %ymm1, %ymm1", 22),
        ("fld1\n fstp %st(2)", 81),
    ] {
        let fake = dir.join(format!("fake-return-{register}.S"));
        std::fs::write(
            &fake,
            format!(
                ".globl __fentry__, __return__, instrfn_start, instrfn_stop, \
                 instrfn_debug_call_guarded\n\
                 __fentry__: ret\n__return__: {clobber}\n ret\n\
                 instrfn_start: ret\ninstrfn_stop: ret\n\
                 instrfn_debug_call_guarded: movq %rdi, %rax\n movq %rsi, %rdi\n jmp *%rax\n\
                 .section .note.GNU-stack,\"\",@progbits\n"
            ),
        )
        .unwrap();
        let exe = regs_harness(&dir, &[fake.as_os_str()], &format!("regs-fake-{register}"));
        for (kind, ..) in KINDS {
            let out = run(&mut command(X86_64, &exe, &[kind], &[], &dir));
            let err = stderr_of(&out);
            assert!(!out.status.success(), "kind {kind}");
            assert!(
                err.contains(&format!("register #{register} clobbered by the return")),
                "kind {kind}: {err}"
            );
            assert!(!err.contains("clobbered\n"), "kind {kind}: {err}");
        }
    }
}

/// C++ exceptions through route frames with destructors (throw.cpp: cleanup pads, a catch, a
/// rethrow), with the unwinder a shared library (its entry points wrapped) and linked into the
/// program (-static-libgcc -static-libstdc++: nothing wrapped, and nothing to restore); and
/// unwind.c's ways out of a frame: longjmp, siglongjmp from a handler on an alternate stack,
/// pthread_exit, cancellation, calls deeper than the shadow stack, tail calls, backtrace(), and
/// signal handlers running traced code. The same output as without instrfn, every entry closed
/// (the frames thrown or jumped through as unwound), nothing left open, no abort.
fn exceptions_and_longjmp(_arch: Arch) {
    let dir = workdir("return-route-unwinding");
    let obj = object("g++", &dir, "throw.cpp", ROUTE);
    let expected = [
        ("unwound", "_Z7throwerm", 4 * 9),
        ("exit", "_Z7catcherm", 4),
        ("exit", "_Z5afterv", 4),
        ("exit", "main", 1),
    ];
    let statics = ["-static-libgcc", "-static-libstdc++"];
    for (l, extra, stem) in [
        (Link::Stub, &[][..], "throw"),
        (Link::Static, &[][..], "throw"),
        (Link::Stub, &statics[..], "throw-static-libgcc"),
    ] {
        let context = format!("{stem} {l:?}");
        let exe = link("g++", &dir, &obj, l, extra, stem);
        let (out, trace) = traced_run(&exe, &["4", "6"], l, &[], &dir);
        assert_eq!(stdout_of(&out), "caught 8\n", "{context}");
        let counts = assert_balanced(&one_process(X86_64, &trace, &context), &context);
        assert_counts(&counts, &expected, &context);
    }

    let obj = object("gcc", &dir, "unwind.c", &[ROUTE, &["-rdynamic"]].concat());
    type Case = (
        &'static [&'static str],
        &'static [(&'static str, &'static str, u64)],
    );
    let cases: [Case; 7] = [
        (
            &["longjmp", "5", "6"],
            &[
                ("entry", "dive", 35),
                ("unwound", "dive", 35),
                ("exit", "after", 5),
            ],
        ),
        (
            &["siglongjmp", "5", "6"],
            &[
                ("entry", "dive", 35),
                ("unwound", "dive", 35),
                ("unwound", "on_signal", 5),
                ("exit", "after", 5),
            ],
        ),
        (
            &["exit", "3", "4"],
            &[
                ("entry", "dive", 15),
                ("unwound", "dive", 15),
                ("unwound", "thread_dive", 3),
            ],
        ),
        (
            &["cancel", "3", "4"],
            &[
                ("entry", "dive", 15),
                ("unwound", "dive", 15),
                ("unwound", "thread_dive", 3),
            ],
        ),
        (
            &["recurse", "2", "10"],
            &[
                ("entry", "dive", 6),
                ("exit", "dive", 6),
                ("entry-no-exit", "dive", 16),
            ],
        ),
        (
            &["tailcall", "7"],
            &[("exit", "tail_f", 7), ("exit", "tail_g", 7)],
        ),
        (&["backtrace", "1", "5"], &[("exit", "dive", 6)]),
    ];
    for l in [Link::Stub, Link::Static] {
        let exe = link("gcc", &dir, &obj, l, &["-rdynamic"], "unwind");
        let plain_exe = link("gcc", &dir, &obj, Link::Stub, &["-rdynamic"], "unwind");
        for (args, expected) in cases {
            let context = format!("unwind {l:?}: {}", args.join(" "));
            let plain = run_exe(X86_64, &plain_exe, args, &[], &dir);
            let env: &[(&str, &str)] = if args[0] == "recurse" {
                &[("INSTRFN_MAX_DEPTH", "4")]
            } else {
                &[]
            };
            let (out, trace) = traced_run(&exe, args, l, env, &dir);
            assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
            let counts = assert_balanced(&one_process(X86_64, &trace, &context), &context);
            assert_counts(&counts, expected, &context);
        }
        let context = format!("unwind {l:?}: signal");
        let signals = 1_000_000;
        let (out, trace) = traced_run(&exe, &["signal", &signals.to_string()], l, &[], &dir);
        let counts = assert_balanced(&one_process(X86_64, &trace, &context), &context);
        assert!(
            count_of(&counts, "exit", "handled") > 10,
            "{context}: {counts:?} {}",
            stdout_of(&out)
        );
        assert_eq!(count_of(&counts, "exit", "work"), signals, "{context}");
    }
}

/// The link lines: a route program linked with nothing defining `__return__` does not link
/// (glibc has none); linked with the stub library it runs without instrfn, and `instrfn record`
/// traces it (call_tree checks the trace). A weak `__return__` in the executable itself is not
/// interposed by the preloaded runtime: the program runs, the runtime sees an object that
/// imports no `__return__` and replaces its return addresses as for plain -pg -mfentry code
/// (exits recorded all the same, and whoami() sees its return address replaced).
fn link_lines(_arch: Arch) {
    let dir = workdir("return-route-link");
    let obj = object(
        "gcc",
        &dir,
        "return_route.c",
        &[ROUTE, &["-rdynamic"]].concat(),
    );
    let out = run(Command::new("gcc")
        .arg(&obj)
        .args(["-rdynamic", "-lpthread", "-lm", "-o"])
        .arg(dir.join("unlinked")));
    assert!(!out.status.success());
    assert!(
        stderr_of(&out).contains("undefined reference to `__return__'"),
        "{}",
        stderr_of(&out)
    );
    let exe = link("gcc", &dir, &obj, Link::Stub, &["-rdynamic"], "route");
    let plain = run_exe(X86_64, &exe, &["2", "2"], &[], &dir);
    assert!(stdout_of(&plain).starts_with("return_route 2 2 "));

    let weak = dir.join("weak-return.s");
    std::fs::write(
        &weak,
        ".text\n.weak __return__\n.type __return__,@function\n__return__: ret\n\
         .section .note.GNU-stack,\"\",@progbits\n",
    )
    .unwrap();
    let wexe = dir.join("route-weak");
    run_ok(
        Command::new("gcc")
            .arg(&obj)
            .arg(&weak)
            .args(["-rdynamic", "-lpthread", "-lm", "-o"])
            .arg(&wexe),
    );
    assert_eq!(
        stdout_of(&run_exe(X86_64, &wexe, &["2", "2"], &[], &dir)),
        stdout_of(&plain)
    );
    let trace = dir.join("trace-weak");
    let out = run(Command::new(instrfn_cli())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&wexe)
        .args(["2", "2"])
        .current_dir(&dir));
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("wrong return address"));
    assert_route_tree(&one_process(X86_64, &trace, "weak"), 2, 2, "weak");
}

/// Processes that mix the route with plain -pg -mfentry code (libuser.c and a library it
/// dlopens, each built either way, traced by `instrfn record`): every call of both has its
/// exit. The route library (return_lib.c) runs traced code from its constructor, inside dlopen,
/// before the dlopen hook has looked at it: those frames get their return addresses replaced,
/// and put back by their `__return__`, which puts the object on the route. Then a route library
/// unloaded and a plain one loaded (`reload`).
fn mixed_processes(_arch: Arch) {
    let dir = workdir("return-route-mixed");
    let n = 50u64;
    let ns = n.to_string();
    let libstub = stub(&dir);
    let so = |name: &str, src: &str, flags: &[&str], extra: &[&OsStr]| -> PathBuf {
        let src = fixture(&format!("c/{src}"));
        let mut args: Vec<&OsStr> = ["-O2", "-fPIC", "-shared"].map(OsStr::new).to_vec();
        args.extend(flags.iter().map(OsStr::new));
        args.push(src.as_os_str());
        args.extend_from_slice(extra);
        cc(X86_64, &args, &dir.join(name))
    };
    let with_stub = [libstub.as_os_str(), OsStr::new("-Wl,-rpath,$ORIGIN")];
    let route_lib = so("libroute.so", "return_lib.c", ROUTE, &with_stub);
    let route_work = so("libwork-route.so", "libwork.c", ROUTE, &with_stub);
    let plain_other = so(
        "libother.so",
        "libwork.c",
        &["-pg", "-mfentry", "-DOTHER"],
        &[],
    );
    let plain_lib = so("libwork.so", "libwork.c", &["-pg", "-mfentry"], &[]);
    let route_obj = object("gcc", &dir, "libuser.c", ROUTE);
    let route_user = link("gcc", &dir, &route_obj, Link::Stub, &[], "user-route");
    let plain_user = cc(
        X86_64,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            OsStr::new("-mfentry"),
            fixture("c/libuser.c").as_os_str(),
            OsStr::new("-ldl"),
        ],
        &dir.join("user-plain"),
    );
    let lib = |p: &PathBuf| p.display().to_string();
    type Case<'a> = (&'a Path, Vec<String>, Vec<(&'a str, &'a str, u64)>);
    let cases: [Case; 4] = [
        (
            &plain_user,
            vec!["dlopen".into(), ns.clone(), lib(&route_lib)],
            vec![
                ("exit", "local", n),
                ("exit", "lib_outer", 2),
                ("exit", "lib_inner", n + 3),
                ("exit", "at_load", 1),
            ],
        ),
        (
            &route_user,
            vec!["dlopen".into(), ns.clone(), lib(&plain_lib)],
            vec![
                ("exit", "local", n),
                ("exit", "lib_outer", 1),
                ("exit", "lib_inner", n),
            ],
        ),
        (
            &route_user,
            vec!["dlopen".into(), ns.clone(), lib(&route_lib)],
            vec![("exit", "local", n), ("exit", "lib_inner", n + 3)],
        ),
        (
            &plain_user,
            vec![
                "reload".into(),
                ns.clone(),
                lib(&route_work),
                lib(&plain_other),
            ],
            vec![
                ("exit", "local", n),
                ("exit", "lib_inner", n),
                ("exit", "other_inner", 2 * n),
            ],
        ),
    ];
    for (exe, args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let context = format!("{} {}", exe.display(), args.join(" "));
        let plain = run_exe(X86_64, exe, &args, &[], &dir);
        let (out, trace) = record_trace(exe, &args, &[], &dir);
        // (`reload` prints load addresses, which differ from run to run.)
        let same = |o: &Output| -> Vec<String> {
            let text = stdout_of(o);
            text.lines()
                .map(|l| if l.starts_with("base ") { "base" } else { l }.to_string())
                .collect()
        };
        assert_eq!(same(&out), same(&plain), "{context}");
        let counts = assert_balanced(&one_process(X86_64, &trace, &context), &context);
        assert_counts(&counts, &expected, &context);
        let entries: u64 = counts
            .iter()
            .filter(|((k, _), _)| k == "entry")
            .map(|(_, c)| c)
            .sum();
        let exits: u64 = counts
            .iter()
            .filter(|((k, _), _)| k == "exit")
            .map(|(_, c)| c)
            .sum();
        assert_eq!(entries, exits, "{context}: {counts:?}");
    }
}

/// -mrecord-return adds a `__return_loc` table the runtime does not read: the trace is as
/// without it. -mnop-mcount (gcc refuses it with PIE code: `-fno-pie -no-pie`) leaves the
/// `__return__` calls and makes the `__fentry__` calls nops: nothing is recorded, and the
/// program runs as without instrfn. In gmon mode `__return__` returns at once: gprof counts
/// every call (leaf: 4 calls per round; rec: the calls from outside its recursion, as gprof's
/// flat profile counts a recursive function's).
fn compiler_options(_arch: Arch) {
    let dir = workdir("return-route-options");
    let (t, k) = (2usize, 3usize);
    let args = [t.to_string(), k.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let obj = object(
        "gcc",
        &dir,
        "return_route.c",
        &[ROUTE, &["-rdynamic", "-mrecord-return"]].concat(),
    );
    let exe = link(
        "gcc",
        &dir,
        &obj,
        Link::Stub,
        &["-rdynamic"],
        "record-return",
    );
    let sections = run_ok(Command::new("readelf").arg("-SW").arg(&exe));
    assert!(stdout_of(&sections).contains("__return_loc"));
    let (_, trace) = traced_run(&exe, &args, Link::Stub, &[], &dir);
    assert_route_tree(
        &one_process(X86_64, &trace, "-mrecord-return"),
        t,
        k,
        "-mrecord-return",
    );

    let pie = run(Command::new("gcc")
        .args(["-O2", "-c", "-mnop-mcount"])
        .args(ROUTE)
        .arg(fixture("c/return_route.c"))
        .arg("-o")
        .arg(dir.join("nop-pie.o")));
    assert!(!pie.status.success());
    assert!(
        stderr_of(&pie).contains("-mnop-mcount"),
        "{}",
        stderr_of(&pie)
    );
    let obj = object(
        "gcc",
        &dir,
        "return_route.c",
        &[ROUTE, &["-rdynamic", "-mnop-mcount", "-fno-pie"]].concat(),
    );
    let exe = link(
        "gcc",
        &dir,
        &obj,
        Link::Stub,
        &["-rdynamic", "-no-pie"],
        "nop",
    );
    let plain = run_exe(X86_64, &exe, &args, &[], &dir);
    let (out, _) = record_trace(&exe, &args, &[], &dir);
    assert_eq!(stdout_of(&out), stdout_of(&plain));
    assert!(
        stderr_of(&out).contains("recorded no event"),
        "{}",
        stderr_of(&out)
    );

    let obj = object(
        "gcc",
        &dir,
        "return_route.c",
        &[ROUTE, &["-rdynamic"]].concat(),
    );
    let exe = link("gcc", &dir, &obj, Link::Stub, &["-rdynamic"], "gmon");
    let run_dir = dir.join("gmon");
    std::fs::create_dir_all(&run_dir).unwrap();
    let preload = preload_path(X86_64);
    let out = run_exe(X86_64, &exe, &args, &[("LD_PRELOAD", &preload)], &run_dir);
    assert_eq!(stdout_of(&out), stdout_of(&plain));
    let flat = gprof_flat(X86_64, &exe, &run_dir.join("gmon.out"));
    let calls: BTreeMap<&str, u64> = [
        ("leaf", 4 * t * k),
        ("tail_a", t * k),
        ("rec", t * k),
        ("whoami", t * k),
    ]
    .into_iter()
    .map(|(f, c)| (f, c as u64))
    .collect();
    let expected: Vec<(&str, u64)> = calls.into_iter().collect();
    assert_calls(&flat, &expected, "gmon");
}
