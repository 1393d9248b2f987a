//! Builders of the C fixtures (tests/fixtures/c): a -pg program linked each way the runtime can
//! come in (gcrt and preloaded, preloaded, linked statically) for any architecture, the host's
//! objects and programs built with other flags (C and C++), and the -pg library libwork.so.

use super::run::run_ok;
use super::toolchain::{
    Arch, Compiler, Lib, X86_64, arch_flags, cc, compile, fixture, require_tool, runtime_lib,
};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a -pg fixture is linked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Link {
    /// `-pg` at link time too: gcrt1.o, glibc's profiler hooks; run with LD_PRELOAD.
    GcrtPreload,
    /// Compiled with -pg, linked without: no gcrt; run with LD_PRELOAD.
    Preload,
    /// libinstrfn.a linked into the executable; no preload.
    Static,
}

/// Compiles `tests/fixtures/c/<src>` for `arch` with gcc `-O2 -pg`, `extra` and the
/// architecture's flags ([`arch_flags`]) into `<dir>/<stem>.o`, and links it as `link` says
/// into `<dir>/<stem>-<link>`.
pub fn build_c(arch: Arch, dir: &Path, src: &str, extra: &[&str], link: Link) -> PathBuf {
    let stem = src.trim_end_matches(".c");
    let mut flags = vec!["-pg"];
    flags.extend_from_slice(extra);
    flags.extend_from_slice(arch_flags(arch));
    let obj = compile(arch, Compiler::Gcc, dir, src, &flags, &format!("{stem}.o"));
    link_c(arch, dir, &obj, stem, link)
}

/// Links `obj` with `arch.cc` as `link` says (-pg at link time only for
/// [`Link::GcrtPreload`]) into `<dir>/<stem>-<link>`.
pub fn link_c(arch: Arch, dir: &Path, obj: &Path, stem: &str, link: Link) -> PathBuf {
    let lib = runtime_lib(arch, Lib::Static);
    let mut link_args: Vec<&OsStr> = vec![obj.as_os_str()];
    match link {
        Link::GcrtPreload => link_args.push(OsStr::new("-pg")),
        Link::Preload => {}
        Link::Static => link_args.push(lib.as_os_str()),
    }
    link_args.extend([OsStr::new("-lpthread"), OsStr::new("-ldl")]);
    cc(arch, &link_args, &dir.join(format!("{stem}-{link:?}")))
}

/// The environment to run a fixture linked `link` with: `extra`, and LD_PRELOAD=`preload`
/// unless the runtime is linked in.
pub fn env_for<'a>(
    link: Link,
    preload: &'a str,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut env: Vec<(&str, &str)> = extra.to_vec();
    if link != Link::Static {
        env.push(("LD_PRELOAD", preload));
    }
    env
}

/// tests/fixtures/c/`src` compiled with the host's gcc -O2 `flags` into `<dir>/<stem>.o` (not
/// linked).
pub fn c_object(dir: &Path, src: &str, flags: &[&str]) -> PathBuf {
    let source = fixture(&format!("c/{src}"));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    cc(X86_64, &args, &dir.join(src).with_extension("o"))
}

/// Builds `tests/fixtures/c/<src>` on the host (gcc, or g++ for a .cpp file) with `flags` and
/// -O2, linked with `link_flags` (not with the runtime) into `<dir>/<stem>`.
pub fn build_plain(dir: &Path, src: &str, flags: &[&str], link_flags: &[&str]) -> PathBuf {
    let source = fixture(&format!("c/{src}"));
    let stem = src.split('.').next().unwrap();
    let obj = dir.join(format!("{stem}.o"));
    let mut args: Vec<&OsStr> = vec![OsStr::new("-O2"), OsStr::new("-c")];
    args.extend(flags.iter().map(OsStr::new));
    args.push(source.as_os_str());
    let compiler = if src.ends_with(".cpp") { "g++" } else { "gcc" };
    require_tool(compiler);
    run_ok(Command::new(compiler).args(&args).arg("-o").arg(&obj));
    let exe = dir.join(stem);
    run_ok(
        Command::new(compiler)
            .arg(&obj)
            .args(link_flags)
            .arg("-o")
            .arg(&exe),
    );
    exe
}

/// A host C fixture built with -O2 -pg, linked without -pg and without the runtime (to run
/// preloaded).
pub fn build_pg(dir: &Path, src: &str) -> PathBuf {
    build_plain(dir, src, &["-pg"], &["-lpthread"])
}

/// Builds tests/fixtures/c/libwork.c for `arch` as `dir/<name>` (`-O2 -pg -fPIC -shared`, plus
/// `extra`).
pub fn build_library(arch: Arch, dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = fixture("c/libwork.c");
    let mut args: Vec<&OsStr> = ["-O2", "-pg", "-fPIC", "-shared"]
        .iter()
        .map(OsStr::new)
        .collect();
    args.extend(extra.iter().map(OsStr::new));
    args.push(src.as_os_str());
    cc(arch, &args, &dir.join(name))
}
