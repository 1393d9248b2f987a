//! Trace mode (`INSTRFN_MODE=trace`): every instrumented call leaves an entry and an exit
//! event, with a timestamp, in the thread's own chunk of the process's events file, written
//! through a shared file mapping (docs/trace-format.md is the format).
//!
//! The fast paths (asm/<arch>.s) do the common case without any Rust code: reserve 16 bytes in
//! the thread's chunk with one read-modify-write instruction (a signal handler on the thread
//! reserves after it, never the same bytes), store the timestamp and the tagged address, and
//! for mcount/fentry code push an entry on the thread's shadow stack (also one instruction to
//! reserve) and replace the function's return address with the exit trampoline, which pops it
//! and writes the exit event. Everything else comes here, with the guard held and every signal
//! blocked:
//! - a thread's first event, or a full chunk: take the next chunk of the file (fallocate, then
//!   mmap: data written into a mapping of allocated blocks can never fault);
//! - frames left behind by `longjmp` (the newest shadow entry's frame lies at or below the new
//!   one's) are closed (`EV_UNWOUND`) before the new entry;
//! - after an unwinder walked the stack (the unwinder's entry points are wrapped, see
//!   src/interpose.c, and put the original return addresses back first), the frames that are
//!   gone are closed and the ones still alive get the exit trampoline again;
//! - a full shadow stack: the entry is recorded as `EV_NOEXIT` (no exit to come).
//!
//! Nothing is ever dropped silently: events that find no chunk (the file cannot grow, or
//! INSTRFN_TRACE_LIMIT is reached) are counted per thread, marked in the events (`EV_LOST` with
//! the count, at the next event that is written) and in the meta file.

use core::ffi::c_int;
use core::fmt::Write as _;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

use crate::sys::{self, Bytes, StackBuf};
use crate::thread::{ThreadBlock, Tls};
use crate::tracefile::TraceFile;
use crate::{arch, process};

/// Offsets and constants the assembly shares (see the `{SH_*}` and `{EV_*}` operands).
pub mod layout {
    /// A shadow stack entry: the original return address, the address of the return slot it was
    /// taken from, the function, and one spare word.
    pub const SH_RET: usize = 0;
    pub const SH_SLOT: usize = 8;
    pub const SH_FN: usize = 16;
    /// (aarch64 keeps the frame pointer there; s390x's fast path makes its event's word there
    /// while the entry is being pushed.)
    #[cfg_attr(not(target_arch = "s390x"), allow(dead_code))]
    pub const SH_SPARE: usize = 24;
    pub const SH_BYTES: usize = 32;
    /// Event kinds (docs/trace-format.md).
    pub const EV_ENTRY: usize = 1;
    pub const EV_EXIT: usize = 2;
    pub const EV_UNWOUND: usize = 3;
    pub const EV_LOST: usize = 4;
    pub const EV_NOEXIT: usize = 5;
    pub const EV_THREAD: usize = 6;
    /// Compact events (chunk versions 2 and 3): the low two bits of an event's first word tell its
    /// form. A short event is that one word, `(function - code base) << 32 | (time - time
    /// base) << 2 | tag`, for an entry (tag 1) or an exit (tag 2) whose function lies within
    /// 4 GiB above the chunk's code base and whose time within 2^30 ticks after its time base;
    /// any other event is long: `value << 8 | t << 5 | kind << 2 | 3`, where t is the
    /// timestamp's low two bits, then the timestamp with those bits 0 (so no second word of a
    /// long event has a tag: a word with tag 3 always starts a long event).
    pub const EV_BYTES: usize = 16;
    pub const EV_SHORT_BYTES: usize = 8;
    pub const EV_TAG_ENTRY: usize = 1;
    pub const EV_TAG_EXIT: usize = 2;
    pub const EV_TAG_LONG: usize = 3;
    pub const EV_LONG_SHIFT: usize = 8;
    pub const EV_TS_SHIFT: usize = 5;
    pub const EV_TIME_BITS: usize = 30;
    /// A chunk's code base lies this far below the function of the event that made the thread
    /// take it: short events reach 2 GiB on either side.
    pub const EV_CODE_HALF: u64 = 1 << 31;
    /// Call words (chunk version 3): an exit whose entry is the thread's newest event, a short
    /// one, replaces that entry with one word telling both, tag 3 with bit 7 set (a long
    /// event's first word has bit 7 clear). Its bits 63..8 and 6..2 hold, as high 56 and low 5
    /// bits, a 61-bit value `f << 38 | d << 26 | t`: t the entry's time - time base (26 bits),
    /// d the call's length in ticks (12 bits), f the function - code base - EV_CALL_FN_OFFSET
    /// (23 bits: 4 MiB on either side of the code base's middle). Written by every exit
    /// trampoline and `__cyg_profile_func_exit` (MERGE_CALL in asm/x86_64.s, asm/aarch64.s and
    /// asm/riscv64.s, S390_MERGE in asm/s390x.s) where all three fit. The events a reader
    /// gets from it are the entry and exit it replaces, in place.
    pub use call_words::*;
    mod call_words {
        pub const EV_CALL_MARK: usize = 0x80;
        pub const EV_CALL_T0_BITS: usize = 26;
        pub const EV_CALL_DUR_BITS: usize = 12;
        pub const EV_CALL_FN_BITS: usize = 23;
        /// (x86_64, riscv64 and s390x subtract it as such; aarch64 flips bit 31 and adds
        /// 2^22.)
        #[cfg_attr(target_arch = "aarch64", allow(dead_code))]
        pub const EV_CALL_FN_OFFSET: u64 = super::EV_CODE_HALF - (1 << (EV_CALL_FN_BITS - 1));
    }
    const _: () = assert!(EV_CALL_T0_BITS + EV_CALL_DUR_BITS + EV_CALL_FN_BITS == 61);
    const _: () = assert!(EV_CALL_T0_BITS <= EV_TIME_BITS);
}
use layout::*;

/// One shadow stack entry (see [`layout`]).
#[repr(C)]
struct Shadow {
    ret: usize,
    slot: *mut usize,
    func: usize,
    _spare: usize,
}
const _: () = assert!(core::mem::size_of::<Shadow>() == SH_BYTES);
// asm/aarch64.s, asm/riscv64.s and asm/s390x.s write SH_RET into their CFI as a one-byte
// SLEB128.
const _: () = assert!(SH_RET < 64);

/// Bytes of a chunk header (docs/trace-format.md).
const CHUNK_HEADER: usize = 64;
const CHUNK_MAGIC: &[u8; 8] = b"IFNCHNK1";
/// The chunk version written: 3, compact events and call words (see [`layout`] and
/// docs/trace-format.md; the readers take version 1 chunks, 16-byte events, and version 2
/// ones, compact events without call words, of older traces too).
const CHUNK_VERSION: u32 = 3;
/// Where a version 2 or 3 chunk header keeps its time base and code base.
const HDR_TBASE: usize = 32;
const HDR_CBASE: usize = 40;

/// The trace of this process image: its files and how far they have grown.
struct Session {
    events: TraceFile,
    meta: TraceFile,
    /// The staging file: the chunks threads write in, reused once committed.
    stage: TraceFile,
    /// Chunks committed to the events file so far (the next one's index there).
    committed: AtomicU64,
    /// Chunks of the staging file made so far (the next one's index there).
    staged: AtomicU64,
    /// Chunks handed to threads so far (INSTRFN_TRACE_LIMIT counts these).
    handed: AtomicU64,
    /// Set once the file could not grow any more (or the limit was reached): events are
    /// counted as lost from then on.
    full: AtomicBool,
    /// Why: 0 for INSTRFN_TRACE_LIMIT, else the errno; and whether that was said.
    full_reason: AtomicI32,
    full_said: AtomicBool,
}

