//! gmon mode's counts: exact calls per function and per (caller, callee) arc, as each
//! architecture's own gprof reads them, for every way the runtime comes in (gcrt1.o and
//! preloaded, preloaded, linked in; the Rust dependency route; musl, statically), with threads
//! that start, end early and churn. Foreign architectures run under qemu-user.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::process::Command;

feature_tests! {
    gmon_counts:
    threads_exact(x86_64, aarch64, riscv64, s390x),
    call_graphs(x86_64, aarch64, riscv64, s390x),
    instrument_functions_arcs(aarch64, riscv64),
    gcrt_does_not_write_its_own_profile(x86_64),
    threads_that_exit_early_keep_their_counts(x86_64),
    short_lived_threads(x86_64, aarch64, riscv64, s390x),
    many_threads_on_two_cpus(x86_64),
    rust_dependency_route(x86_64, aarch64),
    musl_static_c_program(x86_64),
    big_endian_gmon_out(s390x),
    call_graph_parser(x86_64),
}

/// One build of a fixture: its compiler and flags (besides -O2 -pg and the architecture's).
type Build = (Compiler, &'static [&'static str]);

/// threads.c at T threads of N iterations (work_a and work_b once each per iteration), for
/// each build and link of `arch`: gprof's flat counts exact, and the fast path used (few slow
/// paths for many calls). Where `graph` (the architectures under qemu, every link but gcrt's)
/// also the arcs worker -> work_a and worker -> work_b, and at most one slow path per
/// instrumented function and thread (main; worker, work_a and work_b in each worker): where
/// riscv64 decides and marks each call site. The compilers pass the caller differently: gcc
/// in the argument register (`mv a0, ra` / `mov x0, x30`), clang 14 only in the frame record
/// its forced frame pointer points to, with an argument of the function in that register;
/// riscv64's gcc -O2 keeps no frame pointer (-fno-omit-frame-pointer: the frame record holds
/// the caller too).
fn threads_exact(arch: Arch) {
    use Compiler::{Clang, Gcc};
    const ALL: &[Link] = &[Link::Static, Link::Preload, Link::GcrtPreload];
    const NO_GCRT: &[Link] = &[Link::Static, Link::Preload];
    // (build, links, thread counts, iterations, graph)
    let runs: Vec<(Build, &[Link], &[u64], u64, bool)> = match arch.name {
        "x86_64" => vec![
            ((Gcc, &[]), ALL, &[1, 2, 8], 200_000, false),
            ((Gcc, &["-mfentry"]), ALL, &[1, 2, 8], 200_000, false),
        ],
        "aarch64" => vec![
            ((Clang, &[]), NO_GCRT, &[2], 40_000, true),
            ((Gcc, &[]), ALL, &[2], 40_000, true),
        ],
        "riscv64" => vec![
            ((Clang, &[]), NO_GCRT, &[2], 40_000, true),
            ((Gcc, &[]), ALL, &[2], 40_000, true),
            (
                (Gcc, &["-fno-omit-frame-pointer"]),
                NO_GCRT,
                &[2],
                40_000,
                true,
            ),
        ],
        _ => vec![
            ((Gcc, &[]), ALL, &[2], 40_000, true),
            ((Gcc, &["-mfentry"]), ALL, &[2], 40_000, true),
        ],
    };
    let preload = preload_path(arch);
    for ((compiler, cflags), links, threads, n, graph) in runs {
        for &link in links {
            let name = format!(
                "{}-threads-{compiler:?}{}-{link:?}",
                arch.name,
                cflags.join("")
            );
            let dir = workdir(&name);
            let mut flags = vec!["-pg"];
            flags.extend_from_slice(cflags);
            flags.extend_from_slice(arch_flags(arch));
            let obj = compile(arch, compiler, &dir, "threads.c", &flags, "threads.o");
            let exe = link_c(arch, &dir, &obj, "threads", link);
            for &t in threads {
                let _ = std::fs::remove_file(dir.join("gmon.out"));
                let env = env_for(link, &preload, &[("INSTRFN_VERBOSE", "1")]);
                let out = run_exe(arch, &exe, &[&t.to_string(), &n.to_string()], &env, &dir);
                let gmon = dir.join("gmon.out");
                let flat = gprof_flat(arch, &exe, &gmon);
                let context = format!("{name} T={t}");
                assert_calls(&flat, &[("work_a", t * n), ("work_b", t * n)], &context);
                let stderr = stderr_of(&out);
                assert_fast_path_used(&stderr, 2 * t * n, &context);
                if graph && link != Link::GcrtPreload {
                    let arcs = gprof_arcs(arch, &exe, &gmon);
                    let expected = [("worker", "work_a", t * n), ("worker", "work_b", t * n)];
                    assert_arcs(&arcs, &expected, &context);
                    let slow = summary_value(&stderr, "slow paths");
                    assert!(slow <= 1 + 3 * t, "{context}: {slow} slow paths");
                }
            }
        }
    }
}

