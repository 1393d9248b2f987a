//! Registers preserved in trace mode: trace mode replaces the instrumented function's return
//! address, so every register must survive the entry trampoline and the exit trampoline the
//! function then returns through, on each of their paths (first event, fast paths, call
//! words, chunk refills at entry and at exit, the trace limit, entries only, a shadow stack
//! too small, INSTRFN_MIN_DURATION taking entries back, new threads, the guard held,
//! recording stopped). Each architecture has its own harness (tests/fixtures/regs), which
//! loads sentinels into every register a function may return in and every callee-saved one
//! before it returns through the exit trampoline, and a negative test: a harness that cannot
//! fail proves nothing.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

feature_tests! {
    registers_trace:
    every_path(x86_64, aarch64, riscv64, s390x),
    harness_catches_a_clobbering_exit(x86_64, aarch64, riscv64, s390x),
    without_vector_facility(s390x),
    slow_path_of_an_unproven_prologue(riscv64),
}

/// See each architecture's function.
fn every_path(arch: Arch) {
    match arch.name {
        "x86_64" => x86_64_every_path(),
        "aarch64" => aarch64_every_path(),
        "riscv64" => riscv64_every_path(),
        _ => s390x_every_path(),
    }
}

/// See each architecture's function.
fn harness_catches_a_clobbering_exit(arch: Arch) {
    match arch.name {
        "x86_64" => x86_64_harness_catches_a_clobbering_exit(),
        "aarch64" => aarch64_harness_catches_a_clobbering_exit(),
        "riscv64" => riscv64_harness_catches_a_clobbering_exit(),
        _ => s390x_harness_catches_a_clobbering_exit(),
    }
}

