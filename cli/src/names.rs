//! Function names of one process (and with `--lines` their source lines), for `instrfn
//! report`, `export` and `dump`. Also the one-line warning for a module whose file cannot be
//! used any more (gone, changed since recording, another machine's). It is said once per
//! module, above the progress bar if one is drawn. Uses nothing else of the crate.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use instrfn_trace::{Found, Problem, Process, SourceLine, Symbols, demangle};

/// Modules already warned about (path and why), over every process of the command.
static WARNED: Mutex<BTreeSet<(std::path::PathBuf, String)>> = Mutex::new(BTreeSet::new());
/// The progress bar drawn on stderr, if one is: warnings are printed above it.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Warnings go above `bar` while it is drawn.
pub fn set_progress_bar(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = bar;
}

/// Prints one line on stderr (above the progress bar while one is drawn).
pub fn say(line: &str) {
    match BAR.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

/// Says (once per module and reason, on stderr) that a module's addresses show raw.
pub fn warn(p: &Problem) {
    if !p.first_time() {
        return;
    }
    let fresh = WARNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((p.path.clone(), p.why.clone()));
    if !fresh {
        return;
    }
    say(&format!(
        "instrfn: {}: {}: its functions show as addresses",
        p.path.display(),
        p.why
    ));
}

/// A function of a process: its address, and (when objects were unloaded) the module that
/// held it (see [`Names::key`]).
pub type FunctionKey = (u64, Option<usize>);

/// Function names of one process.
pub struct Names {
    symbols: Symbols,
    demangle: bool,
    /// Whether an object was unloaded (then a name depends on the time).
    unloads: bool,
    /// Whether source lines are wanted (`--lines`).
    lines: bool,
    /// Source line per function address (and module, when objects were unloaded).
    line_cache: Mutex<HashMap<FunctionKey, Option<SourceLine>>>,
}

impl Names {
    pub fn of(p: &Process, demangle: bool, lines: bool) -> Names {
        Names {
            symbols: Symbols::of(p),
            demangle,
            unloads: p.modules.iter().any(|m| m.unloaded.is_some()),
            lines,
            line_cache: Mutex::new(HashMap::new()),
        }
    }

    fn when(&self, ts: u64) -> u64 {
        if self.unloads { ts } else { u64::MAX }
    }

    /// The name of the function at `addr` (at counter time `ts`), or the address in hex (no
    /// symbol covers it, or its module's file cannot be used: said once).
    pub fn name(&self, addr: u64, ts: u64) -> String {
        match self.symbols.find(addr, self.when(ts)) {
            Found::Symbol(n) if self.demangle => demangle(n),
            Found::Symbol(n) => n.to_string(),
            Found::Untrusted(problem) | Found::Stripped(problem) => {
                warn(problem);
                format!("{addr:#x}")
            }
            Found::Unknown => format!("{addr:#x}"),
        }
    }

    /// What identifies the function at `addr` at time `ts`: the address, and when objects
    /// were unloaded (one address may then be two functions) the module that held it.
    pub fn key(&self, addr: u64, ts: u64) -> FunctionKey {
        (
            addr,
            if self.unloads {
                self.symbols.module_index(addr, ts)
            } else {
                None
            },
        )
    }

    /// With `--lines`, the file and line where the function at `addr` starts (resolved once
    /// per function); None without `--lines` or without debug information.
    pub fn line(&self, addr: u64, ts: u64) -> Option<SourceLine> {
        if !self.lines {
            return None;
        }
        let key = self.key(addr, ts);
        let ts = self.when(ts);
        let mut cache = self.line_cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(key)
            .or_insert_with(|| self.symbols.line_at(addr, ts))
            .clone()
    }

    /// The function's name, followed with `--lines` by ` (file:line)` where known.
    pub fn name_and_line(&self, addr: u64, ts: u64) -> String {
        let name = self.name(addr, ts);
        match self.line(addr, ts) {
            Some(l) => format!("{name} ({l})"),
            None => name,
        }
    }
}
