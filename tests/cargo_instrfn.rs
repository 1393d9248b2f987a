//! `cargo instrfn` end to end, on the fixture package tests/fixtures/cargo-app (a path
//! dependency, a build script, a known number of calls per function): each framework the
//! nightly has, in trace and gmon mode, read by `instrfn report`, gprof, a JSON parser; the
//! program's output and exit status; the build reused on a second run; and each refusal as
//! one line.
//!
//! The two commands come from `cargo build --release` (target/release/cargo-instrfn and
//! target/release/instrfn, with libinstrfn.so). The nightly is $INSTRFN_NIGHTLY, else
//! `nightly`, as for the rest of the suite. The helpers are this file's own.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture() -> PathBuf {
    root().join("tests/fixtures/cargo-app")
}

/// The nightly the suite uses.
fn nightly() -> String {
    std::env::var("INSTRFN_NIGHTLY")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "nightly".to_string())
}

/// `rustc +NIGHTLY -vV` field `key` (host, commit-date).
fn rustc_field(key: &str) -> String {
    let out = Command::new("rustc")
        .arg(format!("+{}", nightly()))
        .arg("-vV")
        .output()
        .expect("rustc runs");
    assert!(out.status.success(), "rustc +{} -vV failed", nightly());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")).map(String::from))
        .unwrap_or_else(|| panic!("rustc -vV names no {key}"))
}

/// Whether this nightly must have fentry: nightlies from 2026-07-01 on (their rustc's commit
/// date is the day before). An older nightly must refuse --fentry in one line.
fn fentry_expected() -> bool {
    rustc_field("commit-date").as_str() >= "2026-06-30"
}

/// A command built by `cargo build --release`, checked against the sources its dep-info file
/// lists.
fn built(name: &str) -> PathBuf {
    let exe = root().join("target/release").join(name);
    assert!(
        exe.is_file(),
        "{} is missing: run `cargo build --release` first (scripts/test.sh does)",
        exe.display()
    );
    let built_at = std::fs::metadata(&exe).unwrap().modified().unwrap();
    let d = std::fs::read_to_string(exe.with_extension("d")).unwrap_or_default();
    let deps = d
        .lines()
        .next()
        .and_then(|l| l.split_once(": "))
        .map(|x| x.1);
    let mut paths = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.unwrap_or("").chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ' ' => paths.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    paths.push(cur);
    for p in paths.iter().filter(|p| !p.is_empty()) {
        if let Ok(m) = std::fs::metadata(p) {
            assert!(
                m.modified().unwrap() <= built_at,
                "{} is older than {p}: run `cargo build --release`",
                exe.display()
            );
        }
    }
    exe
}

