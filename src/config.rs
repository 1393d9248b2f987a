//! Configuration from the environment, read once when the runtime starts.
//!
//! A malformed value prints one line naming the variable and the accepted values, and that
//! setting keeps its default; the program runs on undisturbed. In secure mode (setuid and the
//! like) the environment is ignored, as glibc ignores GMON_OUT_PREFIX there.
//! docs/configuration.md describes every variable. Uses `base` and `sys`.

use core::ffi::{CStr, c_int};

use crate::base::Bytes;
use crate::sys;

/// Longest accepted GMON_OUT_PREFIX, in bytes.
pub const MAX_PREFIX: usize = 1024;

#[derive(Clone)]
pub struct Config {
    /// Requested SIGPROF sampling rate in Hz; 0 = no pc histogram.
    pub hz: u32,
    /// Signal on which gmon.out is written, if any.
    pub dump_signal: Option<c_int>,
    /// Upper bound on distinct arcs per thread table.
    pub max_arcs: usize,
    /// Whether recording starts at the first call (else at `instrfn::start()` / `moncontrol(1)`).
    pub start: bool,
    /// Print a summary line each time gmon.out is written.
    pub verbose: bool,
    /// Write the profile when the program crashes (src/runtime/crash.rs).
    pub crash_write: bool,
    /// INSTRFN_MODE=trace: entry/exit events instead of gmon.out (src/trace/).
    pub trace: bool,
    /// INSTRFN_MODE=ring: bytes of each thread's ring (INSTRFN_RING; 0: trace mode writes
    /// every event).
    pub ring: usize,
    /// INSTRFN_EXIT_SNAPSHOT: whether ring mode takes a snapshot at exit.
    pub exit_snapshot: bool,
    /// INSTRFN_SNAPSHOT_SIGNAL: the signal on which ring mode takes a snapshot, if any.
    pub snapshot_signal: Option<c_int>,
    /// INSTRFN_TRIGGER: `PATTERN>DURATION` items separated by `;` (checked; see
    /// [`Config::triggers`]), and INSTRFN_TRIGGER_LIMIT: snapshots per second at most.
    trigger: [u8; MAX_PREFIX],
    trigger_len: usize,
    pub trigger_limit: u32,
    /// INSTRFN_OUTPUT: the trace directory.
    output: [u8; MAX_PREFIX],
    output_len: usize,
    /// INSTRFN_BUFSIZE: bytes of a trace chunk (each thread fills one at a time).
    pub bufsize: usize,
    /// INSTRFN_TRACE_LIMIT: the most bytes of events a process writes.
    pub trace_limit: u64,
    /// INSTRFN_MAX_DEPTH: shadow stack entries per thread.
    pub max_depth: usize,
    /// INSTRFN_EXITS: whether trace mode replaces return addresses to see exits.
    pub exits: bool,
    /// INSTRFN_COLLECTOR: whether trace mode prepares chunks on a thread of its own.
    pub collector: bool,
    /// INSTRFN_CALL_WORDS: whether trace mode writes a leaf call as one call word.
    pub call_words: bool,
    /// INSTRFN_COLLECTOR_NICE: that thread's nice value, 0-19.
    pub collector_nice: u8,
    /// INSTRFN_XRAY_STOP=pause: stopping leaves XRay sleds patched (src/xray/); `unpatch`
    /// (false, the default) puts them back.
    pub xray_pause: bool,
    /// INSTRFN_DEPTH: trace mode records calls only this deep (0: all).
    pub depth: usize,
    /// INSTRFN_MIN_DURATION: trace mode drops calls shorter than this, in ns (0: none).
    pub min_duration_ns: u64,
    /// INSTRFN_FILTER / INSTRFN_EXCLUDE: comma-separated name patterns of the functions whose
    /// XRay sleds are patched / left alone (src/xray/).
    filter: [u8; MAX_PREFIX],
    filter_len: usize,
    exclude: [u8; MAX_PREFIX],
    exclude_len: usize,
    /// GMON_OUT_PREFIX: output goes to `<prefix>.<pid>`.
    pub prefix: [u8; MAX_PREFIX],
    pub prefix_len: usize,
}