/// Trace mode replaces the instrumented function's return address: every register must
/// survive the entry trampoline and the exit trampoline the function then returns through,
/// on each of their paths: first event (chunk claimed in the slow path), fast paths, chunk
/// refills at entry and at exit (4 KiB chunks), the limit reached (every later event lost
/// in the slow path), entries only (INSTRFN_EXITS=0), new threads, guard held, stopped.
fn x86_64_every_path() {
    let arch = X86_64;
    let dir = workdir("regs-trace-x86_64");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/x86_64.S");
    let lib = runtime_lib(arch, Lib::Static);
    let shared_dir = runtime_lib(arch, Lib::Shared)
        .parent()
        .unwrap()
        .to_path_buf();
    let st = cc(
        arch,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ],
        &dir.join("regs-static"),
    );
    let rpath = format!("-Wl,-rpath,{}", shared_dir.display());
    let libdir = format!("-L{}", shared_dir.display());
    let dy = cc(
        arch,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            OsStr::new(&libdir),
            OsStr::new("-linstrfn"),
            OsStr::new(&rpath),
            OsStr::new("-Wl,-z,now"),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-dynamic"),
    );
    // Recorded calls: all but the 2 while stopped and (static only) the 2 with the guard held.
    const RECORDED: u64 = 10008;
    for exe in [&st, &dy] {
        for (kind, func) in [("2", "traced_mcount"), ("3", "traced_fentry")] {
            // (With call words a full chunk is met by the next entry: the 4 KiB rows without
            // them have the exits meet it too, their slow path with the registers checked; run
            // also with every event one word later in its chunk, `shift`, so that chunks fill
            // at exits whatever the parity of the events before the calls.)
            let no_words = &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..];
            let mut opened_by_exits = 0;
            for (settings, shift) in [
                (&[("INSTRFN_BUFSIZE", "1048576")][..], false),
                (&[("INSTRFN_BUFSIZE", "4096")][..], false),
                (no_words, false),
                (no_words, true),
                (&[("INSTRFN_TRACE_LIMIT", "100000")][..], false),
                (&[("INSTRFN_EXITS", "0")][..], false),
                (&[("INSTRFN_MIN_DURATION", "1s")][..], false),
            ] {
                let setting = settings[0];
                let out_dir = dir.join("trace");
                let _ = std::fs::remove_dir_all(&out_dir);
                let mut env = vec![
                    ("INSTRFN_MODE", "trace"),
                    ("INSTRFN_OUTPUT", out_dir.to_str().unwrap()),
                ];
                env.extend_from_slice(settings);
                let args: &[&str] = if shift { &[kind, "shift"] } else { &[kind] };
                let out = run_exe(arch, exe, args, &env, &dir);
                let context = format!("{} kind {kind} {settings:?} shift {shift}", exe.display());
                let expect = if exe == &st { "ok 10012" } else { "ok 10010" };
                assert_eq!(
                    stdout_of(&out).trim(),
                    expect,
                    "{context}: {}",
                    stderr_of(&out)
                );
                let procs = instrfn_dump(&out_dir);
                assert_eq!(procs.len(), 1, "{context}");
                let counts = assert_balanced(&procs[0], &context);
                let (entries, exits, noexit) = (
                    count_of(&counts, "entry", func),
                    count_of(&counts, "exit", func),
                    count_of(&counts, "entry-no-exit", func),
                );
                let lost = procs[0].lost;
                match setting {
                    ("INSTRFN_EXITS", _) => {
                        assert_eq!((entries, noexit, lost), (0, RECORDED, 0), "{context}")
                    }
                    ("INSTRFN_MIN_DURATION", _) => {
                        // Every call is short: the exit trampoline takes its entry back (the
                        // exits that take the slow path record theirs); all counted.
                        assert_eq!(entries, exits, "{context}");
                        let meta = std::fs::read_to_string(
                            std::fs::read_dir(&out_dir)
                                .unwrap()
                                .flatten()
                                .map(|e| e.path())
                                .find(|p| p.extension().is_some_and(|e| e == "meta"))
                                .unwrap(),
                        )
                        .unwrap();
                        let dropped: u64 = meta
                            .lines()
                            .filter_map(|l| l.strip_prefix("dropped "))
                            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
                            .sum();
                        assert!(dropped > RECORDED / 2, "{context}: {dropped} dropped");
                        assert_eq!(
                            dropped + entries,
                            RECORDED,
                            "{context}: {dropped} dropped, {entries} recorded"
                        );
                    }
                    ("INSTRFN_TRACE_LIMIT", _) => {
                        assert_eq!(entries, exits, "{context}");
                        assert!(lost > 0, "{context}: nothing lost");
                        assert_eq!(entries + exits + lost, 2 * RECORDED, "{context}");
                    }
                    _ => assert_eq!((entries, exits, lost), (RECORDED, RECORDED, 0), "{context}"),
                }
                if setting == ("INSTRFN_BUFSIZE", "4096") {
                    let chunks = raw_chunks(&out_dir);
                    let calls: u64 = chunks.iter().map(|c| c.calls).sum();
                    let at_exits = chunks
                        .iter()
                        .filter(|c| c.seq > 0 && c.first_kind == 2)
                        .count();
                    if settings.len() == 1 {
                        assert!(calls > RECORDED / 2, "{context}: {calls} call words");
                    } else {
                        assert_eq!(calls, 0, "{context}");
                        opened_by_exits += at_exits;
                    }
                }
            }
            // Chunks that an exit began: exits took the slow path at a full chunk.
            assert!(
                opened_by_exits > 0,
                "{} kind {kind}: no chunk begun by an exit",
                exe.display()
            );
        }
    }
}

