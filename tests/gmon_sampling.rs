//! gmon mode's pc histogram (SIGPROF sampling): samples land where the CPU time went and
//! gprof's seconds follow the CPU time; a program with its own SIGPROF sampler keeps it; no
//! sampling still makes a file gprof reads; and samples never interrupt another thread's
//! system calls. CPU-time figures come from the kernel's tick-sampled accounting, which a
//! loaded host skews: each check says what it allows for and why.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;

feature_tests! {
    gmon_sampling:
    histogram(x86_64, aarch64, riscv64, s390x),
    program_with_its_own_sigprof_is_not_broken(x86_64),
    without_sampling_gprof_still_reads_the_counts(x86_64),
    samples_never_interrupt_system_calls(x86_64),
}

/// scenarios.c `busy`: the pc histogram lands in the spinning function hot(). On x86_64 (the
/// runtime preloaded and linked) gprof's total seconds also match the user CPU time the
/// program measured with getrusage (src/sampler.rs samples user CPU time). Under emulation
/// the seconds are the emulator's: only the share is checked there.
///
/// The timer expires on the kernel's tick-sampled user time; getrusage reports the precise
/// runtime split by those samples. Unloaded they agree within a few per cent; on a loaded
/// 2-core host the ticks missed 13-25 % of the thread's time. So more samples than 1.1 times
/// the CPU time, or a hot() share below 0.9, fails at once (a wrong rate or wrong pcs: no load
/// makes them), while fewer than 0.6 times the CPU time is tried again, up to 3 runs, each
/// run's figures in the failure message.
fn histogram(arch: Arch) {
    if arch != X86_64 {
        let dir = workdir(&format!("{}-busy", arch.name));
        let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
        run_exe(arch, &exe, &["busy", "0.5"], &[], &dir);
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        let total = flat.total_seconds();
        let hot = flat.entries.get("hot").map_or(0.0, |e| e.self_seconds);
        assert!(
            total > 0.0 && hot >= 0.8 * total,
            "{}: hot {hot} of {total} s\n{}",
            arch.name,
            flat.text
        );
        return;
    }
    let preload = preload_path(arch);
    for link in [Link::Preload, Link::Static] {
        let dir = workdir(&format!("busy-{link:?}"));
        let exe = build_c(arch, &dir, "scenarios.c", &[], link);
        let env = env_for(link, &preload, &[]);
        let mut attempts = Vec::new();
        let mut sampled_enough = false;
        for attempt in 1..=3 {
            let _ = std::fs::remove_file(dir.join("gmon.out"));
            let out = run_exe(arch, &exe, &["busy", "1.5"], &env, &dir);
            let cpu = reported(&stdout_of(&out), "user");
            let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
            let total = flat.total_seconds();
            let hot = flat.entries.get("hot").map_or(0.0, |e| e.self_seconds);
            assert!(
                total <= 1.1 * cpu,
                "{link:?} run {attempt}: gprof total {total} s vs user CPU time {cpu} s\n{}",
                flat.text
            );
            assert!(
                hot >= 0.9 * total,
                "{link:?} run {attempt}: hot() has {hot} of {total} s\n{}",
                flat.text
            );
            attempts.push(format!(
                "run {attempt}: {total} s sampled, {cpu} s user CPU"
            ));
            if total >= 0.6 * cpu {
                sampled_enough = true;
                break;
            }
        }
        assert!(
            sampled_enough,
            "{link:?}: gprof's total below 0.6 times the user CPU time in every run: {attempts:?}"
        );
    }
}

