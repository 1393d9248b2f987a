//! `instrfn report`: per function, calls, total and self time, and the distribution of call
//! durations, from a trace; a text table or JSON. Uses filter, names, sink and trace_dir.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::{Args, ValueEnum};
use instrfn_trace::calls::{AddrMap, Call, Visitor, trace_end, walk};
use instrfn_trace::stats::{Collect, FuncStats};
use instrfn_trace::{Process, SourceLine, Trace};

use crate::filter::{Filter, FilterArgs, human, processes};
use crate::names::Names;
use crate::sink::write_error;
use crate::trace_dir;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The trace directory (a ring-mode trace: its newest complete snapshot).
    #[arg(default_value = "instrfn.data")]
    pub dir: PathBuf,
    /// Order of the rows (largest first; `name` alphabetical).
    #[arg(long, value_enum, default_value_t = Sort::SelfTime)]
    pub sort: Sort,
    /// One row per thread and function (threads named `pid/tid name`).
    #[arg(long)]
    pub threads: bool,
    /// Only the process with this pid (every image it ran).
    #[arg(long)]
    pub pid: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// At most this many rows (0: all).
    #[arg(long, default_value_t = 0)]
    pub limit: usize,
    /// Show symbol names as they are in the binary.
    #[arg(long)]
    pub no_demangle: bool,
    /// Show where each function starts (file:line, from its DWARF debug information).
    #[arg(long)]
    pub lines: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sort {
    #[value(name = "self")]
    SelfTime,
    Total,
    Calls,
    Min,
    Median,
    P99,
    Max,
    Name,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// A walk's visitor: the filters, then the statistics.
struct Filtered<'a> {
    filter: Filter,
    collect: Collect,
    p: &'a Process,
    names: &'a Names,
}

