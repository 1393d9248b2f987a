//! An independent reference for call counts: valgrind's callgrind, in the same run
//! (scripts/callgrind-check.py: callgrind with `--smc-check=all` follows the code instrfn
//! patches while the program runs), or for mcount/fentry traces in a run of its own
//! (`--separate`). Every function instrfn records must have callgrind's exact count, and the
//! program's output must be unchanged.

#[macro_use]
mod common;

use common::*;
use std::process::Command;

feature_tests! {
    callgrind:
    natively_patched_rust_counts_equal_callgrinds(x86_64),
    finstrument_functions_counts_equal_callgrinds(x86_64),
    mcount_trace_rust_counts_equal_callgrinds(x86_64),
    mcount_and_fentry_trace_counts_equal_callgrinds(x86_64),
}

/// Runs scripts/callgrind-check.py on `cmd`; returns its summary line after checking it passed.
fn callgrind_check(cmd: &[&str], extra: &[&str]) -> String {
    require_tool("valgrind");
    require_tool("python3");
    runtime_lib(X86_64, Lib::Shared);
    let out = run(Command::new("python3")
        .arg(root().join("scripts/callgrind-check.py"))
        .arg("--instrfn")
        .arg(instrfn_cli())
        .arg("--lib")
        .arg(runtime_lib(X86_64, Lib::Shared))
        .args(extra)
        .arg("--")
        .args(cmd));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "callgrind-check failed ({:?}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// "callgrind-check: N of M functions …": (N, M).
fn matched(summary: &str) -> (u64, u64) {
    let words: Vec<&str> = summary.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "of").expect(summary);
    (
        words[at - 1].parse().unwrap(),
        words[at + 1].parse().unwrap(),
    )
}

/// xray-app (`-Zinstrument-xray=always`, sleds patched natively) at 4 threads: every function
/// instrfn records has callgrind's count in the same run (main, worker, work_a, work_b and the
/// std generics instantiated in the crate).
fn natively_patched_rust_counts_equal_callgrinds(_: Arch) {
    let bin = build_xray_rust("xray-app", X86_64.triple, "xray-app", "always", "");
    let summary = callgrind_check(&[bin.to_str().unwrap(), "4", "2000"], &[]);
    let (same, all) = matched(&summary);
    // main, worker, work_a, work_b and the std generics instantiated in the crate.
    assert!(same == all && all >= 4, "{summary}");
}

/// calltree.c built with clang -finstrument-functions-after-inlining at 4 threads: main, run,
/// a, b and c have callgrind's counts in the same run.
fn finstrument_functions_counts_equal_callgrinds(_: Arch) {
    require_tool("clang");
    let dir = workdir("callgrind-cyg");
    let exe = dir.join("calltree");
    run_ok(
        Command::new("clang")
            .args([
                "-O1",
                "-Wno-unknown-attributes",
                "-finstrument-functions-after-inlining",
            ])
            .arg(fixture("c/calltree.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-lpthread"),
    );
    let summary = callgrind_check(&[exe.to_str().unwrap(), "4", "3000"], &[]);
    // main, run, a, b, c.
    assert_eq!(matched(&summary), (5, 5), "{summary}");
}

/// mcount trace mode (preloaded) on a Rust program built with `-Zinstrument-mcount` and no
/// instrfn dependency (xray-app, built for mcount here): callgrind counts a run without instrfn
/// (`--separate`: the exit trampoline's jumps back into callers would confuse its call
/// tracking), instrfn a run of its own; the program makes the same calls in every run, std's
/// generics instantiated in the crate and the frames a caught panic unwinds included.
fn mcount_trace_rust_counts_equal_callgrinds(_: Arch) {
    let flags = instrument_flags("mcount");
    let bin = build_rust_fixture("xray-app", X86_64.triple, "xray-app", &flags, "-mcount");
    let bin = bin.to_str().unwrap();
    for args in [&["4", "2000"][..], &["panic", "20", "6"]] {
        let mut cmd = vec![bin];
        cmd.extend_from_slice(args);
        let summary = callgrind_check(&cmd, &["--separate"]);
        let (same, all) = matched(&summary);
        // main, worker, work_a, work_b (or dive and after) and std's generics.
        assert!(same == all && all >= 4, "{args:?}: {summary}");
    }
}

/// gcc `-pg` and `-pg -mfentry` code in trace mode (calltree.c, 4 threads, linked without gcrt:
/// callgrind's run calls glibc's mcount and __fentry__, which do nothing), as above.
fn mcount_and_fentry_trace_counts_equal_callgrinds(_: Arch) {
    let dir = workdir("callgrind-pg");
    for (name, flags) in [("pg", &["-pg"][..]), ("fentry", &["-pg", "-mfentry"])] {
        let obj = dir.join(format!("calltree-{name}.o"));
        let exe = dir.join(format!("calltree-{name}"));
        run_ok(
            Command::new("gcc")
                .args(["-O1", "-c"])
                .args(flags)
                .arg(fixture("c/calltree.c"))
                .arg("-o")
                .arg(&obj),
        );
        run_ok(
            Command::new("gcc")
                .arg(&obj)
                .arg("-o")
                .arg(&exe)
                .arg("-lpthread"),
        );
        let summary = callgrind_check(&[exe.to_str().unwrap(), "4", "3000"], &["--separate"]);
        // main, run, a, b, c.
        assert_eq!(matched(&summary), (5, 5), "{name}: {summary}");
    }
}
