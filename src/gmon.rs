//! The gmon.out writer (GNU tagged format, version 1), as gprof reads it:
//! a 20-byte header (`"gmon"`, version, 12 zero bytes), then records tagged 0 (pc histogram)
//! and 1 (call arc), in the target's byte order, at link-time addresses.
//!
//! One profile per module: the main executable's (named by src/process.rs), and one for each
//! shared library with instrumented code, `<that name>.<library file name>`, in the library's
//! own link-time addresses, so `gprof libfoo.so gmon.out.libfoo.so` reads it. An arc goes to the
//! profile of the module that holds both its ends (gprof drops the others); a library unloaded
//! by `dlclose` gets its profile written then, and its counts are kept apart from whatever is
//! loaded at the same address later (src/retired.rs).
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
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::modules::Module;
use crate::runtime::Runtime;
use crate::sys::{self, Bytes, Errno, StackBuf};
use crate::{arcs, process, retired, sampler, thread};

const GMON_MAGIC: &[u8; 4] = b"gmon";
const GMON_VERSION: u32 = 1;
const TAG_HIST: u8 = 0;
const TAG_ARC: u8 = 1;
const HIST_MAX: u64 = u16::MAX as u64;
const ARC_MAX: u64 = u32::MAX as u64;
/// Room for a profile path: GMON_OUT_PREFIX, the pid and image suffixes, a library name.
pub const PATH_MAX: usize = crate::config::MAX_PREFIX + 64 + crate::modules::MAX_PATH;

/// Serialises writers (exit, API, dump signal, exec, dlclose, crash). Control plane only.
static WRITER: WriterLock = WriterLock {
    owner: AtomicU32::new(0),
};
/// Warnings that should be printed once per process, not at every write.
static WARNED_HANDLER: AtomicBool = AtomicBool::new(false);

/// A spin lock that knows its owner thread, so that a writer re-entered on the thread that
/// holds it (a crash inside the writer) gives up instead of spinning forever.
struct WriterLock {
    /// Kernel tid of the holder, 0 when free.
    owner: AtomicU32,
}

struct WriterGuard;

impl WriterLock {
    /// None if the calling thread holds the lock already.
    fn lock(&self) -> Option<WriterGuard> {
        self.lock_within(u64::MAX)
    }

    /// As [`lock`](Self::lock), and None after `ns` nanoseconds of waiting for another thread.
    fn lock_within(&self, ns: u64) -> Option<WriterGuard> {
        let me = sys::gettid();
        let start = sys::monotonic_ns();
        let mut spins = 0u32;
        loop {
            match self
                .owner
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(WriterGuard),
                Err(owner) if owner == me => return None,
                Err(_) => {
                    core::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if ns != u64::MAX
                        && spins.is_multiple_of(1024)
                        && sys::monotonic_ns().saturating_sub(start) > ns
                    {
                        return None;
                    }
                }
            }
        }
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        WRITER.owner.store(0, Ordering::Release);
    }
}

/// In the child after fork: a writer that was running on another thread of the parent does
/// not exist here; its lock is free.
pub fn reset_after_fork() {
    WRITER.owner.store(0, Ordering::Relaxed);
}

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Arc {
    pub from: usize,
    pub to: usize,
    pub count: u64,
}

/// One sampled pc and its samples.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Sample {
    pc: usize,
    count: u64,
}

/// Memory mapped for one write and unmapped when dropped.
pub struct Scratch<T> {
    ptr: NonNull<T>,
    cap: usize,
    len: usize,
}

impl<T: Copy> Scratch<T> {
    pub fn new(cap: usize) -> Option<Self> {
        let bytes = cap.max(1) * core::mem::size_of::<T>();
        Some(Scratch {
            ptr: sys::map_zeroed(bytes)?.cast(),
            cap: cap.max(1),
            len: 0,
        })
    }

