//! `instrfn record`: runs a program with the runtime preloaded into a fresh output directory,
//! passes its exit status through, and says what it recorded (in ring mode: its newest
//! snapshot). Uses dump (the summary line) and runtime_lib (which runtime).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use instrfn_trace::Trace;
use instrfn_trace::ring::{snapshot_complete, snapshot_reason, snapshots};

use crate::dump::trace_summary;
use crate::runtime_lib;

/// What `record` records.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Every entry and exit.
    Trace,
    /// gmon.out profiles, for gprof.
    Gmon,
    /// Each thread's newest events, in a ring; written out as snapshots.
    Ring,
}

/// The mode, and ring mode's settings, from record's options.
pub struct Recording {
    pub mode: Mode,
    /// INSTRFN_RING (None: the runtime's default).
    pub ring: Option<String>,
    /// INSTRFN_SNAPSHOT_SIGNAL.
    pub snapshot_signal: Option<String>,
    /// INSTRFN_TRIGGER's items, and INSTRFN_TRIGGER_LIMIT.
    pub triggers: Vec<String>,
    pub trigger_limit: Option<u32>,
    /// INSTRFN_EXIT_SNAPSHOT=off (`--no-exit-snapshot`).
    pub no_exit_snapshot: bool,
}

impl Recording {
    /// The recording `--mode`, `--ring[=SIZE]`, `--snapshot-signal`, `--trigger`,
    /// `--trigger-limit` and `--no-exit-snapshot` ask for (`ring` is empty for `--ring`
    /// without a size).
    pub fn pick(
        mode: Option<Mode>,
        ring: Option<String>,
        snapshot_signal: Option<String>,
        triggers: Vec<String>,
        trigger_limit: Option<u32>,
        no_exit_snapshot: bool,
    ) -> Result<Recording, String> {
        let ringish = ring.is_some() || !triggers.is_empty();
        let mode = match (mode, ringish) {
            (Some(Mode::Trace | Mode::Gmon), true) => {
                return Err(
                    "--ring and --trigger record in ring mode: they go with --mode ring only"
                        .into(),
                );
            }
            (_, true) => Mode::Ring,
            (m, false) => m.unwrap_or(Mode::Trace),
        };
        if mode != Mode::Ring && snapshot_signal.is_some() {
            return Err("--snapshot-signal is for ring mode: add --ring".into());
        }
        if mode != Mode::Ring && no_exit_snapshot {
            return Err("--no-exit-snapshot is for ring mode: add --ring".into());
        }
        if triggers.is_empty() && trigger_limit.is_some() {
            return Err("--trigger-limit goes with --trigger".into());
        }
        if triggers.len() > 8 {
            return Err("at most 8 --trigger options".into());
        }
        Ok(Recording {
            mode,
            ring: ring.filter(|s| !s.is_empty()),
            snapshot_signal,
            triggers,
            trigger_limit,
            no_exit_snapshot,
        })
    }
}

/// `--trigger`'s `PATTERN>DURATION`, as INSTRFN_TRIGGER takes each item: a pattern without
/// blanks, `;` or `>`, and a duration of at least 1 ns with ns, us, ms or s.
pub fn trigger(s: &str) -> Result<String, String> {
    let Some((pattern, duration)) = s.rsplit_once('>') else {
        return Err(format!(
            "`{s}` is not PATTERN>DURATION (say 'handle_*>10ms')"
        ));
    };
    let pattern = pattern.trim();
    if pattern.is_empty()
        || pattern
            .bytes()
            .any(|b| b <= b' ' || b == b';' || b == b'>' || b == 0x7f)
    {
        return Err(format!(
            "`{s}`: the pattern must be a name pattern without blanks, `;` or `>`"
        ));
    }
    let ns = crate::filter::parse_duration(duration)?;
    if ns < 1.0 {
        return Err(format!("`{s}`: the duration must be at least 1ns"));
    }
    Ok(format!("{pattern}>{}", duration.trim()))
}

/// `--ring`'s SIZE: bytes, or with K, M or G, from 64K to 1G, as INSTRFN_RING takes them
/// (empty: `--ring` alone).
pub fn ring_size(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    match digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
    {
        Some(n) if (64 << 10..=1 << 30).contains(&n) => Ok(s.to_string()),
        _ => Err("a size from 64K to 1G (bytes, or with K, M, G), such as 16M".into()),
    }
}