static SESSION: Session = Session {
    events: TraceFile::new(b".events", libc::O_WRONLY),
    meta: TraceFile::new(b".meta", libc::O_WRONLY | libc::O_APPEND),
    stage: TraceFile::new(b".stage", libc::O_RDWR),
    committed: AtomicU64::new(0),
    staged: AtomicU64::new(0),
    handed: AtomicU64::new(0),
    full: AtomicBool::new(false),
    full_reason: AtomicI32::new(0),
    full_said: AtomicBool::new(false),
};
/// Chunk size (INSTRFN_BUFSIZE) and the most chunks the file may hold (INSTRFN_TRACE_LIMIT).
static CHUNK_BYTES: AtomicUsize = AtomicUsize::new(1 << 20);
static MAX_CHUNKS: AtomicU64 = AtomicU64::new(u64::MAX);
/// Shadow stack entries per thread (INSTRFN_MAX_DEPTH).
static DEPTH: AtomicUsize = AtomicUsize::new(4096);
/// Whether return addresses may be replaced (not with a hardware shadow stack).
static HIJACK: AtomicBool = AtomicBool::new(true);
/// INSTRFN_DEPTH: calls deeper than the shadow stack leave no events (instead of entries
/// without exit).
static DROP_DEEP: AtomicBool = AtomicBool::new(false);
/// INSTRFN_CALL_WORDS=off.
static NO_CALL_WORDS: AtomicBool = AtomicBool::new(false);
/// Events recorded as entries without exit because the shadow stack was full, or hijacking is
/// off (all threads, for the summary).
static NOEXIT: AtomicU64 = AtomicU64::new(0);

#[repr(C)]
/// What one thread's block holds for tracing. Written by the owner (its slow path), read by
/// the exit writer.
pub struct BlockTrace {
    /// The chunk being filled (mapped).
    chunk: AtomicUsize,
    /// The chunk filled before it, still mapped: a fast path that a signal handler
    /// interrupted between reserving its event and writing it may still write there (the
    /// handler's events then took the next chunk). At the next switch it goes to the collector,
    /// which unmaps it once all its events are written; `prev_end` is where they end.
    prev: AtomicUsize,
    prev_end: AtomicUsize,
    /// A chunk due to go to the collector while the owner's `trace_pin` held it (see
    /// [`retire_chunk`]), and where its events end.
    pinned: AtomicUsize,
    pinned_end: AtomicUsize,
    /// The next sequence number of this slot's chunks.
    seq: AtomicU64,
    /// Events lost on this slot in total (for the meta file).
    lost: AtomicU64,
    /// The shadow stack mapping (reused by the next owner).
    shadow: AtomicUsize,
    /// Where the previous owner stopped writing in `chunk`, and its end (0: start afresh).
    pos: AtomicUsize,
    end: AtomicUsize,
    /// The owner's sink once the trace is full (SINK_BYTES, mapped when first needed and kept
    /// with the block; see [`enter_sink`]).
    sink: AtomicUsize,
}

impl BlockTrace {
    /// Where `shadow` is (the return pads' unwind info reads it: asm/<arch>.s).
    pub const SHADOW_OFFSET: usize = core::mem::offset_of!(BlockTrace, shadow);

    pub const fn new() -> BlockTrace {
        BlockTrace {
            chunk: AtomicUsize::new(0),
            prev: AtomicUsize::new(0),
            prev_end: AtomicUsize::new(0),
            pinned: AtomicUsize::new(0),
            pinned_end: AtomicUsize::new(0),
            seq: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            shadow: AtomicUsize::new(0),
            pos: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            sink: AtomicUsize::new(0),
        }
    }
}

/// Bytes of a thread's sink, its zero header included.
const SINK_BYTES: usize = 16 << 10;

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
    arch::set_min_ticks(ns_to_ticks(min_ns));
}

/// `ns` in counter ticks, from the counter's rate measured against CLOCK_MONOTONIC over 2 ms
/// (at start-up, only when INSTRFN_MIN_DURATION asks: the threshold is that precise). Each end
/// is a [`counter_at_monotonic`] pair: a thread preempted between a clock and a counter read (a
/// loaded machine, an emulator) would otherwise make the rate, and the threshold, several times
/// too large (seen under qemu: 10 ms calls left out at a 5 ms threshold).
fn ns_to_ticks(ns: u64) -> u64 {
    let (c0, m0) = counter_at_monotonic();
    while sys::monotonic_ns() - m0 < 2_000_000 {}
    let (c1, m1) = counter_at_monotonic();
    let rate = (c1.wrapping_sub(c0)) as f64 / (m1 - m0).max(1) as f64;
    ((ns as f64 * rate) as u64).max(1)
}

/// Whether this process traces.
pub fn active() -> bool {
    SESSION.events.raw() >= 0
}

