//! Reads the trace directories that instrfn's trace mode writes (docs/trace-format.md, the
//! format's one reader): each program image's meta file (text) and events file (chunks of
//! 16-byte events, memory-mapped). The commands (`instrfn dump`, `report`, `export`) build on
//! this; nothing else knows the format.
//!
//! Bad input never panics: a missing, truncated, corrupt or future-version trace is an
//! [`Error`] naming the file and the problem.

pub mod calls;
pub mod stats;
pub mod symbols;
pub mod xray;

pub use symbols::{Found, Problem, SourceLine, Symbols, demangle};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The format version this reader knows.
pub const VERSION: u32 = 4;
const CHUNK_MAGIC: &[u8; 8] = b"IFNCHNK1";
const CHUNK_HEADER: usize = 64;
const EVENT_BYTES: usize = 16;
/// A short event of a version 2 chunk (docs/trace-format.md, "Compact events").
const SHORT_BYTES: usize = 8;
const TIME_MASK: u64 = (1 << 30) - 1;
/// A call word of a version 3 chunk (docs/trace-format.md, "Call words"): tag 3 with this
/// bit set; its 61-bit value's fields.
const CALL_MARK: u64 = 0x80;
const CALL_T0_BITS: u32 = 26;
const CALL_DUR_BITS: u32 = 12;
const CALL_FN_OFFSET: u64 = (1 << 31) - (1 << 22);

/// A problem with a trace: the file (or directory) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for Error {}

const NO_TRACE: &str = "no trace in this directory (no <pid>.<image>.meta file)";
const NOT_A_TRACE: &str = "not an instrfn trace (its first line is not `instrfn-trace <version>`)";
const TRUNCATED: &str = "truncated: no `process` or `clock` line";
const EMPTY: &str = "empty: the process wrote none of its trace";

impl Error {
    /// The directory holds no meta file at all.
    pub fn no_trace(&self) -> bool {
        self.message == NO_TRACE
    }

    /// A meta file without its header lines (empty or cut short: its disk was full, say).
    pub fn meta_incomplete(&self) -> bool {
        self.message == NOT_A_TRACE || self.message == TRUNCATED || self.message == EMPTY
    }
}

fn error(path: &Path, message: impl Into<String>) -> Error {
    Error {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// What an event says (the kind in its low 4 bits, docs/trace-format.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A function was entered.
    Entry,
    /// A function returned.
    Exit,
    /// A function's frame was removed by unwinding or longjmp (closed at this time).
    Unwound,
    /// `value` events were lost just before this point.
    Lost,
    /// A function was entered, and its exit will not be recorded (shadow stack full, or
    /// return addresses could not be replaced).
    EntryNoExit,
    /// Another thread (tid = `value`) took over the slot here: the events after it are its.
    Thread,
}

impl Kind {
    fn from_bits(k: u64) -> Option<Kind> {
        Some(match k {
            1 => Kind::Entry,
            2 => Kind::Exit,
            3 => Kind::Unwound,
            4 => Kind::Lost,
            5 => Kind::EntryNoExit,
            6 => Kind::Thread,
            _ => return None,
        })
    }

    /// The word `instrfn dump` prints.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Entry => "entry",
            Kind::Exit => "exit",
            Kind::Unwound => "unwound",
            Kind::Lost => "lost",
            Kind::EntryNoExit => "entry-no-exit",
            Kind::Thread => "thread",
        }
    }
}

/// One event of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The raw counter ([`Clock::ns`] converts it).
    pub ts: u64,
    pub kind: Kind,
    /// The function's runtime address, or (for [`Kind::Lost`]) the number of events lost.
    pub value: u64,
}

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
    /// Its file's identity when it was recorded (None: a trace written before module lines
    /// carried one).
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

/// One chunk of an events or staging file.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    /// Which file: 0 the events file, 1 the staging file.
    file: usize,
    offset: usize,
    len: usize,
    slot: u32,
    tid: u32,
    seq: u64,
    /// 1: events of 16 bytes; 2: compact events, relative to the time and code bases.
    version: u32,
    tbase: u64,
    cbase: u64,
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

