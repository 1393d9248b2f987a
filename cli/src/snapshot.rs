//! `instrfn snapshot`: a snapshot of a ring-mode trace taken from outside the program, while
//! it runs or after it died (SIGKILL, the OOM killer). The rings live in the ring files'
//! pages, which are the page cache's: a read-only shared mapping sees the threads' stores. The
//! snapshot is `DIR/snapshots/<n>/` in the format the runtime's own snapshots have
//! (docs/trace-format.md, "The ring line and snapshots"), with reason `outside`. The reader
//! crate's `ring` module copies the chunks; this module names and writes the files. Uses
//! nothing else of the CLI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use instrfn_trace::ring::RingFile;

/// One program image's ring file: `<pid>.<k>` and the file opened.
struct Image {
    name: String,
    ring: RingFile,
}

/// What the copy of one image kept.
#[derive(Default)]
struct Kept {
    threads: usize,
    chunks: usize,
    dropped: u64,
}

/// Takes a snapshot of the rings in `dir` (only those of process `pid` if given) and says
/// what it holds, in one line.
pub fn snapshot(dir: &Path, pid: Option<u32>) -> Result<ExitCode, String> {
    let images = images(dir, pid)?;
    let mono = monotonic_ns();
    let snap = claim(dir)?;
    // Every meta file is made first, empty: the snapshot reads as incomplete until each of
    // them ends in its `complete` line.
    for image in &images {
        create(&snap.join(format!("{}.meta", image.name)))?;
    }
    let mut total = Kept::default();
    for image in &images {
        let kept = copy_image(dir, &snap, image, mono)?;
        total.threads += kept.threads;
        total.chunks += kept.chunks;
        total.dropped += kept.dropped;
    }
    println!(
        "snapshot {}: {} thread{}, {} chunks, {} chunks rewritten during the copy",
        snap.display(),
        total.threads,
        if total.threads == 1 { "" } else { "s" },
        total.chunks,
        total.dropped
    );
    Ok(ExitCode::SUCCESS)
}

/// The ring files of `dir` (of process `pid` only, if given) whose header is written, by
/// (pid, image).
fn images(dir: &Path, pid: Option<u32>) -> Result<Vec<Image>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{}: no such trace directory", dir.display())
        } else {
            format!("{}: cannot read the trace directory: {e}", dir.display())
        }
    })?;
    let mut names: Vec<(u32, u32, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".ring")?;
            let (p, k) = stem.split_once('.')?;
            Some((p.parse().ok()?, k.parse().ok()?, stem.to_string()))
        })
        .collect();
    if names.is_empty() {
        return Err(format!(
            "{} is not a ring-mode trace (no <pid>.<k>.ring file): record with \
             INSTRFN_MODE=ring or `instrfn record --ring`",
            dir.display()
        ));
    }
    names.retain(|(p, _, _)| pid.is_none_or(|pid| pid == *p));
    if let (true, Some(pid)) = (names.is_empty(), pid) {
        return Err(format!("{}: no ring file of pid {pid}", dir.display()));
    }
    names.sort();
    let mut images = Vec::new();
    for (_, _, name) in names {
        let path = dir.join(format!("{name}.ring"));
        if let Some(ring) = RingFile::open(&path).map_err(|e| e.to_string())? {
            let meta = dir.join(format!("{name}.meta"));
            if !meta.is_file() {
                return Err(format!(
                    "{}: missing (its ring file is there)",
                    meta.display()
                ));
            }
            images.push(Image { name, ring });
        }
    }
    if images.is_empty() {
        return Err(format!(
            "{}: no ring is written yet (the program is starting): try again",
            dir.display()
        ));
    }
    Ok(images)
}

/// CLOCK_MONOTONIC now, in ns: the clock the meta files' lines share across processes.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Makes `dir/snapshots/<n>`, the next free n (mkdir succeeds for one taker only, the
/// program's own snapshots included), and returns it.
fn claim(dir: &Path) -> Result<PathBuf, String> {
    let snapshots = dir.join("snapshots");
    std::fs::create_dir_all(&snapshots)
        .map_err(|e| format!("cannot create {}: {e}", snapshots.display()))?;
    let mut n = std::fs::read_dir(&snapshots)
        .map_err(|e| format!("cannot read {}: {e}", snapshots.display()))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .unwrap_or(0)
        + 1;
    loop {
        let snap = snapshots.join(n.to_string());
        match std::fs::create_dir(&snap) {
            Ok(()) => return Ok(snap),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(format!("cannot create {}: {e}", snap.display())),
        }
    }
}

