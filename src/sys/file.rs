//! Files through raw system calls (no errno, no libc function a program could interpose, no
//! allocation): open, read, write, identify, and keep descriptors away from the low numbers a
//! program hands out.

use core::ffi::{CStr, c_int};

use super::raw::syscall;
use crate::base::text::{FNV_START, fnv1a};

/// Where the runtime's long-lived descriptors go: at or above this number, if the process may
/// have it (away from `dup2` onto fixed numbers and "the first file is 3" assumptions).
pub const HIGH_FD: c_int = 1000;

/// A file opened read-only, closed on drop.
pub struct File(c_int);

impl File {
    pub fn open(path: &CStr) -> Option<File> {
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
        (fd >= 0).then_some(File(fd as c_int))
    }

    pub fn fd(&self) -> c_int {
        self.0
    }

    /// Reads into `buf` from the file's position: the bytes read, 0 at the end, or -errno
    /// (EINTR retried).
    pub fn read(&self, buf: &mut [u8]) -> isize {
        loop {
            // SAFETY: read(2) into `buf`.
            let n = unsafe {
                syscall(
                    libc::SYS_read,
                    [
                        self.0 as usize,
                        buf.as_mut_ptr() as usize,
                        buf.len(),
                        0,
                        0,
                        0,
                    ],
                )
            };
            if n != -(libc::EINTR as isize) {
                return n;
            }
        }
    }

    /// Reads exactly `buf.len()` bytes at `off`.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> bool {
        let mut done = 0;
        while done < buf.len() {
            // SAFETY: pread64(2) into the rest of `buf`.
            let n = unsafe {
                syscall(
                    libc::SYS_pread64,
                    [
                        self.0 as usize,
                        buf[done..].as_mut_ptr() as usize,
                        buf.len() - done,
                        off as usize + done,
                        0,
                        0,
                    ],
                )
            };
            if n == -(libc::EINTR as isize) {
                continue;
            }
            if n <= 0 {
                return false;
            }
            done += n as usize;
        }
        true
    }
}

impl Drop for File {
    fn drop(&mut self) {
        close(self.0);
    }
}

/// Calls `f` with successive pieces of a file's contents, read into a buffer of `N` bytes
/// (small on a signal stack). Returns whether the whole file was read.
pub fn read_file<const N: usize>(path: &CStr, mut f: impl FnMut(&[u8])) -> bool {
    let Some(file) = File::open(path) else {
        return false;
    };
    let mut buf = [0u8; N];
    loop {
        match file.read(&mut buf) {
            0 => return true,
            n if n > 0 => f(&buf[..n as usize]),
            _ => return false,
        }
    }
}

/// A file's size, modification time (ns since the epoch) and FNV-1a hash of its first 4 KiB,
/// through one open file (read in small pieces: this can run on a signal stack).
pub fn identity(path: &CStr) -> Option<(u64, u64, u64)> {
    let file = File::open(path)?;
    // SAFETY: libc::statx is plain data; all zero is a valid value.
    let mut st: libc::statx = unsafe { core::mem::zeroed() };
    // SAFETY: statx(2) of the open descriptor itself (empty path, AT_EMPTY_PATH) into `st`.
    let r = unsafe {
        syscall(
            libc::SYS_statx,
            [
                file.fd() as usize,
                c"".as_ptr() as usize,
                libc::AT_EMPTY_PATH as usize,
                (libc::STATX_SIZE | libc::STATX_MTIME) as usize,
                (&raw mut st) as usize,
                0,
            ],
        )
    };
    if r != 0 {
        return None;
    }
    let mut hash = FNV_START;
    let mut buf = [0u8; 512];
    let mut left = 4096;
    while left > 0 {
        let want = buf.len().min(left);
        let n = file.read(&mut buf[..want]);
        if n <= 0 {
            break;
        }
        hash = fnv1a(hash, &buf[..n as usize]);
        left -= n as usize;
    }
    let mtime = (st.stx_mtime.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(st.stx_mtime.tv_nsec as u64);
    Some((st.stx_size, mtime, hash))
}

/// Device and inode of what `fd` refers to, or the negative errno. `fstat`: the system call
/// every seccomp policy that lets a program look at its files allows (glibc's own `fstat`).
pub fn fd_identity(fd: c_int) -> Result<(u64, u64), isize> {
    // struct stat begins with st_dev and st_ino, 8 bytes each, on all four architectures; it
    // is at most 144 bytes.
    let mut buf = [0u64; 32];
    // SAFETY: fstat of a descriptor into a local buffer larger than struct stat.
    let r = unsafe {
        syscall(
            libc::SYS_fstat,
            [fd as usize, buf.as_mut_ptr() as usize, 0, 0, 0, 0],
        )
    };
    if r < 0 {
        return Err(r);
    }
    Ok((buf[0], buf[1]))
}

/// `fd` moved to [`HIGH_FD`] or above (the old number closed), or `fd` itself if the process
/// may not have one that high.
pub fn move_high(fd: c_int) -> c_int {
    if fd >= HIGH_FD {
        return fd;
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) of our own descriptor.
    let high = unsafe {
        syscall(
            libc::SYS_fcntl,
            [
                fd as usize,
                libc::F_DUPFD_CLOEXEC as usize,
                HIGH_FD as usize,
                0,
                0,
                0,
            ],
        )
    };
    if high < 0 {
        return fd;
    }
    close(fd);
    high as c_int
}

/// Closes a descriptor of ours.
pub fn close(fd: c_int) {
    // SAFETY: close(2) of a descriptor the caller owns.
    unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
}

/// Writes all of `buf` to `fd`, retrying on EINTR and short writes. Err: the errno.
pub fn write_all(fd: c_int, mut buf: &[u8]) -> Result<(), c_int> {
    while !buf.is_empty() {
        // SAFETY: write(2) from a valid slice.
        let n = unsafe {
            syscall(
                libc::SYS_write,
                [fd as usize, buf.as_ptr() as usize, buf.len(), 0, 0, 0],
            )
        };
        if n == -(libc::EINTR as isize) {
            continue;
        }
        if n < 0 {
            return Err(-n as c_int);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}