/// One program image's trace.
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub image: u32,
    pub cmdline: Vec<String>,
    pub exe: Option<Exe>,
    pub clock: Clock,
    pub modules: Vec<Module>,
    /// Every `thread` line, in order.
    pub threads: Vec<ThreadInfo>,
    /// Events lost per slot (from `lost` lines).
    pub lost: BTreeMap<u32, u64>,
    /// Calls the record-time filters left out (INSTRFN_DEPTH, INSTRFN_MIN_DURATION), from
    /// `dropped` lines, all slots together.
    pub dropped: u64,
    /// Whether the process wrote its `end` line (it exited normally).
    pub ended: bool,
    /// The collector thread at the end (from the `collector` line), if it ran.
    pub collector: Option<Collector>,
    /// The files read.
    pub meta_path: PathBuf,
    pub events_path: PathBuf,
    /// The staging file (format version 2; none for version 1 traces).
    pub stage_path: PathBuf,
    /// The events file's and the staging file's mappings (None: empty or absent).
    maps: [Option<memmap2::Mmap>; 2],
    little_endian: bool,
    chunks: Vec<Chunk>,
}

/// A whole trace directory: its processes, ordered by (pid, image).
pub struct Trace {
    pub dir: PathBuf,
    pub processes: Vec<Process>,
}

impl Trace {
    /// Reads every process image in `dir`.
    pub fn open(dir: &Path) -> Result<Trace, Error> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            error(
                dir,
                if e.kind() == std::io::ErrorKind::NotFound {
                    "no such trace directory".to_string()
                } else {
                    format!("cannot read the trace directory: {e}")
                },
            )
        })?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".meta").map(str::to_string))
            .collect();
        names.sort();
        if names.is_empty() {
            return Err(error(dir, NO_TRACE));
        }
        let mut processes = names
            .iter()
            .map(|n| {
                Process::open(
                    &dir.join(format!("{n}.meta")),
                    &dir.join(format!("{n}.events")),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        processes.sort_by_key(|p| (p.pid, p.image));
        Ok(Trace {
            dir: dir.to_path_buf(),
            processes,
        })
    }
}

/// The byte ranges of a file that hold data, from `lseek(SEEK_DATA / SEEK_HOLE)`; the whole
/// file where the file system cannot tell.
fn data_ranges(f: &std::fs::File, len: usize) -> Vec<(usize, usize)> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let mut ranges = Vec::new();
    let mut at = 0usize;
    while at < len {
        // SAFETY: lseek on a descriptor we own; it only moves the file offset.
        let start = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // no data after `at`
            }
            return vec![(0, len)];
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        if end <= start {
            return vec![(0, len)];
        }
        ranges.push((start as usize, (end as usize).min(len)));
        at = end as usize;
    }
    ranges
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

fn number(path: &Path, line: usize, w: Option<&str>) -> Result<u64, Error> {
    let w = w.ok_or_else(|| error(path, format!("line {line}: a field is missing")))?;
    let v = match w.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => w.parse(),
    };
    v.map_err(|_| error(path, format!("line {line}: `{w}` is not a number")))
}

