//! The trace's chunks on disk: the session's three files (meta, staging, events), a new
//! staging chunk, the commit of a full one to the events file, and whether a retired chunk's
//! events are all written. Raw system calls only: the collector thread runs this too.
//!
//! A chunk is written where it was first mapped, in the staging file, and copied whole to the
//! events file once full. Nothing is dropped silently: when the files cannot grow (a full
//! disk, the file size limit, INSTRFN_TRACE_LIMIT) the trace counts as full and later events
//! are counted as lost.

use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use super::files::TraceFile;
use super::settings::CHUNK_BYTES;
use crate::abi::format::CHUNK_HEADER;
use crate::sys;
use crate::sys::raw::{mmap, syscall};

/// The trace of this process image: its files and how far they have grown.
pub struct Session {
    pub events: TraceFile,
    pub meta: TraceFile,
    /// The staging file: the chunks threads write in, reused once committed.
    pub stage: TraceFile,
    /// Ring mode's ring file (instead of the events and staging files).
    pub ring: TraceFile,
    /// Chunks committed to the events file so far (the next one's index there).
    pub committed: AtomicU64,
    /// Chunks of the staging file made so far (the next one's index there).
    pub staged: AtomicU64,
    /// Chunks handed to threads so far (INSTRFN_TRACE_LIMIT counts these).
    pub handed: AtomicU64,
    /// Set once the file could not grow any more (or the limit was reached): events are
    /// counted as lost from then on.
    pub full: AtomicBool,
    /// Why: 0 for INSTRFN_TRACE_LIMIT, else the errno; and whether that was said.
    pub full_reason: AtomicI32,
    pub full_said: AtomicBool,
}

pub static SESSION: Session = Session {
    events: TraceFile::new(b".events", libc::O_WRONLY),
    meta: TraceFile::new(b".meta", libc::O_WRONLY | libc::O_APPEND),
    stage: TraceFile::new(b".stage", libc::O_RDWR),
    ring: TraceFile::new(b".ring", libc::O_RDWR),
    committed: AtomicU64::new(0),
    staged: AtomicU64::new(0),
    handed: AtomicU64::new(0),
    full: AtomicBool::new(false),
    full_reason: AtomicI32::new(0),
    full_said: AtomicBool::new(false),
};

/// Whether this process traces.
pub fn active() -> bool {
    SESSION.events.raw() >= 0 || SESSION.ring.raw() >= 0
}

/// Marks the file full (it cannot grow: `errno`; or 0, the limit is reached).
pub fn set_full(errno: i32) {
    if !SESSION.full.swap(true, Ordering::Relaxed) {
        SESSION.full_reason.store(errno, Ordering::Relaxed);
    }
}

/// Allocates and maps a new chunk of the staging file with every page faulted in writable, so
/// that writing it never faults (nor can a full disk turn into a SIGBUS: the blocks exist
/// first). Chunks are made only when none is free to reuse (src/trace/collector.rs), so the staging
/// file grows to the chunks in use at once, not with the trace. Raw system calls only: the
/// collector runs this too. Returns the mapping, or None if there is none (the disk is full:
/// why is kept for [`say_full`] to say).
pub fn new_chunk() -> Option<usize> {
    if SESSION.full.load(Ordering::Relaxed) || SESSION.stage.raw() < 0 {
        return None;
    }
    let fd = SESSION.stage.get();
    if fd < 0 {
        // The program closed it and the file cannot be opened again.
        set_full(libc::EBADF);
        return None;
    }
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let offset = SESSION.staged.fetch_add(1, Ordering::Relaxed) * size as u64;
    if !sys::fits_size_limit(offset + size as u64) {
        set_full(libc::EFBIG);
        return None;
    }
    // SAFETY: fallocate of a range of our own file.
    let r = unsafe {
        syscall(
            libc::SYS_fallocate,
            [fd as usize, 0, offset as usize, size, 0, 0],
        )
    };
    if r < 0 {
        let grown = r == -(libc::EOPNOTSUPP as isize) && {
            // No fallocate here: one byte at the chunk's end grows the file (never shrinks it,
            // as a racing ftruncate could); the pages are allocated when populated below.
            let zero = 0u8;
            let end = offset as usize + size - 1;
            // SAFETY: pwrite of one byte from a local.
            let n = unsafe {
                syscall(
                    libc::SYS_pwrite64,
                    [fd as usize, &zero as *const u8 as usize, 1, end, 0, 0],
                )
            };
            n == 1
        };
        if !grown {
            set_full(-r as i32);
            return None;
        }
    }
    // SAFETY: a shared mapping of a range of our file that exists now.
    let p = unsafe {
        mmap(
            0,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            offset,
        )
    };
    if p < 0 {
        return None;
    }
    let base = p as usize;
    const MADV_POPULATE_WRITE: usize = 23;
    // SAFETY: madvise of our own mapping.
    let r = unsafe {
        syscall(
            libc::SYS_madvise,
            [base, size, MADV_POPULATE_WRITE, 0, 0, 0],
        )
    };
    if r == -(libc::EINVAL as isize) {
        // Before Linux 5.14: fault each page in by writing it.
        for page in (0..size).step_by(4096) {
            // SAFETY: inside the fresh mapping, which nothing else uses yet.
            unsafe { ptr::write_volatile((base + page) as *mut u8, 0) };
        }
    } else if r < 0 {
        // The pages cannot be had (a full disk where blocks are only allocated now).
        // SAFETY: our own fresh mapping.
        unsafe { syscall(libc::SYS_munmap, [base, size, 0, 0, 0, 0]) };
        set_full(-r as i32);
        return None;
    }
    Some(base)
}

