//! rustc's instrumentation as it is now, with the pinned nightly (INSTRFN_NIGHTLY): the
//! `-Zinstrument-mcount` and `-Zinstrument-mcount=fentry` routes, preloaded and as a
//! dependency (glibc and musl), in gmon and trace mode; `#[instrument_fn = "off"]`; the
//! gcrt1.o rustc links with `-pg` (exactly one gmon.out, instrfn's); v0 names demangled in
//! every output. Fixture: tests/fixtures/rust-routes.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

feature_tests! {
    rust_routes:
    gmon_counts_are_exact(x86_64),
    gcrt_profile_is_instrfns(x86_64),
    trace_counts_are_exact(x86_64),
    musl_dependency_route(x86_64),
}

/// Threads and rounds per thread of every run (the fixture's arguments).
const T: u64 = 4;
const N: u64 = 20_000;

/// How the runtime comes in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    /// `LD_PRELOAD=libinstrfn.so`; the program does not link the runtime.
    Preload,
    /// `use instrfn as _;` (the fixture's `runtime` feature).
    Dependency,
}

/// The fixture built with `scripts/instrument-flags kind` for `triple`, with the runtime linked
/// in for [`Route::Dependency`]; a target directory of its own per build.
fn build(kind: &str, route: Route, triple: &str) -> PathBuf {
    let flags = instrument_flags(kind);
    let target_dir = root().join(format!("target/instrfn-fixtures-routes-{kind}-{route:?}"));
    let mut cmd = Command::new("cargo");
    cmd.arg(format!("+{}", nightly()))
        .args(["build", "--release", "--quiet", "--target", triple])
        .arg("--manifest-path")
        .arg(fixture("rust-routes/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", &flags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR");
    if route == Route::Dependency {
        cmd.args(["--features", "runtime"]);
    }
    run_ok(&mut cmd);
    target_dir.join(triple).join("release/rust-routes")
}

/// The frameworks the pinned nightly has on x86_64: both, or the suite fails (it was tested
/// with nightly-2026-10-30, which has fentry).
fn kinds() -> [&'static str; 2] {
    assert!(
        !instrument_flags("fentry").is_empty(),
        "{} has no -Zinstrument-mcount=fentry: the test command pins nightly-2026-10-30",
        nightly()
    );
    ["mcount", "fentry"]
}

/// The gmon.out files (any name gmon.out*) in `dir`.
fn profiles_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gmon.out"))
        .collect();
    names.sort();
    names
}

/// A fresh work directory for one run.
fn fresh(name: &str) -> PathBuf {
    let dir = workdir(name);
    for p in profiles_in(&dir) {
        std::fs::remove_file(dir.join(p)).unwrap();
    }
    dir
}

/// The preloaded runtime's environment for `route`.
fn env(route: Route) -> Vec<(&'static str, String)> {
    match route {
        Route::Preload => vec![(
            "LD_PRELOAD",
            runtime_lib(X86_64, Lib::Shared).display().to_string(),
        )],
        Route::Dependency => Vec::new(),
    }
}

fn run_fixture(exe: &Path, env: &[(&str, String)], dir: &Path) -> String {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_exe(X86_64, exe, &[&T.to_string(), &N.to_string()], &env, dir);
    let text = stdout_of(&out);
    assert!(text.starts_with("checksum "), "{text}");
    text
}

/// The fixture's counts by construction: per thread and round, `loud` calls `leaf` 3 times
/// and `quiet` (not instrumented) 5 times.
fn assert_fixture_counts(flat: &Flat, context: &str) {
    assert_calls(
        flat,
        &[
            ("rust_routes::leaf", 8 * T * N),
            ("rust_routes::loud", T * N),
            ("rust_routes::round", T * N),
            ("rust_routes::worker", T),
        ],
        context,
    );
    assert!(
        flat.calls("rust_routes::quiet") == 0,
        "{context}: `quiet` is #[instrument_fn = \"off\"] and has no counting call\n{}",
        flat.text
    );
}

/// gmon mode, every framework and route: gprof's counts are exact, with v0 names demangled.
fn gmon_counts_are_exact(_arch: Arch) {
    for kind in kinds() {
        for route in [Route::Preload, Route::Dependency] {
            let context = format!("{kind} {route:?}");
            let exe = build(kind, route, X86_64.triple);
            let dir = fresh(&format!("routes-gmon-{kind}-{route:?}"));
            run_fixture(&exe, &env(route), &dir);
            assert_eq!(profiles_in(&dir), ["gmon.out"], "{context}");
            let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
            assert_fixture_counts(&flat, &context);
            // The arcs into leaf come from loud and from quiet: its calls' return addresses lie
            // in quiet, which gprof names as the caller, counting call or not.
            let arcs = gprof_arcs(X86_64, &exe, &dir.join("gmon.out"));
            let expected = [
                ("rust_routes::loud", "rust_routes::leaf", 3 * T * N),
                ("rust_routes::quiet", "rust_routes::leaf", 5 * T * N),
            ];
            assert_arcs(&arcs, &expected, &context);
        }
    }
}

/// rustc links gcrt1.o for -Zinstrument-mcount: glibc's profiler runs in every such program
/// (without instrfn it writes its own, lossy gmon.out at 100 Hz). With instrfn, preloaded or
/// linked, the program writes exactly one profile, instrfn's: exact counts under threads, its
/// histogram at INSTRFN_HZ (1000 Hz by default).
fn gcrt_profile_is_instrfns(_arch: Arch) {
    let exe = build("mcount", Route::Preload, X86_64.triple);
    let nm = run_ok(Command::new("nm").arg(&exe));
    let symbols = stdout_of(&nm);
    for gcrt in [" U __monstartup", " U _mcleanup", " T __gmon_start__"] {
        assert!(
            symbols
                .lines()
                .any(|l| l.ends_with(&gcrt[3..]) && l.contains(&gcrt[..3])),
            "rustc did not link gcrt1.o ({gcrt} missing)"
        );
    }
    // Without instrfn: glibc's own profile, 100 Hz.
    let dir = fresh("routes-gcrt-glibc");
    run_fixture(&exe, &[], &dir);
    assert_eq!(profiles_in(&dir), ["gmon.out"]);
    let glibc = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
    assert!(
        glibc.text.contains("Each sample counts as 0.01 seconds"),
        "{}",
        glibc.text
    );
    // With instrfn, both routes: one profile, instrfn's.
    for route in [Route::Preload, Route::Dependency] {
        let exe = build("mcount", route, X86_64.triple);
        let dir = fresh(&format!("routes-gcrt-{route:?}"));
        run_fixture(&exe, &env(route), &dir);
        assert_eq!(profiles_in(&dir), ["gmon.out"], "{route:?}");
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        assert!(
            flat.text.contains("Each sample counts as 0.001 seconds"),
            "{route:?}: not instrfn's profile\n{}",
            flat.text
        );
        assert_fixture_counts(&flat, &format!("gcrt {route:?}"));
    }
}

/// trace mode, every framework and route: exact calls per function; `quiet` leaves no events
/// and its calls of `leaf` nest in `round`; names demangled (v0) in dump, report and export.
fn trace_counts_are_exact(_arch: Arch) {
    for kind in kinds() {
        for route in [Route::Preload, Route::Dependency] {
            let context = format!("trace {kind} {route:?}");
            let exe = build(kind, route, X86_64.triple);
            let dir = workdir(&format!("routes-trace-{kind}-{route:?}"));
            let trace = dir.join("trace");
            let _ = std::fs::remove_dir_all(&trace);
            let args = [T.to_string(), N.to_string()];
            let out = match route {
                Route::Preload => {
                    let out = run_ok(
                        Command::new(instrfn_cli())
                            .arg("record")
                            .arg("-o")
                            .arg(&trace)
                            .arg("--")
                            .arg(&exe)
                            .args(&args)
                            .current_dir(&dir),
                    );
                    stdout_of(&out)
                }
                Route::Dependency => {
                    let out = run_ok(
                        Command::new(&exe)
                            .args(&args)
                            .env("INSTRFN_MODE", "trace")
                            .env("INSTRFN_OUTPUT", &trace)
                            .current_dir(&dir),
                    );
                    stdout_of(&out)
                }
            };
            assert!(out.starts_with("checksum "), "{context}: {out}");
            let procs = instrfn_dump_with(&trace, &[]);
            assert_eq!(procs.len(), 1, "{context}");
            let p = &procs[0];
            assert_eq!(p.lost, 0, "{context}");
            let counts = assert_balanced(p, &context);
            let entries = |f: &str| {
                counts
                    .get(&("entry".to_string(), format!("rust_routes::{f}")))
                    .copied()
                    .unwrap_or(0)
            };
            assert_eq!(entries("leaf"), 8 * T * N, "{context}");
            assert_eq!(entries("loud"), T * N, "{context}");
            assert_eq!(entries("round"), T * N, "{context}");
            assert_eq!(entries("quiet"), 0, "{context}: quiet is not instrumented");
            // leaf's callers: loud (3 per round) and, with quiet invisible, round itself.
            let mut parents: BTreeMap<String, u64> = BTreeMap::new();
            for events in p.threads.values() {
                let mut open: Vec<&str> = Vec::new();
                for e in events {
                    match e.kind.as_str() {
                        "entry" => {
                            if e.name == "rust_routes::leaf" {
                                let parent = open.last().copied().unwrap_or("-");
                                *parents.entry(parent.to_string()).or_default() += 1;
                            }
                            open.push(&e.name);
                        }
                        "exit" | "unwound" => {
                            open.pop();
                        }
                        _ => {}
                    }
                }
            }
            assert_eq!(
                parents,
                BTreeMap::from([
                    ("rust_routes::loud".to_string(), 3 * T * N),
                    ("rust_routes::round".to_string(), 5 * T * N),
                ]),
                "{context}"
            );
            // No mangled name reaches any output.
            let report = run_ok(Command::new(instrfn_cli()).arg("report").arg(&trace));
            let folded = run_ok(
                Command::new(instrfn_cli())
                    .args(["export", "--format", "folded"])
                    .arg(&trace),
            );
            let dump = run_ok(Command::new(instrfn_cli()).arg("dump").arg(&trace));
            for (what, text) in [
                ("report", stdout_of(&report)),
                ("export folded", stdout_of(&folded)),
                ("dump", stdout_of(&dump)),
            ] {
                assert!(
                    text.contains("rust_routes::leaf") && !text.contains("_RNv"),
                    "{context}: {what} shows mangled or no names:\n{}",
                    &text[..text.len().min(3000)]
                );
            }
            assert!(
                !stdout_of(&report).contains("rust_routes::quiet"),
                "{context}: quiet's time is its caller's self time"
            );
        }
    }
}

/// The dependency route on musl (static: nothing to preload), every framework: exact counts
/// in gmon mode.
fn musl_dependency_route(_arch: Arch) {
    for kind in kinds() {
        let exe = build(kind, Route::Dependency, X86_64_MUSL.triple);
        let dir = fresh(&format!("routes-musl-{kind}"));
        run_fixture(&exe, &[], &dir);
        assert_eq!(profiles_in(&dir), ["gmon.out"], "musl {kind}");
        let flat = gprof_flat(X86_64, &exe, &dir.join("gmon.out"));
        assert_fixture_counts(&flat, &format!("musl {kind}"));
    }
}
