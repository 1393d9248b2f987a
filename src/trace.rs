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
//! - a tail call (the newest entry's return slot is the new one's, and still holds the exit
//!   trampoline): that function's exit, and the new one returns to its return address;
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
use crate::{arch, process};

/// Offsets and constants the assembly shares (see the `{SH_*}` and `{EV_*}` operands).
pub mod layout {
    /// A shadow stack entry: the original return address, the address of the return slot it was
    /// taken from, the function, and one spare word.
    pub const SH_RET: usize = 0;
    pub const SH_SLOT: usize = 8;
    pub const SH_FN: usize = 16;
    pub const SH_BYTES: usize = 32;
    /// An event: timestamp, then `(value << EV_SHIFT) | kind`.
    pub const EV_BYTES: usize = 16;
    pub const EV_SHIFT: usize = 4;
    pub const EV_ENTRY: usize = 1;
    pub const EV_EXIT: usize = 2;
    pub const EV_UNWOUND: usize = 3;
    pub const EV_LOST: usize = 4;
    pub const EV_NOEXIT: usize = 5;
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

/// Bytes of a chunk header (docs/trace-format.md).
const CHUNK_HEADER: usize = 64;
const CHUNK_MAGIC: &[u8; 8] = b"IFNCHNK1";

/// The trace of this process image: its files and how far they have grown.
struct Session {
    events_fd: AtomicI32,
    meta_fd: AtomicI32,
    /// Chunks handed out so far (the next chunk's index).
    chunks: AtomicU64,
    /// Set once the file could not grow any more (or the limit was reached): events are
    /// counted as lost from then on.
    full: AtomicBool,
}

static SESSION: Session = Session {
    events_fd: AtomicI32::new(-1),
    meta_fd: AtomicI32::new(-1),
    chunks: AtomicU64::new(0),
    full: AtomicBool::new(false),
};
/// Chunk size (INSTRFN_BUFSIZE) and the most chunks the file may hold (INSTRFN_TRACE_LIMIT).
static CHUNK_BYTES: AtomicUsize = AtomicUsize::new(1 << 20);
static MAX_CHUNKS: AtomicU64 = AtomicU64::new(u64::MAX);
/// Shadow stack entries per thread (INSTRFN_MAX_DEPTH).
static DEPTH: AtomicUsize = AtomicUsize::new(4096);
/// Whether return addresses may be replaced (not with a hardware shadow stack).
static HIJACK: AtomicBool = AtomicBool::new(true);
/// Events recorded as entries without exit because the shadow stack was full, or hijacking is
/// off (all threads, for the summary).
static NOEXIT: AtomicU64 = AtomicU64::new(0);

/// Full chunks a thread keeps mapped while events reserved in them are unwritten.
const PENDING: usize = 4;

#[repr(C)]
/// What one thread's block holds for tracing. Written by the owner (its slow path), read by
/// the exit writer.
pub struct BlockTrace {
    /// The chunk being filled (mapped), and its index in the file.
    chunk: AtomicUsize,
    /// Full chunks still mapped because events reserved in them were not written yet when the
    /// thread took the next chunk (see [`retire`]): base and end of their events, 0 when free.
    pending: [[AtomicUsize; 2]; PENDING],
    /// The next sequence number of this slot's chunks.
    seq: AtomicU64,
    /// Events lost on this slot in total (for the meta file).
    lost: AtomicU64,
    /// The shadow stack mapping (reused by the next owner).
    shadow: AtomicUsize,
}

impl BlockTrace {
    pub const fn new() -> BlockTrace {
        BlockTrace {
            chunk: AtomicUsize::new(0),
            pending: [const { [const { AtomicUsize::new(0) }; 2] }; PENDING],
            seq: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            shadow: AtomicUsize::new(0),
        }
    }
}

/// Whether this process traces.
pub fn active() -> bool {
    SESSION.events_fd.load(Ordering::Relaxed) >= 0
}

/// Opens the trace files of this image in `dir` and writes the meta header. Start-up (async-
/// signal-safe: system calls only). Returns false (after saying why) when tracing cannot start;
/// the program then runs untraced.
pub fn start(dir: &[u8], chunk_bytes: usize, limit: u64, depth: usize) -> bool {
    CHUNK_BYTES.store(chunk_bytes, Ordering::Relaxed);
    MAX_CHUNKS.store((limit / chunk_bytes as u64).max(1), Ordering::Relaxed);
    DEPTH.store(depth, Ordering::Relaxed);
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
    let events = open(b".events", libc::O_RDWR);
    if meta < 0 || events < 0 {
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
        }
        return false;
    }
    SESSION.meta_fd.store(meta, Ordering::Relaxed);
    HIJACK.store(!hardware_shadow_stack(), Ordering::Relaxed);
    write_header();
    SESSION.events_fd.store(events, Ordering::Release);
    true
}

