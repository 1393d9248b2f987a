//! Thin, allocation-free wrappers over the few system services the runtime uses. Everything
//! here is async-signal-safe in practice (mmap, write, clock_gettime), so the writer can run
//! from a signal handler or a fork child.

use core::ffi::{CStr, c_char, c_int};
use core::fmt;
use core::ptr::NonNull;

/// Maps `len` bytes of zeroed, private, lazily committed memory.
pub fn map_zeroed(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: an anonymous private mapping has no preconditions; the result is checked.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(p.cast())
    }
}

/// Unmaps memory obtained from [`map_zeroed`].
///
/// # Safety
/// `p`/`len` must be a whole mapping from `map_zeroed` that nothing references any more.
pub unsafe fn unmap(p: NonNull<u8>, len: usize) {
    // SAFETY: per the contract.
    unsafe { libc::munmap(p.as_ptr().cast(), len) };
}

#[cfg(instrfn_wrapped)]
unsafe extern "C" {
    /// libc's own sigaction (src/interpose.c wraps the exported name), or null before that
    /// file's constructor has run.
    static instrfn_real_sigaction:
        Option<unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int>;
}

/// libc's sigaction, past instrfn's own wrapper of it (which hides instrfn's crash handlers
/// from the program, src/crash.rs). Returns whether it succeeded.
pub fn sigaction(
    sig: c_int,
    act: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> bool {
    let act = act.map_or(core::ptr::null(), |a| a as *const libc::sigaction);
    let old = old.map_or(core::ptr::null_mut(), |o| o as *mut libc::sigaction);
    #[cfg(instrfn_wrapped)]
    // SAFETY: reads a pointer the C constructor wrote before any runtime code ran.
    if let Some(real) = unsafe { instrfn_real_sigaction } {
        // SAFETY: valid (or null) action pointers for libc's sigaction.
        return unsafe { real(sig, act, old) } == 0;
    }
    // SAFETY: valid (or null) action pointers.
    unsafe { libc::sigaction(sig, act, old) == 0 }
}

/// The handler address installed for `sig` (SIG_DFL, SIG_IGN or a function).
pub fn handler_of(sig: c_int) -> usize {
    // SAFETY: all-zero is a valid sigaction to be filled.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    sigaction(sig, None, Some(&mut old));
    old.sa_sigaction
}

/// Installs `handler` (an SA_SIGINFO function) for `sig` with every signal masked while it
/// runs, and `flags` added.
pub fn install_handler(sig: c_int, handler: usize, flags: c_int) -> bool {
    // SAFETY: all-zero is a valid sigaction; sigfillset fills its mask.
    let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_SIGINFO | flags;
    // SAFETY: act.sa_mask is a valid sigset.
    unsafe { libc::sigfillset(&mut act.sa_mask) };
    sigaction(sig, Some(&act), None)
}

/// errno of the last failed call.
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// The value of environment variable `name`, borrowed from the environment.
pub fn getenv(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv reads the environment; the result is a NUL-terminated string that lives
    // as long as the environment entry (the runtime copies what it keeps).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a valid C string.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Whether the process runs with elevated privileges (setuid and the like): then, as glibc
/// does for GMON_OUT_PREFIX, the environment does not choose output files.
pub fn secure_mode() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Writes all of `buf` to `fd`, retrying on EINTR and short writes.
pub fn write_all(fd: c_int, mut buf: &[u8]) -> Result<(), c_int> {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// The soft limit on the size of a file this process writes (RLIMIT_FSIZE, `ulimit -f`), in
/// bytes; `u64::MAX` if there is none. A write or `fallocate` past it raises SIGXFSZ in the
/// thread that made it, whose default action ends the whole program with a core dump (the
/// program's own threads grow trace files too, with signals blocked only for the moment, and
/// the signal waits for them to unblock it), so every file instrfn grows inside a program is
/// checked against it first ([`fits_size_limit`]), and one at the limit counts as full.
/// (Before: `ulimit -f 200` and a trace killed the program, its output unwritten.) Read at
/// each growth: the program may change it. A raw system call (no errno): the
/// collector uses it too.
pub fn file_size_limit() -> u64 {
    let mut lim = [0u64; 2];
    // SAFETY: prlimit64(0: this process, RLIMIT_FSIZE, no new limit, the old one into a local
    // struct rlimit64 of two u64 words).
    let r = unsafe {
        crate::collector::syscall(
            libc::SYS_prlimit64,
            [
                0,
                libc::RLIMIT_FSIZE as usize,
                0,
                lim.as_mut_ptr() as usize,
                0,
                0,
            ],
        )
    };
    if r < 0 { u64::MAX } else { lim[0] }
}

/// Whether a file may grow to `end` bytes without raising SIGXFSZ ([`file_size_limit`]).
pub fn fits_size_limit(end: u64) -> bool {
    end <= file_size_limit()
}

/// The file size limit for messages, in the unit `ulimit -f` takes (KiB) where it is one.
pub struct SizeLimit(pub u64);

impl fmt::Display for SizeLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1024) {
            write!(f, "ulimit -f: {} KiB", self.0 >> 10)
        } else {
            write!(f, "RLIMIT_FSIZE: {} bytes", self.0)
        }
    }
}