/// A fresh directory for one test's outputs.
fn workdir(name: &str) -> PathBuf {
    let dir = root().join("target/instrfn-tests/cargo-instrfn").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The target directory of the fixture's builds (`cargo instrfn` builds into its `instrfn/`).
/// Tests that build with other settings (features, profile) get one of their own, so that a
/// build never replaces another test's.
fn target_dir(tag: &str) -> PathBuf {
    root()
        .join("target/instrfn-tests/cargo-instrfn-target")
        .join(tag)
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn context(&self) -> String {
        format!(
            "status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// `cargo-instrfn instrfn ARGS` (as cargo runs it) in `cwd`, with the fixture's builds in
/// `target`, the suite's nightly, and none of the caller's flags or runtime settings.
fn cargo_instrfn_in(cwd: &Path, target: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    built("instrfn");
    let mut cmd = Command::new(built("cargo-instrfn"));
    cmd.arg("instrfn")
        .args(args)
        .current_dir(cwd)
        .env("CARGO_TARGET_DIR", target)
        .env("INSTRFN_NIGHTLY", nightly())
        .env("RUSTUP_AUTO_INSTALL", "0");
    for k in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "RUSTUP_TOOLCHAIN_SOURCE",
        "CARGO_BUILD_TARGET",
        "CARGO_PROFILE_RELEASE_DEBUG",
        "LD_PRELOAD",
        "GMON_OUT_PREFIX",
        "INSTRFN_MODE",
        "INSTRFN_OUTPUT",
        "INSTRFN_FILTER",
        "INSTRFN_START",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("cargo-instrfn runs");
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `cargo instrfn ARGS` in the fixture, with the shared target directory.
fn cargo_instrfn(args: &[&str]) -> Run {
    cargo_instrfn_in(&fixture(), &target_dir("shared"), args, &[])
}

/// `instrfn report`'s rows: function name -> calls.
fn report_calls(stdout: &str) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in stdout.lines() {
        if line.trim_start().starts_with("calls ") {
            in_table = true;
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // calls, total, self, self%, min, median, p99, max (with units), then the name.
        if in_table && words.len() > 14 {
            if let Ok(calls) = words[0].parse::<u64>() {
                rows.insert(words[14..].join(" "), calls);
            }
        } else if in_table {
            in_table = false;
        }
    }
    rows
}

/// The calls the fixture makes with `cargo-app N`, by construction.
fn expected_calls(n: u64) -> [(&'static str, u64); 7] {
    [
        ("cargo_app::main", 1),
        ("cargo_app::run", 1),
        ("cargo_app::work", n),
        ("counter::step", 2 * n),
        ("<counter::Acc<u32>>::add", n),
        ("<counter::Acc<u32>>::new", 1),
        ("<counter::Acc<u32>>::total", 1),
    ]
}

fn assert_calls(got: &BTreeMap<String, u64>, n: u64, context: &str) {
    for (name, calls) in expected_calls(n) {
        assert_eq!(
            got.get(name).copied(),
            Some(calls),
            "{name}: calls\n{context}"
        );
    }
}

/// The executable cargo instrfn built with framework `label` in `target`.
fn artifact(target: &Path, label: &str, bin: &str) -> PathBuf {
    target
        .join("instrfn")
        .join(label)
        .join(rustc_field("host"))
        .join("release")
        .join(bin)
}

/// The fixture run directly, without instrfn (glibc's own profiler writes a gmon.out into
/// `dir`): its stdout and status.
fn direct(exe: &Path, args: &[&str], dir: &Path) -> (String, ExitStatus) {
    let out = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the fixture runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status,
    )
}

/// Whether `file` holds `name` anywhere (a symbol's name, a section's name).
fn mentions(file: &Path, name: &str) -> bool {
    let bytes = std::fs::read(file).unwrap();
    bytes.windows(name.len()).any(|w| w == name.as_bytes())
}

/// The build scripts built into `target` with framework `label`: never instrumented (the
/// build script checks itself too).
fn assert_build_scripts_plain(target: &Path, label: &str) {
    let build = target.join("instrfn").join(label).join("release/build");
    let mut scripts = Vec::new();
    let mut todo = vec![build.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                todo.push(path);
            } else if name.replace('-', "_").starts_with("build_script_build")
                && std::fs::read(&path).is_ok_and(|b| b.starts_with(b"\x7fELF"))
            {
                scripts.push(path);
            }
        }
    }
    assert!(
        !scripts.is_empty(),
        "no build script under {}",
        build.display()
    );
    for s in scripts {
        for name in ["mcount", "__fentry__", "xray_instr_map"] {
            assert!(!mentions(&s, name), "{} references {name}", s.display());
        }
    }
}

/// Trace mode with `flag` (framework `label`, referencing `marker`): exact calls in the
/// report, the program's output and exit status unchanged.
fn trace_mode(flag: &str, label: &str, marker: &str) {
    let dir = workdir(&format!("trace-{label}"));
    let trace = dir.join("trace");
    let args = ["1000", "--exit", "3"];
    let mut cli = vec![flag, "-o", trace.to_str().unwrap(), "--"];
    cli.extend(args);
    let r = cargo_instrfn(&cli);
    assert_eq!(r.status.code(), Some(3), "{}", r.context());
    assert_calls(&report_calls(&r.stdout), 1000, &r.context());
    let exe = artifact(&target_dir("shared"), label, "cargo-app");
    let (stdout, status) = direct(&exe, &args, &dir);
    assert_eq!(status.code(), Some(3));
    assert!(
        r.stdout.starts_with(&stdout) && stdout.starts_with("cargo-app: n=1000 "),
        "the program's output changed: {stdout:?}\n{}",
        r.context()
    );
    assert!(mentions(&exe, marker), "{} has no {marker}", exe.display());
    assert_build_scripts_plain(&target_dir("shared"), label);
    assert!(
        trace.read_dir().unwrap().count() > 0,
        "no trace in {}",
        trace.display()
    );
}

#[test]
fn trace_mode_mcount() {
    trace_mode("--mcount", "mcount", "mcount");
}

#[test]
fn trace_mode_xray() {
    trace_mode("--xray", "xray-always", "xray_instr_map");
}

/// fentry: counted exactly on a nightly that has it (the default framework there); refused in
/// one line on an older one, where mcount is the default.
#[test]
fn trace_mode_fentry() {
    if !fentry_expected() {
        let r = cargo_instrfn(&["--fentry"]);
        assert_one_line_refusal(&r, "2026-07-01");
        let p = cargo_instrfn(&["--print-flags"]);
        assert_eq!(p.stdout.trim(), "-Zinstrument-mcount", "{}", p.context());
        return;
    }
    trace_mode("--fentry", "fentry", "__fentry__");
    let p = cargo_instrfn(&["--print-flags"]);
    assert!(p.stdout.contains("fentry"), "default: {}", p.context());
}

/// gprof's flat profile: function name -> calls.
fn gprof_calls(stdout: &str) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    for line in stdout.lines() {
        if line.trim().is_empty() || line.contains("Call graph") {
            if !rows.is_empty() {
                break;
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // %time, cumulative, self seconds, calls, self/call, total/call, name
        if words.len() > 6
            && words[0].parse::<f64>().is_ok()
            && let Ok(calls) = words[3].parse::<u64>()
        {
            rows.insert(words[6..].join(" "), calls);
        }
    }
    rows
}

/// gmon mode with `flag`: gprof's counts exact, one arc checked in its call graph.
fn gmon_mode(flag: &str, label: &str) {
    let dir = workdir(&format!("gmon-{label}"));
    let out = dir.join("gmon");
    let r = cargo_instrfn(&["--gmon", flag, "-o", out.to_str().unwrap(), "--", "500"]);
    assert!(r.status.success(), "{}", r.context());
    assert!(r.stdout.starts_with("cargo-app: n=500 "), "{}", r.context());
    assert_calls(&gprof_calls(&r.stdout), 500, &r.context());
    // The arc work -> step, as the call graph's parent line of step.
    let graph = &r.stdout[r.stdout.find("Call graph").expect("a call graph")..];
    let lines: Vec<&str> = graph.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with('[') && l.contains(" counter::step ["))
        .unwrap_or_else(|| panic!("no entry for counter::step\n{}", r.context()));
    let parent: Vec<&str> = lines[at - 1].split_whitespace().collect();
    assert!(
        parent.contains(&"1000/1000") && parent.contains(&"cargo_app::work"),
        "arc work -> step: {:?}\n{}",
        lines[at - 1],
        r.context()
    );
}

#[test]
fn gmon_mode_mcount() {
    gmon_mode("--mcount", "mcount");
}

#[test]
fn gmon_mode_fentry() {
    if fentry_expected() {
        gmon_mode("--fentry", "fentry");
    } else {
        assert_one_line_refusal(&cargo_instrfn(&["--gmon", "--fentry"]), "2026-07-01");
    }
}

/// --svg and --chrome write files the consumers read: a JSON parser finds a complete event per
/// call of `work`, and the SVG draws it.
#[test]
fn svg_and_chrome_files() {
    let dir = workdir("files");
    let (svg, chrome) = (dir.join("flame.svg"), dir.join("trace.json"));
    let r = cargo_instrfn(&[
        "--svg",
        svg.to_str().unwrap(),
        "--chrome",
        chrome.to_str().unwrap(),
        "-o",
        dir.join("trace").to_str().unwrap(),
        "--",
        "200",
    ]);
    assert!(r.status.success(), "{}", r.context());
    assert_calls(&report_calls(&r.stdout), 200, &r.context());
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&chrome).unwrap()).expect("chrome JSON parses");
    let events = json
        .as_array()
        .or_else(|| json["traceEvents"].as_array())
        .expect("a trace-event array");
    let works = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "cargo_app::work")
        .count();
    assert_eq!(works, 200, "complete events of cargo_app::work");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("cargo_app::work"));
}