/// x86_64's harness (regs/driver.c, regs/x86_64.S, kinds 2 and 3) linked against trampolines
/// that replace the return address as trace mode does, with exit stubs that clobber rdx (a
/// return register) and st(0) (the x87 return register): each is named as clobbered by the
/// return, and the entry was intact.
fn x86_64_harness_catches_a_clobbering_exit() {
    let dir = workdir("regs-negative-exit");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/x86_64.S");
    let fake = dir.join("fake-exit.S");
    std::fs::write(
        &fake,
        ".globl mcount, __fentry__, instrfn_start, instrfn_stop, instrfn_debug_call_guarded\n\
         mcount: pushq %rax\n movq 8(%rbp), %rax\n movq %rax, orig(%rip)\n\
         leaq exit_rdx(%rip), %rax\n movq %rax, 8(%rbp)\n popq %rax\n ret\n\
         exit_rdx: xorl %edx, %edx\n jmp *orig(%rip)\n\
         __fentry__: pushq %rax\n movq 16(%rsp), %rax\n movq %rax, orig(%rip)\n\
         leaq exit_st0(%rip), %rax\n movq %rax, 16(%rsp)\n popq %rax\n ret\n\
         exit_st0: fstp %st(0)\n fld1\n jmp *orig(%rip)\n\
         instrfn_start: ret\ninstrfn_stop: ret\n\
         instrfn_debug_call_guarded: movq %rdi, %rax\n movq %rsi, %rdi\n jmp *%rax\n\
         .data\norig: .quad 0\n.section .note.GNU-stack,\"\",@progbits\n",
    )
    .unwrap();
    let exe = cc(
        X86_64,
        &[
            driver.as_os_str(),
            harness.as_os_str(),
            fake.as_os_str(),
            OsStr::new("-lpthread"),
        ],
        &dir.join("regs-fake-exit"),
    );
    for (kind, message) in [
        ("2", "register #3 clobbered by the return"),
        ("3", "register #80 clobbered by the return"),
    ] {
        let out = run(&mut command(X86_64, &exe, &[kind], &[], &dir));
        assert!(!out.status.success(), "kind {kind}");
        assert!(
            stderr_of(&out).contains(message),
            "kind {kind}, {message}: {}",
            stderr_of(&out)
        );
        assert!(
            !stderr_of(&out).contains("clobbered\n"),
            "kind {kind}: the entry was intact: {}",
            stderr_of(&out)
        );
    }
}

/// Builds aarch64's exit-trampoline register harness (regs/aarch64_exit.S + aarch64_exit.c)
/// with `extra` objects or libraries.
fn aarch64_exit_harness(dir: &Path, extra: &[&OsStr], out: &str) -> PathBuf {
    let driver = fixture("regs/aarch64_exit.c");
    let harness = fixture("regs/aarch64_exit.S");
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O1"), driver.as_os_str(), harness.as_os_str()];
    args.extend_from_slice(extra);
    // Eager binding: the loader's lazy PLT resolver (not instrfn) keeps q0-q7 only.
    args.extend([OsStr::new("-Wl,-z,now"), OsStr::new("-lpthread")]);
    cc(AARCH64, &args, &dir.join(out))
}

/// The exit trampoline keeps every register a function returns in (x0-x8 with x8 the indirect
/// result address, v0-v31 whole; z0-z31 and p0-p15 under qemu's default CPU, which has SVE),
/// every callee-saved one, FPCR, FPSR and errno: on its fast path (kind 0), its slow path
/// (kind 1: a frame left behind above the returning one; INSTRFN_BUFSIZE=4096: the chunk
/// fills, also at exits), and the entry's slow path (kind 2: sentinels loaded before the call
/// of _mcount, a new thread for each call), and with INSTRFN_MIN_DURATION=1s (kind 0: every
/// call short, its entry taken back). Statically linked and preloaded; the trace shows every
/// call, or counts it as dropped.
fn aarch64_every_path() {
    const N: u64 = 1500;
    let dir = workdir("aarch64-trace-exit-regs");
    let lib = runtime_lib(AARCH64, Lib::Static);
    let linked = aarch64_exit_harness(
        &dir,
        &[lib.as_os_str(), OsStr::new("-ldl")],
        "exit-regs-static",
    );
    let plain = aarch64_exit_harness(&dir, &[], "exit-regs");
    let n = N.to_string();
    for (exe, link_kind) in [(&linked, Runtime::Static), (&plain, Runtime::Preload)] {
        for (kind, calls, extra) in [
            ("0", N, &[][..]),
            ("1", N, &[][..]),
            ("0", N, &[("INSTRFN_BUFSIZE", "4096")][..]),
            ("1", N, &[("INSTRFN_BUFSIZE", "4096")][..]),
            // (Without call words every exit reserves its event.)
            (
                "0",
                N,
                &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..],
            ),
            ("2", 40, &[][..]),
            ("0", N, &[("INSTRFN_MIN_DURATION", "1s")][..]),
        ] {
            let context = format!("{} kind {kind} {extra:?}", exe.display());
            let calls_s = calls.to_string();
            let args = [kind, if kind == "2" { "40" } else { n.as_str() }];
            let (out, trace) = run_traced(AARCH64, exe, &args, link_kind, extra, &dir);
            assert_eq!(
                stdout_of(&out).trim(),
                format!("ok {calls_s} sve"),
                "{context}"
            );
            let procs = instrfn_dump(&trace);
            assert_eq!(procs.len(), 1, "{context}");
            let counts = assert_balanced(&procs[0], &context);
            let target = if kind == "2" {
                "instrfn_exit_target2"
            } else {
                "instrfn_exit_target"
            };
            let (entries, exits) = (
                count_of(&counts, "entry", target),
                count_of(&counts, "exit", target),
            );
            if extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION") {
                // Every call is short: the exit trampoline takes its entry back (.Lexit_short,
                // with the registers as they must be), counted; the calls recorded are those
                // whose entry was not the newest event any more (the first of a chunk).
                let dropped = meta_dropped(&trace);
                assert_eq!(entries, exits, "{context}");
                assert!(dropped > calls / 2, "{context}: {dropped} dropped");
                assert_eq!(dropped + entries, calls, "{context}: {dropped} dropped");
                continue;
            }
            assert_eq!(entries, calls, "{context}");
            assert_eq!(exits, calls, "{context}");
            let inner = if kind == "1" { calls } else { 0 };
            assert_eq!(
                count_of(&counts, "unwound", "instrfn_exit_inner"),
                inner,
                "{context}"
            );
        }
    }
}

