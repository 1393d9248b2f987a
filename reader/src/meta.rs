//! The meta file of one program image (docs/trace-format.md, "The meta file"). Its text lines
//! are parsed into the process's description, clock, modules, threads and losses. Uses error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use instrfn_format::META_VERSION;

use crate::error::{EMPTY, Error, NOT_A_TRACE, TRUNCATED, error};

/// The counter the events carry, and how it relates to CLOCK_MONOTONIC.
#[derive(Debug, Clone, PartialEq)]
pub struct Clock {
    /// `tsc`, `cntvct`, `time`, `stckf` or `monotonic`.
    pub name: String,
    /// (counter, CLOCK_MONOTONIC ns) at start and, if the process ended normally, at the end.
    pub start: (u64, u64),
    pub end: Option<(u64, u64)>,
    /// CLOCK_REALTIME at start, in ns since the epoch.
    pub realtime_start: u64,
}

impl Clock {
    /// Nanoseconds per counter tick: from the two pairs when there are two, else the
    /// counter's nominal rate (for `monotonic` exactly 1; for the others an estimate is used
    /// until the end pair is known — a process killed before its end line).
    pub fn ns_per_tick(&self) -> f64 {
        if let Some(end) = self.end
            && end.0 > self.start.0
            && end.1 > self.start.1
        {
            return (end.1 - self.start.1) as f64 / (end.0 - self.start.0) as f64;
        }
        match self.name.as_str() {
            "monotonic" => 1.0,
            "stckf" => 1000.0 / 4096.0,
            "cntvct" | "time" => 1.0,
            _ => 1.0 / 3.0,
        }
    }

    /// A counter value as nanoseconds of CLOCK_MONOTONIC.
    pub fn ns(&self, counter: u64) -> f64 {
        let d = counter as i128 - self.start.0 as i128;
        self.start.1 as f64 + d as f64 * self.ns_per_tick()
    }
}

/// A loaded object: where its code is, its load bias, its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub bias: u64,
    pub start: u64,
    pub end: u64,
    pub path: PathBuf,
    /// The counter value at which `dlclose` unloaded it (an `unload` line), if it did.
    pub unloaded: Option<u64>,
    /// Its file's identity when it was recorded (None: a trace whose module lines carry
    /// none).
    pub identity: Option<Identity>,
}

/// What identifies a file: its GNU build-id, and its size, modification time and a hash of
/// its first 4 KiB when it was recorded (docs/trace-format.md). All zero: the runtime could
/// not read the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub build_id: Option<String>,
    pub size: u64,
    pub mtime_ns: u64,
    /// 16 hex digits (FNV-1a 64).
    pub head_hash: String,
}

impl Module {
    /// Whether `addr` at counter time `ts` was this object's.
    pub fn holds(&self, addr: u64, ts: u64) -> bool {
        (self.start..self.end).contains(&addr) && self.unloaded.is_none_or(|u| ts < u)
    }
}

/// The executable's identity when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exe {
    pub path: PathBuf,
    pub build_id: Option<String>,
    pub size: u64,
    pub mtime_ns: u64,
    pub head_hash: String,
}

/// A thread that took a slot (from a `thread` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    pub slot: u32,
    pub tid: u32,
    pub name: String,
}

/// What the collector thread did (src/collector.rs of the runtime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collector {
    pub tid: u32,
    /// Its CPU time, in nanoseconds.
    pub cpu_ns: u64,
    /// Chunks threads took from its pool, and chunks they had to prepare themselves (the pool
    /// was empty).
    pub prepared: u64,
    pub by_threads: u64,
}

/// What a meta file says ([`crate::Process`] has the same fields).
pub(crate) struct Meta {
    pub pid: u32,
    pub ppid: u32,
    pub image: u32,
    pub cmdline: Vec<String>,
    pub exe: Option<Exe>,
    pub clock: Clock,
    pub modules: Vec<Module>,
    pub threads: Vec<ThreadInfo>,
    pub lost: BTreeMap<u32, u64>,
    pub dropped: u64,
    pub ended: bool,
    pub collector: Option<Collector>,
    pub snapshot: Option<String>,
}

/// Decodes a percent-encoded word (`-` is the empty word).
pub fn decode_word(w: &str) -> String {
    if w == "-" {
        return String::new();
    }
    let b = w.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("x"), 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A number field (decimal, or hex after `0x`) of line `line`.
fn number(path: &Path, line: usize, w: Option<&str>) -> Result<u64, Error> {
    let w = w.ok_or_else(|| error(path, format!("line {line}: a field is missing")))?;
    let v = match w.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => w.parse(),
    };
    v.map_err(|_| error(path, format!("line {line}: `{w}` is not a number")))
}

