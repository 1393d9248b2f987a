//! The shadow stack of trace mode: the entries of the calls whose exits are still to come,
//! and how they are kept true when frames go without returning: longjmp, unwinders, signal
//! handlers left by longjmp, coroutine stacks. A frame is judged gone only by comparing stack
//! addresses on the same stack.

use core::ptr;

use super::events::event;
use crate::abi::Tls;
use crate::abi::format::EV_UNWOUND;
use crate::abi::shadow::{SH_BYTES, Shadow};
use crate::thread::ThreadBlock;
use crate::{arch, sys};

pub fn shadow_entries(tls: &Tls) -> &'static mut [Shadow] {
    let n = (tls.shadow_top - tls.shadow_base) / SH_BYTES;
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the entries between base and top were pushed on this thread's shadow stack.
    unsafe { core::slice::from_raw_parts_mut(tls.shadow_base as *mut Shadow, n) }
}

/// Pops the newest shadow entry: its slot is zeroed first (a free entry's slot is 0, and an
/// entry whose slot is 0 is one a fast path has reserved and not filled yet — see
/// [`in_progress`]).
pub fn pop(tls: &mut Tls) {
    if let Some(top) = shadow_entries(tls).last_mut() {
        top.slot = ptr::null_mut();
        tls.shadow_top -= SH_BYTES;
    }
}

/// Whether a shadow entry is being pushed by the code this thread's slow path interrupted (a
/// signal handler's calls): the fast path reserves the entry first and writes its slot last,
/// so until then the slot is 0. Such an entry and the ones below it are alive.
pub fn in_progress(e: &Shadow) -> bool {
    e.slot.is_null()
}

/// A shadow entry whose frame returned while newer entries (frames on another stack, alive)
/// sat above it: it stays, marked so, until it reaches the top and is dropped.
pub const TOMBSTONE: usize = 1;

pub fn tombstone(e: &Shadow) -> bool {
    e.slot as usize == TOMBSTONE
}

/// A pushed, complete entry of a frame not known to have returned.
pub fn live(e: &Shadow) -> bool {
    e.slot as usize > TOMBSTONE
}

/// Whether two stack addresses can be compared (one frame at or below the other means the
/// lower one is gone): both on the thread's alternate signal stack, or both on the thread's
/// own stack. Frames on any other stack (coroutines: swapcontext, hand-written context
/// switches) are never judged gone by address: such a stack may lie anywhere.
pub fn same_stack(tls: &mut Tls, a: usize, b: usize) -> bool {
    let alt = |x: usize| x >= tls.alt_lo && x < tls.alt_hi;
    if alt(a) || alt(b) {
        return alt(a) && alt(b);
    }
    know_own_stack(tls);
    let own = |x: usize| x >= tls.stack_lo && x < tls.stack_hi;
    own(a) && own(b)
}

/// Finds the thread's own stack, once (`Tls::stack_lo`, `stack_hi`).
pub fn know_own_stack(tls: &mut Tls) {
    if tls.stack_hi == 0 {
        (tls.stack_lo, tls.stack_hi) = own_stack();
    }
}

/// Whether a frame whose return slot is `e`, newer than the code now at slot `s` (returning,
/// or being entered when `inclusive`), is gone: it lies at or below `s` on the same stack
/// (longjmp, an unwinder); or it is a signal handler's, on the alternate signal stack, while
/// `s` is not — code runs off that stack again only once the handlers there are done.
pub fn dead(tls: &mut Tls, e: usize, s: usize, inclusive: bool) -> bool {
    let alt = |x: usize| x >= tls.alt_lo && x < tls.alt_hi;
    if alt(e) && !alt(s) {
        return true;
    }
    (e < s || (inclusive && e == s)) && same_stack(tls, e, s)
}

/// The calling thread's own stack, from /proc/self/maps: the main thread's `[stack]` mapping,
/// extended down to its RLIMIT_STACK (it grows); another thread's is the mapping that holds
/// its thread pointer (glibc and musl put the thread's control block at the top of its
/// stack). If it cannot be told, all of the address space (addresses are then compared as
/// they always were).
fn own_stack() -> (usize, usize) {
    let main = sys::gettid() as i32 == sys::getpid();
    let tp = sys::raw::thread_pointer();
    let Some(found) = sys::maps::find([tp]) else {
        return (0, usize::MAX);
    };
    if !main {
        return found.at[0].map_or((0, usize::MAX), |m| (m.start, m.end));
    }
    let Some(stack) = found.stack else {
        return (0, usize::MAX);
    };
    let (lo, hi) = (stack.start, stack.end);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a local.
    let grow = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY
    {
        lim.rlim_cur as usize
    } else {
        hi - lo
    };
    (hi.saturating_sub(grow.max(hi - lo)), hi)
}

