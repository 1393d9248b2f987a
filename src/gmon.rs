//! The gmon.out writer (GNU tagged format, version 1), as gprof reads it:
//! a 20-byte header (`"gmon"`, version, 12 zero bytes), then records tagged 0 (pc histogram)
//! and 1 (call arc), in the target's byte order, at link-time addresses.
//!
//! Counts never wrap: a histogram bin above 65535 is split over several records with the same
//! range (gprof sums them), an arc count above 2^32-1 over several arc records (gprof sums
//! duplicate arcs too).
//!
//! The writer allocates nothing from the heap (scratch memory is mapped), so it can run at
//! exit, from the dump-signal handler, or in a fork child. The file is written under a
//! temporary name and renamed, so a reader never sees half a profile.

use core::ffi::{CStr, c_int};
use core::fmt::Write as _;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::exe::Executable;
use crate::runtime::Runtime;
use crate::sys::{self, Bytes, Errno, StackBuf};
use crate::{arcs, sampler, thread};

const GMON_MAGIC: &[u8; 4] = b"gmon";
const GMON_VERSION: u32 = 1;
const TAG_HIST: u8 = 0;
const TAG_ARC: u8 = 1;
const HIST_MAX: u64 = u16::MAX as u64;
const ARC_MAX: u64 = u32::MAX as u64;

/// Serialises writers (exit, API, dump signal). Control plane only.
static WRITING: spin::Mutex<()> = spin::Mutex::new(());
/// Warnings that should be printed once per process, not at every write.
static WARNED_HANDLER: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Copy)]
#[repr(C)]
struct Arc {
    from: usize,
    to: usize,
    count: u64,
}

/// Memory mapped for one write and unmapped when dropped.
struct Scratch<T> {
    ptr: NonNull<T>,
    cap: usize,
    len: usize,
}

impl<T: Copy> Scratch<T> {
    fn new(cap: usize) -> Option<Self> {
        let bytes = cap.max(1) * core::mem::size_of::<T>();
        Some(Scratch {
            ptr: sys::map_zeroed(bytes)?.cast(),
            cap: cap.max(1),
            len: 0,
        })
    }

    fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            return false;
        }
        // SAFETY: len < cap, inside the mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
        true
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the first len elements were written by push.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl<T> Drop for Scratch<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping came from map_zeroed with this size and is no longer used.
        unsafe { sys::unmap(self.ptr.cast(), self.cap.max(1) * core::mem::size_of::<T>()) };
    }
}

/// A buffered writer to a file descriptor over mapped memory.
struct Out {
    fd: c_int,
    buf: Scratch<u8>,
    error: c_int,
}

impl Out {
    fn bytes(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.buf.len == self.buf.cap {
                self.flush();
            }
            let n = b.len().min(self.buf.cap - self.buf.len);
            // SAFETY: len + n <= cap, inside the mapping; the source is a valid slice.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    self.buf.ptr.as_ptr().add(self.buf.len),
                    n,
                )
            };
            self.buf.len += n;
            b = &b[n..];
        }
    }

    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_ne_bytes());
    }

    fn addr(&mut self, v: usize) {
        self.bytes(&v.to_ne_bytes());
    }

    fn flush(&mut self) {
        if self.error == 0
            && let Err(e) = sys::write_all(self.fd, self.buf.as_mut_slice())
        {
            self.error = e;
        }
        self.buf.truncate(0);
    }
}

/// What one write produced, for messages and the API.
pub struct Summary {
    pub arcs: usize,
    pub calls: u64,
    /// Arcs (and their calls) gprof cannot show: caller or callee outside the executable.
    pub foreign_arcs: usize,
    pub foreign_calls: u64,
    pub lost: u64,
    pub samples: u64,
    pub samples_outside: u64,
    pub samples_saturated: u64,
    /// Probe lengths over the arcs of every thread's current table: (arcs, sum, longest).
    pub probes: (u64, u64, u64),
}

/// Holds the writer lock across fork (prepare handler), so the child never inherits it held.
pub fn lock_for_fork() {
    core::mem::forget(WRITING.lock());
}

/// Releases the lock taken by [`lock_for_fork`], in the parent and in the child.
pub fn unlock_after_fork() {
    // SAFETY: lock_for_fork took it on this thread (the forking one) and forgot the guard.
    unsafe { WRITING.force_unlock() };
}