/// The arcs of `recursion 20 1000`: fib(20) makes 2 * fib(21) - 1 = 21891 calls.
const RECURSION_ARCS: [(&str, &str, u64); 5] = [
    ("main", "fib", 1),
    ("fib", "fib", 21890),
    ("main", "is_even", 1),
    ("is_even", "is_odd", 500),
    ("is_odd", "is_even", 500),
];

/// Not only flat counts: every caller -> callee arc of recursion.c, self-recursion (fib) and a
/// cycle (is_even/is_odd), exact in gprof's call graph, for each compiler and entry kind of
/// `arch`, preloaded and linked; on x86_64 (mcount and __fentry__) also threads.c's worker
/// arcs at T=4 (the other architectures check those in `threads_exact`).
fn call_graphs(arch: Arch) {
    use Compiler::{Clang, Gcc};
    let builds: &[Build] = match arch.name {
        "x86_64" => &[(Gcc, &[]), (Gcc, &["-mfentry"])],
        "s390x" => &[(Gcc, &[]), (Gcc, &["-mfentry"])],
        _ => &[(Gcc, &[]), (Clang, &[])],
    };
    let preload = preload_path(arch);
    for (compiler, cflags) in builds {
        for link in [Link::Preload, Link::Static] {
            let name = format!(
                "{}-callgraph-{compiler:?}{}-{link:?}",
                arch.name,
                cflags.join("")
            );
            let dir = workdir(&name);
            let mut flags = vec!["-pg"];
            flags.extend_from_slice(cflags);
            flags.extend_from_slice(arch_flags(arch));
            let env = env_for(link, &preload, &[]);
            if arch == X86_64 {
                let obj = compile(arch, *compiler, &dir, "threads.c", &flags, "threads.o");
                let threads = link_c(arch, &dir, &obj, "threads", link);
                run_exe(arch, &threads, &["4", "30000"], &env, &dir);
                let arcs = gprof_arcs(arch, &threads, &dir.join("gmon.out"));
                let expected = [("worker", "work_a", 120_000), ("worker", "work_b", 120_000)];
                assert_arcs(&arcs, &expected, &name);
            }
            let obj = compile(arch, *compiler, &dir, "recursion.c", &flags, "recursion.o");
            let recursion = link_c(arch, &dir, &obj, "recursion", link);
            run_exe(arch, &recursion, &["20", "1000"], &env, &dir);
            let arcs = gprof_arcs(arch, &recursion, &dir.join("gmon.out"));
            assert_arcs(&arcs, &RECURSION_ARCS, &name);
        }
    }
}