/// The second run builds nothing, and another binary of the package runs with its arguments.
#[test]
fn second_run_reuses_the_build() {
    let dir = workdir("again");
    let args = ["--bin", "other", "-o", dir.to_str().unwrap(), "--", "7"];
    let first = cargo_instrfn(&args);
    assert!(first.status.success(), "{}", first.context());
    let second = cargo_instrfn(&args);
    assert!(second.status.success(), "{}", second.context());
    assert!(
        !second.stderr.contains("Compiling"),
        "the second run compiled again:\n{}",
        second.context()
    );
    assert!(
        second.stdout.starts_with("other: n=7 "),
        "{}",
        second.context()
    );
    let calls = report_calls(&second.stdout);
    assert_eq!(calls.get("counter::step"), Some(&7), "{}", second.context());
    assert!(!second.stderr.contains("hint:"), "{}", second.context());
}

/// A profile without debug info: one hint line that says how to add it; names still come.
#[test]
fn profile_without_debug_info_gets_a_hint() {
    let dir = workdir("nodebug");
    let r = cargo_instrfn_in(
        &fixture(),
        &target_dir("nodebug"),
        &["--bin", "other", "-o", dir.to_str().unwrap(), "--", "3"],
        &[("CARGO_PROFILE_RELEASE_DEBUG", "0")],
    );
    assert!(r.status.success(), "{}", r.context());
    let hints: Vec<&str> = r.stderr.lines().filter(|l| l.contains("hint:")).collect();
    assert_eq!(hints.len(), 1, "{}", r.context());
    assert!(
        hints[0].contains("[profile.release] debug = 1")
            && hints[0].contains("CARGO_PROFILE_RELEASE_DEBUG=1"),
        "{}",
        hints[0]
    );
    assert_eq!(report_calls(&r.stdout).get("counter::step"), Some(&3));
}

