//! One-line messages on stderr (`instrfn: ...`), without allocating, and the text of an errno.

use core::ffi::c_int;
use core::fmt;

use crate::base::StackBuf;

/// Prints one line, `instrfn: <message>`, on stderr.
pub fn message(args: fmt::Arguments<'_>) {
    let mut line = StackBuf::<512>::new();
    line.push(b"instrfn: ");
    let _ = fmt::write(&mut line, args);
    if line.truncated() {
        line.clear();
        line.push(b"instrfn: (message too long)");
    }
    line.push(b"\n");
    let _ = super::file::write_all(2, line.as_bytes());
}

/// `message!("...", args)`: one line on stderr, prefixed `instrfn: `.
macro_rules! message {
    ($($arg:tt)*) => { $crate::sys::message::message(format_args!($($arg)*)) };
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
