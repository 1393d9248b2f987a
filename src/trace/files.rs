//! The trace's open files, kept safe from the program's own descriptor handling.
//!
//! A program may close any descriptor: daemons close every one above 2 as they start (a loop
//! to `sysconf(_SC_OPEN_MAX)`, `close_range`), often after their first instrumented call has
//! opened the trace. The number is then free, and the program's next `open` gets it: a
//! `pwrite` meant for the trace would land in the program's own file. So each use of a trace
//! file's descriptor first checks, with `fstat`, that it still refers to the file that was
//! opened (the same device and inode), and if not reopens that file by its absolute path,
//! checks it is the same file, and keeps the new descriptor; the number the program now uses
//! is never touched. Descriptors are placed at `sys::file::HIGH_FD` and above.
//!
//! What remains: another thread of the program that closes a trace descriptor and opens a
//! file of its own between the check and the write (a window of one system call) is not
//! caught. Raw system calls only: the collector uses these too (no errno, no TLS).

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sys::file::{close, fd_identity as identity, move_high};
use crate::sys::raw::syscall;

/// One of the trace's files: its descriptor and what it is.
pub struct TraceFile {
    fd: AtomicI32,
    /// Device and inode of the file, as opened.
    dev: AtomicU64,
    ino: AtomicU64,
    /// The file's name after the trace path ([`set_path`]): `.meta`, `.events`, `.stage`.
    suffix: &'static [u8],
    /// How to reopen it (no O_CREAT, no O_TRUNC: only the file that was opened will do).
    flags: c_int,
}

impl TraceFile {
    pub const fn new(suffix: &'static [u8], flags: c_int) -> TraceFile {
        TraceFile {
            fd: AtomicI32::new(-1),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            suffix,
            flags,
        }
    }

    /// The descriptor as last set (-1: none), unchecked: for telling whether there is one.
    pub fn raw(&self) -> c_int {
        self.fd.load(Ordering::Acquire)
    }

    /// Takes `fd`, just opened, as this file's (moved to `HIGH_FD` or above if it can be);
    /// returns the descriptor kept.
    pub fn set(&self, fd: c_int) -> c_int {
        let fd = move_high(fd);
        let (dev, ino) = identity(fd).unwrap_or((0, 0));
        self.dev.store(dev, Ordering::Relaxed);
        self.ino.store(ino, Ordering::Relaxed);
        self.fd.store(fd, Ordering::Release);
        fd
    }

    /// Forgets the descriptor and returns it, if it is still this file's (-1 if there was
    /// none, or the program has it now: then it is not ours to close).
    pub fn take(&self) -> c_int {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 && self.is_ours(fd) { fd } else { -1 }
    }

    fn is_ours(&self, fd: c_int) -> bool {
        match identity(fd) {
            Ok(id) => {
                id == (
                    self.dev.load(Ordering::Relaxed),
                    self.ino.load(Ordering::Relaxed),
                )
            }
            // fstat refused (a seccomp filter): nothing to check with.
            Err(e) => e == -(libc::ENOSYS as isize) || e == -(libc::EPERM as isize),
        }
    }

    /// A descriptor of this file to write to: the one kept if it still refers to the file,
    /// else the file reopened by its path (kept from then on), else -1 (the program closed
    /// it and the file is gone, renamed or replaced: whoever asked counts what it could not
    /// write as lost). Never a descriptor of another file.
    pub fn get(&self) -> c_int {
        let fd = self.fd.load(Ordering::Acquire);
        if fd < 0 || self.is_ours(fd) {
            return fd;
        }
        let new = self.reopen();
        if new < 0 {
            return -1;
        }
        match self
            .fd
            .compare_exchange(fd, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                REOPENED.fetch_add(1, Ordering::Relaxed);
                new
            }
            Err(other) => {
                // Another thread reopened it first: its descriptor is the one kept.
                close(new);
                if other >= 0 && self.is_ours(other) {
                    other
                } else {
                    -1
                }
            }
        }
    }

    /// Opens the file by its path again; -1 unless it is the file first opened.
    fn reopen(&self) -> c_int {
        let len = PATH.len.load(Ordering::Acquire);
        if len == 0 {
            return -1;
        }
        let mut p = [0u8; PATH_BYTES + 16];
        // SAFETY: the path is written only before the trace starts (and in a fork child, still
        // alone), never while descriptors are in use; `len` bytes of it are set.
        let path = unsafe { &(&*PATH.bytes.get())[..len] };
        if len + self.suffix.len() + 1 > p.len() {
            return -1;
        }
        p[..len].copy_from_slice(path);
        p[len..len + self.suffix.len()].copy_from_slice(self.suffix);
        // SAFETY: openat of a NUL-terminated path in a local buffer.
        let fd = unsafe {
            syscall(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as isize as usize,
                    p.as_ptr() as usize,
                    (self.flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as usize,
                    0,
                    0,
                    0,
                ],
            )
        };
        if fd < 0 {
            return -1;
        }
        let fd = move_high(fd as c_int);
        if self.is_ours(fd) {
            fd
        } else {
            close(fd);
            -1
        }
    }
}

/// How many times a trace file was found closed (or replaced) under its descriptor and
/// reopened.
static REOPENED: AtomicU32 = AtomicU32::new(0);

/// How many times the program closed a trace file's descriptor, so far (and starts over).
pub fn take_reopened() -> u32 {
    REOPENED.swap(0, Ordering::Relaxed)
}

const PATH_BYTES: usize = 1400;

/// Calls `f(dir, name)` with the trace files' directory and their name without suffix
/// (`<pid>.<k>`); does nothing if no path was kept ([`set_path`]).
pub fn with_path(f: impl FnOnce(&[u8], &[u8])) {
    let len = PATH.len.load(Ordering::Acquire);
    if len == 0 {
        return;
    }
    // SAFETY: see `Path`: `len` bytes are set, and not written while in use.
    let path = unsafe { &(&*PATH.bytes.get())[..len] };
    let slash = path.iter().rposition(|&b| b == b'/').unwrap_or(0);
    f(&path[..slash], &path[slash + 1..]);
}

/// The trace's files' absolute path without their suffix (`<dir>/<pid>.<k>`).
struct Path {
    bytes: UnsafeCell<[u8; PATH_BYTES]>,
    len: AtomicUsize,
}

// SAFETY: `bytes` is written by `set_path` only, before the trace's descriptors are published
// (and in a fork child before anything else of the trace runs), and read after `len` is seen.
unsafe impl Sync for Path {}

static PATH: Path = Path {
    bytes: UnsafeCell::new([0; PATH_BYTES]),
    len: AtomicUsize::new(0),
};

/// Keeps the trace files' path, `dir/name`, for reopening them. Before the trace's
/// descriptors are set. `dir` is absolute (crate::config makes INSTRFN_OUTPUT so at load); a
/// relative one (the working directory was gone or too long then), or a path that does not
/// fit, leaves none: the files are then not reopened.
pub fn set_path(dir: &[u8], name: &[u8]) {
    PATH.len.store(0, Ordering::Release);
    if dir.first() != Some(&b'/') {
        return;
    }
    // SAFETY: see `Path`: nobody reads the path while `len` is 0.
    let buf = unsafe { &mut *PATH.bytes.get() };
    let mut len = 0;
    for part in [dir, b"/", name] {
        if len + part.len() >= PATH_BYTES {
            return;
        }
        buf[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    PATH.len.store(len, Ordering::Release);
}
