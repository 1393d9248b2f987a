//! Writes to code: through /proc/self/mem, which never makes text writable; where that does
//! not work (qemu-user ignores such writes: every write is read back) through mprotect,
//! adding PROT_WRITE to the segment and never taking PROT_EXEC away.

use super::*;

/// Writes code: through /proc/self/mem (opened per batch: a descriptor inherited over fork
/// would write the parent's memory), or with the segments made writable (never losing
/// PROT_EXEC) where that does not work.
pub struct Writer {
    pub mem: i32,
    /// What `mem` was opened as (src/trace/files.rs: the program may close any descriptor
    /// and reuse its number for a file of its own, which a pwrite at a code address would
    /// damage; it is checked before each write).
    pub mem_id: (u64, u64),
    /// Whether the current object's segments are writable now (mprotect route).
    pub open: bool,
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            mem: -1,
            mem_id: (0, 0),
            open: false,
        }
    }

    pub fn begin(&mut self, o: &Object) {
        if ROUTE.load(Ordering::Relaxed) == 0 && self.mem < 0 {
            self.open_mem();
        }
        if ROUTE.load(Ordering::Relaxed) == 1 {
            self.writable(o, true);
        }
    }

    /// Opens /proc/self/mem (at a high descriptor), or takes the mprotect route if it cannot.
    pub fn open_mem(&mut self) {
        // SAFETY: openat(2) of a constant path.
        let fd = unsafe {
            syscall(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as isize as usize,
                    c"/proc/self/mem".as_ptr() as usize,
                    (libc::O_RDWR | libc::O_CLOEXEC) as usize,
                    0,
                    0,
                    0,
                ],
            )
        };
        if fd < 0 {
            ROUTE.store(1, Ordering::Relaxed);
        } else {
            let fd = crate::sys::file::move_high(fd as i32);
            match crate::sys::file::fd_identity(fd) {
                Ok(id) => {
                    self.mem = fd;
                    self.mem_id = id;
                }
                Err(_) => {
                    // Cannot be checked later: not used.
                    // SAFETY: the descriptor just opened.
                    unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
                    ROUTE.store(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether `mem` is still the /proc/self/mem this writer opened.
    pub fn mem_is_ours(&self) -> bool {
        self.mem >= 0 && crate::sys::file::fd_identity(self.mem) == Ok(self.mem_id)
    }

    pub fn end(&mut self, o: &Object) {
        if self.open {
            self.writable(o, false);
        }
    }

    pub fn writable(&mut self, o: &Object, on: bool) {
        if self.open == on {
            return;
        }
        for &(start, end, prot) in &o.segs[..o.nsegs] {
            let prot = if on { prot | libc::PROT_WRITE } else { prot };
            // SAFETY: the object's own executable segment, PROT_EXEC kept throughout.
            unsafe {
                syscall(
                    libc::SYS_mprotect,
                    [start, end - start, prot as usize, 0, 0, 0],
                )
            };
        }
        self.open = on;
    }

    /// Writes `bytes` at `at`; returns whether they are there.
    pub fn write(&mut self, o: &Object, at: usize, bytes: &[u8]) -> bool {
        if ROUTE.load(Ordering::Relaxed) == 0 && self.pwrite(at, bytes) {
            return true;
        }
        self.fallback(o);
        for (i, &b) in bytes.iter().enumerate() {
            // SAFETY: a sled's bytes in a segment made writable by `fallback`.
            unsafe { core::ptr::write_volatile((at + i) as *mut u8, b) };
        }
        sled::flush(at, bytes.len());
        code_at_is(at, bytes)
    }

    /// Writes a sled's first bytes (its first instruction) with one store.
    pub fn write_head(&mut self, o: &Object, at: usize, head: [u8; sled::HEAD]) -> bool {
        if ROUTE.load(Ordering::Relaxed) == 0 && self.pwrite(at, &head) {
            return true;
        }
        self.fallback(o);
        sled::store_head(at, head);
        sled::flush(at, sled::HEAD);
        code_at_is(at, &head)
    }

    /// The /proc/self/mem route: pwrite, then read back (qemu-user takes the write and
    /// leaves the guest's memory as it was).
    pub fn pwrite(&mut self, at: usize, bytes: &[u8]) -> bool {
        if self.mem < 0 {
            return false;
        }
        if !self.mem_is_ours() {
            // The program closed it (its number may be a file of the program's now: left
            // alone). Opened again.
            self.mem = -1;
            self.open_mem();
            if self.mem < 0 {
                return false;
            }
        }
        // SAFETY: pwrite64(2) of our own bytes into our own memory at a sled.
        let n = unsafe {
            syscall(
                libc::SYS_pwrite64,
                [
                    self.mem as usize,
                    bytes.as_ptr() as usize,
                    bytes.len(),
                    at,
                    0,
                    0,
                ],
            )
        };
        n == bytes.len() as isize && code_at_is(at, bytes)
    }

    /// From now on (this process), the mprotect route.
    pub fn fallback(&mut self, o: &Object) {
        ROUTE.store(1, Ordering::Relaxed);
        self.writable(o, true);
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.mem_is_ours() {
            // SAFETY: our own descriptor.
            unsafe { syscall(libc::SYS_close, [self.mem as usize, 0, 0, 0, 0, 0]) };
        }
    }
}

pub fn code_at(a: usize) -> [u8; sled::BYTES] {
    let mut c = [0u8; sled::BYTES];
    for (i, b) in c.iter_mut().enumerate() {
        // SAFETY: a sled inside the object's executable (readable) segment.
        *b = unsafe { core::ptr::read_volatile((a + i) as *const u8) };
    }
    c
}

pub fn code_at_is(at: usize, bytes: &[u8]) -> bool {
    bytes.iter().enumerate().all(|(i, &b)| {
        // SAFETY: readable code bytes of a sled.
        unsafe { core::ptr::read_volatile((at + i) as *const u8) == b }
    })
}
