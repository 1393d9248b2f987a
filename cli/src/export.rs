//! `instrfn export`: a trace as a Chrome trace-event timeline (`chrome`), a Perfetto protobuf
//! trace (`perfetto`), folded stacks of self time or a flame graph SVG (`folded`), a pprof
//! profile (`pprof`), or an XRay log (`xray`). This module holds the command's arguments and
//! picks the format. Output goes through a [`Sink`], so a failed export leaves no partial file
//! behind. Uses chrome, perfetto, folded, pprof, xray, filter, names, sink and trace_dir.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use instrfn_trace::Trace;

use crate::filter::{FilterArgs, processes};
use crate::sink::Sink;
use crate::{chrome, folded, names, perfetto, pprof, trace_dir, xray};

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The trace directory (a ring-mode trace: its newest complete snapshot).
    #[arg(default_value = "instrfn.data")]
    pub dir: PathBuf,
    /// What to write.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Where (default: standard output).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Only the process with this pid (every image it ran). `--format xray` needs it when the
    /// trace holds processes of more than one executable.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Show symbol names as they are in the binary.
    #[arg(long)]
    pub no_demangle: bool,
    /// Where each function starts (file:line, from DWARF): chrome puts it in each event's
    /// `args`, perfetto in each slice's source location, pprof in its functions, folded and
    /// svg after each frame's name.
    #[arg(long)]
    pub lines: bool,
    /// The flame graph's title (svg).
    #[arg(long, default_value = "instrfn")]
    pub title: String,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON (complete events), for Perfetto and chrome://tracing.
    Chrome,
    /// Perfetto's protobuf trace: a slice per call on its thread's track (ui.perfetto.dev,
    /// trace_processor).
    Perfetto,
    /// A gzipped pprof profile: calls and self time per stack (go tool pprof, continuous
    /// profilers).
    Pprof,
    /// Folded stacks: `outer;inner;leaf <self ns>` per line.
    Folded,
    /// A flame graph (inferno).
    Svg,
    /// compiler-rt's basic-mode XRay log, for `llvm-xray account|convert|stack -instr_map
    /// BINARY` (a trace of a binary built with -fxray-instrument / -Zinstrument-xray).
    Xray,
}

/// Progress on a terminal (silent otherwise), in events.
fn progress(trace: &Trace) -> indicatif::ProgressBar {
    // An estimate: 16 bytes per event (a short event has 8).
    let total: u64 = trace.processes.iter().map(|p| p.event_bytes() / 16).sum();
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr_with_hz(4),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} exporting {pos}/{len} events ({per_sec}, {eta} left)",
    ) {
        bar.set_style(style);
    }
    bar
}

pub fn run(a: &ExportArgs) -> Result<ExitCode, String> {
    let trace = trace_dir::open(&a.dir)?;
    let procs = processes(&trace, a.pid)?;
    let demangle = !a.no_demangle;
    // XRay: the instrumentation map is read before any output file exists.
    let prepared = match a.format {
        ExportFormat::Xray => {
            // SAFETY: isatty only reads the descriptor's state.
            if a.output.is_none() && unsafe { libc::isatty(1) } == 1 {
                return Err(
                    "--format xray writes a binary log: give -o FILE or redirect the output".into(),
                );
            }
            Some(xray::prepare(&procs, &a.filter)?)
        }
        _ => None,
    };
    let bar = progress(&trace);
    names::set_progress_bar(Some(bar.clone()));
    let mut sink = Sink::open(a.output.as_deref())?;
    match a.format {
        ExportFormat::Xray => {
            let prepared = prepared.expect("prepared above");
            xray::write(prepared, &a.filter, demangle, &mut sink, &bar)?;
        }
        ExportFormat::Chrome => {
            chrome::write(&procs, &a.filter, demangle, a.lines, &mut sink, &bar)?;
        }
        ExportFormat::Perfetto => {
            perfetto::write(&procs, &a.filter, demangle, a.lines, &mut sink, &bar)?;
        }
        ExportFormat::Pprof => {
            pprof::write(&procs, &a.filter, demangle, a.lines, &mut sink, &bar)?;
        }
        ExportFormat::Folded => {
            let folded = folded::fold(&procs, &a.filter, demangle, a.lines, &bar)?;
            for line in folded {
                sink.write(&line)?;
                sink.write("\n")?;
            }
        }
        ExportFormat::Svg => {
            let folded = folded::fold(&procs, &a.filter, demangle, a.lines, &bar)?;
            let svg = folded::svg(&folded, &a.title)?;
            sink.write(&String::from_utf8_lossy(&svg))?;
        }
    }
    bar.finish_and_clear();
    names::set_progress_bar(None);
    sink.finish()?;
    Ok(ExitCode::SUCCESS)
}
