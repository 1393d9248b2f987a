//! `instrfn export --format folded|svg`: self time summed per distinct stack. The output is
//! folded stacks (flamegraph.pl, inferno, speedscope), or a flame graph SVG drawn with inferno.
//! Memory grows with the number of distinct stacks, never with the number of events. Uses
//! filter and names.

use std::collections::HashMap;

use instrfn_trace::Process;
use instrfn_trace::calls::{Call, End, Visitor, trace_end, walk};

use crate::filter::{Filter, FilterArgs};
use crate::names::Names;

/// Self time per distinct stack, for folded output.
struct Folder<'a> {
    p: &'a Process,
    names: &'a Names,
    filter: Filter,
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
        if !self.filter.keep(c, &p.clock, |f| names.name(f, c.start)) {
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
pub fn fold(
    procs: &[&Process],
    filter: &FilterArgs,
    demangle: bool,
    lines: bool,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<String>, String> {
    let mut totals: HashMap<String, f64> = HashMap::new();
    for p in procs {
        let names = Names::of(p, demangle, lines);
        let mut f = Folder {
            p,
            names: &names,
            filter: Filter::new(filter),
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

/// A flame graph of `folded` lines, titled `title` (an SVG document).
pub fn svg(folded: &[String], title: &str) -> Result<Vec<u8>, String> {
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_string();
    opt.count_name = "ns".to_string();
    opt.hash = true;
    let mut svg = Vec::new();
    if folded.is_empty() {
        return Err("nothing to draw: no call lasted any time (or the filters left none)".into());
    }
    inferno::flamegraph::from_lines(&mut opt, folded.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    Ok(svg)
}