impl Visitor for Filtered<'_> {
    fn call(&mut self, c: &Call, stack: &[u64]) {
        let (p, names) = (self.p, self.names);
        if !self.filter.keep(c, &p.clock, |f| names.name(f, c.start)) {
            return;
        }
        self.collect.call(c, stack);
    }
    fn enter(&mut self, tid: u32, ts: u64, stack: &[u64]) {
        if self.filter.thread(tid) {
            self.collect.enter(tid, ts, stack);
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub name: String,
    /// Where the function starts (with --lines, when known).
    pub line: Option<SourceLine>,
    /// `pid/tid` with --threads.
    pub thread: Option<(u32, u32, String)>,
    pub stats: FuncStats,
}

/// What a trace's report holds.
pub struct Report {
    pub rows: Vec<Row>,
    pub command: String,
    pub processes: usize,
    pub threads: usize,
    pub events: u64,
    pub lost: u64,
    /// From the earliest start to the latest end of the processes, ns.
    pub duration_ns: f64,
    pub orphan_exits: u64,
    /// Whether the trace is a ring-mode snapshot: exits without entry are calls begun before
    /// its window.
    pub snapshot: bool,
    /// Calls the record-time filters left out.
    pub dropped: u64,
    /// Self time of all rows (before --limit).
    pub self_ns: f64,
}

/// Walks every selected slot of every selected process (in parallel), then merges by name.
pub fn build(trace: &Trace, a: &ReportArgs) -> Result<Report, String> {
    let procs = processes(trace, a.pid)?;
    let names: Vec<Names> = procs
        .iter()
        .map(|p| Names::of(p, !a.no_demangle, a.lines))
        .collect();
    let work: Vec<(usize, u32)> = procs
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.slots().into_iter().map(move |s| (i, s)))
        .collect();
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(work.len())
        .max(1);
    type Part = (usize, Collect, u64, u64);
    let results: Vec<Result<Vec<Part>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(i, slot)) = work.get(k) else {
                            break;
                        };
                        let p = procs[i];
                        let mut v = Filtered {
                            filter: Filter::new(&a.filter),
                            collect: Collect::new(p.clock.ns_per_tick()),
                            p,
                            names: &names[i],
                        };
                        let w = walk(p, slot, trace_end(p), &mut v).map_err(|e| e.to_string())?;
                        out.push((i, v.collect, w.events, w.orphan_exits));
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker failed".into())))
            .collect()
    });
    let mut events = 0;
    let mut orphan_exits = 0;
    // (process, tid) -> function address -> stats
    let mut per: BTreeMap<(usize, u32), AddrMap<FuncStats>> = BTreeMap::new();
    let mut spans: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    for r in results {
        for (i, collect, ev, orphans) in r? {
            events += ev;
            orphan_exits += orphans;
            let p = procs[i];
            for (lo, hi) in collect.spans.values() {
                let s = spans.entry(i).or_insert((f64::MAX, f64::MIN));
                s.0 = s.0.min(p.clock.ns(*lo));
                s.1 = s.1.max(p.clock.ns(*hi));
            }
            for (tid, funcs) in collect.by_thread {
                let m = per.entry((i, tid)).or_default();
                for (f, st) in funcs {
                    m.entry(f).or_default().merge(&st);
                }
            }
        }
    }
    // Rows by thread and name (and with --lines by where the function is: two static
    // functions of one name in two files are two rows).
    type Key = (Option<(u32, u32)>, String, Option<SourceLine>);
    let mut rows: BTreeMap<Key, Row> = BTreeMap::new();
    for ((i, tid), funcs) in &per {
        let p = procs[*i];
        let thread_name = p
            .threads
            .iter()
            .rev()
            .find(|t| t.tid == *tid)
            .map_or(String::new(), |t| t.name.clone());
        for (f, st) in funcs {
            let name = names[*i].name(*f, u64::MAX);
            let line = names[*i].line(*f, u64::MAX);
            let key = (
                a.threads.then_some((p.pid, *tid)),
                name.clone(),
                line.clone(),
            );
            let row = rows.entry(key).or_insert_with(|| Row {
                name,
                line,
                thread: a.threads.then(|| (p.pid, *tid, thread_name.clone())),
                stats: FuncStats::default(),
            });
            row.stats.merge(st);
        }
    }
    let mut rows: Vec<Row> = rows.into_values().collect();
    let self_ns = rows.iter().map(|r| r.stats.self_ns).sum();
    sort(&mut rows, a.sort);
    if a.limit > 0 {
        rows.truncate(a.limit);
    }
    let threads = procs.iter().map(|p| p.thread_count()).sum();
    // The trace's span: each process from its first clock pair to its end (or last event).
    let mut lo = f64::MAX;
    let mut hi = f64::MIN;
    for (i, p) in procs.iter().enumerate() {
        let start = p.clock.ns(p.clock.start.0);
        lo = lo.min(start);
        let end = match p.clock.end {
            Some((c, _)) => p.clock.ns(c),
            None => spans.get(&i).map_or(start, |s| s.1),
        };
        hi = hi.max(end);
    }
    Ok(Report {
        rows,
        command: procs[0].cmdline.join(" "),
        processes: procs.len(),
        threads,
        events,
        lost: procs.iter().map(|p| p.lost_total()).sum(),
        duration_ns: (hi - lo).max(0.0),
        orphan_exits,
        snapshot: procs.iter().any(|p| p.snapshot.is_some()),
        dropped: procs.iter().map(|p| p.dropped).sum(),
        self_ns,
    })
}

fn sort(rows: &mut [Row], by: Sort) {
    let key = |r: &Row| -> f64 {
        let s = &r.stats;
        match by {
            Sort::SelfTime => s.self_ns,
            Sort::Total => s.total_ns,
            Sort::Calls => s.calls as f64,
            Sort::Min => s.min_ns.unwrap_or(0) as f64,
            Sort::Median => s.quantile(0.5).unwrap_or(0) as f64,
            Sort::P99 => s.quantile(0.99).unwrap_or(0) as f64,
            Sort::Max => s.max_ns.unwrap_or(0) as f64,
            Sort::Name => 0.0,
        }
    };
    if by == Sort::Name {
        rows.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(a.line.cmp(&b.line))
                .then(a.thread.cmp(&b.thread))
        });
    } else {
        rows.sort_by(|a, b| {
            key(b)
                .total_cmp(&key(a))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.line.cmp(&b.line))
                .then(a.thread.cmp(&b.thread))
        });
    }
}

