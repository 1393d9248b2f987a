//! A thread's side of the trace: taking its next chunk, retiring the full one to the
//! collector, writing an event from Rust (the slow paths), and the sink a thread writes into
//! once the trace is full, so that losses are counted at the cost of recording.

use core::ptr;
use core::sync::atomic::Ordering;

use super::chunks::{SESSION, new_chunk, say_full, set_full};
use super::collector;
use super::meta::meta;
use super::ring;
use super::settings::{CHUNK_BYTES, MAX_CHUNKS, NO_CALL_WORDS};
use crate::abi::Tls;
use crate::abi::format::*;
use crate::arch;
use crate::sys;
use crate::thread::{BlockTrace, ThreadBlock};

/// Bytes of a thread's sink, its zero header included.
const SINK_BYTES: usize = 16 << 10;

/// Gives this thread its next chunk: a prepared one from the collector's pool, or one it maps
/// itself. `hint` is the function of the event that needs it (0: none), for the chunk's code
/// base, and `ts` its timestamp (0: none), for its time base: that event (stamped before the
/// chunk was had) can then be short too, if it is no older than 2^26 ticks (a slow path under
/// qemu can take milliseconds). Returns false if
/// there is none (the file cannot grow, or the limit is reached): the caller counts the event
/// as lost.
pub fn refill(tls: &mut Tls, block: &ThreadBlock, hint: usize, ts: u64) -> bool {
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let t = &block.trace;
    let (base, seq) = if ring::on() {
        // The chunk left stays in the ring: nothing to retire.
        let Some((base, seq)) = ring::next_chunk(tls, block) else {
            return false;
        };
        t.chunk.store(base, Ordering::Relaxed);
        (base, seq)
    } else {
        let Some(base) = take_chunk() else {
            say_full();
            return false;
        };
        let old = t.chunk.swap(base, Ordering::Relaxed);
        if old != 0 {
            let old_end = tls.trace_pos.clamp(old + CHUNK_HEADER, old + size);
            let older = t.prev.swap(old, Ordering::Relaxed);
            let older_end = t.prev_end.swap(old_end, Ordering::Relaxed);
            retire_chunk(tls, t, older, older_end);
        }
        (base, t.seq.fetch_add(1, Ordering::Relaxed))
    };
    write_header(tls, block, base, seq, hint, ts);
    true
}

/// A chunk of the staging file for this thread: a prepared one from the collector's pool, or
/// one it commits or maps itself. None if there is none: the file cannot grow, or the limit is
/// reached.
fn take_chunk() -> Option<usize> {
    let mut base = 0;
    if !SESSION.full.load(Ordering::Relaxed) {
        if SESSION.handed.fetch_add(1, Ordering::Relaxed) >= MAX_CHUNKS.load(Ordering::Relaxed) {
            set_full(0);
        } else {
            base = collector::take();
            if base == 0 {
                base = collector::commit_one_retired();
                if base == 0
                    && let Some(b) = new_chunk()
                {
                    base = b;
                }
                if base != 0 {
                    collector::prepared_by_thread();
                }
            }
        }
    }
    (base != 0).then_some(base)
}

/// Writes the header of the chunk at `base`, sequence number `seq`, and makes it this thread's.
fn write_header(tls: &mut Tls, block: &ThreadBlock, base: usize, seq: u64, hint: usize, ts: u64) {
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    // The code base stays while the function is in its reach (so a thread's chunks share it).
    let prev = tls.trace_cbase;
    let hint = hint as u64;
    let cbase = if prev != 0 && (hint == 0 || hint.wrapping_sub(prev as u64) >> 32 == 0) {
        prev as u64
    } else if hint != 0 {
        hint.wrapping_sub(EV_CODE_HALF)
    } else {
        0
    };
    let now = arch::counter();
    let tbase = if ts != 0 && now.wrapping_sub(ts) < 1 << 26 {
        ts.min(now)
    } else {
        now
    };
    // SAFETY: the header lies at the start of the chunk, whose events are all zero (fresh,
    // cleared by `commit`, or rewritten by ring::next_chunk). The magic goes last: a reader
    // sees a whole header or an unused chunk; in a ring the sequence number goes last of all.
    unsafe {
        let h = base as *mut u8;
        h.add(HDR_TBASE).cast::<u64>().write(tbase);
        h.add(HDR_CBASE).cast::<u64>().write(cbase);
        h.add(HDR_VERSION).cast::<u32>().write(CHUNK_VERSION);
        h.add(HDR_SIZE).cast::<u32>().write(size as u32);
        h.add(HDR_SLOT).cast::<u32>().write(block.index);
        h.add(HDR_TID).cast::<u32>().write(sys::gettid());
        if ring::on() {
            ring::publish(block, base, seq);
        } else {
            h.add(HDR_SEQ).cast::<u64>().write(seq);
        }
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        ptr::copy_nonoverlapping(CHUNK_MAGIC.as_ptr(), h, 8);
    }
    tls.trace_end = base + size;
    tls.trace_pos = base + CHUNK_HEADER;
    tls.trace_tbase = tbase;
    tls.trace_cbase = cbase as usize;
    keep_from_call_words(tls);
}