/// Whether the process runs with a hardware shadow stack (x86 CET user shadow stack), where a
/// replaced return address would fault: then entries only are recorded, said once.
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
    false
}

/// The meta file's first lines: format, process, command line, executable, clock, modules.
fn write_header() {
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    meta(format_args!("instrfn-trace 1"));
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
    crate::modules::for_each_shared_object(|m| module_line(m));
    let exe = crate::modules::Module::executable();
    module_line(&exe);
}

/// A `module` line for one loaded object.
fn module_line(m: &crate::modules::Module) {
    let lo = m.segments().iter().map(|s| s.start).min().unwrap_or(0);
    let hi = m.segments().iter().map(|s| s.end).max().unwrap_or(0);
    let mut line = MetaLine::new();
    let _ = write!(line.buf, "module {:#x} {lo:#x} {hi:#x}", m.bias);
    if m.path().is_empty() {
        let mut exe = [0u8; 1024];
        // SAFETY: readlink into a buffer of its length.
        let n = unsafe {
            libc::readlink(
                c"/proc/self/exe".as_ptr(),
                exe.as_mut_ptr().cast(),
                exe.len(),
            )
        };
        line.word(&exe[..n.max(0) as usize]);
    } else {
        line.word(m.path());
    }
    line.send();
}

/// The `exe` line: path, build-id (or `-`), size, mtime and a hash of the first 4 KiB.
fn write_exe_line() {
    let mut path = [0u8; 1024];
    // SAFETY: readlink into a buffer of its length.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            path.as_mut_ptr().cast(),
            path.len(),
        )
    };
    let path = &path[..n.max(0) as usize];
    let mut line = MetaLine::new();
    line.push(b"exe");
    line.word(path);
    let mut id = StackBuf::<80>::new();
    if !build_id(&mut id) {
        id.push(b"-");
    }
    line.push(b" ");
    line.push(id.as_bytes());
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a valid path and stat buffer.
    let ok = unsafe { libc::stat(c"/proc/self/exe".as_ptr(), &mut st) } == 0;
    let (size, mtime) = if ok {
        (
            st.st_size as u64,
            st.st_mtime as u64 * 1_000_000_000 + st.st_mtime_nsec as u64,
        )
    } else {
        (0, 0)
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut first = true;
    read_file(c"/proc/self/exe", |chunk| {
        if first {
            for &b in &chunk[..chunk.len().min(4096)] {
                hash = (hash ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
            first = false;
        }
    });
    let _ = write!(line.buf, " {size} {mtime} {hash:016x}");
    line.send();
}

/// The executable's GNU build-id in hex, from its PT_NOTE segments (in memory).
fn build_id<const N: usize>(out: &mut StackBuf<N>) -> bool {
    // SAFETY: getauxval has no preconditions.
    let (phdr, phnum) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_PHNUM),
        )
    };
    if phdr == 0 {
        return false;
    }
    let exe = crate::modules::Module::executable();
    // SAFETY: the kernel's program header table.
    let headers = unsafe {
        core::slice::from_raw_parts(phdr as usize as *const libc::Elf64_Phdr, phnum as usize)
    };
    for h in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
        let start = (h.p_vaddr as usize).wrapping_add(exe.bias);
        // SAFETY: a PT_NOTE segment is mapped (it lies in a PT_LOAD one).
        let notes = unsafe { core::slice::from_raw_parts(start as *const u8, h.p_memsz as usize) };
        let mut at = 0;
        while at + 12 <= notes.len() {
            let word = |i: usize| u32::from_ne_bytes(notes[i..i + 4].try_into().unwrap()) as usize;
            let (namesz, descsz, kind) = (word(at), word(at + 4), word(at + 8));
            let name_at = at + 12;
            let desc_at = name_at + namesz.next_multiple_of(4);
            let end = desc_at + descsz.next_multiple_of(4);
            if end > notes.len() {
                break;
            }
            if kind == 3 && notes[name_at..name_at + namesz].starts_with(b"GNU") {
                for b in &notes[desc_at..desc_at + descsz] {
                    let _ = write!(out, "{b:02x}");
                }
                return true;
            }
            at = end;
        }
    }
    false
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
fn clock_pair() -> (u64, u64, u64) {
    let c = arch::counter();
    let mono = sys::monotonic_ns();
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
        let fd = SESSION.meta_fd.load(Ordering::Relaxed);
        if fd >= 0 {
            let _ = sys::write_all(fd, self.buf.as_bytes());
        }
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
    tls.shadow_base = shadow;
    tls.shadow_top = shadow;
    tls.shadow_end = if shadow == 0 {
        0
    } else {
        shadow + depth * SH_BYTES
    };
    tls.trace_pos = 0;
    tls.trace_end = 0;
    tls.unwound = 0;
    let (lo, hi) = alt_stack();
    tls.alt_lo = lo;
    tls.alt_hi = hi;
    thread_line(block);
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
    flush_lost(tls, block);
    thread_line(block);
    let t = &block.trace;
    tls.trace_pos = 0;
    tls.trace_end = 0;
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    for chunk in core::iter::once(&t.chunk).chain(t.pending.iter().map(|p| &p[0])) {
        let chunk = chunk.swap(0, Ordering::Relaxed);
        if chunk != 0 {
            // SAFETY: this thread's own chunk mappings, no longer written (pos/end cleared
            // first; the exiting thread runs no fast path any more).
            unsafe { libc::munmap(chunk as *mut libc::c_void, size) };
        }
    }
}

