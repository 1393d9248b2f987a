//! The nightly toolchain and the instrumentation flags it accepts.
//!
//! Which toolchain: `--toolchain`, else the one of `cargo +TOOLCHAIN instrfn`, else
//! `$INSTRFN_NIGHTLY`, else `nightly`. Which flags: the first spelling of each framework that
//! the toolchain's rustc accepts, probed by compiling an empty crate, in the order
//! `scripts/instrument-flags` tries them (tests/cargo_instrfn.rs checks that the two agree).
//! Uses rustup's `rustc +TOOLCHAIN` and std only.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The toolchain the tests and the docs name: it has every framework.
pub const PINNED: &str = "nightly-2026-10-30";

/// What a missing fentry or toolchain needs, said in the errors.
const NEWER: &str = "fentry, #[instrument_fn] and the gcrt link need a nightly from 2026-07-01 on";

/// A toolchain that runs: its name and what `rustc -vV` says.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub name: String,
    /// The host triple.
    pub host: String,
    /// rustc's commit date (a nightly's is the day before its name's).
    pub date: String,
    /// `rustc -vV` in full: the key of the probe cache.
    pub version: String,
}

/// The toolchain name: `--toolchain`, else `cargo +NAME instrfn` (rustup says so in
/// RUSTUP_TOOLCHAIN_SOURCE=cli), else $INSTRFN_NIGHTLY, else `nightly`.
pub fn choose(given: Option<&str>) -> String {
    if let Some(name) = given {
        return name.to_string();
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if env("RUSTUP_TOOLCHAIN_SOURCE").as_deref() == Some("cli")
        && let Some(name) = env("RUSTUP_TOOLCHAIN")
    {
        return name;
    }
    env("INSTRFN_NIGHTLY").unwrap_or_else(|| "nightly".to_string())
}

/// `rustc +NAME` with rustup's automatic install off: a missing toolchain is an error to
/// report, not a download.
pub fn rustc(name: &str) -> Command {
    let mut cmd = Command::new("rustc");
    cmd.arg(format!("+{name}"))
        .env("RUSTUP_AUTO_INSTALL", "0")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER");
    cmd
}

/// Checks that toolchain `name` is installed and runs; reads its host and date.
pub fn check(name: &str) -> Result<Toolchain, String> {
    let out = rustc(name)
        .arg("-vV")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!("cannot run rustc: {e}: install Rust with rustup (https://rustup.rs)")
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("not installed") {
            return Err(format!(
                "toolchain `{name}` is not installed: run `rustup toolchain install {name} \
                 --profile minimal` ({NEWER}; instrfn is tested with {PINNED})"
            ));
        }
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("rustc +{name} does not run: {}", first.trim()));
    }
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |k: &str| {
        version
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
    };
    let host = field("host:").ok_or_else(|| format!("rustc +{name} -vV names no host"))?;
    let date = field("commit-date:").unwrap_or_else(|| "unknown".to_string());
    Ok(Toolchain {
        name: name.to_string(),
        host,
        date,
        version,
    })
}

/// How functions call the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framework {
    Mcount,
    Fentry,
    /// XRay sleds with these `-Zinstrument-xray` options.
    Xray(String),
}

impl Framework {
    /// A short name, for directories and messages.
    pub fn label(&self) -> String {
        match self {
            Framework::Mcount => "mcount".to_string(),
            Framework::Fentry => "fentry".to_string(),
            Framework::Xray(opts) => {
                let tag: String = opts
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                format!("xray-{tag}")
            }
        }
    }

    /// The spellings to try, first accepted wins: the order of scripts/instrument-flags.
    fn candidates(&self) -> Vec<String> {
        match self {
            Framework::Xray(opts) => {
                let mut v = Vec::new();
                // The RFC's spelling carries no options yet: tried for the default only.
                if opts == "always" {
                    v.push("-Zinstrument-function=xray".to_string());
                }
                v.push(format!("-Zinstrument-xray={opts}"));
                v
            }
            Framework::Mcount | Framework::Fentry => {
                let kind = self.label();
                let mut v = vec![
                    format!("-Zinstrument-function={kind}"),
                    format!("-Zinstrument-mcount={kind}"),
                ];
                if *self == Framework::Mcount {
                    v.push("-Zinstrument-mcount".to_string());
                }
                v
            }
        }
    }
}

