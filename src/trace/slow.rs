//! The slow paths of trace mode, entered (through crate::runtime::slow) with the guard held and
//! every signal blocked: a counting call the fast path could not record, an exit the exit
//! trampoline could not pair with its entry, XRay entries and exits, and gcc's return route
//! (`__fentry__` and `__return__` of -minstrument-return code), which takes XRay's.

use core::ptr;
use core::sync::atomic::Ordering;

use super::chunks::active;
use super::events::{event, refill};
use super::settings::{DROP_DEEP, HIJACK, NOEXIT};
use super::shadow::*;
use crate::abi::format::{EV_ENTRY, EV_EXIT, EV_NOEXIT, EV_UNWOUND};
use crate::abi::shadow::{SH_BYTES, Shadow};
use crate::abi::{self, Mode, Tls};
use crate::arch;
use crate::thread::{self, ThreadBlock};

/// The slow path of a trace-mode counting call, with the guard held and signals blocked:
/// records the call completely. `slot` is the return slot of an mcount/fentry call (its
/// return address is replaced), 0 for `__cyg_profile_func_enter`, 1 for `..._exit`.
///
/// # Safety
/// `tls` is this thread's Tls, `block` its block, and `slot` (when above 1) the instrumented
/// function's return slot.
pub unsafe fn call(tls: &mut Tls, block: &ThreadBlock, slot: *mut usize, self_pc: usize) {
    let ts = arch::counter();
    let slot_addr = slot as usize;
    let hijack = slot_addr > 1;
    if hijack {
        if tls.unwound == UNWOUND {
            after_unwinding(tls, block, slot_addr, false, ts);
        }
        // SAFETY: slot is the function's return slot (per the contract).
        unsafe { tail_called(tls, block, slot, ts) };
        // The program may have set (or changed) its alternate signal stack meanwhile.
        (tls.alt_lo, tls.alt_hi) = alt_stack();
        close_gone(tls, block, slot_addr, true, ts);
    }
    if slot_addr == 1 {
        event(tls, block, EV_EXIT, self_pc, ts);
        return;
    }
    // A thread without a chunk yet (its first event, or its first after fork) takes one now:
    // that can take up to a millisecond (the file grown, mapped and faulted in), which is the
    // runtime's time, not the function's, so the entry is stamped after it. (Every event this
    // thread wrote before is older than `ts`.)
    let ts = if tls.trace_end == 0 && refill(tls, block, self_pc, 0) {
        arch::counter()
    } else {
        ts
    };
    let room = tls.shadow_top + SH_BYTES <= tls.shadow_end;
    if hijack && !room && DROP_DEEP.load(Ordering::Relaxed) {
        // Deeper than INSTRFN_DEPTH: no events (nothing replaced: its callees come here too).
        tls.dropped += 1;
        return;
    }
    // SAFETY: slot is the function's return slot (per the contract).
    let replaceable = hijack && arch::replaceable(unsafe { *slot });
    if hijack && (!room || !HIJACK.load(Ordering::Relaxed) || !replaceable) {
        NOEXIT.fetch_add(1, Ordering::Relaxed);
        tls.entry_only += 1;
        event(tls, block, EV_NOEXIT, self_pc, ts);
        return;
    }
    event(tls, block, EV_ENTRY, self_pc, ts);
    if hijack {
        let e = tls.shadow_top as *mut Shadow;
        // SAFETY: room checked above; slot is the function's return slot (per the contract).
        unsafe {
            e.write(Shadow {
                ret: *slot,
                slot,
                func: self_pc,
                spare: 0,
            });
            tls.shadow_top += SH_BYTES;
            *slot = arch::exit_trampoline();
        }
    }
}

/// A tail call: the function that owned this very slot jumped to the one being entered,
/// leaving the exit trampoline in it. That function is done (its exit, now); the one entered
/// returns where it would have returned, so its caller is the real one: the original return
/// address goes back.
///
/// # Safety
/// `slot` is the return slot of the function being entered.
unsafe fn tail_called(tls: &mut Tls, block: &ThreadBlock, slot: *mut usize, ts: u64) {
    if let Some(top) = shadow_entries(tls).last()
        && top.slot == slot
        // SAFETY: per the contract.
        && unsafe { *slot } == arch::exit_trampoline()
    {
        let (ret, func) = (top.ret, top.func);
        pop(tls);
        event(tls, block, EV_EXIT, func, ts);
        // SAFETY: as above.
        unsafe { *slot = ret };
    }
}