/// INSTRFN_CALL_WORDS=off: a pin that no chunk has (no chunk ends at 1) keeps this thread's
/// exit trampolines from making call words, at no cost to them. Set as the thread starts
/// and as it takes a chunk (a fork child's thread starts without). No call word is being
/// made then, so no pin of one is overwritten.
pub fn keep_from_call_words(tls: &mut Tls) {
    if NO_CALL_WORDS.load(Ordering::Relaxed) {
        tls.trace_pin = 1;
    }
}

/// Hands the chunk at `base` (0: none), whose events end at `end`, to the collector, unless
/// this thread's `trace_pin` holds it: an exit trampoline that the running code (a signal
/// handler) interrupted is about to store a call word into it (MERGE_CALL in src/arch/x86_64/,
/// src/arch/aarch64/ and src/arch/riscv64/, S390_MERGE in src/arch/s390x/).
/// Such a chunk waits in the block's `pinned` until a later call finds the pin gone. At most
/// one chunk is pinned at a time.
pub fn retire_chunk(tls: &Tls, t: &BlockTrace, base: usize, end: usize) {
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let held = |chunk: usize| tls.trace_pin != 0 && tls.trace_pin == chunk + size;
    let waiting = t.pinned.load(Ordering::Relaxed);
    if waiting != 0 && !held(waiting) {
        t.pinned.store(0, Ordering::Relaxed);
        collector::retire(waiting, t.pinned_end.load(Ordering::Relaxed));
    }
    if base == 0 {
        return;
    }
    if held(base) && t.pinned.load(Ordering::Relaxed) == 0 {
        t.pinned_end.store(end, Ordering::Relaxed);
        t.pinned.store(base, Ordering::Relaxed);
    } else {
        collector::retire(base, end);
    }
}

/// Takes the time and code bases of the chunk at `base` into this thread's Tls (a thread that
/// goes on in a chunk another one filled before it).
pub fn take_bases(tls: &mut Tls, base: usize) {
    if base != 0 {
        // SAFETY: a mapped chunk's header (its owner's: this thread's now).
        unsafe {
            tls.trace_tbase = ((base + HDR_TBASE) as *const u64).read();
            tls.trace_cbase = ((base + HDR_CBASE) as *const u64).read() as usize;
        }
    }
}

/// Writes one event from Rust (the slow path), taking a chunk if needed; counts it as lost
/// if there is none. A loss marker goes first when events were lost before.
pub fn event(tls: &mut Tls, block: &ThreadBlock, kind: usize, value: usize, ts: u64) {
    if in_sink(tls, block) {
        drain_sink(tls, block);
        if kind != EV_THREAD {
            tls.trace_lost += 1;
        }
        return;
    }
    for attempt in 0..2 {
        let pending_lost = tls.trace_lost;
        // (After a refill the bases are the new chunk's.)
        let short = short_word(tls, kind, value, ts);
        let size = if short.is_some() {
            EV_SHORT_BYTES
        } else {
            EV_BYTES
        };
        let need = if pending_lost > 0 { EV_BYTES } else { 0 } + size;
        if tls.trace_end != 0 && tls.trace_pos + need <= tls.trace_end {
            let at = tls.trace_pos;
            tls.trace_pos += need;
            let mut w = at;
            if pending_lost > 0 {
                flush_lost(tls, block);
                // SAFETY: inside this thread's chunk, reserved above.
                unsafe { store_event(w, ts, EV_LOST, pending_lost) };
                w += EV_BYTES;
            }
            // SAFETY: as above.
            unsafe {
                match short {
                    Some(word) => (w as *mut u64).write_volatile(word),
                    None => store_event(w, ts, kind, value),
                }
            }
            return;
        }
        let hint = match kind {
            EV_ENTRY | EV_EXIT | EV_UNWOUND | EV_NOEXIT => value,
            _ => 0,
        };
        if attempt == 0 && !refill(tls, block, hint, ts) {
            break;
        }
    }
    // Losses count the program's events; a thread event that could not be written only names
    // the thread, which its meta line does too.
    if kind != EV_THREAD {
        tls.trace_lost += 1;
    }
    // For good only: a chunk that could not be mapped (no memory) is tried again next time.
    if SESSION.full.load(Ordering::Relaxed) || ring::failed(block) {
        enter_sink(tls, block);
    }
}

