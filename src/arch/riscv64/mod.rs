//! riscv64 (LP64D psABI): `call _mcount` after the prologue, so self_pc = ra; from_pc is in a0
//! (gcc's `mv a0, ra`, rustc) or only at -8(s0) (clang 14, which leaves an argument in a0).
//! Which one is decided once per call site (callers.rs) and kept in the thread's arc table as
//! a marker the fast path looks up. There is no `__fentry__` on riscv64. The routines, their
//! register contracts and the decision rule are in counting.s.
//! `__cyg_profile_func_enter/exit` (-finstrument-functions) pass (this_fn, call_site) in a0/a1.
//!
//! Trace mode replaces a function's return address only where the instructions from its entry
//! to its counting call prove where it saved ra (at CFA - 8): prologue.rs, decided once per
//! call site (slots.rs); elsewhere it records entries without exit.
//!
//! The naked stubs reach the assembly with a `jal` (`j`, +-1 MiB): the mcount stubs have no
//! register to spare for a longer jump (a0, s0 and ra carry the arguments and everything else
//! is preserved), and they are emitted in the same codegen unit, so the same object file, as
//! the assembly. The `guarded_entry!` stubs live in other modules and use an `auipc`/`jalr`
//! pair through t2, which reaches anywhere.

mod callers;
mod prologue;
mod slots;

use core::mem::{offset_of, size_of};

use crate::sys::maps::Mapping;
use crate::sys::raw::syscall;

pub use callers::{caller, mark};
pub use slots::trace_slot;

/// The FRAME marker of a site is the key `(self_pc + MARK_FRAME, self_pc)`: "from_pc is at
/// -8(s0)".
pub const MARK_FRAME: usize = 1;
/// The A0 marker of a site is the key `(self_pc + MARK_A0, self_pc)`: "from_pc is a0".
/// Both offsets are odd, so a marker's from_pc is never a pc (code is 2-byte aligned), and no
/// plausible argument either: clang's a0 is probed as a from_pc first, and a marker it found
/// would be counted as an arc (small constants such as 1 or 2 would be, all the time).
pub const MARK_A0: usize = 3;

/// This thread's stack as the slow path last found it (`instrfn_riscv64_stack`, TLS): the
/// mapping `[lo, hi)` that held sp, or zeros. The fast path loads -8(s0) only when sp and s0
/// lie in it.
#[repr(C)]
pub struct StackBounds {
    lo: usize,
    hi: usize,
}

trampoline_asm!(
    "base.s" + "events.s" + "counting.s" + "exit.s" + "guarded.s";
    MARK_FRAME = const MARK_FRAME,
    MARK_A0 = const MARK_A0,
    STK_LO = const offset_of!(StackBounds, lo),
    STK_HI = const offset_of!(StackBounds, hi),
    STK_SIZE = const size_of::<StackBounds>(),
    DEC_BITS = const callers::DECIDED_BITS,
    SITE_BITS = const slots::SITE_BITS,
    RULE_A0 = const slots::RULE_A0,
    RULE_FRAME = const slots::RULE_FRAME,
    RULE_NONE = const slots::RULE_NONE,
    // (Call words: MERGE_CALL subtracts the offset as such.)
    EV_CALL_FN_OFFSET = const crate::abi::format::EV_CALL_FN_OFFSET,
);

unsafe extern "C" {
    fn instrfn_riscv64_stack_get() -> *mut StackBounds;
}

/// `naked_asm!` as the assembly is written (default options).
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*) };
}

entry_point! {
    /// `mcount`: the name older rustc `-Zinstrument-mcount` emitted; same entry as `_mcount`.
    /// ABI here: ra = self_pc, from_pc in a0 or at -8(s0), every register preserved (see
    /// src/arch/riscv64/).
    mcount => "j instrfn_riscv64_mcount"
}
entry_point! {
    /// `_mcount`: called by `gcc -pg` code (`mv a0, ra; call _mcount`), clang `-pg` code (a
    /// bare `call _mcount`, the caller in the frame record) and rustc; glibc's only name on
    /// riscv64. ABI here: ra = self_pc, from_pc in a0 or at -8(s0), every register preserved.
    _mcount => "j instrfn_riscv64_mcount"
}
entry_point! {
    /// `__cyg_profile_func_enter(this_fn, call_site)`: called by `-finstrument-functions` code
    /// (gcc, clang) at every function's entry, as an ordinary call. ABI here: every register
    /// preserved (more than the ordinary call it is allows).
    __cyg_profile_func_enter => "j instrfn_riscv64_cyg_enter"
}
entry_point! {
    /// `__cyg_profile_func_exit(this_fn, call_site)`: before every return of such code.
    __cyg_profile_func_exit => "j instrfn_riscv64_cyg_exit"
}

