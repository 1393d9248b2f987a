//! Ring mode (`INSTRFN_MODE=ring`): the flight recorder. Each thread slot writes its events
//! into a ring of chunks in the ring file `<pid>.<k>.ring`, through a shared file mapping.
//! When its chunk is full the thread rewrites the oldest chunk of its ring and goes on: no
//! system call, no collector. The pages belong to the page cache, so the rings outlive a
//! SIGKILL. A snapshot copies the chunks it can prove were not rewritten during the copy into
//! `snapshots/<n>/`, a trace directory (docs/trace-format.md, "Rings").
//!
//! Uses `settings`, `chunks` (the session's files), `files` (their path), `meta`, and the
//! layers below the outputs. Raw system calls only: a snapshot may run in a signal handler.

use core::fmt::Write as _;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, fence};

use super::chunks::SESSION;
use super::files;
use super::meta::{clock_pair, meta};
use super::settings::CHUNK_BYTES;
use crate::abi::Tls;
use crate::abi::format::*;
use crate::base::{Bytes, StackBuf};
use crate::sys;
use crate::sys::file::{close, write_all};
use crate::sys::raw::{mmap, syscall};
use crate::thread::{self, ThreadBlock};

/// Chunks per ring; 0: trace mode.
static CHUNKS: AtomicUsize = AtomicUsize::new(0);
/// Bytes of a ring's region in the file: its header and its chunks.
static REGION: AtomicUsize = AtomicUsize::new(0);
/// INSTRFN_EXIT_SNAPSHOT.
static EXIT_SNAPSHOT: AtomicBool = AtomicBool::new(true);
/// Whether a ring that could not be made was said (once per process).
static FAILED_SAID: AtomicBool = AtomicBool::new(false);
/// The snapshot number to try first (the last one taken, plus one).
static NEXT_SNAPSHOT: AtomicU32 = AtomicU32::new(1);
/// A block's `ring` when its ring could not be made.
const FAILED: usize = 1;
/// Chunks per ring.
const RING_CHUNKS: usize = 16;

/// Whether this process records into rings.
pub fn on() -> bool {
    CHUNKS.load(Ordering::Relaxed) != 0
}

/// Ring mode with rings of `ring_bytes` (a multiple of 16 pages), before the trace starts; 0
/// for trace mode. Returns the chunk size the rings take.
pub fn configure(ring_bytes: usize, exit_snapshot: bool) -> usize {
    let chunk = ring_bytes / RING_CHUNKS;
    CHUNKS.store(
        if ring_bytes == 0 { 0 } else { RING_CHUNKS },
        Ordering::Relaxed,
    );
    REGION.store(RING_HEADER + RING_CHUNKS * chunk, Ordering::Relaxed);
    EXIT_SNAPSHOT.store(exit_snapshot, Ordering::Relaxed);
    chunk
}

/// The ring file's header and the meta file's `ring` line (start-up). False if the header
/// cannot be written (said).
pub fn start(fd: i32) -> bool {
    let chunk = CHUNK_BYTES.load(Ordering::Relaxed);
    let n = CHUNKS.load(Ordering::Relaxed);
    let region = REGION.load(Ordering::Relaxed);
    let mut h = [0u8; 32];
    h[..8].copy_from_slice(RING_FILE_MAGIC);
    h[RF_VERSION..][..4].copy_from_slice(&RING_VERSION.to_ne_bytes());
    h[RF_CHUNK..][..4].copy_from_slice(&(chunk as u32).to_ne_bytes());
    h[RF_CHUNKS..][..4].copy_from_slice(&(n as u32).to_ne_bytes());
    h[RF_REGION..][..8].copy_from_slice(&(region as u64).to_ne_bytes());
    if let Err(e) = write_all(fd, &h) {
        message!("cannot write the ring file: {}; not tracing", sys::Errno(e));
        return false;
    }
    meta(format_args!("ring {} {chunk} {n}", n * chunk));
    true
}