/// Reports this thread's lost events in the meta file.
fn flush_lost(tls: &mut Tls, block: &ThreadBlock) {
    let lost = core::mem::take(&mut tls.trace_lost);
    if lost > 0 {
        block.trace.lost.fetch_add(lost as u64, Ordering::Relaxed);
        meta(format_args!("lost {} {lost}", block.index));
    }
}

/// Maps the next chunk of the file for this thread. Returns false if there is none (the file
/// cannot grow, or the limit is reached): the caller counts the event as lost.
fn refill(tls: &mut Tls, block: &ThreadBlock) -> bool {
    let fd = SESSION.events_fd.load(Ordering::Acquire);
    if fd < 0 || SESSION.full.load(Ordering::Relaxed) {
        return false;
    }
    let size = CHUNK_BYTES.load(Ordering::Relaxed);
    let index = SESSION.chunks.fetch_add(1, Ordering::Relaxed);
    if index >= MAX_CHUNKS.load(Ordering::Relaxed) {
        if !SESSION.full.swap(true, Ordering::Relaxed) {
            message!("the trace reached INSTRFN_TRACE_LIMIT; later events are counted as lost");
        }
        return false;
    }
    let offset = index as i64 * size as i64;
    // SAFETY: fallocate of a range of our own file: the blocks exist before they are written
    // through the mapping, so a full disk is an error here, never a SIGBUS there.
    let r = unsafe { libc::fallocate(fd, 0, offset, size as i64) };
    if r != 0 {
        let e = sys::errno();
        let grown = e == libc::EOPNOTSUPP
            // SAFETY: growing the file (holes read as zero) where fallocate is not supported.
            && unsafe { libc::ftruncate(fd, offset + size as i64) } == 0;
        if !grown {
            if !SESSION.full.swap(true, Ordering::Relaxed) {
                message!(
                    "the trace file cannot grow ({}); later events are counted as lost",
                    sys::Errno(e)
                );
            }
            return false;
        }
    }
    // SAFETY: a shared mapping of a range of our file that exists now.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    let base = p as usize;
    let t = &block.trace;
    let old = t.chunk.swap(base, Ordering::Relaxed);
    if old != 0 {
        let end = tls.trace_pos.clamp(old + CHUNK_HEADER, old + size);
        retire(t, old, end, size);
    }
    let seq = t.seq.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the header lies at the start of the fresh mapping.
    unsafe {
        let h = base as *mut u8;
        ptr::copy_nonoverlapping(CHUNK_MAGIC.as_ptr(), h, 8);
        h.add(8).cast::<u32>().write(1);
        h.add(12).cast::<u32>().write(size as u32);
        h.add(16).cast::<u32>().write(block.index);
        h.add(20).cast::<u32>().write(sys::gettid());
        h.add(24).cast::<u64>().write(seq);
    }
    tls.trace_end = base + size;
    tls.trace_pos = base + CHUNK_HEADER;
    true
}

