//! s390x (z/Architecture ELF ABI): `_mcount`/`mcount` before the prologue (self_pc = %r14,
//! from_pc stored at `8(%r15)`) and `__fentry__` as the first instruction (self_pc = %r0,
//! from_pc = %r14, return through %r1), and the `__cyg_profile_func_enter/exit` functions of
//! `-finstrument-functions` code. The routines and their register contracts are in
//! `src/arch/s390x/`, which also says how trace mode finds a frame's return address (its slot,
//! entry `%r15 + 112`, for both kinds).

trampoline_asm!("base.s" + "events.s" + "counting.s" + "exit.s" + "guarded.s";
    SH_SPARE = const crate::abi::shadow::SH_SPARE,
    EV_NOEXIT = const crate::abi::format::EV_NOEXIT,
    // (Call words: S390_MERGE subtracts the offset as such.)
    EV_CALL_FN_OFFSET = const crate::abi::format::EV_CALL_FN_OFFSET,
);

/// `naked_asm!` as the assembly is written (default options).
macro_rules! naked {
    ($($t:tt)*) => { core::arch::naked_asm!($($t)*) };
}

entry_point! {
    /// `mcount`: called by rustc `-Zinstrument-mcount` (LLVM) code before the prologue, after
    /// `stg %r14,8(%r15)`. ABI here: every register but %r0 and %r1 preserved (LLVM assumes the
    /// AnyReg mask: r2-r15, f0-f15, v0-v31); see `FAST_PATH` in src/arch/s390x/.
    mcount => "jg instrfn_s390x_mcount"
}
entry_point! {
    /// `_mcount`: the name `gcc -pg` calls, same sequence and ABI as `mcount`.
    _mcount => "jg instrfn_s390x_mcount"
}
entry_point! {
    /// `__fentry__`: `brasl %r0,__fentry__` as the first instruction (`gcc -pg -mfentry`).
    /// ABI here: every register but %r0 and %r1 preserved, %r14 included; returns through
    /// %r1, so the unwinder finds the return address in %r0.
    __fentry__ => ".cfi_return_column %r0", "jg instrfn_s390x_fentry"
}
entry_point! {
    /// `__cyg_profile_func_enter(this_fn, call_site)`: called by `-finstrument-functions` code
    /// (gcc, clang) after every function's prologue, as an ordinary call. ABI here: every
    /// register but %r0 and %r1 preserved (more than the ordinary call it is allows).
    __cyg_profile_func_enter => "jg instrfn_s390x_cyg_enter"
}
entry_point! {
    /// `__cyg_profile_func_exit(this_fn, call_site)`: before every return of such code.
    __cyg_profile_func_exit => "jg instrfn_s390x_cyg_exit"
}

/// The body of a naked function that continues at `$f` with every register as it came.
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! tail_call {
    ($f:path) => {
        naked!(".cfi_startproc", "jg {f}", ".cfi_endproc", f = sym $f)
    };
}

/// The body of a naked function that asks `$route(r2, r3, r4, return address)` where to go (an
/// ordinary call, on a frame of its own: the ABI's 160-byte save area, then r2-r4), then
/// continues at the function it returns (through %r1) with every argument register, the stack
/// and %r14 as the caller left them: the function it jumps to sees the original caller (the
/// dlopen wrappers, src/runtime/interpose.c). %r14 and %r15 go to the caller's save area meanwhile.
#[allow(unused_macros)] // only glibc targets have wrappers (src/runtime/interpose.rs)
macro_rules! routed_jump {
    ($route:path) => {
        naked!(
            ".cfi_startproc",
            "stmg %r14, %r15, 112(%r15)",
            ".cfi_offset %r14, -48",
            ".cfi_offset %r15, -40",
            "lgr %r1, %r15",
            "aghi %r15, -184",
            ".cfi_adjust_cfa_offset 184",
            "stg %r1, 0(%r15)",
            "stmg %r2, %r4, 160(%r15)",
            "lgr %r5, %r14",
            "brasl %r14, {route}",
            "lgr %r1, %r2",
            "lmg %r2, %r4, 160(%r15)",
            "lmg %r14, %r15, 184+112(%r15)",
            ".cfi_restore %r14",
            ".cfi_restore %r15",
            ".cfi_adjust_cfa_offset -184",
            "br %r1",
            ".cfi_endproc",
            route = sym $route
        )
    };
}