/// Early: the program's sampler exists before instrfn starts: instrfn takes no samples and
/// says so. Late: the program installs it after instrfn started: its handler takes over
/// (instrfn does not fight it), instrfn's histogram stops there, and the writer says so.
/// Either way the program's handler gets its signals and every arc is there. (The program's
/// sampler is ITIMER_PROF at 100 Hz over 0.5 s of CPU time: about 50 signals, of which 10 are
/// asked; tick accounting under load misses a quarter at most.)
fn program_with_its_own_sigprof_is_not_broken(arch: Arch) {
    let dir = workdir("own-sigprof");
    build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    let src = fixture("c/own_sigprof.c");
    let lib = runtime_lib(arch, Lib::Static);
    let scenarios = dir.join("scenarios.o");
    let link = |variant: &str, defines: &[&str]| {
        let obj = dir.join(format!("own_sigprof-{variant}.o"));
        let mut args = vec![OsStr::new("-O2"), OsStr::new("-c")];
        args.extend(defines.iter().map(OsStr::new));
        args.push(src.as_os_str());
        cc(arch, &args, &obj);
        let libs = [
            scenarios.as_os_str(),
            obj.as_os_str(),
            lib.as_os_str(),
            OsStr::new("-lpthread"),
            OsStr::new("-ldl"),
        ];
        cc(arch, &libs, &dir.join(format!("scenarios-{variant}")))
    };
    let cases = [
        (
            "early",
            &["-DEARLY"][..],
            "the program has its own SIGPROF handler; gmon.out will have no pc histogram",
        ),
        (
            "late",
            &[][..],
            "the program replaced instrfn's SIGPROF handler; the pc histogram stops where it did",
        ),
    ];
    for (variant, defines, message) in cases {
        let exe = link(variant, defines);
        let out = run_exe(arch, &exe, &["own-sigprof", "0.5"], &[], &dir);
        let text = stdout_of(&out);
        assert!(
            reported(&text, "own") >= 10.0,
            "{variant}: the program's handler starved: {text}"
        );
        assert_eq!(
            stderr_of(&out).trim(),
            format!("instrfn: {message}"),
            "{variant}"
        );
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        assert_calls(
            &flat,
            &[("work_a", reported(&text, "work_a") as u64)],
            variant,
        );
        if variant == "early" {
            assert_eq!(flat.total_seconds(), 0.0, "{}", flat.text);
        }
    }
}

/// INSTRFN_HZ=0: no timer, no signal; gmon.out still carries a (one-bin, empty) histogram,
/// because gprof rejects a file without one.
fn without_sampling_gprof_still_reads_the_counts(arch: Arch) {
    let dir = workdir("no-sampling");
    let exe = build_c(arch, &dir, "threads.c", &[], Link::Static);
    run_exe(arch, &exe, &["2", "5000"], &[("INSTRFN_HZ", "0")], &dir);
    let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
    assert_calls(
        &flat,
        &[("work_a", 10_000), ("work_b", 10_000)],
        "INSTRFN_HZ=0",
    );
    assert_eq!(flat.total_seconds(), 0.0);
}

/// A thread spins under sampling while another scans 400 pipes in poll and sleeps in poll,
/// nanosleep and select (none of which SA_RESTART restarts): instrfn's per-thread user-time
/// timers signal only a thread running user code, so no call fails with EINTR, in any run.
///
/// The run shows something only with many system calls made while the spinner was sampled:
/// more than 300 calls, and a sampled time of at least a third of the program's user CPU time
/// (the spinner's, 1.5 s on an idle host: 0.5 s). A loaded host makes each 1 ms sleep longer
/// (fewer calls): such a run is tried again, up to 3 runs, each run's figures in the failure
/// message.
fn samples_never_interrupt_system_calls(arch: Arch) {
    let dir = workdir("eintr");
    let exe = build_c(arch, &dir, "scenarios.c", &[], Link::Static);
    let mut attempts = Vec::new();
    for attempt in 1..=3 {
        let _ = std::fs::remove_file(dir.join("gmon.out"));
        let out = run_exe(
            arch,
            &exe,
            &["eintr", "1.5", "1"],
            &[("INSTRFN_HZ", "10000")],
            &dir,
        );
        let text = stdout_of(&out);
        assert_eq!(reported(&text, "eintr"), 0.0, "run {attempt}: {text}");
        let calls = reported(&text, "calls");
        let user = reported(&text, "user");
        let flat = gprof_flat(arch, &exe, &dir.join("gmon.out"));
        let sampled = flat.total_seconds();
        attempts.push(format!(
            "run {attempt}: {calls} system calls, {sampled} s sampled of {user} s user CPU"
        ));
        if calls > 300.0 && sampled >= user / 3.0 && sampled > 0.0 {
            return;
        }
    }
    panic!(
        "too few system calls, or the spinning thread was not sampled, in every run: \
         {attempts:?}"
    );
}
