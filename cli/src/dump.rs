//! `instrfn dump`: the raw events of a trace, per process and thread slot, and the summary
//! line that `dump --summary` and `record` print. Uses names, sink and trace_dir.

use std::path::Path;
use std::process::ExitCode;

use instrfn_trace::{Kind, Trace};

use crate::names::Names;
use crate::sink::{put, write_error};
use crate::trace_dir;

/// Lists every event of the trace in `dir`, with function names unless `raw` (demangled if
/// `demangle`).
pub fn dump(dir: &Path, raw: bool, demangle: bool) -> Result<ExitCode, String> {
    use std::io::Write;
    let trace = trace_dir::open(dir)?;
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
        let names = (!raw).then(|| Names::of(p, demangle, false));
        let t0 = p.clock.start.0;
        for slot in p.slots() {
            // A thread's line at its first event and again at its exit: once each, unless
            // it was renamed meanwhile.
            let mut threads: Vec<String> = p
                .threads_of(slot)
                .map(|t| format!("{} {}", t.tid, t.name))
                .collect();
            threads.dedup();
            let lost = p.lost.get(&slot).copied().unwrap_or(0);
            put(
                &mut out,
                format!(
                    "  thread slot {slot}: {}{}",
                    threads.join(", "),
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
                let what = match (e.kind, &names) {
                    (Kind::Lost, _) => format!("{} events", e.value),
                    (_, Some(names)) => names.name(e.value, e.ts),
                    (_, None) => format!("{:#x}", e.value),
                };
                put(&mut out, format!("    {ns:>14.0} {} {what}", e.kind.name()))?;
            }
        }
    }
    out.flush().map_err(|e| write_error("standard output", e))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the summary line of the trace in `dir`.
pub fn summary(dir: &Path) -> Result<ExitCode, String> {
    let trace = trace_dir::open(dir)?;
    println!("{}", trace_summary(&trace, &trace.dir).1);
    Ok(ExitCode::SUCCESS)
}

/// The events of a trace (thread events not counted) and its summary line.
pub fn trace_summary(trace: &Trace, dir: &Path) -> (u64, String) {
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
        threads += p.thread_count();
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
