//! The other architectures, run under qemu-user: aarch64, riscv64 and s390x programs built with
//! Debian's cross compilers, profiled with the cross-built runtime (statically linked, and
//! preloaded), read with each architecture's own gprof, and compared with exact counts.

mod common;

use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The entry points each harness calls (driver.c's `kind`): 0 is `_mcount`; 1 is `__fentry__`
/// on s390x and the `mcount` alias on aarch64 and riscv64, which have no `__fentry__`; 2 is
/// `mcount` on s390x (what LLVM emits there) and on riscv64 `_mcount` called as clang does,
/// with the caller in the frame record only (see [`frame_record_kind`]); riscv64's 3 is kind 0
/// with the thread's table emptied before each call (a site decided before, not marked in
/// the table).
fn regs_kinds(arch: Arch) -> &'static [&'static str] {
    match arch.name {
        "s390x" => &["0", "1", "2"],
        "riscv64" => &["0", "1", "2", "3"],
        _ => &["0", "1"],
    }
}

/// The harness kind whose from_pc is in the frame record only, as return addresses into
/// `instrfn_regs_callers` (riscv64's kind 2): its arcs show in gprof, so the register test also
/// checks that the trampoline took the caller from the frame, not from the argument register.
fn frame_record_kind(arch: Arch) -> Option<&'static str> {
    (arch.name == "riscv64").then_some("2")
}

