//! x86_64 (System V ABI): `mcount`/`_mcount` after the prologue (from_pc at `8(%rbp)`) and
//! `__fentry__` before it (from_pc at `8(%rsp)`), and gcc's `__return__`
//! (`-minstrument-return=call`) before each return. The routines and their register contracts
//! are in `src/arch/x86_64/`.

pub mod return_route;
pub mod sled;

// The trampolines, then the XRay trampolines (src/xray/ patches sleds to reach them) and gcc's
// return route, as one block: src/arch/x86_64/xray.s and return.s use src/arch/x86_64/'s trace
// macros (SCRATCH_SAVE, SCRATCH_RESTORE, TIMESTAMP, MERGE_CALL, TRACE_EVENT, SHADOW_RESERVE,
// SHADOW_RELEASE, SHADOW_POP) and this one operand list.
trampoline_asm!("base.s" + "events.s" + "counting.s" + "exit.s" + "guarded.s" + "xray.s" + "return.s", att_syntax;
    EV_NOEXIT = const crate::abi::format::EV_NOEXIT,
    // (Call words: x86_64, riscv64 and s390x subtract the offset as such.)
    EV_CALL_FN_OFFSET = const crate::abi::format::EV_CALL_FN_OFFSET,
    // The return route (return.s): the thread's stack bounds, the code ranges' table.
    TLS_STACK_LO = const core::mem::offset_of!(crate::abi::Tls, stack_lo),
    TLS_STACK_HI = const core::mem::offset_of!(crate::abi::Tls, stack_hi),
    TLS_ALT_LO = const core::mem::offset_of!(crate::abi::Tls, alt_lo),
    TLS_ALT_HI = const core::mem::offset_of!(crate::abi::Tls, alt_hi),
    RETURN_RANGES = const return_route::RANGES,
);

/// `naked_asm!` in AT&T syntax, like src/arch/x86_64/.
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*, options(att_syntax)) };
}

entry_point! {
    /// `mcount`: called by `gcc -pg` and rustc `-Zinstrument-mcount` code after the prologue.
    /// ABI here: every register preserved (see `FAST_PATH` in src/arch/x86_64/).
    mcount => "jmp instrfn_x86_64_mcount"
}
entry_point! {
    /// `_mcount`: glibc's name for the same entry.
    _mcount => "jmp instrfn_x86_64_mcount"
}
entry_point! {
    /// `__fentry__`: called as the first instruction by `gcc -pg -mfentry` code.
    /// ABI here: every register preserved.
    __fentry__ => "jmp instrfn_x86_64_fentry"
}
entry_point! {
    /// `__return__`: called before each `ret` and each tail-call `jmp` by `gcc -pg -mfentry
    /// -minstrument-return=call` code. ABI here: every register preserved but the flags. Modes
    /// 0 (gmon) and 2 (entries only) return at once; 1 and 3 (odd) record the exit
    /// (src/arch/x86_64/return.s). `instrfn_x86_64_return_entry` is the same address, hidden:
    /// how the runtime names its own `__return__`, which a program's definition may interpose.
    __return__ => ".globl instrfn_x86_64_return_entry", ".hidden instrfn_x86_64_return_entry",
        "instrfn_x86_64_return_entry:",
        "testb $1, instrfn_mode(%rip)", "jnz instrfn_x86_64_return", "ret"
}
entry_point! {
    /// `__cyg_profile_func_enter(this_fn, call_site)`: called by `-finstrument-functions` code
    /// (gcc, clang) at every function's entry. ABI here: every register preserved (more than
    /// the ordinary call it is allows).
    __cyg_profile_func_enter => "jmp instrfn_x86_64_cyg_enter"
}
entry_point! {
    /// `__cyg_profile_func_exit(this_fn, call_site)`: before every return of such code.
    __cyg_profile_func_exit => "jmp instrfn_x86_64_cyg_exit"
}

/// Trace mode has its trampolines here.
pub const TRACE_SUPPORTED: bool = true;
/// The trace clock (docs/trace-format.md): the time-stamp counter, read by `rdtsc`.
pub const CLOCK_NAME: &str = "tsc";

/// The trace clock now (what the fast paths store in an event).
#[inline]
pub fn counter() -> u64 {
    // SAFETY: rdtsc reads the time-stamp counter; no memory is touched.
    unsafe { core::arch::x86_64::_rdtsc() }
}

unsafe extern "C" {
    fn instrfn_x86_64_exit();
}

/// A second word that holds a replaced return address for a while (none here: see
/// src/arch/s390x/'s [`second_slot`](crate::arch::second_slot)).
pub fn second_slot(_slot: usize) -> Option<usize> {
    None
}

/// The address an instrumented function returns to in trace mode.
pub fn exit_trampoline() -> usize {
    instrfn_x86_64_exit as *const () as usize
}

/// The body of a naked function that continues at `$f` with every register as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "jmp {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a naked function that asks `$route(a0, a1, a2, return address)` where to go
/// (an ordinary call, the caller's first three argument registers passed on as they came), then
/// continues at the function it returns with every argument register, the stack and the return
/// address as the caller left them: the function it jumps to sees the original caller, as if
/// called from there (the dlopen wrappers, src/runtime/interpose.c).
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! routed_jump {
    ($route:path) => {
        naked!(
            ".cfi_startproc",
            "pushq %rdi",
            ".cfi_adjust_cfa_offset 8",
            "pushq %rsi",
            ".cfi_adjust_cfa_offset 8",
            "pushq %rdx",
            ".cfi_adjust_cfa_offset 8",
            "movq 24(%rsp), %rcx",
            "call {route}",
            "popq %rdx",
            ".cfi_adjust_cfa_offset -8",
            "popq %rsi",
            ".cfi_adjust_cfa_offset -8",
            "popq %rdi",
            ".cfi_adjust_cfa_offset -8",
            "jmp *%rax",
            ".cfi_endproc",
            route = sym $route
        )
    };
}

/// The body of a `guarded_entry!`: %rax = `$inner`, then `instrfn_x86_64_guarded`.
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "leaq {inner}(%rip), %rax",
            "jmp instrfn_x86_64_guarded",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/x86/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags, uc_link,
/// uc_stack (24 bytes), then struct sigcontext, whose 17th word is rip: 40 + 16 * 8 = 168.
/// glibc's and musl's ucontext_t share this prefix.
pub const UC_PC_OFFSET: usize = 168;

/// After dlclose unloaded the code in [lo, hi): decisions cached per call site there are
/// dropped (this architecture caches none).
pub fn forget_sites(_lo: usize, _hi: usize) {}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (src/arch/x86_64/ `.Lexit_short`; the threshold is set by
/// [`set_min_ticks`](crate::abi::set_min_ticks)).
pub const MIN_DURATION_SUPPORTED: bool = true;

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit).
pub fn replaceable(_ret: usize) -> bool {
    true
}