/// Opens the trace files of this image in `dir` and writes the meta header. Start-up (async-
/// signal-safe: system calls only). Returns false (after saying why) when tracing cannot start;
/// the program then runs untraced.
pub fn start(dir: &[u8], chunk_bytes: usize, limit: u64, depth: usize, exits: bool) -> bool {
    // Under a file size limit (`ulimit -f`) chunks are at most a sixteenth of it (and at least
    // a page), so that the events file takes most of what the limit allows, not nothing, and
    // the staging file, which holds the chunks in use (with two threads and a starved
    // collector up to 12 of them; at an eighth it reached the limit first once, and the trace
    // stopped with the events file half full), stays below it.
    let fsize = sys::file_size_limit();
    let chunk_bytes = if fsize / 16 < chunk_bytes as u64 {
        ((fsize / 16) as usize & !4095).max(4096)
    } else {
        chunk_bytes
    };
    CHUNK_BYTES.store(chunk_bytes, Ordering::Relaxed);
    MAX_CHUNKS.store((limit / chunk_bytes as u64).max(1), Ordering::Relaxed);
    DEPTH.store(depth, Ordering::Relaxed);
    arch::set_shadow_registry(crate::thread::registry_layout().0, depth * SH_BYTES);
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
    let events = open(b".events", libc::O_WRONLY);
    let stage = open(b".stage", libc::O_RDWR);
    if meta < 0 || events < 0 || stage < 0 {
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
    crate::tracefile::set_path(dir, name.as_bytes());
    let meta = SESSION.meta.set(meta);
    SESSION.stage.set(stage);
    META_BYTES.store(0, Ordering::Relaxed);
    META_RESERVED.store(0, Ordering::Relaxed);
    reserve_meta(meta);
    HIJACK.store(exits && !hardware_shadow_stack(), Ordering::Relaxed);
    if !HIJACK.load(Ordering::Relaxed) {
        arch::set_mode(2);
    }
    write_header();
    SESSION.events.set(events);
    crate::collector::start();
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

/// The meta file's first lines: format, process, command line, executable, clock, modules.
fn write_header() {
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    meta(format_args!("instrfn-trace 4"));
    meta(format_args!(
        "process {pid} {ppid} {}",
        process::image_number_now()
    ));
    let mut line = MetaLine::new();
    line.push(b"cmdline");
    let mut args = StackBuf::<4000>::new();
    read_file(c"/proc/self/cmdline", |chunk| args.push(chunk));
    let args = args.as_bytes();
    for arg in args.strip_suffix(&[0]).unwrap_or(args).split(|&b| b == 0) {
        line.word(arg);
    }
    line.send();
    write_exe_line();
    let (counter, mono, real) = clock_pair();
    meta(format_args!(
        "clock {} {counter:#x} {mono} {real}",
        arch::CLOCK_NAME
    ));
    note_modules();
}

/// Objects that have a `module` line, by their lowest code address (0: free).
static KNOWN: [AtomicUsize; 1024] = [const { AtomicUsize::new(0) }; 1024];

/// Writes a `module` line for each loaded object that has none yet: every object at start, and
/// later the ones `dlopen` loaded meanwhile: right after a dlopen the wrapper could make on
/// the caller's behalf ([`note_opened`]), else at exit, exec, before each dlclose and at
/// `instrfn_flush` (the loader calls no hook of ours when it loads an object).
pub fn note_modules() {
    crate::xray::note_objects();
    module_lines();
}

/// After a dlopen that loaded objects (src/runtime.rs `module_opened`, trace mode): their
/// XRay sleds are patched before it returns (waiting for another thread that is patching), and
/// their `module` lines written if the trace has started (else start-up writes them).
pub fn note_opened() {
    crate::xray::note_objects_waiting();
    if active() {
        module_lines();
    }
}

/// The `module` lines of [`note_modules`].
fn module_lines() {
    let note = |m: &crate::modules::Module| {
        let Some(lo) = m.segments().iter().map(|s| s.start).min() else {
            return;
        };
        for k in &KNOWN {
            match k.compare_exchange(0, lo, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(v) if v == lo => return,
                Err(_) => {}
            }
        }
        module_line(m);
    };
    crate::modules::for_each_shared_object(note);
    note(&crate::modules::Module::executable());
}

/// After dlclose really unloaded `m`: an `unload` line (events after it at these addresses are
/// another object's), and its address may be noted again for the next object there.
pub fn module_unloaded(m: &crate::modules::Module) {
    if !active() {
        return;
    }
    let Some(lo) = m.segments().iter().map(|s| s.start).min() else {
        return;
    };
    for k in &KNOWN {
        if k.load(Ordering::Relaxed) == lo {
            k.store(usize::MAX, Ordering::Relaxed);
        }
    }
    crate::xray::forget(lo);
    meta(format_args!("unload {lo:#x} {:#x}", arch::counter()));
}

/// A `module` line for one loaded object: its bias, code range, path and identity (as the
/// `exe` line's: build-id from its notes in memory, then size, mtime and a hash of the first
/// 4 KiB of its file). A relative loader path is made absolute with the working directory of
/// now (the reader may run elsewhere).
fn module_line(m: &crate::modules::Module) {
    let lo = m.segments().iter().map(|s| s.start).min().unwrap_or(0);
    let hi = m.segments().iter().map(|s| s.end).max().unwrap_or(0);
    let mut line = MetaLine::new();
    let _ = write!(line.buf, "module {:#x} {lo:#x} {hi:#x}", m.bias);
    let mut path = StackBuf::<{ crate::modules::MAX_PATH + 1100 }>::new();
    if m.path().is_empty() {
        exe_path(&mut path);
    } else {
        let mut cwd = [0u8; 1024];
        if !m.path().starts_with(b"/")
            && let Some(cwd) = sys::cwd(&mut cwd)
        {
            path.push(cwd);
            path.push(b"/");
        }
        path.push(m.path().strip_prefix(b"./").unwrap_or(m.path()));
    }
    line.word(path.as_bytes());
    let file = if m.path().is_empty() {
        Some(c"/proc/self/exe")
    } else {
        path.as_cstr()
    };
    identity(&mut line, m.build_id(), file);
    line.send();
}

/// The executable's path (/proc/self/exe's link).
fn exe_path<const N: usize>(out: &mut StackBuf<N>) {
    let mut path = [0u8; 1024];
    // SAFETY: readlink into a buffer of its length.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            path.as_mut_ptr().cast(),
            path.len(),
        )
    };
    out.push(&path[..n.max(0) as usize]);
}

/// The `exe` line: path, build-id (or `-`), size, mtime and a hash of the first 4 KiB.
fn write_exe_line() {
    let mut path = StackBuf::<1024>::new();
    exe_path(&mut path);
    let mut line = MetaLine::new();
    line.push(b"exe");
    line.word(path.as_bytes());
    identity(
        &mut line,
        crate::modules::Module::executable().build_id(),
        Some(c"/proc/self/exe"),
    );
    line.send();
}

/// ` <build-id hex, or -> <size> <mtime_ns> <hash of the first 4 KiB, hex>` (zeros for what
/// the file could not tell: it could not be opened).
fn identity(line: &mut MetaLine, build_id: Option<&[u8]>, file: Option<&core::ffi::CStr>) {
    line.push(b" ");
    match build_id {
        Some(id) if !id.is_empty() => {
            for b in id {
                let _ = write!(line.buf, "{b:02x}");
            }
        }
        _ => line.push(b"-"),
    }
    let (size, mtime, hash) = file.and_then(file_identity).unwrap_or((0, 0, 0));
    let _ = write!(line.buf, " {size} {mtime} {hash:016x}");
}