impl Process {
    fn open(meta_path: &Path, events_path: &Path) -> Result<Process, Error> {
        let text =
            std::fs::read(meta_path).map_err(|e| error(meta_path, format!("cannot read: {e}")))?;
        if text.is_empty() {
            return Err(error(meta_path, EMPTY));
        }
        let text = String::from_utf8_lossy(&text);
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("");
        let version = first
            .strip_prefix("instrfn-trace ")
            .ok_or_else(|| error(meta_path, NOT_A_TRACE))?;
        let version: u32 = version
            .trim()
            .parse()
            .map_err(|_| error(meta_path, format!("unreadable format version `{version}`")))?;
        if version > VERSION {
            return Err(error(
                meta_path,
                format!(
                    "trace format version {version} is newer than this instrfn reads ({VERSION}): use a newer instrfn"
                ),
            ));
        }
        let mut p = Process {
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
            meta_path: meta_path.to_path_buf(),
            events_path: events_path.to_path_buf(),
            stage_path: events_path.with_extension("stage"),
            maps: [None, None],
            little_endian: cfg!(target_endian = "little"),
            chunks: Vec::new(),
        };
        let mut have_process = false;
        let mut clocks = 0;
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            let mut w = line.split(' ');
            match w.next().unwrap_or("") {
                "process" => {
                    p.pid = number(meta_path, n, w.next())? as u32;
                    p.ppid = number(meta_path, n, w.next())? as u32;
                    p.image = number(meta_path, n, w.next())? as u32;
                    have_process = true;
                }
                "cmdline" => p.cmdline = w.map(decode_word).collect(),
                "exe" => {
                    let path = PathBuf::from(decode_word(w.next().unwrap_or("-")));
                    let id = w.next().unwrap_or("-");
                    p.exe = Some(Exe {
                        path,
                        build_id: (id != "-").then(|| id.to_string()),
                        size: number(meta_path, n, w.next())?,
                        mtime_ns: number(meta_path, n, w.next())?,
                        head_hash: w.next().unwrap_or("").to_string(),
                    });
                }
                "clock" => {
                    let name = w.next().unwrap_or("").to_string();
                    let counter = number(meta_path, n, w.next())?;
                    let mono = number(meta_path, n, w.next())?;
                    let real = number(meta_path, n, w.next())?;
                    if clocks == 0 {
                        p.clock.name = name;
                        p.clock.start = (counter, mono);
                        p.clock.realtime_start = real;
                    } else {
                        p.clock.end = Some((counter, mono));
                    }
                    clocks += 1;
                }
                "module" => {
                    let bias = number(meta_path, n, w.next())?;
                    let start = number(meta_path, n, w.next())?;
                    let end = number(meta_path, n, w.next())?;
                    let path = PathBuf::from(decode_word(w.next().unwrap_or("-")));
                    // Trailing identity fields (absent in traces of older runtimes).
                    let identity = match w.next() {
                        Some(id) => Some(Identity {
                            build_id: (id != "-").then(|| id.to_string()),
                            size: number(meta_path, n, w.next())?,
                            mtime_ns: number(meta_path, n, w.next())?,
                            head_hash: w.next().unwrap_or("").to_string(),
                        }),
                        None => None,
                    };
                    p.modules.push(Module {
                        bias,
                        start,
                        end,
                        path,
                        unloaded: None,
                        identity,
                    });
                }
                "thread" => {
                    let slot = number(meta_path, n, w.next())? as u32;
                    let tid = number(meta_path, n, w.next())? as u32;
                    let name = decode_word(w.next().unwrap_or("-"));
                    p.threads.push(ThreadInfo { slot, tid, name });
                }
                "lost" => {
                    let slot = number(meta_path, n, w.next())? as u32;
                    *p.lost.entry(slot).or_default() += number(meta_path, n, w.next())?;
                }
                "collector" => {
                    let tid = number(meta_path, n, w.next())? as u32;
                    let cpu_ns = number(meta_path, n, w.next())?;
                    let prepared = number(meta_path, n, w.next())?;
                    let by_threads = number(meta_path, n, w.next())?;
                    p.collector = (tid != 0).then_some(Collector {
                        tid,
                        cpu_ns,
                        prepared,
                        by_threads,
                    });
                }
                "dropped" => {
                    let _slot = number(meta_path, n, w.next())?;
                    p.dropped += number(meta_path, n, w.next())?;
                }
                "unload" => {
                    let start = number(meta_path, n, w.next())?;
                    let at = number(meta_path, n, w.next())?;
                    if let Some(m) = p
                        .modules
                        .iter_mut()
                        .rev()
                        .find(|m| m.start == start && m.unloaded.is_none())
                    {
                        m.unloaded = Some(at);
                    }
                }
                "end" => p.ended = true,
                // A later minor addition: skipped.
                _ => {}
            }
        }
        if !have_process || clocks == 0 {
            return Err(error(meta_path, TRUNCATED));
        }
        p.map_events()?;
        Ok(p)
    }

    /// Maps the events file and the staging file and lists their chunks: a chunk is in one of
    /// them or, after a SIGKILL between a commit's copy and the clearing of its staging chunk,
    /// in both: the copy with more events counts.
    fn map_events(&mut self) -> Result<(), Error> {
        let mut sizes = Vec::new();
        for file in 0..2 {
            let path = if file == 0 {
                self.events_path.clone()
            } else {
                self.stage_path.clone()
            };
            if let Some(size) = self.map_file(file, &path)? {
                sizes.push(size);
            }
        }
        if sizes.windows(2).any(|w| w[0] != w[1]) {
            return Err(error(
                &self.stage_path,
                "corrupt: its chunk size differs from the events file's",
            ));
        }
        self.chunks.sort_by_key(|c| (c.slot, c.seq, c.file));
        let chunks = std::mem::take(&mut self.chunks);
        let mut kept: Vec<Chunk> = Vec::with_capacity(chunks.len());
        for c in chunks {
            match kept.last_mut() {
                Some(last) if (last.slot, last.seq) == (c.slot, c.seq) => {
                    if self.written(&c) > self.written(last) {
                        *last = c;
                    }
                }
                _ => kept.push(c),
            }
        }
        self.chunks = kept;
        Ok(())
    }

    /// Events written in a chunk (up to the first unwritten one).
    fn written(&self, c: &Chunk) -> usize {
        let mut n = 0;
        let mut pos = CHUNK_HEADER;
        while let Some((_, len)) = self.raw_event(c, pos) {
            n += 1;
            pos += len;
        }
        n
    }

    /// The words of the event at byte `pos` of chunk `c` (the second 0 for a short event) and
    /// its length, or None where the chunk's events end (a zero word, or its end).
    fn raw_event(&self, c: &Chunk, pos: usize) -> Option<((u64, u64), usize)> {
        let map = self.maps[c.file].as_ref()?;
        let word = |at: usize| -> Option<u64> {
            if at + 8 > c.len {
                return None;
            }
            let a: [u8; 8] = map[c.offset + at..c.offset + at + 8].try_into().unwrap();
            Some(if self.little_endian {
                u64::from_le_bytes(a)
            } else {
                u64::from_be_bytes(a)
            })
        };
        if c.version == 1 {
            let (ts, tag) = (word(pos)?, word(pos + 8)?);
            return (tag != 0).then_some(((ts, tag), EVENT_BYTES));
        }
        let w = word(pos)?;
        match w & 3 {
            0 => None,
            3 if c.version >= 3 && w & CALL_MARK != 0 => Some(((w, 0), SHORT_BYTES)),
            3 => {
                let ts = word(pos + 8)?;
                (ts != 0).then_some(((w, ts), EVENT_BYTES))
            }
            _ => Some(((w, 0), SHORT_BYTES)),
        }
    }

    /// Maps one file and lists its chunks; returns its chunk size (None: no chunk in it). The
    /// events file must exist; a missing staging file is a version 1 trace's.
    fn map_file(&mut self, file: usize, path: &Path) -> Result<Option<usize>, Error> {
        let f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && file == 1 => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(error(
                    path,
                    "missing (the meta file names a process whose events file is gone)",
                ));
            }
            Err(e) => return Err(error(path, format!("cannot open: {e}"))),
        };
        let len = f
            .metadata()
            .map_err(|e| error(path, format!("cannot stat: {e}")))?
            .len() as usize;
        if len == 0 {
            return Ok(None);
        }
        // SAFETY: the file is only read; a writer still running could change it under us,
        // which at worst shows events that appear while we read (never invalid memory: the
        // mapping's length is fixed).
        let map = unsafe { memmap2::Mmap::map(&f) }
            .map_err(|e| error(path, format!("cannot map: {e}")))?;
        // Only the parts of the file that hold data are read: a hole's page (a chunk whose
        // allocation failed, the disk full) would have to be allocated to be read on some file
        // systems (tmpfs), which fails with SIGBUS when it is full.
        let data = data_ranges(&f, len);
        // Where the data run that holds `offset` ends (None: a hole).
        let data_end = |offset: usize| {
            data.iter()
                .find(|&&(a, b)| a <= offset && offset < b)
                .map(|&(_, b)| b)
        };
        // The first chunk header (chunks start at multiples of 4096; one the collector
        // prepared may stay all zero, chunk 0 included, and a staging chunk being cleared as the
        // process ended has its magic zeroed and old events after it).
        let starts = || {
            (0..len.saturating_sub(CHUNK_HEADER - 1))
                .step_by(4096)
                .filter(|&o| data_end(o).is_some_and(|end| end >= o + CHUNK_HEADER))
        };
        let Some(first) = starts().find(|&o| &map[o..o + 8] == CHUNK_MAGIC) else {
            // None: nothing written, or (staging file) only chunks cleared or being cleared.
            return match starts().find(|&o| map[o..o + 8].iter().any(|&b| b != 0)) {
                Some(at) if file == 0 => Err(error(
                    path,
                    format!("not an instrfn events file (bad chunk magic at offset {at})"),
                )),
                _ => Ok(None),
            };
        };
        let u32_at = |b: &[u8], i: usize, le: bool| {
            let a: [u8; 4] = b[i..i + 4].try_into().unwrap();
            if le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }
        };
        let u64_at = |b: &[u8], i: usize, le: bool| {
            let a: [u8; 8] = b[i..i + 8].try_into().unwrap();
            if le {
                u64::from_le_bytes(a)
            } else {
                u64::from_be_bytes(a)
            }
        };
        // Byte order from the version field (1, 2 or 3).
        let known = |v: u32| (1..=3).contains(&v);
        let le = known(u32_at(&map, first + 8, true));
        if !le && !known(u32_at(&map, first + 8, false)) {
            return Err(error(path, "unknown events file version"));
        }
        let size = u32_at(&map, first + 12, le) as usize;
        if size < CHUNK_HEADER + EVENT_BYTES
            || !size.is_multiple_of(EVENT_BYTES)
            || !first.is_multiple_of(size)
        {
            return Err(error(path, format!("corrupt chunk size {size}")));
        }
        let mut offset = 0;
        while offset < len {
            let Some(end) = data_end(offset) else {
                offset += size;
                continue;
            };
            let chunk = &map[offset..len.min(offset + size).min(end)];
            if chunk.len() < CHUNK_HEADER || chunk.iter().take(8).all(|&b| b == 0) {
                // Allocated but never written (prepared and never taken, a staging chunk
                // committed and cleared, or the process died before its header), or cut short.
                offset += size;
                continue;
            }
            if &chunk[..8] != CHUNK_MAGIC {
                return Err(error(
                    path,
                    format!("corrupt chunk at offset {offset} (bad magic)"),
                ));
            }
            let version = u32_at(chunk, 8, le);
            if !known(version) {
                return Err(error(
                    path,
                    format!("corrupt chunk at offset {offset} (version {version})"),
                ));
            }
            self.chunks.push(Chunk {
                file,
                offset,
                len: chunk.len(),
                slot: u32_at(chunk, 16, le),
                tid: u32_at(chunk, 20, le),
                seq: u64_at(chunk, 24, le),
                version,
                tbase: u64_at(chunk, 32, le),
                cbase: u64_at(chunk, 40, le),
            });
            offset += size;
        }
        self.little_endian = le;
        self.maps[file] = Some(map);
        Ok(Some(size))
    }

    /// The thread slots that appear in the trace (with events, thread lines or losses).
    pub fn slots(&self) -> Vec<u32> {
        let mut s: Vec<u32> = self
            .chunks
            .iter()
            .map(|c| c.slot)
            .chain(self.threads.iter().map(|t| t.slot))
            .chain(self.lost.keys().copied())
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// The thread lines of a slot.
    pub fn threads_of(&self, slot: u32) -> impl Iterator<Item = &ThreadInfo> {
        self.threads.iter().filter(move |t| t.slot == slot)
    }

    /// The tid that wrote a slot's events first (from its first chunk), if any.
    pub fn first_tid(&self, slot: u32) -> Option<u32> {
        self.chunks.iter().find(|c| c.slot == slot).map(|c| c.tid)
    }

    /// The events of one slot, in the order they were written (chunk by chunk). An event
    /// whose tag word is zero ends a chunk (the rest was never written); an unknown kind is an
    /// error of the whole trace. The tids of the chunks tell which thread wrote them.
    pub fn events(&self, slot: u32) -> Events<'_> {
        Events {
            p: self,
            chunks: self
                .chunks
                .iter()
                .filter(|c| c.slot == slot)
                .copied()
                .collect(),
            next_chunk: 0,
            pos: 0,
            tid: 0,
            exit: None,
        }
    }

    /// How many events lost in total (from the meta file).
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum()
    }

    /// Bytes of the chunks that hold events (chunks prepared and never used not counted).
    pub fn event_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len as u64).sum()
    }

    /// The module holding `addr`, if one does.
    pub fn module_of(&self, addr: u64) -> Option<&Module> {
        self.modules.iter().find(|m| m.holds(addr, u64::MAX))
    }
}