/// The ring of `block`, mapped on its first use: its region reserved in the ring file (so
/// that no store into it can meet a full disk), mapped shared, its pages faulted in, its
/// header written. None if it cannot be made: said once per process, and the thread's
/// events are counted lost.
fn ring_of(block: &ThreadBlock) -> Option<usize> {
    let t = &block.trace;
    match t.ring.load(Ordering::Relaxed) {
        FAILED => return None,
        0 => {}
        r => return Some(r),
    }
    let region = REGION.load(Ordering::Relaxed);
    let offset = RING_FILE_HEADER + block.index as usize * region;
    let r = map_ring(offset, region);
    match r {
        Ok(base) => {
            // SAFETY: the header page of our fresh mapping; the magic goes last.
            unsafe {
                let h = base as *mut u8;
                h.add(RH_VERSION).cast::<u32>().write(RING_VERSION);
                h.add(RH_SLOT).cast::<u32>().write(block.index);
                h.add(RH_TID).cast::<u32>().write(sys::gettid());
                h.add(RH_NEWEST).cast::<u64>().write(SEQ_REWRITING);
                h.add(RH_WRAPS).cast::<u64>().write(0);
                fence(Ordering::Release);
                ptr::copy_nonoverlapping(RING_MAGIC.as_ptr(), h, 8);
            }
            t.ring.store(base, Ordering::Release);
            Some(base)
        }
        Err(e) => {
            t.ring.store(FAILED, Ordering::Relaxed);
            if !FAILED_SAID.swap(true, Ordering::Relaxed) {
                message!(
                    "cannot reserve a ring of {} bytes for thread slot {}: {}; the events of \
                     threads without a ring are counted as lost",
                    region,
                    block.index,
                    sys::Errno(e)
                );
            }
            None
        }
    }
}

/// Reserves `len` bytes of the ring file at `offset` and maps them shared, every page faulted
/// in writable. Err: the errno.
fn map_ring(offset: usize, len: usize) -> Result<usize, i32> {
    let fd = SESSION.ring.get();
    if fd < 0 {
        return Err(libc::EBADF);
    }
    if !sys::fits_size_limit((offset + len) as u64) {
        return Err(libc::EFBIG);
    }
    // SAFETY: fallocate of a range of our own file.
    let r = unsafe { syscall(libc::SYS_fallocate, [fd as usize, 0, offset, len, 0, 0]) };
    if r == -(libc::EOPNOTSUPP as isize) {
        // No fallocate here: zeros written over the range reserve its blocks for real.
        static ZERO: [u8; 4096] = [0; 4096];
        for at in (offset..offset + len).step_by(ZERO.len()) {
            // SAFETY: pwrite of a static buffer.
            let n = unsafe {
                syscall(
                    libc::SYS_pwrite64,
                    [fd as usize, ZERO.as_ptr() as usize, ZERO.len(), at, 0, 0],
                )
            };
            if n != ZERO.len() as isize {
                return Err(if n < 0 { -n as i32 } else { libc::ENOSPC });
            }
        }
    } else if r < 0 {
        return Err(-r as i32);
    }
    // SAFETY: a shared mapping of a range of our file whose blocks exist now.
    let p = unsafe {
        mmap(
            0,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            offset as u64,
        )
    };
    if p < 0 {
        return Err(-p as i32);
    }
    Ok(p as usize)
}

/// Whether `block`'s ring could not be made (its thread writes into its sink).
pub fn failed(block: &ThreadBlock) -> bool {
    on() && block.trace.ring.load(Ordering::Relaxed) == FAILED
}

