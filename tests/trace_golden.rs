//! Golden traces: calltree.c (tests/fixtures/c/calltree.c, a known call tree at 4 threads)
//! gives exactly the expected entry/exit sequence per thread, for every compiler and entry kind
//! of each architecture, preloaded and with the runtime linked in; code whose exits cannot be
//! traced (aarch64 pac-ret, s390x clang 14 -pg, riscv64's entry-only shapes, INSTRFN_EXITS=off)
//! gives every entry as an entry without exit; and the Rust dependency route traces too.
//! Foreign architectures run under qemu-user and their traces are read by the host's
//! `instrfn dump`.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::process::Command;

feature_tests! {
    trace_golden:
    call_tree(x86_64, aarch64, riscv64, s390x),
    exits_off_records_entries_only(aarch64, riscv64, s390x),
    entry_only_shapes(riscv64),
    pac_ret_zero_pacs(aarch64),
    rust_dependency_route(aarch64),
}

/// calltree.c's threads and rounds.
const T: usize = 4;
const K: usize = 5;

/// What a calltree.c build must trace: every entry and exit, or entries without exit only.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Exits,
    EntriesOnly,
}

/// calltree.c at T = 4, K = 5, built by each compiler with each entry kind of `arch`,
/// preloaded and linked statically: the program prints what it prints without instrfn, and
/// the trace (one process that ended normally, chunks in the target's byte order) holds
/// exactly the expected sequence per thread, or only its entries, as entries without exit,
/// where the code's exits cannot be traced.
///
/// - aarch64: gcc -pg (`mov x0, x30; bl _mcount` after the frame record is set up); clang 14
///   -pg (a bare `bl _mcount`, x0 holds an argument; the caller is in the frame record);
///   -finstrument-functions (ordinary calls, no replacement; clang after inlining, or it
///   instruments the calls of functions it inlined, atoi in main); -mbranch-protection=pac-ret
///   (every function signs its return address and authenticates it before it returns, so it
///   is never replaced: entries only; `standard` adds BTI).
/// - riscv64: gcc -O2 -pg keeps no frame pointer (the return slot comes from the decoded
///   prologue `addi sp, sp, -N; sd ra, N-8(sp); ...; mv a0, ra; call _mcount`); with
///   -fno-omit-frame-pointer (s0 = CFA at the call); clang 14 -pg (a frame pointer always, an
///   argument in a0); -finstrument-functions (gcc, and clang after inlining: plain
///   -finstrument-functions records glibc's inline wrappers atoi/atol, at addresses without a
///   symbol). The meta file names riscv64's clock.
/// - s390x (z13): -pg (_mcount), -pg -mfentry (__fentry__, also clang 14's: the same
///   first-instruction call), -finstrument-functions; clang 14 -pg calls mcount after its
///   prologue as an ordinary call (nothing reloads r14 from 8(%r15), a word of the function's
///   own frame): the trampoline sees that at the return address and records entries without
///   exits, replacing nothing (linked statically).
/// - x86_64: see [`host_call_tree`].
fn call_tree(arch: Arch) {
    use Compiler::{Clang, Gcc};
    use Expect::{EntriesOnly, Exits};
    const BOTH: &[Runtime] = &[Runtime::Preload, Runtime::Static];
    type Build = (
        Compiler,
        &'static [&'static str],
        Expect,
        &'static [Runtime],
    );
    let builds: &[Build] = match arch.name {
        "x86_64" => return host_call_tree(),
        "aarch64" => &[
            (Gcc, &["-pg"], Exits, BOTH),
            (Clang, &["-pg"], Exits, BOTH),
            (Gcc, &["-finstrument-functions"], Exits, BOTH),
            (
                Clang,
                &["-finstrument-functions-after-inlining"],
                Exits,
                BOTH,
            ),
            (
                Gcc,
                &["-pg", "-mbranch-protection=pac-ret"],
                EntriesOnly,
                BOTH,
            ),
            (
                Gcc,
                &["-pg", "-mbranch-protection=standard"],
                EntriesOnly,
                BOTH,
            ),
            (
                Clang,
                &["-pg", "-mbranch-protection=pac-ret"],
                EntriesOnly,
                BOTH,
            ),
        ],
        "riscv64" => &[
            (Gcc, &["-pg"], Exits, BOTH),
            (Gcc, &["-pg", "-fno-omit-frame-pointer"], Exits, BOTH),
            (Clang, &["-pg"], Exits, BOTH),
            (Gcc, &["-finstrument-functions"], Exits, BOTH),
            (
                Clang,
                &["-finstrument-functions-after-inlining"],
                Exits,
                BOTH,
            ),
        ],
        _ => &[
            (Gcc, &["-pg"], Exits, BOTH),
            (Gcc, &["-pg", "-mfentry"], Exits, BOTH),
            (Gcc, &["-finstrument-functions"], Exits, BOTH),
            (Clang, &["-pg", "-mfentry"], Exits, BOTH),
            (Clang, &["-pg"], EntriesOnly, &[Runtime::Static]),
        ],
    };
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for &(compiler, cflags, expect, links) in builds {
        let name = format!("{}-trace-golden-{compiler:?}{}", arch.name, cflags.join(""));
        let dir = workdir(&name);
        let flags = [cflags, arch_flags(arch)].concat();
        let obj = compile(arch, compiler, &dir, "calltree.c", &flags, "calltree.o");
        for &link in links {
            let exe = link_runtime(arch, &dir, &obj, &[], "calltree", link);
            let context = format!("{name} {link:?}");
            let plain = run_exe(arch, &exe, &args, &[], &dir);
            let (out, trace) = run_traced(arch, &exe, &args, link, &[], &dir);
            assert_eq!(stdout_of(&out), stdout_of(&plain), "{context}");
            assert_eq!(
                stdout_of(&out).trim(),
                format!("calltree {T} {K}"),
                "{context}"
            );
            let p = one_process(arch, &trace, &context);
            assert!(
                !p.header.contains("did not exit normally"),
                "{context}: {}",
                p.header
            );
            match expect {
                Exits => {
                    assert_calltree(&p, T, K, &context);
                    let events: usize = p.threads.values().map(Vec::len).sum();
                    assert_eq!(events, 2 + T * (2 + 10 * K), "{context}");
                }
                EntriesOnly => assert_calltree_entries_only(&p, T, K, &context),
            }
            // s390x's chunks are big-endian: the version word reads 1 that way.
            for chunk in raw_chunks(&trace) {
                assert_eq!(chunk.little_endian, arch != S390X, "{context}: {chunk:?}");
            }
        }
    }
}