/// The events of one slot ([`Process::events`]).
pub struct Events<'a> {
    p: &'a Process,
    chunks: Vec<Chunk>,
    next_chunk: usize,
    /// Byte position in the current chunk (0: start the next chunk).
    pos: usize,
    tid: u32,
    /// The exit of the call word just read, returned next.
    exit: Option<Event>,
}

impl Events<'_> {
    /// The tid of the thread that wrote the last event returned.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl Iterator for Events<'_> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(exit) = self.exit.take() {
            return Some(Ok(exit));
        }
        loop {
            let chunk = *self.chunks.get(self.next_chunk)?;
            if self.pos == 0 {
                self.pos = CHUNK_HEADER;
                self.tid = chunk.tid;
            }
            let at = chunk.offset + self.pos;
            let Some(((w0, w1), len)) = self.p.raw_event(&chunk, self.pos) else {
                self.next_chunk += 1;
                self.pos = 0;
                continue;
            };
            self.pos += len;
            let (ts, kind, value) = if chunk.version == 1 {
                (w0, w1 & 15, w1 >> 4)
            } else if w0 & 3 == 3 && chunk.version >= 3 && w0 & CALL_MARK != 0 {
                // A call word: the entry now, its exit next.
                let v = (w0 >> 8) << 5 | (w0 >> 2) & 31;
                let start = chunk.tbase.wrapping_add(v & ((1 << CALL_T0_BITS) - 1));
                let length = (v >> CALL_T0_BITS) & ((1 << CALL_DUR_BITS) - 1);
                let func = chunk
                    .cbase
                    .wrapping_add(CALL_FN_OFFSET)
                    .wrapping_add(v >> (CALL_T0_BITS + CALL_DUR_BITS));
                self.exit = Some(Event {
                    ts: start.wrapping_add(length),
                    kind: Kind::Exit,
                    value: func,
                });
                (start, 1, func)
            } else if w0 & 3 == 3 {
                // (Bit 7 is 0 in a long event: set, the kind reads as unknown.)
                let kind = ((w0 >> 2) & 7) | ((w0 >> 7) & 1) << 3;
                ((w1 & !3) | ((w0 >> 5) & 3), kind, w0 >> 8)
            } else {
                (
                    chunk.tbase.wrapping_add((w0 >> 2) & TIME_MASK),
                    w0 & 3,
                    chunk.cbase.wrapping_add(w0 >> 32),
                )
            };
            if kind == 6 {
                self.tid = value as u32;
            }
            return Some(match Kind::from_bits(kind) {
                Some(kind) => Ok(Event { ts, kind, value }),
                None => Err(error(
                    if chunk.file == 0 {
                        &self.p.events_path
                    } else {
                        &self.p.stage_path
                    },
                    format!("corrupt event at offset {at} (kind {kind})"),
                )),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace directory of one process whose staging file holds one chunk of `version` with
    /// these event words (little-endian), its time base 1000 and code base 0x1000_0000.
    fn trace_of(name: &str, version: u32, words: &[u64]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("instrfn-reader-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("1.1.meta"),
            "instrfn-trace 4\nprocess 1 0 1\nclock tsc 0x0 0 0\n",
        )
        .unwrap();
        std::fs::write(dir.join("1.1.events"), b"").unwrap();
        let mut chunk = vec![0u8; 4096];
        chunk[..8].copy_from_slice(CHUNK_MAGIC);
        chunk[8..12].copy_from_slice(&version.to_le_bytes());
        chunk[12..16].copy_from_slice(&4096u32.to_le_bytes());
        chunk[20..24].copy_from_slice(&7u32.to_le_bytes());
        chunk[32..40].copy_from_slice(&1000u64.to_le_bytes());
        chunk[40..48].copy_from_slice(&0x1000_0000u64.to_le_bytes());
        for (i, w) in words.iter().enumerate() {
            chunk[CHUNK_HEADER + 8 * i..][..8].copy_from_slice(&w.to_le_bytes());
        }
        std::fs::write(dir.join("1.1.stage"), chunk).unwrap();
        dir
    }

    fn events_of(dir: &Path) -> Vec<Result<(u64, Kind, u64), String>> {
        let t = Trace::open(dir).unwrap();
        let p = &t.processes[0];
        p.events(0)
            .map(|e| e.map(|e| (e.ts, e.kind, e.value)).map_err(|e| e.message))
            .collect()
    }

    /// A call word as docs/trace-format.md lays it out (and asm/x86_64.s MERGE_CALL makes it).
    fn call_word(t0: u64, length: u64, f: u64) -> u64 {
        let v = f << (CALL_T0_BITS + CALL_DUR_BITS) | length << CALL_T0_BITS | t0;
        (v >> 5) << 8 | (v & 31) << 2 | CALL_MARK | 3
    }

    #[test]
    fn a_call_word_is_an_entry_and_its_exit() {
        // Every field at its widest, and at its smallest, then a long exit (bit 7 clear) and a
        // short entry after it: the events in that order, each at its time.
        let wide = call_word((1 << 26) - 1, (1 << 12) - 1, (1 << 23) - 1);
        let long = (0x5000u64 << 8) | (2 << 5) | (2 << 2) | 3;
        let short = (0x40u64 << 32) | (77 << 2) | 1;
        let dir = trace_of(
            "calls",
            3,
            &[call_word(20, 30, 5), wide, long, 999_996, short],
        );
        let base = 0x1000_0000 + CALL_FN_OFFSET;
        let last = base + (1 << 23) - 1;
        assert_eq!(
            events_of(&dir),
            vec![
                Ok((1020, Kind::Entry, base + 5)),
                Ok((1050, Kind::Exit, base + 5)),
                Ok((1000 + (1 << 26) - 1, Kind::Entry, last)),
                Ok((1000 + (1 << 26) - 1 + (1 << 12) - 1, Kind::Exit, last)),
                Ok((999_998, Kind::Exit, 0x5000)),
                Ok((1077, Kind::Entry, 0x1000_0040)),
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_version_2_chunk_has_no_call_words() {
        // The same word in a version 2 chunk is a long event of an unknown kind: an error.
        let dir = trace_of("v2", 2, &[call_word(20, 30, 5), 1_000_000]);
        let events = events_of(&dir);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0]
                .as_ref()
                .is_err_and(|e| e.contains("corrupt event")),
            "{events:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
