//! How libinstrfn.so is linked, on every target: it needs libc.so.6, and every libc symbol it
//! takes from there carries a version. A library linked without libc (no `NEEDED libc.so.6`)
//! binds its libc symbols unversioned and misses glibc's libc_nonshared.a: programs preloaded
//! with it die at start where libc.so.6 exports no old compat `pthread_atfork` (aarch64,
//! riscv64). The test command builds the aarch64 library as part of the whole workspace, the
//! way a user cross-building types it, and the aarch64 tests load that library under qemu
//! (one of them here).

use std::path::PathBuf;
use std::process::Command;

const TARGETS: &[&str] = &[
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "riscv64gc-unknown-linux-gnu",
    "s390x-unknown-linux-gnu",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shared library the test command built for `triple`.
fn library(triple: &str) -> PathBuf {
    let path = if triple == TARGETS[0] {
        root().join("target/release/libinstrfn.so")
    } else {
        root()
            .join("target")
            .join(triple)
            .join("release/libinstrfn.so")
    };
    assert!(
        path.is_file(),
        "{} is missing: run scripts/test.sh (it builds the runtime for every target)",
        path.display()
    );
    path
}

fn readelf(args: &[&str], lib: &PathBuf) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(lib)
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "readelf {args:?} {}", lib.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn linking_every_target_needs_libc() {
    for triple in TARGETS {
        let lib = library(triple);
        let dynamic = readelf(&["-d", "-W"], &lib);
        assert!(
            dynamic.contains("Shared library: [libc.so.6]"),
            "{triple}: {} does not need libc.so.6:\n{dynamic}",
            lib.display()
        );
    }
}

#[test]
fn linking_every_target_versions_its_libc_symbols() {
    for triple in TARGETS {
        let lib = library(triple);
        let symbols = readelf(&["--dyn-syms", "-W"], &lib);
        let mut undefined = 0;
        let unversioned: Vec<&str> = symbols
            .lines()
            .filter(|l| l.contains(" UND ") && l.contains(" GLOBAL "))
            .inspect(|_| undefined += 1)
            .filter(|l| !l.split_whitespace().nth(7).is_some_and(|n| n.contains('@')))
            .collect();
        assert!(
            undefined > 10,
            "{triple}: {undefined} undefined symbols?\n{symbols}"
        );
        assert!(
            unversioned.is_empty(),
            "{triple}: {} binds libc symbols without a version:\n{}",
            lib.display(),
            unversioned.join("\n")
        );
    }
}

#[test]
fn linking_workspace_built_aarch64_library_loads_under_qemu() {
    // A program that makes one counting call (it calls _mcount itself, as -pg code does),
    // preloaded with the aarch64 library: it must start, record and exit cleanly.
    let dir = root().join("target/tests/linking");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("hello.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n\
         __attribute__((noinline)) static int work(int x) { return x * 3; }\n\
         int main(void) { printf(\"%d\\n\", work(14)); return 0; }\n",
    )
    .unwrap();
    let exe = dir.join("hello");
    let cc = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O1", "-pg", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("aarch64-linux-gnu-gcc runs");
    assert!(cc.success());
    let out = Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu", "-E"])
        .arg(format!(
            "LD_PRELOAD={}",
            library("aarch64-unknown-linux-gnu").display()
        ))
        .args(["-E", "INSTRFN_VERBOSE=1"])
        .arg(&exe)
        .current_dir(&dir)
        .output()
        .expect("qemu-aarch64 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout) == "42\n",
        "the program did not run: {:?}\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("symbol lookup error") && stderr.contains("wrote gmon.out"),
        "{stderr}"
    );
}
