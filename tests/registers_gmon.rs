//! Registers preserved in gmon mode: the counting trampolines (mcount, _mcount, __fentry__)
//! keep every register the instrumented code may still use, errno too, on every path (the
//! fast path, new arcs inserted by the trampoline itself, a full table, new threads, the
//! guard held, recording stopped), statically linked and preloaded; the harness
//! (tests/fixtures/regs: driver.c and <arch>.S, which loads sentinels into every register
//! before each call and compares after it) names a clobbered register, as trampolines that
//! clobber one each show.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::process::Command;

feature_tests! {
    registers_gmon:
    every_path(x86_64, aarch64, riscv64, s390x),
    harness_catches_a_clobbering_trampoline(x86_64, aarch64, riscv64, s390x),
    without_vector_facility(s390x),
}

/// The entry points each harness calls (driver.c's `kind`): 0 is `mcount` on x86_64 and
/// `_mcount` elsewhere; 1 is `__fentry__` on x86_64 and s390x and the `mcount` alias on
/// aarch64 and riscv64, which have no `__fentry__`; 2 is `mcount` on s390x (what LLVM emits
/// there) and on riscv64 `_mcount` called as clang does, with the caller in the frame record
/// only (see [`frame_record_kind`]); riscv64's 3 is kind 0 with the thread's table emptied
/// before each call (a site decided before, not marked in the table).
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

/// The build flags of the harness: x86_64's at gcc's default level, the others at -O1 (s390x
/// for z13: the vector registers are live and checked).
fn harness_flags(arch: Arch) -> Vec<&'static str> {
    if arch == X86_64 {
        vec![]
    } else {
        [&["-O1"], arch_flags(arch)].concat()
    }
}

