//! The process as the kernel and libc see it: errno, the environment, privileges, thread ids,
//! clocks, the working directory and the file size limit.

use core::ffi::{CStr, c_int};
use core::fmt;

use super::raw::syscall;

/// errno of the last failed libc call.
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's errno (the slow paths give the program its own back).
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
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

/// This process's id.
pub fn getpid() -> i32 {
    // SAFETY: getpid(2) has no arguments and cannot fail.
    unsafe { syscall(libc::SYS_getpid, [0; 6]) as i32 }
}

/// This thread's kernel thread id.
pub fn gettid() -> u32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { syscall(libc::SYS_gettid, [0; 6]) as u32 }
}

/// Whether thread `tid` of this process still exists (tgkill with signal 0 sends nothing).
pub fn thread_alive(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    let r = unsafe {
        syscall(
            libc::SYS_tgkill,
            [getpid() as usize, tid as usize, 0, 0, 0, 0],
        )
    };
    r != -(libc::ESRCH as isize)
}

/// A clock in nanoseconds (the vDSO for CLOCK_MONOTONIC and CLOCK_REALTIME: no system call,
/// async-signal-safe).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// The working directory, read into `buf`; None if it does not fit or cannot be had (a
/// removed directory).
pub fn cwd(buf: &mut [u8]) -> Option<&[u8]> {
    // SAFETY: getcwd(2) into a buffer of its length; the result is the path's length with its
    // NUL, or -errno.
    let n = unsafe {
        syscall(
            libc::SYS_getcwd,
            [buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0, 0],
        )
    };
    (n > 1 && buf[0] == b'/').then(|| &buf[..n as usize - 1])
}

/// The soft limit on the size of a file this process writes (RLIMIT_FSIZE, `ulimit -f`), in
/// bytes; `u64::MAX` if there is none. A write or `fallocate` past it raises SIGXFSZ in the
/// writing thread, whose default action ends the program with a core dump. So every file
/// instrfn grows inside a program is checked against it first ([`fits_size_limit`]), and one
/// at the limit counts as full. Read at each growth: the program may change it.
pub fn file_size_limit() -> u64 {
    let mut lim = [0u64; 2];
    // SAFETY: prlimit64(0: this process, RLIMIT_FSIZE, no new limit, the old one into a local
    // struct rlimit64 of two u64 words).
    let r = unsafe {
        syscall(
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
