//! `instrfn`: record a program with the runtime preloaded, and read what it recorded. This
//! file holds the command line and hands each command to its module.
//!
//! Every failure is one line on stderr naming the problem and a non-zero exit status; a
//! recorded program's own exit status is passed through.
//!
//! Modules, bottom up: `sink` (where output goes), `names` (function names, warnings), `filter`
//! (which processes and calls count), `protobuf` (its encoding) and `perfetto_packets`; the outputs `chrome`,
//! `perfetto`, `folded`, `pprof` and `xray`; the commands `export`, `report`, `dump` and
//! `record` (which prints dump's summary line).

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
    /// processes started by CMD included); gmon mode writes gmon.out files into DIR. CMD's
    /// exit status is passed through.
    Record {
        /// Where the trace (or the gmon.out files) go.
        #[arg(short = 'o', long, default_value = "instrfn.data")]
        output: PathBuf,
        /// What to record.
        #[arg(long, value_enum, default_value_t = Mode::Trace)]
        mode: Mode,
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
    /// List the raw events of a trace, per process and thread.
    Dump {
        /// The trace directory.
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
            preload,
            cmd,
        } => record::record(&output, mode, preload, &cmd),
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
