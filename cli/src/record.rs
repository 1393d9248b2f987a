//! `instrfn record`: runs a program with the runtime preloaded into a fresh output directory,
//! passes its exit status through, and says what it recorded. Uses dump (the summary line)
//! and runtime_lib (which runtime).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use instrfn_trace::Trace;

use crate::dump::trace_summary;
use crate::runtime_lib;

/// What `record` records.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Trace,
    Gmon,
}

/// Runs `cmd` with the runtime preloaded, recording into `output` in `mode`.
pub fn record(
    output: &Path,
    mode: Mode,
    preload: Option<PathBuf>,
    cmd: &[OsString],
) -> Result<ExitCode, String> {
    let lib = runtime_lib::find(preload)?;
    std::fs::create_dir_all(output)
        .map_err(|e| format!("cannot create {}: {e}", output.display()))?;
    let output = std::path::absolute(output).unwrap_or_else(|_| output.to_path_buf());
    // A previous recording in the same directory would mix with this one: its files go.
    for e in std::fs::read_dir(&output)
        .map_err(|e| format!("cannot read {}: {e}", output.display()))?
        .flatten()
    {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".meta")
            || name.ends_with(".events")
            || name.ends_with(".stage")
            || name.starts_with("gmon.out")
        {
            std::fs::remove_file(e.path())
                .map_err(|err| format!("cannot remove {}: {err}", e.path().display()))?;
        }
    }
    let mut preload_var = lib.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload_var.push(":");
        preload_var.push(old);
    }
    let mut command = std::process::Command::new(&cmd[0]);
    command.args(&cmd[1..]).env("LD_PRELOAD", &preload_var);
    match mode {
        Mode::Trace => {
            command
                .env("INSTRFN_MODE", "trace")
                .env("INSTRFN_OUTPUT", &output);
        }
        Mode::Gmon => {
            command
                .env("INSTRFN_MODE", "gmon")
                .env("GMON_OUT_PREFIX", output.join("gmon.out"));
        }
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run {}: {e}", cmd[0].to_string_lossy()))?;
    summary(&output, mode, &cmd[0]);
    Ok(pass_through(status))
}

/// CMD's status as ours: its exit code, or (killed by a signal) the same signal on us.
fn pass_through(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code as u8);
    }
    if let Some(sig) = status.signal() {
        // SAFETY: resetting a signal's action and raising it on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return ExitCode::from(128 + sig as u8);
    }
    ExitCode::FAILURE
}

fn summary(output: &Path, mode: Mode, cmd: &std::ffi::OsStr) {
    let hint = |what: &str| {
        // INSTRFN_START=off and nothing started recording: not a build problem.
        let off = std::env::var("INSTRFN_START").is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "off" | "0" | "no" | "false"
            )
        });
        if off {
            eprintln!(
                "instrfn: {} recorded no {what}: INSTRFN_START=off, and it never started \
                 recording (instrfn_start(), moncontrol(1))",
                cmd.to_string_lossy()
            );
            return;
        }
        eprintln!(
            "instrfn: {} recorded no {what}: it never called an instrumented function. Build it \
             with -pg (gcc, clang), -Zinstrument-mcount (rustc) or -finstrument-functions (gcc, \
             clang; trace mode), or with XRay sleds (-Zinstrument-xray, -fxray-instrument; trace \
             mode)",
            cmd.to_string_lossy()
        );
    };
    match mode {
        Mode::Gmon => {
            let n = std::fs::read_dir(output)
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with("gmon.out"))
                        .count()
                })
                .unwrap_or(0);
            if n == 0 {
                hint("profile");
            } else {
                eprintln!("instrfn: {n} profiles in {}", output.display());
            }
        }
        Mode::Trace => match Trace::open(output) {
            Ok(trace) => match trace_summary(&trace, output) {
                (0, _) if trace.processes.iter().all(|p| p.lost_total() == 0) => hint("event"),
                (_, line) => eprintln!("{line}"),
            },
            // No meta file with a header: the program made none (it never started tracing), or
            // its directory could take none (a full disk, a file size limit: the runtime said
            // so).
            Err(e) if e.no_trace() => hint("event"),
            Err(e) if e.meta_incomplete() => {
                eprintln!(
                    "instrfn: the trace in {} is incomplete ({e}): was its disk full, or the \
                     file size limit (`ulimit -f`) too low?",
                    output.display()
                )
            }
            Err(e) => eprintln!("instrfn: cannot read the trace: {e}"),
        },
    }
}
