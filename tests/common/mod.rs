//! Shared helpers of the integration tests: build fixtures with the real compilers, run them
//! (natively or under qemu-user), and read the results with the real gprof.
//!
//! The runtime artifacts (`libinstrfn.so`, `libinstrfn.a` per target) are built by the test
//! command (`scripts/test.sh`) before `cargo test`; a missing artifact or tool fails the test
//! with a message that says what to run, never skips it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A target the tests build for.
#[derive(Clone, Copy, Debug)]
pub struct Arch {
    /// Short name, used in work directory names.
    pub name: &'static str,
    /// Rust target triple of the runtime build.
    pub triple: &'static str,
    /// C compiler.
    pub cc: &'static str,
    /// gprof for this target's executables.
    pub gprof: &'static str,
    /// qemu-user binary, for foreign architectures.
    pub qemu: Option<&'static str>,
    /// Sysroot for qemu's -L (dynamic loader and libraries).
    pub sysroot: Option<&'static str>,
}

pub const X86_64: Arch = Arch {
    name: "x86_64",
    triple: "x86_64-unknown-linux-gnu",
    cc: "gcc",
    gprof: "gprof",
    qemu: None,
    sysroot: None,
};

pub const X86_64_MUSL: Arch = Arch {
    name: "x86_64-musl",
    triple: "x86_64-unknown-linux-musl",
    cc: "musl-gcc",
    gprof: "gprof",
    qemu: None,
    sysroot: None,
};

pub const AARCH64: Arch = Arch {
    name: "aarch64",
    triple: "aarch64-unknown-linux-gnu",
    cc: "aarch64-linux-gnu-gcc",
    gprof: "aarch64-linux-gnu-gprof",
    qemu: Some("qemu-aarch64"),
    sysroot: Some("/usr/aarch64-linux-gnu"),
};

pub const RISCV64: Arch = Arch {
    name: "riscv64",
    triple: "riscv64gc-unknown-linux-gnu",
    cc: "riscv64-linux-gnu-gcc",
    gprof: "riscv64-linux-gnu-gprof",
    qemu: Some("qemu-riscv64"),
    sysroot: Some("/usr/riscv64-linux-gnu"),
};

