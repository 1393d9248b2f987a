//! What trace mode does around unwinders (src/runtime/interpose.c wraps their entry points):
//! before an unwinder or a backtrace walks the stack, the original return addresses go back;
//! after it, the frames it removed are closed and the others get the exit trampoline again.

use super::chunks::active;
use super::shadow::*;
use crate::{abi, arch, thread};

/// Before an unwinder walks this thread's stack (src/runtime/interpose.c: _Unwind_RaiseException and
/// its siblings, backtrace): the original return addresses go back; the next event fixes up
/// the shadow stack (closes what the unwinder removed, re-replaces what it left).
extern "C" fn unwind_begin() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    restore_return_addresses(tls);
    if tls.unwound != WALKING {
        tls.unwound = UNWOUND;
    }
}

/// Before a backtrace walks this thread's stack (src/runtime/interpose.c: _Unwind_Backtrace,
/// backtrace): the original return addresses go back, and stay there until it is done (the
/// walk's callbacks may make instrumented calls: those are traced, deeper than every walked
/// frame, and leave the walked ones alone).
extern "C" fn unwind_walk_begin() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    if tls.unwound == WALKING {
        return; // a walk inside a walk: the outer one restores
    }
    restore_return_addresses(tls);
    tls.unwound = WALKING;
    tls.walk_base = tls.shadow_top;
}

/// After an unwinder that only looked (a backtrace): every frame is still there; the exit
/// trampoline goes back into each.
extern "C" fn unwind_looked() {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    if tls.unwound != WALKING {
        return;
    }
    tls.unwound = 0;
    let trampoline = arch::exit_trampoline();
    // Only live entries, as restore_return_addresses: not one still being pushed (slot 0: the
    // walk began in a signal handler that interrupted its fast path), nor a tombstone (slot
    // 1: its frame returned, under frames of another stack; `!in_progress` let it through,
    // and its slot was read as an address), nor an XRay frame's (ret 0: its return address
    // was never replaced).
    for e in shadow_entries(tls).iter().filter(|e| live(e) && e.ret != 0) {
        // SAFETY: a live frame's return slot, holding its original address right now.
        unsafe { trampoline_back(e, trampoline) };
    }
}

/// A catch handler starts (src/runtime/interpose.c, __cxa_begin_catch), in the function whose stack
/// pointer is `boundary`: the frames below it are gone (closed now), the ones above are alive
/// (the exit trampoline goes back into them).
extern "C" fn unwind_caught(boundary: usize) {
    if !active() {
        return;
    }
    // SAFETY: this thread's TLS block.
    let tls = unsafe { &mut *abi::tls() };
    if tls.unwound != UNWOUND {
        return;
    }
    // A thread with shadow entries has its block.
    if let Some(block) = thread::block_of(tls) {
        after_unwinding(tls, block, boundary, false, arch::counter());
    }
}

guarded_entry! {
    /// Called by the __cxa_begin_catch wrapper.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_caught(boundary: usize) => unwind_caught
}

guarded_entry! {
    /// Called by the unwinder wrappers before the real unwinder runs.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_begin() => unwind_begin
}

guarded_entry! {
    /// Called by the backtrace wrappers before the real one runs.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_walk_begin() => unwind_walk_begin
}

guarded_entry! {
    /// Called by the backtrace wrappers after the real one returned.
    #[unsafe(no_mangle)]
    pub fn instrfn_unwind_looked() => unwind_looked
}
