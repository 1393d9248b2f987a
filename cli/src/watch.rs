//! `instrfn snapshot --watch`: lists the snapshots of a ring-mode trace as they are taken, one
//! line each once its `complete` line is written. It lists the existing ones first, then polls
//! DIR every 100 ms. It ends on SIGINT or SIGTERM, after `--count` new snapshots, or when the
//! recording it saw has ended (see `ended`). Uses the reader crate only.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use instrfn_trace::ring::{events_in, snapshot_complete, snapshots};

/// How often DIR is read.
const POLL: Duration = Duration::from_millis(100);

/// How long nothing new must happen, once every process is gone, before the watch ends.
const QUIET: Duration = Duration::from_secs(1);

/// Set by SIGINT and SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Watches `dir` and prints a line per snapshot; after `count` new ones it ends.
pub fn watch(dir: &Path, count: Option<u64>) -> Result<ExitCode, String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    if has_events_file(dir) {
        return Err(format!(
            "{} is a trace-mode trace: it has no snapshots (record with --ring)",
            dir.display()
        ));
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores into an atomic, which
        // is async-signal-safe. No SA_RESTART: a sleep is cut short, the loop then sees STOP.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    let mut state = State::default();
    // The ring files already there, of processes already gone, are not this recording's.
    state.scan_rings(dir, true);
    state.scan_snapshots(dir, None);
    let until = match count {
        Some(n) => format!("{n} new snapshot{}", if n == 1 { "" } else { "s" }),
        None => "Ctrl-C, or the end of the recording".into(),
    };
    eprintln!(
        "instrfn: watching {} for snapshots, until {until}",
        dir.join("snapshots").display()
    );
    let mut new = 0u64;
    let mut last_change = Instant::now();
    loop {
        if count.is_some_and(|n| new >= n) || STOP.load(Ordering::Relaxed) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(POLL);
        let alive = state.scan_rings(dir, false);
        let listed = state.scan_snapshots(dir, count.map(|n| n - new));
        new += listed;
        if alive || listed > 0 {
            last_change = Instant::now();
        }
        if count.is_none() && ended(&state, alive, last_change) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// The recording has ended: the watch saw ring files of this recording, none of their
/// processes is alive, and nothing new came for QUIET.
fn ended(state: &State, alive: bool, last_change: Instant) -> bool {
    !state.rings.is_empty() && !alive && last_change.elapsed() >= QUIET
}

/// What the watch has seen.
#[derive(Default)]
struct State {
    /// The snapshots listed: n and the directory's identity. A recording that starts over
    /// makes new directories of the same n: they are listed again.
    listed: HashSet<(u64, Identity)>,
    /// The ring files of this recording: (pid, file name, inode).
    rings: HashSet<(i32, String, u64)>,
    /// Every ring file seen, this recording's or not: (file name, inode).
    seen: HashSet<(String, u64)>,
}

impl State {
    /// Notes ring files new since the last scan (at the first, only those of a live process)
    /// and says whether a process of this recording is alive.
    fn scan_rings(&mut self, dir: &Path, first: bool) -> bool {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let Some(pid) = name
                    .strip_suffix(".ring")
                    .and_then(|s| s.split('.').next()?.parse::<i32>().ok())
                else {
                    continue;
                };
                let Ok(ino) = e.metadata().map(|m| m.ino()) else {
                    continue;
                };
                if !self.seen.insert((name.clone(), ino)) {
                    continue;
                }
                if !first || alive(pid) {
                    self.rings.insert((pid, name, ino));
                }
            }
        }
        self.rings.iter().any(|(pid, _, _)| alive(*pid))
    }

    /// Prints a line for each snapshot newly complete, by n, at most `limit`; returns how
    /// many.
    fn scan_snapshots(&mut self, dir: &Path, limit: Option<u64>) -> u64 {
        let mut listed = 0;
        for (n, snap) in snapshots(dir) {
            if limit.is_some_and(|l| listed >= l) {
                break;
            }
            let Some(id) = identity(&snap) else {
                continue;
            };
            if self.listed.contains(&(n, id)) || !snapshot_complete(&snap) {
                continue;
            }
            self.listed.insert((n, id));
            listed += 1;
            match describe(&snap) {
                Ok(line) => println!("{}: {line}", snap.display()),
                Err(e) => eprintln!("instrfn: {}: cannot read it: {e}", snap.display()),
            }
        }
        listed
    }
}

/// A directory's identity: device, inode, and its change time in ns. A directory removed and
/// made again may get the same inode (ext4 does), not the same change time.
type Identity = (u64, u64, i64);

fn identity(path: &Path) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.ctime() * 1_000_000_000 + m.ctime_nsec()))
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        // The state follows the command's closing parenthesis.
        let state = s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim().chars().next());
        !matches!(state, Some('Z' | 'X') | None)
    })
}

/// Whether `dir` has an events file (a trace-mode trace).
fn has_events_file(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".events"))
    })
}

/// A complete snapshot's line after its path: `<reason>, <T> threads, <E> events`, and the
/// trigger's pattern, length and wholeness for a trigger's snapshot.
fn describe(snap: &Path) -> Result<String, String> {
    let mut metas: Vec<PathBuf> = std::fs::read_dir(snap)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "meta"))
        .collect();
    metas.sort();
    let (mut reason, mut trigger) = (None, None);
    let (mut threads, mut events) = (0usize, 0u64);
    for meta in &metas {
        let text = std::fs::read_to_string(meta).map_err(|e| e.to_string())?;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("snapshot ") {
                reason.get_or_insert_with(|| rest.split(' ').next().unwrap_or("").to_string());
            } else if line.starts_with("window ") {
                threads += 1;
            } else if let Some(rest) = line.strip_prefix("trigger ") {
                trigger.get_or_insert_with(|| trigger_text(rest));
            }
        }
        events += events_in(&meta.with_extension("events"))
            .map_err(|e| e.to_string())?
            .0;
    }
    let mut line = format!(
        "{}, {threads} thread{}, {events} events",
        reason.unwrap_or_else(|| "unknown".into()),
        if threads == 1 { "" } else { "s" }
    );
    if let Some(Some(t)) = trigger {
        line += &format!(", trigger: {t}");
    }
    Ok(line)
}

/// A `trigger` line's `<pattern> <ms> ms whole|incomplete`, from its fields after `trigger`:
/// slot, tid, function, entry, exit, ns, whole|incomplete, pattern.
fn trigger_text(fields: &str) -> Option<String> {
    let f: Vec<&str> = fields.splitn(8, ' ').collect();
    let ns: u64 = f.get(5)?.parse().ok()?;
    Some(format!(
        "{} {:.1} ms {}",
        f.get(7)?,
        ns as f64 / 1e6,
        f.get(6)?
    ))
}