/// The trace is full for good (INSTRFN_TRACE_LIMIT, or the files cannot grow): from now on
/// this thread's trampolines write their events into its sink, a small private mapping that
/// nobody reads, as they would into a chunk, and the events reserved there are counted as
/// lost when it is drained ([`drain_sink`]: when it is full, and by [`flush_lost`]). So a
/// program whose trace is full runs on at about the cost of recording, not at the slow path's
/// (two system calls per event: about 75 times slower, measured on the threads workload).
/// Counting by position is exact: every reservation is one event of 16 bytes (compact
/// trampolines write long events there: see the time base below), signal handlers' included
/// (they reserve with the same read-modify-write), and a call taken back
/// (INSTRFN_MIN_DURATION) takes its entry's place back as in a chunk (the sink starts with a
/// zero header, as a chunk does, for that test to read). The chunk the thread had stays where
/// it was, handed to the block's next owner as it would be (`pos`, `end`). Without a sink (it
/// cannot be mapped) every event takes the slow path and is counted there, as before.
pub fn enter_sink(tls: &mut Tls, block: &ThreadBlock) {
    let t = &block.trace;
    let mut sink = t.sink.load(Ordering::Relaxed);
    if sink == 0 {
        sink = sys::map_zeroed(SINK_BYTES).map_or(0, |p| p.as_ptr() as usize);
        if sink == 0 {
            return;
        }
        t.sink.store(sink, Ordering::Relaxed);
    }
    t.pos.store(tls.trace_pos, Ordering::Relaxed);
    t.end.store(tls.trace_end, Ordering::Relaxed);
    tls.trace_pos = sink + CHUNK_HEADER;
    tls.trace_end = sink + SINK_BYTES;
    // A time base no event's time reaches: every event there is long (16 bytes), so that the
    // count by position stays exact.
    tls.trace_tbase = arch::counter().wrapping_add(1 << 63);
}

/// Whether this thread writes into its sink (the trace is full).
pub fn in_sink(tls: &Tls, block: &ThreadBlock) -> bool {
    let sink = block.trace.sink.load(Ordering::Relaxed);
    sink != 0 && tls.trace_end == sink + SINK_BYTES
}

/// Counts the events reserved in this thread's sink as lost and empties it. The slow path
/// runs with signals blocked, so no reservation moves the position meanwhile; one that a
/// handler interrupted before its write writes into the sink later, harmlessly.
fn drain_sink(tls: &mut Tls, block: &ThreadBlock) {
    if in_sink(tls, block) {
        let start = block.trace.sink.load(Ordering::Relaxed) + CHUNK_HEADER;
        tls.trace_lost += (tls.trace_pos - start) / EV_BYTES;
        tls.trace_pos = start;
    }
}

/// The short word of an event (compact events: an entry or an exit within reach of the
/// current chunk's bases, as the trampolines make it), or None: it is written long.
fn short_word(tls: &Tls, kind: usize, value: usize, ts: u64) -> Option<u64> {
    let off = (value as u64).wrapping_sub(tls.trace_cbase as u64);
    let d = ts.wrapping_sub(tls.trace_tbase);
    ((kind == EV_ENTRY || kind == EV_EXIT) && off >> 32 == 0 && d >> EV_TIME_BITS == 0)
        .then_some((off << 32) | (d << 2) | kind as u64)
}

/// Stores one event: the timestamp, then the tagged word that marks it written.
///
/// # Safety
/// `at` .. `at + 16` must lie in a chunk of this thread.
unsafe fn store_event(at: usize, ts: u64, kind: usize, value: usize) {
    // SAFETY: per the contract.
    unsafe {
        // The long form (`short_word` makes the short one): the timestamp, then the word.
        ((at + 8) as *mut u64).write_volatile(ts & !3);
        let low = (ts & 3) << EV_TS_SHIFT;
        (at as *mut u64)
            .write_volatile(((value << EV_LONG_SHIFT) | (kind << 2) | EV_TAG_LONG) as u64 | low);
    }
}

/// Reports this thread's lost events, and the calls the record-time filters dropped, in the
/// meta file.
pub fn flush_lost(tls: &mut Tls, block: &ThreadBlock) {
    drain_sink(tls, block);
    let lost = core::mem::take(&mut tls.trace_lost);
    if lost > 0 {
        block.trace.lost.fetch_add(lost as u64, Ordering::Relaxed);
        meta(format_args!("lost {} {lost}", block.index));
    }
    let dropped = core::mem::take(&mut tls.dropped);
    if dropped > 0 {
        meta(format_args!("dropped {} {dropped}", block.index));
    }
}