/// The next chunk of this thread's ring, the oldest, rewritten for its new sequence number:
/// marked as being rewritten, its events cleared. Returns it and that number; the caller
/// writes its header, the number last ([`publish`]). A chunk that an exit trampoline a signal
/// handler interrupted is about to store into (the thread's `trace_pin`) keeps its events:
/// its number is skipped. None if the thread has no ring.
pub fn next_chunk(tls: &Tls, block: &ThreadBlock) -> Option<(usize, u64)> {
    let ring = ring_of(block)?;
    let n = CHUNKS.load(Ordering::Relaxed) as u64;
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let t = &block.trace;
    let mut seq = t.seq.fetch_add(1, Ordering::Relaxed);
    let mut base = ring + RING_HEADER + (seq % n) as usize * size;
    if tls.trace_pin != 0 && tls.trace_pin == base + size {
        seq = t.seq.fetch_add(1, Ordering::Relaxed);
        base = ring + RING_HEADER + (seq % n) as usize * size;
    }
    // SAFETY: a chunk of this thread's ring, which only this thread writes; readers check its
    // sequence number around their copy, so they drop what they copied from here on.
    unsafe {
        ((base + HDR_SEQ) as *mut u64).write_volatile(SEQ_REWRITING);
        fence(Ordering::SeqCst);
        ptr::write_bytes((base + CHUNK_HEADER) as *mut u8, 0, size - CHUNK_HEADER);
    }
    Some((base, seq))
}

/// Makes the chunk at `base`, its header written but for the sequence number, the ring's
/// newest: the number `seq` stored after everything else, and the ring header updated.
pub fn publish(block: &ThreadBlock, base: usize, seq: u64) {
    let ring = block.trace.ring.load(Ordering::Relaxed);
    let n = CHUNKS.load(Ordering::Relaxed) as u64;
    // SAFETY: the chunk and the ring header of this thread's ring.
    unsafe {
        fence(Ordering::SeqCst);
        ((base + HDR_SEQ) as *mut u64).write_volatile(seq);
        ((ring + RH_TID) as *mut u32).write_volatile(sys::gettid());
        ((ring + RH_NEWEST) as *mut u64).write_volatile(seq);
        ((ring + RH_WRAPS) as *mut u64).write_volatile(seq / n);
    }
}

/// Zeros in `fd` from byte `from` to `to` (nothing if `to <= from`).
fn zero(fd: i32, mut from: usize, to: usize) -> Result<(), i32> {
    static ZEROS: [u8; 4096] = [0; 4096];
    while from < to {
        let n = (to - from).min(ZEROS.len());
        // SAFETY: pwrite(2) from a static buffer.
        let w = unsafe {
            syscall(
                libc::SYS_pwrite64,
                [fd as usize, ZEROS.as_ptr() as usize, n, from, 0, 0],
            )
        };
        if w <= 0 {
            return Err(if w < 0 { -w as i32 } else { libc::ENOSPC });
        }
        from += w as usize;
    }
    Ok(())
}

/// Where `block`'s ring lies, if it has one: its base, chunks and chunk size (for readers
/// inside the process: crate::trace::trigger).
pub fn view(block: &ThreadBlock) -> Option<(usize, usize, usize)> {
    let ring = block.trace.ring.load(Ordering::Acquire);
    (ring > FAILED).then(|| {
        (
            ring,
            CHUNKS.load(Ordering::Relaxed),
            CHUNK_BYTES.load(Ordering::Relaxed),
        )
    })
}

/// A thread took over `block` (its ring keeps the previous owners' events until they are
/// rewritten; a thread event marks the switch): the ring header names it.
pub fn thread_started(block: &ThreadBlock) {
    let ring = block.trace.ring.load(Ordering::Relaxed);
    if ring > FAILED {
        // SAFETY: the ring header of the block this thread owns now.
        unsafe { ((ring + RH_TID) as *mut u32).write_volatile(sys::gettid()) };
    }
}

