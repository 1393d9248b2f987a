//! `instrfn export`: a trace as a Chrome trace-event timeline (Perfetto, chrome://tracing),
//! as folded stacks of self time (flamegraph.pl, inferno, speedscope), or as a flame graph SVG
//! drawn with inferno, or as an XRay log (the `xray` module).
//!
//! Streaming: calls are written as they end (chrome) or summed per distinct stack (folded,
//! svg), so memory grows with the deepest stack and the number of distinct stacks, never with
//! the number of events. The output goes to a temporary file next to `-o FILE`, renamed into
//! place when complete: a failed export leaves no partial file behind.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use instrfn_trace::calls::{Call, End, Visitor, trace_end, walk};
use instrfn_trace::{Process, Trace};

use crate::filter::{Filter, FilterArgs};
use crate::names::Names;

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The trace directory.
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
    /// `args`, folded and svg after each frame's name.
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
    /// Folded stacks: `outer;inner;leaf <self ns>` per line.
    Folded,
    /// A flame graph (inferno).
    Svg,
    /// compiler-rt's basic-mode XRay log, for `llvm-xray account|convert|stack -instr_map
    /// BINARY` (a trace of a binary built with -fxray-instrument / -Zinstrument-xray).
    Xray,
}

/// Where the output goes: a temporary file renamed into place at the end, or stdout.
pub(crate) struct Sink {
    out: Box<dyn Write>,
    tmp: Option<(PathBuf, PathBuf)>,
    /// What is written, for messages: the -o file, or standard output.
    name: String,
}

/// The message for a failed write of `name`.
pub(crate) fn write_error(name: &str, e: std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::EFBIG) {
        format!("cannot write {name}: {e}: the file size limit (`ulimit -f`) is reached")
    } else {
        format!("cannot write {name}: {e}")
    }
}