/// This thread's alternate signal stack, if it has one.
pub fn alt_stack() -> (usize, usize) {
    // SAFETY: a query into a zeroed stack_t.
    unsafe {
        let mut ss: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(ptr::null(), &mut ss) == 0 && ss.ss_flags & libc::SS_DISABLE == 0 {
            let lo = ss.ss_sp as usize;
            return (lo, lo + ss.ss_size);
        }
    }
    (0, 0)
}

/// Closes the frames of shadow entries that are gone: those whose return slot lies at or below
/// `slot` (the stack has been reused there, by longjmp or an unwinder), on the same stack.
/// Events `EV_UNWOUND` at `ts`.
pub fn close_gone(tls: &mut Tls, block: &ThreadBlock, slot: usize, inclusive: bool, ts: u64) {
    loop {
        if tls.unwound == WALKING && tls.shadow_top <= tls.walk_base {
            return;
        }
        let entries = shadow_entries(tls);
        let Some(top) = entries.last() else {
            return;
        };
        if in_progress(top) {
            return;
        }
        if tombstone(top) {
            pop(tls);
            continue;
        }
        if !dead(tls, top.slot as usize, slot, inclusive) {
            return;
        }
        let func = top.func;
        // The slot may still hold the exit trampoline (a longjmp left it): put the original
        // back where that is still the frame's slot... it is not: the frame is gone, the memory
        // belongs to someone else now. Leave it.
        pop(tls);
        event(tls, block, EV_UNWOUND, func, ts);
    }
}

/// After an unwinder walked this thread's stack with the original return addresses back in
/// place: frames that are gone (at or below `slot`) are closed, the ones still alive get the
/// exit trampoline again.
pub fn after_unwinding(tls: &mut Tls, block: &ThreadBlock, slot: usize, inclusive: bool, ts: u64) {
    tls.unwound = 0;
    close_gone(tls, block, slot, inclusive, ts);
    let trampoline = arch::exit_trampoline();
    // (Not XRay frames: `ret` 0, their return address was never replaced.)
    for e in shadow_entries(tls).iter().filter(|e| live(e) && e.ret != 0) {
        // SAFETY: a live frame of this thread (above the current one).
        unsafe { trampoline_back(e, trampoline) };
    }
}

/// Where `e`'s frame holds its original return address (its slot, and its second word where
/// the architecture has one: arch::second_slot), the exit trampoline goes back.
///
/// # Safety
/// `e` is a live frame's entry (its slot, and the second word, in that frame).
pub unsafe fn trampoline_back(e: &Shadow, trampoline: usize) {
    // SAFETY: per the contract.
    unsafe { swap_words(e, e.ret, trampoline) }
}

/// Where `e`'s frame holds the exit trampoline (its slot, and its second word), the original
/// return address goes back, for an unwinder's walk.
///
/// # Safety
/// As [`trampoline_back`].
pub unsafe fn original_back(e: &Shadow, trampoline: usize) {
    // SAFETY: per the contract.
    unsafe { swap_words(e, trampoline, e.ret) }
}

/// Each word of `e`'s frame that holds its return address (the slot, the second word) and
/// reads `from` is set to `to`.
///
/// # Safety
/// As [`trampoline_back`].
pub unsafe fn swap_words(e: &Shadow, from: usize, to: usize) {
    let slot = e.slot as usize;
    for word in core::iter::once(slot).chain(arch::second_slot(slot)) {
        let word = word as *mut usize;
        // SAFETY: per the contract, a word of a live frame.
        unsafe {
            if *word == from {
                *word = to;
            }
        }
    }
}

/// `Tls::unwound`: an unwinder ran (fix up at the next event), or a backtrace walks now.
pub const UNWOUND: usize = 1;

pub const WALKING: usize = 2;

/// Puts every original return address of this thread's shadow stack back, newest first (an
/// unwinder is about to walk the stack). A slot that no longer holds the trampoline belongs to
/// something else now and is left alone.
pub fn restore_return_addresses(tls: &mut Tls) {
    let trampoline = arch::exit_trampoline();
    for e in shadow_entries(tls)
        .iter()
        .rev()
        .filter(|e| live(e) && e.ret != 0)
    {
        // SAFETY: a return slot this thread's fast path replaced; if the frame is still there
        // it holds the trampoline, and the original goes back.
        unsafe { original_back(e, trampoline) };
    }
}