/// Writes the profile to its file. Returns 0 or an errno value (after printing why). `quiet`
/// suppresses the summary and loss lines (a repeated exit write), not errors.
pub fn write(rt: &Runtime, quiet: bool) -> c_int {
    let _lock = WRITING.lock();
    let mut path = StackBuf::<{ crate::config::MAX_PREFIX + 64 }>::new();
    output_path(rt, &mut path);
    let Some(path) = path.as_cstr() else {
        message!("the gmon.out path is too long or contains a NUL byte; nothing written");
        return libc::ENAMETOOLONG;
    };
    match write_to(rt, path) {
        Ok(summary) => {
            if !quiet {
                report(rt, path, &summary);
            }
            0
        }
        Err(e) => e,
    }
}

/// `<prefix>.<pid>` with GMON_OUT_PREFIX, else `gmon.out`, or `gmon.out.<pid>` in a forked
/// child so that parent and child never overwrite each other.
fn output_path<const N: usize>(rt: &Runtime, path: &mut StackBuf<N>) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    match rt.config.prefix() {
        Some(prefix) => {
            path.push(prefix);
            let _ = write!(path, ".{pid}");
        }
        None if rt.is_fork_child() => {
            let _ = write!(path, "gmon.out.{pid}");
        }
        None => path.push(b"gmon.out"),
    }
}

fn write_to(rt: &Runtime, path: &CStr) -> Result<Summary, c_int> {
    let exe = &rt.exe;
    let (mut arcs, lost) = collect_arcs().ok_or_else(|| {
        message!(
            "cannot map memory to collect the call arcs; {} not written",
            Bytes(path.to_bytes())
        );
        libc::ENOMEM
    })?;
    let arcs = arcs.as_mut_slice();
    arcs.sort_unstable_by_key(|a| (a.from, a.to));
    let arcs = merge_duplicates(arcs);

    let mut summary = Summary {
        arcs: 0,
        calls: 0,
        foreign_arcs: 0,
        foreign_calls: 0,
        lost,
        samples: 0,
        samples_outside: 0,
        samples_saturated: 0,
        probes: thread::blocks()
            .map(|b| arcs::probe_stats(&b.table))
            .fold((0, 0, 0), |(n, sum, max), (bn, bsum, bmax)| {
                (n + bn, sum + bsum, max.max(bmax))
            }),
    };
    let (fd, tmp) = create_temporary(path)?;
    let Some(buf) = Scratch::new(64 * 1024) else {
        // SAFETY: fd was opened above; tmp is the NUL-terminated name we created.
        unsafe {
            libc::close(fd);
            libc::unlink(tmp.as_c_ptr());
        }
        return Err(libc::ENOMEM);
    };
    let mut out = Out { fd, buf, error: 0 };
    out.bytes(GMON_MAGIC);
    out.u32(GMON_VERSION);
    out.bytes(&[0; 12]);

    if sampler::active() {
        let snap = sampler::snapshot(rt.config.hz);
        summary.samples = snap.total;
        summary.samples_outside = snap.outside;
        summary.samples_saturated = snap.saturated;
        if !snap.handler_intact && !WARNED_HANDLER.swap(true, Ordering::Relaxed) {
            message!(
                "the program replaced instrfn's SIGPROF handler; the pc histogram stops where it did"
            );
        }
        sampler::for_each_segment(|start, bins| {
            write_histogram(&mut out, exe, start, bins, snap.rate)
        });
    } else if let Some(seg) = exe.segments().first() {
        // gprof refuses a file without a histogram ("gmon.out file is missing histogram"):
        // without sampling, write one empty bin, so the call counts can still be read.
        let empty = [core::sync::atomic::AtomicU32::new(0)];
        write_histogram(&mut out, exe, seg.start, &empty, rt.config.hz.max(1));
    }
    for a in arcs.iter() {
        if exe.contains(a.from) && exe.contains(a.to) {
            summary.arcs += 1;
            summary.calls += a.count;
            write_arc(&mut out, exe, a);
        } else {
            summary.foreign_arcs += 1;
            summary.foreign_calls += a.count;
        }
    }
    // Calls that could not be counted show up in gprof too, as calls of instrfn_calls_lost
    // from instrfn_runtime, when the runtime is part of the executable (linked, not preloaded).
    let (marker_from, marker_to) = crate::runtime::loss_markers();
    if summary.lost > 0 && exe.contains(marker_from) && exe.contains(marker_to) {
        write_arc(
            &mut out,
            exe,
            &Arc {
                from: marker_from,
                to: marker_to,
                count: summary.lost,
            },
        );
    }
    out.flush();
    let error = out.error;
    // SAFETY: fd is ours; close once.
    let closed = unsafe { libc::close(fd) } == 0;
    let error = if error == 0 && !closed {
        sys::errno()
    } else {
        error
    };
    // SAFETY: both are valid C strings; rename replaces the old profile atomically.
    if error == 0 && unsafe { libc::rename(tmp.as_c_ptr(), path.as_ptr()) } == 0 {
        return Ok(summary);
    }
    let error = if error == 0 { sys::errno() } else { error };
    // SAFETY: tmp is a valid C string naming our temporary file.
    unsafe { libc::unlink(tmp.as_c_ptr()) };
    message!("cannot write {}: {}", Bytes(path.to_bytes()), Errno(error));
    Err(error)
}

