//! The Cargo package and the executable target to run: finds Cargo.toml as cargo does, reads
//! `cargo metadata`, and picks the package and target the options name (or the one `cargo run`
//! would pick). Every refusal is one line. Uses args, toolchain and serde_json.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::args::Args;
use crate::toolchain::Toolchain;

/// Kinds of executable targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bin,
    Example,
    Test,
    Bench,
}

impl Kind {
    /// Cargo's name for the kind (target kinds, and the option that selects one).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bin => "bin",
            Kind::Example => "example",
            Kind::Test => "test",
            Kind::Bench => "bench",
        }
    }
}

/// A target of a package, from `cargo metadata`.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub kind: Vec<String>,
    pub crate_types: Vec<String>,
}

/// A workspace member.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    /// Its package id spec (what `-p` takes).
    pub spec: String,
    pub manifest_path: PathBuf,
    pub targets: Vec<Target>,
    pub default_run: Option<String>,
}

impl Package {
    fn of(&self, kind: Kind) -> Vec<&Target> {
        self.targets
            .iter()
            .filter(|t| t.kind.iter().any(|k| k == kind.name()))
            .collect()
    }
}

/// What `cargo metadata --no-deps` says about the workspace.
#[derive(Debug)]
pub struct Workspace {
    pub target_directory: PathBuf,
    pub members: Vec<Package>,
    /// Names of the default members (all members when cargo does not say).
    pub default_members: Vec<String>,
}

/// The package and target to build and run.
#[derive(Debug, Clone)]
pub struct Selection {
    pub package: Package,
    pub kind: Kind,
    pub name: String,
}

/// The manifest cargo would use: `--manifest-path`, else the nearest Cargo.toml from the
/// current directory up.
pub fn locate(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        if !p.is_file() {
            return Err(format!("--manifest-path {}: no such file", p.display()));
        }
        return Ok(std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    let cwd = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    cwd.ancestors()
        .map(|d| d.join("Cargo.toml"))
        .find(|m| m.is_file())
        .ok_or_else(|| {
            format!(
                "not inside a Cargo package: no Cargo.toml in {} or any parent directory (cd \
                 into a package, or pass --manifest-path)",
                cwd.display()
            )
        })
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `cargo +TOOLCHAIN metadata --no-deps` on `manifest`.
pub fn metadata(tc: &Toolchain, manifest: &Path) -> Result<Workspace, String> {
    let out = std::process::Command::new("cargo")
        .arg(format!("+{}", tc.name))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(manifest)
        .env("RUSTUP_AUTO_INSTALL", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "cargo metadata failed on {}: {}",
            manifest.display(),
            first.trim().trim_start_matches("error: ")
        ));
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cannot read cargo metadata's output: {e}"))?;
    let members: Vec<String> = strings(&v["workspace_members"]);
    let mut packages = Vec::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let id = p["id"].as_str().unwrap_or_default().to_string();
        if !members.contains(&id) {
            continue;
        }
        let name = p["name"].as_str().unwrap_or_default().to_string();
        // Older cargo spells ids `name version (source)`, which -p does not take.
        let spec = if id.contains(' ') {
            format!("{name}@{}", p["version"].as_str().unwrap_or_default())
        } else {
            id.clone()
        };
        let targets = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| Target {
                name: t["name"].as_str().unwrap_or_default().to_string(),
                kind: strings(&t["kind"]),
                crate_types: strings(&t["crate_types"]),
            })
            .collect();
        packages.push((
            id,
            Package {
                name,
                spec,
                manifest_path: PathBuf::from(p["manifest_path"].as_str().unwrap_or_default()),
                targets,
                default_run: p["default_run"].as_str().map(String::from),
            },
        ));
    }
    let defaults = strings(&v["workspace_default_members"]);
    let default_members = packages
        .iter()
        .filter(|(id, _)| defaults.is_empty() || defaults.contains(id))
        .map(|(_, p)| p.name.clone())
        .collect();
    Ok(Workspace {
        target_directory: PathBuf::from(v["target_directory"].as_str().unwrap_or("target")),
        members: packages.into_iter().map(|(_, p)| p).collect(),
        default_members,
    })
}

