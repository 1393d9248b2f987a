//! riscv64's slow-path routes (from `instrfn_riscv64_slow`, src/arch/riscv64/counting.s): the
//! call site's decisions first (where the caller is, where the return slot is:
//! crate::arch::riscv64), then the common slow paths. Everything here is async-signal-safe: no
//! allocation, no lock, raw system calls only.

use super::{instrfn_slow_path, instrfn_trace_slow};
use crate::abi::Tls;
use crate::arch;

/// gmon mode: finds from_pc (from the site's marker, the decision some thread made, or a
/// decision of its own), records the call, then marks the site in the thread's table (once
/// the table exists, and unless it is full: then the next call comes here again).
///
/// # Safety
/// Only `instrfn_riscv64_slow` calls this, with the guard held and all signals blocked: `tls`
/// is this thread's Tls block, `a0`, `self_pc` (ra), `s0` and `sp` the instrumented code's at
/// its counting call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_slow_path(
    tls: *mut Tls,
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
) {
    // SAFETY: per the contract, this thread's Tls; its table is null or the current table of
    // this thread's block, which only this thread writes.
    let table = unsafe { (*tls).table.as_ref() };
    let (from_pc, to_mark) = arch::caller(table, a0, self_pc, s0, sp);
    // SAFETY: the contract of instrfn_slow_path is this function's own.
    unsafe { instrfn_slow_path(tls, from_pc, self_pc) };
    if let Some(caller) = to_mark {
        // SAFETY: as above; the slow path may have given the thread its first table or a
        // larger one.
        if let Some(table) = unsafe { (*tls).table.as_ref() } {
            arch::mark(table, self_pc, caller);
        }
    }
}

/// Trace mode's mcount call: the return slot from the site's rule (crate::arch::trace_slot),
/// then the trace slow path.
///
/// # Safety
/// Only `instrfn_riscv64_slow` calls this: `tls` is this thread's Tls block, `a0`, `self_pc`
/// (ra), `s0` and `sp` the instrumented code's at its counting call, `spare` a writable word
/// below `sp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_trace_path(
    tls: *mut Tls,
    a0: usize,
    self_pc: usize,
    s0: usize,
    sp: usize,
    _a1: usize,
    spare: *mut usize,
) {
    // SAFETY: per the contract.
    let slot = unsafe { arch::trace_slot(a0, self_pc, s0, sp, spare) };
    // SAFETY: this thread's block, and a return slot of the instrumented function (or a word
    // that holds no return address).
    unsafe { instrfn_trace_slow(tls, slot, self_pc) };
}

/// gmon mode's `__cyg_profile_func_enter`: the arc (call_site, this_fn).
///
/// # Safety
/// Only `instrfn_riscv64_slow` calls this, with `tls` = this thread's Tls block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_cyg_gmon(
    tls: *mut Tls,
    this_fn: usize,
    _ra: usize,
    _s0: usize,
    _sp: usize,
    call_site: usize,
) {
    // SAFETY: the contract of instrfn_slow_path is this function's own.
    unsafe { instrfn_slow_path(tls, call_site, this_fn) };
}

/// Trace mode's `__cyg_profile_func_enter`: an entry event of `this_fn`.
///
/// # Safety
/// As [`instrfn_riscv64_cyg_gmon`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_cyg_trace_enter(tls: *mut Tls, this_fn: usize) {
    // SAFETY: slot 0: an entry of a __cyg_profile call, nothing replaced.
    unsafe { instrfn_trace_slow(tls, core::ptr::null_mut(), this_fn) };
}

/// Trace mode's `__cyg_profile_func_exit`: an exit event of `this_fn`.
///
/// # Safety
/// As [`instrfn_riscv64_cyg_gmon`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn instrfn_riscv64_cyg_trace_exit(tls: *mut Tls, this_fn: usize) {
    // SAFETY: slot 1 marks the exit of a __cyg_profile call.
    unsafe { instrfn_trace_slow(tls, core::ptr::without_provenance_mut(1), this_fn) };
}
