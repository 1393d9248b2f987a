//! Crashes and kills: after a crash the profile holds exactly the calls made and the process
//! ends as it would without instrfn (same signal, same core dump, same message, Rust's stack
//! overflow report included); a traced program killed with SIGKILL leaves a trace that reads,
//! with every call that returned before the kill, timed by the counter's nominal rate when the
//! process wrote no end line.

#[macro_use]
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

feature_tests! {
    crashes:
    crashes_keep_the_profile_and_end_as_they_would(x86_64),
    rust_stack_overflow_message_and_status_unchanged(x86_64),
    trace_survives_sigkill(x86_64),
    trace_clock_without_an_end_line(s390x),
}

/// Runs `exe args` under `sh -c 'ulimit -c unlimited; exec ...'` (so a core dump is possible)
/// and returns its exit status.
fn run_crashing(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
) -> std::process::Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -c unlimited; exec \"$0\" \"$@\"")
        .arg(exe)
        .args(args)
        .current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

/// After N counted calls the program crashes: the profile holds exactly N, and the process
/// ends exactly as it does with INSTRFN_CRASH_WRITE=off (same signal, same core dump).
fn crashes_keep_the_profile_and_end_as_they_would(arch: Arch) {
    use std::os::unix::process::ExitStatusExt;
    let preload = preload_path(arch);
    const N: u64 = 4321;
    for link in [Link::Static, Link::Preload] {
        let dir = workdir(&format!("crash-{link:?}"));
        let exe = build_c(arch, &dir, "scenarios.c", &[], link);
        let kinds = [
            ("segv", libc_sig::SEGV),
            ("bus", libc_sig::BUS),
            ("ill", libc_sig::ILL),
            ("fpe", libc_sig::FPE),
            ("abort", libc_sig::ABRT),
            ("raise", libc_sig::SEGV),
            ("overflow", libc_sig::SEGV),
        ];
        for (kind, sig) in kinds {
            let context = format!("{link:?} {kind}");
            let args = ["crash", &N.to_string(), kind];
            let _ = std::fs::remove_file(dir.join("gmon.out"));
            let off = run_crashing(
                &exe,
                &args,
                &env_for(link, &preload, &[("INSTRFN_CRASH_WRITE", "off")]),
                &dir,
            );
            assert_eq!(
                off.status.signal(),
                Some(sig),
                "{context} without crash writes"
            );
            assert!(
                !dir.join("gmon.out").exists(),
                "{context}: written with INSTRFN_CRASH_WRITE=off"
            );
            let on = run_crashing(&exe, &args, &env_for(link, &preload, &[]), &dir);
            assert_eq!(
                on.status.signal(),
                off.status.signal(),
                "{context}: {}",
                stderr_of(&on)
            );
            assert_eq!(
                on.status.core_dumped(),
                off.status.core_dumped(),
                "{context}: core dump"
            );
            assert_eq!(
                stderr_of(&on),
                stderr_of(&off),
                "{context}: the program's output"
            );
            let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
            assert_calls(&flat, &[("work_a", N)], &context);
        }
        for core in std::fs::read_dir(&dir).unwrap().flatten() {
            if core.file_name().to_string_lossy().starts_with("core") {
                let _ = std::fs::remove_file(core.path());
            }
        }
    }
}

/// Signal numbers on Linux (x86_64).
mod libc_sig {
    pub const ILL: i32 = 4;
    pub const ABRT: i32 = 6;
    pub const BUS: i32 = 7;
    pub const FPE: i32 = 8;
    pub const SEGV: i32 = 11;
}

