//! The instrumented build: `cargo +NIGHTLY build --target HOST` into the instrfn target
//! directory, with the instrumentation flag added to the user's rustflags, and the executable
//! found in cargo's JSON messages. Uses args, package, toolchain and serde_json.
//!
//! The flag reaches the host target's crates only: with an explicit `--target`, cargo gives
//! rustflags to the target's crates and not to build scripts and proc macros, which run during
//! the build with no runtime to call.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::args::Args;
use crate::package::Selection;
use crate::toolchain::Toolchain;

/// How the flags reach rustc.
#[derive(Debug, PartialEq, Eq)]
pub enum Rustflags {
    /// CARGO_ENCODED_RUSTFLAGS: the user's environment flags, then ours.
    Encoded(String),
    /// `--config target.<host>.rustflags=[...]`: cargo joins it to the configured
    /// `target.<host>.rustflags`; when there are none, the configured `build.rustflags` come
    /// first (cargo would not use them next to a target's rustflags).
    Config(Vec<String>),
}

/// `cargo +TOOLCHAIN config get KEY` (nightly's `-Zunstable-options`), started.
fn config_get(tc: &Toolchain, key: &str) -> Option<std::process::Child> {
    Command::new("cargo")
        .arg(format!("+{}", tc.name))
        .args([
            "-Zunstable-options",
            "config",
            "get",
            "--format",
            "json-value",
            key,
        ])
        .env("RUSTUP_AUTO_INSTALL", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// The words of a `config_get`, or None when the key is not set.
fn config_words(child: Option<std::process::Child>) -> Option<Vec<String>> {
    let out = child?.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    match serde_json::from_slice::<Value>(&out.stdout).ok()? {
        Value::String(s) => Some(s.split_whitespace().map(String::from).collect()),
        Value::Array(a) => Some(
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
        ),
        _ => None,
    }
}

/// Our flags added to the user's, where cargo would take the user's from: the environment
/// (CARGO_ENCODED_RUSTFLAGS, then RUSTFLAGS), else the configuration.
pub fn rustflags(tc: &Toolchain, ours: &[String]) -> Rustflags {
    if let Some(enc) = std::env::var_os("CARGO_ENCODED_RUSTFLAGS") {
        let mut words: Vec<String> = enc
            .to_string_lossy()
            .split('\x1f')
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect();
        words.extend(ours.iter().cloned());
        return Rustflags::Encoded(words.join("\x1f"));
    }
    if let Some(flags) = std::env::var_os("RUSTFLAGS") {
        let mut words: Vec<String> = flags
            .to_string_lossy()
            .split_whitespace()
            .map(String::from)
            .collect();
        words.extend(ours.iter().cloned());
        return Rustflags::Encoded(words.join("\x1f"));
    }
    let target = config_get(tc, &format!("target.{}.rustflags", tc.host));
    let build = config_get(tc, "build.rustflags");
    let (target, build) = (config_words(target), config_words(build));
    let mut words = Vec::new();
    if target.is_none() {
        words.extend(build.into_iter().flatten());
    }
    words.extend(ours.iter().cloned());
    Rustflags::Config(words)
}

/// What the build made.
#[derive(Debug)]
pub struct Built {
    pub exe: PathBuf,
    /// Whether the profile has debug info (source lines).
    pub debuginfo: bool,
}

/// Whether cargo's `profile.debuginfo` of an artifact means some debug info.
fn has_debuginfo(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_u64() != Some(0),
        Value::String(s) => s != "none" && s != "0",
        Value::Bool(b) => *b,
        _ => true,
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    let c = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    c(a) == c(b)
}

/// Builds the selected target and returns its executable. Cargo's messages and diagnostics
/// go to stderr as usual; a failure is one line after them.
pub fn build(
    tc: &Toolchain,
    args: &Args,
    sel: &Selection,
    manifest: &Path,
    target_dir: &Path,
    flags: &Rustflags,
) -> Result<Built, String> {
    let mut cmd = Command::new("cargo");
    cmd.arg(format!("+{}", tc.name))
        .args([
            "build",
            "--message-format=json-render-diagnostics",
            "--target",
        ])
        .arg(&tc.host)
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--profile", args.profile()])
        .arg("--manifest-path")
        .arg(manifest)
        .args(["-p", &sel.package.spec])
        .arg(format!("--{}", sel.kind.name()))
        .arg(&sel.name);
    for f in &args.features {
        cmd.args(["--features", f]);
    }
    if args.all_features {
        cmd.arg("--all-features");
    }
    if args.no_default_features {
        cmd.arg("--no-default-features");
    }
    if args.build_std {
        cmd.arg("-Zbuild-std");
    }
    match flags {
        Rustflags::Encoded(s) => {
            cmd.env("CARGO_ENCODED_RUSTFLAGS", s)
                .env_remove("RUSTFLAGS");
        }
        Rustflags::Config(words) => {
            let array = serde_json::to_string(words).unwrap_or_default();
            cmd.arg("--config")
                .arg(format!("target.{}.rustflags={array}", tc.host));
        }
    }
    // RUSTC may name another toolchain's compiler, which takes no -Z flags.
    cmd.env_remove("RUSTC")
        .env("RUSTUP_AUTO_INSTALL", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run cargo: {e}"))?;
    let mut found = None;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let Ok(line) = line else { break };
        let Ok(m) = serde_json::from_str::<Value>(&line) else {
            eprintln!("{line}");
            continue;
        };
        if m["reason"] != "compiler-artifact"
            || m["target"]["name"] != sel.name.as_str()
            || !m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == sel.kind.name()))
            || !m["manifest_path"]
                .as_str()
                .is_some_and(|p| same_file(Path::new(p), &sel.package.manifest_path))
        {
            continue;
        }
        if let Some(exe) = m["executable"].as_str() {
            found = Some(Built {
                exe: PathBuf::from(exe),
                debuginfo: has_debuginfo(&m["profile"]["debuginfo"]),
            });
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "the instrumented build of {} `{}` failed (cargo's messages above)",
            sel.kind.name(),
            sel.name
        ));
    }
    found.ok_or_else(|| {
        format!(
            "cargo built no executable for {} `{}`",
            sel.kind.name(),
            sel.name
        )
    })
}

/// The hint for a profile without debug info, naming the two ways to add it.
pub fn debuginfo_hint(profile: &str) -> String {
    let env = profile.to_ascii_uppercase().replace('-', "_");
    format!(
        "hint: profile `{profile}` has no debug info: names come from symbols, but source lines \
         (--lines) need it: add `[profile.{profile}] debug = 1` to Cargo.toml, or set \
         CARGO_PROFILE_{env}_DEBUG=1"
    )
}
