//! The meta file: one text line per fact, each written with one `write(2)`: the process, its
//! command line and executable, the clock pairs, loaded and unloaded objects, threads, losses.
//! Its blocks are reserved ahead of its end, so the lines that say what was lost still fit
//! when the events have filled the disk.

use core::ffi::c_int;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::chunks::{SESSION, active};
use crate::abi::format::META_VERSION;
use crate::base::StackBuf;
use crate::sys::objects;
use crate::thread::ThreadBlock;
use crate::{arch, process, sys, xray};

/// The meta file's first lines: format, process, command line, executable, clock, modules.
pub fn write_header() {
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    meta(format_args!("instrfn-trace {META_VERSION}"));
    meta(format_args!(
        "process {pid} {ppid} {}",
        process::image_number_now()
    ));
    let mut line = MetaLine::new();
    line.push(b"cmdline");
    let mut args = StackBuf::<4000>::new();
    sys::file::read_file::<4096>(c"/proc/self/cmdline", |chunk| args.push(chunk));
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
pub static KNOWN: [AtomicUsize; 1024] = [const { AtomicUsize::new(0) }; 1024];

/// Writes a `module` line for each loaded object that has none yet: every object at start, and
/// later the ones `dlopen` loaded meanwhile: right after a dlopen the wrapper could make on
/// the caller's behalf ([`note_opened`]), else at exit, exec, before each dlclose and at
/// `instrfn_flush` (the loader calls no hook of ours when it loads an object).
pub fn note_modules() {
    xray::note_objects();
    module_lines();
}

/// After a dlopen that loaded objects (src/runtime/ `module_opened`, trace mode): their
/// XRay sleds are patched before it returns (waiting for another thread that is patching), and
/// their `module` lines written if the trace has started (else start-up writes them).
pub fn note_opened() {
    xray::note_objects_waiting();
    if active() {
        module_lines();
    }
}

/// The `module` lines of [`note_modules`].
fn module_lines() {
    let note = |m: &objects::Module| {
        let Some(lo) = m.code_start() else {
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
    objects::for_each_shared_object(note);
    note(&objects::Module::executable());
}

/// After dlclose really unloaded `m`: an `unload` line (events after it at these addresses are
/// another object's), and its address may be noted again for the next object there.
pub fn module_unloaded(m: &objects::Module) {
    if !active() {
        return;
    }
    let Some(lo) = m.code_start() else {
        return;
    };
    for k in &KNOWN {
        if k.load(Ordering::Relaxed) == lo {
            k.store(usize::MAX, Ordering::Relaxed);
        }
    }
    xray::forget(lo);
    meta(format_args!("unload {lo:#x} {:#x}", arch::counter()));
}

/// A `module` line for one loaded object: its bias, code range, path and identity (as the
/// `exe` line's: build-id from its notes in memory, then size, mtime and a hash of the first
/// 4 KiB of its file). A relative loader path is made absolute with the working directory of
/// now (the reader may run elsewhere).
fn module_line(m: &objects::Module) {
    let (lo, hi) = m.code_range();
    let mut line = MetaLine::new();
    let _ = write!(line.buf, "module {:#x} {lo:#x} {hi:#x}", m.bias);
    let mut path = StackBuf::<{ objects::MAX_PATH + 1100 }>::new();
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
        objects::Module::executable().build_id(),
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
    let (size, mtime, hash) = file.and_then(sys::file::identity).unwrap_or((0, 0, 0));
    let _ = write!(line.buf, " {size} {mtime} {hash:016x}");
}

/// A (counter, CLOCK_MONOTONIC ns, CLOCK_REALTIME ns) triple, read close together.
/// The counter and CLOCK_MONOTONIC at one instant: the clock read between two counter reads,
/// the tightest bracket of 16 tries, the counter taken at its middle (a thread preempted
/// between the reads would pair values milliseconds apart).
pub fn counter_at_monotonic() -> (u64, u64) {
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

pub fn clock_pair() -> (u64, u64, u64) {
    let (c, mono) = counter_at_monotonic();
    (c, mono, sys::realtime_ns())
}

/// One meta line being built: words are percent-encoded where needed.
pub struct MetaLine {
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
pub static META_BYTES: AtomicU64 = AtomicU64::new(0);
pub static META_RESERVED: AtomicU64 = AtomicU64::new(0);
static META_RESERVING: AtomicBool = AtomicBool::new(false);

/// Reserves the next step of the meta file's blocks (one thread at a time; a failure, the disk
/// full, leaves what was reserved).
pub fn reserve_meta(fd: c_int) {
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
pub fn release_meta() {
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
pub fn meta(args: core::fmt::Arguments<'_>) {
    let mut line = MetaLine::new();
    let _ = core::fmt::write(&mut line.buf, args);
    line.send();
}

/// The `thread` line of `block`'s current owner: slot, tid, name.
pub fn thread_line(block: &ThreadBlock) {
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes and a NUL into the buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let len = name.iter().position(|&b| b == 0).unwrap_or(16);
    let mut line = MetaLine::new();
    let _ = write!(line.buf, "thread {} {}", block.index, sys::gettid());
    line.word(&name[..len]);
    line.send();
}
