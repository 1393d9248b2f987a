//! Running the built program under the runtime and showing what it recorded: `instrfn record`
//! (found next to cargo-instrfn, else on PATH), then `instrfn report` and `instrfn export`
//! (trace mode) or `gprof -b` (gmon mode); and the program's exit status, passed through.
//! Uses std and libc only.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

/// The `instrfn` command: next to this program (`cargo install` puts both in one directory),
/// else on PATH.
pub fn find_instrfn() -> Result<PathBuf, String> {
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()));
    if let Some(dir) = &here {
        let next = dir.join("instrfn");
        if next.is_file() {
            return Ok(next);
        }
    }
    find_on_path("instrfn").ok_or_else(|| {
        format!(
            "the instrfn command is neither in {} nor on PATH: install both commands with \
             `cargo install --path cli` in the instrfn repository",
            here.map_or_else(|| "this directory".to_string(), |d| d.display().to_string())
        )
    })
}

/// An executable file called `name` in a PATH directory.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

extern "C" fn ignore(_: libc::c_int) {}

/// While the program runs, a Ctrl-C (SIGINT to the whole foreground process group) or SIGQUIT
/// ends the program, not this command: the report of what was recorded still comes, then the
/// same signal ends this command. A handler, unlike SIG_IGN, is reset in the programs started.
fn survive_terminal_signals() {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: installing a handler that does nothing, with SA_RESTART so waits go on.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Removes an earlier recording's files from `dir`, as `instrfn record` does: if record
/// fails before it starts, no old trace is read as this run's.
fn clear(dir: &Path) -> Result<(), String> {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if [".meta", ".events", ".stage"]
            .iter()
            .any(|s| name.ends_with(s))
            || name.starts_with("gmon.out")
        {
            std::fs::remove_file(e.path())
                .map_err(|err| format!("cannot remove {}: {err}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Runs `instrfn record` on `exe` with `args`, into `dir`, in gmon or trace mode.
pub fn record(
    instrfn: &Path,
    gmon: bool,
    dir: &Path,
    exe: &Path,
    args: &[OsString],
) -> Result<ExitStatus, String> {
    clear(dir)?;
    survive_terminal_signals();
    Command::new(instrfn)
        .arg("record")
        .arg("-o")
        .arg(dir)
        .args(["--mode", if gmon { "gmon" } else { "trace" }])
        .arg("--")
        .arg(exe)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", instrfn.display()))
}

/// Runs a reading command; its own errors are its own lines on stderr.
fn show(cmd: &mut Command) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} failed ({status})",
            Path::new(cmd.get_program()).display(),
            cmd.get_args()
                .next()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
    }
}

/// `instrfn report DIR`, on stdout.
pub fn report(instrfn: &Path, dir: &Path, lines: bool, limit: Option<usize>) -> Result<(), String> {
    let mut cmd = Command::new(instrfn);
    cmd.arg("report").arg(dir);
    if lines {
        cmd.arg("--lines");
    }
    if let Some(n) = limit {
        cmd.args(["--limit", &n.to_string()]);
    }
    show(&mut cmd)
}

/// `instrfn export DIR --format FORMAT -o FILE`.
pub fn export(
    instrfn: &Path,
    dir: &Path,
    format: &str,
    file: &Path,
    title: &str,
    lines: bool,
) -> Result<(), String> {
    let mut cmd = Command::new(instrfn);
    cmd.arg("export")
        .arg(dir)
        .args(["--format", format, "--title", title])
        .arg("-o")
        .arg(file);
    if lines {
        cmd.arg("--lines");
    }
    show(&mut cmd)?;
    eprintln!("cargo-instrfn: wrote {}", file.display());
    Ok(())
}

/// The profiles of the program's processes in `dir`: `gmon.out.<pid>` (a forked child writes
/// one too; exec'd images and shared libraries write `gmon.out.<pid>.<more>`, left out).
pub fn gmon_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("gmon.out."))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// `gprof -b EXE PROFILES`: the flat profile and the call graph, on stdout.
pub fn gprof(gprof: &Path, exe: &Path, dir: &Path) -> Result<(), String> {
    let files = gmon_files(dir);
    if files.is_empty() {
        // `instrfn record` said why.
        return Ok(());
    }
    if files.len() > 1 {
        eprintln!(
            "cargo-instrfn: gprof sums the profiles of {} processes",
            files.len()
        );
    }
    show(Command::new(gprof).arg("-b").arg(exe).args(&files))
}

/// The program's status as ours: its exit code, or (killed by a signal) the same signal on us.
pub fn pass_through(status: ExitStatus) -> ExitCode {
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