/// gmon mode counts the arcs of -finstrument-functions code too: __cyg_profile_func_enter
/// counts (call_site, this_fn) like mcount, `__cyg_profile_func_exit` nothing. calltree.c at
/// T = 4, preloaded and linked: exact arcs in gprof's call graph. riscv64 runs 400 rounds,
/// gcc and clang (-finstrument-functions-after-inlining: plain -finstrument-functions also
/// records glibc's inline wrappers atoi/atol, at addresses without a symbol), and checks that
/// the fast path was used (one slow path per thread).
fn instrument_functions_arcs(arch: Arch) {
    use Compiler::{Clang, Gcc};
    let (k, builds, fast_path): (u64, &[Build], bool) = match arch.name {
        "aarch64" => (5, &[(Gcc, &["-finstrument-functions"])], false),
        _ => (
            400,
            &[
                (Gcc, &["-finstrument-functions"]),
                (Clang, &["-finstrument-functions-after-inlining"]),
            ],
            true,
        ),
    };
    const T: u64 = 4;
    let preload = preload_path(arch);
    for (compiler, flags) in builds {
        let name = format!("{}-gmon-cyg-{compiler:?}", arch.name);
        let dir = workdir(&name);
        let obj = compile(arch, *compiler, &dir, "calltree.c", flags, "calltree.o");
        for kind in [Runtime::Preload, Runtime::Static] {
            let exe = link_runtime(arch, &dir, &obj, &[], "calltree", kind);
            let context = format!("{name} {kind:?}");
            let mut env = vec![("INSTRFN_VERBOSE", "1")];
            if kind == Runtime::Preload {
                env.push(("LD_PRELOAD", preload.as_str()));
            }
            let _ = std::fs::remove_file(dir.join("gmon.out"));
            let out = run_exe(arch, &exe, &[&T.to_string(), &k.to_string()], &env, &dir);
            let arcs = gprof_arcs(arch, &exe, &dir.join("gmon.out"));
            assert_arcs(&arcs, &calltree_arcs(T, k), &context);
            if fast_path {
                assert_fast_path_used(&stderr_of(&out), 5 * T * k, &context);
            }
        }
    }
}

/// With gcrt1.o, glibc's __monstartup/_mcleanup would write gmon.out at exit with its own,
/// lossy counts and 100 Hz histogram. Ours replace them: one file, our rate, exact counts, no
/// temporary file left.
fn gcrt_does_not_write_its_own_profile(arch: Arch) {
    let dir = workdir("gcrt-takeover");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::GcrtPreload);
    let preload = preload_path(arch);
    let out = run_exe(
        arch,
        &exe,
        &["2", "300000"],
        &[("LD_PRELOAD", &preload), ("INSTRFN_VERBOSE", "1")],
        &dir,
    );
    let err = stderr_of(&out);
    assert_eq!(
        err.matches("wrote gmon.out").count(),
        1,
        "one write expected:\n{err}"
    );
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 600_000), ("work_b", 600_000)],
        "gcrt takeover",
    );
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !entries.iter().any(|n| n.to_string_lossy().contains(".tmp")),
        "temporary left: {entries:?}"
    );
}

/// Threads that end early (scenarios.c `early`: pthread_exit from inside counted calls) keep
/// every call they made.
fn threads_that_exit_early_keep_their_counts(arch: Arch) {
    let dir = workdir("early");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    let n = 1200u64;
    run_exe(arch, &exe, &["early", &n.to_string()], &[], &dir);
    let a = (n / 2 + 1) + (n / 3 + 1) + (n / 4 + 1) + n;
    let b = 4 * n - a;
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", a), ("work_b", b), ("leave_now", 1)],
        "early exits",
    );
}

/// Short-lived threads (scenarios.c `churn`: 8 at a time) keep every call. On x86_64, 4000 of
/// them use a bounded number of thread blocks (reused: at most one per thread alive at once,
/// 8 workers and main) and no more peak memory than 16 of them, within 2 MiB.
fn short_lived_threads(arch: Arch) {
    let dir = workdir(&format!("{}-churn", arch.name));
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    if arch != X86_64 {
        run_exe(arch, &exe, &["churn", "200", "50"], &[], &dir);
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        let context = format!("{} churn", arch.name);
        assert_calls(&flat, &[("work_a", 10_000)], &context);
        return;
    }
    let verbose = [("INSTRFN_VERBOSE", "1")];
    let few = run_exe(arch, &exe, &["churn", "16", "100"], &verbose, &dir);
    let many = run_exe(arch, &exe, &["churn", "4000", "100"], &verbose, &dir);
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(&flat, &[("work_a", 400_000)], "4000 threads");
    let err = stderr_of(&many);
    let blocks = summary_value(&err, "thread blocks for");
    assert!(blocks <= 9, "{blocks} blocks for 4000 threads: {err}");
    let hwm_few = reported(&stdout_of(&few), "vmhwm");
    let hwm_many = reported(&stdout_of(&many), "vmhwm");
    assert!(
        hwm_many < hwm_few + 2048.0,
        "peak RSS grew from {hwm_few} to {hwm_many} KiB"
    );
}

