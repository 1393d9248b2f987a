//! Trace mode (`INSTRFN_MODE=trace`): every instrumented call leaves an entry and an exit
//! event, with a timestamp, in the thread's own chunk of the process's trace files, written
//! through shared file mappings (docs/trace-format.md is the format).
//!
//! The fast paths (src/arch/<arch>/) do the common case without any Rust code: reserve an
//! event in the thread's chunk with one read-modify-write instruction (a signal handler on the
//! thread reserves after it, never the same bytes), store the timestamp and the tagged
//! address, and for mcount/fentry code push an entry on the thread's shadow stack and replace
//! the function's return address with the exit trampoline, which pops it and writes the exit.
//! Everything else comes to the slow paths here, with the guard held and every signal blocked.
//! Nothing is dropped silently: events that find no chunk are counted per thread, marked in
//! the events and in the meta file.
//!
//! The files, bottom up: `settings`, `files` (descriptors kept safe from the program),
//! `chunks` (the chunks on disk), `collector` (the thread that keeps chunks ready), `meta`
//! (the text file), `events` (a thread's chunk and its events), `shadow` (the shadow stack),
//! `returns` (which objects call gcc's `__return__`), `slow` (the slow paths), `ring` (ring
//! mode's rings and snapshots), `trigger` (ring mode's watcher), `unwind`
//! (unwinders), and this file: start, threads, flush, end, fork. Uses every layer below the outputs, and `xray` for the objects it patches.

pub mod chunks;
pub mod collector;
pub mod events;
pub mod files;
pub mod meta;
pub mod returns;
pub mod ring;
pub mod settings;
pub mod shadow;
pub mod slow;
pub mod trigger;
pub mod unwind;

pub use chunks::active;

use core::ffi::c_int;
use core::ptr;
use core::sync::atomic::Ordering;

use chunks::SESSION;
use events::{event, flush_lost, in_sink, keep_from_call_words, retire_chunk, take_bases};
use meta::{
    KNOWN, META_BYTES, META_RESERVED, clock_pair, counter_at_monotonic, meta, note_modules,
    release_meta, reserve_meta, thread_line, write_header,
};
use settings::*;
use shadow::{alt_stack, live, pop, shadow_entries};

use crate::abi::format::{EV_THREAD, EV_UNWOUND};
use crate::abi::shadow::{SH_BYTES, Shadow};
use crate::abi::{self, Mode, Tls};
use crate::base::{Bytes, StackBuf};
use crate::thread::{self, ThreadBlock};
use crate::{arch, process, sys};

/// The record-time settings (before [`start`]): INSTRFN_DEPTH (the shadow stack then holds
/// that many entries, and deeper calls are dropped), INSTRFN_MIN_DURATION (ns; the exit
/// trampoline takes back the entries of shorter calls where the architecture supports it) and
/// INSTRFN_CALL_WORDS (off: see [`keep_from_call_words`]).
pub fn configure_filters(depth: usize, min_ns: u64, call_words: bool) {
    DROP_DEEP.store(depth > 0, Ordering::Relaxed);
    NO_CALL_WORDS.store(!call_words, Ordering::Relaxed);
    if min_ns == 0 {
        return;
    }
    if !arch::MIN_DURATION_SUPPORTED {
        message!(
            "INSTRFN_MIN_DURATION is not available on this architecture yet; recording every call"
        );
        return;
    }
    abi::set_min_ticks(ns_to_ticks(min_ns));
}

/// `ns` in counter ticks, from the counter's rate measured against CLOCK_MONOTONIC over 2 ms
/// (at start-up, only when INSTRFN_MIN_DURATION asks: the threshold is that precise). Each end
/// is a [`counter_at_monotonic`] pair: a thread preempted between a clock and a counter read (a
/// loaded machine, an emulator) would otherwise make the rate, and the threshold, several times
/// too large.
fn ns_to_ticks(ns: u64) -> u64 {
    let (c0, m0) = counter_at_monotonic();
    while sys::monotonic_ns() - m0 < 2_000_000 {}
    let (c1, m1) = counter_at_monotonic();
    let rate = (c1.wrapping_sub(c0)) as f64 / (m1 - m0).max(1) as f64;
    ((ns as f64 * rate) as u64).max(1)
}