pub const DEFAULT_HZ: u32 = 1000;
/// 1 MiB: a chunk switch (taking a ready chunk, a futex wake, handing the old one back to be
/// committed) costs a few microseconds, under 0.1 ns per 16-byte event spread over 65536 of
/// them; a thread holds two chunks of the staging file (the one it fills and the one before),
/// and the collector keeps up to four ready, so 1 MiB bounds the page cache a trace pins per
/// thread.
pub const DEFAULT_BUFSIZE: usize = 1 << 20;
const MIN_BUFSIZE: usize = 4096;
/// 4 MiB per thread: 16 chunks of 256 KiB. A ring held about a million events (4.1-5.5
/// bytes each): 12-29 ms of one busy thread of the threads workload (docs/flight-recorder.md,
/// "Sizing"), seconds of a server thread.
pub const DEFAULT_RING: usize = 4 << 20;
const MIN_RING: usize = 64 << 10;
/// INSTRFN_TRIGGER_LIMIT: one snapshot per second, each up to a ring per thread on disk.
pub const DEFAULT_TRIGGER_LIMIT: u32 = 1;
const MAX_TRIGGER_LIMIT: u32 = 1000;
const MAX_RING: usize = 1 << 30;
const MAX_BUFSIZE: usize = 1 << 30;
pub const DEFAULT_DEPTH: usize = 4096;
/// Exits are traced by default where the unwinder can be wrapped (glibc: it is libgcc_s,
/// dynamic) or reads the exit trampoline's return pad's unwind info (src/arch/<arch>/): libgcc
/// linked into the program (glibc with crt-static, C++ with -static-libgcc) everywhere, LLVM's
/// libunwind (musl) on x86_64. On the other architectures LLVM's libunwind does not restore
/// the return address column that unwind info reads, so a musl program there records entries
/// only unless INSTRFN_EXITS=on (safe for programs that never unwind).
const EXITS_BY_DEFAULT: bool = cfg!(any(target_env = "gnu", target_arch = "x86_64"));
const MAX_DEPTH: usize = 1 << 20;
pub const MAX_HZ: u32 = 100_000;
pub const DEFAULT_MAX_ARCS: usize = 1 << 20;
const MIN_MAX_ARCS: usize = 128;
const MAX_MAX_ARCS: usize = 1 << 28;

impl Config {
    pub const DEFAULT: Config = Config {
        hz: DEFAULT_HZ,
        dump_signal: None,
        max_arcs: DEFAULT_MAX_ARCS,
        start: true,
        verbose: false,
        crash_write: true,
        trace: false,
        ring: 0,
        exit_snapshot: true,
        snapshot_signal: None,
        trigger: [0; MAX_PREFIX],
        trigger_len: 0,
        trigger_limit: DEFAULT_TRIGGER_LIMIT,
        output: [0; MAX_PREFIX],
        output_len: 0,
        bufsize: DEFAULT_BUFSIZE,
        trace_limit: u64::MAX,
        max_depth: DEFAULT_DEPTH,
        exits: EXITS_BY_DEFAULT,
        collector: true,
        call_words: true,
        collector_nice: 19,
        xray_pause: false,
        depth: 0,
        min_duration_ns: 0,
        filter: [0; MAX_PREFIX],
        filter_len: 0,
        exclude: [0; MAX_PREFIX],
        exclude_len: 0,
        prefix: [0; MAX_PREFIX],
        prefix_len: 0,
    };