/// The exit trampoline's slow path: the newest shadow entry is not the returning frame's (its
/// newer ones were left behind by longjmp), or an unwinder ran, or there was no room for the
/// event. Closes what is gone, pops the returning frame's entry, writes its exit, and returns
/// its original return address.
///
/// `tls` is this thread's Tls and `slot` the returning function's return slot (its CFA - 8).
pub fn exit(tls: &mut Tls, slot: *mut usize) -> usize {
    let ts = arch::counter();
    let slot_addr = slot as usize;
    // A thread that has shadow entries has its block.
    let block = thread::block_of(tls);
    (tls.alt_lo, tls.alt_hi) = alt_stack();
    if let Some(block) = block {
        // An entry still being pushed above the returning frame's is stale: the code that
        // was pushing it is gone (a signal handler that interrupted it jumped out with
        // longjmp), since a frame below it returns.
        if tls.unwound == UNWOUND {
            after_unwinding(tls, block, slot_addr, false, ts);
        }
        loop {
            close_gone(tls, block, slot_addr, false, ts);
            match shadow_entries(tls).last() {
                Some(top)
                    if in_progress(top)
                        && shadow_entries(tls)
                            .iter()
                            .any(|e| e.slot as usize == slot_addr) =>
                {
                    let func = top.func;
                    pop(tls);
                    event(tls, block, EV_UNWOUND, func, ts);
                }
                _ => break,
            }
        }
    }
    // The returning frame's entry: the newest, or one below newer entries of frames on other
    // stacks (coroutines), which stay.
    let Some(at) = shadow_entries(tls)
        .iter()
        .rposition(|e| e.slot as usize == slot_addr)
    else {
        message!("trace mode lost track of a return address; aborting");
        // SAFETY: abort has no preconditions; there is nowhere to return to.
        unsafe { libc::abort() }
    };
    let (ret, func) = {
        let e = &shadow_entries(tls)[at];
        (e.ret, e.func)
    };
    if let Some(block) = block {
        // Newer entries of frames on this frame's stack below it are gone (closed now); the
        // others are alive elsewhere. One being pushed (a handler interrupted its push) is
        // left alone: that code goes on.
        let newer = shadow_entries(tls).len() - at - 1;
        for i in (0..newer).rev() {
            let e = &shadow_entries(tls)[at + 1 + i];
            let (s, f) = (e.slot as usize, e.func);
            if live(e) && dead(tls, s, slot_addr, false) {
                let e = &mut shadow_entries(tls)[at + 1 + i];
                e.slot = ptr::without_provenance_mut(TOMBSTONE);
                e.spare = 0;
                event(tls, block, EV_UNWOUND, f, ts);
            }
        }
        if abi::recording() {
            event(tls, block, EV_EXIT, func, ts);
        }
    }
    {
        let e = &mut shadow_entries(tls)[at];
        e.slot = ptr::without_provenance_mut(TOMBSTONE);
        e.spare = 0;
    }
    while shadow_entries(tls).last().is_some_and(tombstone) {
        pop(tls);
    }
    ret
}

/// An XRay entry the fast path could not take: no chunk yet (or a full one), a full shadow
/// stack, frames to close first.
/// `no_exit`: the function has no exit sled (its entry is recorded without exit).
pub fn xray_entry(
    tls: &mut Tls,
    block: &ThreadBlock,
    slot: usize,
    func: usize,
    no_exit: bool,
    ts: u64,
) {
    if !active() {
        return;
    }
    if tls.unwound == UNWOUND {
        after_unwinding(tls, block, slot, false, ts);
    }
    (tls.alt_lo, tls.alt_hi) = alt_stack();
    // Frames at or below this one's slot are gone (longjmp; a tail call without a tail sled).
    close_gone(tls, block, slot, true, ts);
    let ts = if tls.trace_end == 0 && refill(tls, block, func, 0) {
        arch::counter()
    } else {
        ts
    };
    let room = tls.shadow_end != 0 && tls.shadow_top + SH_BYTES <= tls.shadow_end;
    if !room && DROP_DEEP.load(Ordering::Relaxed) {
        tls.dropped += 1;
        return;
    }
    if !room || no_exit || abi::mode() == Mode::TraceEntries {
        NOEXIT.fetch_add(1, Ordering::Relaxed);
        tls.entry_only += 1;
        event(tls, block, EV_NOEXIT, func, ts);
        return;
    }
    event(tls, block, EV_ENTRY, func, ts);
    let e = tls.shadow_top as *mut Shadow;
    // SAFETY: room checked above.
    unsafe {
        e.write(Shadow {
            ret: 0,
            slot: ptr::without_provenance_mut(slot),
            func,
            spare: 0,
        });
    }
    tls.shadow_top += SH_BYTES;
}