/// Opens the trace files of this image in `dir` and writes the meta header. Start-up (async-
/// signal-safe: system calls only). Returns false (after saying why) when tracing cannot start;
/// the program then runs untraced.
pub fn start(dir: &[u8], chunk_bytes: usize, limit: u64, depth: usize, exits: bool) -> bool {
    // Under a file size limit (`ulimit -f`) chunks are at most a sixteenth of it (and at least
    // a page): the events file then takes most of what the limit allows, and the staging
    // file, which holds the chunks in use (up to 12 with two threads and a starved
    // collector), stays below it.
    let fsize = sys::file_size_limit();
    // (A ring's chunks are a sixteenth of it: a ring that does not fit is said when made.)
    let chunk_bytes = if fsize / 16 < chunk_bytes as u64 && !ring::on() {
        ((fsize / 16) as usize & !4095).max(4096)
    } else {
        chunk_bytes
    };
    CHUNK_BYTES.store(chunk_bytes, Ordering::Relaxed);
    MAX_CHUNKS.store((limit / chunk_bytes as u64).max(1), Ordering::Relaxed);
    DEPTH.store(depth, Ordering::Relaxed);
    abi::set_shadow_registry(thread::registry_layout().0, depth * SH_BYTES);
    let mut path = StackBuf::<1200>::new();
    path.push(dir);
    let Some(d) = path.as_cstr() else {
        message!("INSTRFN_OUTPUT is too long; not tracing");
        return false;
    };
    // SAFETY: a valid C string; mkdir of an existing directory fails harmlessly with EEXIST.
    if unsafe { libc::mkdir(d.as_ptr(), 0o777) } != 0 && sys::errno() != libc::EEXIST {
        message!(
            "cannot create the trace directory {}: {}; not tracing",
            Bytes(dir),
            sys::Errno(sys::errno())
        );
        return false;
    }
    let mut name = StackBuf::<64>::new();
    process::image_name(&mut name);
    let open = |suffix: &[u8], flags: c_int| -> c_int {
        let mut p = StackBuf::<1300>::new();
        p.push(dir);
        p.push(b"/");
        p.push(name.as_bytes());
        p.push(suffix);
        match p.as_cstr() {
            // SAFETY: a valid C string; plain flags and mode.
            Some(c) => unsafe {
                libc::open(
                    c.as_ptr(),
                    flags | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                    0o666 as libc::c_uint,
                )
            },
            None => -1,
        }
    };
    let meta = open(b".meta", libc::O_WRONLY | libc::O_APPEND);
    // Ring mode writes the ring file instead of the events and staging files.
    let (events, stage) = if ring::on() {
        (open(b".ring", libc::O_RDWR), -2)
    } else {
        (
            open(b".events", libc::O_WRONLY),
            open(b".stage", libc::O_RDWR),
        )
    };
    if meta < 0 || events < 0 || stage == -1 {
        message!(
            "cannot create the trace files in {}: {}; not tracing",
            Bytes(dir),
            sys::Errno(sys::errno())
        );
        // SAFETY: closing what was opened.
        unsafe {
            if meta >= 0 {
                libc::close(meta);
            }
            if events >= 0 {
                libc::close(events);
            }
            if stage >= 0 {
                libc::close(stage);
            }
        }
        return false;
    }
    files::set_path(dir, name.as_bytes());
    let meta = SESSION.meta.set(meta);
    if stage >= 0 {
        SESSION.stage.set(stage);
    }
    META_BYTES.store(0, Ordering::Relaxed);
    META_RESERVED.store(0, Ordering::Relaxed);
    reserve_meta(meta);
    HIJACK.store(exits && !hardware_shadow_stack(), Ordering::Relaxed);
    if !HIJACK.load(Ordering::Relaxed) {
        abi::set_mode(Mode::TraceEntries);
    }
    write_header();
    if ring::on() {
        let fd = SESSION.ring.set(events);
        if !ring::start(fd) {
            // SAFETY: closing our own descriptors.
            unsafe {
                libc::close(SESSION.ring.take());
                libc::close(SESSION.meta.take());
            }
            return false;
        }
        trigger::start();
        return true;
    }
    SESSION.events.set(events);
    collector::start();
    true
}

/// Whether the process runs with a hardware shadow stack (x86 CET user shadow stack, arm64
/// Guarded Control Stack), where a replaced return address would fault: then entries only are
/// recorded, said once. (Neither exists on the machines the tests run on: untested.)
fn hardware_shadow_stack() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        const ARCH_SHSTK_STATUS: libc::c_long = 0x5005;
        const ARCH_SHSTK_SHSTK: u64 = 1;
        let mut features: u64 = 0;
        // SAFETY: arch_prctl(ARCH_SHSTK_STATUS) writes a u64 of feature bits; kernels without
        // it fail with EINVAL.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_SHSTK_STATUS,
                &mut features as *mut u64,
            )
        };
        if r == 0 && features & ARCH_SHSTK_SHSTK != 0 {
            message!(
                "the process runs with a hardware shadow stack: tracing entries only (a replaced \
                 return address would fault)"
            );
            return true;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // arm64 Guarded Control Stack.
        const PR_GET_SHADOW_STACK_STATUS: libc::c_int = 74;
        const PR_SHADOW_STACK_ENABLE: u64 = 1;
        let mut status: u64 = 0;
        // SAFETY: the prctl writes one u64 of status bits; kernels without it fail (EINVAL).
        let r = unsafe {
            libc::prctl(
                PR_GET_SHADOW_STACK_STATUS,
                &mut status as *mut u64,
                0usize,
                0usize,
                0usize,
            )
        };
        if r == 0 && status & PR_SHADOW_STACK_ENABLE != 0 {
            message!(
                "the process runs with a guarded control stack: tracing entries only (a replaced \
                 return address would fault)"
            );
            return true;
        }
    }
    false
}