/// The thread leaves its full chunk `old` (events up to `end`): it is unmapped once every event
/// reserved in it is written. A fast path that a signal handler interrupted between reserving
/// its event and writing it writes it when the handler returns, even if the handler took the
/// next chunk meanwhile (and so may each level of nested handlers), so until then the chunk
/// stays mapped, in `pending`, checked again at every refill. A chunk that finds no free
/// place there stays mapped for good: a leak, never a fault.
fn retire(t: &BlockTrace, old: usize, end: usize, size: usize) {
    let unmap = |chunk: usize| {
        // SAFETY: a chunk mapping of this thread whose events are all written: nothing writes
        // it any more.
        unsafe { libc::munmap(chunk as *mut libc::c_void, size) };
    };
    for p in &t.pending {
        let chunk = p[0].load(Ordering::Relaxed);
        if chunk != 0 && all_written(chunk, p[1].load(Ordering::Relaxed)) {
            unmap(chunk);
            p[0].store(0, Ordering::Relaxed);
        }
    }
    if all_written(old, end) {
        unmap(old);
    } else if let Some(p) = t.pending.iter().find(|p| p[0].load(Ordering::Relaxed) == 0) {
        p[0].store(old, Ordering::Relaxed);
        p[1].store(end, Ordering::Relaxed);
    }
}

/// Whether every event of the chunk at `base`, up to `end`, has its tag word (written last).
fn all_written(base: usize, end: usize) -> bool {
    (base + CHUNK_HEADER..end).step_by(EV_BYTES).all(|at| {
        // SAFETY: inside a chunk this thread has mapped.
        unsafe { ((at + 8) as *const u64).read_volatile() != 0 }
    })
}

/// Writes one event from Rust (the slow path), taking a chunk if needed; counts it as lost
/// if there is none. A loss marker goes first when events were lost before.
fn event(tls: &mut Tls, block: &ThreadBlock, kind: usize, value: usize, ts: u64) {
    for attempt in 0..2 {
        let pending_lost = tls.trace_lost;
        let need = if pending_lost > 0 { 2 } else { 1 } * EV_BYTES;
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
            unsafe { store_event(w, ts, kind, value) };
            return;
        }
        if attempt == 0 && !refill(tls, block) {
            break;
        }
    }
    tls.trace_lost += 1;
}