/// A test that cannot fail proves nothing: the harness, linked against a fake `_mcount` whose
/// exit trampoline clobbers one register, must name it: a result register, a callee-saved one,
/// the upper half of a vector result, a Z register beyond its low 128 bits (what a NEON write
/// does), a predicate, and the indirect result address.
fn aarch64_harness_catches_a_clobbering_exit() {
    let dir = workdir("aarch64-trace-exit-regs-negative");
    let fake = dir.join("fake.S");
    std::fs::write(&fake, FAKE_EXIT).unwrap();
    let exe = aarch64_exit_harness(&dir, &[fake.as_os_str()], "exit-regs-fake");
    let out = run_exe(AARCH64, &exe, &["0", "3", "0"], &[], &dir);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 3 sve");
    for (which, index, what) in [
        ("1", 3, "x3"),
        ("2", 21, "x21"),
        ("3", 43, "v5 upper half"),
        ("4", 104, "z6 beyond 128 bits"),
        ("5", 132, "p2"),
        ("6", 8, "x8"),
    ] {
        let out = run(&mut command(AARCH64, &exe, &["0", "3", which], &[], &dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what} passed: {stderr}");
        assert!(
            stderr.contains(&format!("register #{index} clobbered")),
            "{what} (#{index}): {stderr}"
        );
    }
}

/// A fake `_mcount` that replaces the return address with its own exit, which clobbers the
/// register `instrfn_exit_fake` selects and returns to the original.
const FAKE_EXIT: &str = "    .arch armv8-a+sve
    .data
    .globl instrfn_exit_fake
instrfn_exit_fake: .word 0
    .p2align 3
fake_ret: .quad 0
    .text
    .globl _mcount
_mcount:
    ldr x16, [x29, #8]
    adrp x17, fake_ret
    str x16, [x17, #:lo12:fake_ret]
    adr x16, fake_exit
    str x16, [x29, #8]
    ret
fake_exit:
    adrp x16, instrfn_exit_fake
    ldr w16, [x16, #:lo12:instrfn_exit_fake]
    cmp w16, #1
    b.ne 1f
    mov x3, xzr
1:  cmp w16, #2
    b.ne 2f
    mov x21, xzr
2:  cmp w16, #3
    b.ne 3f
    mov v5.d[1], xzr
3:  cmp w16, #4
    b.ne 4f
    mov v6.16b, v6.16b
4:  cmp w16, #5
    b.ne 5f
    pfalse p2.b
5:  cmp w16, #6
    b.ne 6f
    mov x8, xzr
6:  adrp x16, fake_ret
    ldr x30, [x16, #:lo12:fake_ret]
    ret
    .section .note.GNU-stack,\"\",%progbits
";

/// Builds riscv64's exit harness (tests/fixtures/regs/riscv64_exit.S and its driver) with
/// `extra` (objects or libraries) into `<dir>/<name>`.
fn riscv64_exit_harness(dir: &Path, name: &str, extra: &[&OsStr]) -> PathBuf {
    let driver = fixture("regs/riscv64_exit.c");
    let harness = fixture("regs/riscv64_exit.S");
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O1"), driver.as_os_str(), harness.as_os_str()];
    args.extend_from_slice(extra);
    args.push(OsStr::new("-lpthread"));
    cc(RISCV64, &args, &dir.join(name))
}

/// In a trace (its events and staging files): how many chunks after a slot's first one begin
/// with an exit event (common::raw_chunks). With the harness's odd event count and 4 KiB
/// chunks, each such exit found its chunk full in the exit trampoline, which left it to its
/// slow part. With compact events a chunk holds 504 short events, or fewer with long ones
/// among them: which events begin the chunks depends on the slots the long ones take, so the
/// harness runs twice, the second time with its events moved by 8 bytes (`shift`), and one of
/// the two has its chunks begin with exits.
fn chunks_opened_by_an_exit(tdir: &Path) -> usize {
    raw_chunks(tdir)
        .iter()
        .filter(|c| c.seq > 0 && c.first_kind == 2)
        .count()
}

/// The exit trampoline keeps a0, a1, fa0, fa1, fcsr and every callee-saved register (the
/// harness loads sentinels into them before it returns through it), and the trace entry path
/// keeps every register: with its fast part, with its slow part after a frame skipped by a
/// longjmp-like jump, when it makes a call word, and when the chunk is full
/// (INSTRFN_BUFSIZE=4096, also with INSTRFN_CALL_WORDS=off); with a shadow stack
/// of one entry (INSTRFN_MAX_DEPTH=1) the skipped frame is an entry without exit; with
/// INSTRFN_MIN_DURATION=1s the fast exits take their entries back (counted). Linked
/// statically and dynamically (eager binding: a lazy PLT resolver clobbers scratch registers).
fn riscv64_every_path() {
    let arch = RISCV64;
    let dir = workdir("riscv64-trace-regs");
    let lib = runtime_lib(arch, Lib::Static);
    let shared = runtime_lib(arch, Lib::Shared);
    let libdir = shared.parent().unwrap();
    let st = riscv64_exit_harness(
        &dir,
        "regs-exit-static",
        &[lib.as_os_str(), OsStr::new("-ldl")],
    );
    let l = format!("-L{}", libdir.display());
    let dy = riscv64_exit_harness(
        &dir,
        "regs-exit-dynamic",
        &[
            OsStr::new(&l),
            OsStr::new("-linstrfn"),
            OsStr::new("-Wl,-z,now"),
        ],
    );
    let ld_path = libdir.display().to_string();
    // Calls per kind (riscv64_exit.c): 2005 kind 0, 302 kind 1, 21 kind 2.
    let (k0, k1, k2) = (2005, 302, 21);
    for exe in [&st, &dy] {
        // Chunks opened by an exit, over the 4 KiB chunk runs without and with `shift`.
        let mut opened = 0;
        for (extra, shift) in [
            (&[][..], false),
            (&[("INSTRFN_BUFSIZE", "4096")][..], false),
            (&[("INSTRFN_BUFSIZE", "4096")][..], true),
            // (Without call words every exit reserves its event: with main's
            // entry shifting them by one, exits then meet full chunks, where the fast ones
            // made call words.)
            (
                &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_CALL_WORDS", "off")][..],
                true,
            ),
            (&[("INSTRFN_MAX_DEPTH", "1")][..], false),
            (&[("INSTRFN_MIN_DURATION", "1s")][..], false),
        ] {
            let mut env = vec![("LD_LIBRARY_PATH", ld_path.as_str())];
            env.extend_from_slice(extra);
            let context = format!("{} {extra:?} shift {shift}", exe.display());
            let args: &[&str] = if shift { &["all", "shift"] } else { &["all"] };
            let (out, tdir) = run_traced(arch, exe, args, Runtime::Static, &env, &dir);
            assert_eq!(
                stdout_of(&out).trim(),
                format!("ok {} {k0} {k1} {k2}", k0 + k1 + k2),
                "{context}: {}",
                stderr_of(&out)
            );
            let p = one_process(arch, &tdir, &context);
            let mut counts = BTreeMap::new();
            for events in p.threads.values() {
                for e in events {
                    *counts.entry((e.kind.clone(), e.name.clone())).or_insert(0) += 1;
                }
            }
            if extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION") {
                // Every call is short: the exit trampoline takes the callee's entry back
                // (.Lexit_short, with the registers as they must be), counted; the callee's
                // calls recorded are those whose entry was not the newest event any more (the
                // first of a chunk). The skipper's exits take the slow path: all recorded.
                let key = |k: &str| (k.to_string(), "instrfn_exit_callee".to_string());
                let recorded = counts.remove(&key("entry")).unwrap_or(0);
                assert_eq!(
                    counts.remove(&key("exit")).unwrap_or(0),
                    recorded,
                    "{context}"
                );
                let dropped = meta_dropped(&tdir) as usize;
                assert!(dropped > k0 / 2, "{context}: {dropped} dropped");
                assert_eq!(dropped + recorded, k0, "{context}: {dropped} dropped");
            }
            let depth1 = extra.iter().any(|(k, _)| *k == "INSTRFN_MAX_DEPTH");
            let inner = if depth1 {
                vec![("entry-no-exit", "instrfn_exit_inner", k1)]
            } else {
                vec![
                    ("entry", "instrfn_exit_inner", k1),
                    ("unwound", "instrfn_exit_inner", k1),
                ]
            };
            let mut want: Vec<(&str, &str, usize)> = vec![
                ("entry", "instrfn_exit_skipper", k1),
                ("exit", "instrfn_exit_skipper", k1),
                ("entry-no-exit", "instrfn_exit_noslot", k2),
            ];
            want.extend(inner);
            if shift {
                want.push(("entry", "main", 1));
            }
            if !extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION") {
                want.push(("entry", "instrfn_exit_callee", k0));
                want.push(("exit", "instrfn_exit_callee", k0));
            }
            let want: BTreeMap<(String, String), usize> = want
                .into_iter()
                .map(|(k, n, c)| ((k.to_string(), n.to_string()), c))
                .collect();
            assert_eq!(counts, want, "{context}");
            if extra.iter().any(|(k, _)| *k == "INSTRFN_BUFSIZE") {
                opened += chunks_opened_by_an_exit(&tdir);
            }
        }
        assert!(
            opened >= 5,
            "{}: {opened} chunks opened by an exit",
            exe.display()
        );
    }
}

/// A test that cannot fail proves nothing: the exit harness, linked against a fake `_mcount`
/// that replaces instrfn_exit_callee's return address (at 24(sp)) with an exit trampoline that
/// clobbers one register, must name it: a1 (#11), the upper half of fa1 (#43: a save with
/// fsw/flw NaN-boxes what it reloads), s11 (#27), fs0 (#40) and fcsr (#64).
fn riscv64_harness_catches_a_clobbering_exit() {
    let dir = workdir("riscv64-trace-regs-negative");
    for (index, what, clobber) in [
        (11, "a1", "li a1, 0"),
        (
            43,
            "fa1 upper half",
            "addi sp, sp, -16\n fsw fa1, 0(sp)\n flw fa1, 0(sp)\n addi sp, sp, 16",
        ),
        (27, "s11", "li s11, 0"),
        (40, "fs0", "fmv.d.x fs0, zero"),
        (64, "fcsr", "csrw fcsr, zero"),
    ] {
        let fake = format!(
            ".globl _mcount\n\
             _mcount:\n addi sp, sp, -16\n sd t0, 0(sp)\n sd t1, 8(sp)\n\
             ld t0, 16+24(sp)\n lla t1, fake_saved\n sd t0, 0(t1)\n\
             lla t0, fake_exit\n sd t0, 16+24(sp)\n\
             ld t0, 0(sp)\n ld t1, 8(sp)\n addi sp, sp, 16\n ret\n\
             fake_exit:\n {clobber}\n lla t0, fake_saved\n ld ra, 0(t0)\n ret\n\
             .data\nfake_saved: .quad 0\n\
             .section .note.GNU-stack,\"\",%progbits\n"
        );
        let fake_s = dir.join(format!("fake{index}.S"));
        std::fs::write(&fake_s, fake).unwrap();
        let exe = riscv64_exit_harness(
            &dir,
            &format!("regs-exit-fake{index}"),
            &[fake_s.as_os_str()],
        );
        let out = run(&mut command(RISCV64, &exe, &["0"], &[], &dir));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{what} (#{index}) passed: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains(&format!("register #{index} clobbered\n")),
            "{what} (#{index}): {stderr}"
        );
    }
}

/// The gmon register harness (tests/fixtures/regs/riscv64.S, driver.c) in trace mode: its
/// counting call follows no prologue the decoder proves (it calls a function first), so every
/// call takes the trace slow path and is an entry without exit; every register survives it.
fn slow_path_of_an_unproven_prologue(arch: Arch) {
    let dir = workdir("riscv64-trace-regs-slow");
    let driver = fixture("regs/driver.c");
    let harness = fixture("regs/riscv64.S");
    let lib = runtime_lib(arch, Lib::Static);
    let exe = cc(
        arch,
        &[
            OsStr::new("-O1"),
            driver.as_os_str(),
            harness.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ],
        &dir.join("regs-static"),
    );
    for kind in ["0", "1", "2", "3"] {
        let context = format!("kind {kind}");
        let (out, tdir) = run_traced(arch, &exe, &[kind], Runtime::Static, &[], &dir);
        assert_eq!(
            stdout_of(&out).trim(),
            "ok 10012",
            "{context}: {}",
            stderr_of(&out)
        );
        let p = one_process(arch, &tdir, &context);
        let events: Vec<&DumpEvent> = p.threads.values().flatten().collect();
        // All but the four calls with the guard held or recording stopped.
        assert_eq!(events.len(), 10_008, "{context}");
        assert!(
            events
                .iter()
                .all(|e| e.kind == "entry-no-exit" && e.name == "instrfn_regcheck"),
            "{context}"
        );
    }
}

/// s390x's exit-trampoline harness (tests/fixtures/regs/s390x_exit.S and its driver) built for
/// `march`, statically linked with the runtime, and dynamically against libinstrfn.so.
fn s390x_exit_harness(dir: &Path, march: &str) -> (PathBuf, PathBuf) {
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

/// Every register a function may return in, and every callee-saved one (v0-v31 in full),
/// through the exit trampoline's fast part (a call word, and with call words off an exit
/// event) and its slow part (a frame left behind; no room in the chunk; a full shadow stack),
/// and through the entry trampolines in trace mode, for every kind of the harness; with
/// INSTRFN_MIN_DURATION=1s the fast exits take their entries back (counted). Linked
/// statically and dynamically.
fn s390x_every_path() {
    let dir = workdir("s390x-trace-exit-regs");
    let (st, dy) = s390x_exit_harness(&dir, "z13");
    let shared = runtime_lib(S390X, Lib::Shared);
    let libdir = shared.parent().unwrap().display().to_string();
    let ld = ("LD_LIBRARY_PATH", libdir.as_str());
    for (exe, link) in [(&st, "static"), (&dy, "dynamic")] {
        for (label, env) in [
            ("default", vec![]),
            ("4 KiB chunks", vec![("INSTRFN_BUFSIZE", "4096")]),
            // (Without call words every exit reserves its event.)
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

/// The exit trampoline's slow parts pick their save method at run time: on a CPU without the
/// vector facility (qemu's `vx=off`) they save the FPRs only and execute no vector
/// instruction (qemu would raise SIGILL).
fn without_vector_facility(arch: Arch) {
    let dir = workdir("s390x-trace-exit-novx");
    let (st, _) = s390x_exit_harness(&dir, "z10");
    for kind in EXIT_KINDS {
        let trace = dir.join("trace");
        let _ = std::fs::remove_dir_all(&trace);
        let out = run_ok(
            Command::new("qemu-s390x")
                .args([
                    "-cpu",
                    "qemu,vx=off,vxeh=off,vxeh2=off",
                    "-L",
                    arch.sysroot.unwrap(),
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
fn s390x_harness_catches_a_clobbering_exit() {
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