/// In a fork child: the parent's rings are the parent's. The one this thread wrote becomes
/// private memory at the same place (an event a signal handler interrupted may still be
/// stored there); the others go. Every block then maps a ring of the child's file.
pub fn after_fork(current: Option<&ThreadBlock>) {
    let region = REGION.load(Ordering::Relaxed);
    for block in thread::blocks() {
        let ring = block.trace.ring.swap(0, Ordering::Relaxed);
        if ring <= FAILED {
            continue;
        }
        let mine = current.is_some_and(|c| ptr::eq(c, block));
        // SAFETY: our mappings of the parent's ring file, which nothing in this process uses
        // as the parent's any more.
        unsafe {
            if mine {
                mmap(
                    ring,
                    region,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                );
            } else {
                syscall(libc::SYS_munmap, [ring, region, 0, 0, 0, 0]);
            }
        }
    }
}

/// At the end of the image (exit, exec): the exit snapshot, unless INSTRFN_EXIT_SNAPSHOT=off.
pub fn finish() {
    if on() && EXIT_SNAPSHOT.load(Ordering::Relaxed) {
        snapshot(b"exit");
    }
}

/// A path under the trace directory: `<dir>/<parts…>`, or None if it does not fit.
fn path_of(parts: &[&[u8]]) -> Option<StackBuf<1600>> {
    let mut p = StackBuf::<1600>::new();
    files::with_path(|dir, _| p.push(dir));
    for part in parts {
        p.push(part);
    }
    (!p.truncated() && !p.as_bytes().is_empty()).then_some(p)
}

fn sys_open(p: &mut StackBuf<1600>, flags: i32) -> Result<i32, i32> {
    let c = p.as_cstr().ok_or(libc::ENAMETOOLONG)?;
    // SAFETY: openat(2) of a NUL-terminated path.
    let fd = unsafe {
        syscall(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as isize as usize,
                c.as_ptr() as usize,
                (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as usize,
                0o666,
                0,
                0,
            ],
        )
    };
    if fd < 0 {
        Err(-fd as i32)
    } else {
        Ok(fd as i32)
    }
}

fn sys_mkdir(p: &mut StackBuf<1600>) -> Result<(), i32> {
    let c = p.as_cstr().ok_or(libc::ENAMETOOLONG)?;
    // SAFETY: mkdirat(2) of a NUL-terminated path.
    let r = unsafe {
        syscall(
            libc::SYS_mkdirat,
            [
                libc::AT_FDCWD as isize as usize,
                c.as_ptr() as usize,
                0o777,
                0,
                0,
                0,
            ],
        )
    };
    if r < 0 { Err(-r as i32) } else { Ok(()) }
}

/// Takes a snapshot of this process's rings into `<dir>/snapshots/<n>/`, the next free n:
/// the meta file as it is, then each ring's chunks that were not rewritten during their copy,
/// each ring followed by its `window` line. The threads keep writing meanwhile. `reason` goes
/// into the `snapshot` line. Returns 0, or an errno value (said in one line). Async-signal-
/// safe: system calls and the stack only.
pub fn snapshot(reason: &[u8]) -> i32 {
    snapshot_for(reason, None)
}

/// The call that fired a trigger (crate::trace::trigger): its thread's slot and tid, its
/// function, its entry and exit counter values, its length in ns (at least), and the
/// trigger's pattern.
pub struct Fired<'a> {
    pub slot: u32,
    pub tid: u32,
    pub func: usize,
    pub entry: u64,
    pub exit: u64,
    /// Whether the entry was seen (else the call began before `entry`).
    pub seen: bool,
    pub ns: u64,
    pub pattern: &'a [u8],
}

/// [`snapshot`], with a `trigger` line for the call that fired one.
pub fn snapshot_for(reason: &[u8], fired: Option<&Fired>) -> i32 {
    if !on() {
        return libc::EINVAL;
    }
    match take(reason, fired) {
        Ok(()) => 0,
        Err(e) => {
            message!("cannot take a snapshot of the rings: {}", sys::Errno(e));
            e
        }
    }
}