/// Stores one event: the timestamp, then the tagged word that marks it written.
///
/// # Safety
/// `at` .. `at + 16` must lie in a chunk of this thread.
unsafe fn store_event(at: usize, ts: u64, kind: usize, value: usize) {
    // SAFETY: per the contract.
    unsafe {
        (at as *mut u64).write_volatile(ts);
        ((at + 8) as *mut u64).write_volatile(((value << EV_SHIFT) | kind) as u64);
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

/// Whether two stack addresses can be compared: both on the thread's alternate signal stack,
/// or both off it.
fn same_stack(tls: &Tls, a: usize, b: usize) -> bool {
    let alt = |x: usize| x >= tls.alt_lo && x < tls.alt_hi;
    alt(a) == alt(b)
}

/// Closes the frames of shadow entries that are gone: those whose return slot lies at or below
/// `slot` (the stack has been reused there, by longjmp or an unwinder), on the same stack.
/// Events `EV_UNWOUND` at `ts`.
fn close_gone(tls: &mut Tls, block: &ThreadBlock, slot: usize, inclusive: bool, ts: u64) {
    loop {
        let entries = shadow_entries(tls);
        let Some(top) = entries.last() else {
            return;
        };
        let s = top.slot as usize;
        let gone = (s < slot || (inclusive && s == slot)) && same_stack(tls, s, slot);
        if !gone {
            return;
        }
        let func = top.func;
        // The slot may still hold the exit trampoline (a longjmp left it): put the original
        // back where that is still the frame's slot... it is not: the frame is gone, the memory
        // belongs to someone else now. Leave it.
        tls.shadow_top -= SH_BYTES;
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
    for e in shadow_entries(tls) {
        // SAFETY: the slot of a live frame of this thread (above the current one).
        unsafe {
            if *e.slot == e.ret {
                *e.slot = trampoline;
            }
        }
    }
}

/// Puts every original return address of this thread's shadow stack back, newest first (an
/// unwinder is about to walk the stack). A slot that no longer holds the trampoline belongs to
/// something else now and is left alone.
fn restore_return_addresses(tls: &mut Tls) {
    let trampoline = arch::exit_trampoline();
    for e in shadow_entries(tls).iter().rev() {
        // SAFETY: a return slot this thread's fast path replaced; if the frame is still there
        // it holds the trampoline, and the original goes back.
        unsafe {
            if *e.slot == trampoline {
                *e.slot = e.ret;
            }
        }
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
        // SAFETY: slot is the function's return slot (per the contract).
        unsafe { tail_call(tls, block, slot, ts) };
        if tls.unwound != 0 {
            after_unwinding(tls, block, slot_addr, true, ts);
        } else {
            close_gone(tls, block, slot_addr, true, ts);
        }
    }
    if slot_addr == 1 {
        event(tls, block, EV_EXIT, self_pc, ts);
        return;
    }
    let room = tls.shadow_top + SH_BYTES <= tls.shadow_end;
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

/// A tail call (`jmp`/`jg` from one traced function to the next, which -O2 code makes): the
/// newest entry's frame has the same return slot as the new one, and the slot still holds the
/// exit trampoline, replaced for that frame. That function is done: its exit is now, and the
/// new function returns where it would have (the caller records it as usual).
///
/// # Safety
/// `slot` is the new function's return slot.
unsafe fn tail_call(tls: &mut Tls, block: &ThreadBlock, slot: *mut usize, ts: u64) {
    let Some(top) = shadow_entries(tls).last() else {
        return;
    };
    // SAFETY: per the contract.
    if top.slot != slot || unsafe { *slot } != arch::exit_trampoline() {
        return;
    }
    let (ret, func) = (top.ret, top.func);
    tls.shadow_top -= SH_BYTES;
    event(tls, block, EV_EXIT, func, ts);
    // SAFETY: per the contract.
    unsafe { *slot = ret };
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
    if let Some(block) = block {
        if tls.unwound != 0 {
            after_unwinding(tls, block, slot_addr, false, ts);
        } else {
            close_gone(tls, block, slot_addr, false, ts);
        }
    }
    let ret = match shadow_entries(tls).last() {
        Some(top) if top.slot as usize == slot_addr => {
            let (ret, func) = (top.ret, top.func);
            tls.shadow_top -= SH_BYTES;
            if let Some(block) = block
                && crate::runtime::recording()
            {
                event(tls, block, EV_EXIT, func, ts);
            }
            ret
        }
        _ => {
            message!("trace mode lost track of a return address; aborting");
            // SAFETY: abort has no preconditions; there is nowhere to return to.
            unsafe { libc::abort() }
        }
    };
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
    ret
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
    tls.unwound = 1;
}

/// After an unwinder that only looked (a backtrace): every frame is still there; the exit
/// trampoline goes back into each.
extern "C" fn unwind_looked() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    if tls.unwound == 0 {
        return;
    }
    tls.unwound = 0;
    let trampoline = arch::exit_trampoline();
    for e in shadow_entries(tls) {
        // SAFETY: a live frame's return slot, holding its original address right now.
        unsafe {
            if *e.slot == e.ret {
                *e.slot = trampoline;
            }
        }
    }
}

guarded_entry! {
    /// Called by the unwinder wrappers before the real unwinder runs.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_begin() => unwind_begin
}
guarded_entry! {
    /// Called by the backtrace wrappers after the real one returned.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_looked() => unwind_looked
}

/// Writes the final meta lines (exit, exec): every thread's losses, the closing clock pair.
pub fn finish() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *arch::tls() };
    if let Some(block) = unsafe { tls.block.as_ref() } {
        flush_lost(tls, block);
    }
    let (counter, mono, real) = clock_pair();
    meta(format_args!(
        "clock {} {counter:#x} {mono} {real}",
        arch::CLOCK_NAME
    ));
    meta(format_args!("end {counter:#x} {mono}"));
}

/// In the child after fork: a trace of its own (new files; the parent's chunks are the
/// parent's). The shadow stack stays: the child has the same frames.
pub fn after_fork(dir: &[u8]) {
    if !active() {
        return;
    }
    for fd in [&SESSION.events_fd, &SESSION.meta_fd] {
        let old = fd.swap(-1, Ordering::Relaxed);
        if old >= 0 {
            // SAFETY: our own descriptors (the parent keeps its copies).
            unsafe { libc::close(old) };
        }
    }
    SESSION.chunks.store(0, Ordering::Relaxed);
    SESSION.full.store(false, Ordering::Relaxed);
    for block in crate::thread::blocks() {
        // The parent's chunk mappings are shared with the parent: never write them here.
        block.trace.chunk.store(0, Ordering::Relaxed);
        for p in &block.trace.pending {
            p[0].store(0, Ordering::Relaxed);
        }
        block.trace.seq.store(0, Ordering::Relaxed);
    }
    // SAFETY: this thread's TLS block (the only thread).
    let tls = unsafe { &mut *arch::tls() };
    tls.trace_pos = 0;
    tls.trace_end = 0;
    tls.trace_lost = 0;
    let chunk = CHUNK_BYTES.load(Ordering::Relaxed);
    let limit = MAX_CHUNKS
        .load(Ordering::Relaxed)
        .saturating_mul(chunk as u64);
    if start(dir, chunk, limit, DEPTH.load(Ordering::Relaxed))
        && let Some(block) = unsafe { tls.block.as_ref() }
    {
        thread_line(block);
    }
}