    /// Reads every setting from the environment.
    pub fn from_env() -> Config {
        let mut c = Config::DEFAULT;
        if sys::secure_mode() {
            return c;
        }
        if let Some(v) = var(c"INSTRFN_HZ") {
            match parse_u64(v) {
                Some(n) if n <= MAX_HZ as u64 => c.hz = n as u32,
                _ => invalid(
                    "INSTRFN_HZ",
                    v,
                    format_args!("an integer from 0 (no histogram) to {MAX_HZ}"),
                    format_args!("{DEFAULT_HZ}"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_DUMP_SIGNAL") {
            match parse_signal(v) {
                Some(sig) => c.dump_signal = Some(sig),
                None => invalid(
                    "INSTRFN_DUMP_SIGNAL",
                    v,
                    format_args!(
                        "a signal name or number such as USR1, SIGUSR2, HUP or 10 \
                         (not KILL, STOP, PROF or a fault signal)"
                    ),
                    format_args!("no dump signal"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_MAX_ARCS") {
            match parse_u64(v) {
                Some(n) if (MIN_MAX_ARCS as u64..=MAX_MAX_ARCS as u64).contains(&n) => {
                    c.max_arcs = n as usize
                }
                _ => invalid(
                    "INSTRFN_MAX_ARCS",
                    v,
                    format_args!("an integer from {MIN_MAX_ARCS} to {MAX_MAX_ARCS}"),
                    format_args!("{DEFAULT_MAX_ARCS}"),
                ),
            }
        }
        switch(c"INSTRFN_START", &mut c.start);
        switch(c"INSTRFN_VERBOSE", &mut c.verbose);
        switch(c"INSTRFN_CRASH_WRITE", &mut c.crash_write);
        if let Some(v) = var(c"INSTRFN_MODE") {
            match core::str::from_utf8(v).map(str::trim) {
                Ok("gmon") => c.trace = false,
                Ok("trace") => c.trace = true,
                Ok("ring") => {
                    c.trace = true;
                    c.ring = DEFAULT_RING;
                }
                _ => invalid(
                    "INSTRFN_MODE",
                    v,
                    format_args!("gmon, trace or ring"),
                    format_args!("gmon"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_OUTPUT") {
            if v.len() < MAX_PREFIX {
                c.output[..v.len()].copy_from_slice(v);
                c.output_len = v.len();
            } else {
                message!(
                    "INSTRFN_OUTPUT is longer than {} bytes; using instrfn.data",
                    MAX_PREFIX - 1
                );
            }
        }
        c.absolute_output();
        if let Some(v) = var(c"INSTRFN_BUFSIZE") {
            match parse_size(v) {
                Some(n) if (MIN_BUFSIZE as u64..=MAX_BUFSIZE as u64).contains(&n) => {
                    c.bufsize = (n as usize).next_multiple_of(4096)
                }
                _ => invalid(
                    "INSTRFN_BUFSIZE",
                    v,
                    format_args!("a size from 4K to 1G (bytes, or with K, M, G)"),
                    format_args!("1M"),
                ),
            }
        }
        if c.ring > 0
            && let Some(v) = var(c"INSTRFN_RING")
        {
            match parse_size(v) {
                Some(n) if (MIN_RING as u64..=MAX_RING as u64).contains(&n) => {
                    c.ring = (n as usize).next_multiple_of(16 << 12)
                }
                _ => invalid(
                    "INSTRFN_RING",
                    v,
                    format_args!("a size from 64K to 1G (bytes, or with K, M, G)"),
                    format_args!("4M"),
                ),
            }
        }
        switch(c"INSTRFN_EXIT_SNAPSHOT", &mut c.exit_snapshot);
        if let Some(v) = var(c"INSTRFN_SNAPSHOT_SIGNAL") {
            match parse_signal(v) {
                Some(sig) if Some(sig) != c.dump_signal => c.snapshot_signal = Some(sig),
                _ => invalid(
                    "INSTRFN_SNAPSHOT_SIGNAL",
                    v,
                    format_args!(
                        "a signal name or number such as USR1, SIGUSR2, HUP or 10 \
                         (not KILL, STOP, PROF, a fault signal or INSTRFN_DUMP_SIGNAL's)"
                    ),
                    format_args!("no snapshot signal"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_TRIGGER") {
            if c.ring == 0 {
                message!("ignoring INSTRFN_TRIGGER: it needs INSTRFN_MODE=ring");
            } else if v.len() < MAX_PREFIX && triggers(v).all(|t| t.is_some()) {
                c.trigger[..v.len()].copy_from_slice(v);
                c.trigger_len = v.len();
            } else {
                invalid(
                    "INSTRFN_TRIGGER",
                    v,
                    format_args!(
                        "PATTERN>DURATION items separated by ';', such as \
                         'handle_*>10ms;parse>500us' (at most {} bytes)",
                        MAX_PREFIX - 1
                    ),
                    format_args!("no triggers"),
                );
            }
        }
        if let Some(v) = var(c"INSTRFN_TRIGGER_LIMIT") {
            match parse_u64(v) {
                Some(n) if (1..=MAX_TRIGGER_LIMIT as u64).contains(&n) => {
                    c.trigger_limit = n as u32
                }
                _ => invalid(
                    "INSTRFN_TRIGGER_LIMIT",
                    v,
                    format_args!("snapshots per second, from 1 to {MAX_TRIGGER_LIMIT}"),
                    format_args!("{DEFAULT_TRIGGER_LIMIT}"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_TRACE_LIMIT") {
            match parse_size(v) {
                Some(n) if n > 0 => c.trace_limit = n,
                _ => invalid(
                    "INSTRFN_TRACE_LIMIT",
                    v,
                    format_args!("a size in bytes, or with K, M, G, T"),
                    format_args!("no limit"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_MAX_DEPTH") {
            match parse_u64(v) {
                Some(n) if (1..=MAX_DEPTH as u64).contains(&n) => c.max_depth = n as usize,
                _ => invalid(
                    "INSTRFN_MAX_DEPTH",
                    v,
                    format_args!("an integer from 1 to {MAX_DEPTH}"),
                    format_args!("{DEFAULT_DEPTH}"),
                ),
            }
        }
        switch(c"INSTRFN_EXITS", &mut c.exits);
        if let Some(v) = var(c"INSTRFN_DEPTH") {
            match parse_u64(v) {
                Some(n) if (1..=MAX_DEPTH as u64).contains(&n) => c.depth = n as usize,
                _ => invalid(
                    "INSTRFN_DEPTH",
                    v,
                    format_args!("an integer from 1 to {MAX_DEPTH}"),
                    format_args!("every depth"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_MIN_DURATION") {
            match parse_duration_ns(v) {
                Some(n) => c.min_duration_ns = n,
                None => invalid(
                    "INSTRFN_MIN_DURATION",
                    v,
                    format_args!("a duration such as 500ns, 10us, 1.5ms or 2s"),
                    format_args!("every call"),
                ),
            }
        }
        switch(c"INSTRFN_COLLECTOR", &mut c.collector);
        switch(c"INSTRFN_CALL_WORDS", &mut c.call_words);
        if let Some(v) = var(c"INSTRFN_COLLECTOR_NICE") {
            match parse_u64(v) {
                Some(n) if n <= 19 => c.collector_nice = n as u8,
                _ => invalid(
                    "INSTRFN_COLLECTOR_NICE",
                    v,
                    format_args!("an integer from 0 to 19"),
                    format_args!("19"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_XRAY_STOP") {
            match v.trim_ascii() {
                b"pause" => c.xray_pause = true,
                b"unpatch" => c.xray_pause = false,
                _ => invalid(
                    "INSTRFN_XRAY_STOP",
                    v,
                    format_args!(
                        "unpatch (stopping puts XRay sleds back) or pause (they stay patched)"
                    ),
                    format_args!("unpatch"),
                ),
            }
        }
        for (name, cname, buf, len) in [
            (
                "INSTRFN_FILTER",
                c"INSTRFN_FILTER",
                &mut c.filter,
                &mut c.filter_len,
            ),
            (
                "INSTRFN_EXCLUDE",
                c"INSTRFN_EXCLUDE",
                &mut c.exclude,
                &mut c.exclude_len,
            ),
        ] {
            if let Some(v) = var(cname) {
                if v.len() < MAX_PREFIX {
                    buf[..v.len()].copy_from_slice(v);
                    *len = v.len();
                } else {
                    message!(
                        "ignoring {name}: longer than {} bytes; patching every function",
                        MAX_PREFIX - 1
                    );
                }
            }
        }
        if let Some(v) = var(c"GMON_OUT_PREFIX") {
            if v.len() < MAX_PREFIX {
                c.prefix[..v.len()].copy_from_slice(v);
                c.prefix_len = v.len();
            } else {
                message!(
                    "GMON_OUT_PREFIX is longer than {} bytes; writing gmon.out instead",
                    MAX_PREFIX - 1
                );
            }
        }
        c
    }

    /// A relative trace directory made absolute, against the working directory the settings
    /// are read in (at load in trace mode): the processes a program starts after a `chdir`
    /// then record into the same directory (the exec and spawn wrappers pass it on,
    /// [`Config::output_entry`]). Left relative if the path would not fit.
    fn absolute_output(&mut self) {
        let rel = self.output();
        if rel.starts_with(b"/") {
            return;
        }
        let rel = rel.strip_prefix(b"./").unwrap_or(rel);
        let mut buf = [0u8; MAX_PREFIX];
        let Some(n) = sys::cwd(&mut buf).map(<[u8]>::len) else {
            return;
        };
        if n + 1 + rel.len() >= MAX_PREFIX {
            return;
        }
        buf[n] = b'/';
        buf[n + 1..n + 1 + rel.len()].copy_from_slice(rel);
        let len = n + 1 + rel.len();
        self.output[..len].copy_from_slice(&buf[..len]);
        self.output_len = len;
    }

    /// `INSTRFN_OUTPUT=<the trace directory>` with a NUL, into `out` (false if it does not
    /// fit): for the environment of the processes this one starts.
    pub fn output_entry(&self, out: &mut [u8]) -> bool {
        let (name, dir) = (b"INSTRFN_OUTPUT=", self.output());
        let len = name.len() + dir.len();
        if len + 1 > out.len() || dir.contains(&0) {
            return false;
        }
        out[..name.len()].copy_from_slice(name);
        out[name.len()..len].copy_from_slice(dir);
        out[len] = 0;
        true
    }

    /// The trace directory (INSTRFN_OUTPUT, default `instrfn.data`).
    pub fn output(&self) -> &[u8] {
        if self.output_len == 0 {
            b"instrfn.data"
        } else {
            &self.output[..self.output_len]
        }
    }

    /// INSTRFN_FILTER's patterns, comma-separated (empty: every function).
    /// INSTRFN_TRIGGER's items: (pattern, duration in ns), all well-formed.
    pub fn triggers(&self) -> impl Iterator<Item = (&[u8], u64)> {
        triggers(&self.trigger[..self.trigger_len]).flatten()
    }

    pub fn filter(&self) -> &[u8] {
        &self.filter[..self.filter_len]
    }

    /// INSTRFN_EXCLUDE's patterns, comma-separated (empty: none).
    pub fn exclude(&self) -> &[u8] {
        &self.exclude[..self.exclude_len]
    }

    pub fn prefix(&self) -> Option<&[u8]> {
        (self.prefix_len > 0).then(|| &self.prefix[..self.prefix_len])
    }
}

/// A set, non-empty variable.
/// An on/off setting: `field` (holding its default) takes the variable's value if it has a
/// valid one; a bad value is said in one line and the default stays.
fn switch(name: &CStr, field: &mut bool) {
    let Some(v) = var(name) else {
        return;
    };
    match parse_bool(v) {
        Some(b) => *field = b,
        None => invalid(
            name.to_str().unwrap_or("INSTRFN_?"),
            v,
            format_args!("on or off (also 1/0, yes/no, true/false)"),
            format_args!("{}", if *field { "on" } else { "off" }),
        ),
    }
}

fn var(name: &CStr) -> Option<&'static [u8]> {
    sys::getenv(name).filter(|v| !v.is_empty())
}

fn invalid(
    name: &str,
    value: &[u8],
    accepted: core::fmt::Arguments<'_>,
    default: core::fmt::Arguments<'_>,
) {
    message!(
        "ignoring {name}=\"{}\": expected {accepted}; using {default}",
        Bytes(value)
    );
}

fn parse_u64(v: &[u8]) -> Option<u64> {
    let s = core::str::from_utf8(v).ok()?.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A size: digits with an optional K, M, G or T (powers of 1024; a trailing B or iB allowed).
fn parse_size(v: &[u8]) -> Option<u64> {
    let s = core::str::from_utf8(v).ok()?.trim();
    let s = s
        .strip_suffix("iB")
        .or_else(|| s.strip_suffix('B'))
        .unwrap_or(s);
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        b't' | b'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    parse_u64(digits.as_bytes())?.checked_mul(1u64 << shift)
}

/// The items of an INSTRFN_TRIGGER value: Some((pattern, ns)) for a well-formed one (a
/// pattern without `;`, `>`, blanks or control bytes, and a duration of at least 1 ns).
fn triggers(v: &[u8]) -> impl Iterator<Item = Option<(&[u8], u64)>> {
    v.split(|&b| b == b';')
        .filter(|item| !item.trim_ascii().is_empty())
        .map(|item| {
            let at = item.iter().rposition(|&b| b == b'>')?;
            let (pattern, duration) = (item[..at].trim_ascii(), &item[at + 1..]);
            let ok = !pattern.is_empty() && pattern.iter().all(|&b| b > b' ' && b != b'>');
            let ns = parse_duration_ns(duration).filter(|&ns| ns > 0)?;
            ok.then_some((pattern, ns))
        })
}

/// A duration in ns: digits with an optional fraction and unit (ns, us, µs, ms, s; none: ns).
fn parse_duration_ns(v: &[u8]) -> Option<u64> {
    let s = core::str::from_utf8(v).ok()?.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let whole = if int.is_empty() {
        0
    } else {
        parse_u64(int.as_bytes())?
    };
    let mut ns = whole.checked_mul(scale)?;
    // The fraction, digit by digit, down to 1 ns.
    let mut unit_part = scale;
    for d in frac.bytes() {
        if !d.is_ascii_digit() {
            return None;
        }
        unit_part /= 10;
        ns = ns.checked_add((d - b'0') as u64 * unit_part)?;
    }
    Some(ns)
}

fn parse_bool(v: &[u8]) -> Option<bool> {
    let s = core::str::from_utf8(v).ok()?.trim();
    const ON: [&str; 4] = ["1", "on", "yes", "true"];
    const OFF: [&str; 4] = ["0", "off", "no", "false"];
    if ON.iter().any(|w| s.eq_ignore_ascii_case(w)) {
        Some(true)
    } else if OFF.iter().any(|w| s.eq_ignore_ascii_case(w)) {
        Some(false)
    } else {
        None
    }
}

/// Signals that may carry the dump request: anything but those the kernel or the runtime
/// reserve, and the synchronous fault signals.
fn parse_signal(v: &[u8]) -> Option<c_int> {
    crate::base::signals::parse_signal(core::str::from_utf8(v).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_triggers() {
        fn all(v: &[u8]) -> Vec<Option<(&[u8], u64)>> {
            triggers(v).collect()
        }
        assert_eq!(
            all(b"handle_*>10ms; parse>500us;"),
            [
                Some((&b"handle_*"[..], 10_000_000)),
                Some((&b"parse"[..], 500_000))
            ]
        );
        assert_eq!(all(b"a::b>1s"), [Some((&b"a::b"[..], 1_000_000_000))]);
        for bad in [
            &b"slow"[..],
            b">5ms",
            b"f>",
            b"f>0",
            b"f>5 parsecs",
            b"a b>5ms",
        ] {
            assert!(all(bad).iter().any(|t| t.is_none()), "{}", Bytes(bad));
        }
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration_ns(b"500"), Some(500));
        assert_eq!(parse_duration_ns(b"10us"), Some(10_000));
        assert_eq!(parse_duration_ns("2µs".as_bytes()), Some(2_000));
        assert_eq!(parse_duration_ns(b"1.5ms"), Some(1_500_000));
        assert_eq!(parse_duration_ns(b" 2s "), Some(2_000_000_000));
        assert_eq!(parse_duration_ns(b".5us"), Some(500));
        assert_eq!(parse_duration_ns(b"10 parsecs"), None);
        assert_eq!(parse_duration_ns(b"ms"), None);
        assert_eq!(parse_duration_ns(b"1.x"), None);
    }

    #[test]
    fn parses_values() {
        assert_eq!(parse_u64(b"250"), Some(250));
        assert_eq!(parse_u64(b" 7 "), Some(7));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"1e3"), None);
        assert_eq!(parse_bool(b"OFF"), Some(false));
        assert_eq!(parse_bool(b"Yes"), Some(true));
        assert_eq!(parse_bool(b"maybe"), None);
        assert_eq!(parse_signal(b"USR1"), Some(libc::SIGUSR1));
        assert_eq!(parse_signal(b"SIGusr2"), Some(libc::SIGUSR2));
        assert_eq!(parse_signal(b"12"), Some(12));
        assert_eq!(parse_signal(b"KILL"), None);
        assert_eq!(parse_signal(b"27"), None); // SIGPROF
        assert_eq!(parse_signal(b"0"), None);
        assert_eq!(parse_signal(b"99"), None);
        assert_eq!(parse_size(b"4K"), Some(4096));
        assert_eq!(parse_size(b"2MiB"), Some(2 << 20));
        assert_eq!(parse_size(b"123"), Some(123));
        assert_eq!(parse_size(b"1.5M"), None);
        assert_eq!(parse_size(b"K"), None);
    }
}
