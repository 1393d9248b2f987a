//! The slow paths the assembly calls by symbol, with the guard held, every signal blocked and
//! every register of the instrumented code saved: the runtime is started and the thread's
//! block claimed here (the first call of a thread comes here), then the output records the
//! call. Each keeps the program's errno. aarch64 and riscv64 add routes of their own
//! (aarch64.rs, riscv64.rs): decisions about call sites first, then these.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "riscv64")]
mod riscv64;

use super::{ready_block, runtime};
use crate::abi::Tls;
use crate::{arch, gmon, sys, thread, trace, xray};

/// Runs `f` and gives the program its errno back.
fn keeping_errno<R>(f: impl FnOnce() -> R) -> R {
    let saved = sys::errno();
    let r = f();
    sys::set_errno(saved);
    r
}

/// The slow path of gmon mode: the runtime has not started, the thread has no table yet, or
/// its table is half full and must grow (the trampolines insert other new arcs themselves).
///
/// # Safety
/// Only the trampolines call this, with `tls` = this thread's Tls block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_slow_path(tls: *mut Tls, from_pc: usize, self_pc: usize) {
    keeping_errno(|| {
        gmon::SLOW_PATHS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        // SAFETY: per the contract, this thread's block, used by this thread only.
        let tls = unsafe { &mut *tls };
        if let Some(block) = ready_block(tls) {
            gmon::record(tls, block, from_pc, self_pc, runtime().config.max_arcs);
        }
    })
}

/// The slow path of a trace-mode counting call (crate::trace::slow::call). `slot` is the
/// return slot of an mcount/fentry call (its return address is replaced), 0 for
/// `__cyg_profile_func_enter`, 1 for `..._exit`.
///
/// # Safety
/// Only the trampolines call this, with `tls` = this thread's Tls block and `slot` (when above
/// 1) the instrumented function's return slot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_trace_slow(tls: *mut Tls, slot: *mut usize, self_pc: usize) {
    keeping_errno(|| {
        // SAFETY: per the contract, this thread's Tls block.
        let tls = unsafe { &mut *tls };
        if let Some(block) = ready_block(tls) {
            // SAFETY: per the contract.
            unsafe { trace::slow::call(tls, block, slot, self_pc) };
        }
    })
}

/// The exit trampoline's slow path (crate::trace::slow::exit): returns the original return
/// address.
///
/// # Safety
/// Only the exit trampoline calls this, with `tls` = this thread's Tls block and `slot` the
/// returning function's return slot (its CFA - 8).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_trace_exit_slow(tls: *mut Tls, slot: *mut usize) -> usize {
    // SAFETY: per the contract, this thread's Tls block.
    keeping_errno(|| trace::slow::exit(unsafe { &mut *tls }, slot))
}

/// The slow path of the XRay trampolines (src/arch/x86_64/xray.s, src/arch/aarch64/xray.s).
/// `slot_kind` identifies the instrumented function's frame (x86_64: its return slot, its
/// stack pointer at entry; aarch64: its stack pointer at the sled) with the sled's kind in its
/// low bits (0 entry, 1 exit, 2 tail call); `entry` is the function's entry of its object's
/// table (the address, `| EXITS_ONLY` for a function without entry sled, `| NO_EXIT` for one
/// without exit sled). Entries push a shadow entry without return address (`ret` 0: nothing is
/// ever replaced), exits pop it; frames left behind by longjmp or an unwinder are closed as
/// for mcount code. Returns 0 (aarch64's slow routine: return where the trampoline would
/// have).
///
/// # Safety
/// Only the XRay trampolines call this, with `tls` = this thread's Tls block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_xray_slow(tls: *mut Tls, slot_kind: usize, entry: usize) -> usize {
    keeping_errno(|| {
        // SAFETY: per the contract, this thread's Tls block.
        let tls = unsafe { &mut *tls };
        let (slot, kind) = (slot_kind & !7, slot_kind & 7);
        let func = entry & !(xray::EXITS_ONLY | xray::NO_EXIT);
        let ts = arch::counter();
        if kind == 0 {
            if let Some(block) = ready_block(tls) {
                let no_exit = entry & xray::NO_EXIT != 0;
                trace::slow::xray_entry(tls, block, slot, func, no_exit, ts);
            }
        } else {
            // (ready_block starts the runtime: the first event of a process can be an exit.)
            let block = ready_block(tls).or_else(|| thread::block_of(tls));
            if let Some(block) = block {
                let exits_only = entry & xray::EXITS_ONLY != 0;
                trace::slow::xray_exit(tls, block, slot, func, exits_only, ts);
            }
        }
        0
    })
}

/// The slow path of gcc's return route (src/arch/x86_64/return.s): `slot_kind` is the
/// instrumented function's return slot with its low bits 0 (its `__fentry__`, `func` its
/// address) or 1 (its `__return__`). Entries push a shadow entry without replacing the return
/// address, `__return__` pops it, as for XRay frames (crate::trace::slow `return_entry`,
/// `return_exit`).
///
/// # Safety
/// Only the return route's trampolines call this, with `tls` = this thread's Tls block and the
/// function's return slot.
#[cfg(all(instrfn_arch, target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_return_slow(tls: *mut Tls, slot_kind: usize, func: usize) {
    keeping_errno(|| {
        // SAFETY: per the contract, this thread's Tls block.
        let tls = unsafe { &mut *tls };
        let (slot, kind) = (slot_kind & !7, slot_kind & 7);
        let ts = arch::counter();
        if kind == 0 {
            if let Some(block) = ready_block(tls) {
                // SAFETY: per the contract.
                unsafe { trace::slow::return_entry(tls, block, slot, func, ts) };
            }
        } else if let Some(block) = ready_block(tls).or_else(|| thread::block_of(tls)) {
            // SAFETY: per the contract.
            unsafe { trace::slow::return_exit(tls, block, slot, ts) };
        }
    })
}