/// The body of a naked function that continues at `$f` with every register but t1 (the
/// `tail` pseudo-instruction's scratch, caller-saved) as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "tail {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a naked function that asks `$route(a0, a1, a2, return address)` where to go (an
/// ordinary call), then continues at the function it returns with every argument register, the
/// stack and ra as the caller left them: the function it jumps to sees the original caller
/// (the dlopen wrappers, src/runtime/interpose.c). t1 carries the target.
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! routed_jump {
    ($route:path) => {
        naked!(
            ".cfi_startproc",
            "addi sp, sp, -32",
            ".cfi_def_cfa_offset 32",
            "sd ra, 24(sp)",
            ".cfi_offset ra, -8",
            "sd a0, 0(sp)",
            "sd a1, 8(sp)",
            "sd a2, 16(sp)",
            "mv a3, ra",
            "call {route}",
            "mv t1, a0",
            "ld a0, 0(sp)",
            "ld a1, 8(sp)",
            "ld a2, 16(sp)",
            "ld ra, 24(sp)",
            ".cfi_restore ra",
            "addi sp, sp, 32",
            ".cfi_def_cfa_offset 0",
            "jr t1",
            ".cfi_endproc",
            route = sym $route
        )
    };
}

/// The body of a `guarded_entry!`: t0 = `$inner`, then `instrfn_riscv64_guarded` through an
/// `auipc`/`jalr` pair (t2 is its scratch register), which reaches anywhere.
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "lla t0, {inner}",
            "2: auipc t2, %pcrel_hi(instrfn_riscv64_guarded)",
            "jalr zero, %pcrel_lo(2b)(t2)",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// A counting call as the slow path sees it: the instrumented code's a0, ra, s0 and sp.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Site {
    pub a0: usize,
    pub self_pc: usize,
    pub s0: usize,
    pub sp: usize,
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/riscv/include/uapi/asm/ucontext.h, sigcontext.h, ptrace.h):
/// uc_flags (8), uc_link (8), uc_stack (24: ss_sp, ss_flags + padding, ss_size), then
/// uc_sigmask (8) and __unused[1024 / 8 - 8] = 128 bytes in all, ending at 168; then
/// struct sigcontext, 16-byte aligned because its FP union holds the 16-byte aligned
/// __riscv_q_ext_state, so it starts at 176; its first member, user_regs_struct, starts with
/// pc. glibc's ucontext_t (128-byte sigset_t, no reserved bytes left, mcontext_t 16-aligned)
/// and musl's share this prefix, and so does qemu-user's frame.
pub const UC_PC_OFFSET: usize = 176;

/// This thread's cached stack bounds, `(lo, hi)`.
pub(crate) fn stack_bounds() -> (usize, usize) {
    // SAFETY: the getter only reads the thread pointer and a link-time constant; the bounds
    // are this thread's, written only by this thread.
    let b = unsafe { &*instrfn_riscv64_stack_get() };
    (b.lo, b.hi)
}

/// Caches `stack`, the mapping that holds sp, for the fast path; not while the thread runs on
/// its alternate signal stack, which the program may free and map anew, smaller, once the
/// handler is done (a thread's own stack lasts as long as the thread).
pub(crate) fn remember_stack(stack: &Mapping) {
    // SAFETY: a zeroed stack_t is a valid out-parameter; sigaltstack(NULL, &old) only reads
    // the thread's settings (raw system call: errno untouched).
    let on_altstack = unsafe {
        let mut old: libc::stack_t = core::mem::zeroed();
        syscall(
            libc::SYS_sigaltstack,
            [0, &raw mut old as usize, 0, 0, 0, 0],
        ) != 0
            || old.ss_flags & libc::SS_ONSTACK != 0
    };
    if on_altstack {
        return;
    }
    let (lo, hi) = stack.readable();
    // SAFETY: as in stack_bounds; the trampolines read the bounds only on this thread, and a
    // signal handler cannot run in between (signals are blocked on the slow path).
    let b = unsafe { &mut *instrfn_riscv64_stack_get() };
    b.lo = lo;
    b.hi = hi;
}

unsafe extern "C" {
    fn instrfn_riscv64_exit();
}

/// Trace mode has its trampolines here.
pub const TRACE_SUPPORTED: bool = true;
/// The trace clock (docs/trace-format.md): the `time` CSR, read by `rdtime`.
pub const CLOCK_NAME: &str = "time";

/// The trace clock now (what the fast paths store in an event).
#[inline]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: reads the time CSR; no memory is touched.
    unsafe { core::arch::asm!("rdtime {v}", v = out(reg) v, options(nomem, nostack)) };
    v
}

/// The address an instrumented function returns to in trace mode.
/// A second word that holds a replaced return address for a while (none here: see
/// src/arch/s390x/'s [`second_slot`](crate::arch::second_slot)).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

pub fn exit_trampoline() -> usize {
    instrfn_riscv64_exit as *const () as usize
}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (src/arch/riscv64/ `.Lexit_short`; the threshold is set by
/// [`set_min_ticks`](crate::abi::set_min_ticks)).
pub const MIN_DURATION_SUPPORTED: bool = true;

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit). Not an odd word, which is no return address
/// (code is 2-byte aligned): [`trace_slot`] gives a slot holding 1 for a call
/// whose return slot it cannot prove. Not the exit trampoline either.
pub fn replaceable(ret: usize) -> bool {
    ret.is_multiple_of(2) && ret != exit_trampoline()
}

/// After dlclose unloaded the code in [lo, hi): its call sites' rules are dropped (0: not
/// decided, the slow path decides again), so that code loaded there later is decoded afresh.
/// The entries keep their self_pc: removing them would break other sites' probe chains.
pub fn forget_sites(lo: usize, hi: usize) {
    slots::sites().forget(lo, hi);
}
