//! Configuration from the environment, read once when the runtime starts.
//!
//! A malformed value prints one line naming the variable and the accepted values, and that
//! setting keeps its default; the program runs on undisturbed. In secure mode (setuid and the
//! like) the environment is ignored, as glibc ignores GMON_OUT_PREFIX there.

use core::ffi::{CStr, c_int};

use crate::sys::{self, Bytes};

/// Longest accepted GMON_OUT_PREFIX, in bytes.
pub const MAX_PREFIX: usize = 1024;

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
    /// Write the profile when the program crashes (src/crash.rs).
    pub crash_write: bool,
    /// GMON_OUT_PREFIX: output goes to `<prefix>.<pid>`.
    pub prefix: [u8; MAX_PREFIX],
    pub prefix_len: usize,
}

pub const DEFAULT_HZ: u32 = 1000;
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
        if let Some(v) = var(c"INSTRFN_START") {
            match parse_bool(v) {
                Some(b) => c.start = b,
                None => invalid(
                    "INSTRFN_START",
                    v,
                    format_args!("on or off (also 1/0, yes/no, true/false)"),
                    format_args!("on"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_VERBOSE") {
            match parse_bool(v) {
                Some(b) => c.verbose = b,
                None => invalid(
                    "INSTRFN_VERBOSE",
                    v,
                    format_args!("on or off (also 1/0, yes/no, true/false)"),
                    format_args!("off"),
                ),
            }
        }
        if let Some(v) = var(c"INSTRFN_CRASH_WRITE") {
            match parse_bool(v) {
                Some(b) => c.crash_write = b,
                None => invalid(
                    "INSTRFN_CRASH_WRITE",
                    v,
                    format_args!("on or off (also 1/0, yes/no, true/false)"),
                    format_args!("on"),
                ),
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

    pub fn prefix(&self) -> Option<&[u8]> {
        (self.prefix_len > 0).then(|| &self.prefix[..self.prefix_len])
    }
}

/// A set, non-empty variable.
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
    let s = core::str::from_utf8(v).ok()?.trim();
    let sig = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<c_int>().ok()?
    } else {
        let name = s.strip_prefix("SIG").unwrap_or(s);
        const NAMES: [(&str, c_int); 9] = [
            ("HUP", libc::SIGHUP),
            ("INT", libc::SIGINT),
            ("QUIT", libc::SIGQUIT),
            ("USR1", libc::SIGUSR1),
            ("USR2", libc::SIGUSR2),
            ("ALRM", libc::SIGALRM),
            ("TERM", libc::SIGTERM),
            ("WINCH", libc::SIGWINCH),
            ("URG", libc::SIGURG),
        ];
        NAMES.iter().find(|(n, _)| name.eq_ignore_ascii_case(n))?.1
    };
    let forbidden = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGPROF,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGABRT,
        libc::SIGSYS,
        libc::SIGCHLD,
    ];
    let max = libc::SIGRTMAX();
    (sig >= 1 && sig <= max && !forbidden.contains(&sig)).then_some(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
