//! tracesig.c (tests/fixtures/c/tracesig.c): signal handlers that make traced calls between
//! any two instructions of the trampolines. Under qemu with QEMU_SINGLESTEP a signal can be
//! delivered after any instruction. The signals and min_duration features both run it.

use super::dump::{DumpProcess, assert_balanced, assert_nested, count_of, instrfn_dump};
use super::run::{command, run_within};
use super::toolchain::{Arch, Lib, runtime_lib};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One run of tracesig.c `exe` (built for `arch`) with `args`, single-stepped under qemu, which
/// then delivers a signal after any instruction (handlers trace between any two instructions
/// of the trampolines), in trace mode into a fresh `<dir>/trace` with 4 KiB chunks and `extra`
/// environment after those: status 0 within 300 s, a signal handled, one process, every
/// thread's events nested with every exit ([`assert_nested`]). Returns the signals handled,
/// the calls of work, the process and the trace directory.
pub fn tracesig_singlestep_run(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
    dir: &Path,
    context: &str,
) -> (u64, u64, DumpProcess, PathBuf) {
    let tdir = dir.join("trace");
    let _ = std::fs::remove_dir_all(&tdir);
    let t = tdir.display().to_string();
    let mut env = vec![
        ("INSTRFN_MODE", "trace"),
        ("INSTRFN_OUTPUT", t.as_str()),
        ("INSTRFN_BUFSIZE", "4096"),
    ];
    env.extend_from_slice(extra);
    let mut cmd = command(arch, exe, args, &env, dir);
    cmd.env("QEMU_SINGLESTEP", "1");
    let out = run_within(&mut cmd, 300);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{context}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (handled, calls) = tracesig_output(&stdout, context);
    assert!(handled > 0, "{context}: no signal was handled");
    let mut procs = instrfn_dump(&tdir);
    assert_eq!(procs.len(), 1, "{context}: {procs:?}");
    let p = procs.remove(0);
    for (tid, events) in &p.threads {
        assert_nested(events, &format!("{context} thread {tid}"));
    }
    (handled, calls, p, tdir)
}

/// tracesig.c's one line of output, `handled H calls C`: (signals handled, calls of work).
pub fn tracesig_output(stdout: &str, context: &str) -> (u64, u64) {
    let words: Vec<&str> = stdout.split_whitespace().collect();
    match words[..] {
        ["handled", h, "calls", c] => (h.parse().unwrap(), c.parse().unwrap()),
        _ => panic!("{context}: {stdout}"),
    }
}

/// Checks the events of a tracesig.c run that recorded every call (`counts` from
/// [`assert_balanced`]; `handled` signals, `calls` calls of work): work, on_signal, handler_fn
/// and leaf (twice per work, 100 times per handler) have exactly one entry and one exit a call.
pub fn assert_tracesig_counts(
    counts: &BTreeMap<(String, String), u64>,
    handled: u64,
    calls: u64,
    context: &str,
) {
    for (f, n) in [
        ("work", calls),
        ("on_signal", handled),
        ("handler_fn", handled),
        ("leaf", 2 * calls + 100 * handled),
    ] {
        assert_eq!(count_of(counts, "entry", f), n, "{context}: {f}");
        assert_eq!(count_of(counts, "exit", f), n, "{context}: {f}");
    }
}

/// Signal handlers that trace between any two instructions of the trampolines: tracesig.c
/// `exe` (built for `arch`) single-stepped under qemu, which delivers a signal after any
/// instruction, with 4 KiB chunks and libinstrfn.so preloaded when `preload`, for three rounds
/// `3000`, the last `3000 <walk>` (tracesig.c's stack-walking argument: every handler walks the
/// stack with backtrace() first). Every round: what [`tracesig_singlestep_run`] checks (status
/// 0, a signal handled, one process, nested with every exit), nothing lost (in the dump or in
/// any meta file), and the exact counts of [`assert_tracesig_counts`]. `check(trace, context)`
/// then checks the round's trace directory for what the caller checks in every trace of its
/// own.
pub fn tracesig_singlestep_rounds(
    arch: Arch,
    exe: &Path,
    preload: bool,
    dir: &Path,
    name: &str,
    walk: &str,
    check: impl Fn(&Path, &str),
) {
    let lib = runtime_lib(arch, Lib::Shared).display().to_string();
    for round in 0..3 {
        let walking = round == 2;
        let context = format!(
            "{name} round {round}{}",
            if walking { " backtrace" } else { "" }
        );
        let args: &[&str] = if walking { &["3000", walk] } else { &["3000"] };
        let env: &[(&str, &str)] = if preload {
            &[("LD_PRELOAD", lib.as_str())]
        } else {
            &[]
        };
        let (handled, calls, p, tdir) =
            tracesig_singlestep_run(arch, exe, args, env, dir, &context);
        assert_eq!(p.lost, 0, "{context}: events lost");
        for meta in std::fs::read_dir(&tdir).unwrap() {
            let path = meta.unwrap().path();
            if path.extension().is_some_and(|e| e == "meta") {
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(
                    !text.lines().any(|l| l.starts_with("lost ")),
                    "{context}: events lost:\n{text}"
                );
            }
        }
        let counts = assert_balanced(&p, &context);
        assert_tracesig_counts(&counts, handled, calls, &context);
        check(&tdir, &context);
    }
}
