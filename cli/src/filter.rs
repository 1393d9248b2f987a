//! What `instrfn report` and `instrfn export` select: the processes (`--pid`) and the calls
//! (the filters), and the duration syntax the filters use. Uses nothing else of the crate.

use clap::Args;
use instrfn_trace::calls::{AddrMap, Call};
use instrfn_trace::{Clock, Process, Trace};

/// Which calls count (every filter must let a call through).
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only functions whose (demangled) name matches: `*` and `?` wildcards, else a substring.
    /// Repeat for several.
    #[arg(long = "filter", value_name = "PATTERN")]
    pub include: Vec<String>,
    /// Leave out functions whose name matches (same syntax). Repeat for several.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Only calls with fewer than N calls open below them (1: outermost calls only).
    #[arg(long, value_name = "N")]
    pub depth: Option<u32>,
    /// Only calls that lasted at least this long (`10us`, `1.5ms`, `2s`, `300ns`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub min_duration: Option<f64>,
    /// Only calls that overlap this span, from the process's start: `10ms..20ms`, `..1s`,
    /// `500us..`.
    #[arg(long, value_name = "FROM..TO", value_parser = parse_range)]
    pub time_range: Option<(f64, f64)>,
    /// Only these threads (by thread id). Repeat for several.
    #[arg(long, value_name = "TID")]
    pub tid: Vec<u32>,
}

/// A duration in nanoseconds from `123`, `123ns`, `4.5us` (or `µs`), `6ms`, `7s`.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (say 10us, 1.5ms, 2s)"))?;
    let scale = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => return Err(format!("`{s}`: unknown unit `{u}` (ns, us, ms, s)")),
    };
    if !v.is_finite() {
        return Err(format!("`{s}` is not a duration"));
    }
    Ok(v * scale)
}

/// `FROM..TO` (either side may be left out) in nanoseconds.
pub fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let Some((a, b)) = s.split_once("..") else {
        return Err(format!(
            "`{s}` is not a span (say 10ms..20ms, ..1s or 500us..)"
        ));
    };
    let a = if a.trim().is_empty() {
        0.0
    } else {
        parse_duration(a)?
    };
    let b = if b.trim().is_empty() {
        f64::INFINITY
    } else {
        parse_duration(b)?
    };
    if b < a {
        return Err(format!("`{s}`: the span ends before it starts"));
    }
    Ok((a, b))
}

/// A name pattern: `*` any run of characters, `?` any one; without wildcards, a substring.
#[derive(Debug, Clone)]
pub struct Pattern(String);

impl Pattern {
    pub fn new(p: &str) -> Pattern {
        Pattern(p.to_string())
    }

    pub fn matches(&self, name: &str) -> bool {
        glob::matches(self.0.as_bytes(), name.as_bytes())
    }
}

/// The pattern syntax the runtime's INSTRFN_FILTER uses too: one file for both.
#[path = "../../src/base/glob.rs"]
mod glob;

/// The filters, compiled, for one process.
pub struct Filter {
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
    depth: Option<u32>,
    min_ns: Option<f64>,
    range: Option<(f64, f64)>,
    tids: Vec<u32>,
    /// Names decided per function address.
    names: AddrMap<bool>,
}

impl Filter {
    pub fn new(a: &FilterArgs) -> Filter {
        Filter {
            include: a.include.iter().map(|p| Pattern::new(p)).collect(),
            exclude: a.exclude.iter().map(|p| Pattern::new(p)).collect(),
            depth: a.depth,
            min_ns: a.min_duration,
            range: a.time_range,
            tids: a.tid.clone(),
            names: AddrMap::default(),
        }
    }

    /// Whether the thread's calls can count at all.
    pub fn thread(&self, tid: u32) -> bool {
        self.tids.is_empty() || self.tids.contains(&tid)
    }

    /// Whether `c` counts. `clock`: its process's; `name` resolves a function address (called
    /// once per address).
    pub fn keep(&mut self, c: &Call, clock: &Clock, name: impl FnOnce(u64) -> String) -> bool {
        if !self.thread(c.tid) {
            return false;
        }
        if self.depth.is_some_and(|d| c.depth >= d) {
            return false;
        }
        if self.min_ns.is_some() || self.range.is_some() {
            let start_ns = clock.ns(clock.start.0);
            let (a, b) = (clock.ns(c.start) - start_ns, clock.ns(c.end) - start_ns);
            if self.min_ns.is_some_and(|m| b - a < m) {
                return false;
            }
            if let Some((lo, hi)) = self.range
                && (b < lo || a > hi)
            {
                return false;
            }
        }
        if self.include.is_empty() && self.exclude.is_empty() {
            return true;
        }
        let (include, exclude) = (&self.include, &self.exclude);
        *self.names.entry(c.func).or_insert_with(|| {
            let n = name(c.func);
            (include.is_empty() || include.iter().any(|p| p.matches(&n)))
                && !exclude.iter().any(|p| p.matches(&n))
        })
    }
}

/// The processes of `trace` with pid `pid` (every image it ran), or all.
pub fn processes(trace: &Trace, pid: Option<u32>) -> Result<Vec<&Process>, String> {
    let procs: Vec<&Process> = trace
        .processes
        .iter()
        .filter(|p| pid.is_none_or(|pid| p.pid == pid))
        .collect();
    if procs.is_empty() {
        return Err(format!(
            "{}: no process {} in this trace",
            trace.dir.display(),
            pid.unwrap_or(0)
        ));
    }
    Ok(procs)
}

/// A duration for people: `850 ns`, `12.3 µs`, `4.56 ms`, `7.89 s`.
pub fn human(ns: f64) -> String {
    let a = ns.abs();
    if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.3} µs", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.3} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ranges() {
        assert_eq!(parse_duration("10us").unwrap(), 10_000.0);
        assert_eq!(parse_duration("1.5ms").unwrap(), 1_500_000.0);
        assert_eq!(parse_duration("2s").unwrap(), 2e9);
        assert_eq!(parse_duration("300").unwrap(), 300.0);
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("ms").is_err());
        assert_eq!(parse_range("..1s").unwrap(), (0.0, 1e9));
        assert_eq!(parse_range("5ms..").unwrap(), (5e6, f64::INFINITY));
        assert!(parse_range("2s..1s").is_err());
        assert!(parse_range("1s").is_err());
    }

    #[test]
    fn patterns() {
        assert!(Pattern::new("sort").matches("quicksort"));
        assert!(Pattern::new("quick*").matches("quicksort"));
        assert!(!Pattern::new("quick*").matches("aquicksort"));
        assert!(Pattern::new("*::new").matches("alloc::vec::Vec<T>::new"));
        assert!(Pattern::new("a?c").matches("abc"));
        assert!(!Pattern::new("a?c").matches("ac"));
        assert!(Pattern::new("*").matches(""));
    }
}