/// The body of a `guarded_entry!`: %r1 = `$inner` (the ABI lets a call clobber it, and it
/// carries no argument), then `instrfn_s390x_guarded`.
macro_rules! guarded_jump {
    ($inner:path) => {
        naked!(
            ".cfi_startproc",
            "larl %r1, {inner}",
            "jg instrfn_s390x_guarded",
            ".cfi_endproc",
            inner = sym $inner
        )
    };
}

/// Offset of the interrupted pc in the ucontext a signal handler gets.
/// Kernel layout (arch/s390/include/uapi/asm/ucontext.h, sigcontext.h): uc_flags, uc_link,
/// uc_stack (ss_sp, ss_flags padded to 8, ss_size: 24 bytes), then _sigregs, which starts
/// with the PSW {mask, addr} (8-byte aligned): the pc is the PSW address at 40 + 8 = 48.
/// glibc's and musl's ucontext_t (uc_mcontext.psw.addr) share this prefix.
pub const UC_PC_OFFSET: usize = 48;

/// Trace mode has its trampolines here.
pub const TRACE_SUPPORTED: bool = true;
/// The trace clock (docs/trace-format.md): the TOD clock.
pub const CLOCK_NAME: &str = "stckf";

/// The trace clock now: the TOD clock (`stckf`, bit 51 = 1 µs, so 4096 ticks per µs), what
/// the fast paths store in an event.
#[inline]
pub fn counter() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: stckf stores the TOD clock in the doubleword given (and sets the condition
    // code, which asm! assumes clobbered unless told otherwise).
    unsafe { core::arch::asm!("stckf 0({p})", p = in(reg_addr) &mut v, options(nostack)) };
    v
}

unsafe extern "C" {
    fn instrfn_s390x_exit();
}

/// A second word that holds a replaced return address for a while: for mcount code, whose
/// slot is the function's r14 save slot 112(%r15), the word 8(%r15) its `-pg` sequence reloads
/// r14 from right after `_mcount` returns (gcc `stg %r14,8(%r15); brasl %r14,_mcount; lg
/// %r14,8(%r15)`), where the entry trampoline put the exit trampoline's address: until the
/// reload, an unwinder reads the return address there (the function's CFI says so). The walk
/// wrappers put the original back there too when it holds the trampoline (src/trace/
/// `restore_return_addresses`), and the trampoline back after the walk if they did. For fentry
/// code, and mcount code after the reload, the word is no longer read: writing it is harmless.
pub fn second_slot(slot: usize) -> Option<usize> {
    Some(slot - 104)
}

/// The address an instrumented function returns to in trace mode.
pub fn exit_trampoline() -> usize {
    instrfn_s390x_exit as *const () as usize
}

/// After dlclose unloaded the code in [lo, hi): decisions cached per call site there are
/// dropped (this architecture caches none).
pub fn forget_sites(_lo: usize, _hi: usize) {}

/// Whether the exit trampoline takes back the entries of calls shorter than
/// INSTRFN_MIN_DURATION (src/arch/s390x/ `.Lexit_short`; the threshold is set by
/// [`set_min_ticks`](crate::abi::set_min_ticks)).
pub const MIN_DURATION_SUPPORTED: bool = true;

/// Whether trace mode may replace the return address `ret` with the exit trampoline (else the
/// call is recorded as an entry without exit). Any address can be replaced (the slot is a
/// doubleword of the frame's save area, or r14) but 0: what the slow path shows for mcount
/// code that keeps no return address at 8(%r15) (clang 14, see src/arch/s390x/), and for mcount
/// code in mode 2 (INSTRFN_EXITS=off) when it finds no room in its chunk.
pub fn replaceable(ret: usize) -> bool {
    ret != 0
}
