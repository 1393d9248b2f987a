//! Builds the runtime (libinstrfn.so) for the target this command is built for, and hands its
//! path to the command, which embeds it: `cargo install` installs binaries only, and
//! `instrfn record` must work with nothing beside it.
//!
//! The runtime is built by a cargo of its own, with a target directory of its own (in
//! OUT_DIR: a nested build in the outer one's would wait for its lock forever), from the
//! workspace this package sits in, with the workspace's lock file and release profile. None of
//! the flags the outer build was given reach it: a user's RUSTFLAGS may ask for
//! instrumentation, which the runtime's own artifacts never carry.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    let target = std::env::var("TARGET").unwrap();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    for watched in [
        "src",
        "preload",
        "format",
        "build.rs",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=INSTRFN_RUNTIME_LIB");
    // A runtime built elsewhere (packagers, or a build without cargo at hand).
    if let Some(given) = std::env::var_os("INSTRFN_RUNTIME_LIB") {
        embed(Path::new(&given));
        return;
    }
    if !root.join("preload/Cargo.toml").is_file() {
        fail(&format!(
            "the runtime's sources are not beside this package ({} has no preload/): build \
             from a checkout of the instrfn repository, or set INSTRFN_RUNTIME_LIB to a \
             libinstrfn.so",
            root.display()
        ));
    }
    let target_dir = out.join("runtime");
    let build = |offline: bool| {
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.current_dir(&root)
            .args(["build", "--release", "--locked", "-p", "instrfn-preload"])
            .arg("--target")
            .arg(&target)
            .arg("--target-dir")
            .arg(&target_dir);
        if offline {
            cmd.arg("--offline");
        }
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_BUILD_TARGET",
        ] {
            cmd.env_remove(var);
        }
        cmd.output()
    };
    // Offline first: every crate the runtime needs is usually in cargo's cache already (the
    // outer build fetched its own); online only if that is not enough.
    let first = build(true);
    let output = match first {
        Ok(o) if o.status.success() => o,
        _ => build(false).unwrap_or_else(|e| fail(&format!("cannot run cargo: {e}"))),
    };
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        fail("building the runtime (cargo build -p instrfn-preload) failed; see above");
    }
    embed(&target_dir.join(&target).join("release/libinstrfn.so"));
}

/// Passes the runtime's path to the command (`INSTRFN_EMBEDDED_RUNTIME`, read by
/// `include_bytes!` in src/runtime_lib.rs).
fn embed(lib: &Path) {
    if !lib.is_file() {
        fail(&format!("{} was not built", lib.display()));
    }
    println!("cargo:rerun-if-changed={}", lib.display());
    println!("cargo:rustc-env=INSTRFN_EMBEDDED_RUNTIME={}", lib.display());
}

fn fail(message: &str) -> ! {
    eprintln!("instrfn-cli build: {message}");
    std::process::exit(1);
}