/// A program killed by a signal: cargo instrfn ends by the same signal, after the report.
/// (Run from another directory, with --manifest-path.)
#[test]
fn signal_death_passes_through() {
    let dir = workdir("abort");
    let manifest = fixture().join("Cargo.toml");
    let r = cargo_instrfn_in(
        &dir,
        &target_dir("shared"),
        &[
            "--manifest-path",
            manifest.to_str().unwrap(),
            "-o",
            dir.join("trace").to_str().unwrap(),
            "--",
            "10",
            "--abort",
        ],
        &[],
    );
    assert_eq!(r.status.signal(), Some(libc::SIGABRT), "{}", r.context());
    assert_calls(&report_calls(&r.stdout), 10, &r.context());
}

/// The build fails: cargo's diagnostics, then one line of ours.
#[test]
fn build_failure_is_one_line_after_cargos_messages() {
    let r = cargo_instrfn_in(
        &fixture(),
        &target_dir("broken"),
        &["--features", "broken"],
        &[],
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.context());
    assert!(
        r.stderr
            .contains("the `broken` feature breaks the build on purpose"),
        "{}",
        r.context()
    );
    let last = r.stderr.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("cargo-instrfn: ") && last.contains("failed"),
        "{}",
        r.context()
    );
}

fn assert_one_line_refusal(r: &Run, says: &str) {
    let err = r.stderr.trim_end();
    assert!(
        !r.status.success() && r.status.code().is_some(),
        "{}",
        r.context()
    );
    assert_eq!(err.lines().count(), 1, "one line:\n{}", r.context());
    assert!(
        (err.starts_with("cargo-instrfn: ") || err.starts_with("error: ")) && err.contains(says),
        "expected one line saying {says:?}:\n{}",
        r.context()
    );
    assert!(r.stdout.is_empty(), "{}", r.context());
}