/// Rust's std (glibc) installs its stack-overflow handler only if SIGSEGV is at its default
/// when main starts, which is after instrfn started: its message and abort must survive,
/// and the profile is written too. On musl std reports nothing (a plain SIGSEGV), and
/// instrfn leaves SIGSEGV alone there: the same end, no profile.
fn rust_stack_overflow_message_and_status_unchanged(arch: Arch) {
    use std::os::unix::process::ExitStatusExt;
    for triple in ["x86_64-unknown-linux-gnu", "x86_64-unknown-linux-musl"] {
        let exe = build_instrumented_rust("rust-app", triple, "rust-app");
        let dir = workdir(&format!("rust-overflow-{triple}"));
        let args = ["overflow", "777"];
        let off = run_crashing(&exe, &args, &[("INSTRFN_CRASH_WRITE", "off")], &dir);
        let on = run_crashing(&exe, &args, &[], &dir);
        assert_eq!(on.status.signal(), off.status.signal(), "{triple}");
        assert_eq!(
            stderr_of(&on),
            stderr_of(&off).replace(&pid_of(&off), &pid_of(&on))
        );
        if triple.ends_with("gnu") {
            assert!(
                stderr_of(&on).contains("has overflowed its stack"),
                "{triple}: {}",
                stderr_of(&on)
            );
            assert_eq!(on.status.signal(), Some(libc_sig::ABRT), "{triple}");
            let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
            assert_calls(&flat, &[("rust_app::work_a", 777)], triple);
        } else {
            assert_eq!(on.status.signal(), Some(libc_sig::SEGV), "{triple}");
        }
        for core in std::fs::read_dir(&dir).unwrap().flatten() {
            if core.file_name().to_string_lossy().starts_with("core") {
                let _ = std::fs::remove_file(core.path());
            }
        }
    }
}

/// The thread id Rust prints in "thread 'main' (<tid>) has overflowed its stack", or "".
fn pid_of(out: &std::process::Output) -> String {
    let err = stderr_of(out);
    err.split_once("' (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map_or(String::new(), |(tid, _)| format!("({tid})"))
}

/// What was recorded before SIGKILL is in the trace: every call the program saw return
/// before the kill (it says so on stdout) is there, entry and exit, and the trace reads
/// (the process is marked as not ended).
fn trace_survives_sigkill(_: Arch) {
    let dir = workdir("trace-kill");
    let exe = build_pg(&dir, "calltree.c");
    let trace = dir.join("trace");
    let mut child = Command::new(instrfn_cli())
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .arg("spin")
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("done 300000\n") {
        use std::io::Read;
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "the program stopped early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    // Kill the traced program itself (instrfn record's child).
    let pid = std::fs::read_dir(&trace)
        .unwrap()
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_suffix(".1.meta")
                .map(String::from)
        })
        .unwrap();
    run_ok(Command::new("kill").args(["-KILL", &pid]));
    let status = child.wait().unwrap();
    assert!(!status.success());
    let reported: u64 = seen
        .lines()
        .filter_map(|l| l.strip_prefix("done ")?.parse().ok())
        .max()
        .unwrap();
    let procs = instrfn_dump(&trace);
    assert!(
        procs[0].header.contains("[did not exit normally]"),
        "{}",
        procs[0].header
    );
    let events = &procs[0].threads.values().next().unwrap();
    let exits = events
        .iter()
        .filter(|e| e.kind == "exit" && e.name == "a")
        .count() as u64;
    assert!(
        exits >= reported,
        "{exits} exits of a() in the trace, {reported} returned"
    );
}

/// A trace whose process never wrote its end line (killed) is timed by the counter's
/// nominal rate: for the TOD clock 4096 ticks per microsecond. The same trace read with and
/// without its end must give the same times, within 1%.
fn trace_clock_without_an_end_line(arch: Arch) {
    let dir = workdir("s390x-trace-clock");
    let flags = [&["-pg"], arch_flags(arch)].concat();
    let obj = compile(
        arch,
        Compiler::Gcc,
        &dir,
        "calltree.c",
        &flags,
        "calltree.o",
    );
    let exe = link_runtime(arch, &dir, &obj, &[], "calltree", Runtime::Static);
    let trace = dir.join("trace");
    run_in_trace_mode(arch, &exe, &["2", "200"], false, &[], &dir, &trace);
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