fn take(reason: &[u8], fired: Option<&Fired>) -> Result<(), i32> {
    let mut name = StackBuf::<64>::new();
    files::with_path(|_, n| name.push(n));
    let mut dir = path_of(&[b"/snapshots"]).ok_or(libc::ENAMETOOLONG)?;
    match sys_mkdir(&mut dir) {
        Ok(()) | Err(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    // The next free number: mkdir succeeds for one taker only.
    let mut k = NEXT_SNAPSHOT.load(Ordering::Relaxed);
    let mut tries = 0;
    let snap = loop {
        let mut num = StackBuf::<16>::new();
        let _ = write!(num, "/{k}");
        let mut p = path_of(&[b"/snapshots", num.as_bytes()]).ok_or(libc::ENAMETOOLONG)?;
        match sys_mkdir(&mut p) {
            Ok(()) => break p,
            Err(libc::EEXIST) if tries < 1_000_000 => {
                k += 1;
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    };
    NEXT_SNAPSHOT.store(k + 1, Ordering::Relaxed);
    let open_in_snap = |suffix: &[u8]| {
        let mut p = StackBuf::<1600>::new();
        p.push(snap.as_bytes());
        p.push(b"/");
        p.push(name.as_bytes());
        p.push(suffix);
        sys_open(&mut p, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
    };
    let meta_out = open_in_snap(b".meta")?;
    let events = match open_in_snap(b".events") {
        Ok(fd) => fd,
        Err(e) => {
            close(meta_out);
            return Err(e);
        }
    };
    let slot = fired.map_or(u32::MAX, |f| f.slot);
    let r = copy_meta(meta_out, &name, reason)
        .and_then(|()| copy_rings(events, meta_out, slot))
        .and_then(|(kept, since)| {
            if let Some(f) = fired {
                // Whole if the thread's window reaches back to the call's entry.
                let whole = f.seen && since.is_some_and(|t| t <= f.entry);
                let mut line = StackBuf::<1200>::new();
                let _ = writeln!(
                    line,
                    "trigger {} {} {:#x} {:#x} {:#x} {} {} {}",
                    f.slot,
                    f.tid,
                    f.func,
                    f.entry,
                    f.exit,
                    f.ns,
                    if whole { "whole" } else { "incomplete" },
                    Bytes(f.pattern)
                );
                write_all(meta_out, line.as_bytes())?;
            }
            let mut line = StackBuf::<64>::new();
            let _ = writeln!(line, "complete {kept}");
            write_all(meta_out, line.as_bytes())
        });
    close(events);
    close(meta_out);
    r
}

/// The meta file as it is now, then the `snapshot` line.
fn copy_meta(out: i32, name: &StackBuf<64>, reason: &[u8]) -> Result<(), i32> {
    let mut p = path_of(&[b"/", name.as_bytes(), b".meta"]).ok_or(libc::ENAMETOOLONG)?;
    let fd = sys_open(&mut p, libc::O_RDONLY)?;
    let mut buf = [0u8; 4096];
    let r = loop {
        // SAFETY: read(2) into a local buffer.
        let n = unsafe {
            syscall(
                libc::SYS_read,
                [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
            )
        };
        if n == -(libc::EINTR as isize) {
            continue;
        }
        if n <= 0 {
            break if n < 0 { Err(-n as i32) } else { Ok(()) };
        }
        if let Err(e) = write_all(out, &buf[..n as usize]) {
            break Err(e);
        }
    };
    close(fd);
    r?;
    // A clock line now, for readers to pace the counter by (as the end's does).
    let (counter, mono, real) = clock_pair();
    let mut line = StackBuf::<256>::new();
    let _ = write!(
        line,
        "clock {} {counter:#x} {mono} {real}\nsnapshot {} {counter:#x} {mono}\n",
        crate::arch::CLOCK_NAME,
        Bytes(reason)
    );
    write_all(out, line.as_bytes())
}

/// Each ring's chunks that its thread did not rewrite during their copy, into `events` back
/// to back, and after each ring its `window` line into `meta_out`. Returns the chunks kept,
/// and the time base of the oldest chunk kept of slot `slot` (None: none kept).
fn copy_rings(events: i32, meta_out: i32, slot: u32) -> Result<(usize, Option<u64>), i32> {
    let mut since = None;
    // How far into `events` copies were written.
    let mut high = 0usize;
    let n = CHUNKS.load(Ordering::Relaxed);
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let mut kept = 0usize;
    for block in thread::blocks() {
        let ring = block.trace.ring.load(Ordering::Relaxed);
        if ring <= FAILED {
            continue;
        }
        let (mut first, mut last, mut dropped) = (u64::MAX, 0u64, 0u32);
        for j in 0..n {
            let base = ring + RING_HEADER + j * size;
            let seq_at = (base + HDR_SEQ) as *const u64;
            // SAFETY: a chunk of a ring mapping, which stays mapped for the process's life
            // (only a fork child drops the parent's); its thread may be rewriting it.
            let (magic, seq) = unsafe {
                (
                    core::slice::from_raw_parts(base as *const u8, 8) == CHUNK_MAGIC,
                    seq_at.read_volatile(),
                )
            };
            if !magic {
                continue; // never used
            }
            if seq == SEQ_REWRITING || seq % n as u64 != j as u64 {
                dropped += 1;
                continue;
            }
            fence(Ordering::Acquire);
            // SAFETY: the chunk header, as above.
            let tbase = unsafe { ((base + HDR_TBASE) as *const u64).read_volatile() };
            // Where its events end: the first zero word. Its thread may still rewrite its
            // newest event (an entry that becomes a call word) but none before it, so the
            // copy ends there: every word but the last is final, and the last reads whole,
            // before or after its rewrite. The rest of the copy stays a hole (zeros).
            let mut len = CHUNK_HEADER;
            // SAFETY: words of the mapped chunk, as above.
            while len < size && unsafe { ((base + len) as *const u64).read_volatile() } != 0 {
                len += 8;
            }
            fence(Ordering::Acquire);
            let at = kept * size;
            // SAFETY: pwrite(2) from the mapped chunk.
            let w = unsafe { syscall(libc::SYS_pwrite64, [events as usize, base, len, at, 0, 0]) };
            if w != len as isize {
                return Err(if w < 0 { -w as i32 } else { libc::ENOSPC });
            }
            // A dropped copy may have written past this one's end: zeros there.
            zero(events, at + len, high.min(at + size))?;
            high = high.max(at + len);
            fence(Ordering::SeqCst);
            // SAFETY: as above.
            if unsafe { seq_at.read_volatile() } != seq {
                dropped += 1; // rewritten meanwhile: the copy is written over or cut off
                continue;
            }
            kept += 1;
            if block.index == slot && seq < first {
                since = Some(tbase);
            }
            first = first.min(seq);
            last = last.max(seq);
        }
        // SAFETY: the ring header of a mapped ring.
        let (tid, wraps) = unsafe {
            (
                ((ring + RH_TID) as *const u32).read_volatile(),
                ((ring + RH_WRAPS) as *const u64).read_volatile(),
            )
        };
        if first == u64::MAX {
            first = 0;
        }
        let mut line = StackBuf::<160>::new();
        let _ = writeln!(
            line,
            "window {} {tid} {first} {last} {wraps} {dropped}",
            block.index
        );
        write_all(meta_out, line.as_bytes())?;
    }
    // A last copy that was dropped lies beyond the kept ones.
    // SAFETY: ftruncate(2) of our own file.
    let r = unsafe {
        syscall(
            libc::SYS_ftruncate,
            [events as usize, kept * size, 0, 0, 0, 0],
        )
    };
    if r < 0 {
        Err(-r as i32)
    } else {
        Ok((kept, since))
    }
}