/// The harness with the runtime linked statically (`<dir>/regs-static`), and linked against
/// libinstrfn.so (`<dir>/regs-dynamic`, with eager binding: with lazy binding the dynamic
/// loader's resolver, not instrfn, may clobber scratch registers on the first call through
/// the PLT; x86_64 finds the library by its rpath, the others by LD_LIBRARY_PATH).
fn every_path(arch: Arch) {
    let dir = workdir(&format!("{}-regs", arch.name));
    let driver = fixture("regs/driver.c");
    let harness = fixture(&format!("regs/{}.S", arch.name));
    let lib = runtime_lib(arch, Lib::Static);
    let shared = runtime_lib(arch, Lib::Shared);
    let libdir = shared.parent().unwrap();
    let mut common_args: Vec<&OsStr> = harness_flags(arch).into_iter().map(OsStr::new).collect();
    common_args.extend([driver.as_os_str(), harness.as_os_str()]);
    let mut st = common_args.clone();
    st.extend([lib.as_os_str(), OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    let st = cc(arch, &st, &dir.join("regs-static"));
    let l = format!("-L{}", libdir.display());
    let rpath = format!("-Wl,-rpath,{}", libdir.display());
    let mut dy = common_args.clone();
    dy.extend([OsStr::new(&l), OsStr::new("-linstrfn")]);
    if arch == X86_64 {
        dy.push(OsStr::new(&rpath));
    }
    dy.extend([OsStr::new("-Wl,-z,now"), OsStr::new("-lpthread")]);
    let dy = cc(arch, &dy, &dir.join("regs-dynamic"));
    let ld_path = libdir.display().to_string();
    let ld: &[(&str, &str)] = if arch == X86_64 {
        &[]
    } else {
        &[("LD_LIBRARY_PATH", ld_path.as_str())]
    };
    // The second round keeps 128 arcs per thread: most of the driver's 5000 new arcs then take
    // the trampolines' full-table path, which counts them as lost.
    for (exe, max_arcs) in [
        (&st, "1048576"),
        (&dy, "1048576"),
        (&st, "128"),
        (&dy, "128"),
    ] {
        let mut env = vec![("INSTRFN_VERBOSE", "1"), ("INSTRFN_MAX_ARCS", max_arcs)];
        if exe == &dy {
            env.extend_from_slice(ld);
        }
        // libinstrfn.so does not export the debug entry the guarded calls need.
        let expect = if exe == &st { "ok 10012" } else { "ok 10010" };
        for kind in regs_kinds(arch) {
            let context = format!(
                "{} {} kind {kind} INSTRFN_MAX_ARCS={max_arcs}",
                arch.name,
                exe.display()
            );
            let out = run(&mut command(arch, exe, &[kind], &env, &dir));
            assert!(
                out.status.success() && stdout_of(&out).trim() == expect,
                "{context}: {}{}",
                stdout_of(&out),
                stderr_of(&out)
            );
            assert_inserts_in_trampoline(&stderr_of(&out), &context);
            if frame_record_kind(arch) == Some(kind) && max_arcs != "128" {
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

/// A test that cannot fail proves nothing: `arch`'s harness, linked against fake trampolines
/// that clobber one register each, must fail and name it, for every kind the harness calls.
/// The fakes never read the from_pc register or the frame pointer, however from_pc is passed.
///
/// - x86_64: the upper half of ymm0 (`vzeroupper`, what a glibc AVX2 memcpy on the path does)
///   and r11 (which gcc's -fipa-ra may rely on).
/// - aarch64: an argument register and the upper half of a vector register (what saving only
///   d1 would do).
/// - riscv64: argument registers and the upper half of an FP register (a save with fsw/flw,
///   which NaN-boxes the value it reloads). The fake `_mcount` clobbers a0 and a1: kinds 0
///   and 3 (gcc's call, a0 = from_pc, not compared) name a1, kind 2 (clang's call, a0 an
///   argument) names a0.
/// - s390x (z13, vector registers checked): an argument register, the right half of v0
///   (which saving f0 alone does not cover) and an FP argument register. Each fake returns
///   as the real one does: `_mcount` and `mcount` through r14, `__fentry__` through r1 = r0.
fn harness_catches_a_clobbering_trampoline(arch: Arch) {
    let (fake, clobbers): (&str, &[(&str, u32, &str)]) = match arch.name {
        "x86_64" => (
            ".globl mcount, __fentry__, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
             mcount: vzeroupper\n ret\n__fentry__: xorq %r11, %r11\n ret\n\
             instrfn_start: ret\ninstrfn_stop: ret\n\
             instrfn_debug_call_guarded: movq %rdi, %rax\n movq %rsi, %rdi\n jmp *%rax\n\
             .section .note.GNU-stack,\"\",@progbits\n",
            &[("0", 18, "ymm0 upper half"), ("1", 9, "r11")],
        ),
        "aarch64" => (
            ".globl _mcount, mcount, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
             _mcount: mov x1, xzr\n ret\n\
             mcount: mov v1.d[1], xzr\n ret\n\
             instrfn_start: ret\ninstrfn_stop: ret\n\
             instrfn_debug_call_guarded: mov x16, x0\n mov x0, x1\n br x16\n\
             .section .note.GNU-stack,\"\",%progbits\n",
            &[("0", 1, "x1"), ("1", 35, "v1 upper half")],
        ),
        "riscv64" => (
            ".globl _mcount, mcount, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
             _mcount: li a0, 0\n li a1, 0\n ret\n\
             mcount: addi sp, sp, -16\n fsw fa0, 0(sp)\n flw fa0, 0(sp)\n addi sp, sp, 16\n ret\n\
             instrfn_start: ret\ninstrfn_stop: ret\n\
             .globl instrfn_debug_clear_thread\ninstrfn_debug_clear_thread: ret\n\
             instrfn_debug_call_guarded: mv t0, a0\n mv a0, a1\n jr t0\n\
             .section .note.GNU-stack,\"\",%progbits\n",
            &[
                ("0", 11, "a1"),
                ("1", 42, "fa0 upper half"),
                ("2", 10, "a0"),
                ("3", 11, "a1"),
            ],
        ),
        _ => (
            ".globl _mcount, __fentry__, mcount, instrfn_start, instrfn_stop\n\
             .globl instrfn_debug_call_guarded\n\
             _mcount: lghi %r2, 0\n br %r14\n\
             __fentry__: vleig %v0, 0, 1\n lgr %r1, %r0\n br %r1\n\
             mcount: lzdr %f2\n br %r14\n\
             instrfn_start: br %r14\ninstrfn_stop: br %r14\n\
             instrfn_debug_call_guarded: lgr %r1, %r2\n lgr %r2, %r3\n br %r1\n\
             .section .note.GNU-stack,\"\",%progbits\n",
            &[("0", 0, "r2"), ("1", 17, "v0 right half"), ("2", 20, "f2")],
        ),
    };
    let kinds: Vec<&str> = clobbers.iter().map(|(kind, ..)| *kind).collect();
    assert_eq!(
        kinds,
        regs_kinds(arch),
        "{}: one clobber per kind",
        arch.name
    );
    let dir = workdir(&format!("{}-regs-negative", arch.name));
    let fake_s = dir.join("fake.S");
    std::fs::write(&fake_s, fake).unwrap();
    let driver = fixture("regs/driver.c");
    let harness = fixture(&format!("regs/{}.S", arch.name));
    let mut args: Vec<&OsStr> = harness_flags(arch).into_iter().map(OsStr::new).collect();
    args.extend([
        driver.as_os_str(),
        harness.as_os_str(),
        fake_s.as_os_str(),
        OsStr::new("-lpthread"),
    ]);
    let exe = cc(arch, &args, &dir.join("regs-fake"));
    for (kind, index, what) in clobbers {
        let out = run(&mut command(arch, &exe, &[kind], &[], &dir));
        let stderr = stderr_of(&out);
        assert!(
            !out.status.success(),
            "{} kind {kind} ({what}) passed: {}{stderr}",
            arch.name,
            stdout_of(&out)
        );
        assert!(
            stderr.contains(&format!("register #{index} clobbered")),
            "{} kind {kind}, {what} (#{index}): {stderr}",
            arch.name
        );
    }
}

/// The trampolines pick their save method at run time: on a CPU without the vector facility
/// (qemu's `vx=off`) they save the FPRs only, and must not execute a vector instruction.
fn without_vector_facility(arch: Arch) {
    let dir = workdir("s390x-regs-novx");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/s390x.S");
    let lib = runtime_lib(arch, Lib::Static);
    let args: Vec<&OsStr> = vec![
        OsStr::new("-O1"),
        OsStr::new("-march=z10"),
        driver.as_os_str(),
        harness.as_os_str(),
        lib.as_os_str(),
        OsStr::new("-lpthread"),
        OsStr::new("-ldl"),
    ];
    let exe = cc(arch, &args, &dir.join("regs-z10"));
    for kind in regs_kinds(arch) {
        let out = run_ok(
            Command::new("qemu-s390x")
                .args([
                    "-cpu",
                    "qemu,vx=off,vxeh=off,vxeh2=off",
                    "-L",
                    arch.sysroot.unwrap(),
                ])
                .arg(&exe)
                .arg(kind)
                .current_dir(&dir),
        );
        assert_eq!(stdout_of(&out).trim(), "ok 10012", "kind {kind}");
    }
}