/// x86_64: -pg (mcount), -pg -mfentry and -finstrument-functions, preloaded by `instrfn
/// record` (whose summary counts every event, and whose durations fit the wall time the test
/// measured around it), with the runtime linked in (INSTRFN_MODE=trace), and musl, linked
/// statically (exits traced there too: x86_64's return pad has unwind info for a static
/// unwinder, in the runtime's assembly).
fn host_call_tree() {
    let arch = X86_64;
    let args = [T.to_string(), K.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for flags in [
        &["-pg"][..],
        &["-pg", "-mfentry"][..],
        &["-finstrument-functions"][..],
    ] {
        let name = format!("trace-golden{}", flags.join(""));
        let dir = workdir(&name);
        let src = fixture("c/calltree.c");
        let obj = dir.join("calltree.o");
        let mut cargs: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
        cargs.extend(flags.iter().map(OsStr::new));
        cargs.push(src.as_os_str());
        cc(arch, &cargs, &obj);
        let exe = cc(
            arch,
            &[obj.as_os_str(), OsStr::new("-lpthread")],
            &dir.join("calltree"),
        );
        let started = std::time::Instant::now();
        let (out, trace) = record_trace(&exe, &args, &[], &dir);
        let wall_ns = started.elapsed().as_nanos() as f64;
        let err = stderr_of(&out);
        let events = 2 + T * (2 + 10 * K);
        assert!(
            err.contains(&format!(
                "instrfn: {events} events, {} threads, 1 process, 0 lost",
                T + 1
            )),
            "{name}: {err}"
        );
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{name}");
        assert_calltree(&procs[0], T, K, &name);
        assert_durations(&procs[0], wall_ns, &name);

        // Linked statically, traced by environment alone.
        let lib = runtime_lib(arch, Lib::Static);
        let linked = cc(
            arch,
            &[
                obj.as_os_str(),
                lib.as_os_str(),
                OsStr::new("-lpthread"),
                OsStr::new("-ldl"),
            ],
            &dir.join("calltree-linked"),
        );
        let tdir = dir.join("linked-trace");
        run_in_trace_mode(arch, &linked, &args, false, &[], &dir, &tdir);
        assert_calltree(&instrfn_dump(&tdir)[0], T, K, &format!("{name} linked"));

        // musl, linked statically.
        require_tool("musl-gcc");
        let mobj = dir.join("calltree-musl.o");
        cc(X86_64_MUSL, &cargs, &mobj);
        let mlib = runtime_lib(X86_64_MUSL, Lib::Static);
        let musl = cc(
            X86_64_MUSL,
            &[OsStr::new("-static"), mobj.as_os_str(), mlib.as_os_str()],
            &dir.join("calltree-musl"),
        );
        let mdir = dir.join("musl-trace");
        run_in_trace_mode(X86_64_MUSL, &musl, &args, false, &[], &dir, &mdir);
        assert_calltree(&instrfn_dump(&mdir)[0], T, K, &format!("{name} musl"));
    }
}

/// Checks that the durations of a properly nested trace (every thread's events nest) are
/// consistent with each other and with the wall time the test measured around the whole run:
/// every call lasts at least as long as its callees together, every thread's events lie
/// within the first thread's outermost call (`main`: the other threads run inside it), and
/// that call is no longer than `wall_ns`.
fn assert_durations(p: &DumpProcess, wall_ns: f64, context: &str) {
    let mut outer: Option<(f64, f64)> = None;
    let mut spans = Vec::new();
    for (tid, events) in &p.threads {
        // (start, callees' total) of each open call.
        let mut open: Vec<(f64, f64)> = Vec::new();
        for e in events {
            match e.kind.as_str() {
                "entry" => open.push((e.ns, 0.0)),
                "exit" => {
                    let (start, callees) = open.pop().expect("nested");
                    let d = e.ns - start;
                    assert!(
                        d >= callees,
                        "{context}: thread {tid}: {} lasts {d} ns, its callees {callees} ns",
                        e.name
                    );
                    if let Some(parent) = open.last_mut() {
                        parent.1 += d;
                    } else if e.name == "main" {
                        outer = Some((start, e.ns));
                    } else {
                        spans.push((start, e.ns));
                    }
                }
                _ => {}
            }
        }
    }
    let (lo, hi) = outer.unwrap_or_else(|| panic!("{context}: no main"));
    assert!(
        hi - lo <= wall_ns,
        "{context}: main lasts {} ns, the run {wall_ns} ns",
        hi - lo
    );
    for (a, b) in spans {
        assert!(
            a >= lo && b <= hi,
            "{context}: a thread's call [{a}, {b}] outside main's [{lo}, {hi}]"
        );
    }
}

/// INSTRFN_EXITS=off (mode 2 of the fast path): no return address is replaced; every call is
/// an entry without exit, in the order of the golden sequence, and the program's output is
/// unchanged. Preloaded and linked; on s390x for mcount and fentry code, and also with 4 KiB
/// chunks and 100 rounds (each worker fills several chunks; a thread's first entry finds no
/// chunk and takes the slow path, which records it the same way).
///
/// On s390x the entries are recorded on the fast path: the slow path blocks every signal
/// (rt_sigprocmask twice), which qemu's -strace shows; 4 threads of 100 rounds make 2004
/// calls, of which only each thread's first and those that take a new chunk (a few per
/// thread) may go slow.
fn exits_off_records_entries_only(arch: Arch) {
    let (builds, cases): (&[&[&str]], &[(usize, Option<&str>)]) = match arch.name {
        "s390x" => (
            &[&["-pg"], &["-pg", "-mfentry"]],
            &[(K, Some("1048576")), (100, Some("4096"))],
        ),
        _ => (&[&["-pg"]], &[(K, None)]),
    };
    for cflags in builds {
        let name = format!("{}-trace-exits-off{}", arch.name, cflags.join(""));
        let dir = workdir(&name);
        let flags = [*cflags, arch_flags(arch)].concat();
        let obj = compile(
            arch,
            Compiler::Gcc,
            &dir,
            "calltree.c",
            &flags,
            "calltree.o",
        );
        for link in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &[], "calltree", link);
            for &(k, chunk) in cases {
                let context = format!("{name} {link:?} K={k} INSTRFN_BUFSIZE={chunk:?}");
                let args = [T.to_string(), k.to_string()];
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut env = vec![("INSTRFN_EXITS", "off")];
                env.extend(chunk.map(|c| ("INSTRFN_BUFSIZE", c)));
                let (out, trace) = run_traced(arch, &exe, &args, link, &env, &dir);
                assert_eq!(
                    stdout_of(&out).trim(),
                    format!("calltree {T} {k}"),
                    "{context}"
                );
                let p = one_process(arch, &trace, &context);
                assert_eq!(p.lost, 0, "{context}");
                assert_calltree_entries_only(&p, T, k, &context);
            }
        }
        if arch != S390X {
            continue;
        }
        let exe = dir.join("calltree-Static");
        let trace = dir.join("trace-strace");
        let out = run_ok(
            Command::new("qemu-s390x")
                .args(["-strace", "-L", S390X.sysroot.unwrap()])
                .args(["-E", "INSTRFN_MODE=trace", "-E", "INSTRFN_EXITS=off"])
                .args(["-E", "INSTRFN_BUFSIZE=4096", "-E"])
                .arg(format!("INSTRFN_OUTPUT={}", trace.display()))
                .arg(&exe)
                .args([T.to_string(), "100".to_string()])
                .current_dir(&dir),
        );
        let masks = stderr_of(&out).matches("rt_sigprocmask(").count();
        assert!(
            masks < 200,
            "{name}: {masks} rt_sigprocmask calls for 2004 traced calls: the slow path"
        );
        assert_calltree_entries_only(&instrfn_dump(&trace)[0], T, 100, &name);
    }
}