impl Meta {
    /// Reads and parses the meta file at `path`.
    pub(crate) fn read(path: &Path) -> Result<Meta, Error> {
        let text = std::fs::read(path).map_err(|e| error(path, format!("cannot read: {e}")))?;
        if text.is_empty() {
            return Err(error(path, EMPTY));
        }
        let text = String::from_utf8_lossy(&text);
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("");
        let version = first
            .strip_prefix("instrfn-trace ")
            .ok_or_else(|| error(path, NOT_A_TRACE))?;
        let version: u32 = version
            .trim()
            .parse()
            .map_err(|_| error(path, format!("unreadable format version `{version}`")))?;
        if version > META_VERSION {
            return Err(error(
                path,
                format!(
                    "trace format version {version} is newer than this instrfn reads ({META_VERSION}): use a newer instrfn"
                ),
            ));
        }
        let mut m = Meta {
            pid: 0,
            ppid: 0,
            image: 1,
            cmdline: Vec::new(),
            exe: None,
            clock: Clock {
                name: String::new(),
                start: (0, 0),
                end: None,
                realtime_start: 0,
            },
            modules: Vec::new(),
            threads: Vec::new(),
            lost: BTreeMap::new(),
            dropped: 0,
            ended: false,
            collector: None,
            snapshot: None,
        };
        let mut have_process = false;
        let mut clocks = 0;
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            let mut w = line.split(' ');
            match w.next().unwrap_or("") {
                "process" => {
                    m.pid = number(path, n, w.next())? as u32;
                    m.ppid = number(path, n, w.next())? as u32;
                    m.image = number(path, n, w.next())? as u32;
                    have_process = true;
                }
                "cmdline" => m.cmdline = w.map(decode_word).collect(),
                "exe" => {
                    let exe = PathBuf::from(decode_word(w.next().unwrap_or("-")));
                    let id = w.next().unwrap_or("-");
                    m.exe = Some(Exe {
                        path: exe,
                        build_id: (id != "-").then(|| id.to_string()),
                        size: number(path, n, w.next())?,
                        mtime_ns: number(path, n, w.next())?,
                        head_hash: w.next().unwrap_or("").to_string(),
                    });
                }
                "clock" => {
                    let name = w.next().unwrap_or("").to_string();
                    let counter = number(path, n, w.next())?;
                    let mono = number(path, n, w.next())?;
                    let real = number(path, n, w.next())?;
                    if clocks == 0 {
                        m.clock.name = name;
                        m.clock.start = (counter, mono);
                        m.clock.realtime_start = real;
                    } else {
                        m.clock.end = Some((counter, mono));
                    }
                    clocks += 1;
                }
                "module" => {
                    let bias = number(path, n, w.next())?;
                    let start = number(path, n, w.next())?;
                    let end = number(path, n, w.next())?;
                    let file = PathBuf::from(decode_word(w.next().unwrap_or("-")));
                    // The identity fields are optional: traces of older runtimes lack them.
                    let identity = match w.next() {
                        Some(id) => Some(Identity {
                            build_id: (id != "-").then(|| id.to_string()),
                            size: number(path, n, w.next())?,
                            mtime_ns: number(path, n, w.next())?,
                            head_hash: w.next().unwrap_or("").to_string(),
                        }),
                        None => None,
                    };
                    m.modules.push(Module {
                        bias,
                        start,
                        end,
                        path: file,
                        unloaded: None,
                        identity,
                    });
                }
                "thread" => {
                    let slot = number(path, n, w.next())? as u32;
                    let tid = number(path, n, w.next())? as u32;
                    let name = decode_word(w.next().unwrap_or("-"));
                    m.threads.push(ThreadInfo { slot, tid, name });
                }
                "lost" => {
                    let slot = number(path, n, w.next())? as u32;
                    *m.lost.entry(slot).or_default() += number(path, n, w.next())?;
                }
                "collector" => {
                    let tid = number(path, n, w.next())? as u32;
                    let cpu_ns = number(path, n, w.next())?;
                    let prepared = number(path, n, w.next())?;
                    let by_threads = number(path, n, w.next())?;
                    m.collector = (tid != 0).then_some(Collector {
                        tid,
                        cpu_ns,
                        prepared,
                        by_threads,
                    });
                }
                "dropped" => {
                    let _slot = number(path, n, w.next())?;
                    m.dropped += number(path, n, w.next())?;
                }
                "unload" => {
                    let start = number(path, n, w.next())?;
                    let at = number(path, n, w.next())?;
                    if let Some(module) = m
                        .modules
                        .iter_mut()
                        .rev()
                        .find(|module| module.start == start && module.unloaded.is_none())
                    {
                        module.unloaded = Some(at);
                    }
                }
                "end" => m.ended = true,
                "snapshot" => m.snapshot = Some(w.next().unwrap_or("").to_string()),
                // A line this reader does not know (a minor addition of a later runtime).
                _ => {}
            }
        }
        if !have_process || clocks == 0 {
            return Err(error(path, TRUNCATED));
        }
        Ok(m)
    }
}