pub const S390X: Arch = Arch {
    name: "s390x",
    triple: "s390x-unknown-linux-gnu",
    cc: "s390x-linux-gnu-gcc",
    gprof: "s390x-linux-gnu-gprof",
    qemu: Some("qemu-s390x"),
    sysroot: Some("/usr/s390x-linux-gnu"),
};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture source file, `tests/fixtures/<rel>`.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// A fresh, empty work directory `target/instrfn-tests/<name>`.
pub fn workdir(name: &str) -> PathBuf {
    let dir = root().join("target/instrfn-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Panics unless `tool` is on PATH.
pub fn require_tool(tool: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "required tool `{tool}` is not installed; run scripts/test.sh, which installs it"
    );
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lib {
    /// libinstrfn.so
    Shared,
    /// libinstrfn.a
    Static,
}

/// The runtime artifact for `arch`, as built by `cargo build --release [--target]`.
pub fn runtime_lib(arch: Arch, kind: Lib) -> PathBuf {
    let file = match kind {
        Lib::Shared => "libinstrfn.so",
        Lib::Static => "libinstrfn.a",
    };
    // The host build lands in target/release, as the README documents.
    let path = if arch.triple == X86_64.triple {
        root().join("target/release").join(file)
    } else {
        root()
            .join("target")
            .join(arch.triple)
            .join("release")
            .join(file)
    };
    let build = if arch.triple == X86_64.triple {
        "cargo build --release".to_string()
    } else {
        format!("cargo build --release --target {}", arch.triple)
    };
    assert!(
        path.is_file(),
        "{} is missing: run `{build}` first (scripts/test.sh does)",
        path.display()
    );
    // `cargo test` does not rebuild these artifacts: never test a stale one. Cargo's dep-info
    // file next to the artifact lists the sources it was built from.
    let built = std::fs::metadata(&path).unwrap().modified().unwrap();
    let dep_info = std::fs::read_to_string(path.with_extension("d")).unwrap_or_default();
    let sources = dep_info
        .lines()
        .flat_map(|l| l.split_once(": ").map_or("", |(_, d)| d).split_whitespace());
    for source in sources.map(Path::new).filter(|p| p.is_file()) {
        let modified = std::fs::metadata(source).unwrap().modified().unwrap();
        assert!(
            modified <= built,
            "{} is older than {}: run `{build}` first (scripts/test.sh does)",
            path.display(),
            source.display()
        );
    }
    path
}

/// Runs a command to completion; panics with its output unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "command failed: {cmd:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command to completion and returns its output whatever the status.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// Compiles and links with `arch.cc`: `args` are passed as they are, `-o out` appended.
pub fn cc(arch: Arch, args: &[&OsStr], out: &Path) -> PathBuf {
    require_tool(arch.cc);
    run_ok(Command::new(arch.cc).args(args).arg("-o").arg(out));
    out.to_path_buf()
}

/// A command that runs `exe` for `arch` (through qemu-user for foreign architectures) in `dir`
/// with the extra environment `env` (passed to the guest with -E under qemu, so LD_PRELOAD
/// applies to the guest program, not to qemu).
pub fn command(arch: Arch, exe: &Path, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Command {
    let mut cmd = match arch.qemu {
        None => {
            let mut c = Command::new(exe);
            c.args(args);
            for (k, v) in env {
                c.env(k, v);
            }
            c
        }
        Some(qemu) => {
            require_tool(qemu);
            let mut c = Command::new(qemu);
            if let Some(sysroot) = arch.sysroot {
                c.arg("-L").arg(sysroot);
            }
            for (k, v) in env {
                c.arg("-E").arg(format!("{k}={v}"));
            }
            c.arg(exe).args(args);
            c
        }
    };
    cmd.current_dir(dir);
    cmd
}

/// Runs `exe` (see [`command`]) and panics unless it exits with status 0.
pub fn run_exe(arch: Arch, exe: &Path, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Output {
    run_ok(&mut command(arch, exe, args, env, dir))
}

/// One line of gprof's flat profile.
#[derive(Debug, Clone, Default)]
pub struct FlatEntry {
    pub self_seconds: f64,
    /// None when gprof shows no call count.
    pub calls: Option<u64>,
}

/// `gprof -b -p exe gmon`: function name -> entry, plus the seconds one sample counts as.
pub struct Flat {
    pub entries: BTreeMap<String, FlatEntry>,
    pub seconds_per_sample: Option<f64>,
    pub text: String,
}

impl Flat {
    /// Panics if a function of the runtime has a call count: the runtime is instrumented too
    /// when RUSTFLAGS reach every crate, and its guard must keep its own calls out. (A
    /// histogram sample may land in runtime code, a thread's exit path say: time, not a call.)
    pub fn assert_no_runtime_calls(&self, context: &str) {
        let counted: Vec<&String> = self
            .entries
            .iter()
            .filter(|(name, e)| name.contains("instrfn::") && e.calls.is_some_and(|c| c > 0))
            .map(|(name, _)| name)
            .collect();
        assert!(
            counted.is_empty(),
            "{context}: runtime functions were counted: {counted:?}\n{}",
            self.text
        );
    }

    /// The call count gprof shows for `name` (0 when absent or blank).
    pub fn calls(&self, name: &str) -> u64 {
        self.entries.get(name).and_then(|e| e.calls).unwrap_or(0)
    }

    /// Sum of the self seconds of every function.
    pub fn total_seconds(&self) -> f64 {
        self.entries.values().map(|e| e.self_seconds).sum()
    }
}

/// Runs the target's gprof on `exe` and `gmon` and parses the flat profile.
pub fn gprof_flat(arch: Arch, exe: &Path, gmon: &Path) -> Flat {
    require_tool(arch.gprof);
    assert!(gmon.is_file(), "{} was not written", gmon.display());
    let out = run_ok(
        Command::new(arch.gprof)
            .args(["-b", "-p"])
            .arg(exe)
            .arg(gmon),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.stderr.is_empty(),
        "gprof complained about {}:\n{}",
        gmon.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_flat(&text)
}

/// Parses `gprof -b -p` output.
pub fn parse_flat(text: &str) -> Flat {
    let mut entries = BTreeMap::new();
    let mut seconds_per_sample = None;
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("Each sample counts as ") {
            seconds_per_sample = rest.split_whitespace().next().and_then(|s| s.parse().ok());
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.len() < 4 {
            continue;
        }
        let nums: Vec<Option<f64>> = tokens.iter().map(|t| t.parse::<f64>().ok()).collect();
        if nums[0].is_none() || nums[1].is_none() || nums[2].is_none() {
            continue;
        }
        // "%time cumulative self [calls self/call total/call] name"
        let (calls, name_start) =
            if tokens.len() >= 7 && nums[3].is_some() && nums[4].is_some() && nums[5].is_some() {
                (tokens[3].parse::<u64>().ok(), 6)
            } else {
                (None, 3)
            };
        let name = tokens[name_start..].join(" ");
        entries.insert(
            name,
            FlatEntry {
                self_seconds: nums[2].unwrap(),
                calls,
            },
        );
    }
    Flat {
        entries,
        seconds_per_sample,
        text: text.to_string(),
    }
}

/// The number just before `label` in the INSTRFN_VERBOSE summary line ("slow paths",
/// "calls lost", "thread blocks for", …).
pub fn summary_value(stderr: &str, label: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("instrfn: wrote "))
        .unwrap_or_else(|| panic!("no INSTRFN_VERBOSE summary in: {stderr}"));
    line.split([';', ':', ','])
        .find_map(|part| {
            let before = &part[..part.find(label)?];
            before.split_whitespace().last()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no \"{label}\" in: {line}"))
}

/// Asserts that the trampolines' fast path found the arcs the slow path inserted: slow paths
/// (one per new arc or thread) are few while calls are many. Catches a hash in an
/// `asm/<arch>.s` that disagrees with `arcs::hash`, which would leave the counts right but
/// send every call down the slow path.
pub fn assert_fast_path_used(stderr: &str, calls: u64, context: &str) {
    let slow = summary_value(stderr, "slow paths");
    assert!(
        slow > 0 && slow < 200 && slow * 100 < calls,
        "{context}: {slow} slow paths for {calls} calls"
    );
}

/// Asserts that the register driver's 5000 new arcs were inserted by the trampoline itself:
/// the slow path ran only for start-up, the driver's four threads and a few table growths.
pub fn assert_inserts_in_trampoline(stderr: &str, context: &str) {
    let slow = summary_value(stderr, "slow paths");
    assert!(slow <= 16, "{context}: {slow} slow paths for 5000 new arcs");
}

/// `gprof -b -q` call graph text.
pub fn gprof_graph(arch: Arch, exe: &Path, gmon: &Path) -> String {
    let out = run_ok(
        Command::new(arch.gprof)
            .args(["-b", "-q"])
            .arg(exe)
            .arg(gmon),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The call graph of `gprof -b -q` output as arcs: (caller, callee) -> calls.
///
/// Each entry of the graph is a block between dashed lines: the lines above its primary line
/// (the one that starts with `[index]`) are its callers, with `calls/total` in the called
/// column; the lines below are its callees, likewise. Both halves are read, so an arc appears
/// whether gprof shows its caller's entry or only its callee's (a caller that was itself
/// never called from inside the executable, e.g. a thread's start routine, has no entry of its
/// own); where both show an arc they must agree. `<spontaneous>` lines name no caller and are
/// skipped; a recursive arc (`f` calling `f`, shown without a total) is read like any other.
/// Members of a cycle keep their plain names (` <cycle N>` is dropped), and the
/// `<cycle N as a whole>` entries, which list members rather than callees, are skipped.
pub fn parse_call_graph(text: &str) -> BTreeMap<(String, String), u64> {
    /// (name, calls) of a caller or callee line, (name, None) of a primary line.
    fn parse_line(line: &str) -> Option<(bool, String, Option<u64>)> {
        let mut tokens: Vec<&str> = line.split_whitespace().collect();
        let is_index = |t: &str| {
            t.len() > 2
                && t.starts_with('[')
                && t.ends_with(']')
                && t[1..t.len() - 1].bytes().all(|b| b.is_ascii_digit())
        };
        // Every line that names a function ends with its index.
        if !tokens.last().is_some_and(|t| is_index(t)) {
            return None;
        }
        tokens.pop();
        let primary = tokens.first().is_some_and(|t| is_index(t));
        if primary {
            tokens.remove(0);
        }
        // %time, self and children: numbers with a decimal point (possibly absent).
        let mut i = 0;
        while i < tokens.len() && tokens[i].contains('.') && tokens[i].parse::<f64>().is_ok() {
            i += 1;
        }
        // The called column: n, n/total, or n+recursive on a primary line.
        let called = tokens.get(i).filter(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || b == b'/' || b == b'+')
        });
        let calls = called.and_then(|t| t.split(['/', '+']).next()?.parse::<u64>().ok());
        if called.is_some() {
            i += 1;
        }
        let mut name = tokens[i..].join(" ");
        if let Some(cut) = name.find(" <cycle ") {
            name.truncate(cut);
        }
        if name.is_empty() {
            return None;
        }
        Some((primary, name, if primary { None } else { calls }))
    }

    let mut arcs: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut add = |caller: &str, callee: &str, calls: u64| {
        let key = (caller.to_string(), callee.to_string());
        if let Some(&seen) = arcs.get(&key) {
            assert_eq!(
                seen, calls,
                "gprof shows {caller} -> {callee} with {seen} and {calls} calls:\n{text}"
            );
        }
        arcs.insert(key, calls);
    };
    for block in text.split("\n-----------------------------------------------") {
        let lines: Vec<(bool, String, Option<u64>)> =
            block.lines().filter_map(parse_line).collect();
        let Some(p) = lines.iter().position(|(primary, ..)| *primary) else {
            continue;
        };
        let me = &lines[p].1;
        if me.starts_with("<cycle ") {
            continue;
        }
        for (_, caller, calls) in &lines[..p] {
            if let Some(n) = calls {
                add(caller, me, *n);
            }
        }
        for (_, callee, calls) in &lines[p + 1..] {
            if let Some(n) = calls {
                add(me, callee, *n);
            }
        }
    }
    arcs
}

/// Runs the target's gprof on `exe` and `gmon` and returns the call graph's arcs (see
/// [`parse_call_graph`]) and the text they were read from.
pub fn gprof_arcs(
    arch: Arch,
    exe: &Path,
    gmon: &Path,
) -> (BTreeMap<(String, String), u64>, String) {
    require_tool(arch.gprof);
    assert!(gmon.is_file(), "{} was not written", gmon.display());
    let text = gprof_graph(arch, exe, gmon);
    (parse_call_graph(&text), text)
}

/// Asserts that gprof's call graph shows exactly `expected` calls on each (caller, callee) arc.
pub fn assert_arcs(
    arcs: &(BTreeMap<(String, String), u64>, String),
    expected: &[(&str, &str, u64)],
    context: &str,
) {
    for (caller, callee, n) in expected {
        let got = arcs
            .0
            .get(&(caller.to_string(), callee.to_string()))
            .copied()
            .unwrap_or(0);
        assert_eq!(
            got, *n,
            "{context}: gprof shows {got} calls of {callee} from {caller}, expected {n}\n{}",
            arcs.1
        );
    }
}

/// Asserts that gprof shows exactly `expected` calls for each named function.
pub fn assert_calls(flat: &Flat, expected: &[(&str, u64)], context: &str) {
    for (name, n) in expected {
        assert_eq!(
            flat.calls(name),
            *n,
            "{context}: gprof shows {} calls of {name}, expected {n}\n{}",
            flat.calls(name),
            flat.text
        );
    }
}

/// Builds a Rust fixture crate under `tests/fixtures/<name>` with nightly and
/// `-Zinstrument-mcount` (the one place that spells the flag) for `triple`, in its own target
/// directory; returns the path of binary `bin`.
pub fn build_instrumented_rust(name: &str, triple: &str, bin: &str) -> PathBuf {
    build_instrumented_rust_with(name, triple, bin, "")
}

/// [`build_instrumented_rust`] with `extra` RUSTFLAGS after the instrumentation flag (e.g.
/// another symbol mangling), in a target directory of its own for each `extra` (builds with
/// other flags do not invalidate each other).
pub fn build_instrumented_rust_with(name: &str, triple: &str, bin: &str, extra: &str) -> PathBuf {
    let flags = format!("{} {extra}", instrument_flags("mcount"));
    build_rust_fixture(name, triple, bin, flags.trim(), extra)
}

/// A fixture built with XRay sleds: `opts` are rustc's `-Zinstrument-xray` options ("always",
/// "skip-exit", "instruction-threshold=10", ...), spelled by `scripts/instrument-flags xray`;
/// `extra` RUSTFLAGS follow. A target directory of its own per (opts, extra).
pub fn build_xray_rust(name: &str, triple: &str, bin: &str, opts: &str, extra: &str) -> PathBuf {
    let out = run_ok(Command::new(root().join("scripts/instrument-flags")).args(["xray", opts]));
    let xray = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let flags = format!("{xray} {extra}");
    build_rust_fixture(
        name,
        triple,
        bin,
        flags.trim(),
        &format!("-xray-{opts}-{extra}"),
    )
}

/// Builds fixture crate `name` for `triple` with nightly and RUSTFLAGS `flags`, in
/// target/instrfn-fixtures<tag> (`tag` made of its alphanumerics; empty: the default build).
pub fn build_rust_fixture(name: &str, triple: &str, bin: &str, flags: &str, tag: &str) -> PathBuf {
    let target_dir = if tag.is_empty() {
        root().join("target/instrfn-fixtures")
    } else {
        let tag: String = tag
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        root().join(format!("target/instrfn-fixtures{tag}"))
    };
    let manifest = fixture(name).join("Cargo.toml");
    let mut cmd = Command::new("cargo");
    cmd.arg(format!("+{}", nightly()))
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            triple,
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", flags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR");
    run_ok(&mut cmd);
    target_dir.join(triple).join("release").join(bin)
}

/// The nightly toolchain the instrumented fixtures are built with: INSTRFN_NIGHTLY (the test
/// command pins it), else `nightly`.
pub fn nightly() -> String {
    std::env::var("INSTRFN_NIGHTLY")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "nightly".to_string())
}

/// The rustc flags that make every function call the `kind` hook ("mcount" or "fentry"), as
/// `scripts/instrument-flags` finds them for the installed nightly: the one place that spells
/// them.
pub fn instrument_flags(kind: &str) -> String {
    let out = run_ok(Command::new(root().join("scripts/instrument-flags")).arg(kind));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs a command to completion within `seconds`; panics (after killing it) if it hangs, or
/// unless it succeeds.
pub fn run_within(cmd: &mut Command, seconds: u64) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung: killed after {seconds} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    assert!(
        output.status.success(),
        "command failed: {cmd:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The symbols a libinstrfn.so for `arch` must export, and nothing else: the ABI's counting
/// entry points, glibc's gmon entry points, the documented C API, and the libc functions the
/// runtime wraps.
pub fn expected_exports(fentry: bool, cyg: bool) -> Vec<&'static str> {
    let mut v = vec![
        "mcount",
        "_mcount",
        "__monstartup",
        "monstartup",
        "_mcleanup",
        "moncontrol",
        "instrfn_start",
        "instrfn_stop",
        "instrfn_write_gmon",
        "instrfn_flush",
        "instrfn_calls_recorded",
        "execve",
        "execv",
        "execvp",
        "execvpe",
        "execl",
        "execle",
        "execlp",
        "fexecve",
        "execveat",
        "posix_spawn",
        "posix_spawnp",
        "dlopen",
        "dlmopen",
        "dlclose",
        "sigaction",
        "_Unwind_RaiseException",
        "_Unwind_Resume",
        "_Unwind_Resume_or_Rethrow",
        "_Unwind_ForcedUnwind",
        "_Unwind_Backtrace",
        "backtrace",
        "__cxa_begin_catch",
        "unshare",
        "setns",
    ];
    if fentry {
        v.push("__fentry__");
    }
    if cyg {
        v.extend(["__cyg_profile_func_enter", "__cyg_profile_func_exit"]);
    }
    v.sort();
    v
}

/// The symbols `arch`'s libinstrfn.so defines and exports, read with `nm` (that arch's).
pub fn exported_symbols(arch: Arch, nm: &str) -> Vec<String> {
    require_tool(nm);
    let lib = runtime_lib(arch, Lib::Shared);
    let out = run_ok(Command::new(nm).args(["-D", "--defined-only"]).arg(&lib));
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .collect();
    got.sort();
    got
}

/// The `instrfn` command built by `cargo build --release` (target/release/instrfn).
pub fn instrfn_cli() -> PathBuf {
    let path = root().join("target/release/instrfn");
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --release` first (scripts/test.sh does)",
        path.display()
    );
    path
}

/// One thread's events as `instrfn dump` prints them: (kind, function name, ns).
#[derive(Debug, Clone, PartialEq)]
pub struct DumpEvent {
    pub kind: String,
    pub name: String,
    pub ns: f64,
}

/// A process of `instrfn dump` output: its header line, and per thread id its events.
#[derive(Debug, Default)]
pub struct DumpProcess {
    pub header: String,
    pub threads: BTreeMap<u32, Vec<DumpEvent>>,
    /// Events lost, all threads together (the `; N events lost` of the slot lines).
    pub lost: u64,
}

/// Runs `instrfn dump DIR` and parses it (every process, in order).
pub fn instrfn_dump(dir: &Path) -> Vec<DumpProcess> {
    let out = run_ok(Command::new(instrfn_cli()).arg("dump").arg(dir));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut procs: Vec<DumpProcess> = Vec::new();
    let mut tid = 0u32;
    for line in text.lines() {
        let t = line.trim_start();
        if line.starts_with("process ") {
            procs.push(DumpProcess {
                header: line.to_string(),
                ..Default::default()
            });
        } else if let Some(rest) = t.strip_prefix("tid ") {
            tid = rest.trim().parse().unwrap();
        } else if t.starts_with("thread slot") {
            if let Some(n) = t
                .strip_suffix(" events lost")
                .and_then(|r| r.rsplit("; ").next())
            {
                procs.last_mut().expect("a slot before any process").lost +=
                    n.parse::<u64>().unwrap();
            }
        } else {
            let mut w = t.split_whitespace();
            let ns: f64 = w
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            let kind = w.next().unwrap().to_string();
            let name = w.collect::<Vec<_>>().join(" ");
            let p = procs.last_mut().expect("an event before any process");
            p.threads
                .entry(tid)
                .or_default()
                .push(DumpEvent { kind, name, ns });
        }
    }
    procs
}

/// The events calltree.c's worker makes for K rounds (see its header), as (kind, name).
pub fn calltree_worker(k: usize) -> Vec<(String, String)> {
    let mut v = vec![("entry".to_string(), "run".to_string())];
    for _ in 0..k {
        for (kind, name) in [
            ("entry", "a"),
            ("entry", "b"),
            ("entry", "c"),
            ("exit", "c"),
            ("exit", "b"),
            ("entry", "b"),
            ("entry", "c"),
            ("exit", "c"),
            ("exit", "b"),
            ("exit", "a"),
        ] {
            v.push((kind.to_string(), name.to_string()));
        }
    }
    v.push(("exit".to_string(), "run".to_string()));
    v
}

/// Checks one process of a calltree.c trace (T threads, K rounds): every worker thread's
/// events are exactly [`calltree_worker`], the main thread's `entry main, exit main`;
/// timestamps never decrease within a thread, and each thread's events lie within the run.
pub fn assert_calltree(p: &DumpProcess, t: usize, k: usize, context: &str) {
    let worker = calltree_worker(k);
    let main = vec![
        ("entry".to_string(), "main".to_string()),
        ("exit".to_string(), "main".to_string()),
    ];
    let (mut workers, mut mains) = (0, 0);
    for (tid, events) in &p.threads {
        let seq: Vec<(String, String)> = events
            .iter()
            .map(|e| (e.kind.clone(), e.name.clone()))
            .collect();
        if seq == worker {
            workers += 1;
        } else if seq == main {
            mains += 1;
        } else {
            panic!(
                "{context}: thread {tid} has an unexpected sequence:\n{seq:?}\n{}",
                p.header
            );
        }
        for w in events.windows(2) {
            assert!(
                w[1].ns >= w[0].ns,
                "{context}: thread {tid}: time went back: {w:?}"
            );
        }
    }
    assert_eq!((workers, mains), (t, 1), "{context}: {}", p.header);
}

/// Checks that every thread's events of `p` nest: each exit (or unwound) closes the newest open
/// entry of the same function, and none is left open at the end (entries without exit are
/// not opened). Returns how many events of each (kind, function) there were.
pub fn assert_balanced(p: &DumpProcess, context: &str) -> BTreeMap<(String, String), u64> {
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (tid, events) in &p.threads {
        let mut open: Vec<&str> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            *counts.entry((e.kind.clone(), e.name.clone())).or_default() += 1;
            match e.kind.as_str() {
                "entry" => open.push(&e.name),
                "exit" | "unwound" => match open.pop() {
                    Some(f) if f == e.name => {}
                    other => panic!(
                        "{context}: thread {tid} event {i} ({} {}) closes {other:?}\n{:?}",
                        e.kind,
                        e.name,
                        &events[i.saturating_sub(8)..(i + 3).min(events.len())]
                    ),
                },
                "entry-no-exit" => {}
                k => panic!(
                    "{context}: thread {tid} event {i}: unexpected {k} {}",
                    e.name
                ),
            }
        }
        assert!(
            open.is_empty(),
            "{context}: thread {tid} left open: {open:?}"
        );
    }
    counts
}

/// `counts[(kind, name)]`, 0 if absent.
pub fn count_of(counts: &BTreeMap<(String, String), u64>, kind: &str, name: &str) -> u64 {
    counts
        .get(&(kind.to_string(), name.to_string()))
        .copied()
        .unwrap_or(0)
}

/// Asserts that `counts` (from [`assert_balanced`]) holds exactly `n` events of each (kind,
/// function, n) of `expected`.
pub fn assert_counts(
    counts: &BTreeMap<(String, String), u64>,
    expected: &[(&str, &str, u64)],
    context: &str,
) {
    for (kind, function, n) in expected {
        assert_eq!(
            count_of(counts, kind, function),
            *n,
            "{context}: {kind} {function}\n{counts:?}"
        );
    }
}

/// Checks one process of a calltree.c trace (T threads, K rounds) in which each call is an
/// entry without exit (aarch64 pac-ret, s390x clang 14 -pg, INSTRFN_EXITS=off): every
/// worker thread's events are exactly [`calltree_worker`]'s entries as `entry-no-exit`, with
/// no exit, the main thread's `entry-no-exit main`; timestamps never decrease within a thread.
pub fn assert_calltree_entries_only(p: &DumpProcess, t: usize, k: usize, context: &str) {
    let entries_only = |seq: Vec<(String, String)>| -> Vec<(String, String)> {
        seq.into_iter()
            .filter(|(kind, _)| kind == "entry")
            .map(|(_, name)| ("entry-no-exit".to_string(), name))
            .collect()
    };
    let worker = entries_only(calltree_worker(k));
    let main = vec![("entry-no-exit".to_string(), "main".to_string())];
    let (mut workers, mut mains) = (0, 0);
    for (tid, events) in &p.threads {
        let seq: Vec<(String, String)> = events
            .iter()
            .map(|e| (e.kind.clone(), e.name.clone()))
            .collect();
        if seq == worker {
            workers += 1;
        } else if seq == main {
            mains += 1;
        } else {
            panic!(
                "{context}: thread {tid} has an unexpected sequence:\n{seq:?}\n{}",
                p.header
            );
        }
        for w in events.windows(2) {
            assert!(
                w[1].ns >= w[0].ns,
                "{context}: thread {tid}: time went back: {w:?}"
            );
        }
    }
    assert_eq!((workers, mains), (t, 1), "{context}: {}", p.header);
}

/// How many events of each (kind, function name) a dumped process holds, over all threads.
pub fn dump_counts(p: &DumpProcess) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for e in p.threads.values().flatten() {
        *counts.entry((e.kind.clone(), e.name.clone())).or_insert(0) += 1;
    }
    counts
}

/// One chunk of an events file as it lies on disk (docs/trace-format.md).
#[derive(Debug, Clone, Copy)]
pub struct RawChunk {
    /// Whether its version field reads 1 little-endian (else it does big-endian).
    pub little_endian: bool,
    pub slot: u32,
    pub seq: u64,
    /// The kind of its first event (0: none written).
    pub first_kind: u64,
    /// Its events, up to the first unwritten one: short ones (8 bytes, version 2 and 3), long
    /// ones (16 bytes: every event of a version 1 chunk) and call words (8 bytes for an entry
    /// and its exit, version 3 only).
    pub short: u64,
    pub long: u64,
    pub calls: u64,
}

/// The chunks of every events and staging file in trace directory `dir`, read without the
/// reader crate (a chunk in both files, committed as the process ended, once).
pub fn raw_chunks(dir: &Path) -> Vec<RawChunk> {
    let mut chunks: Vec<RawChunk> = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "events" || e == "stage"))
        .collect();
    paths.sort();
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        // The first chunk written (one the collector prepared may be all zero).
        let Some(first) = (0..data.len().saturating_sub(63))
            .step_by(4096)
            .find(|&o| data[o..o + 8] == *b"IFNCHNK1")
        else {
            continue;
        };
        let data = &data[..];
        let version = u32::from_le_bytes(data[first + 8..first + 12].try_into().unwrap());
        let le = (1..=3).contains(&version);
        let u32_at = |b: &[u8], i: usize| {
            let a: [u8; 4] = b[i..i + 4].try_into().unwrap();
            if le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }
        };
        let u64_at = |b: &[u8], i: usize| {
            let a: [u8; 8] = b[i..i + 8].try_into().unwrap();
            if le {
                u64::from_le_bytes(a)
            } else {
                u64::from_be_bytes(a)
            }
        };
        let version = u32_at(data, first + 8);
        assert!((1..=3).contains(&version), "{}: version", path.display());
        let size = u32_at(data, first + 12) as usize;
        for chunk in data
            .chunks(size)
            .filter(|c| c.len() >= 80 && &c[..8] == b"IFNCHNK1")
        {
            let (slot, seq) = (u32_at(chunk, 16), u64_at(chunk, 24));
            // Events up to the first unwritten one (version 2 and 3: the low two bits of an
            // event's first word are 1 or 2 for a short one, 3 for a long one or, with bit 7
            // set in version 3, a call word).
            let (mut short, mut long, mut calls, mut at) = (0, 0, 0, 64);
            let mut first_kind = 0;
            while at + 16 <= chunk.len() {
                let w = u64_at(chunk, at);
                if version == 1 {
                    if u64_at(chunk, at + 8) == 0 {
                        break;
                    }
                    first_kind = if long == 0 {
                        u64_at(chunk, at + 8) & 15
                    } else {
                        first_kind
                    };
                    long += 1;
                    at += 16;
                } else if w & 3 == 3 && version == 3 && w & 0x80 != 0 {
                    first_kind = if short + long + calls == 0 {
                        1
                    } else {
                        first_kind
                    };
                    calls += 1;
                    at += 8;
                } else if w & 3 == 3 {
                    first_kind = if short + long + calls == 0 {
                        (w >> 2) & 7
                    } else {
                        first_kind
                    };
                    long += 1;
                    at += 16;
                } else if w != 0 {
                    first_kind = if short + long + calls == 0 {
                        w & 3
                    } else {
                        first_kind
                    };
                    short += 1;
                    at += 8;
                } else {
                    break;
                }
            }
            if !chunks.iter().any(|c| (c.slot, c.seq) == (slot, seq)) {
                chunks.push(RawChunk {
                    little_endian: le,
                    slot,
                    seq,
                    first_kind,
                    short,
                    long,
                    calls,
                });
            }
        }
    }
    chunks
}

/// Checks the trace of tests/fixtures/c/compact.c run with `n` (its stdout given): every call
/// once, entries and exits balanced and named, and `nap`'s traced length the one the program
/// measured; returns its one chunk (the trace is small), whose events number 6n + 6.
pub fn assert_compact_trace(trace: &Path, stdout: &str, n: u64, context: &str) -> RawChunk {
    let napped: f64 = stdout
        .trim()
        .strip_prefix("napped ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{context}: compact.c printed {stdout:?}"));
    let p = instrfn_dump(trace).remove(0);
    let counts = assert_balanced(&p, context);
    assert_counts(
        &counts,
        &[
            ("entry", "main", 1),
            ("entry", "near", 2 * n),
            ("exit", "near", 2 * n),
            ("entry", "lib_outer", 1),
            ("exit", "lib_outer", 1),
            ("entry", "lib_inner", n),
            ("exit", "lib_inner", n),
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
        traced >= napped && traced < napped + 2e6,
        "{context}: nap traced {traced} ns, measured {napped} ns"
    );
    let chunks = raw_chunks(trace);
    assert_eq!(chunks.len(), 1, "{context}: {chunks:?}");
    let c = chunks[0];
    assert_eq!(
        c.short + c.long + 2 * c.calls,
        6 * n + 6,
        "{context}: {c:?}"
    );
    c
}

/// tests/fixtures/c/compact.c for `arch` (gcc -O2 `flag`: -pg or -finstrument-functions,
/// linked with a libwork.so built the same way), run `n` preloaded in trace mode under qemu,
/// checked by [`assert_compact_trace`]: returns its chunk.
pub fn compact_under_qemu(arch: Arch, n: u64, flag: &str) -> RawChunk {
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
    let out = run_in_trace_mode(arch, &exe, &[&n.to_string()], true, &[], &dir, &trace);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_compact_trace(&trace, &stdout, n, arch.name)
}

/// Checks that the durations of a properly nested trace (every thread's events nest) are
/// consistent with each other and with the wall time the test measured around the whole run:
/// every call lasts at least as long as its callees together, every thread's events lie
/// within the first thread's outermost call (`main`: the other threads run inside it), and
/// that call is no longer than `wall_ns`.
pub fn assert_durations(p: &DumpProcess, wall_ns: f64, context: &str) {
    let mut outer: Option<(f64, f64)> = None;
    let mut spans = Vec::new();
    for (tid, events) in &p.threads {
        // (start, callees' total) of each open call.
        let mut open: Vec<(f64, f64)> = Vec::new();
        for e in events {
            match e.kind.as_str() {
                "entry" => open.push((e.ns, 0.0)),
                "exit" => {
                    let (start, callees) = open.pop().expect("nested");
                    let d = e.ns - start;
                    assert!(
                        d >= callees,
                        "{context}: thread {tid}: {} lasts {d} ns, its callees {callees} ns",
                        e.name
                    );
                    if let Some(parent) = open.last_mut() {
                        parent.1 += d;
                    } else if e.name == "main" {
                        outer = Some((start, e.ns));
                    } else {
                        spans.push((start, e.ns));
                    }
                }
                _ => {}
            }
        }
    }
    let (lo, hi) = outer.unwrap_or_else(|| panic!("{context}: no main"));
    assert!(
        hi - lo <= wall_ns,
        "{context}: main lasts {} ns, the run {wall_ns} ns",
        hi - lo
    );
    for (a, b) in spans {
        assert!(
            a >= lo && b <= hi,
            "{context}: a thread's call [{a}, {b}] outside main's [{lo}, {hi}]"
        );
    }
}

/// The calls the record-time filters left out of the trace in `dir`: the `dropped` lines of
/// every meta file, summed (docs/trace-format.md).
pub fn meta_dropped(dir: &Path) -> u64 {
    let mut dropped = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "meta") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                if let Some(rest) = line.strip_prefix("dropped ") {
                    let n = rest.split_whitespace().nth(1).unwrap();
                    dropped += n.parse::<u64>().unwrap();
                }
            }
        }
    }
    dropped
}

/// The calls of `p` per function: its entries, with or without exit, over all threads.
pub fn calls_per_function(p: &DumpProcess) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for e in p.threads.values().flatten() {
        if e.kind == "entry" || e.kind == "entry-no-exit" {
            *calls.entry(e.name.clone()).or_insert(0) += 1;
        }
    }
    calls
}

/// Checks a trace of sleeps.c recorded with INSTRFN_MIN_DURATION = `threshold_ns` (`kept`, with
/// `dropped` calls counted in its meta file) against one of the same binary recorded without
/// it (`all`): the trace nests and loses nothing; every call of main, nap10 and nap30 (and
/// sleep_ms, where gcc kept it out of line), each of which lasts 10 ms or more, is in it; a
/// call with no recorded callee is in it only if it lasted at least the threshold (tiny() takes
/// nanoseconds: only a host that stalls the program for that long inside one keeps it, and its
/// timestamps then say so; 0.8 allows for the rate the runtime measured the threshold with);
/// and every call is either recorded or counted as dropped, exactly.
pub fn assert_min_duration_sleeps(
    all: &DumpProcess,
    kept: &DumpProcess,
    dropped: u64,
    threshold_ns: f64,
    context: &str,
) {
    assert_eq!(all.lost + kept.lost, 0, "{context}: events lost");
    assert_balanced(all, context);
    assert_balanced(kept, context);
    let made = calls_per_function(all);
    let recorded = calls_per_function(kept);
    assert_eq!(made.get("tiny"), Some(&1000), "{context}: {made:?}");
    for f in ["main", "nap10", "nap30", "sleep_ms"] {
        assert_eq!(recorded.get(f), made.get(f), "{context}: {f}: {recorded:?}");
    }
    for (f, n) in &recorded {
        assert!(
            made.get(f).is_some_and(|m| n <= m),
            "{context}: {f}: {n}, made {made:?}"
        );
    }
    for (tid, events) in &kept.threads {
        // (function, entry ns, whether a callee was recorded) of each open call
        let mut open: Vec<(&str, f64, bool)> = Vec::new();
        for e in events {
            if e.kind == "entry" {
                if let Some(parent) = open.last_mut() {
                    parent.2 = true;
                }
                open.push((&e.name, e.ns, false));
            } else if e.kind == "exit" {
                let (f, start, callees) = open.pop().unwrap();
                assert!(
                    callees || e.ns - start >= 0.8 * threshold_ns,
                    "{context}: thread {tid}: a call of {f} of {} ns without recorded callees \
                     is in the trace",
                    e.ns - start
                );
            }
        }
    }
    let (n_made, n_recorded): (u64, u64) = (made.values().sum(), recorded.values().sum());
    assert!(dropped > 0, "{context}: nothing dropped");
    assert_eq!(
        dropped + n_recorded,
        n_made,
        "{context}: {dropped} dropped + {n_recorded} recorded, {n_made} made: {recorded:?}"
    );
}

/// Checks a trace of tracesig.c (`handled` signals, `calls` calls of work) recorded with
/// INSTRFN_MIN_DURATION, `dropped` calls counted in its meta file: every thread's events nest
/// with every exit, nothing is lost, and every call (work, leaf, on_signal, handler_fn, main,
/// sender) is either recorded, entry and exit, or counted as dropped, exactly, whatever the
/// signal handlers interrupted.
pub fn assert_min_duration_tracesig(
    p: &DumpProcess,
    dropped: u64,
    handled: u64,
    calls: u64,
    context: &str,
) {
    assert_eq!(p.lost, 0, "{context}: events lost");
    let counts = assert_balanced(p, context);
    let made = [
        ("work", calls),
        ("leaf", 2 * calls + 100 * handled),
        ("on_signal", handled),
        ("handler_fn", handled),
        ("main", 1),
        ("sender", 1),
    ];
    let mut n_recorded = 0;
    for (f, n) in made {
        let (entries, exits) = (count_of(&counts, "entry", f), count_of(&counts, "exit", f));
        assert_eq!(entries, exits, "{context}: {f}");
        assert!(entries <= n, "{context}: {f}: {entries} recorded, {n} made");
        n_recorded += entries;
    }
    let n_events: u64 = counts.values().sum();
    assert_eq!(
        n_events,
        2 * n_recorded,
        "{context}: other events: {counts:?}"
    );
    let n_made: u64 = made.iter().map(|(_, n)| n).sum();
    assert!(dropped > 0, "{context}: nothing dropped");
    assert_eq!(
        dropped + n_recorded,
        n_made,
        "{context}: {dropped} dropped + {n_recorded} recorded, {n_made} made: {counts:?}"
    );
}

/// A thread's events nest: every exit closes its newest open entry, nothing else occurs
/// (no unwound frame, no entry without exit) and nothing stays open.
pub fn assert_nested(events: &[DumpEvent], context: &str) {
    let mut open: Vec<&str> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind.as_str() {
            "entry" => open.push(&e.name),
            "exit" => assert_eq!(
                open.pop(),
                Some(e.name.as_str()),
                "{context}: event {i} exits {} (open: {open:?})",
                e.name
            ),
            other => panic!("{context}: event {i} is `{other} {}`", e.name),
        }
    }
    assert!(open.is_empty(), "{context}: never closed: {open:?}");
}

/// INSTRFN_MIN_DURATION under signal handlers that trace between any two instructions of the
/// trampolines: tracesig.c `exe` (the runtime linked in) single-stepped under qemu with 4 KiB
/// chunks, at 1 s (every call short), 100 µs (handler_fn mostly long, work and leaf short), and
/// 100 µs with `walk` (tracesig.c's stack-walking argument) in every handler. Every run: a
/// nested trace with every exit, nothing lost, every call recorded or counted as dropped.
pub fn min_duration_tracesig_rounds(arch: Arch, exe: &Path, dir: &Path, name: &str, walk: &str) {
    for (threshold, walking) in [("1s", false), ("100us", false), ("100us", true)] {
        let context = format!("{name} {threshold}{}", if walking { " walk" } else { "" });
        let args: &[&str] = if walking { &["3000", walk] } else { &["3000"] };
        let env = [("INSTRFN_MIN_DURATION", threshold)];
        let (handled, calls, p, tdir) =
            tracesig_singlestep_run(arch, exe, args, &env, dir, &context);
        assert_min_duration_tracesig(&p, meta_dropped(&tdir), handled, calls, &context);
    }
}

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

// Trace mode: what tests/host.rs and every tests/trace_<arch>.rs check alike. Where an
// architecture expects other events, the shared code says so, for that architecture, and why.

/// exit_window.c (see [`build_exit_window`]) run for `arch` in trace mode with `extra`
/// environment: `mode` and 16 windows with `rounds(i)` handler rounds each. Checks that all 16
/// windows were reached and the trace holds every event once: balanced, nothing lost or
/// dropped, stepped 16 entries and exits, every deep call an entry (with its exit) or an entry
/// without exit. `trace` is removed first.
/// Every one of the 16 windows must be reached, or at least `min_windows` of them (a call
/// word's window under qemu, where a call that takes the next chunk can be too long for a
/// call word). Returns the windows reached.
#[allow(clippy::too_many_arguments)]
pub fn exit_window_run(
    arch: Arch,
    exe: &Path,
    mode: &str,
    rounds: fn(usize) -> usize,
    extra: &[(&str, &str)],
    dir: &Path,
    context: &str,
    min_windows: u64,
) -> u64 {
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let t = trace.display().to_string();
    let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", t.as_str())];
    env.extend_from_slice(extra);
    let mut args = vec![mode.to_string()];
    args.extend((0..16).map(|i| rounds(i).to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_exe(arch, exe, &args, &env, dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let words = numbers_of(&text);
    let [windows, deep, stepped] = words[..] else {
        panic!("{context}: {text}")
    };
    assert!((min_windows..=16).contains(&windows), "{context}: {text}");
    assert_eq!(stepped, 16, "{context}: {text}");
    let procs = instrfn_dump(&trace);
    let counts = assert_balanced(&procs[0], context);
    assert_eq!(procs[0].lost, 0, "{context}");
    assert_eq!(meta_dropped(&trace), 0, "{context}");
    // The handler's events came after stepped's entry: nothing is taken back.
    assert_eq!(count_of(&counts, "entry", "stepped"), 16, "{context}");
    assert_eq!(count_of(&counts, "exit", "stepped"), 16, "{context}");
    let (entries, exits, noexit) = (
        count_of(&counts, "entry", "deep"),
        count_of(&counts, "exit", "deep"),
        count_of(&counts, "entry-no-exit", "deep"),
    );
    assert_eq!(entries, exits, "{context}");
    assert_eq!(entries + noexit, deep, "{context}: {counts:?}");
    windows
}

/// tests/fixtures/c/exit_window.c built with gcc -O2 -pg for `arch` and linked with its
/// libinstrfn.a (the fixture names the runtime's hidden labels).
pub fn build_exit_window(arch: Arch, dir: &Path) -> PathBuf {
    let obj = dir.join("exit_window.o");
    let source = fixture("c/exit_window.c");
    let args: Vec<&OsStr> = vec![
        OsStr::new("-O2"),
        OsStr::new("-pg"),
        OsStr::new("-c"),
        source.as_os_str(),
    ];
    cc(arch, &args, &obj);
    link_runtime(arch, dir, &obj, &[], "exit_window", Runtime::Static)
}

/// exit_window.c in `mode`, built for `arch`, with the handler's 30-45 rounds filling 4 KiB
/// chunks at the window (entries beyond depth 4 left without exit, so that they cannot be
/// taken back), which the runtime retires, commits and reuses while the interrupted
/// trampoline goes on, with the collector off (the thread commits and reuses them at once)
/// and on; `extra` added to the environment; every event in the trace exactly once
/// ([`exit_window_run`]). Calls `after` with the trace directory and the windows reached.
fn window_rounds(
    arch: Arch,
    mode: &str,
    extra: &[(&str, &str)],
    min_windows: u64,
    after: impl Fn(&Path, u64, &str),
) {
    let dir = workdir(&format!("{}-trace-{mode}-window", arch.name));
    let exe = build_exit_window(arch, &dir);
    for collector in ["off", "on"] {
        let mut env = vec![
            ("INSTRFN_BUFSIZE", "4096"),
            ("INSTRFN_MAX_DEPTH", "4"),
            ("INSTRFN_COLLECTOR", collector),
        ];
        env.extend_from_slice(extra);
        let context = format!("{} {mode} INSTRFN_COLLECTOR={collector}", arch.name);
        // A window is missed when the call at it takes too long (the host preempted qemu
        // there, say: a call word's window under qemu is 1-65 µs): the run is checked whole
        // all the same, and tried again, up to 4 times, until it reached `min_windows`.
        let mut windows = 0;
        for _ in 0..4 {
            windows = exit_window_run(arch, &exe, mode, |i| 30 + i, &env, &dir, &context, 0);
            if windows >= min_windows {
                break;
            }
        }
        assert!(
            windows >= min_windows,
            "{context}: {windows} windows reached in the last of 4 runs, {min_windows} asked"
        );
        after(&dir.join("trace"), windows, &context);
    }
}

/// INSTRFN_MIN_DURATION's take-back held up at its one critical instruction (exit_window.c
/// `take-back`): every one of the 16 windows, every event once ([`window_rounds`]).
pub fn take_back_rounds(arch: Arch) {
    window_rounds(
        arch,
        "take-back",
        &[("INSTRFN_MIN_DURATION", "10s")],
        16,
        |_, _, _| {},
    );
}

/// The exit trampoline's call word held up at its store (exit_window.c `merge`) while the
/// trampoline's pin holds the chunk the word goes into: at least `min_windows` of the 16
/// windows, every event once ([`window_rounds`]), a call word for each window.
pub fn merge_window_rounds(arch: Arch, min_windows: u64) {
    window_rounds(
        arch,
        "merge",
        &[],
        min_windows,
        |trace, windows, context| {
            let calls: u64 = raw_chunks(trace).iter().map(|c| c.calls).sum();
            assert!(calls >= windows, "{context}: {calls} call words");
        },
    );
}

/// The sweeps' rounds: one traced call per handler, walking; 40+ rounds with 4 KiB chunks and
/// no collector (the handler fills and recycles chunks under the interrupted code), walking;
/// and (`short`, for code that INSTRFN_MIN_DURATION applies to) the same with every call short
/// and entries beyond depth 4 left without exit, so that handlers still leave events.
pub fn sweep_rounds(short: bool) -> Vec<SweepRound<'static>> {
    const SMALL: &[(&str, &str)] = &[("INSTRFN_BUFSIZE", "4096"), ("INSTRFN_COLLECTOR", "off")];
    const SHORT: &[(&str, &str)] = &[
        ("INSTRFN_BUFSIZE", "4096"),
        ("INSTRFN_COLLECTOR", "off"),
        ("INSTRFN_MIN_DURATION", "10s"),
        ("INSTRFN_MAX_DEPTH", "4"),
    ];
    let mut rounds: Vec<SweepRound> = vec![("1", true, &[]), ("40", true, SMALL)];
    if short {
        rounds.push(("40", true, SHORT));
    }
    rounds
}

/// [`bpsweep_rounds`] for each build in `how`, in a work directory of its own (`<arch>-trace-
/// bpsweep-<build>`), with [`sweep_rounds`] (the short round for mcount and fentry code).
pub fn bpsweeps(arch: Arch, how: &[Sweep]) {
    for &h in how {
        let dir = workdir(&format!("{}-trace-bpsweep-{h:?}", arch.name));
        let short = matches!(h, Sweep::Mcount | Sweep::Fentry);
        bpsweep_rounds(arch, &dir, h, &sweep_rounds(short));
    }
}

/// The numbers in `text`, in order (the fixtures' one-line summaries).
pub fn numbers_of(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// gprof's counts in `gmon` for a sweep run of `exe` (sweep.c, bpsweep.c) that made `deep`
/// calls of deep (each handler round is deep(3): one call from outside, three of itself) and
/// `stepped` of stepped: exact, and no runtime function counted. (The flat profile leaves out
/// a function's calls of itself: the call graph has them, on the deep -> deep arc.)
pub fn assert_sweep_gmon(
    arch: Arch,
    exe: &Path,
    gmon: &Path,
    deep: u64,
    stepped: u64,
    context: &str,
) {
    let flat = gprof_flat(arch, exe, gmon);
    let arcs = gprof_arcs(arch, exe, gmon);
    let recursive = arcs.0.get(&("deep".into(), "deep".into())).copied();
    assert_eq!(recursive, Some(deep / 4 * 3), "{context}: {}", arcs.1);
    assert_eq!(flat.calls("deep"), deep / 4, "{context}: {}", flat.text);
    assert_eq!(flat.calls("stepped"), stepped, "{context}: {}", flat.text);
    flat.assert_no_runtime_calls(context);
}

/// One round of sweep.c or bpsweep.c: its ROUNDS argument, whether its handlers walk the
/// stack, extra environment.
pub type SweepRound<'a> = (&'a str, bool, &'a [(&'a str, &'a str)]);

/// How bpsweep.c is instrumented, and which code it sweeps.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Sweep {
    /// gcc -pg: `_mcount`, `mcount`, `instrfn_<arch>_mcount`, the exit trampoline up to its
    /// slow part.
    Mcount,
    /// gcc -pg -mfentry (s390x): `__fentry__`, `instrfn_<arch>_fentry`, the exit trampoline.
    Fentry,
    /// gcc -finstrument-functions: the two hooks and the runtime's routines behind them.
    Cyg,
    /// clang -fxray-instrument, sleds patched natively: the traced function's sleds and the
    /// XRay entry and exit trampolines.
    Xray,
}

/// tests/fixtures/c/bpsweep.c for `arch` (aarch64, riscv64, s390x), built as `how` says and
/// linked with libinstrfn.a in `dir`, run under qemu over every instruction of the code `how`
/// names (as the linked program's disassembly lists it), for each `(rounds, walk,
/// environment)`: the program ends normally, most instructions were reached, and the trace
/// holds every call exactly, as an entry and its exit, an entry without exit, or counted as
/// left out; for mcount and fentry code also once in gmon mode, gprof's counts exact.
pub fn bpsweep_rounds(arch: Arch, dir: &Path, how: Sweep, rounds: &[SweepRound]) {
    let obj = dir.join("bpsweep.o");
    let source = fixture("c/bpsweep.c");
    let xray = how == Sweep::Xray;
    if xray {
        require_tool("clang");
        let target = format!("--target={}", arch.cc.trim_end_matches("-gcc"));
        let mut clang = Command::new("clang");
        clang
            .arg(target)
            .args(["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"])
            .args(["-Wno-unknown-attributes", "-c"]);
        if arch.name == "aarch64" {
            // The stubs' instructions too (found at run time: bpsweep.c).
            clang.arg("-DSWEEP_STUBS");
        }
        run_ok(clang.arg(&source).arg("-o").arg(&obj));
    } else {
        let flags: &[&str] = match how {
            Sweep::Cyg => &["-finstrument-functions"],
            Sweep::Fentry => &["-pg", "-mfentry"],
            _ => &["-pg"],
        };
        // (Unwind tables for the handler's walk: riscv64's gcc makes none by default.)
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("-O2"),
            OsStr::new("-fasynchronous-unwind-tables"),
        ];
        args.extend(flags.iter().map(OsStr::new));
        args.extend([OsStr::new("-c"), source.as_os_str()]);
        cc(arch, &args, &obj);
    }
    let exe = link_runtime(arch, dir, &obj, &[], "bpsweep", Runtime::Static);
    let objdump = arch.cc.replace("gcc", "objdump");
    require_tool(&objdump);
    let listing = run_ok(Command::new(&objdump).arg("-d").arg(&exe));
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let base_name = format!("instrfn_{}_exit", arch.name);
    let a = arch.name;
    let swept: Vec<String> = match how {
        Sweep::Xray => vec![
            "stepped".to_string(),
            format!("instrfn_{a}_xray_entry"),
            format!("instrfn_{a}_xray_exit"),
            format!("instrfn_{a}_xray_exit_merge"),
        ],
        Sweep::Cyg => vec![
            "__cyg_profile_func_enter".to_string(),
            "__cyg_profile_func_exit".to_string(),
            format!("instrfn_{a}_cyg_enter"),
            format!("instrfn_{a}_cyg_exit"),
            format!("instrfn_{a}_cyg_exit_merge"),
            // (Not riscv64's instrfn_riscv64_cyg_trace_enter/exit: the slow routine calls
            // them with signals blocked, where a breakpoint's trap would kill the process.)
        ],
        // (The hidden labels inside the trampolines start blocks of their own in the listing:
        // each is named, or its instructions would drop out of the sweep; checked below.)
        Sweep::Fentry => vec![
            "__fentry__".to_string(),
            format!("instrfn_{a}_fentry"),
            format!("instrfn_{a}_fentry_hijacked"),
            base_name.clone(),
            format!("instrfn_{a}_exit_ours"),
            format!("instrfn_{a}_exit_merge"),
            format!("instrfn_{a}_exit_take_back"),
            format!("instrfn_{a}_exit_slow_entry"),
        ],
        Sweep::Mcount => vec![
            "_mcount".to_string(),
            "mcount".to_string(),
            format!("instrfn_{a}_mcount"),
            format!("instrfn_{a}_mcount_hijacked"),
            base_name.clone(),
            format!("instrfn_{a}_exit_ours"),
            format!("instrfn_{a}_exit_merge"),
            format!("instrfn_{a}_exit_take_back"),
            format!("instrfn_{a}_exit_slow_entry"),
        ],
    };
    // Labels that do start routines (or parts) left out on purpose: the slow exits, which block
    // signals (a breakpoint's trap there would kill the process).
    let left_out = [
        format!("instrfn_{a}_exit_slow"),
        format!("instrfn_{a}_exit_slow_part"),
    ];
    let (mut base, mut current, mut addrs) = (None, String::new(), Vec::new());
    for line in listing.lines() {
        if let Some((addr, rest)) = line.split_once(" <")
            && let (Ok(a), Some(name)) = (u64::from_str_radix(addr, 16), rest.strip_suffix(">:"))
        {
            current = name.to_string();
            if current == base_name {
                base = Some(a);
            }
            let inside = swept
                .iter()
                .any(|s| current.len() > s.len() + 1 && current.starts_with(&format!("{s}_")));
            assert!(
                !inside || swept.contains(&current) || left_out.contains(&current),
                "{current}: a label inside a swept routine, not in bpsweep's list (its \
                 instructions would not be swept)"
            );
            continue;
        }
        if swept.contains(&current)
            && let Some((addr, _)) = line.trim_start().split_once(':')
            && let Ok(a) = u64::from_str_radix(addr, 16)
        {
            addrs.push(a);
        }
    }
    let base = base.unwrap_or_else(|| panic!("{base_name} not in the disassembly"));
    assert!(addrs.len() > 50, "{} instructions found", addrs.len());
    // (bpsweep.c's main is not instrumented when built for XRay.)
    let main_calls = u64::from(!xray);
    let list = dir.join("offsets");
    let text: String = addrs
        .iter()
        .map(|&a| {
            let off = a as i64 - base as i64;
            if off < 0 {
                format!("-{:x}\n", -off)
            } else {
                format!("{off:x}\n")
            }
        })
        .collect();
    std::fs::write(&list, text).unwrap();
    let n = addrs.len() as u64;
    for &(r, walk, extra) in rounds {
        let context = format!("{} bpsweep rounds {r} walk {walk} {extra:?}", arch.name);
        let trace = dir.join("trace");
        let _ = std::fs::remove_dir_all(&trace);
        let t = trace.display().to_string();
        let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", t.as_str())];
        env.extend_from_slice(extra);
        let l = list.display().to_string();
        let mut args = vec![l.as_str(), r];
        if walk {
            args.extend(["walk", "check"]); // the walks must reach main (bpsweep.c)
        }
        let out = run_exe(arch, &exe, &args, &env, dir);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let words = numbers_of(&text);
        let [handled, deep, stepped, missed, stubs, stubs_handled] = words[..] else {
            panic!("{context}: {text}")
        };
        assert_eq!(handled + missed, n + stubs, "{context}: {text}");
        assert!(handled >= 30, "{context}: {text}");
        assert_eq!(stepped, n + stubs + 1, "{context}: {text}");
        // aarch64 XRay: the four instructions of the entry and of the exit stub, each reached
        // (with `check`, each handler's walk from there reached main).
        let stub_lines = if xray && arch.name == "aarch64" { 8 } else { 0 };
        assert_eq!(
            (stubs, stubs_handled),
            (stub_lines, stub_lines),
            "{context}: {text}"
        );
        let procs = instrfn_dump(&trace);
        let counts = assert_balanced(&procs[0], &context);
        assert_eq!(procs[0].lost, 0, "{context}");
        let left_out = extra.iter().any(|(k, _)| *k == "INSTRFN_MIN_DURATION");
        let mut recorded = 0;
        for (f, made) in [("deep", deep), ("stepped", stepped), ("main", main_calls)] {
            let (entries, exits, noexit) = (
                count_of(&counts, "entry", f),
                count_of(&counts, "exit", f),
                count_of(&counts, "entry-no-exit", f),
            );
            assert_eq!(entries, exits, "{context}: {f}");
            if !left_out {
                assert_eq!(entries + noexit, made, "{context}: {f}: {counts:?}");
            }
            recorded += entries + noexit;
        }
        let dropped = meta_dropped(&trace);
        assert_eq!(
            recorded + dropped,
            deep + stepped + main_calls,
            "{context}: {recorded} recorded, {dropped} dropped: {counts:?}"
        );
    }
    if matches!(how, Sweep::Mcount | Sweep::Fentry) {
        // gmon mode (the default when linked in): the same sweep over the same instructions
        // (the gmon fast path runs through them too), every call counted once in gmon.out.
        let context = format!("{} bpsweep {how:?} gmon", arch.name);
        let gmon = dir.join("gmon.out");
        let _ = std::fs::remove_file(&gmon);
        let l = list.display().to_string();
        let args = [l.as_str(), "40", "walk", "check"]; // the walks reach main (bpsweep.c)
        let out = run_exe(arch, &exe, &args, &[], dir);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let words = numbers_of(&text);
        let [handled, deep, stepped, ..] = words[..] else {
            panic!("{context}: {text}")
        };
        assert!(handled >= 20, "{context}: {text}");
        assert_sweep_gmon(arch, &exe, &gmon, deep, stepped, &context);
    }
}

/// How the runtime gets into a traced program (tests/trace_<arch>.rs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Runtime {
    /// Run with LD_PRELOAD=libinstrfn.so (under qemu through its -E).
    Preload,
    /// libinstrfn.a linked in; traced by environment alone.
    Static,
}

/// Links `obj` with `arch.cc` (no -pg at link time) and `extra` arguments into
/// `<dir>/<stem>-<runtime>`: with libinstrfn.a for [`Runtime::Static`], without for
/// [`Runtime::Preload`]; -lpthread -ldl last.
pub fn link_runtime(
    arch: Arch,
    dir: &Path,
    obj: &Path,
    extra: &[&str],
    stem: &str,
    runtime: Runtime,
) -> PathBuf {
    let lib = runtime_lib(arch, Lib::Static);
    let mut args: Vec<&OsStr> = vec![obj.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    if runtime == Runtime::Static {
        args.push(lib.as_os_str());
    }
    args.extend([OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    cc(arch, &args, &dir.join(format!("{stem}-{runtime:?}")))
}

/// Runs `exe` for `arch` (see [`command`]) in trace mode into `trace` (INSTRFN_MODE=trace and
/// INSTRFN_OUTPUT; the directory removed first, so the trace is this run's alone), with
/// libinstrfn.so preloaded when `preload` (else the runtime must be linked in), and `extra`
/// environment after those; panics unless it exits with status 0 within 300 s.
pub fn run_in_trace_mode(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    preload: bool,
    extra: &[(&str, &str)],
    dir: &Path,
    trace: &Path,
) -> Output {
    let _ = std::fs::remove_dir_all(trace);
    // (Only preloading needs the shared library: musl has none.)
    let lib = if preload {
        runtime_lib(arch, Lib::Shared).display().to_string()
    } else {
        String::new()
    };
    let out = trace.display().to_string();
    let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", out.as_str())];
    if preload {
        env.push(("LD_PRELOAD", lib.as_str()));
    }
    env.extend_from_slice(extra);
    run_within(&mut command(arch, exe, args, &env, dir), 300)
}

/// The arcs gprof must show for calltree.c at `t` threads of `k` rounds (see its header):
/// run calls a once per round, a calls b twice, b calls c once, exactly.
pub fn calltree_arcs(t: u64, k: u64) -> [(&'static str, &'static str, u64); 3] {
    [
        ("run", "a", t * k),
        ("a", "b", 2 * t * k),
        ("b", "c", 2 * t * k),
    ]
}

/// One run of unwind.c: its arguments, the (kind, function, events) expected, extra environment.
pub type UnwindCase = (
    &'static [&'static str],
    &'static [(&'static str, &'static str, u64)],
    &'static [(&'static str, &'static str)],
);

/// The runs of unwind.c (compiled with -pg -rdynamic, linked with -rdynamic) that the trace
/// tests of every architecture make, with the exact events each must leave on `arch`: longjmp,
/// siglongjmp from a handler on an alternate stack, pthread_exit, cancellation, a shadow stack
/// too small (INSTRFN_MAX_DEPTH=4: the frames beyond it are entries without exit), tail calls,
/// backtrace(). The same on every architecture but where a case says otherwise.
pub fn unwind_cases(arch: Arch) -> [UnwindCase; 7] {
    let tailcall: UnwindCase = if arch.triple == RISCV64.triple {
        // riscv64: tail_g, tail-called by tail_f, runs in tail_f's frame with the exit
        // trampoline already in its return slot (the same CFA - 8), so it is an entry without
        // exit and its return is tail_f's exit (riscv64's documented entry-only case,
        // src/arch/riscv64.rs `instrfn_riscv64_trace_path`).
        (
            &["tailcall", "7"],
            &[
                ("entry", "tail_f", 7),
                ("exit", "tail_f", 7),
                ("entry-no-exit", "tail_g", 7),
                ("exit", "tail_g", 0),
            ],
            &[],
        )
    } else {
        (
            &["tailcall", "7"],
            &[("exit", "tail_f", 7), ("exit", "tail_g", 7)],
            &[],
        )
    };
    let backtrace: UnwindCase = if arch.triple == X86_64.triple {
        // x86_64: gcc inlines print_backtrace (static, not `noinline`) into its caller, so it
        // has no events of its own. The cross gccs (aarch64, riscv64, s390x) keep it a call.
        (&["backtrace", "1", "5"], &[("exit", "dive", 6)], &[])
    } else {
        (
            &["backtrace", "1", "5"],
            &[("exit", "dive", 6), ("exit", "print_backtrace", 1)],
            &[],
        )
    };
    [
        (
            &["longjmp", "5", "6"],
            &[
                ("entry", "dive", 35),
                ("unwound", "dive", 35),
                ("exit", "after", 5),
            ],
            &[],
        ),
        (
            &["siglongjmp", "5", "6"],
            &[
                ("entry", "dive", 35),
                ("unwound", "dive", 35),
                ("unwound", "on_signal", 5),
                ("exit", "after", 5),
            ],
            &[],
        ),
        (
            &["exit", "3", "4"],
            &[
                ("entry", "dive", 15),
                ("unwound", "dive", 15),
                ("unwound", "thread_dive", 3),
            ],
            &[],
        ),
        (
            &["cancel", "3", "4"],
            &[
                ("entry", "dive", 15),
                ("unwound", "dive", 15),
                ("unwound", "thread_dive", 3),
            ],
            &[],
        ),
        (
            &["recurse", "2", "10"],
            &[
                ("entry", "dive", 6),
                ("exit", "dive", 6),
                ("entry-no-exit", "dive", 16),
            ],
            &[("INSTRFN_MAX_DEPTH", "4")],
        ),
        tailcall,
        backtrace,
    ]
}

/// Runs unwind.c `exe` (built for `arch`) for each of its [`unwind_cases`], without instrfn (in
/// `dir`) and in trace mode through `traced(args, env)`, which returns the program's output and
/// its trace's one process: every case prints what it prints without instrfn and leaves a
/// balanced trace ([`assert_balanced`]: every entry gets its exit or is closed as unwound) with
/// exactly the case's counts. Then `signal <signals>` in trace mode: signal handlers run
/// instrumented code in the middle of the thread's own calls; the trace is balanced, more than
/// 10 handlers are traced (returning, but on riscv64: see below), and all `signals` calls of
/// work return.
pub fn assert_unwind_runs(
    arch: Arch,
    exe: &Path,
    dir: &Path,
    signals: u64,
    label: &str,
    traced: impl Fn(&[&str], &[(&str, &str)]) -> (String, DumpProcess),
) {
    for (args, expected, env) in unwind_cases(arch) {
        let context = format!("{label}: {}", args.join(" "));
        let plain = run_exe(arch, exe, args, &[], dir);
        let (out, p) = traced(args, env);
        assert_eq!(
            out,
            String::from_utf8_lossy(&plain.stdout),
            "{context}: the program's output"
        );
        assert_counts(&assert_balanced(&p, &context), expected, &context);
    }
    let context = format!("{label}: signal {signals}");
    let (out, p) = traced(&["signal", &signals.to_string()], &[]);
    let handled = assert_balanced(&p, &context);
    if arch.triple == RISCV64.triple {
        // riscv64: on_alarm tail-calls handled (gcc -O2): as with tail_g in unwind_cases,
        // handled is an entry without exit and its return is on_alarm's exit.
        let n = count_of(&handled, "entry-no-exit", "handled");
        assert!(n > 10, "{context}: {handled:?} {out}");
        assert_eq!(count_of(&handled, "exit", "on_alarm"), n, "{context}");
        assert_eq!(count_of(&handled, "exit", "handled"), 0, "{context}");
    } else {
        assert!(
            count_of(&handled, "exit", "handled") > 10,
            "{context}: {handled:?} {out}"
        );
    }
    assert_eq!(
        count_of(&handled, "exit", "work"),
        signals,
        "{context}: {handled:?}"
    );
}

/// Checks the trace of throw.cpp `4 6` (`counts` from [`assert_balanced`]): C++ exceptions
/// thrown through -pg frames with destructors (cleanup pads, _Unwind_Resume), caught and
/// rethrown. Every thrower frame (thrower(6) is 7 frames, thrower(1) 2, per round: 4 rounds) is
/// closed as unwound; the 4 catching frames and main are traced returning.
pub fn assert_cpp_exception_counts(counts: &BTreeMap<(String, String), u64>, context: &str) {
    let expected = [
        ("unwound", "_Z7throwerm", 4 * 9),
        ("exit", "_Z7catcherm", 4),
        ("exit", "main", 1),
    ];
    assert_counts(counts, &expected, context);
}

/// tests/fixtures/c/throw.cpp compiled by g++ `gxx` (`-O2 -c` and `cflags`) into
/// `<dir>/throw.o`.
fn throw_object(gxx: &str, cflags: &[&str], dir: &Path) -> PathBuf {
    require_tool(gxx);
    let obj = dir.join("throw.o");
    run_ok(
        Command::new(gxx)
            .args(["-O2", "-c"])
            .args(cflags)
            .arg(fixture("c/throw.cpp"))
            .arg("-o")
            .arg(&obj),
    );
    obj
}

/// throw.cpp built `-O2` and `cflags` (`-pg`, ...) by `arch`'s g++ `gxx` and linked with
/// -static-libgcc -static-libstdc++ (the program's own unwinder, which no wrapper reaches), run
/// `4 6` plainly and in trace mode with libinstrfn.so preloaded: "caught 8" both times, a
/// balanced trace with the counts of [`assert_cpp_exception_counts`].
pub fn static_libgcc_cpp_runs(arch: Arch, gxx: &str, cflags: &[&str]) {
    let context = format!("{} c++ static-libgcc {}", arch.name, cflags.join(" "));
    let dir = workdir(&format!(
        "{}-trace-cpp-static-libgcc{}",
        arch.name,
        cflags.join("")
    ));
    let obj = throw_object(gxx, cflags, &dir);
    let exe = dir.join("throw");
    run_ok(
        Command::new(gxx)
            .arg(&obj)
            .args(["-static-libgcc", "-static-libstdc++", "-o"])
            .arg(&exe),
    );
    let args = ["4", "6"];
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let plain = run_exe(arch, &exe, &args, &[], &dir);
    assert_eq!(text(&plain), "caught 8\n", "{context}");
    let trace = dir.join("trace");
    let out = run_in_trace_mode(arch, &exe, &args, true, &[], &dir, &trace);
    assert_eq!(text(&out), text(&plain), "{context}");
    let counts = assert_balanced(&instrfn_dump(&trace)[0], &context);
    assert_cpp_exception_counts(&counts, &context);
}

/// throw.cpp compiled by `arch`'s cross g++ `gxx` (`-O2 -c` and `cflags`) into `<dir>`, linked
/// by it for each [`Runtime`] into `<dir>/throw-<runtime>`, and run `4 6` without instrfn and
/// in trace mode through `traced(exe, args, runtime)`, which returns the program's output and
/// its trace's one process: "caught 8" both times, a balanced trace with the counts of
/// [`assert_cpp_exception_counts`], and `extra` (kind, function, events) counts as well.
pub fn cross_cpp_exception_runs(
    arch: Arch,
    gxx: &str,
    cflags: &[&str],
    dir: &Path,
    extra: &[(&str, &str, u64)],
    traced: impl Fn(&Path, &[&str], Runtime) -> (String, DumpProcess),
) {
    let obj = throw_object(gxx, cflags, dir);
    let lib = runtime_lib(arch, Lib::Static);
    let name = dir.file_name().unwrap().to_string_lossy();
    for runtime in [Runtime::Preload, Runtime::Static] {
        let context = format!("{name} {runtime:?}");
        let exe = dir.join(format!("throw-{runtime:?}"));
        let mut cmd = Command::new(gxx);
        cmd.arg(&obj);
        if runtime == Runtime::Static {
            cmd.arg(&lib);
        }
        run_ok(cmd.args(["-lpthread", "-ldl", "-o"]).arg(&exe));
        let args = ["4", "6"];
        let plain = run_exe(arch, &exe, &args, &[], dir);
        assert_eq!(String::from_utf8_lossy(&plain.stdout), "caught 8\n");
        let (out, p) = traced(&exe, &args, runtime);
        assert_eq!(out, "caught 8\n", "{context}");
        let counts = assert_balanced(&p, &context);
        assert_cpp_exception_counts(&counts, &context);
        assert_counts(&counts, extra, &context);
    }
}

/// rust-app `exe` (built for `arch` with [`build_instrumented_rust`]) run `panic 5 4`, `resume
/// 5 4`, `backtrace 4` and `tpanic 4 50 4` in `dir`, without instrfn and in trace mode (into
/// `<dir>/trace`): Rust panics caught by catch_unwind, resume_unwind, std's Backtrace, and
/// panics on 4 threads at once, through instrumented frames. The same output, a balanced trace,
/// and dive's frames (25 per panicking run, 5 for the backtrace, 1000 for the threads) all
/// entered and, with `exits`, all closed (unwound by the panics, returning
/// after the backtrace); without `exits` (where trace mode records entries only) all entries
/// without exit.
pub fn rust_panic_runs(arch: Arch, exe: &Path, dir: &Path, label: &str, exits: bool) {
    for args in [
        &["panic", "5", "4"][..],
        &["resume", "5", "4"][..],
        &["backtrace", "4"][..],
        &["tpanic", "4", "50", "4"][..],
    ] {
        let context = format!("{label} {}", args.join(" "));
        let plain = run_exe(arch, exe, args, &[], dir);
        let trace = dir.join("trace");
        let out = run_in_trace_mode(arch, exe, args, false, &[], dir, &trace);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{context}: the program's output"
        );
        let counts = assert_balanced(&instrfn_dump(&trace)[0], &context);
        let dive = counts
            .keys()
            .find(|(_, n)| n.contains("rust_app4dive"))
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| panic!("{context}: no dive events: {counts:?}"));
        let (frames, closed) = match args[0] {
            "backtrace" => (5, "exit"),
            "tpanic" => (4 * 50 * 5, "unwound"), // 4 threads x 50 panics x 5 frames
            _ => (25, "unwound"),
        };
        if exits {
            assert_eq!(count_of(&counts, "entry", &dive), frames, "{context}");
            assert_eq!(count_of(&counts, closed, &dive), frames, "{context}");
        } else {
            assert_eq!(
                count_of(&counts, "entry-no-exit", &dive),
                frames,
                "{context}"
            );
        }
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

/// INSTRFN_MIN_DURATION=5ms on sleeps.c: `traced(env)` runs it in trace mode with extra
/// environment `env` and returns its output and trace directory, once without the threshold
/// and once with it. Each trace is one process; with the threshold the program still prints
/// its naps. Code built with -finstrument-functions (`instrument_functions`) records every
/// call, as on every architecture (its exit hook has no shadow entry that ties it to its own
/// entry): nothing dropped, the same calls as without the threshold; any other code as
/// [`assert_min_duration_sleeps`] says.
pub fn min_duration_sleeps_runs(
    instrument_functions: bool,
    context: &str,
    traced: impl Fn(&[(&str, &str)]) -> (String, PathBuf),
) {
    let (_, trace) = traced(&[]);
    let mut procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1, "{context}");
    let all = procs.remove(0);
    let (out, trace) = traced(&[("INSTRFN_MIN_DURATION", "5ms")]);
    assert!(out.starts_with("nap10 "), "{context}: {out}");
    let mut procs = instrfn_dump(&trace);
    assert_eq!(procs.len(), 1, "{context}");
    let (kept, dropped) = (procs.remove(0), meta_dropped(&trace));
    if instrument_functions {
        assert_eq!(dropped, 0, "{context}");
        assert_eq!(
            calls_per_function(&kept),
            calls_per_function(&all),
            "{context}"
        );
    } else {
        assert_min_duration_sleeps(&all, &kept, dropped, 5e6, context);
    }
}

/// calltree.c (built -pg for `arch`, linked without the runtime) at 2 threads x 2000 rounds,
/// preloaded, with a trace limit of one 4 KiB chunk: the main thread takes it, and the
/// workers' trampolines write into their sinks from the start (src/trace.rs `enter_sink`).
/// Every event is accounted for exactly: recorded + lost + 2 x dropped = made, also with
/// INSTRFN_MIN_DURATION taking short calls back inside the sink (which reads the sink's zero
/// header as a chunk's), and the program's output is its own.
pub fn assert_full_trace_counted(arch: Arch, obj: &Path, dir: &Path, context: &str) {
    let exe = link_runtime(arch, dir, obj, &[], "calltree-full", Runtime::Preload);
    let (t, k) = (2u64, 2000u64);
    let made = 2 + t * (2 + 10 * k);
    for min in [None, Some("2us")] {
        let context = format!("{context}, INSTRFN_MIN_DURATION {min:?}");
        let trace = dir.join("trace-full");
        let mut env = vec![("INSTRFN_BUFSIZE", "4K"), ("INSTRFN_TRACE_LIMIT", "4K")];
        if let Some(m) = min {
            env.push(("INSTRFN_MIN_DURATION", m));
        }
        let out = run_in_trace_mode(arch, &exe, &["2", "2000"], true, &env, dir, &trace);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "calltree 2 2000",
            "{context}"
        );
        let procs = instrfn_dump(&trace);
        assert_eq!(procs.len(), 1, "{context}");
        let recorded = procs[0]
            .threads
            .values()
            .flatten()
            .filter(|e| matches!(e.kind.as_str(), "entry" | "exit" | "entry-no-exit"))
            .count() as u64;
        let (lost, dropped) = (procs[0].lost, meta_dropped(&trace));
        assert!(lost > 0, "{context}: nothing lost");
        assert_eq!(
            recorded + lost + 2 * dropped,
            made,
            "{context}: {recorded} recorded, {lost} lost, {dropped} calls dropped"
        );
    }
}