/// Extra compiler flags for `arch` (s390x: z13, so vector registers are live and checked).
fn arch_flags(arch: Arch) -> &'static [&'static str] {
    if arch.name == "s390x" {
        &["-march=z13"]
    } else {
        &[]
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Link {
    /// libinstrfn.a linked in, no gcrt.
    Static,
    /// No gcrt, run with LD_PRELOAD=libinstrfn.so.
    Preload,
    /// gcrt1.o (-pg at link time), run with LD_PRELOAD=libinstrfn.so.
    GcrtPreload,
}

/// The compiler of a `-pg` fixture object: the architecture's gcc, or clang for its target.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Compiler {
    Gcc,
    Clang,
}

/// Compiles `tests/fixtures/c/<src>` with `-O2 -pg -c` and `cflags` into `<dir>/<obj>`.
fn compile(
    arch: Arch,
    compiler: Compiler,
    dir: &Path,
    src: &str,
    cflags: &[&str],
    obj: &str,
) -> PathBuf {
    let obj = dir.join(obj);
    let source = fixture(&format!("c/{src}"));
    let mut args: Vec<&OsStr> = ["-O2", "-pg", "-c"].iter().map(OsStr::new).collect();
    args.extend(cflags.iter().chain(arch_flags(arch)).map(OsStr::new));
    args.push(source.as_os_str());
    match compiler {
        Compiler::Gcc => cc(arch, &args, &obj),
        Compiler::Clang => {
            // Debian's clang cross-compiles with the gcc cross toolchains' headers.
            require_tool("clang");
            let target = format!("--target={}", arch.cc.trim_end_matches("-gcc"));
            run_ok(
                std::process::Command::new("clang")
                    .arg(target)
                    .args(&args)
                    .arg("-o")
                    .arg(&obj),
            );
            obj
        }
    }
}

/// Links `obj` with `arch.cc` (never with -pg, unless `link` is GcrtPreload) into
/// `<dir>/<stem>-<link>`.
fn link(arch: Arch, dir: &Path, obj: &Path, stem: &str, link: Link) -> PathBuf {
    let lib = runtime_lib(arch, Lib::Static);
    let mut link_args: Vec<&OsStr> = vec![obj.as_os_str()];
    match link {
        Link::Static => link_args.push(lib.as_os_str()),
        Link::Preload => {}
        Link::GcrtPreload => link_args.push(OsStr::new("-pg")),
    }
    link_args.extend([OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    cc(arch, &link_args, &dir.join(format!("{stem}-{link:?}")))
}

fn build(arch: Arch, dir: &Path, src: &str, cflags: &[&str], link_kind: Link) -> PathBuf {
    let stem = src.trim_end_matches(".c");
    let obj = compile(arch, Compiler::Gcc, dir, src, cflags, &format!("{stem}.o"));
    link(arch, dir, &obj, stem, link_kind)
}

fn env(arch: Arch, link: Link) -> Vec<(&'static str, String)> {
    match link {
        Link::Static => vec![],
        _ => vec![(
            "LD_PRELOAD",
            runtime_lib(arch, Lib::Shared).display().to_string(),
        )],
    }
}

fn run_in(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    env: &[(&'static str, String)],
    dir: &Path,
) -> String {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_exe(arch, exe, args, &env, dir);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn threads_exact(arch: Arch) {
    let entries: &[&[&str]] = if arch.name == "s390x" {
        &[&[], &["-mfentry"]]
    } else {
        &[&[]]
    };
    for cflags in entries {
        for link in [Link::Static, Link::Preload, Link::GcrtPreload] {
            let name = format!("{}-threads{}-{link:?}", arch.name, cflags.join(""));
            let dir = workdir(&name);
            let exe = build(arch, &dir, "threads.c", cflags, link);
            let mut env = env(arch, link);
            env.push(("INSTRFN_VERBOSE", "1".to_string()));
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let out = run_exe(arch, &exe, &["2", "40000"], &env, &dir);
            let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
            assert_calls(&flat, &[("work_a", 80_000), ("work_b", 80_000)], &name);
            assert_fast_path_used(&String::from_utf8_lossy(&out.stderr), 160_000, &name);
        }
    }
}

/// The call graph, not only the call counts: the threads fixture compiled by each compiler
/// that targets `arch` (and with `cflags` variants), statically linked with the runtime and
/// preloaded, must show exactly T*N calls on each of the arcs worker -> work_a and
/// worker -> work_b. The compilers pass the caller differently: gcc in the argument register
/// (`mv a0, ra` / `mov x0, x30`), clang 14 only in the frame record its forced frame pointer
/// points to, with an argument of the function in that register.
fn threads_call_graph(arch: Arch, builds: &[(Compiler, &[&str])]) {
    const T: u64 = 2;
    const N: u64 = 40_000;
    for (compiler, cflags) in builds {
        for link_kind in [Link::Static, Link::Preload] {
            let name = format!(
                "{}-graph-{compiler:?}{}-{link_kind:?}",
                arch.name,
                cflags.join("")
            );
            let dir = workdir(&name);
            let obj = compile(arch, *compiler, &dir, "threads.c", cflags, "threads.o");
            let exe = link(arch, &dir, &obj, "threads", link_kind);
            let mut env = env(arch, link_kind);
            env.push(("INSTRFN_VERBOSE", "1".to_string()));
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let out = run_exe(arch, &exe, &[&T.to_string(), &N.to_string()], &env, &dir);
            let gmon = dir.join("gmon.out");
            let flat = gprof_flat(arch, &exe, &gmon);
            assert_calls(&flat, &[("work_a", T * N), ("work_b", T * N)], &name);
            let arcs = gprof_arcs(arch, &exe, &gmon);
            assert_arcs(
                &arcs,
                &[("worker", "work_a", T * N), ("worker", "work_b", T * N)],
                &name,
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_fast_path_used(&stderr, 2 * T * N, &name);
            // At most one slow path per instrumented function and thread (main; worker, work_a
            // and work_b in each worker): where riscv64 decides and marks each call site.
            let slow = summary_value(&stderr, "slow paths");
            assert!(slow <= 1 + 3 * T, "{name}: {slow} slow paths");
        }
    }
}

/// The recursion fixture: self-recursion (fib) and a cycle (is_even/is_odd), every arc exact in
/// gprof's call graph, static and preloaded.
fn recursion_call_graph(arch: Arch, builds: &[(Compiler, &[&str])]) {
    for (compiler, cflags) in builds {
        for link_kind in [Link::Static, Link::Preload] {
            let name = format!(
                "{}-recursion-{compiler:?}{}-{link_kind:?}",
                arch.name,
                cflags.join("")
            );
            let dir = workdir(&name);
            let obj = compile(arch, *compiler, &dir, "recursion.c", cflags, "recursion.o");
            let exe = link(arch, &dir, &obj, "recursion", link_kind);
            let env = env(arch, link_kind);
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            run_exe(arch, &exe, &["20", "1000"], &env, &dir);
            let arcs = gprof_arcs(arch, &exe, &dir.join("gmon.out"));
            assert_arcs(&arcs, &RECURSION_ARCS, &name);
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

#[test]
fn aarch64_recursion_call_graph() {
    recursion_call_graph(AARCH64, &[(Compiler::Gcc, &[]), (Compiler::Clang, &[])]);
}
#[test]
fn riscv64_recursion_call_graph() {
    recursion_call_graph(RISCV64, &[(Compiler::Gcc, &[]), (Compiler::Clang, &[])]);
}
#[test]
fn s390x_recursion_call_graph() {
    recursion_call_graph(
        S390X,
        &[(Compiler::Gcc, &[]), (Compiler::Gcc, &["-mfentry"])],
    );
}
#[test]
fn s390x_call_graph_exact() {
    threads_call_graph(
        S390X,
        &[(Compiler::Gcc, &[]), (Compiler::Gcc, &["-mfentry"])],
    );
}

fn registers(arch: Arch) {
    let dir = workdir(&format!("{}-regs", arch.name));
    let driver = fixture("regs/driver.c");
    let harness = fixture(&format!("regs/{}.S", arch.name));
    let lib = runtime_lib(arch, Lib::Static);
    let shared = runtime_lib(arch, Lib::Shared);
    let libdir = shared.parent().unwrap();
    let mut common_args: Vec<&OsStr> = vec![OsStr::new("-O1")];
    common_args.extend(arch_flags(arch).iter().map(OsStr::new));
    common_args.extend([driver.as_os_str(), harness.as_os_str()]);
    let mut st = common_args.clone();
    st.extend([lib.as_os_str(), OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    let st = cc(arch, &st, &dir.join("regs-static"));
    // Eager binding: a lazy PLT resolver (the loader, not instrfn) clobbers scratch registers.
    let l = format!("-L{}", libdir.display());
    let mut dy = common_args.clone();
    dy.extend([
        OsStr::new(&l),
        OsStr::new("-linstrfn"),
        OsStr::new("-Wl,-z,now"),
        OsStr::new("-lpthread"),
    ]);
    let dy = cc(arch, &dy, &dir.join("regs-dynamic"));
    let ld_path = libdir.display().to_string();
    let verbose = ("INSTRFN_VERBOSE", "1");
    let ld = ("LD_LIBRARY_PATH", ld_path.as_str());
    // INSTRFN_MAX_ARCS=128: most of the driver's new arcs take the full-table (loss) path.
    let small = ("INSTRFN_MAX_ARCS", "128");
    for (exe, env) in [
        (&st, vec![verbose]),
        (&dy, vec![verbose, ld]),
        (&st, vec![verbose, small]),
        (&dy, vec![verbose, ld, small]),
    ] {
        // libinstrfn.so does not export the debug entry the guarded calls need.
        let expect = if exe == &st { "ok 10012" } else { "ok 10010" };
        for kind in regs_kinds(arch) {
            let out = run(&mut command(arch, exe, &[kind], &env, &dir));
            assert!(
                out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == expect,
                "{} {} kind {kind}: {}{}",
                arch.name,
                exe.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let context = format!("{} {} kind {kind}", arch.name, exe.display());
            assert_inserts_in_trampoline(&String::from_utf8_lossy(&out.stderr), &context);
            if frame_record_kind(arch) == Some(kind) && !env.contains(&small) {
                // Every call the driver makes with recording on (all but the four with the
                // guard held or recording stopped), each from its from_pc's return address.
                let arcs = gprof_arcs(arch, exe, &dir.join("gmon.out"));
                assert_arcs(
                    &arcs,
                    &[("instrfn_regs_callers", "instrfn_regcheck", 10_008)],
                    &context,
                );
            }
        }
    }
}

/// Links `arch`'s register harness against `fake`, trampolines that each clobber one register,
/// and asserts that every kind the harness calls fails and names it: `clobbers` is (kind, the
/// register's index in the harness's order, what it is), one per kind of `regs_kinds`.
fn harness_catches(arch: Arch, fake: &str, clobbers: &[(&str, u32, &str)]) {
    let kinds: Vec<&str> = clobbers.iter().map(|(kind, ..)| *kind).collect();
    assert_eq!(
        kinds,
        regs_kinds(arch),
        "{}: one clobber per kind",
        arch.name
    );
    let dir = workdir(&format!("{}-regs-negative", arch.name));
    let fake_s = dir.join("fake.S");
    let note = ".section .note.GNU-stack,\"\",%progbits\n";
    std::fs::write(&fake_s, format!("{fake}{note}")).unwrap();
    let driver = fixture("regs/driver.c");
    let harness = fixture(&format!("regs/{}.S", arch.name));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O1")];
    args.extend(arch_flags(arch).iter().map(OsStr::new));
    args.extend([
        driver.as_os_str(),
        harness.as_os_str(),
        fake_s.as_os_str(),
        OsStr::new("-lpthread"),
    ]);
    let exe = cc(arch, &args, &dir.join("regs-fake"));
    for (kind, index, what) in clobbers {
        let out = run(&mut command(arch, &exe, &[kind], &[], &dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{} kind {kind} ({what}) passed: {}{stderr}",
            arch.name,
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains(&format!("register #{index} clobbered")),
            "{} kind {kind}, {what} (#{index}): {stderr}",
            arch.name
        );
    }
}

/// Signal handlers that count, interrupting the fast path anywhere (the counting instruction
/// or LL/SC loop must not lose a count), fork with its own file, and thread churn.
fn scenarios(arch: Arch) {
    let dir = workdir(&format!("{}-scenarios", arch.name));
    let exe = build(arch, &dir, "scenarios.c", &[], Link::Static);
    let out = run_in(arch, &exe, &["signal", "300"], &[], &dir);
    let handled: u64 = value(&out, "handler");
    let work: u64 = value(&out, "work_a");
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("from_handler", handled), ("work_a", work)],
        &format!("{} signal", arch.name),
    );

    let out = run_in(arch, &exe, &["fork", "2000"], &[], &dir);
    let child: u64 = value(&out, "child");
    let parent = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &parent,
        &[("in_parent", 4000), ("in_child", 0)],
        &format!("{} fork parent", arch.name),
    );
    let child = gprof_flat(arch, &exe, &dir.join(format!("gmon.out.{child}")));
    assert_calls(
        &child,
        &[("in_child", 4000), ("in_parent", 0)],
        &format!("{} fork child", arch.name),
    );

    run_in(arch, &exe, &["churn", "200", "50"], &[], &dir);
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 10_000)],
        &format!("{} churn", arch.name),
    );
}

/// Under emulation the pc histogram still lands in the hot function (its quality in seconds
/// is the emulator's, so only the share is checked).
fn histogram(arch: Arch) {
    let dir = workdir(&format!("{}-busy", arch.name));
    let exe = build(arch, &dir, "scenarios.c", &[], Link::Static);
    run_in(arch, &exe, &["busy", "0.5"], &[], &dir);
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    let total = flat.total_seconds();
    let hot = flat.entries.get("hot").map_or(0.0, |e| e.self_seconds);
    assert!(
        total > 0.0 && hot >= 0.8 * total,
        "{}: hot {hot} of {total} s\n{}",
        arch.name,
        flat.text
    );
}

fn value(out: &str, key: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
}

#[test]
fn aarch64_threads_exact() {
    threads_exact(AARCH64);
}
#[test]
fn aarch64_call_graph_exact() {
    threads_call_graph(AARCH64, &[(Compiler::Clang, &[]), (Compiler::Gcc, &[])]);
}
#[test]
fn aarch64_registers() {
    registers(AARCH64);
}

/// A test that cannot fail proves nothing: the aarch64 harness, linked against trampolines that
/// clobber an argument register and the upper half of a vector register (what saving only d1
/// would do), must name each. The fakes never read x0 or x29, however from_pc is passed.
#[test]
fn aarch64_harness_catches_a_clobbering_trampoline() {
    harness_catches(
        AARCH64,
        ".globl _mcount, mcount, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
         _mcount: mov x1, xzr\n ret\n\
         mcount: mov v1.d[1], xzr\n ret\n\
         instrfn_start: ret\ninstrfn_stop: ret\n\
         instrfn_debug_call_guarded: mov x16, x0\n mov x0, x1\n br x16\n",
        &[("0", 1, "x1"), ("1", 35, "v1 upper half")],
    );
}

#[test]
fn aarch64_scenarios() {
    scenarios(AARCH64);
}
#[test]
fn aarch64_histogram() {
    histogram(AARCH64);
}

#[test]
fn aarch64_rust_dependency_route() {
    let exe = build_instrumented_rust("rust-app", AARCH64.triple, "rust-app");
    let dir = workdir("aarch64-rust");
    run_exe(AARCH64, &exe, &["2", "50000"], &[], &dir);
    let flat = gprof_flat(AARCH64, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[
            ("rust_app::work_a", 100_000),
            ("rust_app::work_b", 100_000),
            ("rust_app::worker", 2),
        ],
        "aarch64 rust",
    );
    flat.assert_no_runtime_calls("aarch64 rust");
}

#[test]
fn riscv64_threads_exact() {
    threads_exact(RISCV64);
}
/// gcc -O2 keeps no frame pointer (s0 is an ordinary register) and passes the caller in a0;
/// with -fno-omit-frame-pointer the frame record holds it too; clang 14 keeps a frame pointer
/// and leaves an argument in a0.
#[test]
fn riscv64_call_graph_exact() {
    threads_call_graph(
        RISCV64,
        &[
            (Compiler::Clang, &[]),
            (Compiler::Gcc, &[]),
            (Compiler::Gcc, &["-fno-omit-frame-pointer"]),
        ],
    );
}
#[test]
fn riscv64_registers() {
    registers(RISCV64);
}

/// A test that cannot fail proves nothing: the riscv64 harness, linked against trampolines that
/// clobber argument registers and the upper half of an FP register (a save with fsw/flw,
/// which NaN-boxes the value it reloads), must name each. The fake `_mcount` clobbers a0 and
/// a1: kinds 0 and 3 (gcc's call, a0 = from_pc, not compared) name a1, kind 2 (clang's call,
/// a0 an argument) names a0.
#[test]
fn riscv64_harness_catches_a_clobbering_trampoline() {
    harness_catches(
        RISCV64,
        ".globl _mcount, mcount, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
         _mcount: li a0, 0\n li a1, 0\n ret\n\
         mcount: addi sp, sp, -16\n fsw fa0, 0(sp)\n flw fa0, 0(sp)\n addi sp, sp, 16\n ret\n\
         instrfn_start: ret\ninstrfn_stop: ret\n\
         .globl instrfn_debug_clear_thread\ninstrfn_debug_clear_thread: ret\n\
         instrfn_debug_call_guarded: mv t0, a0\n mv a0, a1\n jr t0\n",
        &[
            ("0", 11, "a1"),
            ("1", 42, "fa0 upper half"),
            ("2", 10, "a0"),
            ("3", 11, "a1"),
        ],
    );
}

#[test]
fn riscv64_scenarios() {
    scenarios(RISCV64);
}
#[test]
fn riscv64_histogram() {
    histogram(RISCV64);
}

#[test]
fn s390x_threads_exact() {
    threads_exact(S390X);
}
#[test]
fn s390x_registers() {
    registers(S390X);
}

/// A test that cannot fail proves nothing: the s390x harness (z13, vector registers checked),
/// linked against trampolines that clobber an argument register, the right half of v0 (which
/// saving f0 alone does not cover) and an FP argument register, must name each. Each fake
/// returns as the real one does: `_mcount` and `mcount` through r14, `__fentry__` through
/// r1 = r0.
#[test]
fn s390x_harness_catches_a_clobbering_trampoline() {
    harness_catches(
        S390X,
        ".globl _mcount, __fentry__, mcount, instrfn_start, instrfn_stop\n\
         .globl instrfn_debug_call_guarded\n\
         _mcount: lghi %r2, 0\n br %r14\n\
         __fentry__: vleig %v0, 0, 1\n lgr %r1, %r0\n br %r1\n\
         mcount: lzdr %f2\n br %r14\n\
         instrfn_start: br %r14\ninstrfn_stop: br %r14\n\
         instrfn_debug_call_guarded: lgr %r1, %r2\n lgr %r2, %r3\n br %r1\n",
        &[("0", 0, "r2"), ("1", 17, "v0 right half"), ("2", 20, "f2")],
    );
}

#[test]
fn s390x_scenarios() {
    scenarios(S390X);
}
#[test]
fn s390x_histogram() {
    histogram(S390X);
}

#[test]
fn s390x_registers_without_vector_facility() {
    // The trampolines pick their save method at run time: on a CPU without the vector
    // facility they save the FPRs only, and must not execute a vector instruction.
    let dir = workdir("s390x-regs-novx");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/s390x.S");
    let lib = runtime_lib(S390X, Lib::Static);
    let args: Vec<&OsStr> = vec![
        OsStr::new("-O1"),
        OsStr::new("-march=z10"),
        driver.as_os_str(),
        harness.as_os_str(),
        lib.as_os_str(),
        OsStr::new("-lpthread"),
        OsStr::new("-ldl"),
    ];
    let exe = cc(S390X, &args, &dir.join("regs-z10"));
    for kind in regs_kinds(S390X) {
        let out = run_ok(
            std::process::Command::new("qemu-s390x")
                .args([
                    "-cpu",
                    "qemu,vx=off,vxeh=off,vxeh2=off",
                    "-L",
                    S390X.sysroot.unwrap(),
                ])
                .arg(&exe)
                .arg(kind)
                .current_dir(&dir),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok 10012",
            "kind {kind}"
        );
    }
}

#[test]
fn s390x_gmon_out_is_big_endian() {
    // The writer uses the target's byte order; gprof for s390x reads the file (checked above);
    // here the header's version word shows the order directly.
    let dir = workdir("s390x-endian");
    let exe = build(S390X, &dir, "threads.c", &[], Link::Static);
    run_in(S390X, &exe, &["1", "10"], &[], &dir);
    let bytes = std::fs::read(dir.join("gmon.out")).unwrap();
    assert_eq!(&bytes[..8], b"gmon\0\0\0\x01", "header {:?}", &bytes[..8]);
}

#[test]
fn shared_libraries_export_only_their_interface() {
    for (arch, nm, fentry, cyg) in [
        (AARCH64, "aarch64-linux-gnu-nm", false, true),
        (RISCV64, "riscv64-linux-gnu-nm", false, true),
        (S390X, "s390x-linux-gnu-nm", true, true),
    ] {
        assert_eq!(
            exported_symbols(arch, nm),
            expected_exports(fentry, cyg),
            "{}",
            arch.name
        );
    }
}

/// The call-graph parser on gprof's own output for recursion, a cycle and a caller without an
/// entry of its own (host gprof, glibc's gcrt: `fact` recursive, `ping`/`pong` a cycle).
#[test]
fn call_graph_parser() {
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

/// A -pg shared library gets a profile of its own in its link-time addresses (linked, and
/// dlopen'ed), read by the architecture's gprof with exact counts and arcs.
#[test]
fn aarch64_shared_library_profiles() {
    let arch = AARCH64;
    const N: u64 = 3000;
    let dir = workdir("aarch64-libraries");
    let src = fixture("c/libwork.c");
    let lib_args = [
        OsStr::new("-O2"),
        OsStr::new("-pg"),
        OsStr::new("-fPIC"),
        OsStr::new("-shared"),
        src.as_os_str(),
    ];
    let libwork = cc(arch, &lib_args, &dir.join("libwork.so"));
    let user = fixture("c/libuser.c");
    let (linked_obj, loader_obj) = (dir.join("linked.o"), dir.join("loader.o"));
    let pg = ["-O2", "-pg", "-c"].map(OsStr::new);
    let mut args = pg.to_vec();
    args.extend([OsStr::new("-DLINKED"), user.as_os_str()]);
    cc(arch, &args, &linked_obj);
    let mut args = pg.to_vec();
    args.push(user.as_os_str());
    cc(arch, &args, &loader_obj);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let linked_args = [
        linked_obj.as_os_str(),
        libwork.as_os_str(),
        OsStr::new(&rpath),
        OsStr::new("-ldl"),
    ];
    let linked = cc(arch, &linked_args, &dir.join("libuser"));
    let loader = cc(
        arch,
        &[loader_obj.as_os_str(), OsStr::new("-ldl")],
        &dir.join("libuser-dl"),
    );
    let env = env(arch, Link::Preload);
    let (n, work) = (N.to_string(), libwork.display().to_string());
    for (mode, exe, args) in [
        ("linked", &linked, vec!["linked", n.as_str()]),
        ("dlopen", &loader, vec!["dlopen", n.as_str(), work.as_str()]),
    ] {
        let run_dir = workdir(&format!("aarch64-libraries-{mode}"));
        run_in(arch, exe, &args, &env, &run_dir);
        let flat = gprof_flat(arch, exe, &run_dir.join("gmon.out"));
        assert_calls(&flat, &[("local", N)], mode);
        let profile = run_dir.join("gmon.out.libwork.so");
        let lib = gprof_flat(arch, &libwork, &profile);
        assert_calls(&lib, &[("lib_inner", N)], mode);
        let arcs = gprof_arcs(arch, &libwork, &profile);
        assert_arcs(&arcs, &[("lib_outer", "lib_inner", N)], mode);
    }
}

/// The dlopen wrapper's routed jump on every other architecture (src/arch/*.rs
/// `routed_jump!`), preloaded under qemu: in gmon mode the call goes straight on to libc's
/// dlopen (the library's own profile, exact); in trace mode through the wrapper, which notes
/// the library before dlopen returns: its `module` line is in the trace of a process killed
/// right after its calls (no instrfn_flush), so they show by name. dlerror()'s message after a
/// failed dlopen, and nothing after one that succeeded, either way.
#[test]
fn dlopen_wrapper_on_every_architecture() {
    const N: u64 = 300;
    for arch in [AARCH64, RISCV64, S390X] {
        let name = arch.name;
        let dir = workdir(&format!("{name}-dlopen-wrapper"));
        let src = fixture("c/libwork.c");
        let lib_args = ["-O2", "-pg", "-fPIC", "-shared"].map(OsStr::new);
        let mut args = lib_args.to_vec();
        args.extend(arch_flags(arch).iter().map(OsStr::new));
        args.push(src.as_os_str());
        let libwork = cc(arch, &args, &dir.join("libwork.so"));
        let obj = compile(arch, Compiler::Gcc, &dir, "libuser.c", &[], "loader.o");
        let loader = cc(
            arch,
            &[obj.as_os_str(), OsStr::new("-ldl")],
            &dir.join("loader"),
        );
        let (n, work) = (N.to_string(), libwork.display().to_string());
        let preload = env(arch, Link::Preload);
        let trace = dir.join("trace");
        let mut traced = preload.clone();
        traced.extend([
            ("INSTRFN_MODE", "trace".to_string()),
            ("INSTRFN_OUTPUT", trace.display().to_string()),
        ]);

        // gmon mode: libc's dlopen, called as if unwrapped.
        run_in(arch, &loader, &["dlopen", &n, &work], &preload, &dir);
        let flat = gprof_flat(arch, &libwork, &dir.join("gmon.out.libwork.so"));
        assert_calls(&flat, &[("lib_inner", N)], name);

        // dlerror() after a failed and a successful dlopen: the same lines in both modes.
        let missing = ["missing", n.as_str(), work.as_str()];
        let plain = run_in(arch, &loader, &missing, &[], &dir);
        assert!(
            plain.starts_with("NULL: /nonexistent-instrfn/libnope.so: cannot open")
                && plain.ends_with("\nloaded: (null)\n"),
            "{name}: {plain}"
        );
        assert_eq!(
            run_in(arch, &loader, &missing, &preload, &dir),
            plain,
            "{name}"
        );
        let _ = std::fs::remove_dir_all(&trace);
        assert_eq!(
            run_in(arch, &loader, &missing, &traced, &dir),
            plain,
            "{name}"
        );

        // Trace mode, killed after the calls: the library's module line came from the wrapper.
        let _ = std::fs::remove_dir_all(&trace);
        let env: Vec<(&str, &str)> = traced.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = run(&mut command(
            arch,
            &loader,
            &["dlopenkill", &n, &work],
            &env,
            &dir,
        ));
        assert_eq!(out.status.code(), None, "{name}: not killed");
        let procs = instrfn_dump(&trace);
        let events = procs[0].threads.values().flatten();
        let inner = events
            .filter(|e| e.kind == "entry" && e.name == "lib_inner")
            .count() as u64;
        assert_eq!(inner, N, "{name}: {:?}", procs[0].header);
    }
}