/// The working directory, read into `buf` (getcwd(2) as a raw system call: no errno, so the
/// collector may use it too); None if it does not fit or cannot be had (a removed directory).
pub fn cwd(buf: &mut [u8]) -> Option<&[u8]> {
    // SAFETY: getcwd(2) into a buffer of its length; the result is the path's length with its
    // NUL, or -errno.
    let n = unsafe {
        crate::collector::syscall(
            libc::SYS_getcwd,
            [buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0, 0],
        )
    };
    (n > 1 && buf[0] == b'/').then(|| &buf[..n as usize - 1])
}

/// A fixed-capacity byte buffer on the stack that implements `fmt::Write`; output past the
/// capacity is cut off (messages and paths only, never data).
pub struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    truncated: bool,
}

impl<const N: usize> StackBuf<N> {
    pub const fn new() -> Self {
        StackBuf {
            buf: [0; N],
            len: 0,
            truncated: false,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let room = N - self.len;
        let n = bytes.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        self.truncated |= n < bytes.len();
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The contents followed by a NUL, if they fit and contain no NUL.
    pub fn as_cstr(&mut self) -> Option<&CStr> {
        if self.len >= N || self.truncated || self.as_bytes().contains(&0) {
            return None;
        }
        self.buf[self.len] = 0;
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).ok()
    }

    /// The contents as a C string pointer; only after [`as_cstr`](Self::as_cstr) succeeded.
    pub fn as_c_ptr(&self) -> *const c_char {
        assert!(self.len < N && self.buf[self.len] == 0);
        self.buf.as_ptr().cast()
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }
}

impl<const N: usize> fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

/// Prints one line, `instrfn: <message>`, on stderr without allocating.
pub fn message(args: fmt::Arguments<'_>) {
    let mut line = StackBuf::<512>::new();
    line.push(b"instrfn: ");
    let _ = fmt::write(&mut line, args);
    if line.truncated() {
        line.clear();
        line.push(b"instrfn: (message too long)");
    }
    line.push(b"\n");
    let _ = write_all(2, line.as_bytes());
}

/// `message!("...", args)`: one line on stderr, prefixed `instrfn: `.
macro_rules! message {
    ($($arg:tt)*) => { $crate::sys::message(format_args!($($arg)*)) };
}

/// Shows a byte string (a path, an environment value) in a message, lossily.
pub struct Bytes<'a>(pub &'a [u8]);

impl fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{fffd}")?;
            }
        }
        Ok(())
    }
}

/// The description of an errno value, from a fixed table (glibc's wording): `strerror_r` may
/// take locale locks, and messages are printed from signal handlers too.
pub struct Errno(pub c_int);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self.0 {
            libc::EPERM => "Operation not permitted",
            libc::ENOENT => "No such file or directory",
            libc::EINTR => "Interrupted system call",
            libc::EIO => "Input/output error",
            libc::E2BIG => "Argument list too long",
            libc::ENOEXEC => "Exec format error",
            libc::EBADF => "Bad file descriptor",
            libc::EAGAIN => "Resource temporarily unavailable",
            libc::ENOMEM => "Cannot allocate memory",
            libc::EACCES => "Permission denied",
            libc::EFAULT => "Bad address",
            libc::EBUSY => "Device or resource busy",
            libc::EEXIST => "File exists",
            libc::EXDEV => "Invalid cross-device link",
            libc::ENOTDIR => "Not a directory",
            libc::EISDIR => "Is a directory",
            libc::EINVAL => "Invalid argument",
            libc::ENFILE => "Too many open files in system",
            libc::EMFILE => "Too many open files",
            libc::ETXTBSY => "Text file busy",
            libc::EFBIG => "File too large",
            libc::ENOSPC => "No space left on device",
            libc::EROFS => "Read-only file system",
            libc::ENAMETOOLONG => "File name too long",
            libc::ENOSYS => "Function not implemented",
            libc::ELOOP => "Too many levels of symbolic links",
            libc::EDEADLK => "Resource deadlock avoided",
            libc::EDQUOT => "Disk quota exceeded",
            _ => return write!(f, "error {}", self.0),
        };
        f.write_str(text)
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the vDSO: no system call, async-signal-safe).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This thread's kernel thread id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Whether thread `tid` of this process still exists (tgkill with signal 0 sends nothing).
pub fn thread_alive(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    let r = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid() as libc::c_long,
            tid as libc::c_long,
            0 as libc::c_long,
        )
    };
    r == 0 || errno() != libc::ESRCH
}