/// threads.c with 256 threads on 2 CPUs, preloaded and linked: gprof's counts exact (worker's
/// calls come from libc's thread start, which gprof does not show), and the program's peak
/// RSS a few pages per thread (each has its own arc table).
fn many_threads_on_two_cpus(arch: Arch) {
    const T: u64 = 256;
    const N: u64 = 40_000;
    let dir = workdir("gmon-many-threads");
    for link in [Link::Preload, Link::Static] {
        let exe = build_c(arch, &dir, "threads.c", &[], link);
        let _ = std::fs::remove_file(dir.join("gmon.out"));
        let preload = preload_path(arch);
        let env = env_for(link, &preload, &[]);
        // (The environment through env(1): /usr/bin/time itself loads no runtime, so the
        // program is the root of its process tree and writes gmon.out.)
        let mut cmd = Command::new("/usr/bin/time");
        cmd.args(["-f", "maxrss %M", "env"])
            .args(env.iter().map(|(k, v)| format!("{k}={v}")))
            .arg(&exe)
            .args([T.to_string(), N.to_string()])
            .current_dir(&dir);
        let out = run_ok(&mut cmd);
        let context = format!("{T} threads {link:?}");
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        assert_calls(&flat, &[("work_a", T * N), ("work_b", T * N)], &context);
        let rss_kib: u64 = stderr_of(&out)
            .lines()
            .find_map(|l| l.strip_prefix("maxrss "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{context}: no maxrss line: {}", stderr_of(&out)));
        assert!(
            rss_kib <= T * 64 + 32 * 1024,
            "{context}: peak RSS {rss_kib} KiB for {T} threads"
        );
    }
}

/// tests/fixtures/rust-app built with nightly and -Zinstrument-mcount (the runtime comes in as a
/// dependency), read by gprof: exact counts. The runtime is instrumented too (RUSTFLAGS reach
/// every crate): none of its own functions may be counted, and nothing recursed (no call lost).
/// On x86_64 also for musl and for glibc linked statically (crt-static: the runtime then
/// defines no wrappers of the unwinder's entry points, whose names the static libgcc_eh
/// defines too).
fn rust_dependency_route(arch: Arch) {
    if arch != X86_64 {
        let exe = build_instrumented_rust("rust-app", arch.triple, "rust-app");
        let dir = workdir(&format!("{}-rust", arch.name));
        run_exe(arch, &exe, &["2", "50000"], &[], &dir);
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        let context = format!("{} rust", arch.name);
        assert_calls(
            &flat,
            &[
                ("rust_app::work_a", 100_000),
                ("rust_app::work_b", 100_000),
                ("rust_app::worker", 2),
            ],
            &context,
        );
        flat.assert_no_runtime_calls(&context);
        return;
    }
    for (triple, extra) in [
        ("x86_64-unknown-linux-gnu", ""),
        ("x86_64-unknown-linux-musl", ""),
        ("x86_64-unknown-linux-gnu", "-C target-feature=+crt-static"),
    ] {
        let exe = build_instrumented_rust_with("rust-app", triple, "rust-app", extra);
        let triple = &format!("{triple} {extra}");
        let dir = workdir(&format!("rust-{}", triple.replace([' ', '='], "-")));
        let out = run_exe(
            arch,
            &exe,
            &["3", "100000"],
            &[("INSTRFN_VERBOSE", "1")],
            &dir,
        );
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        assert_calls(
            &flat,
            &[
                ("rust_app::work_a", 300_000),
                ("rust_app::work_b", 300_000),
                ("rust_app::worker", 3),
            ],
            triple,
        );
        flat.assert_no_runtime_calls(triple);
        assert_eq!(summary_value(&stderr_of(&out), "calls lost"), 0, "{triple}");
    }
}

/// A C program built with musl-gcc -pg and linked statically with the musl libinstrfn.a
/// (musl has no gmon of its own): exact counts.
fn musl_static_c_program(arch: Arch) {
    assert_eq!(arch, X86_64, "musl-gcc builds for the host");
    require_tool("musl-gcc");
    let dir = workdir("musl-c");
    let src = fixture("c/threads.c");
    let obj = dir.join("threads.o");
    cc(
        X86_64_MUSL,
        &[
            OsStr::new("-O2"),
            OsStr::new("-pg"),
            OsStr::new("-c"),
            src.as_os_str(),
        ],
        &obj,
    );
    let lib = runtime_lib(X86_64_MUSL, Lib::Static);
    let exe = cc(
        X86_64_MUSL,
        &[OsStr::new("-static"), obj.as_os_str(), lib.as_os_str()],
        &dir.join("threads-musl"),
    );
    run_exe(X86_64_MUSL, &exe, &["2", "150000"], &[], &dir);
    let flat = gprof_flat(X86_64_MUSL, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 300_000), ("work_b", 300_000)],
        "musl static",
    );
}