/// A new file at `path` (it must not exist).
fn create(path: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// Copies `image`'s rings into `snap`: its events file first, then its meta file (the
/// trace's, read after the copy so that it names every thread and module the chunks
/// copied show), the `snapshot` and `window` lines, and `complete` last.
fn copy_image(dir: &Path, snap: &Path, image: &Image, mono: u64) -> Result<Kept, String> {
    let events_path = snap.join(format!("{}.events", image.name));
    let mut events = std::io::BufWriter::new(create(&events_path)?);
    let write_error = |e: std::io::Error| format!("cannot write {}: {e}", events_path.display());
    let mut kept = Kept::default();
    let mut windows = String::new();
    for slot in 0..image.ring.slots() {
        let Some(copy) = image.ring.copy_ring(slot).map_err(|e| e.to_string())? else {
            continue; // never made
        };
        for chunk in &copy.chunks {
            events.write_all(chunk).map_err(write_error)?;
        }
        kept.threads += 1;
        kept.chunks += copy.chunks.len();
        kept.dropped += copy.dropped as u64;
        windows += &format!(
            "window {} {} {} {} {} {}\n",
            copy.slot, copy.tid, copy.first, copy.last, copy.wraps, copy.dropped
        );
    }
    events.flush().map_err(write_error)?;
    drop(events);
    let meta_path = dir.join(format!("{}.meta", image.name));
    let mut meta = std::fs::read(&meta_path)
        .map_err(|e| format!("cannot read {}: {e}", meta_path.display()))?;
    if meta.last().is_some_and(|&b| b != b'\n') {
        meta.push(b'\n'); // a line cut short as it was written
    }
    // The counter field: 0. The runtime writes its counter at the snapshot's start, but the
    // program's counter is mostly not ours to read (a program of another architecture under
    // qemu, a process gone): see live_clock_line. The reader does not use this field. The
    // CLOCK_MONOTONIC field is the snapshot's start, as the runtime's.
    meta.extend_from_slice(live_clock_line(&meta, &image.name).as_bytes());
    meta.extend_from_slice(
        format!(
            "snapshot outside 0x0 {mono}\n{windows}complete {}\n",
            kept.chunks
        )
        .as_bytes(),
    );
    let out = snap.join(format!("{}.meta", image.name));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&out)
        .and_then(|mut f| f.write_all(&meta))
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(kept)
}

/// A `clock` line read now, for the reader to pace the counter by, where this command can
/// read the program's counter: an x86_64 program's TSC (`tsc`, invariant and shared by the
/// machine's processes), while the program runs (`<pid>` alive) and has no `end` line. Else
/// none: the reader then uses the end line, or the counter's nominal rate.
fn live_clock_line(meta: &[u8], image: &str) -> String {
    let text = String::from_utf8_lossy(meta);
    let tsc = text
        .lines()
        .find(|l| l.starts_with("clock "))
        .is_some_and(|l| l.split(' ').nth(1) == Some("tsc"));
    let ended = text.lines().any(|l| l.starts_with("end "));
    let pid: Option<i32> = image.split('.').next().and_then(|p| p.parse().ok());
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    let alive = pid.is_some_and(|p| p > 0 && unsafe { libc::kill(p, 0) } == 0);
    if !tsc || ended || !alive || !cfg!(target_arch = "x86_64") {
        return String::new();
    }
    #[cfg(target_arch = "x86_64")]
    {
        let (a, counter, b) = (monotonic_ns(), tsc_now(), monotonic_ns());
        let mut real = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime into a local timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut real) };
        let real = real.tv_sec as u64 * 1_000_000_000 + real.tv_nsec as u64;
        format!("clock tsc {counter:#x} {} {real}\n", a + (b - a) / 2)
    }
    #[cfg(not(target_arch = "x86_64"))]
    String::new()
}

#[cfg(target_arch = "x86_64")]
fn tsc_now() -> u64 {
    // SAFETY: rdtsc reads the time stamp counter; it has no preconditions.
    unsafe { core::arch::x86_64::_rdtsc() }
}