/// trace_shapes.c on riscv64: a variadic function (ra below the register save area: entry
/// only), a sibling call (the callee runs in its caller's frame: entry only, the caller's exit
/// when it returns) and a two-step frame (traced), for gcc with and without a frame pointer
/// and clang, preloaded and linked: exactly the documented sequence.
fn entry_only_shapes(arch: Arch) {
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
    for (compiler, flags) in [
        (Compiler::Gcc, &["-pg"][..]),
        (Compiler::Gcc, &["-pg", "-fno-omit-frame-pointer"][..]),
        (Compiler::Clang, &["-pg"][..]),
    ] {
        let name = format!("riscv64-trace-shapes-{compiler:?}{}", flags.join(""));
        let dir = workdir(&name);
        let obj = compile(
            arch,
            compiler,
            &dir,
            "trace_shapes.c",
            flags,
            "trace_shapes.o",
        );
        for link in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &[], "trace_shapes", link);
            let context = format!("{name} {link:?}");
            let rounds = ROUNDS.to_string();
            let (_, trace) = run_traced(arch, &exe, &[&rounds], link, &[], &dir);
            let p = one_process(arch, &trace, &context);
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

/// pac-ret code whose signed return addresses take thousands of different PACs (the stack
/// pointer is the modifier, pacmix.c moves it): with 7 PAC bits about 1 in 128 is zero and
/// looks unsigned. None may be replaced (the call site is known to sign), so the program runs
/// to the end with every signed call entry-only, while the function built without pac-ret in
/// the same program keeps its exits.
fn pac_ret_zero_pacs(arch: Arch) {
    const N: u64 = 3000;
    let dir = workdir("aarch64-trace-pacmix");
    let flags = ["-pg", "-mbranch-protection=pac-ret"];
    let obj = compile(arch, Compiler::Gcc, &dir, "pacmix.c", &flags, "pacmix.o");
    let n = N.to_string();
    for link in [Runtime::Preload, Runtime::Static] {
        let exe = link_runtime(arch, &dir, &obj, &[], "pacmix", link);
        let context = format!("pacmix {link:?}");
        let (out, trace) = run_traced(arch, &exe, &[&n], link, &[], &dir);
        let out = stdout_of(&out);
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

/// The Rust dependency route in trace mode: tests/fixtures/rust-app built with nightly and
/// -Zinstrument-mcount (the runtime comes in as a dependency), run under qemu: each worker
/// thread's events nest, worker, work_a and work_b have as many exits as entries, and no
/// function of the runtime is traced. (`instrfn dump` prints Rust's mangled names.)
fn rust_dependency_route(arch: Arch) {
    const THREADS: u64 = 2;
    const N: u64 = 20_000;
    let exe = build_instrumented_rust("rust-app", arch.triple, "rust-app");
    let dir = workdir(&format!("{}-trace-rust", arch.name));
    let trace = dir.join("trace");
    let trace_s = trace.display().to_string();
    let out = run_exe(
        arch,
        &exe,
        &[&THREADS.to_string(), &N.to_string()],
        &[("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", &trace_s)],
        &dir,
    );
    let stdout = stdout_of(&out);
    assert!(
        stdout.contains(&format!("threads={THREADS} iterations={N}")),
        "{stdout}"
    );
    let procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1);
    let counts = assert_balanced(&procs[0], "rust");
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
