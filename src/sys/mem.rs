//! Memory from the kernel: zeroed anonymous mappings, and their release. Raw system calls, so
//! the collector thread and signal handlers may map too.

use core::ptr::NonNull;

use super::raw;

/// Maps `len` bytes of zeroed, private, lazily committed memory; Err: the errno.
pub fn map_anon(len: usize) -> Result<NonNull<u8>, i32> {
    // SAFETY: an anonymous private mapping has no preconditions; the result is checked.
    let p = unsafe {
        raw::mmap(
            0,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p < 0 {
        Err(-p as i32)
    } else {
        NonNull::new(p as *mut u8).ok_or(libc::ENOMEM)
    }
}

/// [`map_anon`], None if the memory cannot be had.
pub fn map_zeroed(len: usize) -> Option<NonNull<u8>> {
    map_anon(len).ok()
}

/// Unmaps `len` bytes at `p`.
///
/// # Safety
/// `p`/`len` must be whole pages of a mapping of ours that nothing references any more.
pub unsafe fn unmap(p: NonNull<u8>, len: usize) {
    // SAFETY: per the contract.
    unsafe { raw::syscall(libc::SYS_munmap, [p.as_ptr() as usize, len, 0, 0, 0, 0]) };
}

/// Makes the page at `p` inaccessible (a guard page below a stack).
///
/// # Safety
/// `p` must be a page of a mapping of ours that nothing uses.
pub unsafe fn guard_page(p: NonNull<u8>, len: usize) {
    // SAFETY: per the contract.
    unsafe {
        raw::syscall(
            libc::SYS_mprotect,
            [p.as_ptr() as usize, len, libc::PROT_NONE as usize, 0, 0, 0],
        )
    };
}

/// [`map_zeroed`] as an address: 0 if the memory cannot be had.
pub fn map_addr(len: usize) -> usize {
    map_zeroed(len).map_or(0, |p| p.as_ptr() as usize)
}

/// Unmaps what [`map_addr`] mapped (nothing for 0).
pub fn unmap_addr(p: usize, len: usize) {
    if let Some(p) = NonNull::new(p as *mut u8) {
        // SAFETY: the caller's mapping from map_addr, which nothing uses any more.
        unsafe { unmap(p, len) };
    }
}