/// One arc, as as many records as its count needs (gprof sums them).
fn write_arc(out: &mut Out, exe: &Executable, a: &Arc) {
    let mut left = a.count;
    while left > 0 {
        let n = left.min(ARC_MAX);
        out.bytes(&[TAG_ARC]);
        out.addr(exe.link_address(a.from));
        out.addr(exe.link_address(a.to));
        out.u32(n as u32);
        left -= n;
    }
}

/// Every arc of every thread block (duplicates across tables and blocks included), and the
/// number of calls lost. Other threads keep counting meanwhile; if their tables grow between
/// sizing and copying, the copy starts over with more room.
fn collect_arcs() -> Option<(Scratch<Arc>, u64)> {
    let mut room: usize = thread::blocks().map(|b| arcs::chain_len(&b.table)).sum();
    loop {
        let mut all = Scratch::new(room)?;
        let mut lost = 0;
        let mut complete = true;
        for block in thread::blocks() {
            lost += arcs::chain_lost(&block.table);
            arcs::for_each_arc(&block.table, |from, to, count| {
                complete &= all.push(Arc { from, to, count });
            });
        }
        if complete {
            return Some((all, lost + crate::runtime::lost_without_block()));
        }
        room = room.saturating_mul(2);
    }
}

/// Sums runs of equal (from, to) in a sorted slice, in place; returns the merged prefix.
fn merge_duplicates(arcs: &mut [Arc]) -> &[Arc] {
    let mut w = 0;
    for r in 0..arcs.len() {
        if w > 0 && arcs[w - 1].from == arcs[r].from && arcs[w - 1].to == arcs[r].to {
            arcs[w - 1].count += arcs[r].count;
        } else {
            arcs[w] = arcs[r];
            w += 1;
        }
    }
    &arcs[..w]
}

/// Histogram records for one segment: as many same-range records as the fullest bin needs.
fn write_histogram(
    out: &mut Out,
    exe: &Executable,
    start: usize,
    bins: &[core::sync::atomic::AtomicU32],
    rate: u32,
) {
    let counts = |i: usize| bins[i].load(Ordering::Relaxed) as u64;
    let max = (0..bins.len()).map(counts).max().unwrap_or(0);
    let records = max.div_ceil(HIST_MAX).max(1);
    let low = exe.link_address(start);
    let high = low + bins.len() * 4;
    let mut dimension = [0u8; 15];
    dimension[..7].copy_from_slice(b"seconds");
    for r in 0..records {
        out.bytes(&[TAG_HIST]);
        out.addr(low);
        out.addr(high);
        out.u32(bins.len() as u32);
        out.u32(rate);
        out.bytes(&dimension);
        out.bytes(b"s");
        let floor = r * HIST_MAX;
        for i in 0..bins.len() {
            let part = counts(i).saturating_sub(floor).min(HIST_MAX) as u16;
            out.bytes(&part.to_ne_bytes());
        }
    }
}

/// Creates `<path>.<pid>-<n>.tmp` exclusively, next to the final file.
fn create_temporary(
    path: &CStr,
) -> Result<(c_int, StackBuf<{ crate::config::MAX_PREFIX + 96 }>), c_int> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for n in 0..16 {
        let mut tmp = StackBuf::new();
        tmp.push(path.to_bytes());
        let _ = write!(tmp, ".{pid}-{n}.tmp");
        let Some(name) = tmp.as_cstr() else {
            message!("the gmon.out path is too long; nothing written");
            return Err(libc::ENAMETOOLONG);
        };
        // SAFETY: name is a valid C string; flags and mode are plain integers.
        let fd = unsafe {
            libc::open(
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        };
        if fd >= 0 {
            return Ok((fd, tmp));
        }
        let e = sys::errno();
        if e != libc::EEXIST {
            let dir = match path.to_bytes().iter().rposition(|&b| b == b'/') {
                Some(0) => &b"/"[..],
                Some(i) => &path.to_bytes()[..i],
                None => b".",
            };
            message!(
                "cannot write {} (directory {}): {}",
                Bytes(path.to_bytes()),
                Bytes(dir),
                Errno(e)
            );
            return Err(e);
        }
    }
    message!(
        "cannot create a temporary file for {}",
        Bytes(path.to_bytes())
    );
    Err(libc::EEXIST)
}