/// Probes rustc flags, remembering the answers per toolchain version in a file (when given).
pub struct Prober<'a> {
    tc: &'a Toolchain,
    cache: Option<PathBuf>,
    known: BTreeMap<String, bool>,
    /// rustc's first error line for each rejected flag.
    why: BTreeMap<String, String>,
}

impl<'a> Prober<'a> {
    pub fn new(tc: &'a Toolchain, cache: Option<PathBuf>) -> Self {
        let key = fnv(&tc.version);
        let mut known = BTreeMap::new();
        if let Some(text) = cache.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
            for line in text.lines() {
                let mut f = line.split(' ');
                if let (Some(k), Some(flag), Some(ok), None) =
                    (f.next(), f.next(), f.next(), f.next())
                    && k == key
                    && (ok == "yes" || ok == "no")
                {
                    known.insert(flag.to_string(), ok == "yes");
                }
            }
        }
        Prober {
            tc,
            cache,
            known,
            why: BTreeMap::new(),
        }
    }

    /// Whether rustc accepts `flag`: an empty crate compiled with it. (Never `-o /dev/null`:
    /// rustc renames its output into place.)
    fn accepts(&mut self, flag: &str) -> bool {
        if let Some(&ok) = self.known.get(flag) {
            return ok;
        }
        let scratch =
            std::env::temp_dir().join(format!("cargo-instrfn-probe-{}", std::process::id()));
        let out = rustc(&self.tc.name)
            .arg(flag)
            .args(["--crate-type", "lib", "--emit", "metadata", "--out-dir"])
            .arg(&scratch)
            .arg("-")
            .stdin(Stdio::null())
            .output();
        let _ = std::fs::remove_dir_all(&scratch);
        let ok = match out {
            Ok(o) if o.status.success() => true,
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                if let Some(line) = err.lines().find(|l| l.starts_with("error")) {
                    self.why.insert(flag.to_string(), line.trim().to_string());
                }
                false
            }
            Err(_) => false,
        };
        self.known.insert(flag.to_string(), ok);
        if let Some(path) = &self.cache
            && let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        {
            // One short line per write: appends from concurrent runs do not interleave.
            let _ = f.write_all(
                format!(
                    "{} {flag} {}\n",
                    fnv(&self.tc.version),
                    if ok { "yes" } else { "no" }
                )
                .as_bytes(),
            );
        }
        ok
    }

    /// The first accepted spelling of `fw`, if any.
    fn first(&mut self, fw: &Framework) -> Option<String> {
        fw.candidates().into_iter().find(|f| self.accepts(f))
    }

    /// The framework asked for (or the default: fentry where rustc has it, else mcount) and
    /// its flag; an error line when rustc has none.
    pub fn flags(&mut self, asked: Option<Framework>) -> Result<(Framework, String), String> {
        let tc = self.tc;
        let Some(fw) = asked else {
            if let Some(flag) = self.first(&Framework::Fentry) {
                return Ok((Framework::Fentry, flag));
            }
            return self.flags(Some(Framework::Mcount));
        };
        if let Some(flag) = self.first(&fw) {
            return Ok((fw, flag));
        }
        let arch = tc.host.split('-').next().unwrap_or("");
        let who = format!("rustc +{} ({})", tc.name, tc.date);
        Err(match &fw {
            Framework::Fentry if !matches!(arch, "x86_64" | "s390x") => format!(
                "--fentry: rustc has no fentry for {arch} (x86_64 and s390x only): use --mcount"
            ),
            Framework::Fentry => format!(
                "--fentry: {who} accepts no fentry flag: {NEWER} (rustup toolchain install \
                 {PINNED}, then --toolchain {PINNED}), or use --mcount"
            ),
            Framework::Mcount => format!(
                "{who} accepts no -Zinstrument-mcount: instrumentation needs a nightly \
                 toolchain (rustup toolchain install {PINNED})"
            ),
            Framework::Xray(opts) => {
                let why = self
                    .why
                    .get(&format!("-Zinstrument-xray={opts}"))
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default();
                format!("--xray={opts}: {who} rejects -Zinstrument-xray={opts}{why}")
            }
        })
    }
}

/// The standard library's sources (the rust-src component), which -Zbuild-std needs.
pub fn has_rust_src(tc: &Toolchain) -> bool {
    let Ok(out) = rustc(&tc.name).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    out.status.success()
        && Path::new(&sysroot)
            .join("lib/rustlib/src/rust/library/Cargo.lock")
            .is_file()
}

/// FNV-1a of `text`, in hex: a stable key for the probe cache.
fn fnv(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