/// A file's size, modification time (ns since the epoch) and FNV-1a hash of its first 4 KiB,
/// through one open file: openat, statx, read, close (raw system calls: no errno, no libc
/// function a program could interpose, no allocation).
fn file_identity(path: &core::ffi::CStr) -> Option<(u64, u64, u64)> {
    use crate::collector::syscall;
    // SAFETY: openat(2) of a NUL-terminated path, read-only.
    let fd = unsafe {
        syscall(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as isize as usize,
                path.as_ptr() as usize,
                (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
                0,
                0,
                0,
            ],
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: libc::statx is plain data; all zero is a valid value.
    let mut st: libc::statx = unsafe { core::mem::zeroed() };
    // SAFETY: statx(2) of the open descriptor itself (empty path, AT_EMPTY_PATH) into `st`.
    let r = unsafe {
        syscall(
            libc::SYS_statx,
            [
                fd as usize,
                c"".as_ptr() as usize,
                libc::AT_EMPTY_PATH as usize,
                (libc::STATX_SIZE | libc::STATX_MTIME) as usize,
                (&raw mut st) as usize,
                0,
            ],
        )
    };
    // FNV-1a over the first 4 KiB, read in small pieces (this can run on a signal stack).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = [0u8; 512];
    let mut left = 4096;
    while r == 0 && left > 0 {
        let want = buf.len().min(left);
        // SAFETY: read(2) into `buf`.
        let n = unsafe {
            syscall(
                libc::SYS_read,
                [fd as usize, buf.as_mut_ptr() as usize, want, 0, 0, 0],
            )
        };
        if n == -(libc::EINTR as isize) {
            continue;
        }
        if n <= 0 {
            break;
        }
        for &b in &buf[..n as usize] {
            hash = (hash ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        left -= n as usize;
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
    if r != 0 {
        return None;
    }
    let mtime = (st.stx_mtime.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(st.stx_mtime.tv_nsec as u64);
    Some((st.stx_size, mtime, hash))
}

/// Calls `f` with successive chunks of a file's contents (open/read/close only).
fn read_file(path: &core::ffi::CStr, mut f: impl FnMut(&[u8])) {
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a buffer of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        f(&buf[..n as usize]);
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
}

/// A (counter, CLOCK_MONOTONIC ns, CLOCK_REALTIME ns) triple, read close together.
/// The counter and CLOCK_MONOTONIC at one instant: the clock read between two counter reads,
/// the tightest bracket of 16 tries, the counter taken at its middle (a thread preempted
/// between the reads would pair values milliseconds apart).
fn counter_at_monotonic() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..16 {
        let a = arch::counter();
        let m = sys::monotonic_ns();
        let b = arch::counter();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (width, a.wrapping_add(width / 2), m);
        }
    }
    (best.1, best.2)
}

fn clock_pair() -> (u64, u64, u64) {
    let (c, mono) = counter_at_monotonic();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (
        c,
        mono,
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
    )
}

/// One meta line being built: words are percent-encoded where needed.
struct MetaLine {
    buf: StackBuf<4096>,
}

impl MetaLine {
    fn new() -> MetaLine {
        MetaLine {
            buf: StackBuf::new(),
        }
    }

    fn push(&mut self, b: &[u8]) {
        self.buf.push(b);
    }

    /// A space, then `w` percent-encoded (every byte outside `!`..`~`, and `%`).
    fn word(&mut self, w: &[u8]) {
        self.buf.push(b" ");
        if w.is_empty() {
            self.buf.push(b"-");
            return;
        }
        for &b in w {
            if (b'!'..=b'~').contains(&b) && b != b'%' {
                self.buf.push(&[b]);
            } else {
                let _ = write!(self.buf, "%{b:02X}");
            }
        }
    }

    fn send(mut self) {
        if self.buf.truncated() {
            return;
        }
        self.buf.push(b"\n");
        let fd = SESSION.meta.get();
        let len = self.buf.as_bytes().len() as u64;
        if fd >= 0 {
            // A line that would take the file past the file size limit is left out (the meta
            // file's own end says so to readers: no end line).
            if !sys::fits_size_limit(META_BYTES.load(Ordering::Relaxed) + len) {
                return;
            }
            let _ = sys::write_all(fd, self.buf.as_bytes());
            let end = META_BYTES.fetch_add(len, Ordering::Relaxed);
            if end + META_SLACK > META_RESERVED.load(Ordering::Relaxed) {
                reserve_meta(fd);
            }
        }
    }
}

/// The meta file's blocks are reserved ahead of its lines (`fallocate` beyond its end, in steps
/// of this many bytes), so that a disk the events fill up still takes the lines that say what
/// was lost and which threads ran.
const META_STEP: u64 = 64 << 10;
/// A new step is reserved when fewer bytes than this are left.
const META_SLACK: u64 = 16 << 10;
/// Bytes written to the meta file, and reserved for it.
static META_BYTES: AtomicU64 = AtomicU64::new(0);
static META_RESERVED: AtomicU64 = AtomicU64::new(0);
static META_RESERVING: AtomicBool = AtomicBool::new(false);

/// Reserves the next step of the meta file's blocks (one thread at a time; a failure, the disk
/// full, leaves what was reserved).
fn reserve_meta(fd: c_int) {
    if META_RESERVING.swap(true, Ordering::Acquire) {
        return;
    }
    let at = META_RESERVED.load(Ordering::Relaxed);
    // SAFETY: fallocate of a range of our own file, keeping its size.
    let r = unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_KEEP_SIZE,
            at as libc::off_t,
            META_STEP as libc::off_t,
        )
    };
    if r == 0 {
        META_RESERVED.store(at + META_STEP, Ordering::Relaxed);
    }
    META_RESERVING.store(false, Ordering::Release);
}

/// Gives back the meta file's blocks reserved beyond its end (at the end of the trace).
fn release_meta() {
    let fd = SESSION.meta.get();
    let (end, reserved) = (
        META_BYTES.load(Ordering::Relaxed),
        META_RESERVED.load(Ordering::Relaxed),
    );
    if fd >= 0 && reserved > end {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate of a range of our own file beyond its end, keeping its size.
        unsafe {
            libc::fallocate(
                fd,
                mode,
                end as libc::off_t,
                (reserved - end) as libc::off_t,
            )
        };
    }
}

/// Writes one formatted meta line.
fn meta(args: core::fmt::Arguments<'_>) {
    let mut line = MetaLine::new();
    let _ = core::fmt::write(&mut line.buf, args);
    line.send();
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
    // info stops at the first one, asm/<arch>.s).
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

/// The `thread` line of `block`'s current owner: slot, tid, name.
fn thread_line(block: &ThreadBlock) {
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes and a NUL into the buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let len = name.iter().position(|&b| b == 0).unwrap_or(16);
    let mut line = MetaLine::new();
    let _ = write!(line.buf, "thread {} {}", block.index, sys::gettid());
    line.word(&name[..len]);
    line.send();
}

/// This thread's alternate signal stack, if it has one.
fn alt_stack() -> (usize, usize) {
    // SAFETY: a query into a zeroed stack_t.
    unsafe {
        let mut ss: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(ptr::null(), &mut ss) == 0 && ss.ss_flags & libc::SS_DISABLE == 0 {
            let lo = ss.ss_sp as usize;
            return (lo, lo + ss.ss_size);
        }
    }
    (0, 0)
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
        crate::collector::retire(prev, block.trace.prev_end.load(Ordering::Relaxed));
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

/// Reports this thread's lost events, and the calls the record-time filters dropped, in the
/// meta file.
fn flush_lost(tls: &mut Tls, block: &ThreadBlock) {
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

/// Bytes of a chunk.
pub(crate) fn chunk_bytes() -> usize {
    CHUNK_BYTES.load(Ordering::Relaxed)
}

/// Marks the file full (it cannot grow: `errno`; or 0, the limit is reached).
fn set_full(errno: i32) {
    if !SESSION.full.swap(true, Ordering::Relaxed) {
        SESSION.full_reason.store(errno, Ordering::Relaxed);
    }
}

/// Allocates and maps a new chunk of the staging file with every page faulted in writable, so
/// that writing it never faults (nor can a full disk turn into a SIGBUS: the blocks exist
/// first). Chunks are made only when none is free to reuse (src/collector.rs), so the staging
/// file grows to the chunks in use at once, not with the trace. Raw system calls only: the
/// collector runs this too. Returns the mapping, or None if there is none (the disk is full:
/// why is kept for [`refill`] to say).
pub(crate) fn new_chunk() -> Option<usize> {
    use crate::collector::syscall;
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
        crate::collector::mmap(
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

/// Commits a staging chunk whose events are all written: copies it to the next chunk of the
/// events file (`pwrite`: about a fifth of the cost of fresh file pages, measured with
/// scripts/bench/pagecache.c), then clears it for reuse — its magic first, so that a reader
/// finds the chunk either whole in the staging file or unused there (after a SIGKILL between
/// the two steps it is in both files, and readers take the copy with more events). Returns
/// false if the events file cannot take it (the disk is full): the chunk then stays as it is
/// in the staging file, where readers find it, and must not be reused. Raw system calls only
/// (the collector, or a thread retiring its chunk when there is no collector).
pub(crate) fn commit(base: usize) -> bool {
    use crate::collector::syscall;
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
pub(crate) fn all_written(base: usize, end: usize) -> bool {
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

/// Gives this thread its next chunk: a prepared one from the collector's pool, or one it maps
/// itself. `hint` is the function of the event that needs it (0: none), for the chunk's code
/// base, and `ts` its timestamp (0: none), for its time base: that event (stamped before the
/// chunk was had) can then be short too, if it is no older than 2^26 ticks (a slow path under
/// qemu can take milliseconds). Returns false if
/// there is none (the file cannot grow, or the limit is reached): the caller counts the event
/// as lost.
fn refill(tls: &mut Tls, block: &ThreadBlock, hint: usize, ts: u64) -> bool {
    let mut base = 0;
    if !SESSION.full.load(Ordering::Relaxed) {
        if SESSION.handed.fetch_add(1, Ordering::Relaxed) >= MAX_CHUNKS.load(Ordering::Relaxed) {
            set_full(0);
        } else {
            base = crate::collector::take();
            if base == 0 {
                base = crate::collector::commit_one_retired();
                if base == 0
                    && let Some(b) = new_chunk()
                {
                    base = b;
                }
                if base != 0 {
                    crate::collector::prepared_by_thread();
                }
            }
        }
    }
    if base == 0 {
        if SESSION.full.load(Ordering::Relaxed) && !SESSION.full_said.swap(true, Ordering::Relaxed)
        {
            match SESSION.full_reason.load(Ordering::Relaxed) {
                0 => message!(
                    "the trace reached INSTRFN_TRACE_LIMIT; later events are counted as lost"
                ),
                libc::EFBIG if sys::file_size_limit() != u64::MAX => message!(
                    "the trace files reached the file size limit ({}); later events are \
                     counted as lost",
                    sys::SizeLimit(sys::file_size_limit())
                ),
                e => message!(
                    "the trace files cannot grow ({}); later events are counted as lost",
                    sys::Errno(e)
                ),
            }
        }
        return false;
    }
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let t = &block.trace;
    let old = t.chunk.swap(base, Ordering::Relaxed);
    if old != 0 {
        let old_end = tls.trace_pos.clamp(old + CHUNK_HEADER, old + size);
        let older = t.prev.swap(old, Ordering::Relaxed);
        let older_end = t.prev_end.swap(old_end, Ordering::Relaxed);
        retire_chunk(tls, t, older, older_end);
    }
    let seq = t.seq.fetch_add(1, Ordering::Relaxed);
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
    // SAFETY: the header lies at the start of the chunk, which is all zero (fresh or cleared
    // by `commit`). The magic goes last: a reader sees a whole header or an unused chunk.
    unsafe {
        let h = base as *mut u8;
        h.add(HDR_TBASE).cast::<u64>().write(tbase);
        h.add(HDR_CBASE).cast::<u64>().write(cbase);
        h.add(8).cast::<u32>().write(CHUNK_VERSION);
        h.add(12).cast::<u32>().write(size as u32);
        h.add(16).cast::<u32>().write(block.index);
        h.add(20).cast::<u32>().write(sys::gettid());
        h.add(24).cast::<u64>().write(seq);
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        ptr::copy_nonoverlapping(CHUNK_MAGIC.as_ptr(), h, 8);
    }
    tls.trace_end = base + size;
    tls.trace_pos = base + CHUNK_HEADER;
    tls.trace_tbase = tbase;
    tls.trace_cbase = cbase as usize;
    keep_from_call_words(tls);
    true
}

/// INSTRFN_CALL_WORDS=off: a pin that no chunk has (no chunk ends at 1) keeps this thread's
/// exit trampolines from making call words, at no cost to them. Set as the thread starts
/// and as it takes a chunk (a fork child's thread starts without). No call word is being
/// made then, so no pin of one is overwritten.
fn keep_from_call_words(tls: &mut Tls) {
    if NO_CALL_WORDS.load(Ordering::Relaxed) {
        tls.trace_pin = 1;
    }
}

/// Hands the chunk at `base` (0: none), whose events end at `end`, to the collector, unless
/// this thread's `trace_pin` holds it: an exit trampoline that the running code (a signal
/// handler) interrupted is about to store a call word into it (MERGE_CALL in asm/x86_64.s,
/// asm/aarch64.s and asm/riscv64.s, S390_MERGE in asm/s390x.s).
/// Such a chunk waits in the block's `pinned` until a later call finds the pin gone. At most
/// one chunk is pinned at a time.
fn retire_chunk(tls: &Tls, t: &BlockTrace, base: usize, end: usize) {
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let held = |chunk: usize| tls.trace_pin != 0 && tls.trace_pin == chunk + size;
    let waiting = t.pinned.load(Ordering::Relaxed);
    if waiting != 0 && !held(waiting) {
        t.pinned.store(0, Ordering::Relaxed);
        crate::collector::retire(waiting, t.pinned_end.load(Ordering::Relaxed));
    }
    if base == 0 {
        return;
    }
    if held(base) && t.pinned.load(Ordering::Relaxed) == 0 {
        t.pinned_end.store(end, Ordering::Relaxed);
        t.pinned.store(base, Ordering::Relaxed);
    } else {
        crate::collector::retire(base, end);
    }
}

/// Takes the time and code bases of the chunk at `base` into this thread's Tls (a thread that
/// goes on in a chunk another one filled before it).
fn take_bases(tls: &mut Tls, base: usize) {
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
fn event(tls: &mut Tls, block: &ThreadBlock, kind: usize, value: usize, ts: u64) {
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
    if SESSION.full.load(Ordering::Relaxed) {
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
fn enter_sink(tls: &mut Tls, block: &ThreadBlock) {
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
fn in_sink(tls: &Tls, block: &ThreadBlock) -> bool {
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

fn shadow_entries(tls: &Tls) -> &'static mut [Shadow] {
    let n = (tls.shadow_top - tls.shadow_base) / SH_BYTES;
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the entries between base and top were pushed on this thread's shadow stack.
    unsafe { core::slice::from_raw_parts_mut(tls.shadow_base as *mut Shadow, n) }
}

/// Pops the newest shadow entry: its slot is zeroed first (a free entry's slot is 0, and an
/// entry whose slot is 0 is one a fast path has reserved and not filled yet — see
/// [`in_progress`]).
fn pop(tls: &mut Tls) {
    if let Some(top) = shadow_entries(tls).last_mut() {
        top.slot = ptr::null_mut();
        tls.shadow_top -= SH_BYTES;
    }
}

/// Whether a shadow entry is being pushed by the code this thread's slow path interrupted (a
/// signal handler's calls): the fast path reserves the entry first and writes its slot last,
/// so until then the slot is 0. Such an entry and the ones below it are alive.
fn in_progress(e: &Shadow) -> bool {
    e.slot.is_null()
}

/// A shadow entry whose frame returned while newer entries (frames on another stack, alive)
/// sat above it: it stays, marked so, until it reaches the top and is dropped.
const TOMBSTONE: usize = 1;

fn tombstone(e: &Shadow) -> bool {
    e.slot as usize == TOMBSTONE
}

/// A pushed, complete entry of a frame not known to have returned.
fn live(e: &Shadow) -> bool {
    e.slot as usize > TOMBSTONE
}

/// Whether two stack addresses can be compared (one frame at or below the other means the
/// lower one is gone): both on the thread's alternate signal stack, or both on the thread's
/// own stack. Frames on any other stack (coroutines: swapcontext, hand-written context
/// switches) are never judged gone by address: such a stack may lie anywhere.
fn same_stack(tls: &mut Tls, a: usize, b: usize) -> bool {
    let alt = |x: usize| x >= tls.alt_lo && x < tls.alt_hi;
    if alt(a) || alt(b) {
        return alt(a) && alt(b);
    }
    if tls.stack_hi == 0 {
        (tls.stack_lo, tls.stack_hi) = own_stack();
    }
    let own = |x: usize| x >= tls.stack_lo && x < tls.stack_hi;
    own(a) && own(b)
}

/// Whether a frame whose return slot is `e`, newer than the code now at slot `s` (returning,
/// or being entered when `inclusive`), is gone: it lies at or below `s` on the same stack
/// (longjmp, an unwinder); or it is a signal handler's, on the alternate signal stack, while
/// `s` is not — code runs off that stack again only once the handlers there are done.
fn dead(tls: &mut Tls, e: usize, s: usize, inclusive: bool) -> bool {
    let alt = |x: usize| x >= tls.alt_lo && x < tls.alt_hi;
    if alt(e) && !alt(s) {
        return true;
    }
    (e < s || (inclusive && e == s)) && same_stack(tls, e, s)
}

/// The calling thread's own stack, from /proc/self/maps: the main thread's `[stack]` mapping,
/// extended down to its RLIMIT_STACK (it grows); another thread's is the mapping that holds
/// its thread pointer (glibc and musl put the thread's control block at the top of its
/// stack). If it cannot be told, all of the address space (addresses are then compared as
/// they always were).
fn own_stack() -> (usize, usize) {
    // SAFETY: getpid has no preconditions.
    let main = sys::gettid() as i32 == unsafe { libc::getpid() };
    let tp = crate::collector::thread_pointer();
    let mut found = (0, usize::MAX);
    let mut line = StackBuf::<512>::new();
    let mut take = |l: &[u8]| {
        let mut w = l.split(|&b| b == b' ').filter(|w| !w.is_empty());
        let Some(range) = w.next() else {
            return;
        };
        let mut r = range.split(|&b| b == b'-');
        let hex = |b: Option<&[u8]>| {
            b.and_then(|b| core::str::from_utf8(b).ok())
                .and_then(|s| usize::from_str_radix(s, 16).ok())
        };
        let (Some(lo), Some(hi)) = (hex(r.next()), hex(r.next())) else {
            return;
        };
        if main && l.ends_with(b"[stack]") {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit into a local.
            let grow = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut lim) } == 0
                && lim.rlim_cur != libc::RLIM_INFINITY
            {
                lim.rlim_cur as usize
            } else {
                hi - lo
            };
            found = (hi.saturating_sub(grow.max(hi - lo)), hi);
        } else if !main && (lo..hi).contains(&tp) {
            found = (lo, hi);
        }
    };
    read_file(c"/proc/self/maps", |chunk| {
        for &b in chunk {
            if b == b'\n' {
                take(line.as_bytes());
                line = StackBuf::new();
            } else {
                line.push(&[b]);
            }
        }
    });
    found
}

/// Closes the frames of shadow entries that are gone: those whose return slot lies at or below
/// `slot` (the stack has been reused there, by longjmp or an unwinder), on the same stack.
/// Events `EV_UNWOUND` at `ts`.
fn close_gone(tls: &mut Tls, block: &ThreadBlock, slot: usize, inclusive: bool, ts: u64) {
    loop {
        if tls.unwound == WALKING && tls.shadow_top <= tls.walk_base {
            return;
        }
        let entries = shadow_entries(tls);
        let Some(top) = entries.last() else {
            return;
        };
        if in_progress(top) {
            return;
        }
        if tombstone(top) {
            pop(tls);
            continue;
        }
        if !dead(tls, top.slot as usize, slot, inclusive) {
            return;
        }
        let func = top.func;
        // The slot may still hold the exit trampoline (a longjmp left it): put the original
        // back where that is still the frame's slot... it is not: the frame is gone, the memory
        // belongs to someone else now. Leave it.
        pop(tls);
        event(tls, block, EV_UNWOUND, func, ts);
    }
}

/// After an unwinder walked this thread's stack with the original return addresses back in
/// place: frames that are gone (at or below `slot`) are closed, the ones still alive get the
/// exit trampoline again.
fn after_unwinding(tls: &mut Tls, block: &ThreadBlock, slot: usize, inclusive: bool, ts: u64) {
    tls.unwound = 0;
    close_gone(tls, block, slot, inclusive, ts);
    let trampoline = arch::exit_trampoline();
    // (Not XRay frames: `ret` 0, their return address was never replaced.)
    for e in shadow_entries(tls).iter().filter(|e| live(e) && e.ret != 0) {
        // SAFETY: a live frame of this thread (above the current one).
        unsafe { trampoline_back(e, trampoline) };
    }
}

/// Where `e`'s frame holds its original return address (its slot, and its second word where
/// the architecture has one: arch::second_slot), the exit trampoline goes back.
///
/// # Safety
/// `e` is a live frame's entry (its slot, and the second word, in that frame).
unsafe fn trampoline_back(e: &Shadow, trampoline: usize) {
    // SAFETY: per the contract.
    unsafe { swap_words(e, e.ret, trampoline) }
}

/// Where `e`'s frame holds the exit trampoline (its slot, and its second word), the original
/// return address goes back, for an unwinder's walk.
///
/// # Safety
/// As [`trampoline_back`].
unsafe fn original_back(e: &Shadow, trampoline: usize) {
    // SAFETY: per the contract.
    unsafe { swap_words(e, trampoline, e.ret) }
}

/// Each word of `e`'s frame that holds its return address (the slot, the second word) and
/// reads `from` is set to `to`.
///
/// # Safety
/// As [`trampoline_back`].
unsafe fn swap_words(e: &Shadow, from: usize, to: usize) {
    let slot = e.slot as usize;
    for word in core::iter::once(slot).chain(arch::second_slot(slot)) {
        let word = word as *mut usize;
        // SAFETY: per the contract, a word of a live frame.
        unsafe {
            if *word == from {
                *word = to;
            }
        }
    }
}

/// `Tls::unwound`: an unwinder ran (fix up at the next event), or a backtrace walks now.
const UNWOUND: usize = 1;
const WALKING: usize = 2;

/// Puts every original return address of this thread's shadow stack back, newest first (an
/// unwinder is about to walk the stack). A slot that no longer holds the trampoline belongs to
/// something else now and is left alone.
fn restore_return_addresses(tls: &mut Tls) {
    let trampoline = arch::exit_trampoline();
    for e in shadow_entries(tls)
        .iter()
        .rev()
        .filter(|e| live(e) && e.ret != 0)
    {
        // SAFETY: a return slot this thread's fast path replaced; if the frame is still there
        // it holds the trampoline, and the original goes back.
        unsafe { original_back(e, trampoline) };
    }
}

/// The slow path of a trace-mode counting call, with the guard held and signals blocked:
/// records the call completely. `slot` is the return slot of an mcount/fentry call (its
/// return address is replaced), 0 for `__cyg_profile_func_enter`, 1 for `..._exit`.
///
/// # Safety
/// Only the trampolines call this, with `tls` = this thread's TLS block and `slot` (when above
/// 1) the instrumented function's return slot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_trace_slow(tls: *mut Tls, slot: *mut usize, self_pc: usize) {
    let saved_errno = sys::errno();
    // SAFETY: per the contract, this thread's TLS block.
    let tls = unsafe { &mut *tls };
    if let Some(block) = crate::runtime::ready_block(tls) {
        // SAFETY: per the contract.
        unsafe { trace_call(tls, block, slot, self_pc) };
    }
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// # Safety
/// As [`instrfn_trace_slow`].
unsafe fn trace_call(tls: &mut Tls, block: &ThreadBlock, slot: *mut usize, self_pc: usize) {
    let ts = arch::counter();
    let slot_addr = slot as usize;
    let hijack = slot_addr > 1;
    if hijack {
        if tls.unwound == UNWOUND {
            after_unwinding(tls, block, slot_addr, false, ts);
        }
        // A tail call: the function that owned this very slot jumped here, leaving the
        // trampoline in it. That function is done (its exit, now); this one returns where it
        // would have returned, so its caller is the real one.
        if let Some(top) = shadow_entries(tls).last()
            && top.slot == slot
            // SAFETY: slot is the function's return slot (per the contract).
            && unsafe { *slot } == arch::exit_trampoline()
        {
            let (ret, func) = (top.ret, top.func);
            pop(tls);
            event(tls, block, EV_EXIT, func, ts);
            // SAFETY: as above; the original return address goes back for the code below.
            unsafe { *slot = ret };
        }
        // The program may have set (or changed) its alternate signal stack meanwhile.
        (tls.alt_lo, tls.alt_hi) = alt_stack();
        close_gone(tls, block, slot_addr, true, ts);
    }
    if slot_addr == 1 {
        event(tls, block, EV_EXIT, self_pc, ts);
        return;
    }
    // A thread without a chunk yet (its first event, or its first after fork) takes one now:
    // that can take up to a millisecond (the file grown, mapped and faulted in), which is the
    // runtime's time, not the function's, so the entry is stamped after it. (Every event this
    // thread wrote before is older than `ts`.)
    let ts = if tls.trace_end == 0 && refill(tls, block, self_pc, 0) {
        arch::counter()
    } else {
        ts
    };
    let room = tls.shadow_top + SH_BYTES <= tls.shadow_end;
    if hijack && !room && DROP_DEEP.load(Ordering::Relaxed) {
        // Deeper than INSTRFN_DEPTH: no events (nothing replaced: its callees come here too).
        tls.dropped += 1;
        return;
    }
    // SAFETY: slot is the function's return slot (per the contract).
    let replaceable = hijack && arch::replaceable(unsafe { *slot });
    if hijack && (!room || !HIJACK.load(Ordering::Relaxed) || !replaceable) {
        NOEXIT.fetch_add(1, Ordering::Relaxed);
        tls.entry_only += 1;
        event(tls, block, EV_NOEXIT, self_pc, ts);
        return;
    }
    event(tls, block, EV_ENTRY, self_pc, ts);
    if hijack {
        let e = tls.shadow_top as *mut Shadow;
        // SAFETY: room checked above; slot is the function's return slot (per the contract).
        unsafe {
            e.write(Shadow {
                ret: *slot,
                slot,
                func: self_pc,
                _spare: 0,
            });
            tls.shadow_top += SH_BYTES;
            *slot = arch::exit_trampoline();
        }
    }
}

/// The exit trampoline's slow path: the newest shadow entry is not the returning frame's (its
/// newer ones were left behind by longjmp), or an unwinder ran, or there was no room for the
/// event. Closes what is gone, pops the returning frame's entry, writes its exit, and returns
/// its original return address.
///
/// # Safety
/// Only the exit trampoline calls this, with `tls` = this thread's TLS block and `slot` the
/// returning function's return slot (its CFA - 8).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_trace_exit_slow(tls: *mut Tls, slot: *mut usize) -> usize {
    let saved_errno = sys::errno();
    // SAFETY: per the contract, this thread's TLS block.
    let tls = unsafe { &mut *tls };
    let ts = arch::counter();
    let slot_addr = slot as usize;
    let block = tls.block;
    // SAFETY: a thread that has shadow entries has its block.
    let block = unsafe { block.as_ref() };
    (tls.alt_lo, tls.alt_hi) = alt_stack();
    if let Some(block) = block {
        // An entry still being pushed above the returning frame's is stale: the code that
        // was pushing it is gone (a signal handler that interrupted it jumped out with
        // longjmp), since a frame below it returns.
        if tls.unwound == UNWOUND {
            after_unwinding(tls, block, slot_addr, false, ts);
        }
        loop {
            close_gone(tls, block, slot_addr, false, ts);
            match shadow_entries(tls).last() {
                Some(top)
                    if in_progress(top)
                        && shadow_entries(tls)
                            .iter()
                            .any(|e| e.slot as usize == slot_addr) =>
                {
                    let func = top.func;
                    pop(tls);
                    event(tls, block, EV_UNWOUND, func, ts);
                }
                _ => break,
            }
        }
    }
    // The returning frame's entry: the newest, or one below newer entries of frames on other
    // stacks (coroutines), which stay.
    let Some(at) = shadow_entries(tls)
        .iter()
        .rposition(|e| e.slot as usize == slot_addr)
    else {
        message!("trace mode lost track of a return address; aborting");
        // SAFETY: abort has no preconditions; there is nowhere to return to.
        unsafe { libc::abort() }
    };
    let (ret, func) = {
        let e = &shadow_entries(tls)[at];
        (e.ret, e.func)
    };
    if let Some(block) = block {
        // Newer entries of frames on this frame's stack below it are gone (closed now); the
        // others are alive elsewhere. One being pushed (a handler interrupted its push) is
        // left alone: that code goes on.
        let newer = shadow_entries(tls).len() - at - 1;
        for i in (0..newer).rev() {
            let e = &shadow_entries(tls)[at + 1 + i];
            let (s, f) = (e.slot as usize, e.func);
            if live(e) && dead(tls, s, slot_addr, false) {
                let e = &mut shadow_entries(tls)[at + 1 + i];
                e.slot = ptr::without_provenance_mut(TOMBSTONE);
                e._spare = 0;
                event(tls, block, EV_UNWOUND, f, ts);
            }
        }
        if crate::runtime::recording() {
            event(tls, block, EV_EXIT, func, ts);
        }
    }
    {
        let e = &mut shadow_entries(tls)[at];
        e.slot = ptr::without_provenance_mut(TOMBSTONE);
        e._spare = 0;
    }
    while shadow_entries(tls).last().is_some_and(tombstone) {
        pop(tls);
    }
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
    ret
}

/// The slow path of the XRay trampolines (asm/x86_64-xray.s, asm/aarch64-xray.s), with the
/// guard held and signals blocked. `slot_kind` identifies the instrumented function's frame
/// (x86_64: its return slot, its stack pointer at entry; aarch64: its stack pointer at the
/// sled) with the sled's kind in its low bits (0 entry, 1 exit, 2 tail call); `entry` is the
/// function's entry of its object's table (src/xray.rs: the address, `| EXITS_ONLY` for a
/// function without entry sled, `| NO_EXIT` for one without exit sled). Entries push a shadow entry without return address
/// (`ret` 0: nothing is ever replaced), exits pop it; frames left behind by longjmp or an
/// unwinder are closed (`EV_UNWOUND`) as for mcount code.
///
/// # Safety
/// Only the XRay trampolines call this, with `tls` = this thread's TLS block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_xray_slow(tls: *mut Tls, slot_kind: usize, entry: usize) -> usize {
    let saved_errno = sys::errno();
    // SAFETY: per the contract, this thread's TLS block.
    let tls = unsafe { &mut *tls };
    let (slot, kind) = (slot_kind & !7, slot_kind & 7);
    let func = entry & !(crate::xray::EXITS_ONLY | crate::xray::NO_EXIT);
    let ts = arch::counter();
    if kind == 0 {
        xray_entry(tls, slot, func, entry & crate::xray::NO_EXIT != 0, ts);
    } else {
        xray_exit(tls, slot, func, entry & crate::xray::EXITS_ONLY != 0, ts);
    }
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
    0 // (aarch64's slow routine: return where the trampoline would have)
}

/// An XRay entry the fast path could not take: no chunk yet (or a full one), a full shadow
/// stack, frames to close first.
/// `no_exit`: the function has no exit sled (its entry is recorded without exit).
fn xray_entry(tls: &mut Tls, slot: usize, func: usize, no_exit: bool, ts: u64) {
    let Some(block) = crate::runtime::ready_block(tls) else {
        return;
    };
    if !active() {
        return;
    }
    if tls.unwound == UNWOUND {
        after_unwinding(tls, block, slot, false, ts);
    }
    (tls.alt_lo, tls.alt_hi) = alt_stack();
    // Frames at or below this one's slot are gone (longjmp; a tail call without a tail sled).
    close_gone(tls, block, slot, true, ts);
    let ts = if tls.trace_end == 0 && refill(tls, block, func, 0) {
        arch::counter()
    } else {
        ts
    };
    let room = tls.shadow_end != 0 && tls.shadow_top + SH_BYTES <= tls.shadow_end;
    if !room && DROP_DEEP.load(Ordering::Relaxed) {
        tls.dropped += 1;
        return;
    }
    if !room || no_exit || arch::mode() == 2 {
        NOEXIT.fetch_add(1, Ordering::Relaxed);
        tls.entry_only += 1;
        event(tls, block, EV_NOEXIT, func, ts);
        return;
    }
    event(tls, block, EV_ENTRY, func, ts);
    let e = tls.shadow_top as *mut Shadow;
    // SAFETY: room checked above.
    unsafe {
        e.write(Shadow {
            ret: 0,
            slot: ptr::without_provenance_mut(slot),
            func,
            _spare: 0,
        });
    }
    tls.shadow_top += SH_BYTES;
}

/// An XRay exit (or tail call) the fast path could not take: the newest shadow entry is not
/// the returning frame's (frames left behind by longjmp or an unwinder above it; or it has
/// none: entered before its sleds were patched, or while recording was off, or its entry was
/// recorded without exit), or no room for the event. A function without entry sled
/// (`exits_only`, rustc `skip-entry`) has its exit recorded alone.
fn xray_exit(tls: &mut Tls, slot: usize, func: usize, exits_only: bool, ts: u64) {
    // (ready_block starts the runtime: the first event of a process can be such an exit.)
    let block = match crate::runtime::ready_block(tls) {
        Some(b) => Some(b),
        // SAFETY: the block this thread claimed, or null.
        None => unsafe { tls.block.as_ref() },
    };
    let Some(block) = block else {
        return;
    };
    let recording = crate::runtime::recording() && active();
    if tls.unwound == UNWOUND {
        after_unwinding(tls, block, slot, false, ts);
    }
    (tls.alt_lo, tls.alt_hi) = alt_stack();
    close_gone(tls, block, slot, false, ts);
    let Some(at) = shadow_entries(tls)
        .iter()
        .rposition(|e| e.slot as usize == slot)
    else {
        if exits_only && recording {
            event(tls, block, EV_EXIT, func, ts);
        }
        return;
    };
    let f = shadow_entries(tls)[at].func;
    // Newer entries of frames on this frame's stack below it are gone; the others (other
    // stacks) stay, above a tombstone.
    let newer = shadow_entries(tls).len() - at - 1;
    for i in (0..newer).rev() {
        let e = &shadow_entries(tls)[at + 1 + i];
        let (s, g) = (e.slot as usize, e.func);
        if live(e) && dead(tls, s, slot, false) {
            let e = &mut shadow_entries(tls)[at + 1 + i];
            e.slot = ptr::without_provenance_mut(TOMBSTONE);
            event(tls, block, EV_UNWOUND, g, ts);
        }
    }
    // Its entry was recorded: so is its exit, recording on or off (a call that straddles a
    // stop with the sleds left patched, INSTRFN_XRAY_STOP=pause, ends as it began).
    if active() {
        event(tls, block, EV_EXIT, f, ts);
    }
    shadow_entries(tls)[at].slot = ptr::without_provenance_mut(TOMBSTONE);
    while shadow_entries(tls).last().is_some_and(tombstone) {
        pop(tls);
    }
}

/// Before an unwinder walks this thread's stack (src/interpose.c: _Unwind_RaiseException and
/// its siblings, backtrace): the original return addresses go back; the next event fixes up
/// the shadow stack (closes what the unwinder removed, re-replaces what it left).
extern "C" fn unwind_begin() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    restore_return_addresses(tls);
    if tls.unwound != WALKING {
        tls.unwound = UNWOUND;
    }
}

/// Before a backtrace walks this thread's stack (src/interpose.c: _Unwind_Backtrace,
/// backtrace): the original return addresses go back, and stay there until it is done (the
/// walk's callbacks may make instrumented calls: those are traced, deeper than every walked
/// frame, and leave the walked ones alone).
extern "C" fn unwind_walk_begin() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    if tls.unwound == WALKING {
        return; // a walk inside a walk: the outer one restores
    }
    restore_return_addresses(tls);
    tls.unwound = WALKING;
    tls.walk_base = tls.shadow_top;
}

/// After an unwinder that only looked (a backtrace): every frame is still there; the exit
/// trampoline goes back into each.
extern "C" fn unwind_looked() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    if tls.unwound != WALKING {
        return;
    }
    tls.unwound = 0;
    let trampoline = arch::exit_trampoline();
    // Only live entries, as restore_return_addresses: not one still being pushed (slot 0: the
    // walk began in a signal handler that interrupted its fast path), nor a tombstone (slot
    // 1: its frame returned, under frames of another stack; `!in_progress` let it through,
    // and its slot was read as an address), nor an XRay frame's (ret 0: its return address
    // was never replaced).
    for e in shadow_entries(tls).iter().filter(|e| live(e) && e.ret != 0) {
        // SAFETY: a live frame's return slot, holding its original address right now.
        unsafe { trampoline_back(e, trampoline) };
    }
}

/// A catch handler starts (src/interpose.c, __cxa_begin_catch), in the function whose stack
/// pointer is `boundary`: the frames below it are gone (closed now), the ones above are alive
/// (the exit trampoline goes back into them).
extern "C" fn unwind_caught(boundary: usize) {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    if tls.unwound != UNWOUND {
        return;
    }
    // SAFETY: a thread with shadow entries has its block.
    if let Some(block) = unsafe { tls.block.as_ref() } {
        after_unwinding(tls, block, boundary, false, arch::counter());
    }
}

guarded_entry! {
    /// Called by the __cxa_begin_catch wrapper.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_caught(boundary: usize) => unwind_caught
}

guarded_entry! {
    /// Called by the unwinder wrappers before the real unwinder runs.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_begin() => unwind_begin
}
guarded_entry! {
    /// Called by the backtrace wrappers before the real one runs.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_walk_begin() => unwind_walk_begin
}
guarded_entry! {
    /// Called by the backtrace wrappers after the real one returned.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_looked() => unwind_looked
}

/// `instrfn_flush` in trace mode: this thread's pending losses and new modules into the meta
/// file, both files synced. Returns 0 or an errno value.
pub fn flush() -> c_int {
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    // SAFETY: the block this thread claimed, or null.
    if let Some(block) = unsafe { tls.block.as_ref() } {
        flush_lost(tls, block);
    }
    note_modules();
    let mut result = 0;
    for file in [&SESSION.events, &SESSION.stage, &SESSION.meta] {
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
    let tls = unsafe { &mut *arch::tls() };
    // SAFETY: the block this thread claimed, or null.
    if let Some(block) = unsafe { tls.block.as_ref() } {
        flush_lost(tls, block);
    }
    note_modules();
    let reopened = crate::tracefile::take_reopened();
    if reopened > 0 {
        message!(
            "the program closed {reopened} descriptors of the trace files; the files were \
             opened again (nothing written through the numbers the program reuses)"
        );
    }
    let (tid, cpu_ns, prepared, by_threads) = crate::collector::finish();
    meta(format_args!(
        "collector {tid} {cpu_ns} {prepared} {by_threads}"
    ));
    let (counter, mono, real) = clock_pair();
    meta(format_args!(
        "clock {} {counter:#x} {mono} {real}",
        arch::CLOCK_NAME
    ));
    meta(format_args!("end {counter:#x} {mono}"));
    release_meta();
}

/// In the child after fork: a trace of its own (new files; the parent's chunks are the
/// parent's). The shadow stack stays: the child has the same frames.
pub fn after_fork(dir: &[u8]) {
    if !active() {
        return;
    }
    for file in [&SESSION.events, &SESSION.stage, &SESSION.meta] {
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
    crate::collector::after_fork();
    // A fork from a signal handler that interrupted this thread in the middle of an event (a
    // reservation made and its store still to come, a take-back, a call word) finishes that
    // event in the child too, in the chunk it was in: the parent's, shared with it, which the
    // parent may have committed and reused by then. So this thread's chunks become private
    // memory in the child (the same addresses, zero pages): such a store lands there.
    // SAFETY: this thread's TLS block (the only thread).
    if let Some(block) = unsafe { (*arch::tls()).block.as_ref() } {
        let size = CHUNK_BYTES.load(Ordering::Relaxed);
        for base in [&block.trace.chunk, &block.trace.prev, &block.trace.pinned] {
            let base = base.load(Ordering::Relaxed);
            if base != 0 {
                // SAFETY: MAP_FIXED over a chunk mapping of ours, which nothing in this
                // process reads or writes as the parent's any more.
                unsafe {
                    crate::collector::syscall(
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
    for block in crate::thread::blocks() {
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
    let tls = unsafe { &mut *arch::tls() };
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
    ) && let Some(block) = {
        // SAFETY: the block this thread claimed, or null.
        unsafe { tls.block.as_ref() }
    } {
        thread_line(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
