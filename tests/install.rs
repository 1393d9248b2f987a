//! `cargo install` of the CLI package gives an `instrfn` and a `cargo-instrfn` that work with
//! nothing else present: installed into a fresh root (with this workspace's target directory,
//! so nothing is rebuilt), then run from a directory outside the checkout, with a PATH and a
//! HOME that name no part of it. The runtime is the copy built into `instrfn`, written to
//! the new HOME's cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The directory cargo and rustup's proxies live in (not part of the checkout).
fn cargo_bin() -> PathBuf {
    let out = run(Command::new("sh").args(["-c", "command -v cargo"]));
    let cargo = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    cargo.parent().unwrap().to_path_buf()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            if entry.file_name() != "target" {
                copy_dir(&src, &dst);
            }
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn installed_commands_work_alone() {
    // Outside the checkout: the system's temporary directory.
    let base = std::env::temp_dir().join(format!("instrfn-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (prefix, home, work) = (base.join("root"), base.join("home"), base.join("work"));
    for d in [&home, &work] {
        std::fs::create_dir_all(d).unwrap();
    }
    run(Command::new("cargo")
        .args(["install", "--locked", "--offline", "--quiet", "--path"])
        .arg(root().join("cli"))
        .arg("--root")
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", root().join("target")));
    let bin = prefix.join("bin");
    for name in ["instrfn", "cargo-instrfn"] {
        assert!(bin.join(name).is_file(), "cargo install made no {name}");
    }
    let entries: Vec<_> = std::fs::read_dir(&bin).unwrap().flatten().collect();
    assert_eq!(
        entries.len(),
        2,
        "cargo install put more than the two commands in bin/"
    );
    let path = format!("{}:{}:/usr/bin:/bin", bin.display(), cargo_bin().display());
    let env = |cmd: &mut Command| {
        cmd.current_dir(&work)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .env(
                "INSTRFN_NIGHTLY",
                std::env::var("INSTRFN_NIGHTLY").unwrap_or_else(|_| "nightly".into()),
            );
        if let Some(rustup) = std::env::var_os("RUSTUP_HOME") {
            cmd.env("RUSTUP_HOME", rustup);
        }
        if let Some(cargo) = std::env::var_os("CARGO_HOME") {
            cmd.env("CARGO_HOME", cargo);
        }
    };

    // instrfn record of a -pg C program: the built-in runtime, written to HOME's cache.
    let src = work.join("prog.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) int f(int x) { return x + 1; }\n\
         int main(void) { int s = 0; for (int i = 0; i < 1000; i++) s = f(s); return s != 1000; }\n",
    )
    .unwrap();
    run(Command::new("gcc")
        .args(["-O1", "-pg", "-o"])
        .arg(work.join("prog"))
        .arg(&src));
    let mut record = Command::new("instrfn");
    env(&mut record);
    let out = run(record.args(["record", "-o", "trace", "--", "./prog"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2002 events") && stderr.contains("0 lost"),
        "{stderr}"
    );
    let cache = home.join(".cache/instrfn");
    let cached: Vec<_> = std::fs::read_dir(&cache)
        .unwrap_or_else(|e| panic!("no runtime cache in {}: {e}", cache.display()))
        .flatten()
        .collect();
    assert_eq!(cached.len(), 1, "one runtime in the cache");
    assert!(cached[0].path().join("libinstrfn.so").is_file());

    // cargo instrfn in a package of its own, outside the checkout.
    let package = work.join("cargo-app");
    copy_dir(&root().join("tests/fixtures/cargo-app"), &package);
    let mut cargo = Command::new("cargo");
    env(&mut cargo);
    let out = run(cargo
        .current_dir(&package)
        .args(["instrfn", "--mcount", "--", "200"]));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report
            .lines()
            .any(|l| l.contains("cargo_app::work") && l.split_whitespace().next() == Some("200")),
        "no exact count of cargo_app::work in the report:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&base).unwrap();
}