impl Sink {
    fn open(path: Option<&Path>) -> Result<Sink, String> {
        let Some(path) = path else {
            return Ok(Sink {
                out: Box::new(std::io::BufWriter::with_capacity(
                    1 << 20,
                    std::io::stdout(),
                )),
                tmp: None,
                name: "standard output".to_string(),
            });
        };
        let name = path
            .file_name()
            .ok_or_else(|| format!("{}: not a file name", path.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let f = std::fs::File::create(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        Ok(Sink {
            out: Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
            tmp: Some((tmp, path.to_path_buf())),
            name: path.display().to_string(),
        })
    }

    fn write(&mut self, s: &str) -> Result<(), String> {
        self.write_bytes(s.as_bytes())
    }

    pub(crate) fn write_bytes(&mut self, b: &[u8]) -> Result<(), String> {
        self.out
            .write_all(b)
            .map_err(|e| write_error(&self.name, e))
    }

    fn finish(mut self) -> Result<(), String> {
        self.out.flush().map_err(|e| write_error(&self.name, e))?;
        drop(std::mem::replace(&mut self.out, Box::new(std::io::sink())));
        if let Some((tmp, path)) = self.tmp.take() {
            std::fs::rename(&tmp, &path).map_err(|e| {
                format!("cannot rename {} to {}: {e}", tmp.display(), path.display())
            })?;
        }
        Ok(())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // Not finished: the partial file goes.
        if let Some((tmp, _)) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Progress on a terminal (silent otherwise), in events.
fn progress(trace: &Trace) -> indicatif::ProgressBar {
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
    let trace = Trace::open(&a.dir).map_err(|e| e.to_string())?;
    let procs: Vec<&Process> = trace
        .processes
        .iter()
        .filter(|p| a.pid.is_none_or(|pid| p.pid == pid))
        .collect();
    if procs.is_empty() {
        return Err(format!(
            "{}: no process {} in this trace",
            trace.dir.display(),
            a.pid.unwrap_or(0)
        ));
    }
    // XRay: the instrumentation map is read before any output file exists.
    let xray = match a.format {
        ExportFormat::Xray => {
            // SAFETY: isatty only reads the descriptor's state.
            if a.output.is_none() && unsafe { libc::isatty(1) } == 1 {
                return Err(
                    "--format xray writes a binary log: give -o FILE or redirect the output".into(),
                );
            }
            Some(crate::xray::prepare(&procs, a)?)
        }
        _ => None,
    };
    let bar = progress(&trace);
    crate::names::set_progress_bar(Some(bar.clone()));
    let mut sink = Sink::open(a.output.as_deref())?;
    match a.format {
        ExportFormat::Xray => {
            let prepared = xray.expect("prepared above");
            crate::xray::write(prepared, a, &mut sink, &bar)?;
        }
        ExportFormat::Chrome => chrome(&procs, a, &mut sink, &bar)?,
        ExportFormat::Folded => {
            let folded = fold(&procs, a, &bar)?;
            for line in folded {
                sink.write(&line)?;
                sink.write("\n")?;
            }
        }
        ExportFormat::Svg => {
            let folded = fold(&procs, a, &bar)?;
            let mut opt = inferno::flamegraph::Options::default();
            opt.title = a.title.clone();
            opt.count_name = "ns".to_string();
            opt.hash = true;
            let mut svg = Vec::new();
            if folded.is_empty() {
                return Err(
                    "nothing to draw: no call lasted any time (or the filters left none)".into(),
                );
            }
            inferno::flamegraph::from_lines(&mut opt, folded.iter().map(String::as_str), &mut svg)
                .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
            sink.write(&String::from_utf8_lossy(&svg))?;
        }
    }
    bar.finish_and_clear();
    crate::names::set_progress_bar(None);
    sink.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// A JSON string literal.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// Microseconds with nanosecond precision, as Chrome trace timestamps are (integer
/// formatting: several times faster than formatting the float).
fn us(ns: f64) -> String {
    let mut s = String::with_capacity(24);
    push_us(&mut s, ns);
    s
}

fn push_us(s: &mut String, ns: f64) {
    let n = ns.round();
    if n < 0.0 {
        s.push('-');
    }
    let n = n.abs() as u64;
    let _ = write!(s, "{}.{:03}", n / 1000, n % 1000);
}

struct ChromeWriter<'a> {
    sink: &'a mut Sink,
    p: &'a Process,
    names: &'a Names,
    filter: Filter,
    /// ns of the trace's zero (the earliest process start).
    zero: f64,
    start_ns: f64,
    /// Function (see [`Names::key`]) -> its JSON-quoted name, and with --lines its
    /// `"file":…,"line":…` args.
    quoted: HashMap<crate::names::FunctionKey, (String, String)>,
    buf: String,
    first: &'a mut bool,
    error: Option<String>,
    bar: &'a indicatif::ProgressBar,
    seen: u64,
}

impl ChromeWriter<'_> {
    fn put(&mut self) {
        if self.buf.len() > 1 << 16 {
            self.flush();
        }
    }
    fn flush(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.sink.write(&self.buf)
        {
            self.error = Some(e);
        }
        self.buf.clear();
        self.bar.inc(self.seen);
        self.seen = 0;
    }
    fn sep(&mut self) {
        if *self.first {
            *self.first = false;
        } else {
            self.buf.push_str(",\n");
        }
    }
}

impl Visitor for ChromeWriter<'_> {
    fn call(&mut self, c: &Call, _stack: &[u64]) {
        self.seen += if c.how == End::NoExit { 1 } else { 2 };
        let (p, names) = (self.p, self.names);
        if !self.filter.keep(
            c,
            self.start_ns,
            |t| p.clock.ns(t),
            |f| names.name(f, c.start),
        ) {
            return;
        }
        self.sep();
        let (name, line) = self
            .quoted
            .entry(names.key(c.func, c.start))
            .or_insert_with(|| {
                let line = names.line(c.func, c.start).map_or(String::new(), |l| {
                    format!("\"file\":{},\"line\":{}", quote(&l.file), l.line)
                });
                (quote(&names.name(c.func, c.start)), line)
            });
        let buf = &mut self.buf;
        let (pid, tid) = (p.pid, c.tid);
        let ph = if c.how == End::NoExit {
            "i\",\"s\":\"t"
        } else {
            "X"
        };
        buf.push_str("{\"ph\":\"");
        buf.push_str(ph);
        buf.push_str("\",\"name\":");
        buf.push_str(name);
        buf.push_str(",\"cat\":\"function\",\"ts\":");
        push_us(buf, p.clock.ns(c.start) - self.zero);
        if c.how != End::NoExit {
            buf.push_str(",\"dur\":");
            push_us(buf, c.ticks() as f64 * p.clock.ns_per_tick());
        }
        let _ = write!(buf, ",\"pid\":{pid},\"tid\":{tid}");
        // The event's args: how it ended (if not by returning), where the function is.
        let how = match c.how {
            End::NoExit => "\"exit\":\"not recorded\"",
            End::Unwound => "\"closed\":\"unwound\"",
            End::Open => "\"closed\":\"open at the end of the trace\"",
            End::Exit => "",
        };
        match (how.is_empty(), line.is_empty()) {
            (true, true) => {}
            (false, true) => {
                let _ = write!(buf, ",\"args\":{{{how}}}");
            }
            (true, false) => {
                let _ = write!(buf, ",\"args\":{{{line}}}");
            }
            (false, false) => {
                let _ = write!(buf, ",\"args\":{{{how},{line}}}");
            }
        }
        buf.push('}');
        self.put();
    }
    fn lost(&mut self, tid: u32, ts: u64, count: u64) {
        if !self.filter.thread(tid) {
            return;
        }
        let t = us(self.p.clock.ns(ts) - self.zero);
        self.sep();
        let _ = write!(
            self.buf,
            "{{\"ph\":\"i\",\"s\":\"t\",\"name\":\"{count} events lost\",\"cat\":\"instrfn\",\
             \"ts\":{t},\"pid\":{},\"tid\":{tid},\"args\":{{\"lost\":{count}}}}}",
            self.p.pid
        );
        self.put();
    }
}

fn chrome(
    procs: &[&Process],
    a: &ExportArgs,
    sink: &mut Sink,
    bar: &indicatif::ProgressBar,
) -> Result<(), String> {
    let zero = procs
        .iter()
        .map(|p| p.clock.ns(p.clock.start.0))
        .fold(f64::INFINITY, f64::min);
    sink.write("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let mut first = true;
    for p in procs {
        let names = Names::of(p, !a.no_demangle, a.lines);
        // Metadata: the process and its threads by name.
        let mut meta = String::new();
        let sep = |s: &mut String, first: &mut bool| {
            if *first {
                *first = false;
            } else {
                s.push_str(",\n");
            }
        };
        sep(&mut meta, &mut first);
        let _ = write!(
            meta,
            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}",
            p.pid,
            quote(&format!("{} (pid {})", p.cmdline.join(" "), p.pid))
        );
        let mut named = std::collections::BTreeSet::new();
        for t in p.threads.iter().rev() {
            if named.insert(t.tid) {
                sep(&mut meta, &mut first);
                let _ = write!(
                    meta,
                    "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                    p.pid,
                    t.tid,
                    quote(&t.name)
                );
            }
        }
        sink.write(&meta)?;
        for slot in p.slots() {
            let mut w = ChromeWriter {
                sink,
                p,
                names: &names,
                filter: Filter::new(&a.filter),
                zero,
                start_ns: p.clock.ns(p.clock.start.0),
                quoted: HashMap::new(),
                buf: String::new(),
                first: &mut first,
                error: None,
                bar,
                seen: 0,
            };
            let r = walk(p, slot, trace_end(p), &mut w);
            w.flush();
            if let Some(e) = w.error {
                return Err(e);
            }
            r.map_err(|e| e.to_string())?;
        }
    }
    sink.write("\n]}\n")
}

/// Self time per distinct stack, for folded output.
struct Folder<'a> {
    p: &'a Process,
    names: &'a Names,
    filter: Filter,
    start_ns: f64,
    stacks: HashMap<Vec<u64>, f64>,
    bar: &'a indicatif::ProgressBar,
    seen: u64,
}

impl Visitor for Folder<'_> {
    fn call(&mut self, c: &Call, stack: &[u64]) {
        self.seen += 2;
        if self.seen >= 1 << 16 {
            self.bar.inc(self.seen);
            self.seen = 0;
        }
        if c.self_ticks == 0 || c.how == End::NoExit {
            return;
        }
        let (p, names) = (self.p, self.names);
        if !self.filter.keep(
            c,
            self.start_ns,
            |t| p.clock.ns(t),
            |f| names.name(f, c.start),
        ) {
            return;
        }
        let ns = c.self_ticks as f64 * p.clock.ns_per_tick();
        match self.stacks.get_mut(stack) {
            Some(v) => *v += ns,
            None => {
                self.stacks.insert(stack.to_vec(), ns);
            }
        }
    }
}

/// `a;b;c <ns>` lines (sorted), one per distinct stack with self time; frame names have `;`
/// replaced (it separates frames).
fn fold(
    procs: &[&Process],
    a: &ExportArgs,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<String>, String> {
    let mut totals: HashMap<String, f64> = HashMap::new();
    for p in procs {
        let names = Names::of(p, !a.no_demangle, a.lines);
        let mut f = Folder {
            p,
            names: &names,
            filter: Filter::new(&a.filter),
            start_ns: p.clock.ns(p.clock.start.0),
            stacks: HashMap::new(),
            bar,
            seen: 0,
        };
        for slot in p.slots() {
            walk(p, slot, trace_end(p), &mut f).map_err(|e| e.to_string())?;
        }
        bar.inc(f.seen);
        let mut cache: HashMap<u64, String> = HashMap::new();
        for (stack, ns) in f.stacks {
            let mut line = String::new();
            for (i, func) in stack.iter().enumerate() {
                if i > 0 {
                    line.push(';');
                }
                let n = cache
                    .entry(*func)
                    .or_insert_with(|| names.name_and_line(*func, u64::MAX).replace(';', ":"));
                line.push_str(n);
            }
            *totals.entry(line).or_insert(0.0) += ns;
        }
    }
    let mut lines: Vec<String> = totals
        .into_iter()
        .map(|(k, v)| (k, v.round() as u64))
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    lines.sort();
    Ok(lines)
}
