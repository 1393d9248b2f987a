//! `instrfn`: record a program with the runtime preloaded, and read what it recorded. This
//! file holds the command line and hands each command to its module.
//!
//! Every failure is one line on stderr naming the problem and a non-zero exit status; a
//! recorded program's own exit status is passed through.
//!
//! Modules, bottom up: `sink` (where output goes), `names` (function names, warnings), `filter`
//! (which processes and calls count), `protobuf` (its encoding) and `perfetto_packets`; the outputs `chrome`,
//! `perfetto`, `folded`, `pprof` and `xray`; `trace_dir` (which trace a reading command
//! reads); the commands `export`, `report`, `dump`, `snapshot`, `watch` (`snapshot --watch`)
//! and `record` (which prints dump's summary line).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

mod chrome;
mod dump;
mod export;
mod filter;
mod folded;
mod names;
mod perfetto;
mod perfetto_packets;
mod pprof;
mod protobuf;
mod record;
mod report;
mod runtime_lib;
mod sink;
mod snapshot;
mod trace_dir;
mod watch;
mod xray;

use clap::{Parser, Subcommand};

use record::Mode;

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
    /// processes started by CMD included); gmon mode writes gmon.out files into DIR. Ring
    /// mode (--ring) keeps each thread's newest events in a ring in DIR and writes them out
    /// as a snapshot, DIR/snapshots/<n>, at exit, on --snapshot-signal, or when
    /// `instrfn snapshot DIR` is run. CMD's exit status is passed through.
    ///
    /// Example: `instrfn record --ring=64M --snapshot-signal USR2 ./server`, then
    /// `kill -USR2 <pid>` or `instrfn snapshot`, and `instrfn report`.
    Record {
        /// Where the trace (or the gmon.out files) go.
        #[arg(short = 'o', long, default_value = "instrfn.data")]
        output: PathBuf,
        /// What to record [default: trace].
        #[arg(long, value_enum)]
        mode: Option<Mode>,
        /// Ring mode (the flight recorder): each thread keeps its newest SIZE bytes of events
        /// (64K to 1G, with K, M or G; default 4M). Same as --mode ring.
        #[arg(long, value_name = "SIZE", num_args = 0..=1, require_equals = true,
              default_missing_value = "", value_parser = record::ring_size)]
        ring: Option<String>,
        /// Ring mode: take a snapshot when the program gets this signal (USR1, USR2, HUP,
        /// a number…).
        #[arg(long, value_name = "SIG", value_parser = record::signal_name)]
        snapshot_signal: Option<String>,
        /// Ring mode: take a snapshot when a call of a function matching PATTERN lasts longer
        /// than DURATION (`'handle_*>10ms'`; patterns as --filter's). Repeat for several.
        /// Implies --ring.
        #[arg(long, value_name = "PATTERN>DURATION", value_parser = record::trigger)]
        trigger: Vec<String>,
        /// Ring mode: snapshots the triggers take per second, at most (1 to 1000; default 1).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
        trigger_limit: Option<u32>,
        /// Ring mode: take no snapshot at exit (INSTRFN_EXIT_SNAPSHOT=off). Only triggers,
        /// --snapshot-signal, the program and `instrfn snapshot` take them.
        #[arg(long)]
        no_exit_snapshot: bool,
        /// The runtime to preload (default: libinstrfn.so next to this program, else the one
        /// built into it, written once to ~/.cache/instrfn).
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
    /// Write the trace as a Chrome or Perfetto timeline, a pprof profile, folded stacks, a flame
    /// graph SVG or an XRay log.
    Export(export::ExportArgs),
    /// Take a snapshot of a ring-mode trace from outside the program.
    ///
    /// Copies each thread's ring (INSTRFN_MODE=ring, `record --ring`) into
    /// DIR/snapshots/<n>/, a trace that report, export and dump read. It works while the
    /// program runs and after it died (SIGKILL, the OOM killer): the rings live in the ring
    /// files' pages. Chunks a thread rewrote during the copy are left out, and counted. One
    /// line says what the snapshot holds.
    ///
    /// Example: `instrfn record --ring ./server &`, later `instrfn snapshot`, then
    /// `instrfn report` (which reads the newest snapshot).
    ///
    /// With --watch it takes no snapshot: it lists DIR's snapshots as they are taken.
    Snapshot {
        /// The ring-mode trace directory.
        #[arg(default_value = "instrfn.data")]
        dir: PathBuf,
        /// Only the rings of this process (every image it ran).
        #[arg(long)]
        pid: Option<u32>,
        /// List the snapshots, one line each once complete: the existing ones, then each new
        /// one (DIR/snapshots/<n>: <reason>, <T> threads, <E> events[, trigger: <pattern>
        /// <ms> ms whole|incomplete]). DIR may not exist yet. Polls every 100 ms. Ends with
        /// status 0 on Ctrl-C or SIGTERM, after --count new snapshots, or when the recording
        /// ends: every process whose ring file it saw (running at the start, or new since)
        /// has exited, and no new snapshot came for 1 s. A finished recording's old ring
        /// files do not count: the watch then waits for a new one.
        #[arg(long)]
        watch: bool,
        /// With --watch: end after N new snapshots (those there at the start not counted).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// List the raw events of a trace, per process and thread.
    Dump {
        /// The trace directory (a ring-mode trace: its newest complete snapshot).
        #[arg(default_value = "instrfn.data")]
        dir: PathBuf,
        /// Show raw addresses, not function names.
        #[arg(long)]
        raw: bool,
        /// Show symbol names as they are in the binary (C++ and Rust names are demangled by
        /// default).
        #[arg(long)]
        no_demangle: bool,
        /// Print only the summary line (events, threads, processes, losses, bytes).
        #[arg(long)]
        summary: bool,
    },
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
            ring,
            snapshot_signal,
            trigger,
            trigger_limit,
            no_exit_snapshot,
            preload,
            cmd,
        } => record::Recording::pick(
            mode,
            ring,
            snapshot_signal,
            trigger,
            trigger_limit,
            no_exit_snapshot,
        )
        .and_then(|r| record::record(&output, &r, preload, &cmd)),
        Command::Snapshot {
            dir,
            pid,
            watch,
            count,
        } => match (watch, pid, count) {
            (true, Some(_), _) => Err("--pid goes without --watch: a watch lists every \
                                       process's snapshots"
                .into()),
            (true, None, _) => watch::watch(&dir, count),
            (false, _, Some(_)) => Err("--count goes with --watch".into()),
            (false, _, None) => snapshot::snapshot(&dir, pid),
        },
        Command::Report(a) => report::run(&a),
        Command::Export(a) => export::run(&a),
        Command::Dump {
            dir,
            raw,
            no_demangle,
            summary,
        } => {
            if summary {
                dump::summary(&dir)
            } else {
                dump::dump(&dir, raw, !no_demangle)
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