fn report(rt: &Runtime, path: &CStr, s: &Summary) {
    if s.lost > 0 {
        message!(
            "{} calls were not counted: a thread's arc table reached INSTRFN_MAX_ARCS={} or memory \
             ran out; raise INSTRFN_MAX_ARCS",
            s.lost,
            rt.config.max_arcs
        );
    }
    if s.samples_saturated > 0 {
        message!(
            "{} pc samples were dropped: their histogram bin was full (2^32-1 samples)",
            s.samples_saturated
        );
    }
    if rt.config.verbose {
        let (blocks, threads) = thread::block_stats();
        let mean_x100 = (s.probes.1 * 100).checked_div(s.probes.0).unwrap_or(0);
        message!(
            "wrote {}: {} arcs, {} calls, {} samples ({} outside the executable); {} arcs ({} calls) \
             from or into code outside the executable; {} thread blocks for {} claims; {} slow \
             paths; {} calls lost; probes per arc {}.{:02} mean, {} max",
            Bytes(path.to_bytes()),
            s.arcs,
            s.calls,
            s.samples,
            s.samples_outside,
            s.foreign_arcs,
            s.foreign_calls,
            blocks,
            threads,
            crate::runtime::slow_paths(),
            s.lost,
            mean_x100 / 100,
            mean_x100 % 100,
            s.probes.2
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    #[inline(never)]
    #[unsafe(no_mangle)]
    extern "C" fn instrfn_test_caller() -> u32 {
        std::hint::black_box(11)
    }

    #[inline(never)]
    #[unsafe(no_mangle)]
    extern "C" fn instrfn_test_callee() -> u32 {
        std::hint::black_box(22)
    }

    /// Counts past the record widths (u32 arcs, u16 bins) reach gprof whole: written as several
    /// records, summed by the real gprof reading this test binary's own symbols.
    #[test]
    fn large_counts_survive_gprof() {
        let exe = Executable::find();
        let (caller, callee) = (
            instrfn_test_caller as *const () as usize,
            instrfn_test_callee as *const () as usize,
        );
        assert!(exe.contains(caller) && exe.contains(callee));
        let path = std::env::temp_dir().join(format!("instrfn-large-{}.gmon", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let mut out = Out {
            fd: std::os::fd::IntoRawFd::into_raw_fd(file),
            buf: Scratch::new(4096).unwrap(),
            error: 0,
        };
        out.bytes(GMON_MAGIC);
        out.u32(GMON_VERSION);
        out.bytes(&[0; 12]);
        // 200000 samples at 1000 Hz in the callee's first bin: 200 s, four same-range records.
        let bins: Vec<AtomicU32> = (0..16)
            .map(|i| AtomicU32::new(if i == 0 { 200_000 } else { 0 }))
            .collect();
        write_histogram(&mut out, &exe, callee & !3, &bins, 1000);
        let calls = 5_000_000_000u64;
        write_arc(
            &mut out,
            &exe,
            &Arc {
                from: caller + 1,
                to: callee + 1,
                count: calls,
            },
        );
        out.flush();
        assert_eq!(out.error, 0);
        // SAFETY: the fd is ours.
        unsafe { libc::close(out.fd) };

        let me = std::env::current_exe().unwrap();
        let gprof = std::process::Command::new("gprof")
            .args(["-b", "-p"])
            .arg(&me)
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let gprof = gprof.expect("gprof is required (scripts/test.sh installs binutils)");
        let text = String::from_utf8_lossy(&gprof.stdout);
        assert!(
            gprof.status.success(),
            "{}",
            String::from_utf8_lossy(&gprof.stderr)
        );
        let line = text
            .lines()
            .find(|l| l.ends_with(" instrfn_test_callee"))
            .unwrap_or_else(|| panic!("{text}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[2], "200.00", "self seconds: {line}");
        assert_eq!(cols[3], calls.to_string(), "calls: {line}");
    }

    #[test]
    fn merges_sorted_duplicates() {
        let mut v = [
            Arc {
                from: 1,
                to: 2,
                count: 3,
            },
            Arc {
                from: 1,
                to: 2,
                count: 4,
            },
            Arc {
                from: 1,
                to: 3,
                count: 1,
            },
            Arc {
                from: 2,
                to: 2,
                count: 5,
            },
            Arc {
                from: 2,
                to: 2,
                count: 5,
            },
        ];
        let m = merge_duplicates(&mut v);
        let got: Vec<_> = m.iter().map(|a| (a.from, a.to, a.count)).collect();
        assert_eq!(got, vec![(1, 2, 7), (1, 3, 1), (2, 2, 10)]);
    }
}
