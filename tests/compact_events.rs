//! Compact events and call words (docs/trace-format.md, chunk versions 2 and 3): an entry or
//! exit takes 8 bytes where its function lies within reach of its chunk's code base and its
//! time within 2^30 ticks of its time base, 16 bytes (the long form) otherwise; a call that
//! records nothing inside it takes one 8-byte call word for its entry and exit. compact.c
//! makes both forms and call words in known numbers, on every architecture.

#[macro_use]
mod common;

use common::*;
use std::ffi::OsStr;
use std::path::Path;

feature_tests! {
    compact_events:
    long_form_where_it_must(x86_64, aarch64, riscv64, s390x),
}

/// The calls of each loop of compact.c.
const N: u64 = 1000;

/// tests/fixtures/c/compact.c calls functions of the executable (near: short events), of a
/// -pg library (lib_outer, lib_inner), sleeps 1 s (nap) and calls near() N times again. Every
/// call is in the trace once, balanced and named, nap's traced length is what the program
/// measured ([`assert_compact_trace`]), and the one chunk holds both forms and call words in
/// the numbers the calls make. The first loop's calls of near(), which record nothing inside
/// them, are call words (MERGE_CALL in the exit trampoline; `__cyg_profile_func_exit` for
/// -finstrument-functions code), but where a preemption made a call longer than a call word's
/// 2^12 ticks (then a short entry and a short exit).
///
/// - x86_64 (-pg, under `instrfn record`): the library's events are long (4 GiB of code base
///   reach cannot span the executable and the library), and from the end of the sleep on
///   every event is long (past the time base's reach: no call words either, as their entries
///   are long).
/// - aarch64 (-pg and -finstrument-functions, preloaded under qemu): the counter runs at
///   62.5 MHz, so 2^30 ticks of time base reach are 17 s, more than the sleep, and qemu maps
///   the library within the code base's reach: every event is short (the long form's code is
///   what entries without exit take: the pac-ret golden traces).
/// - riscv64: qemu-user runs rdtime at the host's time stamp counter rate (2^30 ticks are
///   0.44 s at 2.4 GHz), so the 2N + 2 events after the sleep are long, and the library's are
///   short (a call site's first call goes through the slow path, which writes short events
///   too where they fit).
/// - s390x (big-endian): the TOD clock's 2^30 ticks (4096 a microsecond) are 262 ms, so the
///   2N + 2 events after the sleep are long; the library's are short.
fn long_form_where_it_must(arch: Arch) {
    if arch == X86_64 {
        let dir = workdir("trace-compact");
        let lib = build_library(arch, &dir, "libwork.so", &[]);
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        let exe = build_plain(
            &dir,
            "compact.c",
            &["-pg"],
            &[lib.to_str().unwrap(), &rpath],
        );
        let (out, trace) = record_trace(&exe, &[&N.to_string()], &[], &dir);
        let c = assert_compact_trace(&trace, &stdout_of(&out), "x86_64");
        assert!(
            c.calls > N * 9 / 10 && c.calls <= N && c.long >= 4 * N + 4,
            "{c:?}"
        );
        return;
    }
    for flag in ["-pg", "-finstrument-functions"] {
        let c = compact_under_qemu(arch, flag);
        assert_eq!(c.little_endian, arch != S390X, "{flag}: {c:?}");
        let forms = match arch.name {
            "aarch64" => c.calls <= 2 * N && c.short + 2 * c.calls >= 4 * N,
            "riscv64" => c.short + 2 * c.calls >= 4 * N - 8 && c.long >= 2 * N + 2,
            _ => c.short + 2 * c.calls >= 4 * N && c.long >= 2 * N + 2,
        };
        assert!(c.calls > N * 9 / 10 && forms, "{flag}: {c:?}");
    }
}

/// Checks the trace of compact.c run with N (its stdout given): every call once, entries and
/// exits balanced and named, and nap's traced length within what the program measured: at
/// least the sleep nap() measured inside it, at most the call of nap() main measured around
/// it (both with CLOCK_MONOTONIC in the same run; the reader converts the counter to that
/// clock, allowed 1e-4 for its calibration). Returns the trace's one chunk (the trace is
/// small), whose events number 6N + 6.
fn assert_compact_trace(trace: &Path, stdout: &str, context: &str) -> RawChunk {
    let measured = |key: &str| -> f64 {
        let words: Vec<&str> = stdout.split_whitespace().collect();
        words
            .windows(2)
            .find(|w| w[0] == key)
            .and_then(|w| w[1].parse().ok())
            .unwrap_or_else(|| panic!("{context}: compact.c printed {stdout:?}"))
    };
    let (napped, called) = (measured("napped"), measured("called"));
    let p = instrfn_dump(trace).remove(0);
    let counts = assert_balanced(&p, context);
    assert_counts(
        &counts,
        &[
            ("entry", "main", 1),
            ("entry", "near", 2 * N),
            ("exit", "near", 2 * N),
            ("entry", "lib_outer", 1),
            ("exit", "lib_outer", 1),
            ("entry", "lib_inner", N),
            ("exit", "lib_inner", N),
            ("entry", "nap", 1),
            ("exit", "nap", 1),
            ("exit", "main", 1),
        ],
        context,
    );
    let events = p.threads.values().next().unwrap();
    let at = |kind: &str| {
        events
            .iter()
            .find(|e| e.kind == kind && e.name == "nap")
            .unwrap()
            .ns
    };
    let traced = at("exit") - at("entry");
    assert!(
        traced >= napped && traced <= called * (1.0 + 1e-4),
        "{context}: nap traced {traced} ns, measured {napped} ns inside it and {called} ns \
         around its call"
    );
    let chunks = raw_chunks(trace);
    assert_eq!(chunks.len(), 1, "{context}: {chunks:?}");
    let c = chunks[0];
    assert_eq!(
        c.short + c.long + 2 * c.calls,
        6 * N + 6,
        "{context}: {c:?}"
    );
    c
}

/// compact.c for `arch` (gcc -O2 `flag`: -pg or -finstrument-functions, linked with a
/// libwork.so built the same way), run with N preloaded in trace mode under qemu, checked by
/// [`assert_compact_trace`]: returns its chunk.
fn compact_under_qemu(arch: Arch, flag: &str) -> RawChunk {
    let dir = workdir(&format!("{}-trace-compact{flag}", arch.name));
    let lib_args = ["-O2", flag, "-fPIC", "-shared"].map(OsStr::new);
    let src = fixture("c/libwork.c");
    let mut args = lib_args.to_vec();
    args.push(src.as_os_str());
    let lib = cc(arch, &args, &dir.join("libwork.so"));
    let src = fixture("c/compact.c");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let exe = cc(
        arch,
        &[
            OsStr::new("-O2"),
            OsStr::new(flag),
            src.as_os_str(),
            lib.as_os_str(),
            OsStr::new(&rpath),
        ],
        &dir.join("compact"),
    );
    let trace = dir.join("trace");
    let out = run_in_trace_mode(arch, &exe, &[&N.to_string()], true, &[], &dir, &trace);
    assert_compact_trace(&trace, &stdout_of(&out), arch.name)
}