/// An XRay exit (or tail call) the fast path could not take: the newest shadow entry is not
/// the returning frame's (frames left behind by longjmp or an unwinder above it; or it has
/// none: entered before its sleds were patched, or while recording was off, or its entry was
/// recorded without exit), or no room for the event. A function without entry sled
/// (`exits_only`, rustc `skip-entry`) has its exit recorded alone.
pub fn xray_exit(
    tls: &mut Tls,
    block: &ThreadBlock,
    slot: usize,
    func: usize,
    exits_only: bool,
    ts: u64,
) {
    let recording = abi::recording() && active();
    if tls.unwound == UNWOUND {
        after_unwinding(tls, block, slot, false, ts);
    }
    (tls.alt_lo, tls.alt_hi) = alt_stack();
    close_gone(tls, block, slot, false, ts);
    let Some(at) = shadow_entries(tls)
        .iter()
        .rposition(|e| e.slot as usize == slot)
    else {
        if exits_only && recording {
            event(tls, block, EV_EXIT, func, ts);
        }
        return;
    };
    let f = shadow_entries(tls)[at].func;
    // Newer entries of frames on this frame's stack below it are gone; the others (other
    // stacks) stay, above a tombstone.
    let newer = shadow_entries(tls).len() - at - 1;
    for i in (0..newer).rev() {
        let e = &shadow_entries(tls)[at + 1 + i];
        let (s, g) = (e.slot as usize, e.func);
        if live(e) && dead(tls, s, slot, false) {
            let e = &mut shadow_entries(tls)[at + 1 + i];
            e.slot = ptr::without_provenance_mut(TOMBSTONE);
            event(tls, block, EV_UNWOUND, g, ts);
        }
    }
    // Its entry was recorded: so is its exit, recording on or off (a call that straddles a
    // stop with the sleds left patched, INSTRFN_XRAY_STOP=pause, ends as it began).
    if active() {
        event(tls, block, EV_EXIT, f, ts);
    }
    shadow_entries(tls)[at].slot = ptr::without_provenance_mut(TOMBSTONE);
    while shadow_entries(tls).last().is_some_and(tombstone) {
        pop(tls);
    }
}

/// An entry of gcc's return route (`__fentry__` of code that calls `__return__`) the fast path
/// could not take: as an XRay entry ([`xray_entry`], nothing replaced), after the repair of a
/// tail call from a function whose return address was replaced.
///
/// # Safety
/// `slot` is the entered function's return slot.
#[cfg(all(instrfn_arch, target_arch = "x86_64"))]
pub unsafe fn return_entry(tls: &mut Tls, block: &ThreadBlock, slot: usize, func: usize, ts: u64) {
    if !active() {
        return;
    }
    if tls.unwound == UNWOUND {
        after_unwinding(tls, block, slot, false, ts);
    }
    // SAFETY: per the contract.
    unsafe { tail_called(tls, block, slot as *mut usize, ts) };
    xray_entry(tls, block, slot, func, false, ts);
}

/// `__return__` where the fast path could not pair it (frames to close first, no entry of this
/// frame on top, no room): as an XRay exit ([`xray_exit`]). A frame whose return address was
/// replaced (entered before its object was known to call `__return__`) gets the original back,
/// so that its `ret` goes straight to its caller, and its object is on the route from now on.
/// The thread's own stack bounds are then known for the fast path.
///
/// # Safety
/// `slot` is the returning function's return slot.
#[cfg(all(instrfn_arch, target_arch = "x86_64"))]
pub unsafe fn return_exit(tls: &mut Tls, block: &ThreadBlock, slot: usize, ts: u64) {
    let replaced = shadow_entries(tls)
        .iter()
        .rev()
        .find(|e| e.slot as usize == slot)
        .map(|e| (e.ret, e.func));
    xray_exit(tls, block, slot, 0, false, ts);
    if let Some((ret, func)) = replaced
        && ret != 0
    {
        let slot = slot as *mut usize;
        // SAFETY: per the contract; the trampoline there is this frame's (after_unwinding put
        // it back if an unwinder had taken it out).
        unsafe {
            if *slot == arch::exit_trampoline() {
                *slot = ret;
            }
        }
        super::returns::learned(func);
    }
    know_own_stack(tls);
}