    pub fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            return false;
        }
        // SAFETY: len < cap, inside the mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
        true
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first len elements were written by push.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the first len elements were written by push.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn truncate(&mut self, len: usize) {
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
    /// Bytes written so far (the file's size).
    at: u64,
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

    /// A few bytes of fixed size: stored directly (no memcpy call per value, which made the
    /// histogram's bins the writer's main cost).
    fn put<const N: usize>(&mut self, v: [u8; N]) {
        if self.buf.cap - self.buf.len < N {
            self.flush();
        }
        // SAFETY: at least N bytes are free at len (the buffer is far larger than N).
        unsafe {
            self.buf
                .ptr
                .as_ptr()
                .add(self.buf.len)
                .cast::<[u8; N]>()
                .write_unaligned(v)
        };
        self.buf.len += N;
    }

    fn zeros(&mut self, mut n: usize) {
        while n > 0 {
            if self.buf.len == self.buf.cap {
                self.flush();
            }
            let k = n.min(self.buf.cap - self.buf.len);
            // SAFETY: len + k <= cap, inside the mapping.
            unsafe { self.buf.ptr.as_ptr().add(self.buf.len).write_bytes(0, k) };
            self.buf.len += k;
            n -= k;
        }
    }

    fn u16(&mut self, v: u16) {
        self.put(v.to_ne_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.put(v.to_ne_bytes());
    }

    fn addr(&mut self, v: usize) {
        self.put(v.to_ne_bytes());
    }

    fn flush(&mut self) {
        let len = self.buf.as_mut_slice().len() as u64;
        if self.error == 0 && !sys::fits_size_limit(self.at + len) {
            // Past the file size limit the write would raise SIGXFSZ and end the program.
            self.error = libc::EFBIG;
        }
        if self.error == 0
            && let Err(e) = sys::write_all(self.fd, self.buf.as_mut_slice())
        {
            self.error = e;
        }
        self.at += len;
        self.buf.truncate(0);
    }
}

/// What one profile holds, for messages.
#[derive(Default)]
struct Written {
    arcs: usize,
    calls: u64,
    samples: u64,
}

/// What one write produced, for messages.
struct Summary {
    exe: Written,
    /// Library profiles written, and what they hold together.
    libraries: usize,
    library: Written,
    /// Arcs (and their calls) no profile holds: their ends lie in different modules, or in
    /// code outside every module written (gprof could not show them).
    foreign_arcs: usize,
    foreign_calls: u64,
    lost: u64,
    samples: u64,
    samples_lost: u64,
    /// Probe lengths over the arcs of every thread's current table: (arcs, sum, longest).
    probes: (u64, u64, u64),
}

/// Everything recorded, gathered from every thread: arcs sorted by (from, to) and samples by
/// pc, duplicates (across tables and threads) summed.
pub struct Recorded {
    pub arcs: Scratch<Arc>,
    pub arcs_len: usize,
    samples: Scratch<Sample>,
    samples_len: usize,
    lost: u64,
}

impl Recorded {
    pub fn gather() -> Option<Recorded> {
        let (mut arcs, lost) = collect_arcs()?;
        let arcs_len = merge_duplicates(arcs.as_mut_slice()).len();
        let mut samples = collect_samples()?;
        let samples_len = merge_samples(samples.as_mut_slice()).len();
        Some(Recorded {
            arcs,
            arcs_len,
            samples,
            samples_len,
            lost,
        })
    }

    pub fn arcs(&self) -> &[Arc] {
        &self.arcs.as_slice()[..self.arcs_len]
    }

    fn samples(&self) -> &[Sample] {
        &self.samples.as_slice()[..self.samples_len]
    }

    /// The samples with a pc in `[start, end)`.
    fn samples_in(&self, start: usize, end: usize) -> &[Sample] {
        let s = self.samples();
        let lo = s.partition_point(|x| x.pc < start);
        let hi = s.partition_point(|x| x.pc < end);
        &s[lo..hi]
    }
}

/// Writes every profile. Returns 0 or an errno value (after printing why). `quiet` suppresses
/// the summary and loss lines, not errors.
pub fn write(rt: &Runtime, quiet: bool) -> c_int {
    match WRITER.lock() {
        Some(lock) => write_locked(rt, quiet, &lock),
        None => libc::EDEADLK,
    }
}

fn write_locked(rt: &Runtime, quiet: bool, _lock: &WriterGuard) -> c_int {
    let mut path = StackBuf::<PATH_MAX>::new();
    process::profile_path(rt.config.prefix(), &mut path);
    let Some(path) = path.as_cstr() else {
        message!("the gmon.out path is too long or contains a NUL byte; nothing written");
        return libc::ENAMETOOLONG;
    };
    let Some(rec) = Recorded::gather() else {
        message!(
            "cannot map memory to collect the profile; {} not written",
            Bytes(path.to_bytes())
        );
        return libc::ENOMEM;
    };
    let snap = sampler::snapshot();
    if !snap.handler_intact && !WARNED_HANDLER.swap(true, Ordering::Relaxed) {
        message!(
            "the program replaced instrfn's SIGPROF handler; the pc histogram stops where it did"
        );
    }
    let mut summary = Summary {
        exe: Written::default(),
        libraries: 0,
        library: Written::default(),
        foreign_arcs: 0,
        foreign_calls: 0,
        lost: rec.lost,
        samples: rec.samples().iter().map(|s| s.count).sum(),
        samples_lost: snap.lost,
        probes: thread::blocks()
            .map(|b| arcs::probe_stats(&b.table))
            .fold((0, 0, 0), |(n, sum, max), (bn, bsum, bmax)| {
                (n + bn, sum + bsum, max.max(bmax))
            }),
    };
    let result = write_profile(rt, path, &rt.exe, &rec, true);
    let result = result.map(|w| summary.exe = w);
    let mut placed = summary.exe.calls;
    // Every shared library with instrumented code: a callee of some arc lies in it.
    crate::modules::for_each_shared_object(|m| {
        if !rec.arcs().iter().any(|a| m.contains(a.to)) {
            return;
        }
        let mut lib_path = StackBuf::<PATH_MAX>::new();
        lib_path.push(path.to_bytes());
        lib_path.push(b".");
        lib_path.push(m.file_name());
        if let Some(lib_path) = lib_path.as_cstr()
            && let Ok(w) = write_profile(rt, lib_path, m, &rec, false)
        {
            summary.libraries += 1;
            summary.library.arcs += w.arcs;
            summary.library.calls += w.calls;
            summary.library.samples += w.samples;
            placed += w.calls;
        }
    });
    let total_calls: u64 = rec.arcs().iter().map(|a| a.count).sum();
    let placed_arcs = summary.exe.arcs + summary.library.arcs;
    summary.foreign_arcs = rec.arcs().len().saturating_sub(placed_arcs);
    summary.foreign_calls = total_calls.saturating_sub(placed);
    if !quiet {
        report(rt, path, &summary);
    }
    match result {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// The program crashed (src/crash.rs): writes every profile, unless the writer is running on
/// this very thread (the crash is in it) or does not finish on another within two seconds.
pub fn write_on_crash(rt: &Runtime) {
    match WRITER.lock_within(2_000_000_000) {
        Some(lock) => {
            write_locked(rt, false, &lock);
        }
        None => message!("the program crashed while the profile was being written; not written"),
    }
}

/// A library is about to be unloaded (src/interpose.c, dlclose): the memory that will keep its
/// counts apart is mapped now, before the loader frees its address range.
pub fn prepare_unload() {
    if let Some(_lock) = WRITER.lock() {
        retired::prepare();
    }
}

/// The library `m` has just been unloaded (src/interpose.c, dlclose): writes its profile now,
/// and keeps its counts apart from whatever is loaded at its addresses later.
pub fn write_unloaded(rt: &Runtime, m: &Module) {
    let Some(_lock) = WRITER.lock() else {
        return;
    };
    let Some(rec) = Recorded::gather() else {
        message!("cannot map memory to write the profile of an unloaded library");
        return;
    };
    if rec.arcs().iter().any(|a| m.contains(a.to)) {
        let mut path = StackBuf::<PATH_MAX>::new();
        process::profile_path(rt.config.prefix(), &mut path);
        path.push(b".");
        path.push(m.file_name());
        if let Some(path) = path.as_cstr() {
            let _ = write_profile(rt, path, m, &rec, false);
        }
    }
    retired::record(m, &rec);
}

/// Writes the profile of one module at `path`: samples and arcs inside the module (the arcs
/// and samples of an unloaded object that was mapped at the same place removed, those of
/// earlier loads of the same library file added). `exe` adds the loss arc.
fn write_profile(
    rt: &Runtime,
    path: &CStr,
    m: &Module,
    rec: &Recorded,
    exe: bool,
) -> Result<Written, c_int> {
    let mut written = Written::default();
    // The module's arcs, at link-time addresses.
    let mine = rec
        .arcs()
        .iter()
        .filter(|a| m.contains(a.from) && m.contains(a.to))
        .count();
    let extra = retired::earlier_loads(m);
    let Some(mut arcs) = Scratch::<Arc>::new(mine + extra) else {
        message!(
            "cannot map memory for {}; not written",
            Bytes(path.to_bytes())
        );
        return Err(libc::ENOMEM);
    };
    for a in rec.arcs() {
        if m.contains(a.from) && m.contains(a.to) {
            let count = a.count - retired::counted_before(a).min(a.count);
            if count > 0 {
                arcs.push(Arc {
                    from: m.link_address(a.from),
                    to: m.link_address(a.to),
                    count,
                });
            }
        }
    }
    retired::add_earlier_loads(m, |a| {
        arcs.push(a);
    });
    let arcs = merge_duplicates(arcs.as_mut_slice());

    let (fd, tmp) = create_temporary(path)?;
    let Some(buf) = Scratch::new(64 * 1024) else {
        // SAFETY: fd was opened above; tmp is the NUL-terminated name we created.
        unsafe {
            libc::close(fd);
            libc::unlink(tmp.as_c_ptr());
        }
        return Err(libc::ENOMEM);
    };
    let mut out = Out {
        fd,
        buf,
        error: 0,
        at: 0,
    };
    out.bytes(GMON_MAGIC);
    out.u32(GMON_VERSION);
    out.bytes(&[0; 12]);

    match sampler::hz() {
        Some(hz) => {
            for seg in m.segments() {
                let samples = rec.samples_in(seg.start, seg.end);
                written.samples += samples.iter().map(|s| s.count).sum::<u64>();
                write_histogram(&mut out, m, seg.start, seg.end, samples, hz);
            }
        }
        None => {
            // gprof refuses a file without a histogram ("gmon.out file is missing
            // histogram"): without sampling, write one empty bin, so the call counts can still
            // be read.
            if let Some(seg) = m.segments().first() {
                write_histogram(
                    &mut out,
                    m,
                    seg.start,
                    seg.start + 4,
                    &[],
                    rt.config.hz.max(1),
                );
            }
        }
    }
    for a in arcs.iter() {
        written.arcs += 1;
        written.calls += a.count;
        write_arc(&mut out, a);
    }
    // Calls that could not be counted show up in gprof too, as calls of instrfn_calls_lost
    // from instrfn_runtime, when the runtime is part of the executable (linked, not preloaded).
    let (marker_from, marker_to) = crate::runtime::loss_markers();
    if exe && rec.lost > 0 && m.contains(marker_from) && m.contains(marker_to) {
        write_arc(
            &mut out,
            &Arc {
                from: m.link_address(marker_from),
                to: m.link_address(marker_to),
                count: rec.lost,
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
        return Ok(written);
    }
    let error = if error == 0 { sys::errno() } else { error };
    // SAFETY: tmp is a valid C string naming our temporary file.
    unsafe { libc::unlink(tmp.as_c_ptr()) };
    let limit = sys::file_size_limit();
    if error == libc::EFBIG && limit != u64::MAX {
        message!(
            "cannot write {}: it would be larger than the file size limit ({})",
            Bytes(path.to_bytes()),
            sys::SizeLimit(limit)
        );
    } else {
        message!("cannot write {}: {}", Bytes(path.to_bytes()), Errno(error));
    }
    Err(error)
}

/// One arc (link-time addresses), as as many records as its count needs (gprof sums them).
fn write_arc(out: &mut Out, a: &Arc) {
    let mut left = a.count;
    while left > 0 {
        let n = left.min(ARC_MAX);
        out.put([TAG_ARC]);
        out.addr(a.from);
        out.addr(a.to);
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
        let mut all = Scratch::new(room + 64)?;
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

/// Every sample of every thread block, as [`collect_arcs`] does for arcs.
fn collect_samples() -> Option<Scratch<Sample>> {
    let mut room: usize = thread::blocks()
        .map(|b| sampler::chain_len(&b.samples))
        .sum();
    loop {
        let mut all = Scratch::new(room + 64)?;
        let mut complete = true;
        for block in thread::blocks() {
            sampler::for_each_sample(&block.samples, |pc, count| {
                complete &= all.push(Sample { pc, count });
            });
        }
        if complete {
            return Some(all);
        }
        room = room.saturating_mul(2);
    }
}

/// Sorts arcs by (from, to) and sums runs of equal keys, in place; returns the merged prefix.
fn merge_duplicates(arcs: &mut [Arc]) -> &mut [Arc] {
    arcs.sort_unstable_by_key(|a| (a.from, a.to));
    let mut w = 0;
    for r in 0..arcs.len() {
        if w > 0 && arcs[w - 1].from == arcs[r].from && arcs[w - 1].to == arcs[r].to {
            arcs[w - 1].count += arcs[r].count;
        } else {
            arcs[w] = arcs[r];
            w += 1;
        }
    }
    &mut arcs[..w]
}

/// Sorts samples by pc and sums runs of the same pc; returns the merged prefix.
fn merge_samples(s: &mut [Sample]) -> &mut [Sample] {
    s.sort_unstable_by_key(|x| x.pc);
    let mut w = 0;
    for r in 0..s.len() {
        if w > 0 && s[w - 1].pc == s[r].pc {
            s[w - 1].count += s[r].count;
        } else {
            s[w] = s[r];
            w += 1;
        }
    }
    &mut s[..w]
}

/// Histogram records for one segment `[start, end)` (runtime addresses, multiples of 4), one
/// bin per 4 bytes, from its samples sorted by pc: as many same-range records as the fullest
/// bin needs.
fn write_histogram(
    out: &mut Out,
    m: &Module,
    start: usize,
    end: usize,
    samples: &[Sample],
    rate: u32,
) {
    let bins = (end - start) / 4;
    // Samples of one bin are adjacent (sorted by pc): the fullest bin sets the record count.
    let mut max = 0u64;
    let mut i = 0;
    while i < samples.len() {
        let bin = (samples[i].pc - start) / 4;
        let mut n = 0;
        while i < samples.len() && (samples[i].pc - start) / 4 == bin {
            n += samples[i].count;
            i += 1;
        }
        max = max.max(n);
    }
    let records = max.div_ceil(HIST_MAX).max(1);
    let low = m.link_address(start);
    let high = low + bins * 4;
    let mut dimension = [0u8; 15];
    dimension[..7].copy_from_slice(b"seconds");
    for r in 0..records {
        out.put([TAG_HIST]);
        out.addr(low);
        out.addr(high);
        out.u32(bins as u32);
        out.u32(rate);
        out.bytes(&dimension);
        out.bytes(b"s");
        let floor = r * HIST_MAX;
        // Runs of empty bins in bulk, then each bin that has samples.
        let (mut written, mut next) = (0, 0);
        while next < samples.len() {
            let bin = (samples[next].pc - start) / 4;
            let mut n = 0;
            while next < samples.len() && (samples[next].pc - start) / 4 == bin {
                n += samples[next].count;
                next += 1;
            }
            out.zeros((bin - written) * 2);
            out.u16(n.saturating_sub(floor).min(HIST_MAX) as u16);
            written = bin + 1;
        }
        out.zeros((bins - written) * 2);
    }
}

/// Creates `<path>.<pid>-<n>.tmp` exclusively, next to the final file.
fn create_temporary(path: &CStr) -> Result<(c_int, StackBuf<{ PATH_MAX + 32 }>), c_int> {
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
    if s.samples_lost > 0 {
        message!(
            "{} pc samples were not kept: a thread sampled more than {} distinct pcs, or memory \
             ran out",
            s.samples_lost,
            sampler::MAX_PCS
        );
    }
    if rt.config.verbose {
        let (blocks, threads) = thread::block_stats();
        let mean_x100 = (s.probes.1 * 100).checked_div(s.probes.0).unwrap_or(0);
        let outside = s.samples - s.exe.samples - s.library.samples;
        message!(
            "wrote {}: {} arcs, {} calls, {} samples ({} outside the executable); {} library \
             profiles: {} arcs, {} calls, {} samples; {} arcs ({} calls) between modules or \
             into code outside them; {} samples in no profile; {} thread blocks for {} claims; \
             {} slow paths; {} calls lost; probes per arc {}.{:02} mean, {} max",
            Bytes(path.to_bytes()),
            s.exe.arcs,
            s.exe.calls,
            s.samples,
            s.samples - s.exe.samples,
            s.libraries,
            s.library.arcs,
            s.library.calls,
            s.library.samples,
            s.foreign_arcs,
            s.foreign_calls,
            outside,
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
        let exe = Module::executable();
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
            at: 0,
        };
        out.bytes(GMON_MAGIC);
        out.u32(GMON_VERSION);
        out.bytes(&[0; 12]);
        // 200000 samples at 1000 Hz in the callee's first bin (two pcs of it): 200 s, four
        // same-range records.
        let start = callee & !3;
        let samples = [
            Sample {
                pc: start,
                count: 150_000,
            },
            Sample {
                pc: start + 2,
                count: 50_000,
            },
        ];
        write_histogram(&mut out, &exe, start, start + 64, &samples, 1000);
        let calls = 5_000_000_000u64;
        write_arc(
            &mut out,
            &Arc {
                from: exe.link_address(caller + 1),
                to: exe.link_address(callee + 1),
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
        let arc = |from, to, count| Arc { from, to, count };
        let mut v = [
            arc(2, 2, 5),
            arc(1, 2, 3),
            arc(1, 3, 1),
            arc(1, 2, 4),
            arc(2, 2, 5),
        ];
        let m = merge_duplicates(&mut v);
        let got: Vec<_> = m.iter().map(|a| (a.from, a.to, a.count)).collect();
        assert_eq!(got, vec![(1, 2, 7), (1, 3, 1), (2, 2, 10)]);
    }
}
