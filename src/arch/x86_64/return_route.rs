//! gcc's return route (`-pg -mfentry -minstrument-return=call`): the code ranges whose
//! `__fentry__` calls replace no return address, which src/arch/x86_64/return.s reads, and how
//! to tell that the code of the executable the runtime is linked into calls `__return__`.
//! Which objects call it is decided in crate::trace (`returns`).

use core::sync::atomic::{AtomicUsize, Ordering};

/// Most code ranges at once (`instrfn_x86_64_return_ranges` holds as many pairs).
pub const RANGES: usize = 32;

unsafe extern "C" {
    /// [lo, hi) pairs; hi 0: free. Read by the `__fentry__` fast path without a lock.
    static instrfn_x86_64_return_ranges: [[AtomicUsize; 2]; RANGES];
    /// The pairs the fast path looks at.
    static instrfn_x86_64_return_count: AtomicUsize;
    /// `__return__`'s address, bound within the runtime (src/arch/x86_64/mod.rs).
    fn instrfn_x86_64_return_entry();
}

fn ranges() -> &'static [[AtomicUsize; 2]; RANGES] {
    // SAFETY: a table of return.s, only accessed atomically.
    unsafe { &*core::ptr::addr_of!(instrfn_x86_64_return_ranges) }
}

fn count() -> &'static AtomicUsize {
    // SAFETY: a word of return.s, only accessed atomically.
    unsafe { &*core::ptr::addr_of!(instrfn_x86_64_return_count) }
}

/// Adds the code range [lo, hi): from now on `__fentry__` calls from there replace nothing.
/// Returns false if the table is full. A range already there is not added again.
pub fn add(lo: usize, hi: usize) -> bool {
    if lo == 0 || hi <= lo {
        return true;
    }
    if ranges()
        .iter()
        .any(|r| r[0].load(Ordering::Relaxed) == lo && r[1].load(Ordering::Relaxed) != 0)
    {
        return true;
    }
    for (i, r) in ranges().iter().enumerate() {
        // A free pair is claimed by its lo; its hi, which makes it match, is stored next, and
        // the count after both (the fast path reads them in the other order).
        if r[0]
            .compare_exchange(0, lo, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            r[1].store(hi, Ordering::Release);
            count().fetch_max(i + 1, Ordering::Release);
            return true;
        }
    }
    false
}

/// Removes the range that begins at `lo` (its object was unloaded): its hi first, so the fast
/// path never matches it again, then its lo, which frees the pair.
pub fn remove(lo: usize) {
    for r in ranges() {
        if r[0].load(Ordering::Relaxed) == lo {
            r[1].store(0, Ordering::Release);
            r[0].store(0, Ordering::Release);
        }
    }
}

/// The address of the runtime's own `__return__` (its hidden alias: the exported name may
/// resolve to a program's definition).
pub fn entry() -> usize {
    instrfn_x86_64_return_entry as *const () as usize
}

/// Whether the code in [start, end) calls `target` directly: a `call rel32` (`e8`, also gcc's
/// `addr32 call` of a relaxed `call *foo@GOTPCREL(%rip)`) whose destination is `target`. This is
/// how a program built with -minstrument-return and linked with the runtime (libinstrfn.a)
/// calls `__return__`: such a link leaves no dynamic symbol to see it by. A byte sequence
/// inside another instruction matches only if its 4 bytes happen to reach `target` exactly.
///
/// # Safety
/// [start, end) is mapped and readable (an executable segment of a loaded object).
pub unsafe fn calls_to(start: usize, end: usize, target: usize) -> bool {
    if end < start + 5 {
        return false;
    }
    // SAFETY: per the contract.
    let code = unsafe { core::slice::from_raw_parts(start as *const u8, end - start) };
    let mut at = 0;
    while let Some(i) = code[at..code.len() - 4].iter().position(|&b| b == 0xe8) {
        let op = at + i;
        let rel = i32::from_le_bytes([code[op + 1], code[op + 2], code[op + 3], code[op + 4]]);
        if (start + op + 5).wrapping_add(rel as isize as usize) == target {
            return true;
        }
        at = op + 1;
    }
    false
}