/// A thread has claimed `block` (its first event): its slot line, its shadow stack.
pub fn thread_started(tls: &mut Tls, block: &ThreadBlock) {
    if !active() {
        return;
    }
    let t = &block.trace;
    let depth = DEPTH.load(Ordering::Relaxed);
    let mut shadow = t.shadow.load(Ordering::Relaxed);
    if shadow == 0 {
        shadow = sys::map_zeroed(depth * SH_BYTES).map_or(0, |p| p.as_ptr() as usize);
        t.shadow.store(shadow, Ordering::Relaxed);
    }
    // Entries a previous owner left (an orphaned block: its thread's exit was never
    // reported) are cleared: free entries have slot 0 (SHADOW_RESERVE; the return pads' unwind
    // info stops at the first one, src/arch/<arch>/).
    let mut e = shadow;
    while shadow != 0 && e < shadow + depth * SH_BYTES {
        // SAFETY: an entry of the block's shadow mapping, which this thread now owns.
        let slot = unsafe { &mut (*(e as *mut Shadow)).slot };
        if slot.is_null() {
            break;
        }
        *slot = ptr::null_mut();
        e += SH_BYTES;
    }
    tls.shadow_base = shadow;
    tls.shadow_top = shadow;
    tls.shadow_end = if shadow == 0 {
        0
    } else {
        shadow + depth * SH_BYTES
    };
    // Where the block's previous owner stopped, if it had a chunk: this thread goes on there,
    // after a thread event naming it.
    tls.trace_pos = t.pos.swap(0, Ordering::Relaxed);
    tls.trace_end = t.end.swap(0, Ordering::Relaxed);
    if tls.trace_end != 0 {
        take_bases(tls, t.chunk.load(Ordering::Relaxed));
    }
    keep_from_call_words(tls);
    ring::thread_started(block);
    tls.unwound = 0;
    let (lo, hi) = alt_stack();
    tls.alt_lo = lo;
    tls.alt_hi = hi;
    thread_line(block);
    if tls.trace_end != 0 {
        event(
            tls,
            block,
            EV_THREAD,
            sys::gettid() as usize,
            arch::counter(),
        );
    }
}

/// The thread that owns `block` is exiting: its chunk is unmapped (the data stays in the
/// file), its losses and final name go to the meta file.
pub fn thread_ended(tls: &mut Tls, block: &ThreadBlock) {
    if !active() {
        return;
    }
    // Frames still on the shadow stack were unwound by pthread_exit or pthread_cancel (a
    // thread that returns from its start routine has none left): closed now.
    let ts = arch::counter();
    while let Some(top) = shadow_entries(tls).last() {
        let (func, closes) = (top.func, live(top));
        pop(tls);
        if closes {
            event(tls, block, EV_UNWOUND, func, ts);
        }
    }
    flush_lost(tls, block);
    thread_line(block);
    // The chunk stays with the block: the next thread to take it writes on after a thread
    // event, so many short threads fill chunks instead of each taking one. The one before goes
    // (this thread is gone, so no event of it can still be on its way there).
    let prev = block.trace.prev.swap(0, Ordering::Relaxed);
    if prev != 0 {
        collector::retire(prev, block.trace.prev_end.load(Ordering::Relaxed));
    }
    // A chunk a pin held: no exit of this thread will store into it now.
    tls.trace_pin = 0;
    retire_chunk(tls, &block.trace, 0, 0);
    // (A thread writing into its sink left its chunk's place there when it went to the sink.)
    if !in_sink(tls, block) {
        block.trace.pos.store(tls.trace_pos, Ordering::Relaxed);
        block.trace.end.store(tls.trace_end, Ordering::Relaxed);
    }
    tls.trace_pos = 0;
    tls.trace_end = 0;
}

/// `instrfn_flush` in trace mode: this thread's pending losses and new modules into the meta
/// file, both files synced. Returns 0 or an errno value.
pub fn flush() -> c_int {
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    if let Some(block) = thread::block_of(tls) {
        flush_lost(tls, block);
    }
    note_modules();
    let mut result = 0;
    for file in [
        &SESSION.events,
        &SESSION.stage,
        &SESSION.ring,
        &SESSION.meta,
    ] {
        let fd = file.get();
        // SAFETY: fdatasync of our own descriptor.
        if fd >= 0 && unsafe { libc::fdatasync(fd) } != 0 && result == 0 {
            result = sys::errno();
        }
    }
    result
}