/// `--snapshot-signal`'s SIG: a name (with or without SIG) or a number, as
/// INSTRFN_SNAPSHOT_SIGNAL takes it; not one the runtime or the program's crash needs.
pub fn signal_name(s: &str) -> Result<String, String> {
    match signals::parse_signal(s) {
        Some(_) => Ok(s.trim().to_string()),
        None => Err(
            "a signal such as USR1, SIGUSR2, HUP or 10 (not KILL, STOP, PROF, CHLD or a \
             fault signal)"
                .into(),
        ),
    }
}

/// The signal names INSTRFN_SNAPSHOT_SIGNAL takes: one file for the runtime and this command.
#[path = "../../src/base/signals.rs"]
mod signals;

/// Runs `cmd` with the runtime preloaded, recording into `output` as `r` says.
pub fn record(
    output: &Path,
    r: &Recording,
    preload: Option<PathBuf>,
    cmd: &[OsString],
) -> Result<ExitCode, String> {
    let mode = r.mode;
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
            || name.ends_with(".ring")
            || name.starts_with("gmon.out")
        {
            std::fs::remove_file(e.path())
                .map_err(|err| format!("cannot remove {}: {err}", e.path().display()))?;
        } else if name == "snapshots" && e.path().is_dir() {
            // A ring-mode recording's snapshots.
            std::fs::remove_dir_all(e.path())
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
        Mode::Ring => {
            command
                .env("INSTRFN_MODE", "ring")
                .env("INSTRFN_OUTPUT", &output);
            if let Some(size) = &r.ring {
                command.env("INSTRFN_RING", size);
            }
            if let Some(sig) = &r.snapshot_signal {
                command.env("INSTRFN_SNAPSHOT_SIGNAL", sig);
            }
            if !r.triggers.is_empty() {
                command.env("INSTRFN_TRIGGER", r.triggers.join(";"));
            }
            if let Some(n) = r.trigger_limit {
                command.env("INSTRFN_TRIGGER_LIMIT", n.to_string());
            }
            if r.no_exit_snapshot {
                command.env("INSTRFN_EXIT_SNAPSHOT", "off");
            }
        }
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run {}: {e}", cmd[0].to_string_lossy()))?;
    summary(&output, r, &cmd[0]);
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

fn summary(output: &Path, r: &Recording, cmd: &std::ffi::OsStr) {
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
    match r.mode {
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
        Mode::Ring => ring_summary(output, r.no_exit_snapshot, &hint),
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

/// Ring mode's line: the summary of the newest snapshot (the exit snapshot, unless
/// INSTRFN_EXIT_SNAPSHOT=off or the program was killed) and, when there are several, how many
/// of each reason; or how to take one.
fn ring_summary(output: &Path, no_exit_snapshot: bool, hint: &dyn Fn(&str)) {
    let rings = std::fs::read_dir(output).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".ring"))
            .count()
    });
    if rings == 0 {
        return hint("event");
    }
    let complete: Vec<PathBuf> = snapshots(output)
        .into_iter()
        .map(|(_, p)| p)
        .filter(|p| snapshot_complete(p))
        .collect();
    let Some(snap) = complete.last() else {
        let why = if no_exit_snapshot {
            "--no-exit-snapshot, and no trigger or signal took one"
        } else {
            "INSTRFN_EXIT_SNAPSHOT=off, or the program was killed"
        };
        eprintln!(
            "instrfn: no snapshot of the rings in {0} ({why}): take one with instrfn snapshot {0}",
            output.display()
        );
        return;
    };
    // Reasons in the order they first came, with their counts.
    let mut reasons: Vec<(String, usize)> = Vec::new();
    for p in &complete {
        let reason = snapshot_reason(p).unwrap_or_else(|| "unknown".into());
        match reasons.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => reasons.push((reason, 1)),
        }
    }
    let newest = snapshot_reason(snap).unwrap_or_default();
    let head = if complete.len() == 1 {
        format!("{newest} snapshot")
    } else {
        let counts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        format!(
            "{} snapshots ({}); newest, {newest} snapshot",
            complete.len(),
            counts.join(", ")
        )
    };
    match Trace::open(snap) {
        Ok(trace) => {
            let line = trace_summary(&trace, snap).1;
            let body = line.strip_prefix("instrfn: ").unwrap_or(&line);
            eprintln!("instrfn: {head}: {body}");
        }
        Err(e) => eprintln!("instrfn: cannot read the snapshot: {e}"),
    }
}