/// Says once why the trace is full, when it is.
pub fn say_full() {
    if SESSION.full.load(Ordering::Relaxed) && !SESSION.full_said.swap(true, Ordering::Relaxed) {
        match SESSION.full_reason.load(Ordering::Relaxed) {
            0 => {
                message!("the trace reached INSTRFN_TRACE_LIMIT; later events are counted as lost")
            }
            libc::EFBIG if sys::file_size_limit() != u64::MAX => message!(
                "the trace files reached the file size limit ({}); later events are counted as \
                 lost",
                sys::SizeLimit(sys::file_size_limit())
            ),
            e => message!(
                "the trace files cannot grow ({}); later events are counted as lost",
                sys::Errno(e)
            ),
        }
    }
}

/// Commits a staging chunk whose events are all written: copies it to the next chunk of the
/// events file (`pwrite`: about a fifth of the cost of fresh file pages, measured with
/// scripts/bench/pagecache.c), then clears it for reuse — its magic first, so that a reader
/// finds the chunk either whole in the staging file or unused there (after a SIGKILL between
/// the two steps it is in both files, and readers take the copy with more events). Returns
/// false if the events file cannot take it (the disk is full): the chunk then stays as it is
/// in the staging file, where readers find it, and must not be reused. Raw system calls only
/// (the collector, or a thread retiring its chunk when there is no collector).
pub fn commit(base: usize) -> bool {
    if SESSION.events.raw() < 0 {
        return false;
    }
    let fd = SESSION.events.get();
    if fd < 0 {
        set_full(libc::EBADF);
        return false;
    }
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let offset = SESSION.committed.fetch_add(1, Ordering::Relaxed) as usize * size;
    if !sys::fits_size_limit((offset + size) as u64) {
        set_full(libc::EFBIG);
        return false;
    }
    // The blocks first: the copy then needs no block reservation per page (on ext4 a third
    // less CPU for it, measured), and a full disk shows before anything is copied.
    // SAFETY: fallocate of a range of our own file.
    let r = unsafe { syscall(libc::SYS_fallocate, [fd as usize, 0, offset, size, 0, 0]) };
    if r < 0 && r != -(libc::EOPNOTSUPP as isize) {
        set_full(-r as i32);
        return false;
    }
    let mut done = 0;
    while done < size {
        // SAFETY: pwrite from a mapped chunk to our own file.
        let n = unsafe {
            syscall(
                libc::SYS_pwrite64,
                [fd as usize, base + done, size - done, offset + done, 0, 0],
            )
        };
        if n == -(libc::EINTR as isize) {
            continue;
        }
        if n <= 0 {
            set_full(if n == 0 { libc::ENOSPC } else { -n as i32 });
            return false;
        }
        done += n as usize;
    }
    // SAFETY: the chunk is mapped and nobody writes it any more (all its events are written).
    unsafe {
        (base as *mut u64).write_volatile(0);
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        ptr::write_bytes((base + 8) as *mut u8, 0, size - 8);
    }
    true
}

/// Whether every event reserved in the chunk at `base`, up to `end`, has been written: its tag
/// word, stored last, is set, and so is its timestamp (never 0; a cleared chunk has 0 there).
/// Both are looked at because on aarch64 and riscv64 another thread may see the two plain
/// stores of an event out of order: a write that a signal handler delayed past the chunk's
/// retirement (the hand-over itself is a release store, which orders all the others) could
/// show its tag before its timestamp. Both words lie in one cache line: the scan costs the
/// same.
pub fn all_written(base: usize, end: usize) -> bool {
    // No word is 0 then: a short event is one word with a tag, a long one's first word has its
    // tag and its second is a timestamp with its low two bits 0 (never 0: counters are far past
    // 3); an unwritten event's first word is 0, and so
    // is whichever word of a long one another core does not see stored yet. So the whole range
    // is scanned, a word at a time, without decoding.
    (base + CHUNK_HEADER..end).step_by(8).all(|at| {
        // SAFETY: inside a chunk mapping that is still mapped (it is being retired).
        unsafe { (at as *const u64).read_volatile() != 0 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::format::{EV_EXIT, EV_LONG_SHIFT, EV_TAG_ENTRY};

    #[test]
    fn a_compact_event_is_written_when_its_first_word_is() {
        // Short (one word), long (first word, timestamp), short: 32 bytes of events.
        let mut chunk = [0u64; CHUNK_HEADER / 8 + 4];
        let words = chunk.as_mut_ptr();
        let base = words as usize;
        let end = base + CHUNK_HEADER + 32;
        let set = |i: usize, v: u64| {
            // SAFETY: word i of the events lies inside `chunk`.
            unsafe { words.add(CHUNK_HEADER / 8 + i).write_volatile(v) }
        };
        let short = (5u64 << 32) | (7 << 2) | EV_TAG_ENTRY as u64;
        let long = ((0x7f00_0000_1000u64) << EV_LONG_SHIFT) | ((EV_EXIT as u64) << 2) | 3;
        set(0, short);
        set(1, long);
        set(2, 123_456);
        set(3, short + 1); // a short exit
        assert!(all_written(base, end));
        // A long event's first word is stored last: while it is 0 the event is unwritten,
        // and so is the chunk (wherever the walk would go on from there).
        set(1, 0);
        assert!(!all_written(base, end));
        // The first word seen, the timestamp stored before it not yet (weaker orderings).
        set(1, long);
        set(2, 0);
        assert!(!all_written(base, end));
        set(2, 123_456);
        // A short event reserved and not written.
        set(3, 0);
        assert!(!all_written(base, end));
        // Only up to `end`: the short event and the long one before it.
        assert!(all_written(base, base + CHUNK_HEADER + 24));
        // The short one alone.
        set(1, 0);
        assert!(all_written(base, base + CHUNK_HEADER + 8));
    }
}
