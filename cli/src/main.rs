//! `instrfn`: record a program with the runtime preloaded, and read what it recorded.
//!
//! Every failure is one line on stderr naming the problem and a non-zero exit status; a
//! recorded program's own exit status is passed through.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod export;
mod filter;
mod names;
mod report;
mod xray;

use clap::{Parser, Subcommand, ValueEnum};
use instrfn_trace::{Found, Kind, Symbols, Trace};

/// Function-instrumentation runtime: record instrumented programs (-pg, -Zinstrument-mcount,
/// -finstrument-functions), read their traces.
#[derive(Parser)]
#[command(name = "instrfn", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run CMD with the runtime preloaded, and say what was recorded.
    ///
    /// Trace mode writes entry/exit events into DIR (one pair of files per program image,
    /// processes started by CMD included); gmon mode writes gmon.out files into DIR. CMD's
    /// exit status is passed through.
    Record {
        /// Where the trace (or the gmon.out files) go.
        #[arg(short = 'o', long, default_value = "instrfn.data")]
        output: PathBuf,
        /// What to record.
        #[arg(long, value_enum, default_value_t = Mode::Trace)]
        mode: Mode,
        /// The runtime to preload (default: libinstrfn.so next to this program).
        #[arg(long)]
        preload: Option<PathBuf>,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
    /// Per function: calls, total and self time, min / median / p99 / max call duration.
    ///
    /// Sorted by self time; counts are exact, the median and p99 come from a histogram whose
    /// buckets are within 0.4 % of the durations in them.
    Report(report::ReportArgs),
    /// Write the trace as a Chrome/Perfetto timeline, folded stacks, a flame graph SVG or an XRay
    /// log.
    Export(export::ExportArgs),
    /// List the raw events of a trace, per process and thread.
    Dump {
        /// The trace directory.
        #[arg(default_value = "instrfn.data")]
        dir: PathBuf,
        /// Show raw addresses, not function names.
        #[arg(long)]
        raw: bool,
        /// Print only the summary line (events, threads, processes, losses, bytes).
        #[arg(long)]
        summary: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Trace,
    Gmon,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Record { .. }) {
        // Output into a pipe that closes (`instrfn dump | head`) ends the command quietly, as
        // it does other tools, instead of an error about the broken pipe.
        // SAFETY: restoring the default action of SIGPIPE before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        // Under a file size limit (`ulimit -f`) a write past it fails with EFBIG, which the
        // command reports (and an -o FILE's temporary file goes), instead of SIGXFSZ killing
        // it and leaving the temporary file behind. (Not for `record`: the program it starts
        // inherits ignored signals.)
        // SAFETY: ignoring SIGXFSZ before any thread is started.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    }
    let result = match cli.command {
        Command::Record {
            output,
            mode,
            preload,
            cmd,
        } => record(&output, mode, preload, &cmd),
        Command::Report(a) => report::run(&a),
        Command::Export(a) => export::run(&a),
        Command::Dump { dir, raw, summary } => {
            if summary {
                Trace::open(&dir).map_err(|e| e.to_string()).map(|t| {
                    println!("{}", trace_summary(&t, &dir).1);
                    ExitCode::SUCCESS
                })
            } else {
                dump(&dir, raw)
            }
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("instrfn: {message}");
            ExitCode::from(2)
        }
    }
}

/// libinstrfn.so: given, or next to this executable (both come out of one `cargo build`).
fn find_preload(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(std::path::absolute(&p).unwrap_or(p))
        } else {
            Err(format!("--preload {}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let lib = exe.with_file_name("libinstrfn.so");
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(format!(
            "{} is missing (build it with `cargo build --release`, or pass --preload)",
            lib.display()
        ))
    }
}

fn record(
    output: &Path,
    mode: Mode,
    preload: Option<PathBuf>,
    cmd: &[OsString],
) -> Result<ExitCode, String> {
    let lib = find_preload(preload)?;
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

/// The events of a trace (thread events not counted) and its summary line.
fn trace_summary(trace: &Trace, dir: &Path) -> (u64, String) {
    let mut events = 0u64;
    let mut threads = 0usize;
    let mut lost = 0u64;
    let mut bytes = 0u64;
    for p in &trace.processes {
        for slot in p.slots() {
            events += p
                .events(slot)
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| !matches!(e.kind, Kind::Thread | Kind::Lost))
                })
                .count() as u64;
        }
        threads += p
            .threads
            .iter()
            .map(|t| t.tid)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        lost += p.lost_total();
        bytes += p.event_bytes();
    }
    let collector_ns: u64 = trace
        .processes
        .iter()
        .filter_map(|p| p.collector.as_ref())
        .map(|c| c.cpu_ns)
        .sum();
    let procs = trace.processes.len();
    let line = format!(
        "instrfn: {events} events, {threads} thread{}, {procs} process{}, {lost} lost, {:.1} MiB \
         in {} (collector CPU {:.1} ms)",
        if threads == 1 { "" } else { "s" },
        if procs == 1 { "" } else { "es" },
        bytes as f64 / (1 << 20) as f64,
        dir.display(),
        collector_ns as f64 / 1e6
    );
    (events, line)
}

/// One line of output.
fn put(out: &mut impl std::io::Write, s: String) -> Result<(), String> {
    writeln!(out, "{s}").map_err(|e| export::write_error("standard output", e))
}

fn dump(dir: &Path, raw: bool) -> Result<ExitCode, String> {
    use std::io::Write;
    let trace = Trace::open(dir).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for p in &trace.processes {
        put(
            &mut out,
            format!(
                "process {} image {} (parent {}): {}{}",
                p.pid,
                p.image,
                p.ppid,
                p.cmdline.join(" "),
                if p.ended {
                    ""
                } else {
                    " [did not exit normally]"
                }
            ),
        )?;
        let symbols = (!raw).then(|| Symbols::of(p));
        let t0 = p.clock.start.0;
        for slot in p.slots() {
            // A thread's line at its first event and again at its exit: once each, unless
            // it was renamed meanwhile.
            let mut names: Vec<String> = p
                .threads_of(slot)
                .map(|t| format!("{} {}", t.tid, t.name))
                .collect();
            names.dedup();
            let lost = p.lost.get(&slot).copied().unwrap_or(0);
            put(
                &mut out,
                format!(
                    "  thread slot {slot}: {}{}",
                    names.join(", "),
                    if lost > 0 {
                        format!("; {lost} events lost")
                    } else {
                        String::new()
                    }
                ),
            )?;
            let mut events = p.events(slot);
            let mut tid = 0;
            while let Some(e) = events.next() {
                let e = e.map_err(|e| e.to_string())?;
                if events.tid() != tid {
                    tid = events.tid();
                    put(&mut out, format!("    tid {tid}"))?;
                }
                let ns = p.clock.ns(e.ts) - p.clock.ns(t0);
                if e.kind == Kind::Thread {
                    continue;
                }
                let what = match e.kind {
                    Kind::Lost => format!("{} events", e.value),
                    _ => match symbols.as_ref().map(|s| s.find(e.value, e.ts)) {
                        Some(Found::Symbol(name)) => name.to_string(),
                        Some(Found::Untrusted(problem) | Found::Stripped(problem)) => {
                            names::warn(problem);
                            format!("{:#x}", e.value)
                        }
                        _ => format!("{:#x}", e.value),
                    },
                };
                put(&mut out, format!("    {ns:>14.0} {} {what}", e.kind.name()))?;
            }
        }
    }
    out.flush()
        .map_err(|e| export::write_error("standard output", e))?;
    Ok(ExitCode::SUCCESS)
}
