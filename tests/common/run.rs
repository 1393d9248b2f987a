//! Running programs: to completion (checked or not), within a deadline, natively or under
//! qemu-user (whose -E passes the environment to the guest, so that LD_PRELOAD applies to the
//! guest program and not to qemu), in trace mode by the environment or under `instrfn record`,
//! and reading what a fixture printed.

use super::toolchain::{
    Arch, Lib, Runtime, X86_64, instrfn_cli, preload_path, require_tool, runtime_lib,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs a command to completion; panics with its output unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "command failed: {cmd:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command to completion and returns its output whatever the status.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// A program's standard output, as text.
pub fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A program's standard error, as text.
pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command that runs `exe` for `arch` (through qemu-user for foreign architectures) in `dir`
/// with the extra environment `env` (passed to the guest with -E under qemu, so LD_PRELOAD
/// applies to the guest program, not to qemu).
pub fn command(arch: Arch, exe: &Path, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Command {
    let mut cmd = match arch.qemu {
        None => {
            let mut c = Command::new(exe);
            c.args(args);
            for (k, v) in env {
                c.env(k, v);
            }
            c
        }
        Some(qemu) => {
            require_tool(qemu);
            let mut c = Command::new(qemu);
            if let Some(sysroot) = arch.sysroot {
                c.arg("-L").arg(sysroot);
            }
            for (k, v) in env {
                c.arg("-E").arg(format!("{k}={v}"));
            }
            c.arg(exe).args(args);
            c
        }
    };
    cmd.current_dir(dir);
    cmd
}

/// Runs `exe` (see [`command`]) and panics unless it exits with status 0.
pub fn run_exe(arch: Arch, exe: &Path, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Output {
    run_ok(&mut command(arch, exe, args, env, dir))
}

/// Runs a command to completion within `seconds`; panics (after killing it) if it hangs, or
/// unless it succeeds. The deadline only catches a hang: it is far above any run's length.
pub fn run_within(cmd: &mut Command, seconds: u64) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung: killed after {seconds} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    assert!(
        output.status.success(),
        "command failed: {cmd:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `exe` for `arch` (see [`command`]) in trace mode into `trace` (INSTRFN_MODE=trace and
/// INSTRFN_OUTPUT; the directory removed first, so the trace is this run's alone), with
/// libinstrfn.so preloaded when `preload` (else the runtime must be linked in), and `extra`
/// environment after those; panics unless it exits with status 0 within 300 s.
pub fn run_in_trace_mode(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    preload: bool,
    extra: &[(&str, &str)],
    dir: &Path,
    trace: &Path,
) -> Output {
    let _ = std::fs::remove_dir_all(trace);
    // (Only preloading needs the shared library: musl has none.)
    let lib = if preload {
        runtime_lib(arch, Lib::Shared).display().to_string()
    } else {
        String::new()
    };
    let out = trace.display().to_string();
    let mut env = vec![("INSTRFN_MODE", "trace"), ("INSTRFN_OUTPUT", out.as_str())];
    if preload {
        env.push(("LD_PRELOAD", lib.as_str()));
    }
    env.extend_from_slice(extra);
    run_within(&mut command(arch, exe, args, &env, dir), 300)
}

/// [`run_in_trace_mode`] with the runtime coming in as `runtime` says (preloaded, or linked
/// in), into a fresh `<dir>/trace-<runtime>`: the program's output and the trace directory.
pub fn run_traced(
    arch: Arch,
    exe: &Path,
    args: &[&str],
    runtime: Runtime,
    extra: &[(&str, &str)],
    dir: &Path,
) -> (Output, PathBuf) {
    let trace = dir.join(format!("trace-{runtime:?}"));
    let preload = runtime == Runtime::Preload;
    let out = run_in_trace_mode(arch, exe, args, preload, extra, dir, &trace);
    (out, trace)
}

/// Runs `exe args` (on the host) under `instrfn record -o <dir>/trace` (trace mode; the
/// directory removed first), checked to succeed.
pub fn record_trace(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
) -> (Output, PathBuf) {
    record_trace_on(exe, args, env, dir, false)
}

/// [`record_trace`], on CPU 0 alone if `one_cpu` (the affinity `instrfn record` and the
/// program inherit).
pub fn record_trace_on(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
    one_cpu: bool,
) -> (Output, PathBuf) {
    let trace = dir.join("trace");
    let _ = std::fs::remove_dir_all(&trace);
    let mut cmd = Command::new(instrfn_cli());
    if one_cpu {
        use std::os::unix::process::CommandExt;
        // SAFETY: sched_setaffinity of the child about to exec, on a local set; no allocation.
        unsafe {
            cmd.pre_exec(|| {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(exe)
        .args(args)
        .current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    (run_ok(&mut cmd), trace)
}

/// How a traced run is started.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    /// `instrfn record -o DIR -- exe args` (the host's programs)
    Record,
    /// LD_PRELOAD=libinstrfn.so INSTRFN_MODE=trace INSTRFN_OUTPUT=DIR exe args
    Preload,
}

/// The routes a program of `arch` is traced by: under qemu, preloaded only.
pub fn routes(arch: Arch) -> &'static [Route] {
    if arch == X86_64 {
        &[Route::Record, Route::Preload]
    } else {
        &[Route::Preload]
    }
}

/// Runs `exe args` (built for `arch`) traced into `trace` (emptied first) with the extra
/// environment `env`, in the trace's parent directory; checks it succeeds within 300 s.
pub fn traced(
    arch: Arch,
    route: Route,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    trace: &Path,
) -> Output {
    let _ = std::fs::remove_dir_all(trace);
    let dir = trace.parent().unwrap();
    let mut cmd = match route {
        Route::Record => {
            let mut c = Command::new(instrfn_cli());
            c.arg("record")
                .arg("-o")
                .arg(trace)
                .arg("--")
                .arg(exe)
                .args(args)
                .envs(env.iter().copied())
                .current_dir(dir);
            c
        }
        Route::Preload => {
            let lib = preload_path(arch);
            let t = trace.display().to_string();
            let mut all = vec![
                ("LD_PRELOAD", lib.as_str()),
                ("INSTRFN_MODE", "trace"),
                ("INSTRFN_OUTPUT", t.as_str()),
            ];
            all.extend_from_slice(env);
            command(arch, exe, args, &all, dir)
        }
    };
    run_within(&mut cmd, 300)
}

/// A number printed by a fixture as "<key> <value>".
pub fn reported(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("fixture did not report {key}:\n{out}"))
}

/// The numbers in `text`, in order (the fixtures' one-line summaries).
pub fn numbers_of(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Waits for the first line of `child`'s piped stdout and asserts it is `ready` (the fixtures
/// that spin or hang print it once their threads run).
pub fn read_ready(child: &mut std::process::Child) {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
}