#[test]
fn refusals_are_one_line() {
    let outside =
        std::env::temp_dir().join(format!("cargo-instrfn-outside-{}", std::process::id()));
    std::fs::create_dir_all(&outside).unwrap();
    let r = cargo_instrfn_in(&outside, &target_dir("shared"), &[], &[]);
    let _ = std::fs::remove_dir_all(&outside);
    assert_one_line_refusal(&r, "not inside a Cargo package");
    for (args, says) in [
        (
            &["--toolchain", "instrfn-no-such-toolchain"][..],
            "rustup toolchain install",
        ),
        (
            &["--target", "aarch64-unknown-linux-gnu"],
            "instrfn record --preload",
        ),
        (
            &["--target", "x86_64-unknown-linux-musl"],
            "use instrfn as _;",
        ),
        (&["--bin", "nope"], "no bin target named `nope`"),
        (&["--example", "plugin"], "not a binary"),
        (&["-p", "counter"], "no binary target"),
        (&["--gmon", "--xray"], "trace mode only"),
        (&["--gmon", "--svg", "x.svg"], "--gmon"),
        (&["--mcount", "--fentry"], "cannot be used with"),
        (&["--no-such-option"], "--no-such-option"),
    ] {
        assert_one_line_refusal(&cargo_instrfn(args), says);
    }
}

/// `cargo instrfn --print-flags` and scripts/instrument-flags spell each framework alike, or
/// both refuse it.
#[test]
fn print_flags_agree_with_instrument_flags() {
    for (script, ours) in [
        (&["mcount"][..], &["--mcount"][..]),
        (&["fentry"], &["--fentry"]),
        (&["xray"], &["--xray"]),
        (&["xray", "skip-exit"], &["--xray=skip-exit"]),
        (
            &["xray", "instruction-threshold=10"],
            &["--xray=instruction-threshold=10"],
        ),
    ] {
        let s = Command::new(root().join("scripts/instrument-flags"))
            .args(script)
            .env("INSTRFN_NIGHTLY", nightly())
            .output()
            .unwrap();
        let mut args = vec!["--print-flags"];
        args.extend(ours);
        let r = cargo_instrfn(&args);
        assert_eq!(
            s.status.success(),
            r.status.success(),
            "{script:?}: script {:?} {}\n{}",
            s.status,
            String::from_utf8_lossy(&s.stderr),
            r.context()
        );
        if s.status.success() {
            assert_eq!(String::from_utf8_lossy(&s.stdout), r.stdout, "{script:?}");
        } else {
            assert_one_line_refusal(&r, "");
        }
    }
}

/// --build-std rebuilds the standard library instrumented: `std::io::stdio::_print` (println!)
/// is counted, which the precompiled one never is. Without the rust-src component, one line
/// says how to add it.
#[test]
fn build_std_counts_the_standard_library() {
    let sysroot = Command::new("rustc")
        .arg(format!("+{}", nightly()))
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if !sysroot
        .join("lib/rustlib/src/rust/library/Cargo.lock")
        .is_file()
    {
        assert_one_line_refusal(
            &cargo_instrfn(&["--build-std"]),
            "rustup component add rust-src",
        );
        return;
    }
    let dir = workdir("build-std");
    let r = cargo_instrfn(&["--build-std", "-o", dir.to_str().unwrap(), "--", "10"]);
    assert!(r.status.success(), "{}", r.context());
    let calls = report_calls(&r.stdout);
    assert_calls(&calls, 10, &r.context());
    assert_eq!(
        calls.get("std::io::stdio::_print"),
        Some(&1),
        "{}",
        r.context()
    );
    let plain = cargo_instrfn(&["-o", dir.to_str().unwrap(), "--", "10"]);
    assert!(plain.status.success(), "{}", plain.context());
    assert!(!report_calls(&plain.stdout).contains_key("std::io::stdio::_print"));
}
