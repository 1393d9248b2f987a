//! Toolchains and targets: the architectures the tests build for, the compilers and flags of
//! each, the runtime artifacts per target (checked to be built and current), the Rust fixture
//! crates built with nightly's instrumentation flags, the `instrfn` command, and where the
//! runtime's assembly of an architecture lives.

use super::run::run_ok;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A target the tests build for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arch {
    /// Short name, used in test and work directory names.
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

/// The architecture a test name's token stands for (see `feature_tests!`).
pub fn arch(name: &str) -> Arch {
    match name {
        "x86_64" => X86_64,
        "aarch64" => AARCH64,
        "riscv64" => RISCV64,
        "s390x" => S390X,
        _ => panic!("no architecture {name}"),
    }
}

/// The runtime's assembly for `arch`: every `.s` file of src/arch/<arch>/, in the order
/// trampoline_asm! assembles them. The one place that knows where it lives.
pub fn asm_source(arch: Arch) -> String {
    let dir = root().join("src/arch").join(arch.name);
    let order = [
        "base.s",
        "events.s",
        "counting.s",
        "exit.s",
        "guarded.s",
        "xray.s",
        "return.s",
    ];
    let mut text = String::new();
    for name in order {
        let path = dir.join(name);
        if path.is_file() {
            text += &std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    assert!(!text.is_empty(), "no assembly in {}", dir.display());
    text
}

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

/// libinstrfn.so for `arch`, as LD_PRELOAD takes it.
pub fn preload_path(arch: Arch) -> String {
    runtime_lib(arch, Lib::Shared).display().to_string()
}

/// Compiles and links with `arch.cc`: `args` are passed as they are, `-o out` appended.
pub fn cc(arch: Arch, args: &[&OsStr], out: &Path) -> PathBuf {
    require_tool(arch.cc);
    run_ok(Command::new(arch.cc).args(args).arg("-o").arg(out));
    out.to_path_buf()
}

/// The compiler of a fixture object: the architecture's gcc, or clang for its target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Compiler {
    Gcc,
    Clang,
}

/// clang's `--target` for `arch` (Debian's clang cross-compiles with the gcc cross
/// toolchains' headers); none for the host.
pub fn clang_target(arch: Arch) -> Option<String> {
    (arch.qemu.is_some()).then(|| format!("--target={}-linux-gnu", arch.name))
}

/// The flags the gmon, register and trace fixtures of `arch` are built with: s390x code for
/// z13, so that the vector registers are live (and checked); none elsewhere.
pub fn arch_flags(arch: Arch) -> &'static [&'static str] {
    if arch.name == "s390x" {
        &["-march=z13"]
    } else {
        &[]
    }
}

/// Compiles `tests/fixtures/c/<src>` for `arch` with `compiler`, `-O2 -c` and `flags` into
/// `<dir>/<obj>` (not linked).
pub fn compile(
    arch: Arch,
    compiler: Compiler,
    dir: &Path,
    src: &str,
    flags: &[&str],
    obj: &str,
) -> PathBuf {
    let obj = dir.join(obj);
    let source = fixture(&format!("c/{src}"));
    let mut args: Vec<&OsStr> = ["-O2", "-c"].iter().map(OsStr::new).collect();
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    match compiler {
        Compiler::Gcc => cc(arch, &args, &obj),
        Compiler::Clang => {
            require_tool("clang");
            let mut cmd = Command::new("clang");
            cmd.args(clang_target(arch));
            run_ok(cmd.args(&args).arg("-o").arg(&obj));
            obj
        }
    }
}

/// How the runtime gets into a traced program.
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