pub fn run(a: &ReportArgs) -> Result<ExitCode, String> {
    let trace = trace_dir::open(&a.dir)?;
    let r = build(&trace, a)?;
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let text = match a.format {
        Format::Text => text(&r, a),
        Format::Json => json(&r, a),
    };
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| write_error("standard output", e))?;
    Ok(ExitCode::SUCCESS)
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |v| human(v as f64))
}

fn text(r: &Report, a: &ReportArgs) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "instrfn report: {} — {}, {} process{}, {} thread{}, {} events, {} lost{}",
        r.command,
        human(r.duration_ns),
        r.processes,
        if r.processes == 1 { "" } else { "es" },
        r.threads,
        if r.threads == 1 { "" } else { "s" },
        r.events,
        r.lost,
        if r.orphan_exits > 0 && r.snapshot {
            format!(", {} calls begun before the window", r.orphan_exits)
        } else if r.orphan_exits > 0 {
            format!(", {} exits without their entry", r.orphan_exits)
        } else {
            String::new()
        } + &if r.dropped > 0 {
            format!(
                ", {} calls left out at record time (INSTRFN_DEPTH, INSTRFN_MIN_DURATION)",
                r.dropped
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "{:>10} {:>12} {:>12} {:>6} {:>11} {:>11} {:>11} {:>11}  {}function",
        "calls",
        "total",
        "self",
        "self%",
        "min",
        "median",
        "p99",
        "max",
        if a.threads { "thread  " } else { "" }
    );
    let all_self = r.self_ns;
    for row in &r.rows {
        let st = &row.stats;
        let _ = writeln!(
            s,
            "{:>10} {:>12} {:>12} {:>5.1}% {:>11} {:>11} {:>11} {:>11}  {}{}{}",
            st.calls,
            human(st.total_ns),
            human(st.self_ns),
            if all_self > 0.0 {
                100.0 * st.self_ns / all_self
            } else {
                0.0
            },
            opt(st.min_ns),
            opt(st.quantile(0.5)),
            opt(st.quantile(0.99)),
            opt(st.max_ns),
            row.thread
                .as_ref()
                .map_or(String::new(), |(pid, tid, name)| format!(
                    "{pid}/{tid} {name}  "
                )),
            row.name,
            row.line
                .as_ref()
                .map_or(String::new(), |l| format!(" ({l})"))
        );
    }
    s
}

fn json(r: &Report, a: &ReportArgs) -> String {
    use serde_json::json;
    let rows: Vec<serde_json::Value> = r
        .rows
        .iter()
        .map(|row| {
            let st = &row.stats;
            let mut v = json!({
                "name": row.name,
                "calls": st.calls,
                "total_ns": st.total_ns,
                "self_ns": st.self_ns,
                "min_ns": st.min_ns,
                "median_ns": st.quantile(0.5),
                "p99_ns": st.quantile(0.99),
                "max_ns": st.max_ns,
                "unwound": st.unwound,
                "open_at_end": st.open,
                "entries_without_exit": st.no_exit,
            });
            if a.lines {
                v["file"] = json!(row.line.as_ref().map(|l| &l.file));
                v["line"] = json!(row.line.as_ref().map(|l| l.line));
            }
            if let Some((pid, tid, name)) = &row.thread {
                v["pid"] = json!(pid);
                v["tid"] = json!(tid);
                v["thread"] = json!(name);
            }
            v
        })
        .collect();
    let doc = json!({
        "command": r.command,
        "duration_ns": r.duration_ns,
        "processes": r.processes,
        "threads": r.threads,
        "events": r.events,
        "lost": r.lost,
        "exits_without_entry": r.orphan_exits,
        "snapshot": r.snapshot,
        "dropped_at_record_time": r.dropped,
        "quantiles": "from a log-linear histogram: within 0.4 % of a recorded duration",
        "functions": rows,
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
