//! `cargo instrfn`: build a Cargo package's program with function instrumentation on nightly,
//! run it under the instrfn runtime, and print what it recorded. This file holds the order of
//! the steps; each step lives in its module.
//!
//! Modules, bottom up: `args` (the command line), `toolchain` (the nightly and the flags it
//! accepts), `package` (Cargo.toml, cargo metadata, which target), `compile` (the build and its
//! executable), `run` (`instrfn record`, report, export, gprof; the exit status).
//!
//! Every refusal is one line on stderr (`cargo-instrfn: ...`, or clap's `error: ...`) and exit
//! status 2; the program's own exit status is passed through.

mod args;
mod compile;
mod package;
mod run;
mod toolchain;

use std::path::PathBuf;
use std::process::ExitCode;

use args::Args;
use toolchain::Framework;

fn main() -> ExitCode {
    match args::parse(std::env::args_os()).and_then(|a| cargo_instrfn(&a)) {
        Ok(code) => code,
        Err(message) => {
            if message.starts_with("error: ") {
                eprintln!("{message}");
            } else {
                eprintln!("cargo-instrfn: {message}");
            }
            ExitCode::from(2)
        }
    }
}

/// The framework the options ask for (None: the default).
fn asked(a: &Args) -> Option<Framework> {
    if a.fentry {
        Some(Framework::Fentry)
    } else if a.mcount {
        Some(Framework::Mcount)
    } else {
        a.xray.clone().map(Framework::Xray)
    }
}

/// The `--target` check: only the host, and never a static (musl) target.
fn check_target(a: &Args, host: &str) -> Result<(), String> {
    let Some(t) = a.target.as_deref().filter(|t| *t != host) else {
        return Ok(());
    };
    if t.contains("musl") {
        return Err(format!(
            "--target {t}: a static musl program cannot have the runtime preloaded: add \
             `instrfn` as a dependency with `use instrfn as _;` and run the program directly \
             (docs/rust.md, \"musl\")"
        ));
    }
    Err(format!(
        "--target {t}: the runtime instrfn preloads is the host's ({host}): for another \
         architecture, build that target's libinstrfn.so and run the program under qemu-user \
         with `instrfn record --preload` (docs/rust.md, \"Other targets\")"
    ))
}

fn cargo_instrfn(a: &Args) -> Result<ExitCode, String> {
    let framework = asked(a);
    if a.gmon && matches!(framework, Some(Framework::Xray(_))) {
        return Err(
            "--xray works in trace mode only (the runtime patches the sleds): drop --gmon, or \
             use --fentry or --mcount"
                .to_string(),
        );
    }
    let name = toolchain::choose(a.toolchain.as_deref());
    if a.print_flags {
        let tc = toolchain::check(&name)?;
        let (_, flag) = toolchain::Prober::new(&tc, None).flags(framework)?;
        println!("{flag}");
        return Ok(ExitCode::SUCCESS);
    }
    let manifest = package::locate(a.manifest_path.as_deref())?;
    let tc = toolchain::check(&name)?;
    check_target(a, &tc.host)?;
    if a.build_std && !toolchain::has_rust_src(&tc) {
        return Err(format!(
            "--build-std needs the standard library's sources: rustup component add rust-src \
             --toolchain {name}"
        ));
    }
    let instrfn = run::find_instrfn()?;
    let gprof =
        if a.gmon {
            Some(run::find_on_path("gprof").ok_or(
                "gprof is missing: install GNU binutils (Debian: apt-get install binutils)",
            )?)
        } else {
            None
        };
    let ws = package::metadata(&tc, &manifest)?;
    let sel = package::select(&ws, &manifest, a)?;
    let home = ws.target_directory.join("instrfn");
    std::fs::create_dir_all(&home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    let mut prober = toolchain::Prober::new(&tc, Some(home.join("rustc-flags")));
    let (fw, flag) = prober.flags(framework)?;
    let std_tag = if a.build_std { "-build-std" } else { "" };
    let target_dir = home.join(format!("{}{std_tag}", fw.label()));
    eprintln!(
        "cargo-instrfn: {flag}{}, rustc +{} ({}), building into {}",
        if a.build_std {
            " (standard library too)"
        } else {
            ""
        },
        tc.name,
        tc.date,
        target_dir.display()
    );
    let flags = compile::rustflags(&tc, std::slice::from_ref(&flag));
    let built = compile::build(&tc, a, &sel, &manifest, &target_dir, &flags)?;
    if !built.debuginfo {
        eprintln!("cargo-instrfn: {}", compile::debuginfo_hint(a.profile()));
    }
    let dir = match &a.output {
        Some(d) => d.clone(),
        None => home.join(if a.gmon { "gmon" } else { "trace" }),
    };
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let status = run::record(&instrfn, a.gmon, &dir, &built.exe, &a.args)?;
    let shown = show(a, &instrfn, gprof.as_deref(), &dir, &built.exe, &sel.name);
    match shown {
        Err(message) if status.success() => Err(message),
        Err(message) => {
            eprintln!("cargo-instrfn: {message}");
            Ok(run::pass_through(status))
        }
        Ok(()) => Ok(run::pass_through(status)),
    }
}

/// After the run: the report and the files asked for (trace mode), or gprof's output.
fn show(
    a: &Args,
    instrfn: &std::path::Path,
    gprof: Option<&std::path::Path>,
    dir: &std::path::Path,
    exe: &std::path::Path,
    title: &str,
) -> Result<(), String> {
    if let Some(gprof) = gprof {
        return run::gprof(gprof, exe, dir);
    }
    let traced = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".meta"));
    if !traced {
        // `instrfn record` said why.
        return Ok(());
    }
    run::report(instrfn, dir, a.lines, a.limit)?;
    let files: [(&Option<PathBuf>, &str); 2] = [(&a.svg, "svg"), (&a.chrome, "chrome")];
    for (file, format) in files {
        if let Some(file) = file {
            run::export(instrfn, dir, format, file, title, a.lines)?;
        }
    }
    Ok(())
}
