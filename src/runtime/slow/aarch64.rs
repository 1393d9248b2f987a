//! aarch64's slow-path routes (from `instrfn_aarch64_slow`, src/arch/aarch64/counting.s):
//! the trace slow path with the call site classified first (pointer authentication), tail
//! calls ended, and the frame pointer of a pushed shadow entry filled in; the exit
//! trampoline's search for the returning frame; gmon mode's slow path returning 0.

use crate::abi::Tls;
use crate::abi::shadow::{SH_BYTES, SH_FN, SH_RET, SH_SLOT};
use crate::arch::{self, SH_FP};

/// The shadow entries of this thread, oldest first, as raw entry addresses.
fn entries(tls: &Tls) -> impl DoubleEndedIterator<Item = usize> {
    (tls.shadow_base..tls.shadow_top).step_by(SH_BYTES)
}

/// Reads word `off` of the shadow entry at `e`.
///
/// # Safety
/// `e` must be an entry of this thread's shadow stack.
unsafe fn field(e: usize, off: usize) -> usize {
    // SAFETY: per the contract.
    unsafe { ((e + off) as *const usize).read() }
}

/// A tail call: the function entered now jumped here from one whose return address we had
/// replaced (its return slot still holds the trampoline, the frame pointer it returns with is
/// the tail-calling function's). That function is done: its exit now, and this one gets its
/// original return address back (the caller it returns to is the real one). On x86_64 both
/// share one return slot and crate::trace::slow sees it; here their frame records may lie apart.
///
/// # Safety
/// `slot` is the return slot of the instrumented function being entered (x29 + 8).
unsafe fn tail_call(tls: *mut Tls, slot: *mut usize) {
    // SAFETY: this thread's TLS block (the slow path's contract).
    let t = unsafe { &mut *tls };
    // SAFETY: slot and the saved x29 below it are the entered function's frame record.
    let (ret, fp) = unsafe { (*slot, *slot.sub(1)) };
    if ret != arch::exit_trampoline() || t.shadow_top == t.shadow_base || t.unwound != 0 {
        return;
    }
    let top = t.shadow_top - SH_BYTES;
    // SAFETY: top is the newest entry.
    let (top_ret, top_slot, top_fn, top_fp) = unsafe {
        (
            field(top, SH_RET),
            field(top, SH_SLOT),
            field(top, SH_FN),
            field(top, SH_FP),
        )
    };
    // Not an entry being pushed (slot 0: this call is a signal handler's, which interrupted
    // that push) nor a tombstone (slot 1).
    if top_fp != fp || top_slot <= 1 {
        return;
    }
    // SAFETY: top is the newest entry: popped with its slot zeroed (crate::trace::shadow::pop).
    unsafe { ((top + SH_SLOT) as *mut usize).write(0) };
    t.shadow_top = top;
    // SAFETY: slot 1 records an exit event of top_fn (the -finstrument-functions route).
    unsafe { super::instrfn_trace_slow(tls, core::ptr::without_provenance_mut(1), top_fn) };
    // SAFETY: the entered function's return slot.
    unsafe { *slot = top_ret };
}

/// The trace slow path of the fast paths: `instrfn_trace_slow(tls, slot, self_pc)` with this
/// call site classified first (for `replaceable`), a tail call ended, and the frame pointer of
/// a shadow entry it pushed filled in. Returns 0 (return where the call came from).
///
/// # Safety
/// Only `instrfn_aarch64_slow` calls this, as `instrfn_trace_slow`'s contract says.
#[unsafe(no_mangle)]
unsafe extern "C" fn instrfn_aarch64_trace_slow(
    tls: *mut Tls,
    slot: *mut usize,
    self_pc: usize,
) -> usize {
    let saved_errno = crate::sys::errno();
    let hijack = slot as usize > 1;
    let class = arch::class_word();
    if hijack {
        *class = arch::site_class(self_pc);
        // SAFETY: per the contract.
        unsafe { tail_call(tls, slot) };
    }
    // SAFETY: per the contract.
    unsafe { super::instrfn_trace_slow(tls, slot, self_pc) };
    if hijack {
        *class = 0;
        // SAFETY: this thread's TLS block.
        let t = unsafe { &*tls };
        // The frame pointer goes in after the slot here: the slow path runs with every
        // signal blocked, so no handler on this thread sees the entry in between (the fast
        // path, which handlers do interrupt, writes it before the slot).
        if let Some(top) = entries(t).next_back()
            // SAFETY: the newest entry.
            && unsafe { field(top, SH_SLOT) } == slot as usize
        {
            // SAFETY: the entry just pushed, and the frame record below its slot.
            unsafe { ((top + SH_FP) as *mut usize).write(*slot.sub(1)) };
        }
    }
    // SAFETY: restores this thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
    0
}

/// The exit trampoline's slow path: finds the returning frame's shadow entry (the newest whose
/// frame pointer is `fp` and whose slot lies below `cfa`, leaving out entries being pushed,
/// slot 0, whose frame pointer may already be written, and tombstones, slot 1), then
/// `instrfn_trace_exit_slow(tls, slot)` closes the ones above it, pops it and writes its exit.
/// Returns the original return address.
///
/// # Safety
/// Only `instrfn_aarch64_exit_slow` calls this, with `cfa` = sp at the trampoline and `fp` =
/// x29 there.
#[unsafe(no_mangle)]
unsafe extern "C" fn instrfn_aarch64_trace_exit(tls: *mut Tls, cfa: usize, fp: usize) -> usize {
    // SAFETY: this thread's TLS block.
    let t = unsafe { &*tls };
    let found = entries(t).rev().find(|&e| {
        // SAFETY: entries of this thread's shadow stack.
        let slot = unsafe { field(e, SH_SLOT) };
        // SAFETY: as above.
        slot > 1 && slot < cfa && unsafe { field(e, SH_FP) } == fp
    });
    match found {
        // SAFETY: per the contract, with the returning frame's slot.
        Some(e) => unsafe { super::instrfn_trace_exit_slow(tls, field(e, SH_SLOT) as _) },
        None => {
            message!("trace mode lost track of a return address; aborting");
            // SAFETY: abort has no preconditions; there is nowhere to return to.
            unsafe { libc::abort() }
        }
    }
}

/// gmon mode's slow path, `instrfn_slow_path(tls, from_pc, self_pc)`, returning 0 (return where
/// the call came from) as `instrfn_aarch64_slow` expects.
///
/// # Safety
/// As `instrfn_slow_path`.
#[unsafe(no_mangle)]
unsafe extern "C" fn instrfn_aarch64_gmon_slow(
    tls: *mut Tls,
    from_pc: usize,
    self_pc: usize,
) -> usize {
    // SAFETY: per the contract.
    unsafe { super::instrfn_slow_path(tls, from_pc, self_pc) };
    0
}
