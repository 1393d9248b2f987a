//! `instrfn export --format chrome`: a trace as Chrome trace-event JSON (Perfetto,
//! chrome://tracing). Each call is written as a complete event when it ends. So memory grows
//! with the deepest stack, never with the number of events. Uses filter, names and sink.

use std::collections::HashMap;
use std::fmt::Write as _;

use instrfn_trace::Process;
use instrfn_trace::calls::{Call, End, Visitor, trace_end, walk};

use crate::filter::{Filter, FilterArgs};
use crate::names::{FunctionKey, Names};
use crate::sink::Sink;

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

/// Puts `,\n` into `s` before every element but the first.
fn sep(s: &mut String, first: &mut bool) {
    if *first {
        *first = false;
    } else {
        s.push_str(",\n");
    }
}

/// One thread slot's calls as complete events, buffered, then written to the sink.
struct ChromeWriter<'a> {
    sink: &'a mut Sink,
    p: &'a Process,
    names: &'a Names,
    filter: Filter,
    /// ns of the trace's zero (the earliest process start).
    zero: f64,
    /// Function (see [`Names::key`]) -> its JSON-quoted name, and with --lines its
    /// `"file":…,"line":…` args.
    quoted: HashMap<FunctionKey, (String, String)>,
    buf: String,
    first: &'a mut bool,
    error: Option<String>,
    bar: &'a indicatif::ProgressBar,
    seen: u64,
    /// The current thread's first event (ticks), where calls begun before the trace (or a
    /// snapshot's window) are drawn from.
    thread_start: Option<u64>,
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
        sep(&mut self.buf, self.first);
    }
}

impl Visitor for ChromeWriter<'_> {
    fn call(&mut self, c: &Call, _stack: &[u64]) {
        self.seen += if c.how == End::NoExit { 1 } else { 2 };
        let (p, names) = (self.p, self.names);
        if !self.filter.keep(c, &p.clock, |f| names.name(f, c.start)) {
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
    fn thread(&mut self, _tid: u32, ts: u64) {
        self.thread_start = Some(ts);
    }
    fn orphan_exit(&mut self, tid: u32, ts: u64, func: u64, open: &[u64]) {
        // Begun before the window (no call open below it: else its entry was lost, and a
        // slice from the start would not nest): a slice from the thread's first event.
        let Some(start) = self.thread_start.filter(|_| open.is_empty()) else {
            return;
        };
        let call = Call {
            tid,
            func,
            start,
            end: ts,
            depth: 0,
            self_ticks: ts.saturating_sub(start),
            how: End::Exit,
            outermost: true,
        };
        let (p, names) = (self.p, self.names);
        if !self.filter.keep(&call, &p.clock, |f| names.name(f, start)) {
            return;
        }
        self.seen += 1;
        let name = quote(&names.name(func, start));
        self.sep();
        let _ = write!(
            self.buf,
            "{{\"ph\":\"X\",\"name\":{name},\"cat\":\"function\",\"ts\":{},\"dur\":{},\
             \"pid\":{},\"tid\":{tid},\"args\":{{\"begun\":\"before the {}\"}}}}",
            us(p.clock.ns(start) - self.zero),
            us(ts.saturating_sub(start) as f64 * p.clock.ns_per_tick()),
            p.pid,
            if p.snapshot.is_some() {
                "window"
            } else {
                "trace"
            }
        );
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

/// Writes the calls of `procs` that `filter` keeps; function names demangled or not, with
/// `lines` their source lines.
pub fn write(
    procs: &[&Process],
    filter: &FilterArgs,
    demangle: bool,
    lines: bool,
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
        let names = Names::of(p, demangle, lines);
        // Metadata: the process and its threads by name.
        let mut meta = String::new();
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
                filter: Filter::new(filter),
                zero,
                quoted: HashMap::new(),
                buf: String::new(),
                first: &mut first,
                error: None,
                bar,
                seen: 0,
                thread_start: None,
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