/// Writes the final meta lines (exit, exec): every thread's losses, the closing clock pair.
pub fn finish() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    if let Some(block) = thread::block_of(tls) {
        flush_lost(tls, block);
    }
    note_modules();
    let reopened = files::take_reopened();
    if reopened > 0 {
        message!(
            "the program closed {reopened} descriptors of the trace files; the files were \
             opened again (nothing written through the numbers the program reuses)"
        );
    }
    let (tid, cpu_ns, prepared, by_threads) = collector::finish();
    meta(format_args!(
        "collector {tid} {cpu_ns} {prepared} {by_threads}"
    ));
    let (counter, mono, real) = clock_pair();
    meta(format_args!(
        "clock {} {counter:#x} {mono} {real}",
        arch::CLOCK_NAME
    ));
    meta(format_args!("end {counter:#x} {mono}"));
    trigger::flush();
    ring::finish();
    release_meta();
}

/// In the child after fork: a trace of its own (new files; the parent's chunks are the
/// parent's). The shadow stack stays: the child has the same frames.
pub fn after_fork(dir: &[u8]) {
    if !active() {
        return;
    }
    for file in [
        &SESSION.events,
        &SESSION.stage,
        &SESSION.ring,
        &SESSION.meta,
    ] {
        // Only if still ours (a descriptor the program closed may be the program's now).
        let old = file.take();
        if old >= 0 {
            // SAFETY: our own descriptors (the parent keeps its copies).
            unsafe { libc::close(old) };
        }
    }
    SESSION.committed.store(0, Ordering::Relaxed);
    SESSION.staged.store(0, Ordering::Relaxed);
    SESSION.handed.store(0, Ordering::Relaxed);
    SESSION.full.store(false, Ordering::Relaxed);
    SESSION.full_said.store(false, Ordering::Relaxed);
    for k in &KNOWN {
        k.store(0, Ordering::Relaxed);
    }
    collector::after_fork();
    // A fork from a signal handler that interrupted this thread in the middle of an event (a
    // reservation made and its store still to come, a take-back, a call word) finishes that
    // event in the child too, in the chunk it was in: the parent's, shared with it, which the
    // parent may have committed and reused by then. So this thread's chunks become private
    // memory in the child (the same addresses, zero pages): such a store lands there.
    // SAFETY: this thread's TLS block (the only thread).
    if let Some(block) = thread::block_of(unsafe { &*abi::tls() }) {
        let size = CHUNK_BYTES.load(Ordering::Relaxed);
        for base in [&block.trace.chunk, &block.trace.prev, &block.trace.pinned] {
            let base = base.load(Ordering::Relaxed);
            if base != 0 {
                // SAFETY: MAP_FIXED over a chunk mapping of ours, which nothing in this
                // process reads or writes as the parent's any more.
                unsafe {
                    sys::raw::syscall(
                        libc::SYS_mmap,
                        [
                            base,
                            size,
                            (libc::PROT_READ | libc::PROT_WRITE) as usize,
                            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED) as usize,
                            usize::MAX,
                            0,
                        ],
                    )
                };
            }
        }
    }
    // SAFETY: this thread's TLS block (the only thread).
    ring::after_fork(thread::block_of(unsafe { &*abi::tls() }));
    for block in thread::blocks() {
        // The parent's chunk mappings are shared with the parent: never write them here.
        block.trace.chunk.store(0, Ordering::Relaxed);
        block.trace.prev.store(0, Ordering::Relaxed);
        block.trace.prev_end.store(0, Ordering::Relaxed);
        block.trace.pinned.store(0, Ordering::Relaxed);
        block.trace.pinned_end.store(0, Ordering::Relaxed);
        block.trace.seq.store(0, Ordering::Relaxed);
        block.trace.pos.store(0, Ordering::Relaxed);
        block.trace.end.store(0, Ordering::Relaxed);
    }
    // SAFETY: this thread's TLS block (the only thread).
    let tls = unsafe { &mut *abi::tls() };
    tls.trace_pos = 0;
    tls.trace_end = 0;
    tls.trace_pin = 0;
    tls.trace_lost = 0;
    tls.dropped = 0;
    let chunk = CHUNK_BYTES.load(Ordering::Relaxed);
    let limit = MAX_CHUNKS
        .load(Ordering::Relaxed)
        .saturating_mul(chunk as u64);
    if start(
        dir,
        chunk,
        limit,
        DEPTH.load(Ordering::Relaxed),
        HIJACK.load(Ordering::Relaxed),
    ) && let Some(block) = thread::block_of(tls)
    {
        thread_line(block);
    }
}