/// The writer uses the target's byte order: gprof for s390x reads the file (the other tests);
/// here the header's version word shows the order directly.
fn big_endian_gmon_out(arch: Arch) {
    let dir = workdir(&format!("{}-endian", arch.name));
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Static);
    run_exe(arch, &exe, &["1", "10"], &[], &dir);
    let bytes = std::fs::read(dir.join("gmon.out")).unwrap();
    assert_eq!(&bytes[..8], b"gmon\0\0\0\x01", "header {:?}", &bytes[..8]);
}

/// The call-graph parser on gprof's own output for recursion, a cycle and a caller without an
/// entry of its own (host gprof, glibc's gcrt: `fact` recursive, `ping`/`pong` a cycle).
fn call_graph_parser(_: Arch) {
    let text = "\
index % time    self  children    called     name
[1]      0.0    0.00    0.00      10+40      <cycle 1 as a whole> [1]
                0.00    0.00      30             ping <cycle 1> [3]
                0.00    0.00      20             pong <cycle 1> [4]
-----------------------------------------------
                0.00    0.00      10/30          fact [5]
                0.00    0.00      20/30          ping <cycle 1> [3]
[2]      0.0    0.00    0.00      30         leaf [2]
-----------------------------------------------
                                  20             pong <cycle 1> [4]
                0.00    0.00      10/10          main [11]
[3]      0.0    0.00    0.00      30         ping <cycle 1> [3]
                0.00    0.00      20/30          leaf [2]
                                  20             pong <cycle 1> [4]
-----------------------------------------------
                                  20             ping <cycle 1> [3]
[4]      0.0    0.00    0.00      20         pong <cycle 1> [4]
                                  20             ping <cycle 1> [3]
-----------------------------------------------
                                  40             fact [5]
                0.00    0.00      10/10          main [11]
[5]      0.0    0.00    0.00      10+40      fact [5]
                0.00    0.00      10/30          leaf [2]
                                  40             fact [5]
-----------------------------------------------
                                                 <spontaneous>
[6]    100.0    0.01    0.00                 hot [6]
-----------------------------------------------

Index by function name

   [5] fact                    [3] ping                    [1] <cycle 1>
   [2] leaf                    [4] pong                    [6] hot
";
    let arcs = parse_call_graph(text);
    let want: Vec<((String, String), u64)> = [
        ("fact", "fact", 40),
        ("fact", "leaf", 10),
        ("main", "fact", 10),
        ("main", "ping", 10),
        ("ping", "leaf", 20),
        ("ping", "pong", 20),
        ("pong", "ping", 20),
    ]
    .iter()
    .map(|(a, b, n)| ((a.to_string(), b.to_string()), *n))
    .collect();
    assert_eq!(arcs.into_iter().collect::<Vec<_>>(), want);
}