fn names(targets: &[&Target]) -> String {
    if targets.is_empty() {
        return "none".to_string();
    }
    let v: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    v.join(", ")
}

/// The target of `package` that the options name, or the one `cargo run` would run.
fn target_in(package: &Package, kind: Kind, name: Option<&str>) -> Result<Selection, String> {
    let all = package.of(kind);
    let pick = |t: &Target| Selection {
        package: package.clone(),
        kind,
        name: t.name.clone(),
    };
    let p = &package.name;
    if let Some(name) = name {
        let Some(t) = all.iter().find(|t| t.name == name) else {
            return Err(format!(
                "no {} target named `{name}` in package `{p}` ({}s: {})",
                kind.name(),
                kind.name(),
                names(&all)
            ));
        };
        if !t.crate_types.iter().any(|c| c == "bin") {
            return Err(format!(
                "{} `{name}` of package `{p}` is not a binary (crate-type {}): there is no \
                 program to run",
                kind.name(),
                t.crate_types.join(", ")
            ));
        }
        return Ok(pick(t));
    }
    if let Some(default) = &package.default_run
        && let Some(t) = all.iter().find(|t| &t.name == default)
    {
        return Ok(pick(t));
    }
    match all.as_slice() {
        [t] => Ok(pick(t)),
        [] => Err(format!(
            "package `{p}` has no binary target: it is a library (pick a program with \
             --example, --test or --bench)"
        )),
        _ => Err(format!(
            "package `{p}` has several binaries ({}): pick one with --bin",
            names(&all)
        )),
    }
}

/// The package and target to run, as cargo run would choose them.
pub fn select(ws: &Workspace, manifest: &Path, args: &Args) -> Result<Selection, String> {
    let (kind, name) = match (&args.bin, &args.example, &args.test, &args.bench) {
        (Some(n), ..) => (Kind::Bin, Some(n.as_str())),
        (_, Some(n), ..) => (Kind::Example, Some(n.as_str())),
        (_, _, Some(n), _) => (Kind::Test, Some(n.as_str())),
        (_, _, _, Some(n)) => (Kind::Bench, Some(n.as_str())),
        _ => (Kind::Bin, None),
    };
    if let Some(spec) = &args.package {
        // `name`, `name@version` or a full package id spec.
        let wanted = spec.split('@').next().unwrap_or(spec);
        let package = ws
            .members
            .iter()
            .find(|p| p.spec == *spec || p.name == wanted)
            .ok_or_else(|| {
                let m: Vec<&str> = ws.members.iter().map(|p| p.name.as_str()).collect();
                format!(
                    "package `{spec}` is not a member of the workspace (members: {})",
                    m.join(", ")
                )
            })?;
        return target_in(package, kind, name);
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let manifest = canonical(manifest);
    let manifest = manifest.as_path();
    if let Some(package) = ws
        .members
        .iter()
        .find(|p| canonical(&p.manifest_path) == manifest)
    {
        return target_in(package, kind, name);
    }
    // A virtual workspace: the one default member with such a target.
    let candidates: Vec<&Package> = ws
        .members
        .iter()
        .filter(|p| ws.default_members.contains(&p.name))
        .filter(|p| p.of(kind).iter().any(|t| name.is_none_or(|n| t.name == n)))
        .collect();
    match candidates.as_slice() {
        [p] => target_in(p, kind, name),
        [] => Err(format!(
            "no member of the workspace {} has {}",
            manifest.display(),
            match name {
                Some(n) => format!("a {} target named `{n}`", kind.name()),
                None => "a binary".to_string(),
            }
        )),
        _ => {
            let v: Vec<&str> = candidates.iter().map(|p| p.name.as_str()).collect();
            Err(format!(
                "{} is a virtual workspace: pick a package with -p ({})",
                manifest.display(),
                v.join(", ")
            ))
        }
    }
}
